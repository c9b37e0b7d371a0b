//! Wake works in ordinary clusters: a pod kube-scheduler parked because the extender could
//! not answer its preempt call is woken once the extender is back (a placeholder stored and
//! deleted, admitted by the shipped policies), where the cluster has a `globalDefault`
//! PriorityClass, where the install namespace's `default` ServiceAccount has pull secrets
//! (admission ServiceAccount on), and where the install namespace enforces Pod Security
//! `restricted`. Each fails with the placeholder refused: the pod then waits for
//! kube-scheduler's own five minutes.

use std::time::Duration;

use coloc_testbed::cluster::{self, PodBuilder};
use coloc_testbed::control_plane::{Options, INSTALL_NAMESPACE};
use coloc_testbed::{Binaries, ExtenderEntry};
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::privilege::CREATE;
use crate::scenarios::MINUTE;
use crate::shipped_admission::{self, as_user, dry};
use crate::{Bed, Case, Mode};

pub fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "wake_a_parked_pod_is_woken_where_a_priority_class_is_the_global_default",
            run: |b, m| Box::pin(parked_pod_woken(b, m, Cluster::GlobalDefaultPriority)),
        },
        Case {
            name: "wake_a_parked_pod_is_woken_where_the_default_service_account_has_pull_secrets",
            run: |b, m| Box::pin(parked_pod_woken(b, m, Cluster::PullSecrets)),
        },
        Case {
            name: "wake_a_parked_pod_is_woken_where_the_install_namespace_enforces_restricted",
            run: |b, m| Box::pin(parked_pod_woken(b, m, Cluster::Restricted)),
        },
    ]
}

/// What makes the cluster an ordinary one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cluster {
    /// A PriorityClass with `globalDefault: true`: the Priority admission plugin fills
    /// `priorityClassName` and `priority` into every pod that names none.
    GlobalDefaultPriority,
    /// The install namespace's `default` ServiceAccount has `imagePullSecrets`: admission
    /// ServiceAccount copies them into every pod that runs as it.
    PullSecrets,
    /// The install namespace enforces Pod Security `restricted`.
    Restricted,
}

/// What the API server adds to a pod of the install namespace naming no class and no
/// ServiceAccount, once `cluster` holds: a dry run shows it (or the refusal).
async fn holds(bed: &Bed, cluster: Cluster) -> Result<(), String> {
    let api: Api<Pod> = Api::namespaced(bed.client.clone(), INSTALL_NAMESPACE);
    let mut plain = serde_json::to_value(PodBuilder::new(INSTALL_NAMESPACE, "probe", "free", 1).build())
        .map_err(|e| e.to_string())?;
    plain["spec"].as_object_mut().map(|s| s.remove("priorityClassName"));
    let plain: Pod = serde_json::from_value(plain).map_err(|e| e.to_string())?;
    let made = api.create(&dry(), &plain).await;
    let spec = |p: &Pod| p.spec.clone().unwrap_or_default();
    match (cluster, made) {
        (Cluster::GlobalDefaultPriority, Ok(p)) if spec(&p).priority_class_name.as_deref() == Some("everyday") => {
            Ok(())
        }
        (Cluster::PullSecrets, Ok(p)) if spec(&p).image_pull_secrets.is_some_and(|s| !s.is_empty()) => Ok(()),
        (Cluster::Restricted, Err(e)) if e.to_string().contains("violates PodSecurity \"restricted") => Ok(()),
        (_, other) => Err(format!("{cluster:?} not yet: {:?}", other.map(|p| p.spec.map(|s| s.priority_class_name)))),
    }
}

