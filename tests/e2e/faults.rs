//! Faults: each asserts that no bare pod is lost, that no replacement stays gated after
//! its original is gone, and that online pods are placed as without the fault.

use std::time::Duration;

use coloc_testbed::cluster::{self, PodBuilder};
use coloc_testbed::control_plane::Options;
use coloc_testbed::proxy::Proxy;
use coloc_testbed::Binaries;

use crate::invariants::{bare_pods, is_replacement, nothing_lost};
use crate::scenarios::MINUTE;
use crate::{Bed, Case, Mode};

pub fn cases() -> Vec<Case> {
    vec![
        Case { name: "fault_extender_sigkilled_mid_storm_then_restarted", run: |b, m| Box::pin(extender_killed(b, m)) },
        Case { name: "fault_two_replicas_behind_one_url", run: |b, m| Box::pin(two_replicas(b, m)) },
        Case { name: "fault_apiserver_restarted_mid_storm", run: |b, m| Box::pin(apiserver_restarted(b, m)) },
        Case { name: "fault_watches_expire_410_under_churn", run: |b, m| Box::pin(watches_expire(b, m)) },
        Case {
            name: "fault_requeue_permission_removed_bare_victims_only_a_last_resort",
            run: |b, m| Box::pin(permission_removed(b, m)),
        },
        Case {
            name: "fault_policy_file_refused_at_start_and_on_reload_says_so_on_the_replicas_pod",
            run: |b, m| Box::pin(policy_refused(b, m)),
        },
    ]
}

const NODES: &[&str] = &["node-1", "node-2", "node-3", "node-4"];

async fn first_replacement(bed: &Bed) -> anyhow::Result<()> {
    bed.until_pods("batch", MINUTE, "a first replacement stored", |pods| {
        if pods.iter().any(is_replacement) {
            Ok(())
        } else {
            Err("none yet".into())
        }
    })
    .await
}

/// The storm under way: the storm cluster, one extender with `--requeue` registered in
/// all verbs, the four online pods created, and a first replacement stored. Returns the
/// bed, the bare originals and the extender's index.
async fn storm_under_way(
    bins: Binaries,
    mode: Mode,
    opts: Options,
    kubelet: coloc_testbed::kubelet::Options,
) -> anyhow::Result<(Bed, Vec<(String, String)>, usize)> {
    let mut bed = Bed::up_with_kubelet(bins, mode, opts, kubelet).await?;
    let originals = bed.full_of_free_pods(NODES).await?;
    let e = bed.extender(&["--requeue"]).await?;
    bed.schedule_with(&[bed.entry(e)]).await?;
    bed.storm(NODES.len()).await?;
    first_replacement(&bed).await?;
    Ok((bed, originals, e))
}

/// What every fault must leave: all online pods placed within a minute, nothing lost,
/// nothing left gated, no preempt answer rejected.
async fn storm_survived(bed: &Bed, originals: &[(String, String)]) -> anyhow::Result<()> {
    bed.until_storm_placed(NODES.len(), MINUTE).await?;
    nothing_lost(bed, "batch", originals).await?;
    bed.finish()
}

/// SIGKILL while replacements are being stored; back a second later. The online pods
/// are placed within a minute (kube-scheduler parks a pod whose preempt call failed for
/// up to 5 minutes unless something wakes it). Victims keep their 30 s grace, as on real
/// nodes: the one replica's records of the evictions it saw die with it, and it records
/// again those whose originals are still terminating when it is back (a victim gone
/// before any replica sees it is the window docs/requeue.md states; with grace capped
/// at 2 s a slow restart would fall in it).
async fn extender_killed(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let kubelet =
        coloc_testbed::kubelet::Options { grace: coloc_testbed::kubelet::Grace::Honour, ..Default::default() };
    let (mut bed, originals, e) = storm_under_way(bins, mode, Options::default(), kubelet).await?;
    bed.extenders[e].kill();
    tokio::time::sleep(Duration::from_secs(1)).await;
    bed.extenders[e].restart().await?;
    storm_survived(&bed, &originals).await
}

