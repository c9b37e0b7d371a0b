//! One rule each, on the smallest cluster that shows it.

use std::time::Duration;

use coloc_testbed::cluster::{self, PodBuilder};
use coloc_testbed::Binaries;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};

use crate::bed::placement;
use crate::invariants::{gated, is_replacement, uid};
use crate::{Bed, Case, Mode};

pub fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "online_pod_evicts_replicaset_workers_and_the_controller_recreates_them",
            run: |b, m| Box::pin(replicaset_workers(b, m)),
        },
        Case {
            name: "bare_victims_are_requeued_and_each_replacement_is_bound_once_room_frees",
            run: |b, m| Box::pin(bare_requeued(b, m)),
        },
        Case { name: "a_gang_is_kept_whole_where_stock_breaks_it", run: |b, m| Box::pin(gang_kept_whole(b, m)) },
        Case {
            name: "a_gang_is_broken_where_keeping_it_whole_throws_away_more",
            run: |b, m| Box::pin(gang_broken_cheaper(b, m)),
        },
        Case {
            name: "a_member_of_a_gang_broken_already_is_the_victim_that_costs_nothing_more",
            run: |b, m| Box::pin(gang_broken_already(b, m)),
        },
        Case {
            name: "a_released_copy_keeps_off_the_room_the_next_online_pod_fits_in",
            run: |b, m| Box::pin(copy_keeps_headroom(b, m)),
        },
        Case {
            name: "a_young_offline_pod_keeps_off_online_room_the_next_online_pod_then_takes_without_an_eviction",
            run: |b, m| Box::pin(young_pod_keeps_off(b, m)),
        },
        Case { name: "shadow_mode_places_and_evicts_as_stock_does", run: |b, m| Box::pin(shadow_as_stock(b, m)) },
        Case {
            name: "released_replacements_wait_for_room_and_evict_nobody",
            run: |b, m| Box::pin(replacements_wait(b, m)),
        },
        Case {
            name: "an_owned_victim_whose_replacement_would_evict_loses_to_a_bare_one_that_waits",
            run: |b, m| Box::pin(cascade_avoided(b, m)),
        },
        Case { name: "a_strict_pdb_is_respected_and_describe_pod_says_why", run: |b, m| Box::pin(strict_pdb(b, m)) },
    ]
}

pub const MINUTE: Duration = Duration::from_secs(60);

pub async fn online(bed: &Bed, name: &str, milli_cpu: i64) -> anyhow::Result<()> {
    cluster::create(&bed.client, PodBuilder::new("online", name, "online-prod", milli_cpu).build()).await
}

pub async fn online_placed(bed: &Bed, name: &str) -> anyhow::Result<String> {
    let want = name.to_string();
    bed.until_pods("online", MINUTE, &format!("online/{name} placed"), move |pods| {
        placement(pods).get(&want).cloned().ok_or_else(|| format!("placed: {:?}", placement(pods)))
    })
    .await
}

/// Two nodes, two ReplicaSet workers on each; an online pod needs a whole node's room.
async fn replicaset_workers(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    bed.nodes(&["node-1", "node-2"], 4000).await?;
    let e = bed.extender(&["--requeue"]).await?;
    bed.schedule_with(&[bed.entry(e)]).await?;
    cluster::create(&bed.client, cluster::replica_set("batch", "workers", 4, "offline-batch", 1900)).await?;
    let first = bed
        .until_pods("batch", MINUTE, "4 workers running", |pods| {
            let running: Vec<String> =
                pods.iter().filter(|p| cluster::is_placed(p) && cluster::phase(p) == "Running").map(uid).collect();
            if running.len() == 4 {
                Ok(running)
            } else {
                Err(format!("{} running", running.len()))
            }
        })
        .await?;

    online(&bed, "web", 3000).await?;
    let node = online_placed(&bed, "web").await?;

    let new = bed
        .until_pods("batch", MINUTE, "the ReplicaSet back at 4 pods, the evicted ones new", |pods| {
            let live: Vec<&Pod> = pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
            let new = live.iter().filter(|p| !first.contains(&uid(p))).count();
            let on_node =
                live.iter().filter(|p| cluster::node_of(p) == Some(node.as_str()) && first.contains(&uid(p))).count();
            if live.len() == 4 && new >= 2 && on_node == 0 {
                Ok(new)
            } else {
                Err(format!("{} live, {new} new, {on_node} old on {node}", live.len()))
            }
        })
        .await?;
    // Each answer that selected a node evicted its 2 workers. Usually there is one; under
    // load kube-scheduler (async preemption) can give the freed room to the recreated,
    // unpinned workers before web binds, and ask again: a second answer, 2 more evictions.
    let answers = bed.extenders[e]
        .metric_sum("coloc_decisions_total", "verb=\"preempt\",verdict=\"kept\",reason=\"selected\"")
        .await? as usize;
    anyhow::ensure!(
        answers >= 1 && new == 2 * answers,
        "{new} workers recreated for {answers} preempt answer(s) of 2 victims each"
    );
    let replacements = cluster::pods(&bed.client, Some("batch")).await?.iter().filter(|p| is_replacement(p)).count();
    anyhow::ensure!(
        replacements == 0,
        "controller-owned victims are never requeued, found {replacements} replacements"
    );
    bed.finish()
}

