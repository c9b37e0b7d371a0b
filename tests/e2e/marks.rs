//! Marks through every path: the API server's own discovery lists what it serves for pods
//! (`/api/v1`: the pod, each `pods/*` subresource, the legacy `bindings`), and for each
//! path that takes an object a tenant allowed that path tries to put a copy's marks on its
//! own pending pod: refused, or dropped by the path itself, never landed. A path the test
//! does not know fails it: a later Kubernetes adding one fails here instead of opening a
//! hole. Repairers (the group coloc-extender:mark-writers; a restore tool bound to
//! cluster-admin) may write marks; a tenant, even one granted the same verb in its own
//! namespace, may not.

use coloc_extender::model::marks::{ATTEMPT, FROM_POD, FROM_UID, GATE, LABEL};
use coloc_testbed::cluster::PodBuilder;
use coloc_testbed::control_plane::Options;
use coloc_testbed::Binaries;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, PostParams};
use kube::Client;
use serde_json::{json, Value};

use crate::bed::repo;
use crate::privilege::{refused, MARK_ANNOTATIONS, MARK_LABELS};
use crate::scenarios::MINUTE;
use crate::shipped_admission::{self, as_user, dry};
use crate::{Bed, Case, Mode};

pub fn cases() -> Vec<Case> {
    vec![Case {
        name: "privilege_marks_are_refused_through_every_path_discovery_serves_and_repairers_may_write_them",
        run: |b, m| Box::pin(every_path(b, m)),
    }]
}

/// How a path of discovery is tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// Create a pod carrying a mark; patch one onto a pod.
    Pod,
    /// A merge patch of the pod's status with a mark in its metadata.
    Status,
    /// A Binding with a mark, through the pod's binding subresource.
    PodBinding,
    /// A Binding with a mark, through the legacy namespaced bindings resource.
    Bindings,
    /// A patch adding an ephemeral container, a mark in its metadata.
    EphemeralContainers,
    /// A patch resizing a container, a mark in its metadata.
    Resize,
    /// An Eviction carrying a mark.
    Eviction,
    /// A stream or a read (attach, exec, port-forward, proxy, log): no object is written.
    NoObject,
}

/// Every path of `/api/v1` that concerns pods, as v1.36 serves them.
const KNOWN: [(&str, Path); 12] = [
    ("pods", Path::Pod),
    ("pods/status", Path::Status),
    ("pods/binding", Path::PodBinding),
    ("bindings", Path::Bindings),
    ("pods/ephemeralcontainers", Path::EphemeralContainers),
    ("pods/resize", Path::Resize),
    ("pods/eviction", Path::Eviction),
    ("pods/attach", Path::NoObject),
    ("pods/exec", Path::NoObject),
    ("pods/portforward", Path::NoObject),
    ("pods/proxy", Path::NoObject),
    ("pods/log", Path::NoObject),
];

/// A path of discovery that concerns pods: the pods resource and its subresources, and
/// any resource of a kind that writes a pod's metadata (a Binding's merges into it).
fn concerns_pods(resource: &Value) -> bool {
    let name = resource["name"].as_str().unwrap_or_default();
    let kind = resource["kind"].as_str().unwrap_or_default();
    name == "pods" || name.starts_with("pods/") || ["Pod", "Binding", "Eviction"].contains(&kind)
}

/// A request of `method` to `path` with a JSON body of `content_type`, as `client`.
async fn send(
    client: &Client,
    method: &str,
    path: &str,
    content_type: &str,
    body: Value,
) -> Result<String, kube::Error> {
    let request = axum::http::Request::builder()
        .method(method)
        .uri(path)
        .header("Content-Type", content_type)
        .body(body.to_string().into_bytes())
        .expect("a static request");
    client.request_text(request).await
}

const MERGE: &str = "application/merge-patch+json";
const JSON: &str = "application/json";

fn marks() -> Value {
    json!({FROM_UID: "any", ATTEMPT: "99", FROM_POD: "batch/any"})
}

