//! Least privilege, enforced: with the ValidatingAdmissionPolicy the base ships, each
//! identity of the install may write only the pods it makes, and only the changes it makes
//! to them (the requeue controller's identity: copies, their release and deletion; the wake
//! identity: placeholders; the extender's own: none); RBAC alone grants them any pod.

use coloc_extender::model::marks::{GATE, GUARD, LABEL};
use coloc_extender::model::RequeueIntent;
use coloc_extender::requeue::replacement;
use coloc_extender::wake;
use coloc_testbed::cluster::PodBuilder;
use coloc_testbed::control_plane::{client_from, Options};
use coloc_testbed::Binaries;
use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::Client;
use serde_json::{json, Value};

use crate::scenarios::MINUTE;
use crate::{Bed, Case, Mode};

pub fn cases() -> Vec<Case> {
    vec![Case {
        name: "privilege_admission_policies_allow_only_the_extenders_own_pod_writes",
        run: |b, m| Box::pin(only_own_writes(b, m)),
    }]
}

/// The shipped policies and bindings, applied as they are (the install namespace is
/// coloc-system here, as the files name it).
pub const POLICIES: [&str; 4] = [
    include_str!("../../manifests/admission/validatingadmissionpolicy.yaml"),
    include_str!("../../manifests/admission/validatingadmissionpolicy-marks.yaml"),
    include_str!("../../manifests/admission/validatingadmissionpolicy-policy.yaml"),
    include_str!("../../manifests/admission/validatingadmissionpolicy-copy-class.yaml"),
];
pub const BINDINGS: [&str; 4] = [
    include_str!("../../manifests/admission/validatingadmissionpolicybinding.yaml"),
    include_str!("../../manifests/admission/validatingadmissionpolicybinding-marks.yaml"),
    include_str!("../../manifests/admission/validatingadmissionpolicybinding-policy.yaml"),
    include_str!("../../manifests/admission/validatingadmissionpolicybinding-copy-class.yaml"),
];
/// The one default policy, as the install ships it.
const SHIPPED_POLICY: &str = include_str!("../../manifests/policy.yaml");

pub const CREATE: &str = "only coloc-extender-requeue (and the uninstall Job) may create a pod";
const COPY_HOME: &str = "coloc-extender may create a requeue copy only in a namespace that opted in";
pub const DELETE: &str = "coloc-extender may delete only its own pods";
const SPEC: &str = "coloc-extender may not change a pod's spec";
const LABELS: &str = "coloc-extender may not change a pod's labels";
const FINALIZERS: &str = "coloc-extender may not change a pod's finalizers";
const GATE_OWNER: &str = "coloc-extender may remove the gate coloc-extender.io/requeue only from a requeue replacement";
const GATES: &str = "coloc-extender may change spec.schedulingGates only by removing";
pub const PLACEHOLDER: &str =
    "coloc-extender may create a wake placeholder only as wake builds it, in its own namespace";
/// RBAC's refusal of a create the identity holds no grant for.
pub const NO_GRANT: &str = "cannot create resource \"pods\"";
/// Pod Security admission's refusal.
const POD_SECURITY: &str = "violates PodSecurity \"restricted:latest\"";

/// The identity the extender's replicas act as for wakes (the wake component).
const WAKE_USER: &str = "system:serviceaccount:coloc-system:coloc-extender-wake";
/// The install namespace, as the files name it.
const HOME: &str = coloc_testbed::control_plane::INSTALL_NAMESPACE;
pub const MARK_LABELS: &str =
    "only coloc-extender sets the labels coloc-extender.io/requeued and coloc-extender.io/wake";
pub const MARK_ANNOTATIONS: &str = "only coloc-extender sets the annotations coloc-extender.io/requeued-from-uid";
const MARK_GATE: &str = "only coloc-extender adds or removes the scheduling gate coloc-extender.io/requeue";
const MARK_GUARD: &str = "only coloc-extender's earlier releases added coloc-extender.io/requeue-guard";

/// Another controller's scheduling gate.
const HOLD: &str = "example.com/hold";

