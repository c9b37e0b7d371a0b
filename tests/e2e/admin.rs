//! The admin port as shipped (`--admin-auth kube`) on a real API server: `/metrics` and
//! `/decisions` answer only a token the API server accepts, of a ServiceAccount bound to
//! the shipped reader ClusterRole of that path; the probes stay open.

use std::time::Duration;

use coloc_testbed::prepared::repo;
use coloc_testbed::Binaries;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::bed::EXTENDER;
use crate::{Bed, Case, Mode};

pub fn cases() -> Vec<Case> {
    vec![Case {
        name: "admin_port_answers_only_tokens_bound_to_the_shipped_reader_role_of_each_path",
        run: |b, m| Box::pin(readers(b, m)),
    }]
}

const NAMESPACE: &str = "online";

/// One GET on the plain-HTTP admin port: (status, body).
async fn get(port: u16, path: &str, token: Option<&str>) -> anyhow::Result<(u16, String)> {
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    conn.write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Connection: close\r\n\r\n").as_bytes())
        .await?;
    let mut reply = String::new();
    conn.read_to_string(&mut reply).await?;
    let status = reply.get(9..12).and_then(|s| s.parse().ok()).ok_or_else(|| anyhow::anyhow!("no status: {reply}"))?;
    let body = reply.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((status, body))
}

/// A ServiceAccount of NAMESPACE bound to `role` (none: bound to nothing), and a token of
/// it from the TokenRequest API.
fn account(bed: &Bed, name: &str, role: Option<&str>) -> anyhow::Result<String> {
    bed.plane.kubectl(&["-n", NAMESPACE, "create", "serviceaccount", name])?;
    if let Some(role) = role {
        let subject = format!("{NAMESPACE}:{name}");
        bed.plane.kubectl(&[
            "create",
            "clusterrolebinding",
            name,
            "--clusterrole",
            role,
            "--serviceaccount",
            &subject,
        ])?;
    }
    Ok(bed.plane.kubectl(&["-n", NAMESPACE, "create", "token", name, "--duration", "1h"])?.trim().to_string())
}

/// Waits until RBAC has the grant (the API server's authorizer follows bindings through a
/// watch): a refusal is kept 5 s by the extender, so the case asks only once it holds.
async fn until_granted(bed: &Bed, name: &str, path: &str) -> anyhow::Result<()> {
    let user = format!("system:serviceaccount:{NAMESPACE}:{name}");
    coloc_testbed::wait::until(Duration::from_secs(30), &format!("{user} may get {path}"), || async {
        match bed.plane.kubectl(&["auth", "can-i", "get", path, "--as", &user]) {
            Ok(yes) if yes.trim() == "yes" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

async fn readers(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    bed.plane.apply(&repo("manifests/clusterrole-diagnosis.yaml"))?;
    let scraper = account(&bed, "scraper", Some("coloc-extender-metrics-reader"))?;
    let explainer = account(&bed, "explainer", Some("coloc-extender-decisions-reader"))?;
    let stranger = account(&bed, "stranger", None)?;
    until_granted(&bed, "scraper", "/metrics").await?;
    until_granted(&bed, "explainer", "/decisions").await?;
    // The replicas' own identity reviews tokens and access: the base ClusterRole
    // (applied by the bed) must be all it needs.
    let e = bed.extender(&["--admin-auth", "kube"]).await?;
    let port = bed.extenders[e].admin_port;
    let decisions = "/decisions?pod=online/web-0";

    let expect = |what: &str, got: (u16, String), status: u16, code: &str| -> anyhow::Result<String> {
        anyhow::ensure!(
            got.0 == status && (code.is_empty() || got.1.contains(&format!("\"code\":\"{code}\""))),
            "{what}: expected {status} {code}, got {} {}",
            got.0,
            got.1
        );
        Ok(got.1)
    };
    for path in ["/metrics", decisions] {
        expect(&format!("{path} without a token"), get(port, path, None).await?, 401, "unauthenticated")?;
        expect(
            &format!("{path} with a made-up token"),
            get(port, path, Some("made-up")).await?,
            401,
            "unauthenticated",
        )?;
        let refused =
            expect(&format!("{path} as stranger"), get(port, path, Some(&stranger)).await?, 403, "forbidden")?;
        anyhow::ensure!(refused.contains("system:serviceaccount:online:stranger may not GET"), "{refused}");
    }
    let metrics = expect("/metrics as scraper", get(port, "/metrics", Some(&scraper)).await?, 200, "")?;
    anyhow::ensure!(metrics.contains("coloc_build_info"), "{metrics}");
    anyhow::ensure!(
        metrics.contains(r#"coloc_admin_requests_total{path="/metrics",outcome="forbidden"}"#),
        "refusals are counted:\n{metrics}"
    );
    // Each role grants its own path only.
    expect("/decisions as scraper", get(port, decisions, Some(&scraper)).await?, 403, "forbidden")?;
    expect("/metrics as explainer", get(port, "/metrics", Some(&explainer)).await?, 403, "forbidden")?;
    let answer = expect("/decisions as explainer", get(port, decisions, Some(&explainer)).await?, 200, "")?;
    anyhow::ensure!(answer.contains("\"pod\":\"online/web-0\""), "{answer}");

    // explain, as docs/troubleshooting.md has it: a token file, or none and the hint.
    let token_file = bed.plane.dir().join("explainer.token");
    std::fs::write(&token_file, &explainer)?;
    let server = format!("http://127.0.0.1:{port}");
    let explain = |extra: &[&str]| {
        std::process::Command::new(EXTENDER)
            .args(["explain", "online/web-0", "--server", &server])
            .args(extra)
            .env_remove("COLOC_TOKEN")
            .output()
    };
    let out = explain(&["--token-file", &token_file.display().to_string()])?;
    let text = String::from_utf8_lossy(&out.stdout);
    anyhow::ensure!(
        out.status.success() && text.starts_with("no decisions about online/web-0"),
        "explain with the token: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = explain(&[])?;
    let err = String::from_utf8_lossy(&out.stderr);
    anyhow::ensure!(!out.status.success() && err.contains("401") && err.contains("--token-file"), "{err}");

    // The probes on the health port need nothing.
    bed.extenders[e].get("/healthz").await?;
    bed.extenders[e].get("/readyz").await?;
    bed.finish()
}
