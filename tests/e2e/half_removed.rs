//! A half-removed install never leaves pods unplaced. The rendered install applied whole,
//! coloc-scheduler running (its containers as processes) and routing the labelled
//! namespaces; then its Deployment deleted: the classes it published go with its pods, and a
//! new pod of a labelled namespace is placed by the default scheduler instead of waiting
//! for a scheduler that is gone. The Deployment applied again, its containers running, the
//! routing is back; then the whole install namespace deleted: the same.

use coloc_testbed::cluster::{self, PodBuilder};
use coloc_testbed::control_plane::INSTALL_NAMESPACE;
use coloc_testbed::{kubelet, Binaries};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{json, Value};

use crate::apart::{full_pool, in_pool, system_nodes};
use crate::coloc_pod::{apply, default_install_with, find, of_deployment, ColocPod, Template};
use crate::own_scheduler::{scheduler_name, until_routing_applies, until_routing_stops, GOVERNED};
use crate::scenarios::MINUTE;
use crate::{Bed, Case, Mode};

pub fn cases() -> Vec<Case> {
    vec![Case {
        name: "half_removed_coloc_scheduler_deleted_or_its_namespace_new_pods_are_placed_by_the_default_scheduler",
        run: |b, m| Box::pin(half_removed(b, m)),
    }]
}

/// Starts the containers of every running coloc-scheduler pod, until routing applies.
async fn coloc_scheduler_running(bed: &mut Bed, template: &Template) -> anyhow::Result<()> {
    let running = bed
        .until_pods(INSTALL_NAMESPACE, MINUTE, "coloc-scheduler's pods running", |pods| {
            let ours: Vec<String> = pods
                .iter()
                .filter(|p| of_deployment(p, "coloc-scheduler") && cluster::phase(p) == "Running")
                .map(|p| cluster::name(p).to_string())
                .collect();
            (ours.len() == 2).then_some(ours).ok_or("not yet".into())
        })
        .await?;
    for name in running {
        let pod = ColocPod::start(bed, template, &name, &["--mode", "enforce"]).await?;
        bed.coloc.push(pod);
    }
    until_routing_applies(bed, "online").await
}

/// A new online pod of the labelled namespace `online` (room enough: no preemption) is
/// placed, by `scheduler`.
async fn placed_by(bed: &Bed, web: &str, scheduler: &str) -> anyhow::Result<()> {
    cluster::create(&bed.client, in_pool(PodBuilder::new("online", web, "online-prod", 500))).await?;
    let placed = bed
        .until_pods("online", MINUTE, &format!("{web} placed by {scheduler}"), |pods| {
            pods.iter()
                .find(|p| cluster::name(p) == web && cluster::node_of(p).is_some())
                .cloned()
                .ok_or("pending".into())
        })
        .await?;
    anyhow::ensure!(scheduler_name(&placed) == scheduler, "{web}: {}", scheduler_name(&placed));
    Ok(())
}

async fn half_removed(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up_without_install(bins, mode, kubelet::Options::default()).await?;
    system_nodes(&bed, &["system-1", "system-2"]).await?;
    full_pool(&bed, 1).await?;
    bed.schedule_with(&[]).await?;
    let objects = default_install_with(&bed, &[])?;
    apply(&bed, &objects, "install")?;
    let namespaces: Api<Namespace> = Api::all(bed.client.clone());
    for ns in ["online", "batch"] {
        let label = json!({"metadata": {"labels": {GOVERNED.0: GOVERNED.1}}});
        namespaces.patch(ns, &PatchParams::default(), &Patch::Merge(&label)).await?;
    }
    let template = Template::of(&objects)?;
    coloc_scheduler_running(&mut bed, &template).await?;
    placed_by(&bed, "web-1", "coloc-scheduler").await?;

    // The Deployment deleted (its pods with it, their containers stop).
    bed.plane.kubectl(&["-n", INSTALL_NAMESPACE, "delete", "deployment", "coloc-scheduler"])?;
    for pod in &mut bed.coloc {
        pod.kill();
    }
    bed.coloc.clear();
    until_routing_stops(&bed, "online").await?;
    placed_by(&bed, "web-2", "default-scheduler").await?;

    // Back: the Deployment applied again, its containers running, routed again.
    let deployment: Vec<Value> = vec![find(&objects, "Deployment", "coloc-scheduler")?.clone()];
    apply(&bed, &deployment, "deployment-again")?;
    coloc_scheduler_running(&mut bed, &template).await?;

    // The install namespace deleted: everything in it goes.
    for pod in &mut bed.coloc {
        pod.kill();
    }
    bed.coloc.clear();
    namespaces.delete(INSTALL_NAMESPACE, &DeleteParams::default()).await?;
    until_routing_stops(&bed, "online").await?;
    placed_by(&bed, "web-3", "default-scheduler").await?;
    let unplaced: Vec<String> = Api::<Pod>::namespaced(bed.client.clone(), "online")
        .list(&Default::default())
        .await?
        .items
        .iter()
        .filter(|p| cluster::node_of(p).is_none())
        .map(|p| cluster::name(p).to_string())
        .collect();
    anyhow::ensure!(unplaced.is_empty(), "pods left unplaced: {unplaced:?}");
    bed.finish()
}
