//! `coloc-extender uninstall`: takes out what the extender wrote, in a safe order, so that
//! removing it leaves the cluster as it was.
//!
//! 1. Refuse while it could still be needed: an extender pod or the scheduler of its own
//!    still runs, kube-scheduler reported a failing call to it within `--quiet-for` (it is
//!    still registered), or pods that are not its copies wait for coloc-scheduler (nothing
//!    would place them once it is gone).
//! 2. Finish every guard an earlier release left (`requeue::leftovers`): a preempted pod
//!    is requeued first, any other let go. Then copy every preempted bare pod still
//!    terminating whose copy no replica stored (`adopt`): what the extender's replicas
//!    would have done, had one run until it was gone.
//! 3. Move every copy that names coloc-scheduler to `--scheduler-after` (a twin created,
//!    then the copy deleted: a pod's scheduler cannot change), then settle every gated
//!    replacement (`settle`): released once its original is gone,
//!    deleted where the original runs on or ended on its own. A copy whose original still
//!    terminates is waited for (`--wait-for-originals`), never released beside it, unless
//!    the original is stuck past its deletionTimestamp as the requeue controller bounds it.
//! 4. Delete leftover wake placeholders.
//!
//! Each step reports what it did; a second run finds nothing to do.

use std::time::Duration;

use anyhow::Context as _;
use kube::api::{DeleteParams, DynamicObject, ListParams};

use crate::model::Pod;
use crate::requeue::kube::Requeuer;
use crate::requeue::leftovers::decoded;
use crate::requeue::{FROM_POD, FROM_UID, GATE, LABEL};

#[derive(clap::Args, Debug)]
pub struct UninstallArgs {
    /// Namespace the extender runs in.
    #[arg(long, env = "POD_NAMESPACE", default_value = "kube-system")]
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
    /// terminates after that are left gated and named (run uninstall again), e.g. 60s.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub wait_for_originals: Duration,
    /// Label selector of the scheduler of its own's pods (in --namespace): none may still run.
    #[arg(long, default_value = "app.kubernetes.io/name=coloc-scheduler")]
    pub scheduler_selector: String,
    /// The schedulerName the scheduler of its own serves: no pending pod may still name it,
    /// and copies naming it are moved to --scheduler-after.
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

/// What becomes of a gated replacement when the extender goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settle {
    /// Its original was preempted and is gone, or stopped: it runs instead.
    Release(String),
    /// Its original runs on, or ended or was deleted on its own: it would run twice.
    Delete(String),
    /// Its original was preempted and is still terminating.
    Wait,
}

/// `original`: the pod named by the replacement's annotations, if it still exists with
/// the UID the replacement names; `now` in Unix seconds.
pub fn settle(original: Option<&Pod>, now: crate::model::Timestamp) -> Settle {
    use crate::model::Phase;
    match original {
        None => Settle::Release("its original is gone".into()),
        Some(o) if o.phase == Some(Phase::Succeeded) => {
            Settle::Delete(format!("its original {} finished its work", o.key()))
        }
        Some(o) if (o.preempted || o.evicted) && o.is_terminal() => {
            Settle::Release(format!("its original {} stopped", o.key()))
        }
        Some(o) if o.is_terminal() => Settle::Delete(format!("its original {} ended on its own", o.key())),
        Some(o) if o.deletion_time.is_some() && !(o.preempted || o.evicted) => {
            Settle::Delete(format!("its original {} was deleted, not by preemption or eviction", o.key()))
        }
        Some(o) => match o.deletion_time {
            Some(at) if now - at > crate::requeue::plan::STUCK_AFTER => Settle::Release(format!(
                "its original {} is still terminating {}s past its deletionTimestamp",
                o.key(),
                now - at
            )),
            Some(_) => Settle::Wait,
            None => Settle::Delete(format!("its original {} still runs", o.key())),
        },
    }
}

pub fn run(args: UninstallArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(uninstall(args))
}

