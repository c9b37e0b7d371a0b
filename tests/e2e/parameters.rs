//! Parameters that cannot fail. The routing and per-pod-verbs admission policies read the
//! classes the extender publishes (the ConfigMap coloc-extender-classes). What the
//! extender's identity writes there is held to their grammar at write; and whatever the
//! ConfigMap holds (written by an admin, who is not held to it), no pod create is refused
//! because of it: a line that is not of the grammar matches nothing. per-pod-verbs marks
//! only pods the registered kube-scheduler places, never in kube-system, in a namespace
//! routed to coloc-scheduler, or of the system's classes.

use coloc_extender::model::marks::PER_POD_VERBS_MARKER as MARKER;
use coloc_extender::routing::{NAME, PER_POD_VERBS, REQUEUED, ROUTED};
use coloc_testbed::cluster::{self, PodBuilder};
use coloc_testbed::control_plane::{client_from, INSTALL_NAMESPACE as HOME};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use kube::Client;
use serde_json::json;

use crate::bed::repo;
use crate::scenarios::MINUTE;
use crate::Bed;

/// The classes policy's refusal of a line of another grammar.
const GRAMMAR: &str = "coloc-extender-classes holds one selector a line";
/// The namespace routed to coloc-scheduler.
const ROUTED_NS: &str = "routed";

/// The classes ConfigMap; `requeued` (what copies are held to) says what `per_pod_verbs` says.
fn classes(routed: &str, per_pod_verbs: &str) -> anyhow::Result<ConfigMap> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": NAME, "namespace": HOME},
        "data": {ROUTED: routed, PER_POD_VERBS: per_pod_verbs, REQUEUED: per_pod_verbs},
    }))?)
}

fn marked(pod: &Pod) -> bool {
    let requests = pod.spec.as_ref().and_then(|s| s.containers[0].resources.as_ref()).and_then(|r| r.requests.as_ref());
    requests.is_some_and(|r| r.contains_key(MARKER))
}

/// What admission makes of `pod` (a dry-run create as the admin): its scheduler and
/// whether it is marked, or the refusal.
async fn admitted(admin: &Client, pod: &Pod) -> Result<(String, bool), String> {
    let api: Api<Pod> = Api::namespaced(admin.clone(), pod.metadata.namespace.as_deref().unwrap_or_default());
    let dry = PostParams { dry_run: true, ..Default::default() };
    let made = api.create(&dry, pod).await.map_err(|e| format!("{} refused: {e}", cluster::name(pod)))?;
    let scheduler = made.spec.as_ref().and_then(|s| s.scheduler_name.clone()).unwrap_or_default();
    Ok((scheduler, marked(&made)))
}

