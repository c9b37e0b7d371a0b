//! The scheduler of its own, as shipped (manifests/scheduler-of-its-own, rendered with
//! `kubectl kustomize manifests`): kube-scheduler runs twice, as `default-scheduler`
//! without extenders and as `coloc-scheduler` with the component's configuration, flags,
//! RBAC (its ServiceAccount's identity) and admission policy. Pods of the governed
//! classes in labelled namespaces go to coloc-scheduler and through the extender; the
//! rest stay with the default scheduler.

use coloc_testbed::cluster::{self, PodBuilder};
use coloc_testbed::{Binaries, Scheduler};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

use crate::bed::repo;
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
const GOVERNED: (&str, &str) = ("coloc-extender.io/scheduler", "coloc-scheduler");

/// `kubectl kustomize manifests`, one object per document.
fn rendered(bed: &Bed) -> anyhow::Result<Vec<Value>> {
    let text = bed.plane.kubectl(&["kustomize", &repo("manifests").display().to_string()])?;
    let mut objects = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let v: Value = serde::Deserialize::deserialize(doc)?;
        if !v.is_null() {
            objects.push(v);
        }
    }
    Ok(objects)
}

fn find<'a>(objects: &'a [Value], kind: &str, name_prefix: &str) -> anyhow::Result<&'a Value> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"].as_str().is_some_and(|n| n.starts_with(name_prefix)))
        .ok_or_else(|| anyhow::anyhow!("the rendered manifests have no {kind} {name_prefix}"))
}

/// The component's KubeSchedulerConfiguration as shipped, pointed at the test bed: its
/// ServiceAccount's kubeconfig, the extender on loopback (plain HTTP; the Service's TLS is
/// not what this case shows), and this case's mode.
fn scheduler_config(objects: &[Value], bed: &Bed, url: &str) -> anyhow::Result<String> {
    let map = find(objects, "ConfigMap", "coloc-scheduler-config")?;
    let text = map["data"]["config.yaml"].as_str().ok_or_else(|| anyhow::anyhow!("no config.yaml in {map}"))?;
    let mut config: serde_yaml_ng::Value = serde_yaml_ng::from_str(text)?;
    config["clientConnection"]["kubeconfig"] = bed.plane.scheduler_kubeconfig.display().to_string().into();
    let extenders = config["extenders"].as_sequence_mut().ok_or_else(|| anyhow::anyhow!("no extenders in {text}"))?;
    anyhow::ensure!(extenders.len() == 1, "one extender registration, not {}", extenders.len());
    let e = &mut extenders[0];
    anyhow::ensure!(e["nodeCacheCapable"].as_bool() == Some(true), "the component registers names mode");
    e["urlPrefix"] = url.into();
    e["enableHTTPS"] = false.into();
    e["nodeCacheCapable"] = bed.mode.node_cache_capable().into();
    if let Some(m) = e.as_mapping_mut() {
        m.remove("tlsConfig");
    }
    Ok(serde_yaml_ng::to_string(&config)?)
}

/// The Deployment's kube-scheduler flags but --config (the test bed passes its own file),
/// with the downward-API namespace the Deployment would give them.
fn scheduler_flags(objects: &[Value]) -> anyhow::Result<Vec<String>> {
    let d = find(objects, "Deployment", "coloc-scheduler")?;
    let command = d["spec"]["template"]["spec"]["containers"][0]["command"]
        .as_array()
        .ok_or_else(|| anyhow::anyhow!("no command in the coloc-scheduler Deployment"))?;
    let namespace = d["metadata"]["namespace"].as_str().unwrap_or("kube-system");
    Ok(command
        .iter()
        .skip(1)
        .filter_map(Value::as_str)
        .filter(|f| !f.starts_with("--config"))
        .map(|f| f.replace("$(POD_NAMESPACE)", namespace))
        .collect())
}

