//! `serve`: the composition root of the extender. Builds the state, starts every
//! background task (policy and certificate reloads, watches, the requeue controller's
//! Lease read, wake, Events) and the listeners.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};

use super::apart::{listen_apart, watch_apart, AdminAccess, WATCH_TICK};
use super::args::{AdminAuth, ServeArgs};
use super::policy_reload::{policy_alarm, reload_policy, PolicyReload};
use crate::cluster::{self, View, ViewCell};
use crate::http::{self, state::AppState, state::ViewSource};
use crate::policy::{Mode, Policy};
use crate::tls::{self, TlsAcceptorCell, TlsFiles};
use crate::workers::Workers;

pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    check_prefix(&args.path_prefix)?;
    let admin_auth = args.admin_auth().map_err(anyhow::Error::msg)?;
    // Before anything records: the watches register their counters once, as they start,
    // and a counter registered before the recorder would count nothing.
    http::prometheus::handle();
    let (policy, startup_problem) = starting_policy(args.policy.as_deref(), args.ops.mode);
    if policy.mode == Mode::Shadow && startup_problem.is_none() {
        tracing::warn!("shadow mode: answers are kube-scheduler's own; the policy's decisions are only logged, counted (coloc_shadow_diffs_total) and kept for /decisions");
    }
    let view = Arc::new(ViewCell::default());
    let (source, snapshot) = view_source(&args, &view, &policy)?;
    let mut state = app_state(&args, policy, view.clone(), source, startup_problem)?;
    let reload = crate::reload::reload_signals();
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

/// The policy to start with, and why it is not the file's (if it is not). An invalid
/// policy file must not keep every replica in CrashLoop (a drain, an OOM kill): serve the
/// built-in default in shadow mode, say so, and take the file as soon as it is fixed.
pub(super) fn starting_policy(path: Option<&std::path::Path>, mode: Option<Mode>) -> (Policy, Option<String>) {
    let (policy, startup_problem) = match super::load_policy(path) {
        Ok(mut policy) => {
            if let Some(mode) = mode {
                policy.mode = mode;
            }
            (policy, None)
        }
        Err(e) => {
            let file = path.map(|p| p.display().to_string()).unwrap_or_default();
            let why = format!("policy file {file} is invalid ({e:#}); serving the built-in default policy in shadow mode until it is fixed");
            tracing::error!(policy = %file, error = format!("{e:#}"), "invalid policy at start: serving the built-in default policy in shadow mode (kube-scheduler's own answers) until the file is fixed");
            http::prometheus::record_policy_reload("error");
            http::prometheus::record_policy_fallback(true);
            let mut fallback = Policy::builtin_default();
            fallback.mode = Mode::Shadow;
            (fallback, Some(why))
        }
    };
    http::prometheus::record_policy(policy.mode.as_str(), &policy.fingerprint());
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
    state.decisions = Arc::new(http::decision_log::DecisionLog::new(http::decision_log::RingLimits {
        entries: args.ops.decisions_entries,
        bytes: args.ops.decisions_bytes,
    }));
    state.limits = args.limits.limits()?;
    if !args.requeue && !requeue_classes.is_empty() {
        tracing::warn!(classes = %requeue_classes,
        "requeue is off (serve --kube --requeue, with the requeue component's controller running): bare pods of these classes are victims of last resort (taken only for an online pod nothing else places, and lost); bare: protect keeps them");
    }
    Ok(state)
}