/// node-1 holds a ReplicaSet's worker (unpinned, 3 CPU), node-2 a bare pod of the same
/// class and size, node-3 (in another zone, where online pods do not go) a bare `free` pod
/// filling it; node-1 and node-2 have 1 CPU left and the online pod needs 2. Evicting the worker looks as cheap (its controller
/// recreates it, and it ran less), but the recreated worker finds no room and preempts the
/// free pod: two evictions. Requeuing the bare pod costs one: its copy waits (the default
/// `requeue.preemption: never`). The worker keeps running.
async fn cascade_avoided(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    bed.nodes(&["node-1", "node-2"], 4000).await?;
    cluster::create(&bed.client, cluster::node("node-3", 4000, 64, "zone-2")).await?;
    bed.bound(vec![
        PodBuilder::new("batch", "report", "offline-batch", 3000).on("node-2"),
        PodBuilder::new("batch", "scratch", "free", 4000).on("node-3"),
    ])
    .await?;
    let e = bed.extender(&["--requeue"]).await?;
    bed.schedule_with(&[bed.entry(e)]).await?;
    cluster::create(&bed.client, cluster::replica_set("batch", "workers", 1, "offline-batch", 3000)).await?;
    let worker = bed
        .until_pods("batch", MINUTE, "the worker running on node-1", |pods| {
            let w = pods.iter().find(|p| cluster::name(p).starts_with("workers-") && cluster::phase(p) == "Running");
            match w.map(|w| (uid(w), cluster::node_of(w).map(str::to_string))) {
                Some((uid, Some(node))) if node == "node-1" => Ok(uid),
                other => Err(format!("worker: {other:?}")),
            }
        })
        .await?;

    cluster::create(
        &bed.client,
        PodBuilder::new("online", "web", "online-prod", 2000).select("topology.kubernetes.io/zone", "zone-1").build(),
    )
    .await?;
    let node = online_placed(&bed, "web").await?;
    bed.until_pods("batch", MINUTE, "report gone and its copy released", |pods| {
        let original = pods.iter().any(|p| cluster::name(p) == "report");
        let released = pods.iter().filter(|p| is_replacement(p) && !gated(p)).count();
        if !original && released == 1 {
            Ok(())
        } else {
            Err(format!("original there: {original}, {released} released copies"))
        }
    })
    .await?;
    // Time for anything that would follow: a recreated worker would preempt by now.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let log = std::fs::read_to_string(&bed.scheduler.as_ref().expect("started").proc.log)?;
    let evictions = log.lines().filter(|l| l.contains("Preemptor Pod preempted victim Pod")).count();
    let pods = cluster::pods(&bed.client, Some("batch")).await?;
    let worker_stays = pods.iter().any(|p| uid(p) == worker && p.metadata.deletion_timestamp.is_none());
    let scratch_stays = pods.iter().any(|p| cluster::name(p) == "scratch" && p.metadata.deletion_timestamp.is_none());
    anyhow::ensure!(
        node == "node-2" && worker_stays && scratch_stays && evictions == 1,
        "web on {node} (want node-2), the worker {}, {evictions} eviction(s) (want 1)\n{}",
        if worker_stays { "still running" } else { "evicted" },
        bed.logs()
    );
    bed.finish()
}

