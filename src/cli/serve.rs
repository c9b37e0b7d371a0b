//! `serve`: the composition root. Builds the state, starts every background task (policy
//! and certificate reloads, watches, requeue, wake, Events) and the listeners.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};

use super::args::{AdminAuth, AdminListen, ServeArgs};
use super::policy_reload::{policy_alarm, reload_policy, PolicyReload};
use crate::cluster::{self, View, ViewCell};
use crate::http::{self, AppState, ViewSource};
use crate::policy::{Mode, Policy};
use crate::tls::{self, TlsAcceptorCell, TlsFiles};

pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    check_prefix(&args.path_prefix)?;
    let admin_auth = args.admin_auth().map_err(anyhow::Error::msg)?;
    // Before anything records: the watches register their counters once, as they start,
    // and a counter registered before the recorder would count nothing.
    http::metrics::handle();
    let (policy, startup_problem) = starting_policy(&args);
    let view = Arc::new(ViewCell::default());
    let (source, snapshot) = view_source(&args, &view, &policy)?;
    let mut state = app_state(&args, policy, view.clone(), source, startup_problem)?;
    let reload = http::server::reload_signals();
    let config = match source {
        ViewSource::Kubernetes => Some(start_kube(&args, &mut state, &view).await?),
        _ => None,
    };
    let admin = match (admin_auth, config) {
        (AdminAuth::Kube, Some(config)) => AdminAccess::Kube(Box::new(config)),
        (AdminAuth::Kube, None) => bail!("--admin-auth kube needs --kube"),
        (AdminAuth::Open, _) => AdminAccess::Open,
    };
    if let Some(path) = args.policy.clone() {
        let reloading = PolicyReload {
            path,
            mode: args.ops.mode,
            policy: state.policy.clone(),
            view: view.clone(),
            snapshot,
            problem: state.policy_problem.clone(),
            alarm: policy_alarm(state.events.clone()),
        };
        tokio::spawn(reload_policy(reloading, reload.clone()));
    }
    listen(args, state, source, reload, admin).await
}

/// Who may read the admin port: whoever reaches it, or whom the API server this
/// configuration reaches allows (`--admin-auth kube`).
enum AdminAccess {
    Open,
    Kube(Box<kube::Config>),
}

/// The policy to start with, and why it is not the file's (if it is not). An invalid
/// policy file must not keep every replica in CrashLoop (a drain, an OOM kill): serve the
/// built-in default in shadow mode, say so, and take the file as soon as it is fixed.
fn starting_policy(args: &ServeArgs) -> (Policy, Option<String>) {
    let (policy, startup_problem) = match super::load_policy(args.policy.as_deref()) {
        Ok(mut policy) => {
            if let Some(mode) = args.ops.mode {
                policy.mode = mode;
            }
            (policy, None)
        }
        Err(e) => {
            let file = args.policy.as_deref().map(|p| p.display().to_string()).unwrap_or_default();
            let why = format!("policy file {file} is invalid ({e:#}); serving the built-in default policy in shadow mode until it is fixed");
            tracing::error!(policy = %file, error = format!("{e:#}"), "invalid policy at start: serving the built-in default policy in shadow mode (kube-scheduler's own answers) until the file is fixed");
            http::metrics::record_policy_reload("error");
            http::metrics::record_policy_fallback(true);
            let mut fallback = Policy::builtin_default();
            fallback.mode = Mode::Shadow;
            (fallback, Some(why))
        }
    };
    http::metrics::record_policy(policy.mode.as_str(), &policy.fingerprint());
    if policy.mode == Mode::Shadow && startup_problem.is_none() {
        tracing::warn!("shadow mode: answers are kube-scheduler's own; the policy's decisions are only logged, counted (coloc_shadow_diffs_total) and kept for /decisions");
    }
    (policy, startup_problem)
}

/// Where the view comes from: a snapshot file (published now, and kept to be rebuilt on
/// a policy change), the Kubernetes API (`start_kube`), or nowhere.
fn view_source(
    args: &ServeArgs,
    view: &ViewCell,
    policy: &Policy,
) -> anyhow::Result<(ViewSource, Option<cluster::Objects>)> {
    Ok(match (&args.snapshot, args.kube) {
        (Some(path), _) => {
            let objects = cluster::snapshot::load(path)?;
            tracing::info!(snapshot = %path.display(), nodes = objects.nodes.len(), pods = objects.pods.len(), "cluster view from snapshot");
            view.publish(View::build(objects.clone(), policy));
            (ViewSource::Snapshot, Some(objects))
        }
        (None, true) => (ViewSource::Kubernetes, None),
        (None, false) => {
            tracing::warn!("no cluster view (--snapshot or --kube): preempt judges kube-scheduler's victims only");
            (ViewSource::None, None)
        }
    })
}