/// The policies, the extender's grant on its ConfigMap and the classes policy stored; a
/// routed namespace; then what the extender may write, and what any value does.
pub async fn parameters_cannot_fail(bed: &Bed, admin: &Client) -> anyhow::Result<()> {
    for f in [
        "admission/validatingadmissionpolicy-classes.yaml",
        "admission/validatingadmissionpolicybinding-classes.yaml",
        "role-classes.yaml",
        "routing/mutatingadmissionpolicy.yaml",
        "routing/mutatingadmissionpolicybinding.yaml",
        "per-pod-verbs/mutatingadmissionpolicy.yaml",
        "per-pod-verbs/mutatingadmissionpolicybinding.yaml",
    ] {
        bed.plane.apply(&repo(&format!("manifests/{f}")))?;
    }
    let routed_ns: Namespace = serde_json::from_value(
        json!({"metadata": {"name": ROUTED_NS, "labels": {"coloc-extender.io/scheduler": "coloc-scheduler"}}}),
    )?;
    Api::<Namespace>::all(admin.clone()).create(&PostParams::default(), &routed_ns).await?;

    // The extender's identity: a line of another grammar refused at write; the grammar
    // admitted. Every pod of the routed namespace routed, every pod marked (a line
    // matching all), so that what is left unmarked below is left so by the guards.
    let ext = client_from(&bed.plane.extender_kubeconfig).await?;
    let maps: Api<ConfigMap> = Api::namespaced(ext, HOME);
    let dry = PostParams { dry_run: true, ..Default::default() };
    coloc_testbed::wait::until(MINUTE, "the classes' grammar enforced", || async {
        match maps.create(&dry, &classes("|", "").map_err(|e| e.to_string())?).await {
            Err(kube::Error::Api(s)) if s.message.contains(GRAMMAR) => Ok(()),
            other => Err(format!("{:?}", other.map(|m| m.metadata.name))),
        }
    })
    .await?;
    for bad in ["a|b|c|d|e", "|1|2|3|novalue", "|99999999999|1||", "|1|2||\n|"] {
        crate::privilege::refused(
            &format!("{bad:?} as the extender"),
            GRAMMAR,
            maps.create(&dry, &classes(bad, "")?).await,
        )?;
        crate::privilege::refused(
            &format!("{bad:?} as the extender, in perPodVerbs and requeued"),
            GRAMMAR,
            maps.create(&dry, &classes("", bad)?).await,
        )?;
    }
    let every = format!("|-2147483648|1000000000|{ROUTED_NS}|\nfree,offline-batch|0|10||app=x,tier=");
    maps.create(&PostParams::default(), &classes(&every, "|-2147483648|1000000000||")?)
        .await
        .map_err(|e| anyhow::anyhow!("the grammar as the extender writes it was refused: {e}"))?;
    let routed = PodBuilder::new(ROUTED_NS, "web", "free", 100).build();
    let batch = PodBuilder::new("batch", "worker", "free", 100).build();
    coloc_testbed::wait::until(MINUTE, "the classes read", || async {
        let (scheduler, _) = admitted(admin, &routed).await?;
        let (_, marked) = admitted(admin, &batch).await?;
        (scheduler == "coloc-scheduler" && marked).then_some(()).ok_or(format!("{scheduler}, marked {marked}"))
    })
    .await?;
    let unmarked = [
        ("in kube-system", PodBuilder::new("kube-system", "agent", "free", 100).build()),
        ("of a system class", PodBuilder::new("batch", "critical", "system-cluster-critical", 100).build()),
        (
            "of another scheduler",
            PodBuilder::new("batch", "own", "free", 100)
                .edit(|p| p["spec"]["schedulerName"] = json!("coloc-scheduler"))
                .build(),
        ),
        ("in a namespace routed to coloc-scheduler", routed.clone()),
    ];
    for (what, pod) in &unmarked {
        let (scheduler, marked) = admitted(admin, pod).await.map_err(anyhow::Error::msg)?;
        anyhow::ensure!(!marked, "per-pod-verbs marked a pod {what} (its scheduler: {scheduler})");
    }

    // Any value, written by whoever may (an admin): a pod of a routed namespace and one of
    // kube-system are admitted, neither routed nor marked.
    let admin_maps: Api<ConfigMap> = Api::namespaced(admin.clone(), HOME);
    let huge = format!("|-2147483648|1000000000||\n{}", "x".repeat(70_000));
    let agent = PodBuilder::new("kube-system", "agent", "free", 100).build();
    for bad in ["|", "a|b|c|d|e", "|99999999999999999999|1||", "||||", "|1|2|3|novalue", huge.as_str()] {
        admin_maps.replace(NAME, &PostParams::default(), &classes(bad, bad)?).await?;
        coloc_testbed::wait::until(MINUTE, &format!("pods admitted under {:?}", &bad[..bad.len().min(30)]), || async {
            for pod in [&routed, &batch, &agent] {
                match admitted(admin, pod).await? {
                    (scheduler, false) if scheduler == "default-scheduler" => {}
                    other => return Err(format!("{}: {other:?}", cluster::name(pod))),
                }
            }
            Ok(())
        })
        .await?;
    }
    // The policies off again: the rest of the case creates pods of its own.
    for b in ["coloc-scheduler", "coloc-extender-per-pod-verbs"] {
        bed.plane.kubectl(&["delete", "mutatingadmissionpolicybinding", b])?;
    }
    admin_maps.delete(NAME, &DeleteParams::default()).await?;
    Ok(())
}
