//! What `serve` and `requeue` both start beside their main work, each on a thread and
//! runtime of its own: the watches that feed the view, and the health and admin ports.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use super::args::AdminListen;
use crate::http::{self, state::AppState};

/// Who may read the admin port: whoever reaches it, or whom the API server this
/// configuration reaches allows (`--admin-auth kube`).
pub(super) enum AdminAccess {
    Open,
    Kube(Box<kube::Config>),
}

/// The admin routes, guarded with `--admin-auth kube`. Built on the admin thread: the
/// reviews' client runs there, so a scrape never waits on the verb threads.
fn admin_app(state: AppState, access: AdminAccess) -> anyhow::Result<axum::Router> {
    Ok(match access {
        AdminAccess::Open => http::admin_router(state),
        AdminAccess::Kube(config) => {
            let client = kube::Client::try_from(*config).context("cannot build the admin port's Kubernetes client")?;
            let guard = http::admin_auth::Guard::new(client, Default::default())?;
            tracing::info!("admin port: /metrics and /decisions need a bearer token the API server accepts and allows (--admin-auth kube)");
            http::guarded_admin_router(state, Arc::new(guard))
        }
    })
}

/// Runs `task` on a thread named `name` with a single-threaded runtime of its own.
fn run_apart<F: std::future::Future<Output = ()>>(
    name: &str,
    task: impl FnOnce() -> F + Send + 'static,
) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .with_context(|| format!("cannot start the {name} thread's runtime"))?;
    std::thread::Builder::new().name(name.into()).spawn(move || runtime.block_on(task()))?;
    Ok(())
}

/// The watches get a thread, runtime and client of their own: an event that arrives alone
/// (a bind, every few ms) then wakes one thread, not a worker of the shared runtime that
/// wakes the other to share work it does not have (measured: the watch path's CPU per pod
/// bound, docs/journal/performance.md, "The watch path on a thread of its own"). `watches`
/// runs them (`cluster::watch::run` or `run_requeue`) with the client made there.
/// How often the watches check their health, record their gauges and look for a new policy.
pub(super) const WATCH_TICK: Duration = Duration::from_millis(500);

pub(super) fn watch_apart<F: std::future::Future<Output = ()>>(
    config: kube::Config,
    watches: impl FnOnce(kube::Client) -> F + Send + 'static,
) -> anyhow::Result<()> {
    run_apart("watch", move || async move {
        match kube::Client::try_from(config) {
            Ok(client) => watches(client).await,
            Err(e) => tracing::error!(error = %e, "cannot build the watches' Kubernetes client"),
        }
    })
}

/// Probes and scrapes get a thread and runtime of their own (one each): while the verb
/// threads are busy receiving large bodies, `/healthz` still answers within milliseconds
/// (measured by coloc-hostile), so a kubelet never restarts a busy extender. `app` is
/// built on that thread, within its runtime.
fn serve_apart(
    name: &'static str,
    listener: std::net::TcpListener,
    app: impl FnOnce() -> anyhow::Result<axum::Router> + Send + 'static,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<()> {
    listener.set_nonblocking(true)?;
    run_apart(name, move || async move {
        let app = match app() {
            Ok(app) => app,
            Err(e) => return tracing::error!(error = format!("{e:#}"), listener = name, "listener not started"),
        };
        match tokio::net::TcpListener::from_std(listener) {
            Ok(listener) => {
                http::server::serve(listener, app, Default::default(), async move {
                    let _ = stop.changed().await;
                })
                .await
            }
            Err(e) => tracing::error!(error = %e, listener = name, "listener failed"),
        }
    })
}

/// The health port (probes) and the admin port (`/metrics`, `/decisions`), if asked for,
/// each until `stop` changes.
pub(super) fn listen_apart(
    health: Option<SocketAddr>,
    admin: AdminListen,
    state: &AppState,
    access: AdminAccess,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<()> {
    if let Some(addr) = health {
        let listener = std::net::TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr}"))?;
        let state = state.clone();
        serve_apart("health", listener, move || Ok(http::health_router(state)), stop.clone())?;
    }
    if let AdminListen(Some(addr)) = admin {
        if matches!(access, AdminAccess::Open) && !addr.ip().is_loopback() {
            tracing::warn!(admin_listen = %addr, "the admin port is not on loopback and --admin-auth is none: whoever reaches it reads /decisions (pod names, why each was or was not preempted) and /metrics; restrict it (e.g. the shipped NetworkPolicy) or use --admin-auth kube");
        }
        let listener = std::net::TcpListener::bind(addr)
            .with_context(|| format!("cannot listen on {addr} (--admin-listen; `off` turns it off)"))?;
        let state = state.clone();
        serve_apart("admin", listener, move || admin_app(state, access), stop.clone())?;
    }
    Ok(())
}