/// The state every request reads: policy, view, limits, the decision log.
fn app_state(
    args: &ServeArgs,
    policy: Policy,
    view: Arc<ViewCell>,
    source: ViewSource,
    startup_problem: Option<String>,
) -> anyhow::Result<AppState> {
    let requeue_classes = policy.requeue_classes().join(", ");
    http::memory::tune();
    let mut state = AppState::new(policy, view.clone(), source);
    state.policy_problem.store(startup_problem.map(Arc::new));
    state.decisions = Arc::new(http::decisions::DecisionLog::new(http::decisions::RingLimits {
        entries: args.ops.decisions_entries,
        bytes: args.ops.decisions_bytes,
    }));
    state.limits = args.limits.limits()?;
    if !args.requeue && !requeue_classes.is_empty() {
        tracing::warn!(classes = %requeue_classes,
        "requeue is off (serve --kube --requeue): bare pods of these classes are victims of last resort (taken only for an online pod nothing else places, and lost); bare: protect keeps them");
    }
    Ok(state)
}

/// With `--kube`: the client, Events, requeue (and finishing what an earlier run left),
/// wake, and the watches that feed the view. Returns the client configuration.
async fn start_kube(args: &ServeArgs, state: &mut AppState, view: &Arc<ViewCell>) -> anyhow::Result<kube::Config> {
    // The pod's own identity, which acts as each of the extender's identities.
    let own = kube::Config::infer()
        .await
        .context("cannot find a Kubernetes client configuration (in-cluster config or KUBECONFIG)")?;
    // Beside kube-scheduler the pod's ServiceAccount is kube-scheduler's: every call of the
    // extender's own is made as its own identity, which admission holds to its writes.
    let config = match &args.act_as {
        Some(user) => {
            tracing::info!(acts_as = %user, "API calls are made as this identity (impersonated), copies and placeholders as their own");
            impersonating(&own, user)
        }
        None => own.clone(),
    };
    let client = kube::Client::try_from(config.clone()).context("cannot build a Kubernetes client")?;
    let fresh = Arc::new(cluster::watch::Freshness::default());
    state.freshness = Some(fresh.clone());
    let instance = std::env::var("POD_NAME").ok().or_else(|| std::env::var("HOSTNAME").ok());
    if args.ops.events {
        let throttle = crate::events::Throttle::new(
            args.ops.events_min_interval.as_secs() as i64,
            args.ops.events_repeat_after.as_secs() as i64,
            50_000,
        );
        let reporter = crate::events::kube::reporter(instance.clone());
        state.events = Some(Arc::new(crate::events::kube::EventSink::start(
            client.clone(),
            reporter,
            throttle,
            state.clock.clone(),
        )));
        tracing::info!("events on preemptors are on");
    }
    if args.requeue_guard.is_some() {
        tracing::warn!(
            "--requeue-guard is ignored: guards are no longer added, and those an earlier release left are finished"
        );
    }
    if args.requeue_budget_ms.is_some() || args.requeue_evict_within.is_some() {
        tracing::warn!("--requeue-budget-ms and --requeue-evict-within are ignored: copies are stored at the eviction, never before the answer");
    }
    let mut requeuer = crate::requeue::kube::Requeuer::new(client.clone(), instance, args.requeue);
    if args.requeue {
        requeuer = requeuer.with_copier(acting_as(&own, &args.requeue_identity())?);
    }
    requeuer.pace = state.pace.clone();
    let requeuer = Arc::new(requeuer);
    state.requeue = requeuer.availability.clone();
    tokio::spawn(requeuer.clone().watch_access(crate::requeue::controller::ACCESS_EVERY));
    // Whatever the flags, what an earlier run left is finished: guards would hold their
    // pods forever, and gated copies are released once their original is gone, or
    // deleted when it was never evicted. Without --requeue no copy is made, so the
    // controller only finishes old ones.
    tokio::spawn(requeuer.clone().finish_leftover_guards());
    let settings = crate::requeue::controller::Settings {
        copies: args.requeue,
        stuck_after: args.requeue_stuck_after.as_secs() as i64,
        unrecorded_after: args.requeue_unrecorded_after.as_secs() as i64,
        backoff: crate::requeue::controller::BACKOFF_FIRST,
    };
    tokio::spawn(requeuer.run(view.clone(), state.policy.clone(), settings));
    if args.requeue {
        tracing::info!(
            stuck_after_s = settings.stuck_after,
            copies_as = %args.requeue_identity(),
            "requeue is on: preempted bare pods are copied at the eviction, whoever evicts"
        );
    }
    if args.wake {
        let waker = crate::wake::kube::Waker::new(acting_as(&own, &args.wake_identity())?, args.wake_namespace.clone());
        tokio::spawn(waker.clone().run(view.clone(), args.wake_min_interval));
        state.waker = Some(waker);
        tracing::info!(namespace = %args.wake_namespace, wakes_as = %args.wake_identity(), min_interval_s = args.wake_min_interval.as_secs(), "waking parked pods is on");
    }
    tokio::spawn(state.waits.clone().run(view.clone()));
    watch_apart(config.clone(), view.clone(), state.policy.clone(), fresh)?;
    Ok(config)
}