/// One node with two bare `free` pods; an online pod needs the room of both.
async fn bare_requeued(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    bed.one_node_two_free_pods().await?;
    let e = bed.extender(&["--requeue"]).await?;
    bed.schedule_with(&[bed.entry(e)]).await?;

    online(&bed, "web", 3000).await?;
    online_placed(&bed, "web").await?;
    bed.until_pods("batch", MINUTE, "both originals gone, two released replacements pending", |pods| {
        let originals = pods.iter().filter(|p| !is_replacement(p)).count();
        let released = pods.iter().filter(|p| is_replacement(p) && !gated(p)).count();
        // The API server labelled the originals with node-1's zone when it bound them;
        // a replacement waiting for a node must not claim that zone.
        let zone = "topology.kubernetes.io/zone";
        if let Some(p) = pods.iter().find(|p| {
            is_replacement(p)
                && cluster::node_of(p).is_none()
                && p.metadata.labels.as_ref().is_some_and(|l| l.contains_key(zone))
        }) {
            return Err(format!("pending replacement {} carries its original's zone", cluster::name(p)));
        }
        if originals == 0 && released == 2 {
            Ok(())
        } else {
            Err(format!(
                "{originals} originals, {released} released of {} replacements",
                pods.iter().filter(|p| is_replacement(p)).count()
            ))
        }
    })
    .await?;

    let online_api: Api<Pod> = Api::namespaced(bed.client.clone(), "online");
    online_api.delete("web", &DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await?;
    bed.until_pods("batch", MINUTE, "each replacement bound once the room frees", |pods| {
        let running = pods.iter().filter(|p| is_replacement(p) && cluster::phase(p) == "Running").count();
        if pods.len() == 2 && running == 2 {
            Ok(())
        } else {
            Err(format!("{} pods, {running} replacements running", pods.len()))
        }
    })
    .await?;
    bed.finish()
}

const GANG_NAME: &str = "pod-group.scheduling.sigs.k8s.io/name";
const GANG_MIN: &str = "pod-group.scheduling.sigs.k8s.io/min-available";

/// node-1: gang members g-1, g-2; node-3: g-3 (gang of 3, all needed); node-2: bare pods
/// b-1, b-2; all of class free. Stock takes g-3 alone (the fewest victims) and breaks the
/// gang; the policy takes node-2 and requeues b-1 and b-2. (Class free preempts nothing,
/// so the replacements wait for room instead of coming back as preemptors: see
/// "replacements preempt" in docs/e2e.md.)
async fn gang_cluster(bed: &Bed) -> anyhow::Result<()> {
    gang_cluster_with(bed, "free").await
}

/// A member of gang "train" (class free, 1.9 CPU) that needs `min` members, bound to `node`.
fn gang_member(name: &str, node: &str, min: &str) -> PodBuilder {
    PodBuilder::new("batch", name, "free", 1900).label(GANG_NAME, "train").annotate(GANG_MIN, min).on(node)
}

/// The gang cluster with b-1, b-2 of `b_class`.
async fn gang_cluster_with(bed: &Bed, b_class: &str) -> anyhow::Result<()> {
    bed.nodes(&["node-1", "node-2", "node-3"], 4000).await?;
    let member = |name: &str, node: &str| gang_member(name, node, "3");
    bed.bound(vec![
        member("g-1", "node-1"),
        member("g-2", "node-1"),
        member("g-3", "node-3"),
        PodBuilder::new("batch", "b-1", b_class, 1900).on("node-2"),
        PodBuilder::new("batch", "b-2", b_class, 1900).on("node-2"),
    ])
    .await?;
    bed.until_running("batch", 5).await
}

/// Where the online pod went, and which batch pods were evicted (by name).
async fn gang_outcome(bed: &Bed, before: &[(String, String)]) -> anyhow::Result<(String, Vec<String>)> {
    gang_outcome_of(bed, before, PodBuilder::new("online", "web", "online-prod", 3000)).await
}

/// The same for the online pod `web`.
async fn gang_outcome_of(
    bed: &Bed,
    before: &[(String, String)],
    web: PodBuilder,
) -> anyhow::Result<(String, Vec<String>)> {
    cluster::create(&bed.client, web.build()).await?;
    let node = online_placed(bed, "web").await?;
    let evicted = bed
        .until_pods("batch", MINUTE, "the victims gone", |pods| {
            let alive: Vec<String> = pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).map(uid).collect();
            let gone: Vec<String> = before.iter().filter(|(_, u)| !alive.contains(u)).map(|(n, _)| n.clone()).collect();
            let terminating = pods.iter().any(|p| p.metadata.deletion_timestamp.is_some());
            if !gone.is_empty() && !terminating {
                Ok(gone)
            } else {
                Err(format!("gone so far {gone:?}"))
            }
        })
        .await?;
    Ok((node, evicted))
}

