//! Registration profiles: how kube-scheduler is told which pods to send for which verb.

use std::collections::BTreeSet;

use coloc_extender::model::marks::PER_POD_VERBS_MARKER as MARKER;
use coloc_testbed::cluster::{self, PodBuilder};
use coloc_testbed::{Binaries, ExtenderEntry};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};

use crate::bed::repo;
use crate::scenarios::{online, online_placed, MINUTE};
use crate::{Bed, Case, Mode};

pub fn cases() -> Vec<Case> {
    vec![Case {
        name: "per_pod_verbs_profile_sends_only_marked_offline_pods_to_filter_and_every_pod_to_preempt",
        run: |b, m| Box::pin(per_pod_verbs(b, m)),
    }]
}

/// manifests/scheduler/kube-scheduler-config-per-pod-verbs.yaml on the test bed: entry A
/// preempt for every pod, entry B filter/prioritize for pods with the marker.
fn per_pod_verbs_profile(bed: &Bed, i: usize) -> [ExtenderEntry; 2] {
    let every_pod = ExtenderEntry { filter: false, prioritize: false, ..bed.entry(i) };
    let marked = ExtenderEntry { preempt: false, managed_resources: vec![MARKER.to_string()], ..bed.entry(i) };
    [every_pod, marked]
}

fn marked(pod: &Pod) -> bool {
    let Some(spec) = &pod.spec else { return false };
    let c = &spec.containers[0].resources;
    let has = |m: &Option<std::collections::BTreeMap<String, _>>| m.as_ref().is_some_and(|m| m.contains_key(MARKER));
    c.as_ref().is_some_and(|r| has(&r.requests) && has(&r.limits))
}

/// The verbs the extender was asked about this pod (its /decisions).
async fn verbs_asked(bed: &Bed, pod: &str) -> anyhow::Result<BTreeSet<String>> {
    let text = bed.extenders[0].admin_get(&format!("/decisions?pod={pod}")).await?;
    let d: serde_json::Value = serde_json::from_str(&text)?;
    Ok(d["decisions"].as_array().into_iter().flatten().filter_map(|d| d["verb"].as_str().map(str::to_string)).collect())
}

