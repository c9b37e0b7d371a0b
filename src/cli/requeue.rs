//! `requeue`: the composition root of the requeue controller, in pods of its own (the
//! requeue component's Deployment coloc-requeue), as the requeue identity itself, with no
//! impersonation. Its replicas each keep the requeue controller's view (`RequeueView`: so
//! each records the evictions it sees), and none builds the view decisions read; the one
//! holding the Lease stores, releases and deletes copies and says on the
//! Lease whether it can, which is all the extender beside kube-scheduler learns of it.

use std::sync::Arc;

use anyhow::Context as _;

use super::apart::{listen_apart, watch_apart, AdminAccess, WATCH_TICK};
use super::args::{AdminAuth, RequeueArgs};
use super::policy_reload::{reload_policy, PolicyReload};
use super::replica_name::this_replica;
use super::serve::starting_policy;
use crate::cluster::{self, RequeueCell, ViewCell};
use crate::http::{self, state::AppState, state::ViewSource};
use crate::requeue::controller::{Settings, ACCESS_EVERY, BACKOFF_FIRST};
use crate::requeue::kube::Requeuer;
use crate::requeue::leader::{self, Leadership, LeaseRef};

pub async fn run(args: RequeueArgs) -> anyhow::Result<()> {
    let admin_auth = args.admin_auth().map_err(anyhow::Error::msg)?;
    http::prometheus::handle();
    let (policy, startup_problem) = starting_policy(args.policy.as_deref(), None);
    let view = Arc::new(RequeueCell::default());
    // No decision is made here: the state serves health and admin, ready with `view`.
    let mut state = AppState::new(policy, Arc::new(ViewCell::default()), ViewSource::Kubernetes);
    state.readiness = view.clone();
    state.policy_problem.store(startup_problem.map(Arc::new));
    let config = kube::Config::infer()
        .await
        .context("cannot find a Kubernetes client configuration (in-cluster config or KUBECONFIG)")?;
    let client = kube::Client::try_from(config.clone()).context("cannot build a Kubernetes client")?;
    let fresh = Arc::new(cluster::watch::Freshness::default());
    state.freshness = Some(fresh.clone());
    let me = this_replica(args.name.clone())
        .context("this replica needs a name on the Lease: --name, $POD_NAME, $HOSTNAME or the host's name")?;

    let requeuer = Arc::new(Requeuer::new(client.clone(), Some(me.clone()), args.copies));
    state.requeue = requeuer.availability.clone();
    let leadership = Arc::new(Leadership::default());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let lease = LeaseRef { namespace: args.namespace.clone(), name: args.lease.clone(), me };
    let leading = tokio::spawn(leader::lead(
        client.clone(),
        lease.clone(),
        requeuer.availability.clone(),
        leadership.clone(),
        stop_rx.clone(),
    ));
    tokio::spawn(requeuer.clone().watch_access(ACCESS_EVERY));
    tokio::spawn(requeuer.clone().finish_leftover_guards(leadership.clone()));
    let settings = Settings {
        copies: args.copies,
        stuck_after: args.stuck_after.as_secs() as i64,
        unrecorded_after: args.unrecorded_after.as_secs() as i64,
        backoff: BACKOFF_FIRST,
    };
    tokio::spawn(requeuer.run(view.clone(), state.policy.clone(), settings, leadership));
    let (watched, policy) = (view.clone(), state.policy.clone());
    watch_apart(config.clone(), move |client| cluster::watch::run_requeue(client, watched, policy, fresh, WATCH_TICK))?;
    if let Some(path) = args.policy.clone() {
        let reloading = PolicyReload {
            path,
            mode: None,
            policy: state.policy.clone(),
            view: state.view.clone(),
            snapshot: None,
            problem: state.policy_problem.clone(),
            alarm: None,
        };
        tokio::spawn(reload_policy(reloading, crate::reload::reload_signals()));
    }
    let access = match admin_auth {
        AdminAuth::Kube => AdminAccess::Kube(Box::new(config)),
        AdminAuth::Open => AdminAccess::Open,
    };
    listen_apart(args.health_listen, args.admin_listen, &state, access, &stop_rx)?;
    tracing::info!(lease = %format!("{}/{}", lease.namespace, lease.name), replica = %lease.me, copies = args.copies,
        stuck_after_s = settings.stuck_after, health = ?args.health_listen, admin = ?args.admin_listen.0,
        "requeue controller: preempted bare pods are copied at the eviction, whoever evicts, by the replica that leads");
    if !args.copies {
        tracing::warn!(
            "--copies=false: no new copy is stored; gated copies an earlier run left are released or deleted"
        );
    }
    http::server::shutdown_signal().await;
    let _ = stop_tx.send(true);
    // Let the Lease go, so that another replica leads at once.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), leading).await;
    Ok(())
}