/// The component's cluster objects: RBAC, and with the routing component the admission
/// policy with its binding.
fn apply_component(objects: &[Value], bed: &Bed, routing: Routing) -> anyhow::Result<()> {
    let mut wanted = vec!["ClusterRoleBinding", "Role", "RoleBinding"];
    if routing == Routing::AdmissionPolicy {
        wanted.extend(["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"]);
    }
    let docs: Vec<String> = objects
        .iter()
        .filter(|o| o["metadata"]["name"].as_str().is_some_and(|n| n.starts_with("coloc-scheduler")))
        .filter(|o| wanted.iter().any(|k| o["kind"] == *k))
        .map(serde_yaml_ng::to_string)
        .collect::<Result<_, _>>()?;
    let expected = if routing == Routing::AdmissionPolicy { 6 } else { 4 };
    anyhow::ensure!(
        docs.len() == expected,
        "expected 3 bindings and a role (and with routing the policy with its binding); found {}",
        docs.len()
    );
    let path = bed.plane.dir().join("scheduler-of-its-own.yaml");
    std::fs::write(&path, docs.join("---\n"))?;
    bed.plane.apply(&path)?;
    Ok(())
}

fn scheduler_name(p: &Pod) -> &str {
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
    let objects = rendered(&bed)?;
    apply_component(&objects, &bed, routing)?;
    let namespaces: Api<Namespace> = Api::all(bed.client.clone());
    for ns in ["online", "batch"].into_iter().filter(|_| routing == Routing::AdmissionPolicy) {
        let label = json!({"metadata": {"labels": {GOVERNED.0: GOVERNED.1}}});
        namespaces.patch(ns, &PatchParams::default(), &Patch::Merge(&label)).await?;
    }
    cluster::create(&bed.client, cluster::namespace("other")).await?;

    // The API server loads admission policies asynchronously: wait until a dry-run pod of
    // a governed class comes back routed.
    let dry = PostParams { dry_run: true, ..Default::default() };
    let online_api: Api<Pod> = Api::namespaced(bed.client.clone(), "online");
    let probe = PodBuilder::new("online", "probe", "online-prod", 100).build();
    if routing == Routing::AdmissionPolicy {
        coloc_testbed::wait::until(MINUTE, "the routing policy active", || async {
            let made = online_api.create(&dry, &probe).await.map_err(|e| e.to_string())?;
            (scheduler_name(&made) == "coloc-scheduler")
                .then_some(())
                .ok_or(format!("schedulerName {:?}", scheduler_name(&made)))
        })
        .await?;
    } else {
        let made = online_api.create(&dry, &probe).await?;
        anyhow::ensure!(scheduler_name(&made) == "default-scheduler", "no routing: a pod keeps the default scheduler");
    }
    let other: Api<Pod> = Api::namespaced(bed.client.clone(), "other");
    let made = other.create(&dry, &PodBuilder::new("other", "probe", "online-prod", 100).build()).await?;
    anyhow::ensure!(
        scheduler_name(&made) == "default-scheduler",
        "an unlabelled namespace keeps the default scheduler"
    );

    bed.one_node_two_free_pods().await?;
    cluster::create(&bed.client, cluster::node("node-2", 500, 64, "zone-1")).await?;
    let originals = bare_pods(&bed, "batch").await?;
    let e = bed.extender(&["--requeue"]).await?;
    bed.schedule_with(&[]).await?;
    let config = scheduler_config(&objects, &bed, &bed.extenders[e].url())?;
    let flags = scheduler_flags(&objects)?;
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let coloc = Scheduler::start_configured(&bed.plane, "coloc-scheduler", config, &flags).await?;

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
        .await
        .map_err(|e| anyhow::anyhow!("{e:#}\n--- coloc-scheduler ---\n{}", coloc.proc.log_tail(3000)))?;
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
    let ext = &bed.extenders[e];
    let preempts = ext.metric_sum("coloc_requests_total", "verb=\"preempt\"").await?;
    let victims = ext.metric_sum("coloc_decisions_total", "verdict=\"victim\"").await?;
    anyhow::ensure!(preempts >= 1.0 && victims >= 1.0, "preempt calls {preempts}, victims {victims}");
    nothing_lost(&bed, "batch", &originals).await?;
    // The coloc-scheduler leader holds its own lease in the install namespace.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(bed.client.clone(), "kube-system");
    anyhow::ensure!(leases.get_opt("coloc-scheduler").await?.is_some(), "no lease kube-system/coloc-scheduler");
    drop(coloc);
    bed.finish()
}