async fn gang_kept_whole(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    gang_cluster(&bed).await?;
    let before = crate::invariants::bare_pods(&bed, "batch").await?;
    let e = bed.extender(&["--requeue"]).await?;
    bed.schedule_with(&[bed.entry(e)]).await?;
    let (node, evicted) = gang_outcome(&bed, &before).await?;
    anyhow::ensure!(
        node == "node-2" && evicted == ["b-1", "b-2"],
        "web placed on {node}, evicting {evicted:?}; the gang-free choice was node-2, evicting b-1 and b-2\n{}",
        bed.logs()
    );
    crate::invariants::nothing_lost(&bed, "batch", &before).await?;
    bed.finish()
}

/// node-1: gang member g-1, node-3: g-2 (a gang of 2 that needs both, a minute old);
/// node-2: bare b-1, b-2 that have run ten hours; all of class free, 1.9 CPU. Keeping the
/// gang whole would throw away twenty CPU-hours of b-1 and b-2; breaking it, g-1's and its
/// survivor's minute. g-2 is left running (its owner's to restart) and g-1 comes back.
async fn gang_broken_cheaper(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    bed.nodes(&["node-1", "node-2", "node-3"], 4000).await?;
    let member = |name: &str, node: &str| gang_member(name, node, "2");
    bed.bound(vec![
        member("g-1", "node-1"),
        member("g-2", "node-3"),
        PodBuilder::new("batch", "b-1", "free", 1900).on("node-2"),
        PodBuilder::new("batch", "b-2", "free", 1900).on("node-2"),
    ])
    .await?;
    bed.until_running("batch", 4).await?;
    let pods: Api<Pod> = Api::namespaced(bed.client.clone(), "batch");
    let ten_hours_ago = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(10);
    for name in ["b-1", "b-2"] {
        let patch = serde_json::json!({"status": {"startTime": ten_hours_ago.to_string()}});
        pods.patch_status(name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(patch)).await?;
    }
    let before = crate::invariants::bare_pods(&bed, "batch").await?;
    let e = bed.extender(&["--requeue"]).await?;
    bed.schedule_with(&[bed.entry(e)]).await?;
    let (node, evicted) = gang_outcome(&bed, &before).await?;
    anyhow::ensure!(
        node == "node-1" && evicted == ["g-1"],
        "web placed on {node}, evicting {evicted:?}; breaking the gang on node-1 throws away least\n{}",
        bed.logs()
    );
    let g2 = before.iter().find(|(n, _)| n == "g-2").map(|(_, u)| u.clone()).unwrap_or_default();
    bed.until_pods("batch", MINUTE, "g-2 running on and g-1's copy bound beside it", |pods| {
        let g2_runs = pods.iter().any(|p| uid(p) == g2 && cluster::phase(p) == "Running");
        let copy = pods.iter().find(|p| is_replacement(p)).map(|p| (cluster::node_of(p).map(str::to_string), gated(p)));
        match copy {
            Some((Some(node), false)) if g2_runs => Ok(node),
            other => Err(format!("g-2 running: {g2_runs}; g-1's copy (node, gated): {other:?}")),
        }
    })
    .await?;
    let charged = bed.extenders[e].admin_get("/decisions?pod=online/web").await?;
    anyhow::ensure!(
        charged.contains("the 1 left elsewhere cannot progress"),
        "the decision does not say what breaking the gang costs: {charged}"
    );
    crate::invariants::nothing_lost(&bed, "batch", &before).await?;
    bed.finish()
}