/// The mark tried through `path` on `pod` as `who`: its result.
async fn try_mark(who: &Client, path: Path, pod: &str) -> Result<String, kube::Error> {
    let at = format!("/api/v1/namespaces/batch/pods/{pod}");
    let metadata = json!({"annotations": marks()});
    let binding = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "annotations": marks()},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"}})
    };
    match path {
        Path::Pod => send(who, "PATCH", &at, MERGE, json!({"metadata": metadata})).await,
        Path::Status => send(who, "PATCH", &format!("{at}/status"), MERGE, json!({"metadata": metadata})).await,
        Path::PodBinding => send(who, "POST", &format!("{at}/binding"), JSON, binding(pod)).await,
        Path::Bindings => send(who, "POST", "/api/v1/namespaces/batch/bindings", JSON, binding(pod)).await,
        Path::EphemeralContainers => {
            let debug = json!([{"name": "debug", "image": "registry.example/debug:1"}]);
            let body = json!({"metadata": metadata, "spec": {"ephemeralContainers": debug}});
            send(who, "PATCH", &format!("{at}/ephemeralcontainers"), "application/strategic-merge-patch+json", body)
                .await
        }
        Path::Resize => {
            let resized = json!([{"name": "main", "resources": {"requests": {"cpu": "200m"}}}]);
            let body = json!({"metadata": metadata, "spec": {"containers": resized}});
            send(who, "PATCH", &format!("{at}/resize"), "application/strategic-merge-patch+json", body).await
        }
        Path::Eviction => {
            let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": pod, "namespace": "batch", "annotations": marks()}});
            send(who, "POST", &format!("{at}/eviction"), JSON, eviction).await
        }
        Path::NoObject => unreachable!("nothing to write"),
    }
}

/// A tenant allowed every path that writes a pod or its metadata, in batch.
async fn tenant_role(admin: &Client) -> anyhow::Result<()> {
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "every-pod-path", "namespace": "batch"},
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "create", "patch", "update"]},
            {"apiGroups": [""], "resources": ["pods/status", "pods/ephemeralcontainers", "pods/resize"],
                "verbs": ["get", "patch", "update"]},
            {"apiGroups": [""], "resources": ["pods/binding", "bindings", "pods/eviction"], "verbs": ["create"]},
        ],
    }))?;
    Api::<Role>::namespaced(admin.clone(), "batch").create(&PostParams::default(), &role).await?;
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "tenants-write-pods", "namespace": "batch"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "every-pod-path"},
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "mallory"},
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "namespace-admin"},
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "coloc-extender:mark-writers"},
        ],
    }))?;
    Api::<RoleBinding>::namespaced(admin.clone(), "batch").create(&PostParams::default(), &binding).await?;
    Ok(())
}

/// The mode does not reach admission; no kube-scheduler, extender or controllers.
async fn every_path(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let bed = Bed::up_with(bins, mode, Options { controllers: false, ..Default::default() }).await?;
    let admin = bed.client.clone();
    shipped_admission::apply(&admin).await?;
    bed.plane.apply(&repo("manifests/clusterrole-mark-writer.yaml"))?;
    tenant_role(&admin).await?;
    let mallory = as_user(&bed, "mallory", &[]).await?;
    let pods: Api<Pod> = Api::namespaced(mallory.clone(), "batch");
    let claims = PodBuilder::new("batch", "claims", "free", 100).annotate(ATTEMPT, "99").build();
    coloc_testbed::wait::until(MINUTE, "the marks policy enforced", || async {
        match pods.create(&dry(), &claims).await {
            Err(e) if e.to_string().contains(MARK_ANNOTATIONS) => Ok(()),
            other => Err(format!("{:?}", other.map(|p| p.metadata.name))),
        }
    })
    .await?;
    // Her own pending pod, which she would have counted as requeued 99 times.
    pods.create(&PostParams::default(), &PodBuilder::new("batch", "mallorys", "free", 100).build()).await?;

    let discovery: Value =
        serde_json::from_str(&admin.request_text(coloc_testbed::control_plane::http_get("/api/v1")).await?)?;
    let served: Vec<&Value> =
        discovery["resources"].as_array().into_iter().flatten().filter(|r| concerns_pods(r)).collect();
    anyhow::ensure!(served.len() >= KNOWN.len() - 1, "discovery lists {} pod paths", served.len());
    let mut tried = Vec::new();
    for resource in &served {
        let name = resource["name"].as_str().unwrap_or_default();
        let Some((_, path)) = KNOWN.iter().find(|(n, _)| *n == name) else {
            anyhow::bail!(
                "the API server serves {name} ({}, verbs {}), which this test does not know: can it set a pod's labels \
                 or annotations? Add it to KNOWN with how to try a mark through it, and to the marks policy if so",
                resource["kind"],
                resource["verbs"]
            );
        };
        if *path == Path::NoObject {
            continue;
        }
        tried.push(name);
        // Eviction last: were it admitted, the pod would go.
        if *path == Path::Eviction {
            continue;
        }
        match try_mark(&mallory, *path, "mallorys").await {
            Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains(MARK_ANNOTATIONS) => {}
            // ephemeralcontainers and resize reset the pod's metadata before admission:
            // the write may pass, the mark never lands (checked below).
            Ok(_) if matches!(path, Path::EphemeralContainers | Path::Resize) => {}
            Err(kube::Error::Api(s)) if matches!(path, Path::EphemeralContainers | Path::Resize) && s.code != 403 => {}
            other => anyhow::bail!("a mark through {name}: {other:?}"),
        }
    }
    anyhow::ensure!(tried.contains(&"bindings") && tried.contains(&"pods/binding"), "tried {tried:?}");
    refused("a tenant's pod created with a mark", MARK_ANNOTATIONS, pods.create(&dry(), &claims).await)?;
    let mine = pods.get("mallorys").await?;
    let annotations = mine.metadata.annotations.unwrap_or_default();
    anyhow::ensure!(
        [FROM_UID, ATTEMPT, FROM_POD].iter().all(|k| !annotations.contains_key(*k)),
        "a mark landed on her pod: {annotations:?}"
    );
    refused("a mark through pods/eviction", MARK_ANNOTATIONS, try_mark(&mallory, Path::Eviction, "mallorys").await)?;

    repairers_may_write_marks(&bed, &admin).await?;
    bed.finish()
}

