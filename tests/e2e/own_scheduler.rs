//! The scheduler of its own, as shipped (the default install with the requeue component,
//! rendered with `kubectl kustomize`): kube-scheduler runs twice, as `default-scheduler`
//! without extenders and as a pod of coloc-scheduler, whose extender container runs beside
//! it with the pod's identity acting as its own, called on loopback as the rendered
//! configuration says; RBAC and admission policies as rendered. Pods of the governed
//! classes in labelled namespaces go to coloc-scheduler and through the extender; the rest
//! stay with the default scheduler.

use coloc_testbed::cluster::{self, PodBuilder};
use coloc_testbed::control_plane::INSTALL_NAMESPACE;
use coloc_testbed::Binaries;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

use crate::coloc_pod::{apply, default_install_with, start_requeue_pod, without, ColocPod, Template};
use crate::invariants::{bare_pods, nothing_lost};
use crate::scenarios::MINUTE;
use crate::{Bed, Case, Mode};

pub fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "own_scheduler_places_governed_pods_through_the_extender_and_leaves_the_rest_to_the_default_whose_victims_come_back",
            run: |b, m| Box::pin(own_scheduler(b, m, Routing::AdmissionPolicy)),
        },
        Case {
            name: "own_scheduler_without_the_routing_policy_governs_the_pods_that_name_it_as_before_v1_36",
            run: |b, m| Box::pin(own_scheduler(b, m, Routing::SchedulerName)),
        },
    ]
}

/// How governed pods reach coloc-scheduler.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Routing {
    /// The routing component (v1.36+): labelled namespaces' pods of governed classes.
    AdmissionPolicy,
    /// Without it (v1.33-1.35): the workload sets `schedulerName` itself.
    SchedulerName,
}

/// The label that hands a namespace's pods to coloc-scheduler.
pub const GOVERNED: (&str, &str) = ("coloc-extender.io/scheduler", "coloc-scheduler");

/// The rendered install with requeue, applied but its Deployment (the test bed runs the
/// pod's containers itself) and, without the routing, the admission policy that routes.
fn apply_install(bed: &Bed, routing: Routing) -> anyhow::Result<Vec<Value>> {
    let objects = default_install_with(bed, &["requeue"])?;
    let mut installed = without(&objects, &["Deployment"]);
    if routing == Routing::SchedulerName {
        // The routing's policies go (and the keeper of their parameter); the grants' stays,
        // or no ClusterRole of the install is admitted.
        installed.retain(|o| {
            !o["kind"].as_str().is_some_and(|k| k.starts_with("MutatingAdmissionPolicy"))
                || o["metadata"]["name"] == "coloc-extender-grants"
        });
    }
    apply(bed, &installed, "install")?;
    Ok(objects)
}

/// The API server loads admission policies asynchronously: waits until a dry-run pod of a
/// governed class in `namespace` (labelled) comes back routed.
pub async fn until_routing_applies(bed: &Bed, namespace: &str) -> anyhow::Result<()> {
    let dry = PostParams { dry_run: true, ..Default::default() };
    let api: Api<Pod> = Api::namespaced(bed.client.clone(), namespace);
    let probe = PodBuilder::new(namespace, "probe", "online-prod", 100).build();
    coloc_testbed::wait::until(MINUTE, "the routing policy active", || async {
        let made = api.create(&dry, &probe).await.map_err(|e| e.to_string())?;
        (scheduler_name(&made) == "coloc-scheduler")
            .then_some(())
            .ok_or(format!("schedulerName {:?}", scheduler_name(&made)))
    })
    .await
}

/// Waits until a dry-run pod of a governed class in `namespace` (labelled) comes back
/// with the default scheduler: nothing routes it any more.
pub async fn until_routing_stops(bed: &Bed, namespace: &str) -> anyhow::Result<()> {
    let dry = PostParams { dry_run: true, ..Default::default() };
    let api: Api<Pod> = Api::namespaced(bed.client.clone(), namespace);
    let probe = PodBuilder::new(namespace, "probe", "online-prod", 100).build();
    coloc_testbed::wait::until(MINUTE, "the routing gone with coloc-scheduler's pods", || async {
        let made = api.create(&dry, &probe).await.map_err(|e| e.to_string())?;
        (scheduler_name(&made) == "default-scheduler")
            .then_some(())
            .ok_or(format!("schedulerName {:?}", scheduler_name(&made)))
    })
    .await
}

pub fn scheduler_name(p: &Pod) -> &str {
    p.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()).unwrap_or("")
}

