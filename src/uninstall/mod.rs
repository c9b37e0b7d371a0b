//! `coloc-extender uninstall`: takes out what the extender wrote, in a safe order, so that
//! removing it leaves the cluster as it was.
//!
//! 1. Refuse while it could still be needed: an extender pod, the requeue controller or
//!    the scheduler of its own still runs, kube-scheduler reported a failing call to it within `--quiet-for` (it is
//!    still registered), or pods that are not its copies wait for coloc-scheduler (nothing
//!    would place them once it is gone).
//! 2. Finish every guard an earlier release left (`requeue::remove_after_0_1`): a preempted pod
//!    is requeued first, any other let go. Then copy every preempted bare pod still
//!    terminating whose copy no replica stored (`adopt`): what the extender's replicas
//!    would have done, had one run until it was gone.
//! 3. Move every released copy that names coloc-scheduler to `--scheduler-after` (a twin
//!    created, then the copy deleted: a pod's scheduler cannot change), then settle every
//!    gated copy (`copies`, `settle`). With no replica, nothing recorded which copies the
//!    extender made: a gated copy is released only where it is checked against its
//!    original while that still exists (the copy requeue builds of it, under the first of
//!    its names), then once the original is gone (waiting `--wait-for-originals`, never
//!    beside it, unless it is stuck past its deletionTimestamp as the requeue controller
//!    bounds it); one naming coloc-scheduler is released as its twin. A copy that cannot
//!    be checked is never released: deleted, and named with why and what is lost; so is
//!    one whose original runs on or ended on its own.
//! 4. Delete leftover wake placeholders.
//!
//! Each step reports what it did; a second run finds nothing to do.

mod copies;
pub mod settle;
pub mod twin;

use std::time::Duration;

use anyhow::Context as _;
use kube::api::{DeleteParams, DynamicObject, ListParams};

pub use copies::{Outcome, Settled};

use crate::model::marks::GATE;
use crate::model::NamespaceOptIn;
use crate::policy::{requeue_rule, Circumstances};
use crate::requeue::kube::decoded;
use crate::requeue::kube::Requeuer;

#[derive(clap::Args, Debug)]
pub struct UninstallArgs {
    /// Namespace the extender runs in.
    #[arg(long, env = "POD_NAMESPACE", default_value = "coloc-system")]
    pub namespace: String,
    /// Label selector of the extender's pods: none may still run.
    #[arg(long, default_value = "app.kubernetes.io/name=coloc-extender")]
    pub selector: String,
    /// What kube-scheduler's errors name when it cannot reach the extender (part of the
    /// registration's urlPrefix): a FailedScheduling Event naming it within --quiet-for
    /// means the extender is still registered.
    #[arg(long, default_value = "coloc-extender")]
    pub extender_host: String,
    /// How long kube-scheduler must have reported no failing call to the extender, e.g. 2m.
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    pub quiet_for: Duration,
    /// How long to wait for preempted originals to go; copies whose original still
    /// terminates after that are left gated and named (run uninstall again before their
    /// originals go: a copy is checked only while its original is there), e.g. 60s.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub wait_for_originals: Duration,
    /// Label selector of the requeue controller's pods (in --namespace): none may still run
    /// (it and this command would settle the same copies).
    #[arg(long, default_value = "app.kubernetes.io/name=coloc-requeue")]
    pub requeue_selector: String,
    /// Label selector of the scheduler of its own's pods (in --namespace): none may still run.
    #[arg(long, default_value = "app.kubernetes.io/name=coloc-scheduler")]
    pub scheduler_selector: String,
    /// The schedulerName the scheduler of its own serves: no pending pod may still name it,
    /// and copies naming it are moved to --scheduler-after (a gated one once checked).
    #[arg(long, default_value = "coloc-scheduler")]
    pub scheduler_name: String,
    /// The scheduler copies that named --scheduler-name are moved to.
    #[arg(long, default_value = "default-scheduler")]
    pub scheduler_after: String,
    /// Skip the checks of step 1 (the extender may still be in use: pods it answered for
    /// may be preempted without a replacement).
    #[arg(long)]
    pub force: bool,
    /// The policy the extender ran with (which classes requeue their bare pods); the
    /// built-in default if not given.
    #[arg(long)]
    pub policy: Option<std::path::PathBuf>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = n.parse().map_err(|_| format!("{s:?}: expected a number and a unit, e.g. 90s or 2m"))?;
    match unit {
        "s" | "" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        _ => Err(format!("{s:?}: the unit must be s or m")),
    }
}

pub fn run(args: UninstallArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let config = kube::Config::infer()
            .await
            .context("cannot find a Kubernetes client configuration (in-cluster config or KUBECONFIG)")?;
        let client = kube::Client::try_from(config).context("cannot build a Kubernetes client")?;
        let report = uninstall(&client, &args).await?;
        anyhow::ensure!(report.left == 0, "{} object(s) could not be settled: run uninstall again", report.left);
        println!("done: no guard, no gated replacement and no placeholder of coloc-extender is left; delete its manifests now (kubectl delete -k ...)");
        Ok(())
    })
}