/// The shipped MutatingAdmissionPolicy marks offline pods; online pods never reach filter or
/// prioritize, and an online pod that needs room still gets it through preempt.
async fn per_pod_verbs(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    for f in ["mutatingadmissionpolicy.yaml", "mutatingadmissionpolicybinding.yaml"] {
        bed.plane.apply(&repo(&format!("manifests/per-pod-verbs/{f}")))?;
    }
    // The classes it marks are those the extender publishes (from its policy), owned by the
    // pod it runs in: nothing is marked before.
    let dry = PostParams { dry_run: true, ..Default::default() };
    let batch: Api<Pod> = Api::namespaced(bed.client.clone(), "batch");
    let probe = PodBuilder::new("batch", "probe", "offline-batch", 100).build();
    anyhow::ensure!(!marked(&batch.create(&dry, &probe).await?), "marked with no extender running");
    let home = coloc_testbed::control_plane::INSTALL_NAMESPACE;
    let uid = crate::coloc_pod::pod_object(&bed, home, "coloc-extender-0").await?;
    bed.nodes(&["node-1", "node-2"], 4000).await?;
    let e =
        bed.extender(&["--requeue", "--publish-classes", "--pod-name", "coloc-extender-0", "--pod-uid", &uid]).await?;
    // The API server loads policies asynchronously: wait until a dry-run offline pod comes
    // back marked, and check that an online one does not.
    coloc_testbed::wait::until(MINUTE, "the marker policy active", || async {
        let made = batch.create(&dry, &probe).await.map_err(|e| e.to_string())?;
        marked(&made).then_some(()).ok_or("offline pod not marked yet".to_string())
    })
    .await?;
    let online_api: Api<Pod> = Api::namespaced(bed.client.clone(), "online");
    let made = online_api.create(&dry, &PodBuilder::new("online", "probe", "online-prod", 100).build()).await?;
    anyhow::ensure!(!marked(&made), "online pods are never marked");
    // A pod of free's priority range under a PriorityClass the policy does not name, with
    // no resources at all, gets both maps; one marked already is admitted as it was.
    cluster::create(&bed.client, cluster::priority_class("spare-capacity", 3500)).await?;
    let bare: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "probe-2", "namespace": "batch"},
        "spec": {"priorityClassName": "spare-capacity",
            "containers": [{"name": "main", "image": "registry.example/work:1"}]}
    }))?;
    cluster::until_admitted(&bed.client, "batch", &["spare-capacity"]).await?;
    anyhow::ensure!(marked(&batch.create(&dry, &bare).await?), "a free-range pod without resources is marked");
    let already = PodBuilder::new("batch", "probe-3", "free", 100).request(MARKER).build();
    let made = batch.create(&dry, &already).await?;
    anyhow::ensure!(
        made.spec.as_ref().map(|s| &s.containers[0].resources)
            == already.spec.as_ref().map(|s| &s.containers[0].resources),
        "an already marked pod is left as it was"
    );

    let profile = per_pod_verbs_profile(&bed, e);
    bed.schedule_with(&profile).await?;

    // An online pod alone: placed by kube-scheduler without one filter or prioritize call.
    online(&bed, "web-1", 500).await?;
    online_placed(&bed, "web-1").await?;
    // The view's watches count what they apply (counters registered as they start).
    let events = bed.extenders[e].metric_sum("coloc_view_events_total", "kind=\"Pod\"").await?;
    anyhow::ensure!(events > 0.0, "no Pod event counted by the view's watch");
    for verb in ["filter", "prioritize"] {
        let calls = bed.extenders[e].metric_sum("coloc_requests_total", &format!("verb=\"{verb}\"")).await?;
        anyhow::ensure!(calls == 0.0, "{calls} {verb} calls for an unmarked online pod");
    }

    // Offline workers, marked at admission: they are filtered and scored, and the marker no
    // node offers does not keep them from fitting (ignoredByScheduler).
    cluster::create(&bed.client, cluster::replica_set("batch", "workers", 3, "offline-batch", 1900)).await?;
    let workers = bed
        .until_pods("batch", MINUTE, "3 marked workers running", |pods| {
            let running: Vec<String> = pods
                .iter()
                .filter(|p| marked(p) && cluster::phase(p) == "Running")
                .map(|p| cluster::name(p).to_string())
                .collect();
            if running.len() == 3 {
                Ok(running)
            } else {
                Err(format!("{} marked and running of {}", running.len(), pods.len()))
            }
        })
        .await?;
    for verb in ["filter", "prioritize"] {
        let calls = bed.extenders[e].metric_sum("coloc_requests_total", &format!("verb=\"{verb}\"")).await?;
        anyhow::ensure!(calls > 0.0, "no {verb} call for the marked offline pods");
    }
    let asked = verbs_asked(&bed, &format!("batch/{}", workers[0])).await?;
    anyhow::ensure!(asked.contains("filter"), "batch/{}: asked {asked:?}", workers[0]);

    // No node has 3000m free: the online pod is placed through preempt, the only verb it
    // is ever sent to.
    online(&bed, "web-2", 3000).await?;
    online_placed(&bed, "web-2").await?;
    let preempts = bed.extenders[e].metric_sum("coloc_requests_total", "verb=\"preempt\"").await?;
    anyhow::ensure!(preempts > 0.0, "web-2 was placed without a preempt call");
    for pod in ["online/web-1", "online/web-2"] {
        let asked = verbs_asked(&bed, pod).await?;
        anyhow::ensure!(asked.iter().all(|v| v == "preempt"), "{pod} was sent to {asked:?}");
    }
    anyhow::ensure!(
        verbs_asked(&bed, "online/web-2").await?.contains("preempt"),
        "web-2's preempt is not among its decisions"
    );

    // The extender gone (its pod deleted), the policy left behind marks nothing: no pod
    // asks for a resource no node has once nothing would take it out.
    bed.extenders[e].kill();
    Api::<Pod>::namespaced(bed.client.clone(), home)
        .delete("coloc-extender-0", &kube::api::DeleteParams { grace_period_seconds: Some(0), ..Default::default() })
        .await?;
    coloc_testbed::wait::until(MINUTE, "the marker policy idle once the extender's pod is gone", || async {
        let made = batch.create(&dry, &probe).await.map_err(|e| e.to_string())?;
        (!marked(&made)).then_some(()).ok_or("still marked".to_string())
    })
    .await?;
    bed.finish()
}
