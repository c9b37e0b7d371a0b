//! Requeue at the eviction: a bare pod preempted by kube-scheduler comes back whoever
//! asked for the eviction, and nothing else is ever copied.

use std::time::Duration;

use coloc_testbed::cluster::{self, PodBuilder};
use coloc_testbed::proxy::Proxy;
use coloc_testbed::Binaries;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, EvictParams, Patch, PatchParams};
use serde_json::json;

use crate::forged::forged_copy;

use crate::invariants::{bare_pods, from_uid, is_replacement, nothing_lost};
use crate::scenarios::{online, online_placed, MINUTE};
use crate::{Bed, Case, Mode};

pub fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "requeue_brings_back_kube_schedulers_own_victims_with_the_extender_unreachable",
            run: |b, m| Box::pin(extender_unreachable(b, m)),
        },
        Case {
            name: "requeue_brings_back_victims_with_grace_0_gone_at_the_delete",
            run: |b, m| Box::pin(grace_zero(b, m)),
        },
        Case {
            name: "requeue_takes_bare_pods_of_a_namespace_not_opted_in_only_as_a_last_resort_warns_and_requeues_them_once_it_is",
            run: |b, m| Box::pin(namespace_opt_in(b, m)),
        },
        Case {
            name: "requeue_copies_no_pod_deleted_by_a_user_or_ended_after_a_mark",
            run: |b, m| Box::pin(not_preempted(b, m)),
        },
        Case {
            name: "requeue_loses_nothing_with_one_of_two_replicas_killed_in_a_loop",
            run: |b, m| Box::pin(replica_killed_in_a_loop(b, m)),
        },
        Case {
            name: "requeue_adopts_at_start_what_was_preempted_while_no_replica_ran",
            run: |b, m| Box::pin(adopted_at_start(b, m)),
        },
        Case {
            name: "requeue_brings_back_the_victims_of_a_replica_serving_the_fallback_policy",
            run: |b, m| Box::pin(fallback_loses_nothing(b, m)),
        },
        Case {
            name: "requeue_releases_a_gangs_copies_together_once_every_member_is_gone",
            run: |b, m| Box::pin(gang_together(b, m)),
        },
        Case {
            name: "requeue_brings_back_a_drained_bare_pod_only_where_its_class_opts_in",
            run: |b, m| Box::pin(drained(b, m)),
        },
        Case {
            name: "requeue_never_releases_a_copy_it_did_not_record_and_deletes_it_after_the_bound",
            run: |b, m| Box::pin(unrecorded_copy(b, m)),
        },
    ]
}