/// The mode does not reach admission; no kube-scheduler, extender process or controllers.
async fn only_own_writes(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let bed = Bed::up_with(bins, mode, Options { controllers: false, ..Default::default() }).await?;
    let admin = bed.client.clone();
    for text in POLICIES {
        let p: ValidatingAdmissionPolicy = serde_yaml_ng::from_str(text)?;
        Api::<ValidatingAdmissionPolicy>::all(admin.clone()).create(&PostParams::default(), &p).await?;
    }
    for text in BINDINGS {
        let b: ValidatingAdmissionPolicyBinding = serde_yaml_ng::from_str(text)?;
        Api::<ValidatingAdmissionPolicyBinding>::all(admin.clone()).create(&PostParams::default(), &b).await?;
    }
    // The pods it acts on: a bare pod an earlier release guarded, a stranger, and a
    // stranger's pod held by the requeue gate without being a replacement.
    let guarded = PodBuilder::new("batch", "free-1", "free", 100).label(GUARD, "true").build();
    let mut guarded = serde_json::to_value(guarded)?;
    guarded["metadata"]["finalizers"] = json!([GUARD]);
    let stranger = PodBuilder::new("batch", "stranger", "free", 100).build();
    let mut gated = serde_json::to_value(PodBuilder::new("batch", "gated", "free", 100).build())?;
    gated["spec"]["schedulingGates"] = json!([{"name": GATE}]);
    let admin_pods: Api<Pod> = Api::namespaced(admin.clone(), "batch");
    let guarded = admin_pods.create(&PostParams::default(), &serde_json::from_value(guarded)?).await?;
    admin_pods.create(&PostParams::default(), &stranger).await?;
    admin_pods.create(&PostParams::default(), &serde_json::from_value(gated)?).await?;

    // As the extender's replicas (the user its kubeconfig names is its ServiceAccount) and
    // the wake identity they act as, as `serve` does; as the requeue controller, which runs
    // as the requeue identity itself.
    let ext = client_from(&bed.plane.extender_kubeconfig).await?;
    let as_requeue = client_from(&bed.plane.kubeconfig_of(HOME, "coloc-extender-requeue")).await?;
    let as_wake = acting_as(&bed.plane.extender_kubeconfig, WAKE_USER).await?;
    let pods: Api<Pod> = Api::namespaced(ext.clone(), "batch");
    let copies: Api<Pod> = Api::namespaced(as_requeue.clone(), "batch");
    let original = serde_json::to_value(&guarded)?;
    let uid = guarded.metadata.uid.clone().unwrap_or_default();
    let intent = RequeueIntent {
        namespace: "batch".into(),
        name: "free-1".into(),
        uid: uid.clone(),
        node: "node-1".into(),
        replacement: "free-1-rq-0000000001".into(),
        attempt: 1,
        preemptor: "online/web-1".into(),
    };
    let copy = replacement::build(&original, &intent)?;
    let with = |f: &dyn Fn(&mut Value)| -> anyhow::Result<Pod> {
        let mut v = copy.clone();
        v["metadata"]["name"] = json!("free-1-rq-00000000ff");
        f(&mut v);
        Ok(serde_json::from_value(v)?)
    };
    let ungated = with(&|v| {
        v["spec"].as_object_mut().unwrap().remove("schedulingGates");
    })?;
    let unlabelled = with(&|v| {
        v["metadata"]["labels"].as_object_mut().unwrap().remove(LABEL);
    })?;
    let two_gates = with(&|v| {
        v["metadata"]["name"] = json!("free-1-rq-0000000002");
        v["spec"]["schedulingGates"] = json!([{"name": GATE}, {"name": HOLD}]);
    })?;

    // Enforcement starts a moment after the policies are stored.
    let dry = PostParams { dry_run: true, ..Default::default() };
    coloc_testbed::wait::until(MINUTE, "the policies enforced", || async {
        match copies.create(&dry, &ungated).await {
            Err(e) if e.to_string().contains(CREATE) => Ok(()),
            other => Err(format!("{:?}", other.map(|p| p.metadata.name))),
        }
    })
    .await?;

    // Allowed: requeue's replacement, made by the extender's own builder as the requeue
    // identity; its release (the JSON patch requeue sends), its deletion and the guard's
    // removal, as the same identity; a wake, as the wake identity. The replicas' own
    // identity may do none of the requeue controller's writes.
    let made = copies.create(&PostParams::default(), &serde_json::from_value(copy.clone())?).await?;
    let made_uid = made.metadata.uid.clone().unwrap_or_default();
    let gates = json!([{"name": GATE}]);
    let release_made = json!([
        {"op": "test", "path": "/metadata/uid", "value": made_uid},
        {"op": "test", "path": "/spec/schedulingGates", "value": gates},
        {"op": "replace", "path": "/spec/schedulingGates", "value": []},
    ]);
    refused(
        "releasing a copy as the replicas' own identity",
        "cannot patch resource \"pods\"",
        json_patch(&ext, "batch", "free-1-rq-0000000001", release_made.clone()).await,
    )?;
    refused(
        "deleting a copy as the replicas' own identity",
        "cannot delete resource \"pods\"",
        pods.delete("free-1-rq-0000000001", &DeleteParams::default()).await,
    )?;
    // Deleted while gated, as the controller deletes a copy that must not run (a released
    // copy is a workload: tests/e2e/release.rs).
    let uid_pre = |uid: &str| DeleteParams {
        preconditions: Some(Preconditions { uid: Some(uid.into()), resource_version: None }),
        ..Default::default()
    };
    copies
        .delete("free-1-rq-0000000001", &uid_pre(&made_uid))
        .await
        .map_err(|e| anyhow::anyhow!("deleting a replacement was refused: {e}"))?;
    let made = copies.create(&PostParams::default(), &serde_json::from_value(copy.clone())?).await?;
    let made_uid = made.metadata.uid.clone().unwrap_or_default();
    let release_made = json!([
        {"op": "test", "path": "/metadata/uid", "value": made_uid},
        {"op": "test", "path": "/spec/schedulingGates", "value": gates},
        {"op": "replace", "path": "/spec/schedulingGates", "value": []},
    ]);
    json_patch(&as_requeue, "batch", "free-1-rq-0000000001", release_made)
        .await
        .map_err(|e| anyhow::anyhow!("releasing a replacement was refused: {e}"))?;
    // The guard's removal exactly as the requeue controller sends it (merge patch,
    // resourceVersion).
    let current = serde_json::to_value(pods.get("free-1").await?)?;
    let model = serde_json::from_value::<coloc_extender::wire::k8s::Pod>(current.clone())?.into_model()?;
    let requeuer = coloc_extender::requeue::kube::Requeuer::new(as_requeue.clone(), None, true);
    anyhow::ensure!(
        requeuer.remove_guard(&model, &current, "test").await,
        "removing a guard was refused (see the log above)"
    );
    let _ = uid;
    let unguarded = pods.get("free-1").await?;
    anyhow::ensure!(
        unguarded.metadata.finalizers.unwrap_or_default().is_empty()
            && !unguarded.metadata.labels.unwrap_or_default().contains_key(GUARD),
        "the guard is gone"
    );
    let system: Api<Pod> = Api::namespaced(as_wake.clone(), HOME);
    let placeholder: Pod = serde_json::from_value(wake::placeholder(HOME))?;
    let woke = system
        .create(&PostParams::default(), &placeholder)
        .await
        .map_err(|e| anyhow::anyhow!("a wake placeholder was refused: {e}"))?;
    let now = DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
    system
        .delete(&woke.metadata.name.unwrap_or_default(), &now)
        .await
        .map_err(|e| anyhow::anyhow!("deleting a placeholder was refused: {e}"))?;

    // Refused, each with its policy's message.
    refused("create an ungated replacement", CREATE, copies.create(&PostParams::default(), &ungated).await)?;
    refused("create an unlabelled gated pod", CREATE, copies.create(&PostParams::default(), &unlabelled).await)?;
    copies_stay_home(&bed, &admin, &as_requeue, &copy).await?;
    // What a copy may carry: tests/e2e/baseline.rs.
    // Each identity writes only its own kind of pod.
    let plain = PodBuilder::new("batch", "plain-by-requeue", "free", 100).build();
    refused("a plain pod as the requeue identity", CREATE, copies.create(&PostParams::default(), &plain).await)?;
    let requeue_system: Api<Pod> = Api::namespaced(as_requeue.clone(), HOME);
    refused(
        "a placeholder as the requeue identity",
        CREATE,
        requeue_system.create(&PostParams::default(), &serde_json::from_value(wake::placeholder(HOME))?).await,
    )?;
    let mut copy_in_system = copy.clone();
    copy_in_system["metadata"]["namespace"] = json!(HOME);
    refused(
        "a copy as the wake identity",
        CREATE,
        system.create(&PostParams::default(), &serde_json::from_value(copy_in_system)?).await,
    )?;
    refused(
        "a copy as the replicas' own identity (no create granted)",
        NO_GRANT,
        pods.create(&PostParams::default(), &serde_json::from_value(copy.clone())?).await,
    )?;
    let mut bound = wake::placeholder(HOME);
    bound["spec"]["nodeName"] = json!("node-1");
    refused(
        "create a wake-labelled pod on a real node",
        CREATE,
        system.create(&PostParams::default(), &serde_json::from_value(bound)?).await,
    )?;
    // A placeholder of any other shape than wake builds, or outside the extender's own
    // namespace: anything that could run, reach the host, read a secret or act as another.
    type Change = fn(&mut Value);
    let shapes: [(&str, Change); 15] = [
        ("with a command", |p| p["spec"]["containers"][0]["command"] = json!(["sh", "-c", "id"])),
        ("of another image", |p| p["spec"]["containers"][0]["image"] = json!("registry.example/anything:1")),
        ("with a hostPath volume", |p| {
            p["spec"]["volumes"] = json!([{"name": "root", "hostPath": {"path": "/"}}]);
        }),
        ("with a ServiceAccount token", |p| p["spec"]["automountServiceAccountToken"] = json!(true)),
        ("on the host network", |p| p["spec"]["hostNetwork"] = json!(true)),
        ("privileged", |p| p["spec"]["containers"][0]["securityContext"] = json!({"privileged": true})),
        ("holding a hostPort", |p| {
            p["spec"]["containers"][0]["ports"] = json!([{"containerPort": 80, "hostPort": 80}])
        }),
        ("with a Secret in its environment", |p| {
            p["spec"]["containers"][0]["envFrom"] = json!([{"secretRef": {"name": "coloc-extender-tls"}}]);
        }),
        ("with an environment variable", |p| p["spec"]["containers"][0]["env"] = json!([{"name": "A", "value": "b"}])),
        ("running as another ServiceAccount", |p| p["spec"]["serviceAccountName"] = json!("coloc-scheduler")),
        // (Pull secrets are admitted: admission ServiceAccount copies its default's in.)
        ("running as root", |p| p["spec"]["securityContext"]["runAsUser"] = json!(0)),
        ("with an init container", |p| {
            p["spec"]["initContainers"] = json!([{"name": "i", "image": wake::IMAGE}]);
        }),
        ("with a probe", |p| {
            p["spec"]["containers"][0]["livenessProbe"] = json!({"exec": {"command": ["id"]}});
        }),
        ("with a container named otherwise", |p| p["spec"]["containers"][0]["name"] = json!("other")),
        ("with sysctls", |p| {
            p["spec"]["securityContext"] = json!({"sysctls": [{"name": "kernel.shm_rmid_forced", "value": "1"}]});
        }),
    ];
    for (how, change) in shapes {
        let mut p = wake::placeholder(HOME);
        change(&mut p);
        refused(
            &format!("create a placeholder {how}"),
            PLACEHOLDER,
            system.create(&PostParams::default(), &serde_json::from_value(p)?).await,
        )?;
    }
    let elsewhere: Api<Pod> = Api::namespaced(as_wake.clone(), "batch");
    refused(
        "create a placeholder outside the extender's namespace, as the wake identity",
        NO_GRANT,
        elsewhere.create(&PostParams::default(), &serde_json::from_value(wake::placeholder("batch"))?).await,
    )?;
    let image = json!({"spec": {"containers": [{"name": "main", "image": "registry.example/other:2"}]}});
    refused(
        "change another pod's image",
        SPEC,
        copies.patch("stranger", &PatchParams::default(), &Patch::Strategic(image)).await,
    )?;
    refused(
        "add a label",
        LABELS,
        copies
            .patch("stranger", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})))
            .await,
    )?;
    refused(
        "change a label",
        LABELS,
        copies
            .patch("stranger", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"app": "y"}}})))
            .await,
    )?;
    refused(
        "add a finalizer",
        FINALIZERS,
        copies
            .patch("stranger", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": [GUARD]}})))
            .await,
    )?;
    let release = json!([{"op": "replace", "path": "/spec/schedulingGates", "value": []}]);
    refused(
        "remove the gate of a pod that is no replacement",
        GATE_OWNER,
        json_patch(&as_requeue, "batch", "gated", release).await,
    )?;
    // A replacement held by another gate too: only ours may go, and nothing else with it.
    copies
        .create(&PostParams::default(), &two_gates)
        .await
        .map_err(|e| anyhow::anyhow!("a replacement with two gates was refused: {e}"))?;
    let theirs = json!([{"op": "replace", "path": "/spec/schedulingGates", "value": [{"name": GATE}]}]);
    refused(
        "remove another controller's gate",
        GATES,
        json_patch(&as_requeue, "batch", "free-1-rq-0000000002", theirs).await,
    )?;
    let ours_and_image = json!([
        {"op": "replace", "path": "/spec/schedulingGates", "value": [{"name": HOLD}]},
        {"op": "replace", "path": "/spec/containers/0/image", "value": "registry.example/other:2"},
    ]);
    refused(
        "remove the gate and change the image",
        SPEC,
        json_patch(&as_requeue, "batch", "free-1-rq-0000000002", ours_and_image).await,
    )?;
    let ours = json!([{"op": "replace", "path": "/spec/schedulingGates", "value": [{"name": HOLD}]}]);
    json_patch(&as_requeue, "batch", "free-1-rq-0000000002", ours)
        .await
        .map_err(|e| anyhow::anyhow!("removing our gate beside another was refused: {e}"))?;
    refused("delete another pod", DELETE, copies.delete("stranger", &DeleteParams::default()).await)?;

    tenant_marks(&bed, &admin, &copies, &copy).await?;
    policy_files_refused_at_apply(&admin).await?;
    crate::release::copies_are_held_as_they_stand(&admin, &as_requeue, &copy).await?;
    crate::parameters::parameters_cannot_fail(&bed, &admin).await?;

    // Control: without the bindings, RBAC alone lets the same write through.
    for b in ["coloc-extender"] {
        Api::<ValidatingAdmissionPolicyBinding>::all(admin.clone()).delete(b, &DeleteParams::default()).await?;
    }
    coloc_testbed::wait::until(MINUTE, "the ungated create admitted without the policies", || async {
        copies.create(&dry, &ungated).await.map(drop).map_err(|e| e.to_string())
    })
    .await?;
    bed.finish()
}

