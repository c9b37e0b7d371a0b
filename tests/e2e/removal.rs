//! Safe to run and to take out: nothing the extender wrote outlives it or holds the
//! cluster's objects. "Guards left by an earlier release" are the finalizer and label that
//! releases before this one put on bare pods: planted here by hand, as such a release left
//! them.

use std::time::{Duration, Instant};

use anyhow::Context as _;

use coloc_extender::model::marks::GUARD;
use coloc_testbed::cluster::{self, PodBuilder};
use coloc_testbed::control_plane::INSTALL_NAMESPACE;
use coloc_testbed::{wait, Binaries};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::bed::{placement, repo, EXTENDER};
use crate::invariants::{bare_pods, gated, is_replacement, nothing_lost};
use crate::scenarios::{online, online_placed, MINUTE};
use crate::{Bed, Case, Mode};

pub fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "removal_requeue_switched_off_while_guards_exist",
            run: |b, m| Box::pin(requeue_off_with_guards(b, m)),
        },
        Case { name: "removal_scaled_to_zero_then_a_pod_deleted", run: |b, m| Box::pin(scaled_to_zero(b, m)) },
        Case { name: "removal_uninstall_mid_storm", run: |b, m| Box::pin(uninstall_mid_storm(b, m)) },
        Case {
            name: "removal_namespace_deleted_after_its_guarded_pod_was_preempted",
            run: |b, m| Box::pin(namespace_deleted(b, m)),
        },
        Case {
            name: "removal_copy_refused_for_good_is_given_up_visibly",
            run: |b, m| Box::pin(copy_refused_for_good(b, m)),
        },
        Case {
            name: "removal_bare_pod_completes_while_its_copy_is_stored",
            run: |b, m| Box::pin(completes_while_copy_stored(b, m)),
        },
        Case { name: "removal_two_replicas_with_different_policies", run: |b, m| Box::pin(two_policies(b, m)) },
        Case {
            name: "removal_a_replica_without_requeue_finishes_the_copies_an_earlier_run_left",
            run: |b, m| Box::pin(requeue_off_finishes_copies(b, m)),
        },
        Case {
            name: "removal_uninstall_waits_for_coloc_scheduler_and_moves_the_copies_naming_it",
            run: |b, m| Box::pin(scheduler_of_its_own_goes(b, m)),
        },
        Case {
            name: "removal_uninstall_releases_only_the_copies_it_checked_against_their_original",
            run: |b, m| Box::pin(uninstall_checks_copies(b, m)),
        },
    ]
}