async fn uninstall(args: UninstallArgs) -> anyhow::Result<()> {
    let config = kube::Config::infer()
        .await
        .context("cannot find a Kubernetes client configuration (in-cluster config or KUBECONFIG)")?;
    let client = kube::Client::try_from(config).context("cannot build a Kubernetes client")?;
    let pods = kube::Api::<DynamicObject>::all_with(client.clone(), &crate::requeue::kube::pod_resource());

    println!("1. checks");
    if args.force {
        println!("   skipped (--force)");
    } else {
        still_in_use(&client, &args).await?;
        println!(
            "   no extender pod runs, and kube-scheduler reported no call to it in the last {}s",
            args.quiet_for.as_secs()
        );
    }

    println!("2. guards left by earlier releases");
    let requeuer = Requeuer::new(client.clone(), Some("uninstall".into()), false);
    let mut left = 0;
    for pass in 0..=crate::requeue::guard::MAX_TRIES {
        let report = requeuer.finish_all_guards().await.context("cannot list pods")?;
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

    println!("3. copies naming {}", args.scheduler_name);
    let (moved, failed) = move_copies(&requeuer, &pods, &args).await?;
    println!("   {moved} moved to {}", args.scheduler_after);
    left += failed;

    println!("   gated replacements");
    let deadline = tokio::time::Instant::now() + args.wait_for_originals;
    let (mut released, mut deleted) = (0, 0);
    loop {
        let listed = pods
            .list(&ListParams::default().labels(&format!("{LABEL}=true")))
            .await
            .context("cannot list replacements")?;
        let mut waiting = Vec::new();
        for object in listed.items {
            let Some((_, replacement)) = decoded(&object) else { continue };
            if !replacement.scheduling_gates.iter().any(|g| g == GATE) || replacement.deletion_time.is_some() {
                continue;
            }
            let original = original_of(&client, &replacement).await?;
            let outcome = match settle(original.as_ref(), crate::clock::system_now()) {
                Settle::Wait => {
                    waiting.push(replacement.key());
                    continue;
                }
                Settle::Release(why) => requeuer.release_now(&replacement).await.map(|()| ("released", why)),
                Settle::Delete(why) => requeuer.delete_now(&replacement).await.map(|()| ("deleted", why)),
            };
            match outcome {
                Ok((what, why)) => {
                    println!("   {what} {}: {why}", replacement.key());
                    if what == "released" {
                        released += 1
                    } else {
                        deleted += 1
                    }
                }
                Err(e) => {
                    println!("   could not settle {}: {e}", replacement.key());
                    left += 1;
                }
            }
        }
        if waiting.is_empty() {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            // Released beside a running original, the work would run twice: left gated.
            println!("   left gated, their originals still terminating: {}", waiting.join(", "));
            left += waiting.len();
            break;
        }
        println!("   waiting for the originals of {} to go", waiting.join(", "));
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    println!("   {released} released, {deleted} deleted");

    println!("4. wake placeholders");
    let placeholders =
        pods.list(&ListParams::default().labels(crate::wake::LABEL)).await.context("cannot list wake placeholders")?;
    let mut removed = 0;
    for p in placeholders.items {
        let (Some(ns), Some(name)) = (p.metadata.namespace.as_deref(), p.metadata.name.as_deref()) else { continue };
        match crate::requeue::kube::pod_api(&client, ns).delete(name, &DeleteParams::default()).await {
            Ok(_) => removed += 1,
            Err(e) if crate::requeue::kube::api_code(&e) == Some(404) => {}
            Err(e) => {
                println!("   could not delete {ns}/{name}: {e}");
                left += 1;
            }
        }
    }
    println!("   {removed} deleted");

    anyhow::ensure!(left == 0, "{left} object(s) could not be settled: run uninstall again");
    println!("done: no guard, no gated replacement and no placeholder of coloc-extender is left; delete its manifests now (kubectl delete -k ...)");
    Ok(())
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
        if !(class.requeue.brings_back(&pod)
            && pod.deletion_time.is_some()
            && crate::requeue::would_requeue(&pod, class))
        {
            continue;
        }
        if crate::requeue::is_replacement(&pod) && pod.scheduling_gates.iter().any(|g| g == GATE) {
            continue;
        }
        let intent = crate::requeue::RequeueIntent::for_victim(&pod, pod.node_name.as_deref().unwrap_or_default(), "");
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

/// The name of the twin a copy is moved to: the copy's, `-d` added (cut to 253).
pub fn twin_name(name: &str) -> String {
    let mut cut = name.len().min(251);
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}-d", &name[..cut])
}

/// The twin of the copy `json` under `scheduler`: the same labels, annotations, gates and
/// spec, another name; what the API server set (uid, status, ...) left out. Admission
/// admits it as a copy; its scheduling gate is the requeue one whether or not the copy
/// was released (a copy is created gated).
pub fn twin(json: &serde_json::Value, scheduler: &str) -> serde_json::Value {
    let mut t = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": twin_name(json["metadata"]["name"].as_str().unwrap_or_default()),
            "namespace": json["metadata"]["namespace"],
            "labels": json["metadata"]["labels"],
            "annotations": json["metadata"]["annotations"],
        },
        "spec": json["spec"],
    });
    if let Some(spec) = t["spec"].as_object_mut() {
        crate::requeue::replacement::without_instance_fields(spec);
    }
    t["spec"]["schedulerName"] = serde_json::json!(scheduler);
    let mut gates: Vec<serde_json::Value> = t["spec"]["schedulingGates"].as_array().cloned().unwrap_or_default();
    if !gates.iter().any(|g| g["name"] == GATE) {
        gates.push(serde_json::json!({"name": GATE}));
    }
    t["spec"]["schedulingGates"] = serde_json::Value::Array(gates);
    t
}