/// A client from `kubeconfig` acting as `user`, as `serve` acts as its own and the wake
/// identity (the shipped impersonation Roles allow exactly these).
pub async fn acting_as(kubeconfig: &std::path::Path, user: &str) -> anyhow::Result<Client> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    config.auth_info.impersonate = Some(user.into());
    Ok(Client::try_from(config)?)
}

/// Copies go only to namespaces that opted in, never to kube-system or the install
/// namespace, and Pod Security holds them as any pod.
async fn copies_stay_home(bed: &Bed, admin: &Client, as_requeue: &Client, copy: &Value) -> anyhow::Result<()> {
    use coloc_testbed::cluster;
    use k8s_openapi::api::core::v1::Namespace;
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    let in_namespace = |ns: &str, f: &dyn Fn(&mut Value)| -> anyhow::Result<Pod> {
        let mut v = copy.clone();
        v["metadata"]["namespace"] = json!(ns);
        // As requeue builds it there: its original of the same namespace.
        v["metadata"]["annotations"][coloc_extender::model::marks::FROM_POD] = json!(format!("{ns}/free-1"));
        f(&mut v);
        Ok(serde_json::from_value(v)?)
    };
    let (opt_in, enabled) = coloc_extender::model::marks::NAMESPACE_OPT_IN;
    let namespace = |name: &str, labels: Value| -> anyhow::Result<Namespace> {
        Ok(serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))?)
    };
    let restricted = json!({opt_in: enabled, "pod-security.kubernetes.io/enforce": "restricted"});
    let all = [
        cluster::namespace("plain"),
        namespace("locked", restricted)?,
        namespace("other-install", json!({opt_in: enabled}))?,
        namespace("labelled-system", json!({opt_in: enabled}))?,
    ];
    cluster::create_all(admin, all.into()).await?;
    for system in ["kube-system", HOME] {
        Api::<Namespace>::all(admin.clone())
            .patch(system, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {opt_in: enabled}}})))
            .await?;
    }
    let create = |ns: &str, pod: Pod| {
        let api: Api<Pod> = Api::namespaced(as_requeue.clone(), ns);
        async move { api.create(&PostParams::default(), &pod).await }
    };
    let keep = |_: &mut Value| {};
    refused(
        "a copy in kube-system, labelled or not",
        COPY_HOME,
        create("kube-system", in_namespace("kube-system", &keep)?).await,
    )?;
    refused(
        "a copy in the install namespace, labelled or not",
        COPY_HOME,
        create(HOME, in_namespace(HOME, &keep)?).await,
    )?;
    refused("a copy in a namespace not opted in", COPY_HOME, create("plain", in_namespace("plain", &keep)?).await)?;
    let privileged =
        in_namespace("locked", &|v| v["spec"]["containers"][0]["securityContext"] = json!({"privileged": true}))?;
    refused("a privileged copy in a restricted namespace", POD_SECURITY, create("locked", privileged).await)?;
    // A ServiceAccount of the same name in another namespace (a tenant's, say), granted pod
    // create everywhere: not an identity of this install, it is held like anyone, so it
    // cannot write a copy's marks, not even in an opted-in namespace.
    let grant: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "other-install-requeue"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "coloc-extender-requeue"},
        "subjects": [{"kind": "ServiceAccount", "name": "coloc-extender-requeue", "namespace": "other-install"}],
    }))?;
    Api::<ClusterRoleBinding>::all(admin.clone()).create(&PostParams::default(), &grant).await?;
    let other =
        acting_as(&bed.plane.admin_kubeconfig, "system:serviceaccount:other-install:coloc-extender-requeue").await?;
    let theirs: Api<Pod> = Api::namespaced(other, "labelled-system");
    let elsewhere_copy = in_namespace("labelled-system", &keep)?;
    coloc_testbed::wait::until(MINUTE, "a same-named ServiceAccount elsewhere refused by the policy", || async {
        match theirs.create(&PostParams { dry_run: true, ..Default::default() }, &elsewhere_copy).await {
            Err(kube::Error::Api(s)) if s.message.contains(MARK_LABELS) => Ok(()),
            other => Err(format!("{:?}", other.map(|p| p.metadata.name))),
        }
    })
    .await?;
    // Nor is a user (a client certificate, an OIDC name, an impersonated user) who bears
    // the name without being the install's ServiceAccount.
    let user_grant: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "a-user-named-like-requeue"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "coloc-extender-requeue"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "coloc-extender-requeue"}],
    }))?;
    Api::<ClusterRoleBinding>::all(admin.clone()).create(&PostParams::default(), &user_grant).await?;
    let user = acting_as(&bed.plane.admin_kubeconfig, "coloc-extender-requeue").await?;
    let users: Api<Pod> = Api::namespaced(user, "labelled-system");
    coloc_testbed::wait::until(MINUTE, "a user named like the requeue identity refused", || async {
        match users.create(&PostParams { dry_run: true, ..Default::default() }, &elsewhere_copy).await {
            Err(kube::Error::Api(s)) if s.message.contains(MARK_LABELS) => Ok(()),
            other => Err(format!("{:?}", other.map(|p| p.metadata.name))),
        }
    })
    .await?;
    let labelled = in_namespace("labelled-system", &keep)?;
    create("labelled-system", labelled)
        .await
        .map_err(|e| anyhow::anyhow!("a copy in a namespace that opted in was refused: {e}"))?;
    Ok(())
}