/// uninstall refuses while the scheduler of its own runs, and while a pod that is not a
/// copy waits for it (nothing would place it once it is gone); a released copy naming it
/// is moved to the default scheduler and released there; a gated one it cannot check
/// against its original (there is none) is deleted, not moved.
async fn scheduler_of_its_own_goes(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    use coloc_extender::model::marks::{FROM_POD, FROM_UID, GATE};
    use coloc_extender::model::RequeueIntent;
    use coloc_extender::requeue::replacement;
    let bed = Bed::up(bins, mode).await?;
    uninstall_rbac(&bed)?;
    bed.nodes(&["node-1"], 4000).await?;
    // A pod of coloc-scheduler (its labels as the rendered Deployment gives them), which
    // runs kube-scheduler and the extender.
    let objects = crate::coloc_pod::default_install(&bed)?;
    let template = &crate::coloc_pod::find(&objects, "Deployment", "coloc-scheduler")?["spec"]["template"];
    let mut scheduler = PodBuilder::new(INSTALL_NAMESPACE, "coloc-scheduler-0", "online-prod", 100);
    for (k, v) in template["metadata"]["labels"].as_object().into_iter().flatten() {
        scheduler = scheduler.label(k, v.as_str().unwrap_or_default());
    }
    bed.bound(vec![scheduler.on("node-1")]).await?;
    bed.until_running(INSTALL_NAMESPACE, 1).await?;
    let (ok, out) = uninstall(&bed, &[])?;
    anyhow::ensure!(!ok && out.contains("the scheduler of its own still runs (coloc-scheduler-0)"), "{out}");
    let now = DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
    Api::<Pod>::namespaced(bed.client.clone(), INSTALL_NAMESPACE).delete("coloc-scheduler-0", &now).await?;

    let batch: Api<Pod> = Api::namespaced(bed.client.clone(), "batch");
    let mut waiting = serde_json::to_value(PodBuilder::new("batch", "waiting", "free", 100).build())?;
    waiting["spec"]["schedulerName"] = json!("coloc-scheduler");
    let waiting = batch.create(&Default::default(), &serde_json::from_value(waiting)?).await?;
    let (ok, out) = uninstall(&bed, &[])?;
    anyhow::ensure!(
        !ok && out.contains("still name coloc-scheduler, which nothing serves once it is gone: batch/waiting"),
        "{out}"
    );

    // The same pod, preempted and gone: its copy, which a replica released, names
    // coloc-scheduler too; so does a gated "copy" of no original, which nothing can check.
    let original = serde_json::to_value(&waiting)?;
    batch.delete("waiting", &now).await?;
    let intent = RequeueIntent {
        namespace: "batch".into(),
        name: "waiting".into(),
        uid: waiting.metadata.uid.clone().unwrap_or_default(),
        node: "node-1".into(),
        replacement: "waiting-rq-1".into(),
        attempt: 1,
        preemptor: String::new(),
    };
    let built = replacement::build(&original, &intent)?;
    let mut released = built.clone();
    released["spec"]["schedulingGates"] = json!([]);
    batch.create(&Default::default(), &serde_json::from_value(released)?).await?;
    let mut ghost = built;
    ghost["metadata"]["name"] = json!("ghost-rq-1");
    ghost["metadata"]["annotations"][FROM_UID] = json!("u-of-no-pod");
    ghost["metadata"]["annotations"][FROM_POD] = json!("batch/ghost");
    batch.create(&Default::default(), &serde_json::from_value(ghost)?).await?;
    let (ok, out) = uninstall(&bed, &[])?;
    anyhow::ensure!(
        ok && out.contains("moved batch/waiting-rq-1 to batch/waiting-rq-1-d (default-scheduler)"),
        "{out}"
    );
    anyhow::ensure!(out.contains("deleted batch/ghost-rq-1 (no_original), never released"), "{out}");
    anyhow::ensure!(batch.get_opt("waiting-rq-1").await?.is_none(), "the copy naming coloc-scheduler is gone");
    anyhow::ensure!(batch.get_opt("ghost-rq-1").await?.is_none(), "the unchecked one is deleted");
    anyhow::ensure!(batch.get_opt("ghost-rq-1-d").await?.is_none(), "and not moved");
    let twin = batch.get("waiting-rq-1-d").await?;
    let spec = twin.spec.unwrap_or_default();
    anyhow::ensure!(spec.scheduler_name.as_deref() == Some("default-scheduler"), "{:?}", spec.scheduler_name);
    let gates = spec.scheduling_gates.unwrap_or_default();
    anyhow::ensure!(!gates.iter().any(|g| g.name == GATE), "released, as its copy was: {gates:?}");
    // A second run finds nothing to move.
    let (ok, out) = uninstall(&bed, &[])?;
    anyhow::ensure!(ok && out.contains("0 moved"), "{out}");
    bed.finish()
}

