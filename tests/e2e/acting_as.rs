//! The pod that runs kube-scheduler mints no pods. Beside kube-scheduler the pod's one
//! ServiceAccount is coloc-scheduler's; with it the extender acts as its own identity
//! (impersonation) and, with the wake component, as the wake identity for placeholders
//! bound to a node that cannot exist. It may act as nobody else: not the requeue identity,
//! which only the requeue controller's own pods run as. So no container of that pod can
//! create a pod that runs, lift a copy's gate or delete a copy: kube-scheduler's own roles
//! create no pod and patch none, the extender's identity writes no pod, and the requeue
//! identity is out of its reach. On a real API server, with the rendered install (requeue
//! and wake on) and its RBAC as rendered.

use coloc_extender::model::marks::{FROM_UID, GATE};
use coloc_extender::model::RequeueIntent;
use coloc_extender::requeue::replacement;
use coloc_extender::wake;
use coloc_testbed::cluster::PodBuilder;
use coloc_testbed::control_plane::{client_from, service_account, INSTALL_NAMESPACE};
use coloc_testbed::{kubelet, Binaries};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use serde_json::json;

use crate::coloc_pod::{apply, default_install_with, without};
use crate::privilege::{acting_as, json_patch, refused, CREATE, MARK_ANNOTATIONS, NO_GRANT, PLACEHOLDER};
use crate::scenarios::MINUTE;
use crate::{Bed, Case, Mode};

pub fn cases() -> Vec<Case> {
    vec![Case {
        name: "acting_as_coloc_schedulers_pod_mints_no_pods_only_the_requeue_controller_does",
        run: |b, m| Box::pin(scheduler_pod_mints_no_pods(b, m)),
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

/// RBAC's refusal of `verb` on pods.
fn no_grant_to(verb: &str) -> String {
    format!("cannot {verb} resource \"pods\"")
}

/// The mode does not reach admission or RBAC.
async fn scheduler_pod_mints_no_pods(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let bed = Bed::up_without_install(bins, mode, kubelet::Options::default()).await?;
    let objects = default_install_with(&bed, &["requeue", "wake"])?;
    apply(&bed, &without(&objects, &["Deployment"]), "install")?;
    let pod = bed.plane.kubeconfig_of(INSTALL_NAMESPACE, "coloc-scheduler");
    let user = |name: &str| service_account(INSTALL_NAMESPACE, name);
    let scheduler = client_from(&pod).await?;
    let ext = acting_as(&pod, &user("coloc-extender")).await?;
    let waker = acting_as(&pod, &user("coloc-extender-wake")).await?;
    // The requeue controller's pods run as the requeue identity itself.
    let requeue = client_from(&bed.plane.kubeconfig_of(INSTALL_NAMESPACE, "coloc-extender-requeue")).await?;

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
    let plain = PodBuilder::new("batch", "plain", "free", 100).build();
    let dry = PostParams { dry_run: true, ..Default::default() };

    // coloc-scheduler may not act as the requeue identity, nor as anyone but the
    // extender's own identity and the wake identity.
    let requeue_user = user("coloc-extender-requeue");
    for other in [requeue_user.clone(), user("coloc-extender-uninstall"), user("default"), "alice".to_string()] {
        let as_other: Api<Pod> = Api::namespaced(acting_as(&pod, &other).await?, "batch");
        impersonation_refused(&format!("coloc-scheduler acting as {other}"), as_other.create(&dry, &copy).await)?;
    }
    // Nor may the extender's own identity (the standalone topology's ServiceAccount).
    let standalone: Api<Pod> =
        Api::namespaced(acting_as(&bed.plane.extender_kubeconfig, &requeue_user).await?, "batch");
    impersonation_refused("coloc-extender acting as the requeue identity", standalone.create(&dry, &copy).await)?;

    // As the requeue controller: a copy, and nothing else (the policies load a moment after).
    let copies: Api<Pod> = Api::namespaced(requeue.clone(), "batch");
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
        .map_err(|e| anyhow::anyhow!("a copy, as the requeue controller: {e}"))?;
    let made_uid = made.metadata.uid.clone().unwrap_or_default();
    let release = json!([
        {"op": "test", "path": "/metadata/uid", "value": made_uid},
        {"op": "test", "path": "/spec/schedulingGates", "value": [{"name": GATE}]},
        {"op": "replace", "path": "/spec/schedulingGates", "value": []},
    ]);

    // Neither container of coloc-scheduler's pod can create a pod, lift the copy's gate or
    // delete it: not as kube-scheduler (its own roles), not as the extender's identity.
    let as_scheduler: Api<Pod> = Api::namespaced(scheduler.clone(), "batch");
    let as_extender: Api<Pod> = Api::namespaced(ext.clone(), "batch");
    for (who, pods, client) in [("kube-scheduler", &as_scheduler, &scheduler), ("the extender", &as_extender, &ext)] {
        refused(&format!("a plain pod as {who}"), NO_GRANT, pods.create(&dry, &plain).await)?;
        refused(&format!("a copy as {who}"), NO_GRANT, pods.create(&dry, &copy).await)?;
        refused(
            &format!("the copy's gate lifted as {who}"),
            &no_grant_to("patch"),
            json_patch(client, "batch", "free-1-rq-0000000001", release.clone()).await,
        )?;
    }
    refused(
        "the copy deleted as the extender",
        &no_grant_to("delete"),
        as_extender.delete("free-1-rq-0000000001", &DeleteParams::default()).await,
    )?;

    // The requeue controller deletes its copy while gated, and releases the next.
    let own = DeleteParams {
        preconditions: Some(Preconditions { uid: Some(made_uid), resource_version: None }),
        ..Default::default()
    };
    copies
        .delete("free-1-rq-0000000001", &own)
        .await
        .map_err(|e| anyhow::anyhow!("deleting its copy was refused: {e}"))?;
    let made = copies
        .create(&PostParams::default(), &copy)
        .await
        .map_err(|e| anyhow::anyhow!("a copy again, as the requeue controller: {e}"))?;
    let release = json!([
        {"op": "test", "path": "/metadata/uid", "value": made.metadata.uid.unwrap_or_default()},
        {"op": "replace", "path": "/spec/schedulingGates", "value": []},
    ]);
    json_patch(&requeue, "batch", "free-1-rq-0000000001", release)
        .await
        .map_err(|e| anyhow::anyhow!("releasing a copy, as the requeue controller: {e}"))?;

    // As the wake identity: a placeholder as wake builds it, in the install namespace, and
    // nothing that could run.
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

    // coloc-scheduler's own writes (kube-scheduler's: pod status, bindings) are held by the
    // marks policy like anyone's.
    let claim = json!({"metadata": {"annotations": {FROM_UID: "any"}}});
    // The marks policy loads on its own, apart from the one waited for above: a dry run
    // until it holds (a minute, then this fails as the write below would).
    let dry_patch = PatchParams { dry_run: true, ..Default::default() };
    coloc_testbed::wait::until(MINUTE, "the marks policy enforced", || async {
        match as_scheduler.patch_status("stranger", &dry_patch, &Patch::Merge(&claim)).await {
            Err(e) if e.to_string().contains(MARK_ANNOTATIONS) => Ok(()),
            other => Err(format!("{:?}", other.map(|p| p.metadata.name))),
        }
    })
    .await?;
    refused(
        "a mark added through pods/status as coloc-scheduler",
        MARK_ANNOTATIONS,
        as_scheduler.patch_status("stranger", &PatchParams::default(), &Patch::Merge(claim)).await,
    )?;
    bed.finish()
}
