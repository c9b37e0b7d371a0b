//! No bootstrap deadlock (kubernetes#91489) in the default install: the pods that carry
//! the extender are placed by the default scheduler, which never calls it. Every
//! coloc-scheduler pod (kube-scheduler and the extender beside it) lost at once, as a node
//! pool lost or a bad rollout would do; their replacements are placed while no extender
//! runs anywhere, and so is every new pod: the routing follows coloc-scheduler, so while
//! none of its pods is left nothing waits for it. Once their containers run again, routed
//! pods are placed through the extender again. The registration is as shipped
//! (ignorable: true); the requeue controller, in pods of its own, runs throughout.
//!
//! What the test bed can show and what it cannot: no kubelet runs containers here, so the
//! pods are the Deployment's own (created by its controller, placed by the default
//! scheduler, marked Running by the kubelet stand-in), and their containers are processes
//! started from the rendered pod template, killed and started again where a kubelet would
//! stop and start them. That a real kubelet pulls the images, runs the probes and restarts
//! crashed containers is not shown.

use coloc_testbed::cluster::{self, PodBuilder};
use coloc_testbed::control_plane::INSTALL_NAMESPACE;
use coloc_testbed::{kubelet, Binaries};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::apart::{copies_placed, full_pool, in_pool, routed_pod_placed, system_nodes};
use crate::coloc_pod::{apply, default_install_with, of_deployment, start_requeue_pod, ColocPod, Template};
use crate::invariants::nothing_lost;
use crate::own_scheduler::{scheduler_name, until_routing_applies, until_routing_stops, GOVERNED};
use crate::scenarios::MINUTE;
use crate::{Bed, Case, Mode};

pub fn cases() -> Vec<Case> {
    vec![Case {
        name: "deadlock_every_coloc_scheduler_pod_lost_at_once_comes_back_and_places_pods_again",
        run: |b, m| Box::pin(every_replica_lost(b, m)),
    }]
}

/// The running pods of coloc-scheduler's Deployment, each placed by the default scheduler.
async fn placed_by_the_default_scheduler(bed: &Bed, not: &[String]) -> anyhow::Result<Vec<Pod>> {
    bed.until_pods(INSTALL_NAMESPACE, MINUTE, "coloc-scheduler's pods placed and running", |pods| {
        let new: Vec<Pod> = pods
            .iter()
            .filter(|p| of_deployment(p, "coloc-scheduler"))
            .filter(|p| p.metadata.deletion_timestamp.is_none() && !not.contains(&uid(p)))
            .filter(|p| cluster::phase(p) == "Running" && cluster::node_of(p).is_some())
            .cloned()
            .collect();
        if new.len() < 2 {
            return Err(format!("{} placed and running", new.len()));
        }
        match new.iter().find(|p| scheduler_name(p) != "default-scheduler") {
            Some(p) => Err(format!("{} names {}", cluster::name(p), scheduler_name(p))),
            None => Ok(new),
        }
    })
    .await
}

fn uid(p: &Pod) -> String {
    p.metadata.uid.clone().unwrap_or_default()
}

/// The rendered install (requeue on) applied whole, its Deployment's pods placed by the
/// default scheduler and their containers running; a routed pod placed through the
/// extender. Then every container killed and every pod deleted at once: the new pods are
/// placed while no extender runs (even with the install's own namespace labelled for
/// routing: their class is never routed); once the classes coloc-scheduler published are
/// gone with its pods, a pod created meanwhile is the default scheduler's and is placed
/// (its victim comes back too); the containers start again, the routing with them, and a
/// routed pod is placed through the extender.
async fn every_replica_lost(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up_without_install(bins, mode, kubelet::Options::default()).await?;
    system_nodes(&bed, &["system-1", "system-2"]).await?;
    bed.schedule_with(&[]).await?;
    let objects = default_install_with(&bed, &["requeue"])?;
    apply(&bed, &objects, "install")?;
    let namespaces: Api<Namespace> = Api::all(bed.client.clone());
    for ns in ["online", "batch", INSTALL_NAMESPACE] {
        let label = json!({"metadata": {"labels": {GOVERNED.0: GOVERNED.1}}});
        namespaces.patch(ns, &PatchParams::default(), &Patch::Merge(&label)).await?;
    }
    let template = Template::of(&objects)?;
    let first = placed_by_the_default_scheduler(&bed, &[]).await?;
    for p in &first {
        let pod = ColocPod::start(&bed, &template, cluster::name(p), &["--mode", "enforce"]).await?;
        bed.coloc.push(pod);
    }
    bed.requeue.push(start_requeue_pod(&bed, &objects, "coloc-requeue-0").await?);
    // The pods created from here on are routed, their copies too (a copy keeps its
    // original's scheduler).
    until_routing_applies(&bed, "batch").await?;
    let originals = full_pool(&bed, 3).await?;
    routed_pod_placed(&bed, "web-1").await?;
    nothing_lost(&bed, "batch", &originals).await?;

    // Every replica at once: every container killed, every pod deleted.
    for pod in &mut bed.coloc {
        pod.kill();
    }
    let pods: Api<Pod> = Api::namespaced(bed.client.clone(), INSTALL_NAMESPACE);
    let now = DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
    pods.delete_collection(&now, &ListParams::default().labels("app.kubernetes.io/name=coloc-scheduler")).await?;
    let gone: Vec<String> = first.iter().map(uid).collect();
    // Their replacements are placed by the default scheduler, with no extender running.
    let second = placed_by_the_default_scheduler(&bed, &gone).await?;
    anyhow::ensure!(second.len() >= 2, "{} replacements", second.len());
    // The classes they published went with them: a pod created now is the default
    // scheduler's, and is placed rather than left waiting for a scheduler that is not there.
    until_routing_stops(&bed, "online").await?;
    cluster::create(&bed.client, in_pool(PodBuilder::new("online", "web-2", "online-prod", 2000))).await?;
    let web = bed
        .until_pods("online", MINUTE, "web-2 placed with no coloc-scheduler running", |pods| {
            pods.iter()
                .find(|p| cluster::name(p) == "web-2" && cluster::node_of(p).is_some())
                .cloned()
                .ok_or("pending".into())
        })
        .await?;
    anyhow::ensure!(scheduler_name(&web) == "default-scheduler", "web-2: {}", scheduler_name(&web));

    // Their containers run in the replacement pods (here: processes started anew from the
    // template, their counters from zero): the routing comes back with them.
    bed.coloc.clear();
    for p in &second {
        let pod = ColocPod::start(&bed, &template, cluster::name(p), &["--mode", "enforce"]).await?;
        bed.coloc.push(pod);
    }
    until_routing_applies(&bed, "online").await?;
    routed_pod_placed(&bed, "web-3").await?;
    let asked = preempts(&bed).await?;
    anyhow::ensure!(asked >= 1.0, "web-3 was placed without the extender (preempt calls {asked})");
    nothing_lost(&bed, "batch", &originals).await?;
    copies_placed(&bed, 3).await?;
    bed.finish()
}

/// Preempt calls answered by the extenders of every coloc-scheduler pod since they started.
async fn preempts(bed: &Bed) -> anyhow::Result<f64> {
    let mut sum = 0.0;
    for pod in &bed.coloc {
        sum += pod.extender.metric_sum("coloc_requests_total", "verb=\"preempt\"").await?;
    }
    Ok(sum)
}