/// Moves every unbound copy naming `--scheduler-name` to `--scheduler-after`: its twin is
/// stored (gated; released where the copy was), then the copy deleted. A second run finds
/// the twin (409) and finishes the delete. Returns (moved, failed).
async fn move_copies(
    requeuer: &Requeuer,
    pods: &kube::Api<DynamicObject>,
    args: &UninstallArgs,
) -> anyhow::Result<(usize, usize)> {
    let listed =
        pods.list(&ListParams::default().labels(&format!("{LABEL}=true"))).await.context("cannot list replacements")?;
    let (mut moved, mut failed) = (0, 0);
    for object in listed.items {
        let Some((json, copy)) = decoded(&object) else { continue };
        if copy.node_name.is_some() || copy.deletion_time.is_some() || copy.is_terminal() {
            continue;
        }
        if json["spec"]["schedulerName"].as_str() != Some(args.scheduler_name.as_str()) {
            continue;
        }
        let twin = twin(&json, &args.scheduler_after);
        let released = !copy.scheduling_gates.iter().any(|g| g == GATE);
        match requeuer.store_twin(&copy, twin, released).await {
            Ok(name) => {
                println!("   moved {} to {}/{name} ({})", copy.key(), copy.namespace, args.scheduler_after);
                moved += 1;
            }
            Err(e) => {
                println!("   could not move {}: {e}", copy.key());
                failed += 1;
            }
        }
    }
    Ok((moved, failed))
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
                crate::wire::request::clip(message, 200),
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
        .filter(|(_, p)| !crate::requeue::is_replacement(p) && p.deletion_time.is_none() && !p.is_terminal())
        .map(|(_, p)| p.key())
        .collect())
}