/// Whoever holds the requeue identity (its token, as the requeue controller's pods do) creates a
/// gated "copy" of no original: a copy's label, annotation and gate, root, another
/// ServiceAccount, every toleration. The extender says so (a Warning Event on it), never
/// releases it, and deletes it once the bound has passed (shortened here to 5 s).
async fn unrecorded_copy(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    bed.nodes(&["node-1"], 4000).await?;
    let e = bed.extender(&["--requeue", "--requeue-unrecorded-after", "5s"]).await?;
    let account =
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "powerful", "namespace": "batch"}});
    cluster::create(&bed.client, serde_json::from_value::<k8s_openapi::api::core::v1::ServiceAccount>(account)?)
        .await?;
    let pod = serde_json::to_value(PodBuilder::new("batch", "ghost-rq-0000000001", "free", 100).build())?;
    let forged = forged_copy(pod, "no-such-pod", Some("batch/ghost"), "powerful");
    let requeue = bed.plane.kubeconfig_of(coloc_testbed::control_plane::INSTALL_NAMESPACE, "coloc-extender-requeue");
    let as_requeue: Api<Pod> = Api::namespaced(coloc_testbed::control_plane::client_from(&requeue).await?, "batch");
    as_requeue.create(&Default::default(), &serde_json::from_value(forged)?).await?;
    // Gated for as long as it lives, then deleted.
    let pods: Api<Pod> = Api::namespaced(bed.client.clone(), "batch");
    let deadline = std::time::Instant::now() + MINUTE;
    while let Some(p) = pods.get_opt("ghost-rq-0000000001").await? {
        anyhow::ensure!(crate::invariants::gated(&p), "the forged copy was released\n{}", bed.logs());
        anyhow::ensure!(std::time::Instant::now() < deadline, "the forged copy was never deleted\n{}", bed.logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let events = bed.plane.kubectl(&["get", "events", "-n", "batch", "-o", "wide"])?;
    anyhow::ensure!(
        events.lines().any(|l| l.contains("RequeueCopyNotRecorded") && l.contains("ghost-rq-0000000001")),
        "no RequeueCopyNotRecorded Warning on the forged copy:\n{events}"
    );
    let controller = bed.extenders[e].requeue.as_ref().ok_or_else(|| anyhow::anyhow!("no requeue controller"))?;
    let log = controller.proc.log_tail(20_000);
    anyhow::ensure!(log.contains("requeue replacement deleted"), "deleted by someone else:\n{log}");
    bed.finish()
}

/// A drain evicts through the Eviction API, which marks the pod (`DisruptionTarget`,
/// `EvictionByEvictionAPI`) and deletes it. The shipped policy with `requeue.afterEviction`
/// on for class free: the drained free pod comes back, the drained offline-batch pod
/// (class batch, left off) does not.
async fn drained(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    bed.nodes(&["node-1"], 8000).await?;
    bed.bound(vec![
        PodBuilder::new("batch", "free-1", "free", 1000).on("node-1"),
        PodBuilder::new("batch", "batch-1", "offline-batch", 1000).on("node-1"),
    ])
    .await?;
    bed.until_running("batch", 2).await?;
    let originals = bare_pods(&bed, "batch").await?;
    let shipped = std::fs::read_to_string(crate::bed::repo("policy/default.yaml"))?;
    let free = shipped.find("  - name: free").ok_or_else(|| anyhow::anyhow!("no class free in the shipped policy"))?;
    let (head, tail) = shipped.split_at(free);
    let opted = "requeue: {preemption: never, maxAttempts: 5, afterEviction: true}";
    let tail = tail.replacen("requeue: {preemption: never, maxAttempts: 5}", opted, 1);
    anyhow::ensure!(tail.contains(opted), "the shipped policy's free class changed: update this test");
    let path = bed.plane.dir().join("policy.yaml");
    std::fs::write(&path, format!("{head}{tail}"))?;
    bed.extender(&["--requeue", "--policy", &path.display().to_string()]).await?;

    let pods: Api<Pod> = Api::namespaced(bed.client.clone(), "batch");
    for name in ["free-1", "batch-1"] {
        pods.evict(name, &EvictParams::default()).await?;
    }
    let free_1: Vec<(String, String)> = originals.iter().filter(|(n, _)| n == "free-1").cloned().collect();
    nothing_lost(&bed, "batch", &free_1).await?;
    let batch_1 = originals.iter().find(|(n, _)| n == "batch-1").map(|(_, u)| u.clone()).unwrap_or_default();
    bed.until_pods("batch", MINUTE, "batch-1 gone", |pods| {
        (!pods.iter().any(|p| p.metadata.uid.as_deref() == Some(batch_1.as_str())))
            .then_some(())
            .ok_or("still there".to_string())
    })
    .await?;
    // The controller's pass follows every change it reacts to: give it a few.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pods = cluster::pods(&bed.client, Some("batch")).await?;
    anyhow::ensure!(copies_of(&pods, &batch_1).is_empty(), "batch-1 (class batch, afterEviction off) was copied");
    bed.finish()
}

/// A gang of two bare pods fills node-1: g-1 stops 1 s after its delete, g-2 only after
/// its 8 s grace. Both are copied at once, and neither copy is released while g-2 still
/// runs (one member back alone could not run): they come back together.
async fn gang_together(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up_honouring_grace(bins, mode).await?;
    bed.nodes(&["node-1"], 4000).await?;
    let member = |name: &str, grace: i64| {
        let mut pod = PodBuilder::new("batch", name, "free", 1900)
            .label("pod-group.scheduling.sigs.k8s.io/name", "train")
            .annotate("pod-group.scheduling.sigs.k8s.io/min-available", "2")
            .on("node-1")
            .build();
        pod.spec.get_or_insert_with(Default::default).termination_grace_period_seconds = Some(grace);
        pod
    };
    cluster::create_all(&bed.client, vec![member("g-1", 1), member("g-2", 8)]).await?;
    bed.until_running("batch", 2).await?;
    let originals = bare_pods(&bed, "batch").await?;
    let e = bed.extender(&["--requeue"]).await?;
    bed.schedule_with(&[bed.entry(e)]).await?;
    online(&bed, "web", 3000).await?;
    let g2 = originals.iter().find(|(n, _)| n == "g-2").map(|(_, u)| u.clone()).unwrap_or_default();
    let mut copied_while_g2_left = false;
    loop {
        let pods = cluster::pods(&bed.client, Some("batch")).await?;
        // Stopped (a terminal phase) is gone as far as its work goes.
        let g2_left = pods.iter().any(|p| {
            p.metadata.uid.as_deref() == Some(g2.as_str()) && !matches!(cluster::phase(p), "Failed" | "Succeeded")
        });
        let copies: Vec<&Pod> = pods.iter().filter(|p| is_replacement(p)).collect();
        if !g2_left {
            break;
        }
        copied_while_g2_left |= copies.len() == 2;
        if let Some(released) = copies.iter().find(|p| !crate::invariants::gated(p)) {
            let state: Vec<_> = pods
                .iter()
                .map(|p| {
                    (
                        cluster::name(p),
                        cluster::phase(p),
                        p.metadata.deletion_timestamp.clone(),
                        crate::invariants::gated(p),
                        from_uid(p),
                    )
                })
                .collect();
            anyhow::bail!("{} released while g-2 still runs: {state:?}", cluster::name(released));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    anyhow::ensure!(copied_while_g2_left, "both members are copied once their deletes are seen, before they are gone");
    online_placed(&bed, "web").await?;
    nothing_lost(&bed, "batch", &originals).await?;
    bed.finish()
}

/// The only replica is down (killed) when kube-scheduler, registered `ignorable`,
/// preempts on its own; the victims keep their 30 s grace period, and the replica is back
/// within it: it adopts every preempted pod still terminating, and nothing is lost.
async fn adopted_at_start(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up_honouring_grace(bins, mode).await?;
    bed.one_node_two_free_pods().await?;
    let originals = bare_pods(&bed, "batch").await?;
    let e = bed.extender(&["--requeue"]).await?;
    let mut entry = bed.entry(e);
    entry.ignorable = true;
    entry.http_timeout = Duration::from_secs(1);
    bed.schedule_with(&[entry]).await?;
    bed.extenders[e].kill();
    online(&bed, "web", 1500).await?;
    bed.until_pods("batch", MINUTE, "a victim terminating", |pods| {
        pods.iter().any(|p| p.metadata.deletion_timestamp.is_some()).then_some(()).ok_or("none yet".to_string())
    })
    .await?;
    let copies = cluster::pods(&bed.client, Some("batch")).await?.iter().filter(|p| is_replacement(p)).count();
    anyhow::ensure!(copies == 0, "a copy was stored while no replica ran");
    bed.extenders[e].restart().await?;
    online_placed(&bed, "web").await?;
    nothing_lost(&bed, "batch", &originals).await?;
    bed.finish()
}

/// The policy file is invalid when the replica starts: it serves the built-in default in
/// shadow mode, so kube-scheduler's own victims are evicted, bare ones included; the
/// requeue controller brings them back all the same.
async fn fallback_loses_nothing(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    bed.one_node_two_free_pods().await?;
    let originals = bare_pods(&bed, "batch").await?;
    let path = bed.plane.dir().join("policy.yaml");
    std::fs::write(&path, "defaultClass: a\nclasses: [{name: a, preempts: [ghost]}]\n")?;
    let e = bed.extender(&["--requeue", "--policy", &path.display().to_string()]).await?;
    let ready = bed.extenders[e].get("/readyz").await?;
    anyhow::ensure!(ready.contains("shadow"), "not serving the fallback in shadow mode: {ready}");
    bed.schedule_with(&[bed.entry(e)]).await?;
    online(&bed, "web", 3000).await?;
    online_placed(&bed, "web").await?;
    nothing_lost(&bed, "batch", &originals).await?;
    let copies = cluster::pods(&bed.client, Some("batch")).await?.iter().filter(|p| is_replacement(p)).count();
    anyhow::ensure!(copies == 2, "{copies} copies for kube-scheduler's 2 bare victims");
    bed.finish()
}

/// Copies of `uid`, live or not.
fn copies_of<'a>(pods: &'a [Pod], uid: &str) -> Vec<&'a Pod> {
    pods.iter().filter(|p| from_uid(p) == Some(uid)).collect()
}

/// kube-scheduler is registered with an extender that never answers (`ignorable: true`,
/// as shipped): it preempts on its own, and the requeue controller of a replica that is
/// not even called brings every bare victim back. Pods it did not evict are not copied.
async fn extender_unreachable(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    bed.one_node_two_free_pods().await?;
    let originals = bare_pods(&bed, "batch").await?;
    let e = bed.extender(&["--requeue"]).await?;
    let mut entry = bed.entry(e);
    entry.url_prefix = format!("http://127.0.0.1:{}/scheduler", coloc_testbed::ports::free_port());
    entry.ignorable = true;
    entry.http_timeout = Duration::from_secs(1);
    bed.schedule_with(&[entry]).await?;
    online(&bed, "web", 1500).await?;
    online_placed(&bed, "web").await?;
    nothing_lost(&bed, "batch", &originals).await?;
    let pods = cluster::pods(&bed.client, Some("batch")).await?;
    let running = |uid: &str| {
        pods.iter().any(|p| p.metadata.uid.as_deref() == Some(uid) && p.metadata.deletion_timestamp.is_none())
    };
    let evicted: Vec<&(String, String)> = originals.iter().filter(|(_, uid)| !running(uid)).collect();
    anyhow::ensure!(!evicted.is_empty(), "kube-scheduler evicted nothing");
    for (name, uid) in &originals {
        let copies = copies_of(&pods, uid).len();
        let want = usize::from(evicted.iter().any(|(_, u)| u == uid));
        anyhow::ensure!(copies == want, "{name}: {copies} copies, {want} expected (evicted: {evicted:?})");
    }
    bed.finish()
}

/// Victims with `terminationGracePeriodSeconds: 0` are gone from the API server at the
/// delete: the copy is made from the bytes the watch kept since kube-scheduler's mark.
async fn grace_zero(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    bed.nodes(&["node-1"], 4000).await?;
    let at_once = |name: &str| {
        let mut pod = PodBuilder::new("batch", name, "free", 1900).on("node-1").build();
        pod.spec.get_or_insert_with(Default::default).termination_grace_period_seconds = Some(0);
        pod
    };
    cluster::create_all(&bed.client, vec![at_once("free-1"), at_once("free-2")]).await?;
    bed.until_running("batch", 2).await?;
    let originals = bare_pods(&bed, "batch").await?;
    let e = bed.extender(&["--requeue"]).await?;
    bed.schedule_with(&[bed.entry(e)]).await?;
    online(&bed, "web", 3000).await?;
    online_placed(&bed, "web").await?;
    nothing_lost(&bed, "batch", &originals).await?;
    let copies = cluster::pods(&bed.client, Some("batch")).await?.iter().filter(|p| is_replacement(p)).count();
    anyhow::ensure!(copies == 2, "{copies} copies of 2 victims gone at once");
    bed.finish()
}

/// What kube-scheduler's mark looks like, set here by hand.
async fn mark(bed: &Bed, name: &str) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(bed.client.clone(), "batch");
    let condition = json!({"status": {"conditions": [{"type": "DisruptionTarget", "status": "True",
        "reason": "PreemptionByScheduler", "message": "kube-scheduler: preempting to accommodate a higher priority pod"}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Strategic(condition)).await?;
    Ok(())
}

/// A user deletes one bare pod; the other is marked as kube-scheduler marks a victim, but
/// the delete never comes and it succeeds; a third is marked and deleted only after it
/// ended. None is copied.
async fn not_preempted(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    bed.nodes(&["node-1"], 8000).await?;
    bed.bound((1..=3).map(|i| PodBuilder::new("batch", &format!("free-{i}"), "free", 1000).on("node-1")).collect())
        .await?;
    bed.until_running("batch", 3).await?;
    let e = bed.extender(&["--requeue"]).await?;
    bed.schedule_with(&[bed.entry(e)]).await?;
    let pods: Api<Pod> = Api::namespaced(bed.client.clone(), "batch");
    pods.delete("free-1", &DeleteParams::default()).await?;
    mark(&bed, "free-2").await?;
    mark(&bed, "free-3").await?;
    let done = json!({"status": {"phase": "Succeeded"}});
    pods.patch_status("free-2", &PatchParams::default(), &Patch::Merge(done.clone())).await?;
    pods.patch_status("free-3", &PatchParams::default(), &Patch::Merge(done)).await?;
    // Deleted a while after it ended, as a finished pod is (its owner, the pod GC): the
    // watch drops it as it ends, and the controller asks the API server, which still has
    // it Succeeded. One deleted within the same instant looks like a preempted pod gone
    // with grace 0 (docs/requeue.md, "The copy") and is copied.
    tokio::time::sleep(Duration::from_secs(2)).await;
    pods.delete("free-3", &DeleteParams::default()).await?;
    bed.until_pods("batch", MINUTE, "free-1 and free-3 gone", |pods| {
        let names: Vec<&str> = pods.iter().map(cluster::name).collect();
        (!names.contains(&"free-1") && !names.contains(&"free-3")).then_some(()).ok_or(format!("{names:?}"))
    })
    .await?;
    // The controller reacts within a second; give it several.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let pods = cluster::pods(&bed.client, Some("batch")).await?;
    let copies: Vec<&str> = pods.iter().filter(|p| is_replacement(p)).map(cluster::name).collect();
    anyhow::ensure!(copies.is_empty(), "copies of pods nobody preempted: {copies:?}\n{}", bed.logs());
    bed.finish()
}

const NODES: &[&str] = &["node-1", "node-2", "node-3", "node-4", "node-5", "node-6"];

/// Two replicas behind one URL; one is SIGKILLed and restarted every second while
/// twelve bare pods are preempted (victims' grace honoured, capped at 2 s): nothing lost,
/// and no original has more than one live copy.
async fn replica_killed_in_a_loop(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    let originals = bed.full_of_free_pods(NODES).await?;
    let a = bed.extender(&["--requeue"]).await?;
    let b = bed.extender(&["--requeue"]).await?;
    let proxy = Proxy::start(vec![bed.extenders[a].port, bed.extenders[b].port]).await?;
    let mut entry = bed.entry(a);
    entry.url_prefix = proxy.url();
    entry.ignorable = true;
    bed.schedule_with(&[entry]).await?;
    bed.storm(NODES.len()).await?;
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(700)).await;
        bed.extenders[a].kill();
        tokio::time::sleep(Duration::from_millis(300)).await;
        bed.extenders[a].restart().await?;
    }
    bed.until_storm_placed(NODES.len(), MINUTE).await?;
    nothing_lost(&bed, "batch", &originals).await?;
    bed.finish()
}

/// Bare pods in a namespace that has not opted in to requeue cannot be copied: an online
/// pod takes them only as a last resort. node-2's bare pods (namespace batch, opted in)
/// are requeued, so web-1 takes them and plain's are spared; for web-2 plain's are the
/// only way: it is placed, they are lost, with a Warning Event on each and on namespace
/// plain. Once plain is labelled, its bare pods are requeued like any other.
async fn namespace_opt_in(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    cluster::create(&bed.client, cluster::namespace("plain")).await?;
    bed.nodes(&["node-1", "node-2"], 4000).await?;
    bed.bound(vec![
        PodBuilder::new("batch", "free-3", "free", 1900).on("node-2"),
        PodBuilder::new("batch", "free-4", "free", 1900).on("node-2"),
    ])
    .await?;
    bed.until_running("batch", 2).await?;
    let requeued = bare_pods(&bed, "batch").await?;
    // Younger than batch's: without the rule they would be the cheaper victims.
    bed.bound(vec![
        PodBuilder::new("plain", "free-1", "free", 1900).on("node-1"),
        PodBuilder::new("plain", "free-2", "free", 1900).on("node-1"),
    ])
    .await?;
    bed.until_running("plain", 2).await?;
    let e = bed.extender(&["--requeue", "--events"]).await?;
    bed.schedule_with(&[bed.entry(e)]).await?;

    // Another victim places web-1: plain's bare pods are spared.
    online(&bed, "web-1", 3000).await?;
    anyhow::ensure!(online_placed(&bed, "web-1").await? == "node-2", "web-1 not placed where batch's pods were");
    nothing_lost(&bed, "batch", &requeued).await?;
    let pods = cluster::pods(&bed.client, Some("plain")).await?;
    anyhow::ensure!(
        pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).count() == 2,
        "a bare pod of a namespace not opted in was evicted while another victim placed the pod"
    );
    let lost = bed.extenders[e].metric_sum("coloc_bare_lost_total", "").await?;
    anyhow::ensure!(lost == 0.0, "coloc_bare_lost_total is {lost} while nothing was taken as a last resort");

    // Only plain's bare pods make room for web-2: taken, lost, and said where people look.
    online(&bed, "web-2", 3000).await?;
    anyhow::ensure!(online_placed(&bed, "web-2").await? == "node-1", "web-2 not placed on node-1");
    bed.until_pods("plain", MINUTE, "plain's bare pods gone, not copied", |pods| {
        pods.is_empty().then_some(()).ok_or_else(|| format!("{:?}", pods.iter().map(cluster::name).collect::<Vec<_>>()))
    })
    .await?;
    coloc_testbed::wait::until(MINUTE, "LastResortVictim Warnings on free-1, free-2 and namespace plain", || async {
        let out = bed.plane.kubectl(&["get", "events", "-A", "-o", "wide"]).map_err(|e| e.to_string())?;
        let warned = |object: &str| {
            out.lines().any(|l| l.contains("LastResortVictim") && l.contains("Warning") && l.contains(object))
        };
        ["pod/free-1", "pod/free-2", "namespace/plain"]
            .iter()
            .all(|o| warned(o))
            .then_some(())
            .ok_or_else(|| out.lines().filter(|l| l.contains("LastResortVictim")).collect::<Vec<_>>().join("\n"))
    })
    .await?;
    let lost = bed.extenders[e].metric_sum("coloc_bare_lost_total", r#"reason="namespace_not_opted_in""#).await?;
    anyhow::ensure!(lost >= 2.0, "coloc_bare_lost_total{{reason=\"namespace_not_opted_in\"}} is {lost}");

    // Labelled, plain takes copies: its bare pods are requeued. (Bound before their node
    // exists, so that batch's pending copies cannot take node-3 first.)
    let label = json!({"metadata": {"labels": {"coloc-extender.io/requeue": "enabled"}}});
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(bed.client.clone());
    namespaces.patch("plain", &PatchParams::default(), &Patch::Merge(&label)).await?;
    bed.bound(vec![
        PodBuilder::new("plain", "free-5", "free", 1900).on("node-3"),
        PodBuilder::new("plain", "free-6", "free", 1900).on("node-3"),
    ])
    .await?;
    bed.nodes(&["node-3"], 4000).await?;
    bed.until_running("plain", 2).await?;
    let originals = bare_pods(&bed, "plain").await?;
    online(&bed, "web-3", 3000).await?;
    anyhow::ensure!(online_placed(&bed, "web-3").await? == "node-3", "web-3 not placed on node-3");
    nothing_lost(&bed, "plain", &originals).await?;
    bed.finish()
}