/// With no replica left, uninstall releases only a copy it checked against its original:
/// free-1 is preempted and still terminating (its grace honoured) when uninstall looks, its
/// copy stored as a replica stores it (then stopped); that copy is released once free-1 is
/// gone. A gated "copy" of no original (every toleration) is deleted and named, never
/// released. Nothing lost.
async fn uninstall_checks_copies(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    use coloc_extender::model::marks::{BASE_NAME, FROM_POD, FROM_UID};
    use coloc_extender::model::RequeueIntent;
    use coloc_extender::requeue::replacement;
    let bed = Bed::up_honouring_grace(bins, mode).await?;
    uninstall_rbac(&bed)?;
    bed.one_node_two_free_pods().await?;
    let originals = bare_pods(&bed, "batch").await?;
    preempt_as_kube_does(&bed, "batch", "free-1").await?;
    // As the replicas read it: every field the API server has.
    let going = coloc_extender::requeue::kube::pod_api(&bed.client, "batch").get("free-1").await?;
    let (going, original) = coloc_extender::requeue::kube::decoded(&going).context("free-1 decoded")?;
    let copy = replacement::build(&going, &RequeueIntent::for_victim(&original, "node-1", ""))?;
    let copy_name = copy["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let batch: Api<Pod> = Api::namespaced(bed.client.clone(), "batch");
    batch.create(&Default::default(), &serde_json::from_value(copy.clone())?).await?;
    let mut ghost = copy;
    ghost["metadata"]["name"] = json!("ghost-rq-1");
    ghost["metadata"]["annotations"][FROM_UID] = json!("u-of-no-pod");
    ghost["metadata"]["annotations"][FROM_POD] = json!("batch/ghost");
    ghost["metadata"]["annotations"][BASE_NAME] = json!("ghost");
    ghost["spec"]["tolerations"] = json!([{"operator": "Exists"}]);
    batch.create(&Default::default(), &serde_json::from_value(ghost)?).await?;

    let (ok, out) = uninstall(&bed, &["--wait-for-originals", "90s"])?;
    anyhow::ensure!(ok, "uninstall failed:\n{out}");
    // After "waiting for the originals": once free-1 stopped, or is gone.
    let released = format!("released batch/{copy_name}: its original");
    anyhow::ensure!(out.contains("waiting for the originals") && out.contains(&released), "{out}");
    anyhow::ensure!(out.contains("deleted batch/ghost-rq-1 (no_original), never released"), "{out}");
    anyhow::ensure!(batch.get_opt("ghost-rq-1").await?.is_none(), "the unchecked one is deleted");
    nothing_lost(&bed, "batch", &originals).await.map_err(|e| anyhow::anyhow!("{e:#}\nuninstall said:\n{out}"))?;
    bed.finish()
}

/// Puts the guard an earlier release added on `namespace/name`, as the admin.
async fn plant_guard(bed: &Bed, namespace: &str, name: &str) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(bed.client.clone(), namespace);
    let patch = json!({"metadata": {"finalizers": [GUARD], "labels": {GUARD: "true"}}});
    pods.patch(name, &PatchParams::default(), &Patch::Strategic(patch)).await?;
    Ok(())
}

/// What kube-scheduler does to a victim: the DisruptionTarget condition, then a delete.
async fn preempt_as_kube_does(bed: &Bed, namespace: &str, name: &str) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(bed.client.clone(), namespace);
    // With its transition time: the disruption controller resets one that looks stale.
    let now = jiff::Timestamp::now().to_string();
    let condition = json!({"status": {"conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler", "message": "preempted by the test", "lastTransitionTime": now}]}});
    let marked = pods.patch_status(name, &PatchParams::default(), &Patch::Strategic(condition)).await?;
    let conditions = marked.status.and_then(|s| s.conditions).unwrap_or_default();
    anyhow::ensure!(
        conditions.iter().any(|c| c.type_ == "DisruptionTarget"),
        "the condition did not stick: {conditions:?}"
    );
    pods.delete(name, &DeleteParams::default()).await?;
    Ok(())
}

fn carries_guard(p: &Pod) -> bool {
    p.metadata.finalizers.iter().flatten().any(|f| f == GUARD)
        || p.metadata.labels.as_ref().is_some_and(|l| l.contains_key(GUARD))
}

/// Pods anywhere that still carry a guard (finalizer or label).
async fn guarded_pods(bed: &Bed) -> anyhow::Result<Vec<String>> {
    Ok(cluster::pods(&bed.client, None)
        .await?
        .iter()
        .filter(|p| carries_guard(p))
        .map(|p| format!("{}/{}", p.metadata.namespace.as_deref().unwrap_or_default(), cluster::name(p)))
        .collect())
}

async fn until_no_guard(bed: &Bed, timeout: Duration) -> anyhow::Result<()> {
    wait::until(timeout, "no pod carrying a guard", || async {
        let left = guarded_pods(bed).await.map_err(|e| e.to_string())?;
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("guarded: {left:?}"))
        }
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e:#}\n{}", bed.logs()))
}