/// A client that acts as `user` (impersonation): each kind of write the extender makes is
/// its own identity, which admission holds to that write alone.
fn acting_as(config: &kube::Config, user: &str) -> anyhow::Result<kube::Client> {
    kube::Client::try_from(impersonating(config, user))
        .with_context(|| format!("cannot build a Kubernetes client acting as {user}"))
}

/// `config`'s credentials, asking the API server to act as `user`.
fn impersonating(config: &kube::Config, user: &str) -> kube::Config {
    let mut config = config.clone();
    config.auth_info.impersonate = Some(user.to_string());
    config
}

/// The verb listener (TLS, certificate reload), the health and admin ports, until a
/// shutdown signal.
async fn listen(
    args: ServeArgs,
    state: AppState,
    source: ViewSource,
    reload: tokio::sync::watch::Receiver<u64>,
    admin: AdminAccess,
) -> anyhow::Result<()> {
    let app = http::router(state.clone(), &args.path_prefix);
    let mut opts = http::server::ServeOptions::default();
    if let (Some(cert), Some(key)) = (args.tls_cert, args.tls_key) {
        tls::register_metrics();
        let files = TlsFiles { cert, key, client_ca: args.client_ca };
        let cell = Arc::new(TlsAcceptorCell::new(files.load()?));
        tokio::spawn(tls::watch(files, cell.clone(), Duration::from_secs(5), reload.clone()));
        opts.tls = Some(cell);
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    if let Some(addr) = args.health_listen {
        let listener = std::net::TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr}"))?;
        let state = state.clone();
        serve_apart("health", listener, move || Ok(http::health_router(state)), stop_rx.clone())?;
    }
    let admin_auth = if matches!(admin, AdminAccess::Kube(_)) { "kube" } else { "none" };
    if let AdminListen(Some(addr)) = args.admin_listen {
        if admin_auth == "none" && !addr.ip().is_loopback() {
            tracing::warn!(admin_listen = %addr, "the admin port is not on loopback and --admin-auth is none: whoever reaches it reads /decisions (pod names, why each was or was not preempted) and /metrics; restrict it (e.g. the shipped NetworkPolicy) or use --admin-auth kube");
        }
        let listener = std::net::TcpListener::bind(addr)
            .with_context(|| format!("cannot listen on {addr} (--admin-listen; `off` turns it off)"))?;
        let state = state.clone();
        serve_apart("admin", listener, move || admin_app(state, admin), stop_rx.clone())?;
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    tracing::info!(listen = %args.listen, admin = ?args.admin_listen.0, admin_auth, prefix = %args.path_prefix, tls = opts.tls.is_some(), view = ?source, "serving");
    http::server::serve(listener, app, opts, async move {
        http::server::shutdown_signal().await;
        let _ = stop_tx.send(true);
    })
    .await;
    drop(stop_rx);
    Ok(())
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
/// bound, docs/performance-journal.md, "The watch path on a thread of its own").
fn watch_apart(
    config: kube::Config,
    view: Arc<cluster::ViewCell>,
    policy: Arc<arc_swap::ArcSwap<crate::policy::Policy>>,
    fresh: Arc<cluster::watch::Freshness>,
) -> anyhow::Result<()> {
    run_apart("watch", move || async move {
        match kube::Client::try_from(config) {
            Ok(client) => cluster::watch::run(client, view, policy, fresh, Duration::from_millis(500)).await,
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

/// `/scheduler`-like prefixes only: braces and `*` would become route wildcards.
fn check_prefix(prefix: &str) -> anyhow::Result<()> {
    if prefix.is_empty() {
        return Ok(());
    }
    if !prefix.starts_with('/') {
        bail!("--path-prefix {prefix:?} must start with '/'");
    }
    if let Some(c) = prefix.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '/' | '-' | '_' | '.' | '~'))) {
        bail!("--path-prefix {prefix:?}: {c:?} is not allowed (letters, digits, / - _ . ~)");
    }
    if prefix.contains("//") {
        bail!("--path-prefix {prefix:?} has an empty segment");
    }
    Ok(())
}