/// A copy as a restore brings it back: its marks, its gate.
fn restored_copy(name: &str) -> anyhow::Result<Pod> {
    let mut copy = serde_json::to_value(
        PodBuilder::new("batch", name, "free", 100)
            .label(LABEL, "true")
            .annotate(FROM_UID, "0b0e0e0e-0000-4000-8000-000000000004")
            .annotate(ATTEMPT, "2")
            .build(),
    )?;
    copy["spec"]["schedulingGates"] = json!([{"name": GATE}]);
    Ok(serde_json::from_value(copy)?)
}

/// The group coloc-extender:mark-writers and a restore tool bound to cluster-admin may
/// restore a copy with its marks and gate; a tenant may not, nor one granted the same verb
/// by a Role of its own namespace.
async fn repairers_may_write_marks(bed: &Bed, admin: &Client) -> anyhow::Result<()> {
    let velero: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "velero"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "velero", "namespace": "velero"}],
    }))?;
    Api::<ClusterRoleBinding>::all(admin.clone()).create(&PostParams::default(), &velero).await?;
    let own_marks: Role = serde_json::from_value(json!({
        "metadata": {"name": "marks-here", "namespace": "batch"},
        "rules": [{"apiGroups": ["coloc-extender.io"], "resources": ["marks"], "verbs": ["write"]}],
    }))?;
    Api::<Role>::namespaced(admin.clone(), "batch").create(&PostParams::default(), &own_marks).await?;
    let own_binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "namespace-admin-marks", "namespace": "batch"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "marks-here"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "namespace-admin"}],
    }))?;
    Api::<RoleBinding>::namespaced(admin.clone(), "batch").create(&PostParams::default(), &own_binding).await?;

    let writer = as_user(bed, "ops-admin", &["coloc-extender:mark-writers"]).await?;
    let restorer = as_user(bed, "system:serviceaccount:velero:velero", &[]).await?;
    let copy = restored_copy("free-9-rq-00000000c9")?;
    // RBAC's grants load a moment after they are stored.
    for (who, client) in
        [("a member of coloc-extender:mark-writers", &writer), ("a restore tool bound to cluster-admin", &restorer)]
    {
        let api: Api<Pod> = Api::namespaced(client.clone(), "batch");
        coloc_testbed::wait::until(MINUTE, &format!("{who} restores a copy"), || async {
            api.create(&dry(), &copy).await.map(drop).map_err(|e| e.to_string())
        })
        .await?;
    }
    let writers: Api<Pod> = Api::namespaced(writer, "batch");
    writers.create(&PostParams::default(), &copy).await?;
    // and repairs one: its attempt mended.
    let mend = json!({"metadata": {"annotations": {ATTEMPT: "1"}}});
    send(&writers.clone().into_client(), "PATCH", "/api/v1/namespaces/batch/pods/free-9-rq-00000000c9", MERGE, mend)
        .await
        .map_err(|e| anyhow::anyhow!("a mark writer mending a copy's attempt was refused: {e}"))?;

    for (who, user) in [("a tenant", "mallory"), ("a tenant granted the verb in its namespace only", "namespace-admin")]
    {
        let api: Api<Pod> = Api::namespaced(as_user(bed, user, &[]).await?, "batch");
        refused(&format!("{who} restoring a copy"), MARK_LABELS, api.create(&dry(), &copy).await)?;
    }
    Ok(())
}
