//! `coloc-extender explain NAMESPACE/NAME`: the pod's recent decisions from a running
//! extender's admin port (`GET /decisions`), printed for a person. Behind
//! `--admin-auth kube` it sends a bearer token (`--token-file`, or `$COLOC_TOKEN`).

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context as _};
use axum::body::Body;
use hyper::Uri;
use hyper_util::rt::TokioIo;

use crate::http::decision_log::{parse_pod_key, PodDecisions};

/// The admin port (`serve --admin-listen`, 127.0.0.1:8082 by default), as
/// `kubectl port-forward` brings it to this machine.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:8082";

/// Where the token comes from when there is no `--token-file`.
pub const TOKEN_ENV: &str = "COLOC_TOKEN";

/// Fetches and renders; `Err` says what went wrong in words.
pub fn run(pod: &str, server: &str, token: Option<&str>) -> anyhow::Result<String> {
    parse_pod_key(pod).map_err(anyhow::Error::msg)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let decisions = runtime.block_on(fetch(server, pod, token))?;
    Ok(render(&decisions))
}

/// The bearer token to send: the file's (`--token-file`, as `kubectl create token` writes
/// it), else `$COLOC_TOKEN`'s, else none. Never a flag's value, which `ps` would show.
pub fn token(file: Option<&Path>) -> anyhow::Result<Option<String>> {
    if let Some(file) = file {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read the token file {} (--token-file)", file.display()))?;
        let token = text.trim();
        if token.is_empty() {
            bail!("the token file {} (--token-file) is empty", file.display());
        }
        return Ok(Some(token.to_string()));
    }
    Ok(std::env::var(TOKEN_ENV).ok().map(|t| t.trim().to_string()).filter(|t| !t.is_empty()))
}

async fn fetch(server: &str, pod: &str, token: Option<&str>) -> anyhow::Result<PodDecisions> {
    let base: Uri = server.parse().with_context(|| format!("--server {server:?} is not a URL"))?;
    if base.scheme_str() != Some("http") {
        bail!("--server {server:?}: only http:// (the plain admin port, --admin-listen) is supported");
    }
    let host = base.host().context("--server has no host")?.trim_start_matches('[').trim_end_matches(']').to_string();
    let port = base.port_u16().unwrap_or(80);
    let path = format!("{}/decisions?pod={pod}", base.path().trim_end_matches('/'));
    let work = async {
        let stream = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .with_context(|| format!("cannot connect to {server}"))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        let mut request = hyper::Request::get(path.as_str()).header(hyper::header::HOST, format!("{host}:{port}"));
        if let Some(token) = token {
            request = request.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request.body(Body::empty())?;
        let response = sender.send_request(request).await?;
        let status = response.status();
        let body = axum::body::to_bytes(Body::new(response.into_body()), 64 << 20).await?;
        if !status.is_success() {
            let hint = match (status.as_u16(), token) {
                (401, None) => format!(
                    " (the admin port wants a token: --token-file FILE or ${TOKEN_ENV}; docs/troubleshooting.md)"
                ),
                _ => String::new(),
            };
            bail!("{server} answered {status}: {}{hint}", String::from_utf8_lossy(&body).trim());
        }
        serde_json::from_slice::<PodDecisions>(&body)
            .with_context(|| format!("{server}/decisions answered something else than decisions"))
    };
    tokio::time::timeout(Duration::from_secs(10), work)
        .await
        .with_context(|| format!("{server} did not answer within 10 s"))?
}

/// Newest decision last, each reason on its own line.
pub fn render(d: &PodDecisions) -> String {
    let mut out = String::new();
    if d.decisions.is_empty() {
        let _ = writeln!(
            out,
            "no decisions about {} in the last {} kept (the extender has not been asked about it recently, or this replica was not the one asked)",
            d.pod, d.held
        );
        return out;
    }
    let _ = writeln!(out, "{}: {} decision(s)", d.pod, d.decisions.len());
    for dec in &d.decisions {
        let when =
            jiff::Timestamp::from_second(dec.time).map(|t| t.to_string()).unwrap_or_else(|_| dec.time.to_string());
        let shadow = if dec.mode == "shadow" { " [shadow: kube-scheduler's own answer was sent]" } else { "" };
        let _ = writeln!(out, "\n{when} {}{shadow}: {}", dec.verb, dec.summary);
        if !dec.diffs.is_empty() {
            let _ = writeln!(out, "  would have changed: {}", dec.diffs);
        }
        for r in &dec.reasons {
            let place = match (&r.node, &r.pod) {
                (Some(n), Some(p)) => format!("{n} {p}"),
                (Some(n), None) => n.clone(),
                _ => "-".into(),
            };
            let _ = writeln!(out, "  {:<10} {:<28} [{}] {}", r.verdict, place, r.code, r.detail);
        }
        if dec.routine > 0 || dec.truncated > 0 {
            let _ = writeln!(out, "  ({} routine line(s) not kept, {} cut for size)", dec.routine, dec.truncated);
        }
    }
    out
}
