//! The scheduler-to-extender hop over mutual TLS, as shipped: kube-scheduler presents a
//! client certificate from files (re-read at new handshakes) and trusts a CA file (read
//! once, at start); the extender re-reads its three files. Rotating the CA as
//! docs/deploy.md §4a says keeps every call going; done in the wrong order it shows in
//! `coloc_tls_handshake_failures_total`.

use std::path::{Path, PathBuf};

use coloc_testbed::cluster::{self, PodBuilder};
use coloc_testbed::scheduler::{ClientTls, ExtenderEntry};
use coloc_testbed::Binaries;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};

use crate::scenarios::MINUTE;
use crate::{Bed, Case, Mode};

pub fn cases() -> Vec<Case> {
    vec![Case {
        name: "tls_a_ca_rotation_as_documented_keeps_every_call_and_one_done_wrongly_shows_in_the_handshake_metric",
        run: |b, m| Box::pin(ca_rotation(b, m)),
    }]
}

type Ca = CertifiedIssuer<'static, KeyPair>;

/// The name the serving certificate carries and kube-scheduler checks.
const SERVER_NAME: &str = "coloc-extender";

fn ca(name: &str) -> anyhow::Result<Ca> {
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, name);
    Ok(CertifiedIssuer::self_signed(p, KeyPair::generate()?)?)
}