/// node-1: gang member g-1 (ten hours old), node-3: g-2 and g-3 (a gang of 3 that needs
/// all 3); node-2: bare b-1, a minute old; all of class free, 1.9 CPU. g-2 is being deleted
/// (ten minutes of grace): the gang is below its minimum already, g-1's run lost whatever
/// happens. Evicting g-1 throws away nothing more; evicting b-1 throws away its minute and
/// a restart. (Whole, the gang would cost g-1's ten hours and its survivors'.)
async fn gang_broken_already(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up_honouring_grace(bins, mode).await?;
    bed.nodes(&["node-1", "node-2", "node-3"], 4000).await?;
    let exits_at_once = |p: PodBuilder| p.annotate(coloc_testbed::kubelet::EXITS_AFTER_SECONDS, "1");
    bed.bound(vec![
        exits_at_once(gang_member("g-1", "node-1", "3")),
        gang_member("g-2", "node-3", "3").edit(|p| p["spec"]["terminationGracePeriodSeconds"] = 600.into()),
        gang_member("g-3", "node-3", "3"),
        exits_at_once(PodBuilder::new("batch", "b-1", "free", 1900).on("node-2")),
    ])
    .await?;
    bed.until_running("batch", 4).await?;
    let pods: Api<Pod> = Api::namespaced(bed.client.clone(), "batch");
    let ten_hours_ago = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(10);
    let patch = serde_json::json!({"status": {"startTime": ten_hours_ago.to_string()}});
    pods.patch_status("g-1", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(patch)).await?;
    pods.delete("g-2", &DeleteParams::default()).await?;
    let before: Vec<(String, String)> =
        crate::invariants::bare_pods(&bed, "batch").await?.into_iter().filter(|(n, _)| n != "g-2").collect();
    let e = bed.extender(&["--requeue"]).await?;
    bed.schedule_with(&[bed.entry(e)]).await?;
    cluster::create(&bed.client, PodBuilder::new("online", "web", "online-prod", 3000).build()).await?;
    let node = online_placed(&bed, "web").await?;
    let evicted = bed
        .until_pods("batch", MINUTE, "the victim gone", |pods| {
            let gone: Vec<String> =
                before.iter().filter(|(_, u)| !pods.iter().any(|p| &uid(p) == u)).map(|(n, _)| n.clone()).collect();
            if gone.is_empty() {
                Err("none gone yet".to_string())
            } else {
                Ok(gone)
            }
        })
        .await?;
    anyhow::ensure!(
        node == "node-1" && evicted == ["g-1"],
        "web placed on {node}, evicting {evicted:?}; g-1's gang is broken already: evicting it throws away nothing more\n{}",
        bed.logs()
    );
    let decision = bed.extenders[e].admin_get("/decisions?pod=online/web").await?;
    anyhow::ensure!(
        decision.contains("gang_broken_already") && decision.contains("1 member(s) being deleted"),
        "the decision does not say the gang was broken already: {decision}"
    );
    crate::invariants::nothing_lost(&bed, "batch", &before).await?;
    bed.finish()
}

/// node-1 (8 CPU, 7 of them used): room for one online pod of 1 CPU; node-2 (1 CPU, 0.2
/// used): room for no online pod; node-3 (1 CPU) holds the bare free-1 (0.6). web-0 (1
/// CPU) may go only to node-3 and preempts free-1. Its copy packs best on node-1 (95 %
/// full after, against 80 %), which is the room web-1 (1 CPU) then fits in as is: the
/// copy goes to node-2, and web-1 takes node-1 without evicting anyone.
async fn copy_keeps_headroom(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    bed.nodes(&["node-1"], 8000).await?;
    bed.nodes(&["node-2", "node-3"], 1000).await?;
    bed.bound(vec![
        PodBuilder::new("batch", "a", "free", 7000).on("node-1"),
        PodBuilder::new("batch", "b", "free", 200).on("node-2"),
        PodBuilder::new("batch", "free-1", "free", 600).on("node-3"),
    ])
    .await?;
    bed.until_running("batch", 3).await?;
    let before = crate::invariants::bare_pods(&bed, "batch").await?;
    let e = bed.extender(&["--requeue"]).await?;
    bed.schedule_with(&[bed.entry(e)]).await?;
    cluster::create(&bed.client, PodBuilder::new("online", "web-0", "online-prod", 1000).only_on("node-3").build())
        .await?;
    online_placed(&bed, "web-0").await?;
    let copy_on = bed
        .until_pods("batch", MINUTE, "free-1's copy bound", |pods| {
            let copy = pods.iter().find(|p| is_replacement(p));
            copy.and_then(|c| cluster::node_of(c).map(str::to_string)).ok_or_else(|| format!("copy: {copy:?}"))
        })
        .await?;
    online(&bed, "web-1", 1000).await?;
    let web_1 = online_placed(&bed, "web-1").await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let events = Api::<k8s_openapi::api::core::v1::Event>::namespaced(bed.client.clone(), "batch")
        .list(&Default::default())
        .await?;
    let preempted: Vec<String> = events
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("Preempted"))
        .filter_map(|e| e.involved_object.name.clone())
        .collect();
    anyhow::ensure!(
        copy_on == "node-2" && web_1 == "node-1" && preempted == ["free-1"],
        "free-1's copy on {copy_on}, web-1 on {web_1}, preempted {preempted:?}: the copy should keep off node-1's room\n{}",
        bed.logs()
    );
    crate::invariants::nothing_lost(&bed, "batch", &before).await?;
    bed.finish()
}

