//! Beside kube-scheduler the pod's ServiceAccount is coloc-scheduler's, and the extender
//! acts as its own identities with it (impersonation). The admission policies judge the
//! identity acted as, so they hold exactly as for a standalone replica; coloc-scheduler
//! may act as those identities and nobody else, and its own writes are held by the marks
//! policy like anyone's. On a real API server, with the rendered install (requeue and
//! wake on) and its RBAC as rendered.

use coloc_extender::requeue::{replacement, RequeueIntent, FROM_UID, GATE};
use coloc_extender::wake;
use coloc_testbed::cluster::PodBuilder;
use coloc_testbed::control_plane::{service_account, INSTALL_NAMESPACE};
use coloc_testbed::{kubelet, Binaries};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use serde_json::json;

use crate::coloc_pod::{apply, default_install_with, without};
use crate::privilege::{acting_as, json_patch, refused, CREATE, DELETE, MARK_ANNOTATIONS, NO_GRANT, PLACEHOLDER};
use crate::scenarios::MINUTE;
use crate::{Bed, Case, Mode};

pub fn cases() -> Vec<Case> {
    vec![Case {
        name: "acting_as_coloc_schedulers_pod_writes_as_the_extenders_identities_and_admission_holds_them_as_before",
        run: |b, m| Box::pin(held_as_before(b, m)),
    }]
}

/// A request as `kubeconfig`'s user acting as `user` was refused for impersonation.
fn impersonation_refused<T>(what: &str, result: Result<T, kube::Error>) -> anyhow::Result<()> {
    match result {
        Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains("cannot impersonate") => Ok(()),
        Ok(_) => anyhow::bail!("{what}: allowed, should have been refused"),
        Err(e) => anyhow::bail!("{what}: refused, but not for impersonation: {e}"),
    }
}