/// (certificate PEM, key PEM) signed by `ca`: a serving certificate for SERVER_NAME, or a
/// client certificate with common name `cn`.
fn leaf(ca: &Ca, cn: &str, client: bool) -> anyhow::Result<(String, String)> {
    let mut p = CertificateParams::new(vec![SERVER_NAME.to_string()])?;
    p.distinguished_name.push(DnType::CommonName, cn);
    p.extended_key_usages =
        vec![if client { ExtendedKeyUsagePurpose::ClientAuth } else { ExtendedKeyUsagePurpose::ServerAuth }];
    let key = KeyPair::generate()?;
    let cert = p.signed_by(&key, ca)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// The hop's files, each replaced whole (written aside, then renamed), as a Secret's
/// volume swaps them.
struct Files {
    dir: PathBuf,
}

impl Files {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn put(&self, name: &str, text: &str) -> anyhow::Result<()> {
        let aside = self.dir.join(format!(".{name}.new"));
        std::fs::write(&aside, text)?;
        std::fs::rename(&aside, self.path(name))?;
        Ok(())
    }

    fn pair(&self, base: &str, (cert, key): &(String, String)) -> anyhow::Result<()> {
        self.put(&format!("{base}.key"), key)?;
        self.put(&format!("{base}.crt"), cert)
    }
}

fn arg(p: &Path) -> String {
    p.display().to_string()
}

async fn metric(bed: &Bed, e: usize, name: &str, labels: &str) -> anyhow::Result<f64> {
    bed.extenders[e].metric_sum(name, labels).await
}

/// Waits until the extender has taken a change of its files (it looks every 5 s).
async fn until_reloaded(bed: &Bed, e: usize, before: f64) -> anyhow::Result<f64> {
    coloc_testbed::wait::until(MINUTE, "the extender reloaded its certificates", || async {
        let now = metric(bed, e, "coloc_tls_reloads_total", "result=\"ok\"").await.map_err(|e| e.to_string())?;
        (now > before).then_some(now).ok_or(format!("reloads {now}"))
    })
    .await
}

/// A new online pod is placed, and kube-scheduler asked the extender about it over TLS
/// (the registration is ignorable: a placement alone proves nothing).
async fn placed_through_the_extender(bed: &Bed, e: usize, n: usize, step: &str) -> anyhow::Result<()> {
    let before = metric(bed, e, "coloc_requests_total", "verb=\"filter\"").await?;
    let name = format!("web-{n}");
    cluster::create(&bed.client, PodBuilder::new("online", &name, "online-prod", 10).build()).await?;
    bed.until_pods("online", MINUTE, &format!("{name} placed ({step})"), |pods| {
        pods.iter()
            .find(|p| cluster::name(p) == name && cluster::node_of(p).is_some())
            .map(drop)
            .ok_or("pending".to_string())
    })
    .await?;
    let after = metric(bed, e, "coloc_requests_total", "verb=\"filter\"").await?;
    anyhow::ensure!(after > before, "{step}: kube-scheduler placed {name} without calling the extender");
    Ok(())
}

async fn handshake_failures(bed: &Bed, e: usize) -> anyhow::Result<f64> {
    metric(bed, e, "coloc_tls_handshake_failures_total", "").await
}

async fn ca_rotation(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    bed.nodes(&["node-1"], 64_000).await?;
    let files = Files { dir: bed.plane.dir().join("hop-tls") };
    std::fs::create_dir_all(&files.dir)?;
    let (old, new) = (ca("hop-ca-old")?, ca("hop-ca-new")?);
    // The extender: serving pair and the CA its clients must be signed by; kube-scheduler:
    // client pair and the CA the extender's certificate must be signed by.
    files.pair("serving", &leaf(&old, SERVER_NAME, false)?)?;
    files.put("clients-ca.crt", &old.pem())?;
    files.pair("client", &leaf(&old, "kube-scheduler-old", true)?)?;
    files.put("extender-ca.crt", &old.pem())?;
    let e = bed
        .extender(&[
            "--tls-cert",
            &arg(&files.path("serving.crt")),
            "--tls-key",
            &arg(&files.path("serving.key")),
            "--client-ca",
            &arg(&files.path("clients-ca.crt")),
        ])
        .await?;
    let entry = ExtenderEntry {
        url_prefix: format!("https://127.0.0.1:{}", bed.extenders[e].port),
        ignorable: true,
        tls: Some(ClientTls {
            cert_file: files.path("client.crt"),
            key_file: files.path("client.key"),
            ca_file: files.path("extender-ca.crt"),
            server_name: SERVER_NAME.into(),
        }),
        ..bed.entry(e)
    };
    bed.schedule_with(std::slice::from_ref(&entry)).await?;
    placed_through_the_extender(&bed, e, 0, "before the rotation").await?;
    let mut reloads = metric(&bed, e, "coloc_tls_reloads_total", "result=\"ok\"").await?;

    // 1. The extender trusts clients of both CAs.
    let both = format!("{}{}", old.pem(), new.pem());
    files.put("clients-ca.crt", &both)?;
    reloads = until_reloaded(&bed, e, reloads).await?;
    placed_through_the_extender(&bed, e, 1, "1. the extender trusts both CAs").await?;
    // 2. kube-scheduler trusts serving certificates of both, from its restart on.
    files.put("extender-ca.crt", &both)?;
    bed.schedule_with(std::slice::from_ref(&entry)).await?;
    placed_through_the_extender(&bed, e, 2, "2. kube-scheduler trusts both CAs").await?;
    // 3. Both certificates from the new CA: the extender's, then kube-scheduler's (taken
    // at its next handshake, no restart).
    files.pair("serving", &leaf(&new, SERVER_NAME, false)?)?;
    reloads = until_reloaded(&bed, e, reloads).await?;
    placed_through_the_extender(&bed, e, 3, "3. the new serving certificate").await?;
    files.pair("client", &leaf(&new, "kube-scheduler-new", true)?)?;
    placed_through_the_extender(&bed, e, 4, "3. the new client certificate").await?;
    // 4. The old CA dropped: the extender at once, kube-scheduler at a restart, whose new
    // connections present the new client certificate against the new CA alone.
    files.put("clients-ca.crt", &new.pem())?;
    reloads = until_reloaded(&bed, e, reloads).await?;
    files.put("extender-ca.crt", &new.pem())?;
    bed.schedule_with(std::slice::from_ref(&entry)).await?;
    placed_through_the_extender(&bed, e, 5, "4. the old CA dropped").await?;
    let seen =
        metric(&bed, e, "coloc_tls_client_cert_expiry_timestamp_seconds", "client=\"kube-scheduler-new\"").await?;
    anyhow::ensure!(seen > 0.0, "the extender never saw the new client certificate");
    let failed = handshake_failures(&bed, e).await?;
    anyhow::ensure!(failed == 0.0, "{failed} handshakes failed during a rotation done as documented");

    // Done wrongly: a serving certificate of a third CA before kube-scheduler trusts it.
    // Every new connection is refused by kube-scheduler, and the metric says whose side.
    let third = ca("hop-ca-third")?;
    files.pair("serving", &leaf(&third, SERVER_NAME, false)?)?;
    until_reloaded(&bed, e, reloads).await?;
    bed.schedule_with(std::slice::from_ref(&entry)).await?;
    cluster::create(&bed.client, PodBuilder::new("online", "web-6", "online-prod", 10).build()).await?;
    coloc_testbed::wait::until(MINUTE, "the refused handshakes counted", || async {
        let refused = metric(&bed, e, "coloc_tls_handshake_failures_total", "reason=\"rejected_by_client\"")
            .await
            .map_err(|e| e.to_string())?;
        (refused > 0.0).then_some(()).ok_or(format!("rejected_by_client {refused}"))
    })
    .await?;
    bed.finish()
}