/// node-1 is full of two bare `free` pods; node-2 has room only for small pods. An online
/// pod of a labelled namespace, created with no schedulerName, is placed on node-1 by
/// coloc-scheduler through the extender (which requeues the victim); a pod of an
/// unlabelled namespace is placed by the default scheduler. Then the default scheduler,
/// which calls no extender, preempts the other bare pod on the shared node for a pod of
/// the unlabelled namespace: that victim comes back too.
async fn own_scheduler(bins: Binaries, mode: Mode, routing: Routing) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    let objects = apply_install(&bed, routing)?;
    let namespaces: Api<Namespace> = Api::all(bed.client.clone());
    for ns in ["online", "batch"].into_iter().filter(|_| routing == Routing::AdmissionPolicy) {
        let label = json!({"metadata": {"labels": {GOVERNED.0: GOVERNED.1}}});
        namespaces.patch(ns, &PatchParams::default(), &Patch::Merge(&label)).await?;
    }
    cluster::create(&bed.client, cluster::namespace("other")).await?;

    let dry = PostParams { dry_run: true, ..Default::default() };
    let online_api: Api<Pod> = Api::namespaced(bed.client.clone(), "online");
    let probe = PodBuilder::new("online", "probe", "online-prod", 100).build();
    // Routing follows coloc-scheduler: nothing is routed until a pod of it runs (and
    // publishes the policy's classes).
    let made = online_api.create(&dry, &probe).await?;
    anyhow::ensure!(scheduler_name(&made) == "default-scheduler", "no coloc-scheduler running: the default scheduler");
    let other: Api<Pod> = Api::namespaced(bed.client.clone(), "other");
    let made = other.create(&dry, &PodBuilder::new("other", "probe", "online-prod", 100).build()).await?;
    anyhow::ensure!(
        scheduler_name(&made) == "default-scheduler",
        "an unlabelled namespace keeps the default scheduler"
    );

    bed.one_node_two_free_pods().await?;
    cluster::create(&bed.client, cluster::node("node-2", 500, 64, "zone-1")).await?;
    let originals = bare_pods(&bed, "batch").await?;
    bed.schedule_with(&[]).await?;
    let pod = ColocPod::start(&bed, &Template::of(&objects)?, "coloc-scheduler-0", &["--mode", "enforce"]).await?;
    bed.coloc.push(pod);
    bed.requeue.push(start_requeue_pod(&bed, &objects, "coloc-requeue-0").await?);
    if routing == Routing::AdmissionPolicy {
        until_routing_applies(&bed, "online").await?;
    }

    let mut web = PodBuilder::new("online", "web", "online-prod", 1500).build();
    if routing == Routing::SchedulerName {
        // What a workload sets in its pod template where no admission policy routes it.
        web.spec.get_or_insert_with(Default::default).scheduler_name = Some("coloc-scheduler".into());
    }
    cluster::create(&bed.client, web).await?;
    cluster::create(&bed.client, PodBuilder::new("other", "plain", "online-prod", 100).build()).await?;
    let web = bed
        .until_pods("online", MINUTE, "online/web placed", |pods| {
            pods.iter().find(|p| cluster::name(p) == "web" && cluster::node_of(p).is_some()).cloned().ok_or_else(|| {
                format!("web: {:?}", pods.iter().map(|p| (cluster::name(p), cluster::node_of(p))).collect::<Vec<_>>())
            })
        })
        .await?;
    anyhow::ensure!(
        scheduler_name(&web) == "coloc-scheduler" && cluster::node_of(&web) == Some("node-1"),
        "web: {:?} on {:?}",
        scheduler_name(&web),
        cluster::node_of(&web)
    );
    let plain = bed
        .until_pods("other", MINUTE, "other/plain placed", |pods| {
            pods.iter().find(|p| cluster::node_of(p).is_some()).cloned().ok_or("not placed".to_string())
        })
        .await?;
    anyhow::ensure!(
        scheduler_name(&plain) == "default-scheduler" && cluster::node_of(&plain) == Some("node-2"),
        "plain: {:?} on {:?}",
        scheduler_name(&plain),
        cluster::node_of(&plain)
    );

    // The default scheduler preempts on the node the two schedulers share (node-1 has
    // 0.6 CPU free beside web and free-2): its victim is copied like any other.
    cluster::create(&bed.client, PodBuilder::new("other", "urgent", "online-prod", 2000).build()).await?;
    let urgent = bed
        .until_pods("other", MINUTE, "other/urgent placed", |pods| {
            pods.iter()
                .find(|p| cluster::name(p) == "urgent" && cluster::node_of(p).is_some())
                .cloned()
                .ok_or("not placed".to_string())
        })
        .await?;
    anyhow::ensure!(
        scheduler_name(&urgent) == "default-scheduler" && cluster::node_of(&urgent) == Some("node-1"),
        "urgent: {:?} on {:?}",
        scheduler_name(&urgent),
        cluster::node_of(&urgent)
    );

    // Through the extender: it answered coloc-scheduler's preempt call with one victim.
    let ext = &bed.coloc[0].extender;
    let preempts = ext.metric_sum("coloc_requests_total", "verb=\"preempt\"").await?;
    let victims = ext.metric_sum("coloc_decisions_total", "verdict=\"victim\"").await?;
    anyhow::ensure!(preempts >= 1.0 && victims >= 1.0, "preempt calls {preempts}, victims {victims}");
    nothing_lost(&bed, "batch", &originals).await?;
    // The coloc-scheduler leader holds its own lease in the install namespace.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(bed.client.clone(), INSTALL_NAMESPACE);
    anyhow::ensure!(leases.get_opt("coloc-scheduler").await?.is_some(), "no lease {INSTALL_NAMESPACE}/coloc-scheduler");
    bed.finish()
}
