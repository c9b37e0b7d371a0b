//! Nodes kept apart for the workloads of a case that applies the install whole: the
//! Deployments' pods (placed by the default scheduler, run by the kubelet stand-in) go to
//! the system nodes and never take the room a scenario counts on; the workloads, and the
//! copies of them that requeue makes (which carry their node selector and tolerations),
//! go to the pool only.

use coloc_testbed::cluster::{self, PodBuilder};
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

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