/// Deletes `namespace/name` and waits until the object is gone, within `within`.
async fn deleted_within(bed: &Bed, namespace: &str, name: &str, within: Duration) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(bed.client.clone(), namespace);
    pods.delete(name, &DeleteParams::default()).await?;
    wait::until(within, &format!("{namespace}/{name} gone once deleted"), || async {
        match pods.get_opt(name).await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(p) => Err(format!("still there, finalizers {:?}", p.metadata.finalizers)),
        }
    })
    .await
}

async fn given_up(bed: &Bed, e: usize, reason: &str) -> anyhow::Result<()> {
    let filter = format!("reason=\"{reason}\"");
    wait::until(MINUTE, &format!("coloc_requeue_given_up_total{{{filter}}}"), || async {
        let n =
            bed.extenders[e].metric_sum("coloc_requeue_given_up_total", &filter).await.map_err(|e| e.to_string())?;
        if n >= 1.0 {
            Ok(())
        } else {
            Err("not given up yet".into())
        }
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e:#}\n{}", bed.logs()))
}

/// Guards left by an earlier release, and requeue is being turned off (its controller runs
/// with `--copies=false`): the controller finishes them whatever its flags, and leaves the
/// pods running.
async fn requeue_off_with_guards(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    bed.one_node_two_free_pods().await?;
    let originals = bare_pods(&bed, "batch").await?;
    for (name, _) in &originals {
        plant_guard(&bed, "batch", name).await?;
    }
    let e = bed.extender(&["--requeue-finish-only"]).await?;
    until_no_guard(&bed, MINUTE).await?;
    let running = bare_pods(&bed, "batch").await?;
    anyhow::ensure!(running == originals, "the pods are left running as they were: {running:?}");
    anyhow::ensure!(bed.extenders[e].metric_sum("coloc_requeue_guards_total", "change=\"removed\"").await? >= 2.0);
    deleted_within(&bed, "batch", "free-1", Duration::from_secs(10)).await
}

/// The extender runs with requeue, places an online pod, and is scaled to zero: no pod is
/// left holding anything, so deleting one, or its namespace, finishes at once.
async fn scaled_to_zero(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    bed.one_node_two_free_pods().await?;
    bed.nodes(&["node-2"], 4000).await?;
    bed.bound(vec![PodBuilder::new("batch", "free-3", "free", 1000).on("node-2")]).await?;
    bed.until_running("batch", 3).await?;
    let originals = bare_pods(&bed, "batch").await?;
    plant_guard(&bed, "batch", "free-1").await?;
    let e = bed.extender(&["--requeue"]).await?;
    bed.schedule_with(&[bed.entry(e)]).await?;
    online(&bed, "web", 3500).await?;
    online_placed(&bed, "web").await?;
    nothing_lost(&bed, "batch", &originals).await?;
    until_no_guard(&bed, MINUTE).await?;
    bed.extenders[e].kill();
    anyhow::ensure!(guarded_pods(&bed).await?.is_empty(), "a guard outlives the extender");
    // web took node-2 (free-3 requeued); free-1 runs on, its old guard gone.
    deleted_within(&bed, "batch", "free-1", Duration::from_secs(10)).await?;
    let namespaces: Api<Namespace> = Api::all(bed.client.clone());
    namespaces.delete("batch", &DeleteParams::default()).await?;
    wait::until(MINUTE, "namespace batch gone", || async {
        match namespaces.get_opt("batch").await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(_) => Err("still terminating".into()),
        }
    })
    .await?;
    bed.finish()
}

/// Runs `coloc-extender uninstall` as its own ServiceAccount (manifests/uninstall RBAC).
fn uninstall(bed: &Bed, args: &[&str]) -> anyhow::Result<(bool, String)> {
    let out = std::process::Command::new(EXTENDER)
        .arg("uninstall")
        .args(["--namespace", INSTALL_NAMESPACE])
        .args(args)
        .env("KUBECONFIG", &bed.plane.uninstall_kubeconfig)
        .env_remove("POD_NAMESPACE")
        .output()?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    Ok((out.status.success(), text))
}

/// Four full nodes of bare pods, four online pods at once; once the extender has stored
/// a first replacement, it is taken out the documented way: uninstall refuses while
/// kube-scheduler still calls it, the extender is unregistered (the online pods not yet
/// placed are withdrawn: what stock kube-scheduler does with them is not the extender's),
/// and uninstall leaves no guard and no gated replacement, and nothing the extender
/// answered for is lost.
async fn uninstall_mid_storm(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    // Victims keep their 30 s grace: those evicted just before the extender is killed are
    // still terminating when uninstall runs, and it copies them.
    let mut bed = Bed::up_honouring_grace(bins, mode).await?;
    uninstall_rbac(&bed)?;
    bed.full_of_free_pods(&["node-1", "node-2", "node-3", "node-4"]).await?;
    // Out of the storm's way (no online pod may preempt it): the pod an earlier release
    // guarded, which kube-scheduler preempts once the extender is gone.
    bed.nodes(&["node-5"], 4000).await?;
    // Online priority, never preempting: no online pod may evict it, and its copy,
    // released, waits for room instead of evicting free pods.
    let mut never = cluster::priority_class("online-never", 10_000);
    never.preemption_policy = Some("Never".into());
    cluster::create(&bed.client, never).await?;
    cluster::until_admitted(&bed.client, "batch", &["online-never"]).await?;
    bed.bound(vec![PodBuilder::new("batch", "old-guarded", "online-never", 3900).on("node-5")]).await?;
    bed.until_running("batch", 9).await?;
    plant_guard(&bed, "batch", "old-guarded").await?;
    let originals = bare_pods(&bed, "batch").await?;
    let e = bed.extender(&["--requeue"]).await?;
    bed.schedule_with(&[bed.entry(e)]).await?;
    let host = format!("127.0.0.1:{}", bed.extenders[e].port);
    bed.storm(4).await?;
    bed.until_pods("batch", MINUTE, "a first replacement stored", |pods| {
        if pods.iter().any(is_replacement) {
            Ok(())
        } else {
            Err("none yet".into())
        }
    })
    .await?;

    // Scaled to zero, but still registered: kube-scheduler's calls fail, and it says so.
    bed.extenders[e].kill();
    // An earlier release's guard, and the pod preempted meanwhile (the extender, running
    // until now, took its guard off: put back as an earlier release would have left it).
    plant_guard(&bed, "batch", "old-guarded").await?;
    preempt_as_kube_does(&bed, "batch", "old-guarded").await?;
    let refused = wait::until(MINUTE, "uninstall to refuse while kube-scheduler still calls the extender", || async {
        let (ok, out) =
            uninstall(&bed, &["--extender-host", &host, "--quiet-for", "60s"]).map_err(|e| e.to_string())?;
        match (ok, out.contains("still sends to the extender")) {
            (false, true) => Ok(out),
            (true, _) => Err(format!("uninstall went ahead while registered:\n{out}")),
            (false, false) => Err(format!("not refused for that (yet):\n{out}")),
        }
    })
    .await?;
    anyhow::ensure!(refused.contains("Remove the extender"), "{refused}");

    // Unregistered: kube-scheduler alone, the online pods not placed yet withdrawn.
    bed.scheduler = None;
    let online_pods: Api<Pod> = Api::namespaced(bed.client.clone(), "online");
    let placed = placement(&cluster::pods(&bed.client, Some("online")).await?);
    for p in cluster::pods(&bed.client, Some("online")).await? {
        if !placed.contains_key(cluster::name(&p)) {
            online_pods
                .delete(cluster::name(&p), &DeleteParams { grace_period_seconds: Some(0), ..Default::default() })
                .await?;
        }
    }
    bed.schedule_with(&[]).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (ok, out) = uninstall(&bed, &["--extender-host", &host, "--quiet-for", "2s", "--wait-for-originals", "60s"])?;
    anyhow::ensure!(ok, "uninstall failed:\n{out}\n{}", bed.logs());
    anyhow::ensure!(guarded_pods(&bed).await?.is_empty(), "a guard is left after uninstall:\n{out}");
    let batch = cluster::pods(&bed.client, Some("batch")).await?;
    let still_gated: Vec<&str> = batch.iter().filter(|p| is_replacement(p) && gated(p)).map(cluster::name).collect();
    anyhow::ensure!(still_gated.is_empty(), "gated replacements left: {still_gated:?}\n{out}");
    nothing_lost(&bed, "batch", &originals).await.map_err(|e| anyhow::anyhow!("{e:#}\nuninstall said:\n{out}"))?;
    let (ok, again) = uninstall(&bed, &["--extender-host", &host, "--quiet-for", "2s"])?;
    anyhow::ensure!(
        ok && again.contains("0 guarded pod(s)") && again.contains("0 released, 0 deleted"),
        "a second run has nothing to do:\n{again}"
    );
    bed.finish()
}

/// A pod guarded by an earlier release is preempted, and its namespace deleted at once:
/// its copy can never be stored there, so it is given up at once and the namespace goes
/// within a minute.
async fn namespace_deleted(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    bed.nodes(&["node-1"], 4000).await?;
    cluster::create(&bed.client, cluster::requeue_namespace("doomed")).await?;
    bed.bound(vec![PodBuilder::new("doomed", "free-1", "free", 1900).on("node-1")]).await?;
    bed.until_running("doomed", 1).await?;
    plant_guard(&bed, "doomed", "free-1").await?;
    preempt_as_kube_does(&bed, "doomed", "free-1").await?;
    let namespaces: Api<Namespace> = Api::all(bed.client.clone());
    namespaces.delete("doomed", &DeleteParams::default()).await?;
    let deleted_at = Instant::now();
    let e = bed.extender(&["--requeue"]).await?;
    wait::until(MINUTE, "namespace doomed gone", || async {
        match namespaces.get_opt("doomed").await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(_) => Err("still terminating".into()),
        }
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e:#}\n{}", bed.logs()))?;
    anyhow::ensure!(deleted_at.elapsed() < MINUTE);
    given_up(&bed, e, "namespace_terminating").await?;
    bed.finish()
}

/// A pod guarded by an earlier release is preempted, and its copy can never be stored (its
/// PriorityClass is gone): after a bounded number of tries the guard goes, and a Warning
/// Event and the metric say the pod was lost and why.
async fn copy_refused_for_good(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    bed.nodes(&["node-1"], 4000).await?;
    let classes: Api<PriorityClass> = Api::all(bed.client.clone());
    cluster::create(&bed.client, cluster::priority_class("short-lived", 3500)).await?;
    bed.bound(vec![PodBuilder::new("batch", "orphan-1", "short-lived", 1900).on("node-1")]).await?;
    bed.until_running("batch", 1).await?;
    plant_guard(&bed, "batch", "orphan-1").await?;
    classes.delete("short-lived", &DeleteParams::default()).await?;
    preempt_as_kube_does(&bed, "batch", "orphan-1").await?;
    let e = bed.extender(&["--requeue"]).await?;
    given_up(&bed, e, "priority_class_missing").await?;
    let pods: Api<Pod> = Api::namespaced(bed.client.clone(), "batch");
    wait::until(MINUTE, "orphan-1 let go", || async {
        match pods.get_opt("orphan-1").await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(p) => Err(format!("still there, finalizers {:?}", p.metadata.finalizers)),
        }
    })
    .await?;
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(bed.client.clone(), "batch");
    let warning = wait::until(MINUTE, "a RequeueGivenUp Warning on orphan-1", || async {
        let list = events.list(&ListParams::default()).await.map_err(|e| e.to_string())?;
        list.items
            .into_iter()
            .find(|ev| {
                ev.reason.as_deref() == Some("RequeueGivenUp")
                    && ev.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("orphan-1")
            })
            .ok_or_else(|| "none yet".to_string())
    })
    .await?;
    anyhow::ensure!(warning.type_.as_deref() == Some("Warning"), "{warning:?}");
    let note = warning.note.unwrap_or_default();
    anyhow::ensure!(note.contains("lost") && note.contains("priority_class_missing"), "{note}");
    bed.finish()
}

/// kube-scheduler preempts a bare pod with a grace period; its copy is stored, gated, and
/// the pod finishes its work within the grace period: the copy is deleted, never released,
/// so the work does not run a second time.
async fn completes_while_copy_stored(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up_honouring_grace(bins, mode).await?;
    bed.one_node_two_free_pods().await?;
    bed.extender(&["--requeue"]).await?;
    let uid =
        bare_pods(&bed, "batch").await?.into_iter().find(|(n, _)| n == "free-1").map(|(_, u)| u).unwrap_or_default();
    let copy_of_free1 =
        |pods: &[Pod]| pods.iter().find(|p| crate::invariants::from_uid(p) == Some(uid.as_str())).cloned();
    preempt_as_kube_does(&bed, "batch", "free-1").await?;
    bed.until_pods("batch", MINUTE, "free-1's copy stored, gated", |pods| match copy_of_free1(pods) {
        Some(c) if gated(&c) => Ok(()),
        other => Err(format!("{:?}", other.map(|c| (cluster::name(&c).to_string(), gated(&c))))),
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e:#}\n{}", bed.logs()))?;
    let done = json!({"status": {"phase": "Succeeded"}});
    Api::<Pod>::namespaced(bed.client.clone(), "batch")
        .patch_status("free-1", &PatchParams::default(), &Patch::Merge(done))
        .await?;
    bed.until_pods("batch", MINUTE, "free-1 gone and its copy deleted", |pods| {
        let original = pods.iter().any(|p| cluster::name(p) == "free-1");
        match (original, copy_of_free1(pods)) {
            (_, Some(copy)) if !gated(&copy) => Err(format!("the copy was released: {:?}", copy.metadata.name)),
            (false, None) => Ok(()),
            (original, copy) => Err(format!("original there: {original}, copy: {:?}", copy.map(|c| c.metadata.name))),
        }
    })
    .await?;
    // And stays so.
    tokio::time::sleep(Duration::from_secs(3)).await;
    anyhow::ensure!(copy_of_free1(&cluster::pods(&bed.client, Some("batch")).await?).is_none(), "the copy came back");
    bed.finish()
}

/// Two replicas behind one URL, one with the default policy and one whose `free` class
/// protects bare pods (as during a policy roll-out): nothing lost, one copy per victim,
/// no guard anywhere.
async fn two_policies(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    let nodes = ["node-1", "node-2"];
    bed.nodes(&nodes, 4000).await?;
    let pods = nodes
        .iter()
        .enumerate()
        .flat_map(|(i, n)| {
            (1..=2).map(move |j| PodBuilder::new("batch", &format!("free-{}", 2 * i + j), "free", 1900).on(n))
        })
        .collect();
    bed.bound(pods).await?;
    bed.until_running("batch", 4).await?;
    let originals = bare_pods(&bed, "batch").await?;
    let default = std::fs::read_to_string(repo("policy/default.yaml"))?;
    // The free class's `bare:` line, the first after its name.
    let free = default.find("  - name: free\n").unwrap_or(default.len());
    let protecting = format!("{}{}", &default[..free], default[free..].replacen("bare: requeue", "bare: protect", 1));
    anyhow::ensure!(protecting != default, "the default policy's free class changed shape: update this case");
    let path = bed.plane.dir().join("protecting-policy.yaml");
    std::fs::write(&path, protecting)?;
    let a = bed.extender(&["--requeue"]).await?;
    let b = bed.extender(&["--requeue", "--policy", &path.display().to_string()]).await?;
    let proxy = coloc_testbed::proxy::Proxy::start(vec![bed.extenders[a].port, bed.extenders[b].port]).await?;
    let mut entry = bed.entry(a);
    entry.url_prefix = proxy.url();
    bed.schedule_with(&[entry]).await?;
    bed.storm(2).await?;
    bed.until_storm_placed(2, 2 * MINUTE).await?;
    nothing_lost(&bed, "batch", &originals).await?;
    anyhow::ensure!(guarded_pods(&bed).await?.is_empty());
    bed.finish()
}

/// A gated copy of `name` as an earlier release stored it before answering.
fn copy_as_an_earlier_release_stored(pod: &Pod) -> Pod {
    let mut copy = pod.clone();
    let original = coloc_extender::model::Pod {
        name: cluster::name(pod).to_string(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        ..Default::default()
    };
    let name = coloc_extender::model::marks::replacement_name(&original);
    copy.metadata = kube::api::ObjectMeta {
        name: Some(name),
        namespace: pod.metadata.namespace.clone(),
        labels: Some([(coloc_extender::model::marks::LABEL.to_string(), "true".to_string())].into()),
        annotations: Some(
            [
                (coloc_extender::model::marks::FROM_UID.to_string(), pod.metadata.uid.clone().unwrap_or_default()),
                (coloc_extender::model::marks::FROM_POD.to_string(), format!("batch/{}", cluster::name(pod))),
                (coloc_extender::model::marks::ATTEMPT.to_string(), "1".to_string()),
                (coloc_extender::model::marks::BASE_NAME.to_string(), cluster::name(pod).to_string()),
            ]
            .into(),
        ),
        ..Default::default()
    };
    let spec = copy.spec.get_or_insert_with(Default::default);
    spec.node_name = None;
    spec.priority = None;
    spec.scheduling_gates =
        Some(vec![k8s_openapi::api::core::v1::PodSchedulingGate { name: coloc_extender::model::marks::GATE.into() }]);
    copy.status = None;
    copy
}

/// Copies an earlier release stored before answering, for two running bare pods;
/// kube-scheduler then preempted one of them and not the other. The requeue controller run
/// with `--copies=false` (requeue being turned off) while the preempted one still
/// terminates (its grace honoured) finishes both:
/// the copy whose original is gone is released (the replica recorded its eviction at
/// start), the other deleted (its original is not being deleted). Nothing lost, nothing
/// left gated.
async fn requeue_off_finishes_copies(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up_honouring_grace(bins, mode).await?;
    bed.one_node_two_free_pods().await?;
    let originals = bare_pods(&bed, "batch").await?;
    let uid_of = |name: &str| originals.iter().find(|(n, _)| n == name).map(|(_, u)| u.clone()).unwrap_or_default();
    let (uid1, uid2) = (uid_of("free-1"), uid_of("free-2"));
    let running = cluster::pods(&bed.client, Some("batch")).await?;
    cluster::create_all(&bed.client, running.iter().map(copy_as_an_earlier_release_stored).collect()).await?;
    preempt_as_kube_does(&bed, "batch", "free-1").await?;
    let _ = bed.extender(&["--requeue-finish-only"]).await?;
    let copy_of = |pods: &[Pod], uid: &str| pods.iter().find(|p| crate::invariants::from_uid(p) == Some(uid)).cloned();
    bed.until_pods("batch", MINUTE, "free-1's copy released, free-2's deleted", |pods| {
        match (copy_of(pods, &uid1), copy_of(pods, &uid2)) {
            (Some(c1), None) if !gated(&c1) => Ok(()),
            (c1, c2) => Err(format!(
                "free-1's copy: {:?}, free-2's copy: {:?}",
                c1.map(|c| (cluster::name(&c).to_string(), gated(&c))),
                c2.map(|c| cluster::name(&c).to_string())
            )),
        }
    })
    .await?;
    nothing_lost(&bed, "batch", &originals).await?;
    bed.finish()
}

/// The uninstall Job's grants, as `kubectl apply -k manifests/uninstall` makes them on an
/// install: its ClusterRole is owned by the install's Namespace, whose uid the base's
/// grants policy writes (applied first; a grant is refused until it is in effect).
fn uninstall_rbac(bed: &Bed) -> anyhow::Result<()> {
    bed.plane.apply(&repo("manifests/grants/mutatingadmissionpolicy.yaml"))?;
    bed.plane.apply(&repo("manifests/grants/mutatingadmissionpolicybinding.yaml"))?;
    bed.plane.apply(&repo("manifests/uninstall/clusterrole.yaml"))?;
    bed.plane.apply(&repo("manifests/uninstall/clusterrolebinding.yaml"))?;
    Ok(())
}