/// The policy ConfigMap is refused at apply where its policy.yaml is no policy this
/// release reads; the shipped one, and any other ConfigMap, pass.
async fn policy_files_refused_at_apply(admin: &Client) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::ConfigMap;
    let maps: Api<ConfigMap> = Api::namespaced(admin.clone(), HOME);
    let map = |name: &str, text: &str| -> anyhow::Result<ConfigMap> {
        Ok(serde_json::from_value(json!({"metadata": {"name": name}, "data": {"policy.yaml": text}}))?)
    };
    let dry = PostParams { dry_run: true, ..Default::default() };
    let api = format!("apiVersion: {}", coloc_extender::policy::API_VERSION);
    anyhow::ensure!(SHIPPED_POLICY.contains(&api), "the shipped policy names no {api}");
    let future = SHIPPED_POLICY.replace(&api, "apiVersion: coloc-extender.io/v2");
    coloc_testbed::wait::until(MINUTE, "the policy file's check enforced", || async {
        match maps.create(&dry, &map("coloc-extender-policy", &future).map_err(|e| e.to_string())?).await {
            Err(kube::Error::Api(s)) if s.message.contains("must name its API") => Ok(()),
            other => Err(format!("{:?}", other.map(|m| m.metadata.name))),
        }
    })
    .await?;
    maps.create(&dry, &map("coloc-extender-policy", SHIPPED_POLICY)?)
        .await
        .map_err(|e| anyhow::anyhow!("the shipped policy was refused: {e}"))?;
    // A file of the API before (it differs only in waitTolerance) is still taken in.
    let before = SHIPPED_POLICY.replace(&api, &format!("apiVersion: {}", coloc_extender::policy::API_VERSION_BEFORE));
    maps.create(&dry, &map("coloc-extender-policy", &before)?)
        .await
        .map_err(|e| anyhow::anyhow!("a policy of the API before was refused: {e}"))?;
    let enforcing = SHIPPED_POLICY.replace("\nmode: shadow\n", "\nmode: enforce\n");
    maps.create(&dry, &map("coloc-extender-policy", &enforcing)?)
        .await
        .map_err(|e| anyhow::anyhow!("the shipped policy switched to enforce was refused: {e}"))?;
    let bad = [
        ("a typo in the mode", "mode must be", SHIPPED_POLICY.replace("\nmode: shadow\n", "\nmode: enforced\n")),
        ("no kind", "must say `kind: Policy`", SHIPPED_POLICY.replace("\nkind: Policy\n", "\n")),
        ("a tab", "holds a tab", SHIPPED_POLICY.replace("\nclasses:\n", "\nclasses:\n\t\n")),
        ("not a policy", "must name its API", "replicas: 3\n".to_string()),
    ];
    for (what, message, text) in bad {
        refused_invalid(what, message, maps.create(&dry, &map("coloc-extender-policy", &text)?).await)?;
    }
    maps.create(&dry, &map("someone-elses", "replicas: 3\n")?)
        .await
        .map_err(|e| anyhow::anyhow!("another ConfigMap was judged: {e}"))?;
    Ok(())
}