/// What a run did that is not done yet, and what became of each gated copy.
#[derive(Debug, Default)]
pub struct Report {
    /// Objects left to a next run (a failed write, a copy left gated).
    pub left: usize,
    pub copies: Vec<Settled>,
}

/// The four steps against `client`, each said on stdout as it goes.
pub async fn uninstall(client: &kube::Client, args: &UninstallArgs) -> anyhow::Result<Report> {
    let pods = kube::Api::<DynamicObject>::all_with(client.clone(), &crate::requeue::kube::pod_resource());

    println!("1. checks");
    if args.force {
        println!("   skipped (--force)");
    } else {
        still_in_use(client, args).await?;
        println!(
            "   no extender pod runs, and kube-scheduler reported no call to it in the last {}s",
            args.quiet_for.as_secs()
        );
    }

    println!("2. guards left by earlier releases");
    let requeuer = Requeuer::new(client.clone(), Some("uninstall".into()), false);
    let mut left = 0;
    let tries = crate::requeue::remove_after_0_1::tries::Tries::default();
    for pass in 0..=crate::requeue::give_up::MAX_TRIES {
        let report = requeuer.finish_all_guards(&tries).await.context("cannot list pods")?;
        if pass == 0 || report.found > 0 {
            println!("   {}", report.summary());
        }
        left = report.left;
        if report.found == 0 || report.left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }

    println!("   preempted bare pods still terminating without a copy");
    let policy = match &args.policy {
        Some(path) => {
            crate::policy::Policy::load(path).with_context(|| format!("cannot load the policy {}", path.display()))?
        }
        None => crate::policy::Policy::builtin_default(),
    };
    let (copied, failed) = adopt(&requeuer, &pods, &policy).await?;
    println!("   {copied} copied");
    left += failed;

    println!("3. released copies naming {}", args.scheduler_name);
    let (moved, failed) = copies::move_released(client, &requeuer, args).await?;
    println!("   {moved} moved to {}", args.scheduler_after);
    left += failed;

    println!("   gated copies");
    let settled = copies::settle_gated(client, &requeuer, args).await?;
    let count = |f: fn(&Outcome) -> bool| settled.iter().filter(|s| f(&s.outcome)).count();
    let released = count(|o| *o == Outcome::Released);
    let unverified = count(|o| matches!(o, Outcome::NotVerified(_)));
    let deleted = count(|o| *o == Outcome::Deleted) + unverified;
    left += count(|o| matches!(o, Outcome::LeftGated | Outcome::Failed));
    match unverified {
        0 => println!("   {released} released, {deleted} deleted"),
        n => println!("   {released} released, {deleted} deleted ({n} of them not verified: never released)"),
    }

    println!("4. wake placeholders");
    let placeholders =
        pods.list(&ListParams::default().labels(crate::wake::LABEL)).await.context("cannot list wake placeholders")?;
    let mut removed = 0;
    for p in placeholders.items {
        let (Some(ns), Some(name)) = (p.metadata.namespace.as_deref(), p.metadata.name.as_deref()) else { continue };
        match crate::requeue::kube::pod_api(client, ns).delete(name, &DeleteParams::default()).await {
            Ok(_) => removed += 1,
            Err(e) if crate::requeue::kube::api_code(&e) == Some(404) => {}
            Err(e) => {
                println!("   could not delete {ns}/{name}: {e}");
                left += 1;
            }
        }
    }
    println!("   {removed} deleted");
    Ok(Report { left, copies: settled })
}

/// Copies every bare pod kube-scheduler preempted that is still terminating and has no
/// copy yet, as a replica would; returns (copied, failed).
async fn adopt(
    requeuer: &Requeuer,
    pods: &kube::Api<DynamicObject>,
    policy: &crate::policy::Policy,
) -> anyhow::Result<(usize, usize)> {
    let listed = pods.list(&ListParams::default()).await.context("cannot list pods")?;
    let names: std::collections::HashSet<(String, String)> =
        listed.items.iter().filter_map(|o| Some((o.metadata.namespace.clone()?, o.metadata.name.clone()?))).collect();
    let (mut copied, mut failed) = (0, 0);
    for object in &listed.items {
        let Some((json, pod)) = decoded(object) else { continue };
        let class = policy.class(policy.classify(&pod, pod.priority.unwrap_or(0)));
        // Uninstall reads no namespaces: it tries, and admission judges the namespace.
        let at = Circumstances { requeue_available: true, namespace: NamespaceOptIn::ADMISSION_DECIDES };
        if !(class.requeue.brings_back(&pod) && pod.deletion_time.is_some() && requeue_rule(&pod, class, at).is_ok()) {
            continue;
        }
        if crate::model::marks::is_replacement(&pod) && pod.scheduling_gates.iter().any(|g| g == GATE) {
            continue;
        }
        let intent = crate::model::RequeueIntent::for_victim(&pod, pod.node_name.as_deref().unwrap_or_default(), "");
        if names.contains(&(intent.namespace.clone(), intent.replacement.clone())) {
            continue;
        }
        match requeuer.store_copy(&json, &intent).await {
            Ok(()) => {
                println!("   copied {} as {}", pod.key(), intent.replacement);
                copied += 1;
            }
            Err(e) => {
                println!("   could not copy {}: {e}", pod.key());
                failed += 1;
            }
        }
    }
    Ok((copied, failed))
}

