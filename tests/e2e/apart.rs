//! Nodes kept apart for the workloads of a case that applies the install whole: the
//! Deployments' pods (placed by the default scheduler, run by the kubelet stand-in) go to
//! the system nodes and never take the room a scenario counts on; the workloads, and the
//! copies of them that requeue makes (which carry their node selector and tolerations),
//! go to the pool only.

use coloc_testbed::cluster::{self, PodBuilder};
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use crate::invariants::{bare_pods, is_replacement};
use crate::own_scheduler::scheduler_name;
use crate::scenarios::MINUTE;
use crate::Bed;

/// The pool's label and taint (`NoSchedule`).
const POOL: (&str, &str) = ("e2e.coloc-extender.io/pool", "workloads");

/// Roomy nodes with neither label nor taint, for the install's own pods.
pub async fn system_nodes(bed: &Bed, names: &[&str]) -> anyhow::Result<()> {
    bed.nodes(names, 8000).await
}

/// Pool nodes of `milli_cpu` each: labelled and tainted, so that only workloads land there.
pub async fn pool_nodes(bed: &Bed, names: &[&str], milli_cpu: i64) -> anyhow::Result<()> {
    let nodes = names
        .iter()
        .map(|n| {
            let mut node = serde_json::to_value(cluster::node(n, milli_cpu, 64, "zone-1"))?;
            node["metadata"]["labels"][POOL.0] = json!(POOL.1);
            node["spec"]["taints"] = json!([{"key": POOL.0, "value": POOL.1, "effect": "NoSchedule"}]);
            Ok(serde_json::from_value(node)?)
        })
        .collect::<anyhow::Result<Vec<k8s_openapi::api::core::v1::Node>>>()?;
    cluster::create_all(&bed.client, nodes).await
}

/// A workload of the pool: placed there only.
pub fn in_pool(pod: PodBuilder) -> Pod {
    pod.select(POOL.0, POOL.1).tolerate(POOL.0).build()
}

/// `full` nodes of the pool, each full with two bare free pods of batch (1500m of its
/// 4000m), and as many spare nodes with room for one copy (1600m) but not for an online
/// pod of 2000m, which only a full node can make room for by evicting one; the free pods
/// as (name, uid).
pub async fn full_pool(bed: &Bed, full: usize) -> anyhow::Result<Vec<(String, String)>> {
    let names = |prefix: &str| (1..=full).map(|i| format!("{prefix}-{i}")).collect::<Vec<_>>();
    let (nodes, spares) = (names("node"), names("spare"));
    pool_nodes(bed, &nodes.iter().map(String::as_str).collect::<Vec<_>>(), 4000).await?;
    pool_nodes(bed, &spares.iter().map(String::as_str).collect::<Vec<_>>(), 1600).await?;
    let free = nodes
        .iter()
        .enumerate()
        .flat_map(|(i, node)| {
            (1..=2)
                .map(move |j| in_pool(PodBuilder::new("batch", &format!("free-{}", 2 * i + j), "free", 1500).on(node)))
        })
        .collect();
    cluster::create_all(&bed.client, free).await?;
    bed.until_running("batch", 2 * full).await?;
    bare_pods(bed, "batch").await
}

/// Creates `web` (online, 2000m, in the pool) and waits until coloc-scheduler has placed it.
pub async fn routed_pod_placed(bed: &Bed, web: &str) -> anyhow::Result<()> {
    cluster::create(&bed.client, in_pool(PodBuilder::new("online", web, "online-prod", 2000))).await?;
    online_placed_by_coloc_scheduler(bed, web).await
}

/// Waits until `web` is placed, by coloc-scheduler.
pub async fn online_placed_by_coloc_scheduler(bed: &Bed, web: &str) -> anyhow::Result<()> {
    let placed = bed
        .until_pods("online", MINUTE, &format!("online/{web} placed"), |pods| {
            pods.iter()
                .find(|p| cluster::name(p) == web && cluster::node_of(p).is_some())
                .cloned()
                .ok_or("pending".into())
        })
        .await?;
    anyhow::ensure!(scheduler_name(&placed) == "coloc-scheduler", "{web}: {:?}", scheduler_name(&placed));
    Ok(())
}

/// Waits until `n` copies of the bare pods of batch are placed.
pub async fn copies_placed(bed: &Bed, n: usize) -> anyhow::Result<Vec<Pod>> {
    bed.until_pods("batch", MINUTE, &format!("{n} copies placed"), |pods| {
        let placed: Vec<Pod> =
            pods.iter().filter(|p| is_replacement(p) && cluster::node_of(p).is_some()).cloned().collect();
        (placed.len() >= n)
            .then_some(placed)
            .ok_or(format!("{} placed", pods.iter().filter(|p| is_replacement(p)).count()))
    })
    .await
}