/// A tenant (anyone but the extender and cluster admins), allowed to edit pods in batch by
/// RBAC, may not forge or change the marks decisions trust: a copy's, a placeholder's, a
/// guard. What else it changes on a copy is its own business.
async fn tenant_marks(bed: &Bed, admin: &Client, copies: &Api<Pod>, copy: &Value) -> anyhow::Result<()> {
    use coloc_extender::model::marks::{ATTEMPT, FROM_UID};
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "pod-editor", "namespace": "batch"},
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "create", "patch", "update"]},
            // As readiness-gate operators and custom schedulers have.
            {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch", "update"]},
            {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
        ],
    }))?;
    Api::<Role>::namespaced(admin.clone(), "batch").create(&PostParams::default(), &role).await?;
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "alice-edits-pods", "namespace": "batch"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-editor"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}],
    }))?;
    Api::<RoleBinding>::namespaced(admin.clone(), "batch").create(&PostParams::default(), &binding).await?;
    let kc = kube::config::Kubeconfig::read_from(&bed.plane.admin_kubeconfig)?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    config.auth_info.impersonate = Some("alice".into());
    let alice: Api<Pod> = Api::namespaced(Client::try_from(config)?, "batch");
    let dry = PostParams { dry_run: true, ..Default::default() };

    // A copy of the extender's, still gated, for her to try.
    let mut gated_copy = copy.clone();
    gated_copy["metadata"]["name"] = json!("free-1-rq-0000000003");
    copies.create(&PostParams::default(), &serde_json::from_value(gated_copy)?).await?;

    let plain = PodBuilder::new("batch", "plain", "free", 100).build();
    coloc_testbed::wait::until(MINUTE, "alice may create a plain pod", || async {
        alice.create(&dry, &plain).await.map(drop).map_err(|e| e.to_string())
    })
    .await?;
    let claims_five = PodBuilder::new("batch", "forged", "free", 100).annotate(ATTEMPT, "5").build();
    refused("a tenant's pod claiming 5 requeues", MARK_ANNOTATIONS, alice.create(&dry, &claims_five).await)?;
    let claims_copy = PodBuilder::new("batch", "forged", "free", 100).label(LABEL, "true").build();
    refused("a tenant's pod labelled a copy", MARK_LABELS, alice.create(&dry, &claims_copy).await)?;
    let mut gated: Value = serde_json::to_value(PodBuilder::new("batch", "forged", "free", 100).build())?;
    gated["spec"]["schedulingGates"] = json!([{"name": GATE}]);
    refused(
        "a tenant's pod with requeue's gate",
        MARK_GATE,
        alice.create(&dry, &serde_json::from_value(gated)?).await,
    )?;
    let guarded = PodBuilder::new("batch", "forged", "free", 100).label(GUARD, "true").build();
    refused("a tenant's pod with the guard", MARK_GUARD, alice.create(&dry, &guarded).await)?;

    let merge = |v: Value| Patch::Merge(v);
    alice
        .patch("free-1-rq-0000000003", &PatchParams::default(), &merge(json!({"metadata": {"labels": {"team": "a"}}})))
        .await
        .map_err(|e| anyhow::anyhow!("a tenant's own label on a copy was refused: {e}"))?;
    refused(
        "a tenant changes a copy's attempt",
        MARK_ANNOTATIONS,
        alice
            .patch(
                "free-1-rq-0000000003",
                &PatchParams::default(),
                &merge(json!({"metadata": {"annotations": {ATTEMPT: "9"}}})),
            )
            .await,
    )?;
    refused(
        "a tenant removes a copy's origin",
        MARK_ANNOTATIONS,
        alice
            .patch(
                "free-1-rq-0000000003",
                &PatchParams::default(),
                &merge(json!({"metadata": {"annotations": {FROM_UID: null}}})),
            )
            .await,
    )?;
    let release = json!([{"op": "replace", "path": "/spec/schedulingGates", "value": []}]);
    refused(
        "a tenant releases a copy",
        MARK_GATE,
        json_patch(&alice.clone().into_client(), "batch", "free-1-rq-0000000003", release).await,
    )?;
    copies.delete("free-1-rq-0000000003", &DeleteParams::default()).await?;

    // Through the other doors that carry a pod's metadata: its status, and its binding
    // (the API server copies a Binding's annotations onto the pod).
    let mine = alice.create(&PostParams::default(), &PodBuilder::new("batch", "alices", "free", 100).build()).await?;
    let name = mine.metadata.name.clone().unwrap_or_default();
    let claims = json!({"metadata": {"annotations": {FROM_UID: "any", ATTEMPT: "99"}}});
    refused(
        "a tenant claims requeues through pods/status",
        MARK_ANNOTATIONS,
        alice.patch_status(&name, &PatchParams::default(), &merge(claims)).await,
    )?;
    let labelled = json!({"metadata": {"labels": {LABEL: "true"}}});
    refused(
        "a tenant labels its pod a copy through pods/status",
        MARK_LABELS,
        alice.patch_status(&name, &PatchParams::default(), &merge(labelled)).await,
    )?;
    let binding = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": name, "annotations": {ATTEMPT: "99"}},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"},
    });
    let request = axum::http::Request::post(format!("/api/v1/namespaces/batch/pods/{name}/binding"))
        .header("Content-Type", "application/json")
        .body(binding.to_string().into_bytes())
        .expect("a static request");
    refused(
        "a tenant claims requeues through pods/binding",
        MARK_ANNOTATIONS,
        alice.clone().into_client().request_text(request).await,
    )?;
    // Her own status change passes.
    alice
        .patch_status(&name, &PatchParams::default(), &merge(json!({"metadata": {"annotations": {"team": "a"}}})))
        .await
        .map_err(|e| anyhow::anyhow!("a tenant's own annotation through pods/status was refused: {e}"))?;
    Ok(())
}