/// The mode does not reach admission or RBAC.
async fn held_as_before(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let bed = Bed::up_without_install(bins, mode, kubelet::Options::default()).await?;
    let objects = default_install_with(&bed, &["requeue", "wake"])?;
    apply(&bed, &without(&objects, &["Deployment"]), "install")?;
    let pod = bed.plane.kubeconfig_of(INSTALL_NAMESPACE, "coloc-scheduler");
    let user = |name: &str| service_account(INSTALL_NAMESPACE, name);
    let ext = acting_as(&pod, &user("coloc-extender")).await?;
    let copier = acting_as(&pod, &user("coloc-extender-requeue")).await?;
    let waker = acting_as(&pod, &user("coloc-extender-wake")).await?;

    // An original and a stranger in batch (opted in to copies).
    let admin: Api<Pod> = Api::namespaced(bed.client.clone(), "batch");
    let original =
        admin.create(&PostParams::default(), &PodBuilder::new("batch", "free-1", "free", 100).build()).await?;
    admin.create(&PostParams::default(), &PodBuilder::new("batch", "stranger", "free", 100).build()).await?;
    let intent = RequeueIntent {
        namespace: "batch".into(),
        name: "free-1".into(),
        uid: original.metadata.uid.clone().unwrap_or_default(),
        node: "node-1".into(),
        replacement: "free-1-rq-0000000001".into(),
        attempt: 1,
        preemptor: "online/web-1".into(),
    };
    let copy: Pod = serde_json::from_value(replacement::build(&serde_json::to_value(&original)?, &intent)?)?;

    // As the requeue identity: a copy, nothing else (the policies load a moment after).
    let copies: Api<Pod> = Api::namespaced(copier, "batch");
    let plain = PodBuilder::new("batch", "plain", "free", 100).build();
    let dry = PostParams { dry_run: true, ..Default::default() };
    coloc_testbed::wait::until(MINUTE, "the policies enforced", || async {
        match copies.create(&dry, &plain).await {
            Err(e) if e.to_string().contains(CREATE) => Ok(()),
            other => Err(format!("{:?}", other.map(|p| p.metadata.name))),
        }
    })
    .await?;
    let made = copies
        .create(&PostParams::default(), &copy)
        .await
        .map_err(|e| anyhow::anyhow!("a copy, as coloc-scheduler acting as the requeue identity: {e}"))?;
    refused("a plain pod as the requeue identity", CREATE, copies.create(&PostParams::default(), &plain).await)?;

    // As the extender's own identity: its release and deletion of the copy, nothing else.
    let made_uid = made.metadata.uid.clone().unwrap_or_default();
    let release = json!([
        {"op": "test", "path": "/metadata/uid", "value": made_uid},
        {"op": "test", "path": "/spec/schedulingGates", "value": [{"name": GATE}]},
        {"op": "replace", "path": "/spec/schedulingGates", "value": []},
    ]);
    json_patch(&ext, "batch", "free-1-rq-0000000001", release)
        .await
        .map_err(|e| anyhow::anyhow!("releasing a copy, as coloc-scheduler acting as coloc-extender: {e}"))?;
    let pods: Api<Pod> = Api::namespaced(ext.clone(), "batch");
    refused("delete another pod as the extender", DELETE, pods.delete("stranger", &DeleteParams::default()).await)?;
    refused("a copy as the extender's own identity", NO_GRANT, pods.create(&PostParams::default(), &copy).await)?;
    let own = DeleteParams {
        preconditions: Some(Preconditions { uid: Some(made_uid), resource_version: None }),
        ..Default::default()
    };
    pods.delete("free-1-rq-0000000001", &own)
        .await
        .map_err(|e| anyhow::anyhow!("deleting its copy was refused: {e}"))?;

    // As the wake identity: a placeholder as wake builds it, in the install namespace.
    let placeholders: Api<Pod> = Api::namespaced(waker, INSTALL_NAMESPACE);
    placeholders
        .create(&dry, &serde_json::from_value(wake::placeholder(INSTALL_NAMESPACE))?)
        .await
        .map_err(|e| anyhow::anyhow!("a placeholder, as coloc-scheduler acting as the wake identity: {e}"))?;
    let mut running = wake::placeholder(INSTALL_NAMESPACE);
    running["spec"]["containers"][0]["command"] = json!(["sh", "-c", "id"]);
    refused(
        "a placeholder with a command",
        PLACEHOLDER,
        placeholders.create(&dry, &serde_json::from_value(running)?).await,
    )?;

    // Nobody else: not the uninstall Job's identity, another ServiceAccount of the
    // namespace, or a user.
    for user in [
        service_account(INSTALL_NAMESPACE, "coloc-extender-uninstall"),
        service_account(INSTALL_NAMESPACE, "default"),
        "alice".to_string(),
    ] {
        let other: Api<Pod> = Api::namespaced(acting_as(&pod, &user).await?, "batch");
        impersonation_refused(&format!("coloc-scheduler acting as {user}"), other.list(&Default::default()).await)?;
    }
    // The standalone topology's subject (coloc-extender itself) may not act as the requeue
    // identity here: the binding names the pods that run the extender.
    let requeue = service_account(INSTALL_NAMESPACE, "coloc-extender-requeue");
    let standalone: Api<Pod> = Api::namespaced(acting_as(&bed.plane.extender_kubeconfig, &requeue).await?, "batch");
    impersonation_refused("coloc-extender acting as the requeue identity", standalone.create(&dry, &copy).await)?;

    // coloc-scheduler's own writes (kube-scheduler's: pod status, bindings) are held by the
    // marks policy like anyone's.
    let scheduler: Api<Pod> = Api::namespaced(coloc_testbed::control_plane::client_from(&pod).await?, "batch");
    let claim = json!({"metadata": {"annotations": {FROM_UID: "any"}}});
    // The marks policy loads on its own, apart from the one waited for above: a dry run
    // until it holds (a minute, then this fails as the write below would).
    let dry_patch = PatchParams { dry_run: true, ..Default::default() };
    coloc_testbed::wait::until(MINUTE, "the marks policy enforced", || async {
        match scheduler.patch_status("stranger", &dry_patch, &Patch::Merge(&claim)).await {
            Err(e) if e.to_string().contains(MARK_ANNOTATIONS) => Ok(()),
            other => Err(format!("{:?}", other.map(|p| p.metadata.name))),
        }
    })
    .await?;
    refused(
        "a mark added through pods/status as coloc-scheduler",
        MARK_ANNOTATIONS,
        scheduler.patch_status("stranger", &PatchParams::default(), &Patch::Merge(claim)).await,
    )?;
    bed.finish()
}