/// The pod a replacement's annotations name, if it still exists with that UID.
async fn original_of(client: &kube::Client, replacement: &Pod) -> anyhow::Result<Option<Pod>> {
    let (Some(from), Some(uid)) = (replacement.annotations.get(FROM_POD), replacement.annotations.get(FROM_UID)) else {
        return Ok(None);
    };
    let Some((ns, name)) = from.split_once('/') else { return Ok(None) };
    match crate::requeue::kube::pod_api(client, ns)
        .get_opt(name)
        .await
        .with_context(|| format!("cannot read {from}"))?
    {
        Some(object) => Ok(decoded(&object).map(|(_, p)| p).filter(|p| p.uid == *uid)),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Phase;

    fn original() -> Pod {
        Pod {
            name: "free-1".into(),
            namespace: "batch".into(),
            uid: "u".into(),
            phase: Some(Phase::Running),
            ..Default::default()
        }
    }

    const NOW: i64 = 1_800_000_000;

    #[test]
    fn a_replacement_runs_instead_of_an_original_that_was_preempted_and_is_gone() {
        assert!(matches!(settle(None, NOW), Settle::Release(_)));
        let stopped = Pod { preempted: true, phase: Some(Phase::Failed), ..original() };
        assert!(matches!(settle(Some(&stopped), NOW), Settle::Release(_)));
    }

    #[test]
    fn a_replacement_is_never_released_beside_its_terminating_original() {
        let terminating = Pod { preempted: true, deletion_time: Some(NOW - 10), ..original() };
        assert_eq!(settle(Some(&terminating), NOW), Settle::Wait);
        // Unless it is stuck, as the requeue controller bounds it.
        let stuck = Pod { deletion_time: Some(NOW - crate::requeue::plan::STUCK_AFTER - 1), ..terminating };
        assert!(matches!(settle(Some(&stuck), NOW), Settle::Release(why) if why.contains("still terminating")));
    }

    #[test]
    fn a_replacement_whose_original_did_not_go_by_preemption_is_deleted() {
        assert!(matches!(settle(Some(&original()), NOW), Settle::Delete(why) if why.contains("still runs")));
        let done = Pod { phase: Some(Phase::Succeeded), ..original() };
        assert!(matches!(settle(Some(&done), NOW), Settle::Delete(why) if why.contains("finished")));
        let done_while_going = Pod { preempted: true, deletion_time: Some(NOW), ..done };
        assert!(matches!(settle(Some(&done_while_going), NOW), Settle::Delete(_)));
        let deleted = Pod { deletion_time: Some(NOW), ..original() };
        assert!(matches!(settle(Some(&deleted), NOW), Settle::Delete(why) if why.contains("not by preemption")));
    }

    #[test]
    fn a_copys_twin_names_the_other_scheduler_and_keeps_the_rest() {
        let copy = serde_json::json!({
            "metadata": {"name": "free-1-rq-0123456789", "namespace": "batch", "uid": "c", "resourceVersion": "9",
                "labels": {LABEL: "true"}, "annotations": {FROM_UID: "u"}},
            "spec": {"schedulerName": "coloc-scheduler", "priority": 3000,
                "containers": [{"name": "main", "image": "w",
                    "volumeMounts": [{"name": "kube-api-access-x1", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]}],
                "volumes": [{"name": "kube-api-access-x1", "projected": {"sources": []}}]},
            "status": {"phase": "Pending"},
        });
        let t = twin(&copy, "default-scheduler");
        assert_eq!(t["metadata"]["name"], "free-1-rq-0123456789-d");
        assert_eq!(t["spec"]["schedulerName"], "default-scheduler");
        assert_eq!(t["spec"]["schedulingGates"], serde_json::json!([{"name": GATE}]), "created gated, as a copy is");
        assert_eq!(t["metadata"]["labels"][LABEL], "true");
        assert_eq!(t["metadata"]["annotations"][FROM_UID], "u");
        assert!(t["metadata"].get("uid").is_none() && t.get("status").is_none());
        // What admission gave the copy it gives the twin anew.
        assert!(t["spec"].get("priority").is_none());
        assert_eq!(t["spec"]["volumes"], serde_json::json!([]));
        assert_eq!(t["spec"]["containers"][0]["volumeMounts"], serde_json::json!([]));
        assert_eq!(twin_name(&"a".repeat(253)).len(), 253);
    }

    #[test]
    fn durations_are_read_with_their_unit_and_nonsense_is_refused() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("soon").unwrap_err().contains("\"soon\""));
        assert!(parse_duration("3h").unwrap_err().contains("unit"));
    }
}