/// How long batch keeps its young pods off online room in `young_pod_keeps_off` (long
/// enough for the online pod to arrive, short for CI).
const KEEP_OFF: u64 = 15;

/// node-1 (4 CPUs) holds a 2-CPU online pod: another of its size fits in the room left.
/// The shipped policy with `placement.keepOffOnlineRoom` on for batch: a 1-CPU batch pod
/// created now waits (kube-scheduler says why) instead of taking that room, and the next
/// 2-CPU online pod takes it as is: no eviction. The online pod leaves while the batch pod
/// is still kept off; once its time is up the extender wakes kube-scheduler, and the room
/// is the batch pod's.
async fn young_pod_keeps_off(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    bed.nodes(&["node-1"], 4000).await?;
    bed.bound(vec![PodBuilder::new("online", "web-0", "online-prod", 2000).on("node-1")]).await?;
    bed.until_running("online", 1).await?;
    let shipped = std::fs::read_to_string(crate::bed::repo("policy/default.yaml"))?;
    let batch =
        shipped.find("  - name: batch").ok_or_else(|| anyhow::anyhow!("no class batch in the shipped policy"))?;
    let (head, tail) = shipped.split_at(batch);
    let rule = "      requireNodeLabels: {colocation.example.com/offline-allowed: \"true\"}\n";
    let kept = format!("{rule}      keepOffOnlineRoom: {KEEP_OFF}s\n");
    anyhow::ensure!(tail.contains(rule), "the shipped policy's batch placement changed: update this test");
    let path = bed.plane.dir().join("policy.yaml");
    std::fs::write(&path, format!("{head}{}", tail.replacen(rule, &kept, 1)))?;
    let e = bed.extender(&["--requeue", "--policy", &path.display().to_string()]).await?;
    bed.schedule_with(&[bed.entry(e)]).await?;

    let created = std::time::Instant::now();
    cluster::create(&bed.client, PodBuilder::new("batch", "late", "offline-batch", 1000).build()).await?;
    bed.until_pods("batch", MINUTE, "late waiting, kept off node-1's online room", |pods| {
        let late = pods.iter().find(|p| cluster::name(p) == "late").ok_or("late not found")?;
        let said = late.status.iter().flat_map(|s| s.conditions.iter().flatten()).any(|c| {
            c.type_ == "PodScheduled"
                && c.message
                    .as_deref()
                    .is_some_and(|m| m.contains("keeps its young pods off the room online pods fit in"))
        });
        match cluster::node_of(late) {
            Some(node) => Err(format!("late bound to {node}: it took the online room")),
            None if said => Ok(()),
            None => Err("not tried yet".into()),
        }
    })
    .await?;
    online(&bed, "web-1", 2000).await?;
    let web_1 = online_placed(&bed, "web-1").await?;
    let late_node = bed
        .until_pods("batch", MINUTE, "late still waiting", |pods| {
            Ok(pods.iter().find(|p| cluster::name(p) == "late").and_then(cluster::node_of).map(str::to_string))
        })
        .await?;
    let preempted = bed.extenders[e]
        .metric_sum("coloc_decisions_total", "verb=\"preempt\",verdict=\"kept\",reason=\"selected\"")
        .await?;
    anyhow::ensure!(
        web_1 == "node-1" && late_node.is_none() && preempted == 0.0,
        "web-1 on {web_1}, late on {late_node:?}, {preempted} preempt answer(s): web-1 should take the room late kept off\n{}",
        bed.logs()
    );

    // Nothing held forever: web-1 leaves while late is still kept off, and nothing else
    // happens in the cluster. Once late's time is up the extender wakes kube-scheduler
    // (which would otherwise wait for its five-minute flush), and late takes the room.
    Api::<Pod>::namespaced(bed.client.clone(), "online")
        .delete("web-1", &DeleteParams { grace_period_seconds: Some(0), ..Default::default() })
        .await?;
    bed.until_pods("batch", MINUTE, "late bound to node-1 once its time is up", |pods| {
        match pods.iter().find(|p| cluster::name(p) == "late").and_then(cluster::node_of) {
            Some("node-1") => Ok(()),
            other => Err(format!("late on {other:?}")),
        }
    })
    .await?;
    let waited = created.elapsed();
    let woken = bed.extenders[e].metric_sum("coloc_wake_requests_total", "reason=\"kept_off_over\"").await?;
    anyhow::ensure!(
        // creationTimestamp has whole seconds: the pod's time may end up to 1 s early.
        waited >= Duration::from_secs(KEEP_OFF - 1) && woken >= 1.0,
        "late bound {waited:?} after it was created, {woken} wake(s) asked for when its time was up"
    );
    bed.finish()
}

