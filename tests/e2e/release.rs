//! What a copy may become, held by admission as the requeue identity writes it: never of
//! the system's classes, and where the extender publishes its classes only of one whose
//! bare victims are requeued (never an online one); released only as it stands (beyond
//! Pod Security baseline only while its namespace still opts in, never with an ephemeral
//! container added since); deleted only while gated (a released copy is a workload).

use coloc_extender::model::marks::FROM_POD;
use coloc_extender::model::marks::{NAMESPACE_BEYOND_BASELINE, NAMESPACE_OPT_IN};
use coloc_extender::policy::Policy;
use coloc_extender::routing;
use coloc_testbed::control_plane::INSTALL_NAMESPACE as HOME;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Value};

use crate::privilege::{json_patch, refused, DELETE};
use crate::scenarios::MINUTE;

const SYSTEM_CLASS: &str = "coloc-extender may create a requeue copy only below the system's classes";
const COPY_CLASS: &str = "coloc-extender may create a requeue copy only of a class whose bare victims are requeued";
const CONSENT: &str =
    "coloc-extender may release a requeue copy beyond Pod Security baseline only while its namespace opts in";
const EPHEMERAL: &str = "coloc-extender may not release a requeue copy that has ephemeral containers";

/// The release requeue sends: the gate list emptied.
fn release() -> Value {
    json!([{"op": "replace", "path": "/spec/schedulingGates", "value": []}])
}

/// `copy` (as requeue builds it, of `batch/free-1`) in namespace `ns` under another name
/// of its (`-rq-` and 10 hex digits), changed by `f`.
fn variant(copy: &Value, ns: &str, name: &str, f: &dyn Fn(&mut Value)) -> anyhow::Result<Pod> {
    let mut v = copy.clone();
    v["metadata"]["namespace"] = json!(ns);
    v["metadata"]["name"] = json!(name);
    v["metadata"]["annotations"][FROM_POD] = json!(format!("{ns}/free-1"));
    f(&mut v);
    Ok(serde_json::from_value(v)?)
}

/// `copy` named `name` in batch, of PriorityClass `class`, its priority left for the
/// Priority plugin to resolve from the class.
fn of_class(copy: &Value, name: &str, class: &str) -> anyhow::Result<Pod> {
    variant(copy, "batch", name, &|v| {
        v["spec"]["priorityClassName"] = json!(class);
        if let Some(spec) = v["spec"].as_object_mut() {
            spec.remove("priority");
        }
    })
}

pub async fn copies_are_held_as_they_stand(admin: &Client, as_requeue: &Client, copy: &Value) -> anyhow::Result<()> {
    let copies: Api<Pod> = Api::namespaced(as_requeue.clone(), "batch");
    let create = |pod: Pod| {
        let api: Api<Pod> = Api::namespaced(as_requeue.clone(), pod.metadata.namespace.as_deref().unwrap_or_default());
        async move { api.create(&PostParams::default(), &pod).await }
    };

    // Never of the system's classes: released, it would preempt anything anywhere.
    for class in ["system-node-critical", "system-cluster-critical"] {
        let critical = of_class(copy, "free-1-rq-00000000c1", class)?;
        refused(&format!("a copy of {class}"), SYSTEM_CLASS, create(critical).await)?;
    }

    // Where the extender publishes its classes, only of a class whose bare victims are
    // requeued: never online-prod (10,000), which would preempt batch anywhere once released.
    let classes: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": routing::NAME, "namespace": HOME},
        "data": routing::data_of(&Policy::builtin_default()),
    }))?;
    let maps: Api<ConfigMap> = Api::namespaced(admin.clone(), HOME);
    maps.create(&PostParams::default(), &classes).await?;
    let online = of_class(copy, "free-1-rq-00000000c3", "online-prod")?;
    let dry = PostParams { dry_run: true, ..Default::default() };
    coloc_testbed::wait::until(MINUTE, "a copy of online-prod refused once the classes are published", || async {
        let api: Api<Pod> = Api::namespaced(as_requeue.clone(), "batch");
        refused("a copy of online-prod", COPY_CLASS, api.create(&dry, &online).await).map_err(|e| e.to_string())
    })
    .await?;
    let own_class = variant(copy, "batch", "free-1-rq-00000000c4", &|_| {})?;
    copies.create(&dry, &own_class).await.map_err(|e| anyhow::anyhow!("a copy of its own class was refused: {e}"))?;
    maps.delete(routing::NAME, &DeleteParams::default()).await?;

    // Deleted only while gated.
    create(variant(copy, "batch", "free-1-rq-00000000d1", &|_| {})?).await?;
    create(variant(copy, "batch", "free-1-rq-00000000d2", &|_| {})?).await?;
    json_patch(as_requeue, "batch", "free-1-rq-00000000d2", release()).await?;
    refused(
        "deleting a released copy as the requeue identity",
        DELETE,
        copies.delete("free-1-rq-00000000d2", &DeleteParams::default()).await,
    )?;
    copies
        .delete("free-1-rq-00000000d1", &DeleteParams::default())
        .await
        .map_err(|e| anyhow::anyhow!("deleting a gated copy was refused: {e}"))?;

    // An ephemeral container added to a gated copy (by whoever may, in its namespace)
    // stops its release.
    create(variant(copy, "batch", "free-1-rq-00000000e1", &|_| {})?).await?;
    let debug = json!({"spec": {"ephemeralContainers": [{"name": "debug", "image": "registry.example/debug:1"}]}});
    Api::<Pod>::namespaced(admin.clone(), "batch")
        .patch_subresource(
            "ephemeralcontainers",
            "free-1-rq-00000000e1",
            &PatchParams::default(),
            &Patch::Strategic(debug),
        )
        .await?;
    refused(
        "releasing a copy given an ephemeral container",
        EPHEMERAL,
        json_patch(as_requeue, "batch", "free-1-rq-00000000e1", release()).await,
    )?;

    // Beyond baseline, released only while the namespace still opts in beyond it.
    let (opt_in, enabled) = NAMESPACE_OPT_IN;
    let (beyond, on) = NAMESPACE_BEYOND_BASELINE;
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "beyond", "labels": {opt_in: enabled, beyond: on}}}))?;
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    namespaces.create(&PostParams::default(), &ns).await?;
    let host_port = variant(copy, "beyond", "free-1-rq-00000000f1", &|v| {
        v["spec"]["containers"][0]["ports"] = json!([{"containerPort": 80, "hostPort": 8080}]);
    })?;
    create(host_port).await.map_err(|e| anyhow::anyhow!("a copy beyond baseline where its namespace opts in: {e}"))?;
    let set = |value: Value| Patch::Merge(json!({"metadata": {"labels": {beyond: value}}}));
    namespaces.patch("beyond", &PatchParams::default(), &set(Value::Null)).await?;
    refused(
        "releasing a copy beyond baseline once its namespace withdrew",
        CONSENT,
        json_patch(as_requeue, "beyond", "free-1-rq-00000000f1", release()).await,
    )?;
    namespaces.patch("beyond", &PatchParams::default(), &set(json!(on))).await?;
    json_patch(as_requeue, "beyond", "free-1-rq-00000000f1", release())
        .await
        .map_err(|e| anyhow::anyhow!("releasing it with the consent given again: {e}"))?;
    Ok(())
}