/// Names of the pods `selector` picks in `pods` that still run (neither ended nor being
/// deleted).
async fn still_running(pods: &kube::Api<DynamicObject>, selector: &str) -> Result<Vec<String>, kube::Error> {
    Ok(pods
        .list(&ListParams::default().labels(selector))
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| !matches!(p.data["status"]["phase"].as_str(), Some("Succeeded" | "Failed")))
        .filter_map(|p| p.metadata.name)
        .collect())
}

/// Refuses while the extender could still be asked to decide.
async fn still_in_use(client: &kube::Client, args: &UninstallArgs) -> anyhow::Result<()> {
    let own = std::env::var("POD_NAME").ok();
    let pods = crate::requeue::kube::pod_api(client, &args.namespace);
    let running: Vec<String> = still_running(&pods, &args.selector)
        .await
        .with_context(|| format!("cannot list the extender's pods in {}", args.namespace))?
        .into_iter()
        .filter(|name| Some(name) != own.as_ref())
        .collect();
    anyhow::ensure!(
        running.is_empty(),
        "the extender still runs ({}): unregister it from kube-scheduler's configuration, scale it to 0 (kubectl -n {} scale deploy/coloc-extender --replicas=0), then run uninstall again",
        running.join(", "),
        args.namespace
    );
    let requeue = still_running(&pods, &args.requeue_selector)
        .await
        .with_context(|| format!("cannot list the requeue controller's pods in {}", args.namespace))?;
    anyhow::ensure!(
        requeue.is_empty(),
        "the requeue controller still runs ({}): scale it to 0 (kubectl -n {} scale deploy/coloc-requeue --replicas=0), then run uninstall again",
        requeue.join(", "),
        args.namespace
    );
    let scheduler = still_running(&pods, &args.scheduler_selector)
        .await
        .with_context(|| format!("cannot list the scheduler of its own's pods in {}", args.namespace))?;
    anyhow::ensure!(
        scheduler.is_empty(),
        "the scheduler of its own still runs ({}): turn the routing off (kubectl delete mutatingadmissionpolicybinding {name}, or unlabel the namespaces), let it place the pods waiting for it, scale it to 0 (kubectl -n {} scale deploy/{name} --replicas=0), then run uninstall again",
        scheduler.join(", "),
        args.namespace,
        name = args.scheduler_name,
    );
    let waiting = waiting_for(client, &args.scheduler_name).await?;
    anyhow::ensure!(
        waiting.is_empty(),
        "{} pending pod(s) that are not its copies still name {}, which nothing serves once it is gone: {}. Let it place them (run it again) or delete them for their controllers to recreate them under another scheduler, then run uninstall again",
        waiting.len(),
        args.scheduler_name,
        waiting.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
    );
    let events = kube::Api::<k8s_openapi::api::core::v1::Event>::all(client.clone());
    let failed = events
        .list(&ListParams::default().fields("reason=FailedScheduling"))
        .await
        .context("cannot list FailedScheduling events")?;
    let now = jiff::Timestamp::now();
    for e in failed.items {
        let message = e.message.as_deref().unwrap_or_default();
        if !message.contains(&args.extender_host) {
            continue;
        }
        let last = [
            e.event_time.as_ref().map(|t| t.0),
            e.last_timestamp.as_ref().map(|t| t.0),
            e.series.as_ref().and_then(|s| s.last_observed_time.as_ref()).map(|t| t.0),
        ]
        .into_iter()
        .flatten()
        .max();
        let Some(last) = last else { continue };
        let age = now.as_second() - last.as_second();
        if age <= args.quiet_for.as_secs() as i64 {
            let pod = format!(
                "{}/{}",
                e.involved_object.namespace.unwrap_or_default(),
                e.involved_object.name.unwrap_or_default()
            );
            anyhow::bail!(
                "kube-scheduler still sends to the extender: {age}s ago it could not schedule {pod}: {:?}. Remove the extender from the KubeSchedulerConfiguration (or delete the scheduler of its own), then run uninstall again after --quiet-for ({}s)",
                crate::wire::error::clip(message, 200),
                args.quiet_for.as_secs()
            );
        }
    }
    Ok(())
}

/// Unbound pods, not copies and not ending, that name `scheduler`.
async fn waiting_for(client: &kube::Client, scheduler: &str) -> anyhow::Result<Vec<String>> {
    let pods = kube::Api::<DynamicObject>::all_with(client.clone(), &crate::requeue::kube::pod_resource());
    let listed = pods
        .list(&ListParams::default().fields(&format!("spec.schedulerName={scheduler},spec.nodeName=")))
        .await
        .context("cannot list pending pods")?;
    Ok(listed
        .items
        .iter()
        .filter_map(decoded)
        .filter(|(_, p)| !crate::model::marks::is_replacement(p) && p.deletion_time.is_none() && !p.is_terminal())
        .map(|(_, p)| p.key())
        .collect())
}