/// The same cluster behind stock kube-scheduler, then behind the extender in shadow mode
/// with requeue ("requeue only"): the same node and the same victims, and nothing lost
/// (stock's bare victims come back as copies).
async fn shadow_as_stock(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let stock = {
        let mut bed = Bed::up(bins.clone(), mode).await?;
        gang_cluster(&bed).await?;
        let before = crate::invariants::bare_pods(&bed, "batch").await?;
        bed.schedule_with(&[]).await?;
        gang_outcome(&bed, &before).await?
    };
    let mut bed = Bed::up(bins, mode).await?;
    gang_cluster(&bed).await?;
    let before = crate::invariants::bare_pods(&bed, "batch").await?;
    let e = bed.extender(&["--requeue", "--mode", "shadow"]).await?;
    bed.schedule_with(&[bed.entry(e)]).await?;
    let shadow = gang_outcome(&bed, &before).await?;
    anyhow::ensure!(shadow == stock, "shadow {shadow:?}, stock {stock:?}");
    crate::invariants::nothing_lost(&bed, "batch", &before).await?;
    let copies = cluster::pods(&bed.client, Some("batch")).await?.iter().filter(|p| is_replacement(p)).count();
    anyhow::ensure!(copies == stock.1.len(), "{copies} copies for stock's {} victims", stock.1.len());
    let diffs = bed.extenders[e].metric_sum("coloc_shadow_diffs_total", "").await?;
    anyhow::ensure!(diffs > 0.0, "shadow mode counted no difference where the policy chose another node");
    bed.finish()
}

/// One node with two ReplicaSet workers under a PDB that allows no disruption (status
/// from the real disruption controller); the policy makes batch PDBs strict.
async fn strict_pdb(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    bed.nodes(&["node-1"], 4000).await?;
    let policy =
        std::fs::read_to_string(crate::bed::repo("policy/default.yaml"))?.replace("pdb: prefer", "pdb: strict");
    let policy_path = bed.plane.dir().join("strict-policy.yaml");
    std::fs::write(&policy_path, policy)?;
    let policy_arg = policy_path.display().to_string();
    let e = bed.extender(&["--requeue", "--events", "--policy", &policy_arg]).await?;
    bed.schedule_with(&[bed.entry(e)]).await?;
    cluster::create(&bed.client, cluster::replica_set("batch", "workers", 2, "offline-batch", 1900)).await?;
    cluster::create(&bed.client, cluster::pdb("batch", "workers", "workers", 0)).await?;
    let workers = bed
        .until_pods("batch", MINUTE, "2 workers running", |pods| {
            let running: Vec<String> = pods.iter().filter(|p| cluster::phase(p) == "Running").map(uid).collect();
            if running.len() == 2 {
                Ok(running)
            } else {
                Err(format!("{} running", running.len()))
            }
        })
        .await?;
    coloc_testbed::wait::until(MINUTE, "the disruption controller's PDB status", || async {
        let out = bed
            .plane
            .kubectl(&[
                "get",
                "pdb",
                "-n",
                "batch",
                "workers",
                "-o",
                "jsonpath={.status.currentHealthy}/{.status.disruptionsAllowed}",
            ])
            .map_err(|e| e.to_string())?;
        if out == "2/0" {
            Ok(())
        } else {
            Err(out)
        }
    })
    .await?;

    online(&bed, "web", 3000).await?;
    let describe = coloc_testbed::wait::until(MINUTE, "describe pod to show PreemptionBlocked", || async {
        let out = bed.plane.kubectl(&["describe", "pod", "-n", "online", "web"]).map_err(|e| e.to_string())?;
        if out.contains("PreemptionBlocked") {
            Ok(out)
        } else {
            Err("no PreemptionBlocked event yet".into())
        }
    })
    .await?;
    anyhow::ensure!(
        describe.contains("disruption budget") || describe.contains("PDB") || describe.contains("pdb"),
        "the event does not name the PDB:\n{describe}"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let pods = cluster::pods(&bed.client, Some("batch")).await?;
    let alive: Vec<String> = pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).map(uid).collect();
    anyhow::ensure!(workers.iter().all(|w| alive.contains(w)), "a worker under a strict PDB was evicted");
    let web = cluster::pods(&bed.client, Some("online")).await?;
    anyhow::ensure!(
        web.iter().all(|p| cluster::node_of(p).is_none()),
        "web was placed although only a PDB violation could place it"
    );
    bed.finish()
}