/// A JSON patch as requeue sends it (kube-rs's `Patch::Json` needs a feature we do not use).
pub async fn json_patch(client: &Client, namespace: &str, name: &str, patch: Value) -> Result<String, kube::Error> {
    let request = axum::http::Request::patch(format!("/api/v1/namespaces/{namespace}/pods/{name}"))
        .header("Content-Type", "application/json-patch+json")
        .body(patch.to_string().into_bytes())
        .expect("a static request");
    client.request_text(request).await
}

/// `result` is a refusal (the policy file's check answers Invalid) carrying `message`.
fn refused_invalid<T>(what: &str, message: &str, result: Result<T, kube::Error>) -> anyhow::Result<()> {
    match result {
        Ok(_) => anyhow::bail!("{what}: admitted, should have been refused"),
        Err(kube::Error::Api(s)) if s.message.contains(message) => Ok(()),
        Err(e) => anyhow::bail!("{what}: refused, but not with {message:?}: {e}"),
    }
}

/// `result` is a 403 carrying `message`.
pub fn refused<T>(what: &str, message: &str, result: Result<T, kube::Error>) -> anyhow::Result<()> {
    match result {
        Ok(_) => anyhow::bail!("{what}: admitted, should have been refused"),
        Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains(message) => Ok(()),
        Err(e) => anyhow::bail!("{what}: refused, but not with {message:?}: {e}"),
    }
}