/// With `--kube`: the client, Events, what the requeue controller publishes, wake, and the
/// watches that feed the view. Returns the client configuration.
async fn start_kube(args: &ServeArgs, state: &mut AppState, view: &Arc<ViewCell>) -> anyhow::Result<kube::Config> {
    // The pod's own identity, which acts as each of the extender's identities.
    let own = kube::Config::infer()
        .await
        .context("cannot find a Kubernetes client configuration (in-cluster config or KUBECONFIG)")?;
    // Beside kube-scheduler the pod's ServiceAccount is kube-scheduler's: every call of the
    // extender's own is made as its own identity, which admission holds to its writes.
    let config = match &args.act_as {
        Some(user) => {
            tracing::info!(acts_as = %user, "API calls are made as this identity (impersonated), placeholders as their own");
            impersonating(&own, user)
        }
        None => own.clone(),
    };
    let client = kube::Client::try_from(config.clone()).context("cannot build a Kubernetes client")?;
    let fresh = Arc::new(cluster::watch::Freshness::default());
    state.freshness = Some(fresh.clone());
    let instance = super::replica_name::this_replica(args.pod_name.clone());
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
    // Copies are the requeue controller's, in pods of its own: this process only reads
    // whether it stores them (its Lease) and decides accordingly.
    let availability = Arc::new(crate::requeue::availability::Availability::new(args.requeue));
    state.requeue = availability.clone();
    if args.requeue {
        tokio::spawn(crate::requeue::published::follow(
            client.clone(),
            args.namespace.clone(),
            args.requeue_lease.clone(),
            availability,
        ));
        tracing::info!(lease = %format!("{}/{}", args.namespace, args.requeue_lease),
            "requeue: bare victims of requeue classes count as coming back while the requeue controller's Lease says it stores copies");
    }
    let waker = match args.wake {
        true => {
            let waker = crate::wake::kube::Waker::new(acting_as(&own, &args.wake_identity())?, args.namespace.clone());
            tokio::spawn(waker.clone().run(view.clone(), args.wake_min_interval));
            tracing::info!(namespace = %args.namespace, wakes_as = %args.wake_identity(), min_interval_s = args.wake_min_interval.as_secs(), "waking parked pods is on");
            Some(waker)
        }
        false => None,
    };
    state.service = Arc::new(crate::service::Service::new(Some(view.clone()), waker));
    if args.publish_classes {
        let (Some(name), Some(uid)) = (args.pod_name.clone(), args.pod_uid.clone()) else {
            bail!("--publish-classes needs this replica's pod (--pod-name and --pod-uid, or POD_NAME and POD_UID from the downward API): the ConfigMap it writes goes with the pods that run the extender");
        };
        let owner = crate::routing::OwnerPod { name, uid };
        tokio::spawn(crate::routing::publish(client.clone(), args.namespace.clone(), owner, state.policy.clone()));
    }
    if args.check_routing {
        let check = crate::routing::probe::RoutingCheck {
            reader: client.clone(),
            prober: acting_as(&own, &args.routing_check_identity())?,
            policy: state.policy.clone(),
            events: state.events.clone(),
            clock: state.clock.clone(),
            every: args.check_routing_every,
        };
        tokio::spawn(check.run());
        tracing::info!(checks_as = %args.routing_check_identity(), every_s = args.check_routing_every.as_secs(), "checking that routing is in effect (a dry run)");
    }
    tokio::spawn(state.waits.clone().run(view.clone()));
    // The decisions' view alone: the extender copies no pod, and keeps nothing requeue reads.
    let (view, policy) = (view.clone(), state.policy.clone());
    watch_apart(config.clone(), move |client| cluster::watch::run(client, view, policy, fresh, WATCH_TICK))?;
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
    let workers = Workers::new(state.limits.decision_workers).context("cannot start the decision worker threads")?;
    let app = http::router(state.clone(), &args.path_prefix, Arc::new(workers));
    let mut opts = http::server::ServeOptions::default();
    if let (Some(cert), Some(key)) = (args.tls_cert, args.tls_key) {
        tls::register_metrics();
        let files = TlsFiles { cert, key, client_ca: args.client_ca };
        let cell = Arc::new(TlsAcceptorCell::new(files.load()?));
        tokio::spawn(tls::watch(files, cell.clone(), Duration::from_secs(5), reload.clone()));
        opts.tls = Some(cell);
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let admin_auth = if matches!(admin, AdminAccess::Kube(_)) { "kube" } else { "none" };
    listen_apart(args.health_listen, args.admin_listen, &state, admin, &stop_rx)?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    tracing::info!(listen = %args.listen, admin = ?args.admin_listen.0, admin_auth, prefix = %args.path_prefix, tls = opts.tls.is_some(), view = ?source, "serving");
    http::server::serve(listener, app, opts, async move {
        http::server::shutdown_signal().await;
        let _ = stop_tx.send(true);
    })
    .await;
    state.service.settle(Duration::from_secs(5)).await;
    drop(stop_rx);
    Ok(())
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