/// The gang cluster with b-1, b-2 of class batch, which may preempt free pods (the gang
/// members); the online pod may go only to node-2 (elsewhere the policy would take the
/// free gang members first: class order). Once it has taken node-2, b-1 and b-2's
/// replacements come back:
/// with the shipped policy (`requeue.preemption: never`) they wait for room; with `keep`
/// one of them evicts a gang member (counted, printed, not asserted: it depends on timing).
async fn replacements_wait(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut evictions = Vec::new();
    for preemption in ["never", "keep"] {
        let mut bed = Bed::up(bins.clone(), mode).await?;
        gang_cluster_with(&bed, "offline-batch").await?;
        let before = crate::invariants::bare_pods(&bed, "batch").await?;
        let policy = std::fs::read_to_string(crate::bed::repo("policy/default.yaml"))?
            .replace("preemption: never", &format!("preemption: {preemption}"));
        let path = bed.plane.dir().join("policy.yaml");
        std::fs::write(&path, policy)?;
        let path = path.display().to_string();
        let e = bed.extender(&["--requeue", "--policy", &path]).await?;
        bed.schedule_with(&[bed.entry(e)]).await?;
        let web = PodBuilder::new("online", "web", "online-prod", 3000).only_on("node-2");
        let (node, evicted) = gang_outcome_of(&bed, &before, web).await?;
        // The online pod's own choice. With `keep`, a replacement may already have evicted a
        // gang member by the time the evictions are read: that is what this case counts.
        let online_choice = ["b-1", "b-2"].iter().all(|b| evicted.iter().any(|e| e == b));
        let only_online = evicted == ["b-1", "b-2"];
        anyhow::ensure!(
            node == "node-2" && online_choice && (only_online || preemption == "keep"),
            "web on {node}, evicted {evicted:?} (requeue.preemption: {preemption})\n{}",
            bed.logs()
        );
        // The replacements are released once b-1 and b-2 are gone; give them time to act.
        bed.until_pods("batch", MINUTE, "both replacements released", |pods| {
            // b-1's and b-2's (with `keep`, a gang member a copy evicted comes back too).
            let of_b = |p: &&Pod| cluster::name(p).starts_with("b-");
            let released = pods.iter().filter(|p| is_replacement(p) && !gated(p)).filter(of_b).count();
            if released == 2 {
                Ok(())
            } else {
                Err(format!("{released} released"))
            }
        })
        .await?;
        tokio::time::sleep(Duration::from_secs(8)).await;
        let log = std::fs::read_to_string(&bed.scheduler.as_ref().expect("started").proc.log)?;
        let by_replacements =
            log.lines().filter(|l| l.contains("Preemptor Pod preempted victim Pod") && l.contains("-rq-")).count();
        evictions.push((preemption, by_replacements));
        if preemption == "never" {
            anyhow::ensure!(
                by_replacements == 0,
                "{by_replacements} eviction(s) by replacements with requeue.preemption: never"
            );
            let gang: Vec<String> = cluster::pods(&bed.client, Some("batch"))
                .await?
                .iter()
                .filter(|p| cluster::name(p).starts_with("g-") && cluster::is_placed(p))
                .map(|p| cluster::name(p).to_string())
                .collect();
            anyhow::ensure!(gang.len() == 3, "gang members left placed: {gang:?}");
        }
        bed.finish()?;
    }
    println!("  evictions by replacements ({}): {evictions:?}", mode.label());
    Ok(())
}
