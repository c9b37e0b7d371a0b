//! Budgets are shared over time: an early arrival does not spend a PDB's last disruption
//! when requeueing a bare pod places it as well, so a later arrival whose only room is
//! behind that PDB is not forced into a violation.

use coloc_testbed::cluster::{self, PodBuilder};
use coloc_testbed::Binaries;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;

use crate::invariants::{is_replacement, uid};
use crate::scenarios::{online_placed, MINUTE};
use crate::{Bed, Case, Mode};

pub fn cases() -> Vec<Case> {
    vec![Case {
        name: "an_early_arrival_leaves_the_last_pdb_disruption_to_a_later_one_with_no_other_choice",
        run: |b, m| Box::pin(last_disruption_left(b, m)),
    }]
}

async fn disruptions_allowed(bed: &Bed, name: &str) -> anyhow::Result<i32> {
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(bed.client.clone(), "batch");
    Ok(pdbs.get(name).await?.status.and_then(|s| s.disruptions_allowed).unwrap_or(0))
}

/// node-1 and node-3 each hold one of two ReplicaSet workers (3 CPU of 4), under a PDB
/// allowing one disruption; node-2 holds two bare `free` pods. web-1 (2 CPU) fits on any
/// node by one eviction; web-2 (2 CPU) may only go to node-3.
async fn last_disruption_left(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    bed.nodes(&["node-1", "node-2", "node-3"], 4000).await?;
    bed.bound(vec![
        PodBuilder::new("batch", "free-1", "free", 1900).on("node-2"),
        PodBuilder::new("batch", "free-2", "free", 1900).on("node-2"),
    ])
    .await?;
    let e = bed.extender(&["--requeue"]).await?;
    bed.schedule_with(&[bed.entry(e)]).await?;
    cluster::create(&bed.client, cluster::pdb("batch", "workers", "workers", 1)).await?;
    cluster::create(&bed.client, cluster::replica_set("batch", "workers", 2, "offline-batch", 3000)).await?;
    let workers = bed
        .until_pods("batch", MINUTE, "a worker running on node-1 and one on node-3", |pods| {
            let on = |node: &str| {
                pods.iter()
                    .filter(|p| {
                        cluster::name(p).starts_with("workers-")
                            && cluster::node_of(p) == Some(node)
                            && cluster::phase(p) == "Running"
                    })
                    .map(uid)
                    .collect::<Vec<_>>()
            };
            let (one, three) = (on("node-1"), on("node-3"));
            if one.len() == 1 && three.len() == 1 {
                Ok([one, three].concat())
            } else {
                Err(format!("node-1 {one:?}, node-3 {three:?}"))
            }
        })
        .await?;
    coloc_testbed::wait::until(MINUTE, "the PDB allowing 1 disruption", || async {
        disruptions_allowed(&bed, "workers").await.map_err(|e| e.to_string()).and_then(|n| {
            if n == 1 {
                Ok(())
            } else {
                Err(format!("{n} allowed"))
            }
        })
    })
    .await?;

    cluster::create(&bed.client, PodBuilder::new("online", "web-1", "online-prod", 2000).build()).await?;
    let first = online_placed(&bed, "web-1").await?;
    anyhow::ensure!(first == "node-2", "web-1 placed on {first}: evicting a worker there spends the PDB's last disruption, requeueing a free pod on node-2 spends nothing");
    let pods: Vec<Pod> = cluster::pods(&bed.client, Some("batch")).await?;
    let evicted: Vec<&str> = pods
        .iter()
        .filter(|p| workers.contains(&uid(p)) && p.metadata.deletion_timestamp.is_some())
        .map(cluster::name)
        .collect();
    anyhow::ensure!(evicted.is_empty(), "workers evicted for web-1: {evicted:?}");
    // A guarded victim's replacement is stored once it is evicted: a moment after.
    bed.until_pods("batch", MINUTE, "the free pod evicted for web-1 requeued", |pods| {
        if pods.iter().any(is_replacement) {
            Ok(())
        } else {
            Err("no replacement yet".into())
        }
    })
    .await?;

    let allowed = disruptions_allowed(&bed, "workers").await?;
    anyhow::ensure!(allowed == 1, "the PDB allows {allowed} disruption(s) when web-2 arrives, not 1");
    cluster::create(&bed.client, PodBuilder::new("online", "web-2", "online-prod", 2000).only_on("node-3").build())
        .await?;
    let second = online_placed(&bed, "web-2").await?;
    anyhow::ensure!(second == "node-3", "web-2 placed on {second}");
    bed.finish()
}