/// Two replicas behind a round-robin proxy: no duplicate replacement, nothing lost.
async fn two_replicas(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    let originals = bed.full_of_free_pods(NODES).await?;
    let a = bed.extender(&["--requeue"]).await?;
    let b = bed.extender(&["--requeue"]).await?;
    let proxy = Proxy::start(vec![bed.extenders[a].port, bed.extenders[b].port]).await?;
    let mut entry = bed.entry(a);
    entry.url_prefix = proxy.url();
    bed.schedule_with(&[entry]).await?;
    bed.storm(NODES.len()).await?;
    storm_survived(&bed, &originals).await
}

/// kube-apiserver killed and restarted once a first replacement is stored.
async fn apiserver_restarted(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let (mut bed, originals, _) = storm_under_way(bins, mode, Options::default(), Default::default()).await?;
    bed.plane.restart_apiserver().await?;
    storm_survived(&bed, &originals).await
}

/// The extender is frozen (SIGSTOP) mid-storm while kube-apiserver restarts and pods keep
/// coming and going with etcd compacting every second: when it thaws, every watch resumes
/// from a resource version that is gone, gets 410 Gone, and must list again; the preempt
/// calls kube-scheduler made meanwhile timed out, parking their pods.
async fn watches_expire(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let opts = Options { apiserver_args: vec!["--etcd-compaction-interval=1s".into()], ..Options::default() };
    // Victims keep their 30 s grace, as on real nodes: those preempted while the only
    // replica is frozen are still terminating when it thaws, and are copied then (a victim
    // gone before any replica sees it is the window docs/requeue.md states).
    let kubelet =
        coloc_testbed::kubelet::Options { grace: coloc_testbed::kubelet::Grace::Honour, ..Default::default() };
    let mut bed = Bed::up_with_kubelet(bins, mode, opts, kubelet).await?;
    let originals = bed.full_of_free_pods(NODES).await?;
    let e = bed.extender(&["--requeue"]).await?;
    bed.schedule_with(&[bed.entry(e)]).await?;
    // Churn: short-lived unrelated pods, created and deleted, in a namespace of their own.
    cluster::create(&bed.client, cluster::namespace("churn")).await?;
    let client = bed.client.clone();
    let churn = tokio::spawn(async move {
        let api: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(client.clone(), "churn");
        for i in 0.. {
            let pod = PodBuilder::new("churn", &format!("c-{i}"), "free", 10).never_preempts().build();
            let _ = api.create(&Default::default(), &pod).await;
            let _ = api
                .delete(
                    &format!("c-{i}"),
                    &kube::api::DeleteParams { grace_period_seconds: Some(0), ..Default::default() },
                )
                .await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    bed.storm(NODES.len()).await?;
    first_replacement(&bed).await?;
    bed.extenders[e].proc.pause();
    bed.plane.restart_apiserver().await?;
    tokio::time::sleep(Duration::from_secs(4)).await;
    bed.extenders[e].proc.resume();
    bed.until_storm_placed(NODES.len(), MINUTE).await?;
    nothing_lost(&bed, "batch", &originals).await?;
    churn.abort();
    let log = &bed.extenders[e].proc.log;
    coloc_testbed::wait::until(MINUTE, "a watch to list again after 410 Gone", || async {
        let text = std::fs::read_to_string(log).map_err(|e| e.to_string())?;
        let gone_at = text.lines().position(|l| l.contains("too old resource version")).ok_or("no 410 seen yet")?;
        let relisted = text.lines().skip(gone_at).any(|l| l.contains("watch listed"));
        if relisted {
            Ok(())
        } else {
            Err("410 seen, no list since".into())
        }
    })
    .await?;
    bed.finish()
}

/// The requeue RBAC binding is deleted mid-run: the extender finds it can no longer store
/// copies, so its bare victims become victims of last resort: where a ReplicaSet worker
/// places the online pod, the bare pods are spared and nothing is lost.
async fn permission_removed(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    bed.one_node_two_free_pods().await?;
    let originals = bare_pods(&bed, "batch").await?;
    let e = bed.extender(&["--requeue"]).await?;
    bed.schedule_with(&[bed.entry(e)]).await?;
    // node-2 holds a worker its ReplicaSet recreates: the one victim that loses nothing.
    bed.nodes(&["node-2"], 4000).await?;
    cluster::create(&bed.client, cluster::replica_set("batch", "worker", 1, "free", 3000)).await?;
    bed.until_running("batch", 3).await?;
    bed.plane.kubectl(&["delete", "clusterrolebinding", "coloc-extender-requeue"])?;
    coloc_testbed::wait::until(MINUTE, "the extender to find requeue unavailable", || async {
        let ready = bed.extenders[e].get("/readyz").await.map_err(|e| e.to_string())?;
        ready.contains("requeue: unavailable").then_some(()).ok_or(ready)
    })
    .await?;
    crate::scenarios::online(&bed, "web", 3000).await?;
    let node = crate::scenarios::online_placed(&bed, "web").await?;
    anyhow::ensure!(node == "node-2", "web placed on {node}, not where the worker made room\n{}", bed.logs());
    let pods = cluster::pods(&bed.client, Some("batch")).await?;
    for (name, uid) in &originals {
        anyhow::ensure!(
            pods.iter().any(|p| p.metadata.uid.as_deref() == Some(uid) && p.metadata.deletion_timestamp.is_none()),
            "{name} was evicted although its copy could not be stored and a worker made room\n{}",
            bed.logs()
        );
    }
    anyhow::ensure!(!pods.iter().any(is_replacement), "a copy exists although the permission was removed");
    nothing_lost(&bed, "batch", &originals).await?;
    bed.finish()
}

/// The Warning Events `reason` on the extender's own pod, in the install namespace.
async fn replica_events(bed: &Bed, pod: &str, reason: &str) -> anyhow::Result<Vec<String>> {
    let events: kube::Api<k8s_openapi::api::events::v1::Event> =
        kube::Api::namespaced(bed.client.clone(), coloc_testbed::control_plane::INSTALL_NAMESPACE);
    Ok(events
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason) && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(pod)
        })
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter_map(|e| e.note)
        .collect())
}

