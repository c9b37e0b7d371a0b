//! The cluster every run shares: a control plane without controllers (nothing to
//! reconcile: pods are created directly), the default policy's PriorityClasses, the
//! shipped RBAC for the extender, N nodes and M offline pods bound to them. Each run then
//! gets its own K pending online pods.

use std::time::{Duration, Instant};

use coloc_testbed::cluster::{self, PodBuilder};
use coloc_testbed::control_plane::Options;
use coloc_testbed::prepared;
use coloc_testbed::{Binaries, ControlPlane};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client};

pub const ONLINE: &str = prepared::ONLINE;
pub const OFFLINE: &str = prepared::BATCH;
/// Node size: 32 CPU, 128 GiB, 110 pods. Online pods ask 10m, offline 100m (64 MiB each),
/// so that every pod fits and only the scheduling loop is timed.
const NODE_MILLI_CPU: i64 = 32_000;
const ONLINE_MILLI_CPU: i64 = 10;
const OFFLINE_MILLI_CPU: i64 = 100;

pub struct World {
    pub client: Client,
    pub plane: ControlPlane,
    pub create_concurrency: usize,
    nodes: usize,
}

fn node_name(i: usize) -> String {
    format!("node-{i:05}")
}

/// A control plane without controllers (nothing to reconcile: pods are created directly),
/// prepared as `prepared::start` does, with `manifests` (the extender's RBAC) applied.
pub async fn control_plane(bins: &Binaries, manifests: &[&str]) -> anyhow::Result<(ControlPlane, Client)> {
    prepared::start(bins, Options { controllers: false, ..Options::default() }, manifests).await
}

impl World {
    /// Starts the control plane and creates everything but the online pods.
    pub async fn build(
        bins: &Binaries,
        nodes: usize,
        offline_pods: usize,
        create_concurrency: usize,
    ) -> anyhow::Result<World> {
        let (plane, client) = control_plane(bins, &prepared::BASE_RBAC).await?;
        let world = World { client, plane, create_concurrency, nodes };
        let t = Instant::now();
        let node_objects =
            (0..nodes).map(|i| cluster::node(&node_name(i), NODE_MILLI_CPU, 128, &format!("zone-{}", i % 3))).collect();
        cluster::create_all_with(&world.client, node_objects, create_concurrency).await?;
        eprintln!("coloc-loop: {nodes} nodes in {:.1} s", t.elapsed().as_secs_f64());
        let t = Instant::now();
        // Bound directly (spec.nodeName): kube-scheduler and the extender count them as
        // placed; round-robin so every node carries the same load.
        let offline: Vec<Pod> = (0..offline_pods)
            .map(|i| {
                PodBuilder::new(OFFLINE, &format!("offline-{i:06}"), "offline-batch", OFFLINE_MILLI_CPU)
                    .on(&node_name(i % nodes.max(1)))
                    .build()
            })
            .collect();
        cluster::create_all_with(&world.client, offline, create_concurrency).await?;
        eprintln!("coloc-loop: {offline_pods} bound offline pods in {:.1} s", t.elapsed().as_secs_f64());
        Ok(world)
    }

    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// Deletes the previous run's online pods (grace 0: gone at once, there is no kubelet)
    /// and creates `count` pending ones named after `tag`; the seconds the creation took.
    pub async fn online(&self, tag: &str, count: usize) -> anyhow::Result<f64> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ONLINE);
        api.delete_collection(
            &DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() },
            &ListParams::default(),
        )
        .await?;
        let deadline = Instant::now() + Duration::from_secs(120);
        while !api.list(&ListParams::default().limit(1)).await?.items.is_empty() {
            anyhow::ensure!(Instant::now() < deadline, "online pods not deleted after 120 s");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let t = Instant::now();
        let pods: Vec<Pod> = (0..count)
            .map(|i| PodBuilder::new(ONLINE, &format!("{tag}-{i:05}"), "online-prod", ONLINE_MILLI_CPU).build())
            .collect();
        cluster::create_all_with(&self.client, pods, self.create_concurrency).await?;
        Ok(t.elapsed().as_secs_f64())
    }
}