async fn make(bed: &Bed, cluster: Cluster) -> anyhow::Result<()> {
    match cluster {
        Cluster::GlobalDefaultPriority => {
            let everyday: PriorityClass = serde_json::from_value(json!({
                "metadata": {"name": "everyday"}, "value": 1000, "globalDefault": true,
                "description": "what a pod naming no class gets",
            }))?;
            cluster::create(&bed.client, everyday).await?;
        }
        Cluster::PullSecrets => {
            let secrets = json!({"imagePullSecrets": [{"name": "regcred"}]});
            Api::<ServiceAccount>::namespaced(bed.client.clone(), INSTALL_NAMESPACE)
                .patch("default", &PatchParams::default(), &Patch::Merge(secrets))
                .await?;
        }
        Cluster::Restricted => {
            let labels = json!({"metadata": {"labels": {
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/enforce-version": "latest"}}});
            Api::<Namespace>::all(bed.client.clone())
                .patch(INSTALL_NAMESPACE, &PatchParams::default(), &Patch::Merge(labels))
                .await?;
        }
    }
    Ok(())
}

/// node-1 full of two bare `free` pods; kube-scheduler calls the extender for preempt
/// only, so that its filters pass the online pod to preemption. The extender goes (SIGKILL),
/// the online pod comes: its preempt call fails and kube-scheduler parks it (unschedulable;
/// with queueing hints only an assigned pod's deletion, or five minutes, brings it back).
/// The extender comes back, its view ready: it wakes kube-scheduler, which places the pod.
async fn parked_pod_woken(bins: Binaries, mode: Mode, cluster: Cluster) -> anyhow::Result<()> {
    let opts = Options { service_account_admission: cluster == Cluster::PullSecrets, ..Default::default() };
    let mut bed = Bed::up_with(bins, mode, opts).await?;
    shipped_admission::apply(&bed.client).await?;
    make(&bed, cluster).await?;
    coloc_testbed::wait::until(MINUTE, &format!("{cluster:?} in force"), || holds(&bed, cluster)).await?;
    // The policies hold (a plain pod as the requeue identity refused; Pod Security of the
    // install namespace does not judge batch's pods).
    let copier = as_user(&bed, "system:serviceaccount:coloc-system:coloc-extender-requeue", &[]).await?;
    let copies: Api<Pod> = Api::namespaced(copier, "batch");
    let plain = PodBuilder::new("batch", "plain", "free", 100).build();
    coloc_testbed::wait::until(MINUTE, "the policies enforced", || async {
        match copies.create(&dry(), &plain).await {
            Err(e) if e.to_string().contains(CREATE) => Ok(()),
            other => Err(format!("{:?}", other.map(|p| p.metadata.name))),
        }
    })
    .await?;

    bed.one_node_two_free_pods().await?;
    let e = bed.extender(&[]).await?;
    let preempt_only = ExtenderEntry { filter: false, prioritize: false, ..bed.entry(e) };
    bed.schedule_with(&[preempt_only]).await?;
    bed.extenders[e].kill();
    cluster::create(&bed.client, PodBuilder::new("online", "web", "online-prod", 3000).build()).await?;
    bed.until_pods("online", MINUTE, "web parked by kube-scheduler", |pods| {
        let parked = pods.iter().any(|p| {
            p.status.iter().flat_map(|s| s.conditions.iter().flatten()).any(|c| {
                c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable")
            })
        });
        if parked {
            Ok(())
        } else {
            Err("not tried yet".into())
        }
    })
    .await?;
    // Long enough for kube-scheduler to have tried and moved it to its unschedulable pods.
    tokio::time::sleep(Duration::from_secs(2)).await;
    bed.extenders[e].restart().await?;
    bed.until_pods("online", MINUTE, "web placed once the extender woke kube-scheduler", |pods| {
        match pods.iter().any(cluster::is_placed) {
            true => Ok(()),
            false => Err("still parked".into()),
        }
    })
    .await?;
    let ok = bed.extenders[e].metric_sum("coloc_wakes_total", "outcome=\"ok\"").await?;
    let failed = bed.extenders[e].metric_sum("coloc_wakes_total", "outcome=\"failed\"").await?;
    anyhow::ensure!(ok >= 1.0 && failed == 0.0, "wakes: {ok} ok, {failed} failed\n{}", bed.logs());
    bed.finish()
}