/// A policy file broken before a restart: the replica serves the built-in default in
/// shadow mode and records a Warning `PolicyInvalid` on its own pod; fixed, it takes the
/// file; broken again, it keeps the last good policy and says so the same way.
async fn policy_refused(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    let path = bed.plane.dir().join("policy.yaml");
    std::fs::write(&path, "defaultClass: a\nclasses: [{name: a, preempts: [ghost]}]\n")?;
    let path_arg = path.display().to_string();
    let e = bed.extender(&["--events", "--events-min-interval", "1s", "--policy", &path_arg]).await?;
    let pod = bed.extenders[e].proc.name.clone();
    let notes = coloc_testbed::wait::until(MINUTE, "a PolicyInvalid Event at start", || async {
        let notes = replica_events(&bed, &pod, "PolicyInvalid").await.map_err(|e| e.to_string())?;
        (!notes.is_empty()).then_some(notes).ok_or("none yet".to_string())
    })
    .await?;
    anyhow::ensure!(
        notes[0].contains("ghost") && notes[0].contains("built-in default policy in shadow mode"),
        "{notes:?}"
    );
    // Fixed: taken within a few seconds.
    std::fs::copy(crate::bed::repo("policy/default.yaml"), &path)?;
    coloc_testbed::wait::until(MINUTE, "the fixed policy taken", || async {
        let ready = bed.extenders[e].get("/readyz").await.map_err(|e| e.to_string())?;
        (!ready.contains("invalid")).then_some(()).ok_or(ready)
    })
    .await?;
    // Broken again (another mistake): the last good policy stays, and an Event says so.
    std::fs::write(&path, "defaultClass: b\nclasses: [{name: a}]\n")?;
    coloc_testbed::wait::until(MINUTE, "a PolicyInvalid Event on reload", || async {
        let notes = replica_events(&bed, &pod, "PolicyInvalid").await.map_err(|e| e.to_string())?;
        notes.iter().any(|n| n.contains("last good policy stays in force")).then_some(()).ok_or(format!("{notes:?}"))
    })
    .await?;
    bed.finish()
}
