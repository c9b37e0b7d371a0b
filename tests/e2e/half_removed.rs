//! A half-removed install never leaves pods unplaced, and routing that stops says so. The
//! rendered install (with the routing check) applied whole, coloc-scheduler running (its
//! containers as processes) and routing the labelled namespaces, which its check says.
//! The routing policy deleted and applied again: the API server still reads the classes
//! (the parameter keeper holds its cache), so when the Deployment is deleted the classes
//! it published go with its pods, and a new pod of a labelled namespace is placed by the
//! default scheduler instead of waiting for a scheduler that is gone. Then the routing's
//! objects all deleted and applied again while no classes were published, as a reinstall
//! does: the API server's parameter cache stops with no classes in it, and once the
//! Deployment runs again routing is still off. Its check says so (coloc_routing_in_effect
//! 0) and a pod left to the default scheduler meanwhile carries the Warning `NotRouted`.
//! Then the whole install namespace deleted: new pods placed by the default scheduler.

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
        name: "half_removed_coloc_scheduler_deleted_or_its_namespace_new_pods_are_placed_by_the_default_scheduler_and_routing_off_is_said",
        run: |b, m| Box::pin(half_removed(b, m)),
    }]
}

/// Starts the containers of every running coloc-scheduler pod (their routing checked every
/// second).
async fn coloc_scheduler_started(bed: &mut Bed, template: &Template) -> anyhow::Result<()> {
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
        let pod = ColocPod::start(bed, template, &name, &["--mode", "enforce", "--check-routing-every", "1s"]).await?;
        bed.coloc.push(pod);
    }
    Ok(())
}

/// Until each replica's routing check says `in_effect` (1) or not (0).
async fn routing_said(bed: &Bed, in_effect: f64) -> anyhow::Result<()> {
    coloc_testbed::wait::until(MINUTE, &format!("coloc_routing_in_effect {in_effect} on every replica"), || async {
        for pod in &bed.coloc {
            let said = pod.extender.metric_sum("coloc_routing_in_effect", "").await.map_err(|e| e.to_string())?;
            if said != in_effect {
                return Err(format!("{said}"));
            }
        }
        Ok(())
    })
    .await
}

/// The routing's objects (its policy, binding and parameter keeper) deleted, and applied
/// again `after` the API server took the deletion in.
fn routing_deleted_and_applied_again(bed: &Bed, objects: &[Value], names: &[&str]) -> anyhow::Result<()> {
    let again: Vec<Value> = objects
        .iter()
        .filter(|o| o["kind"].as_str().is_some_and(|k| k.starts_with("MutatingAdmissionPolicy")))
        .filter(|o| names.iter().any(|n| o["metadata"]["name"] == *n))
        .cloned()
        .collect();
    for o in &again {
        bed.plane.kubectl(&[
            "delete",
            &o["kind"].as_str().unwrap_or_default().to_lowercase(),
            o["metadata"]["name"].as_str().unwrap_or_default(),
        ])?;
    }
    // The API server looks at its policies every second; under load (CI runs two cases at
    // once) it has taken longer than 3 s to take a deletion in, and the objects applied
    // again then keep its cache running.
    std::thread::sleep(std::time::Duration::from_secs(10));
    apply(bed, &again, "routing-again")?;
    Ok(())
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
    let objects = default_install_with(&bed, &["routing-check"])?;
    apply(&bed, &objects, "install")?;
    let namespaces: Api<Namespace> = Api::all(bed.client.clone());
    for ns in ["online", "batch"] {
        let label = json!({"metadata": {"labels": {GOVERNED.0: GOVERNED.1}}});
        namespaces.patch(ns, &PatchParams::default(), &Patch::Merge(&label)).await?;
    }
    let template = Template::of(&objects)?;
    coloc_scheduler_started(&mut bed, &template).await?;
    until_routing_applies(&bed, "online").await?;
    routing_said(&bed, 1.0).await?;
    placed_by(&bed, "web-1", "coloc-scheduler").await?;

    // The routing policy deleted and applied again: the keeper keeps the API server
    // reading the classes, so it sees them go with the Deployment (its pods with it,
    // their containers stop).
    routing_deleted_and_applied_again(&bed, &objects, &["coloc-scheduler"])?;
    until_routing_applies(&bed, "online").await?;
    bed.plane.kubectl(&["-n", INSTALL_NAMESPACE, "delete", "deployment", "coloc-scheduler"])?;
    for pod in &mut bed.coloc {
        pod.kill();
    }
    bed.coloc.clear();
    until_routing_stops(&bed, "online").await?;
    placed_by(&bed, "web-2", "default-scheduler").await?;

    // Every object of the routing deleted and applied again while no classes are
    // published (a reinstall): the API server's cache of them stops, empty. The Deployment
    // back, its containers running and publishing: routing stays off, and is said to be.
    routing_deleted_and_applied_again(&bed, &objects, &["coloc-scheduler", "coloc-extender-classes-keeper"])?;
    let deployment: Vec<Value> = vec![find(&objects, "Deployment", "coloc-scheduler")?.clone()];
    apply(&bed, &deployment, "deployment-again")?;
    coloc_scheduler_started(&mut bed, &template).await?;
    routing_said(&bed, 0.0).await?;
    placed_by(&bed, "web-4", "default-scheduler").await?;
    coloc_testbed::wait::until(MINUTE, "the Warning NotRouted on web-4", || async {
        let events = bed
            .plane
            .kubectl(&["-n", "online", "get", "events", "--field-selector", "reason=NotRouted", "-o", "name"])
            .map_err(|e| e.to_string())?;
        let describe = bed.plane.kubectl(&["-n", "online", "describe", "pod", "web-4"]).map_err(|e| e.to_string())?;
        (!events.trim().is_empty() && describe.contains("NotRouted")).then_some(()).ok_or(describe)
    })
    .await?;

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
