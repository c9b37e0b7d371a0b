//! No grant outlives its install. The rendered install (requeue and wake on, its
//! Deployments left out: no image runs here) and the uninstall Job's grants applied; then
//! the install's namespace deleted first, as `kubectl delete ns` does. Every ClusterRole
//! and ClusterRoleBinding of the install is owned by that Namespace (its uid, written at
//! admission), so the garbage collector takes them with it. A self-service user makes
//! the namespace again and is made its admin, as portals do: the `admin` role lets it
//! act as (impersonate) any ServiceAccount of the namespace, existing or not. Acting as
//! each of the install's identities, it is granted nothing of the old install.

use coloc_testbed::control_plane::{service_account, INSTALL_NAMESPACE};
use coloc_testbed::{kubelet, Binaries};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use crate::bed::repo;
use crate::coloc_pod::{apply, default_install_with, render, without};
use crate::scenarios::MINUTE;
use crate::{Bed, Case, Mode};

pub fn cases() -> Vec<Case> {
    vec![Case {
        name: "grants_the_install_namespace_deleted_first_and_made_again_its_admin_acting_as_each_identity_is_granted_nothing",
        run: |b, m| Box::pin(no_grant_outlives_the_install(b, m)),
    }]
}

/// The label every grant of the install carries (manifests/grants).
const OWNED: &str = "coloc-extender.io/owned-by=install-namespace";

/// What each identity of the install could do while it stood, as `kubectl auth can-i`
/// asks it: (identity, verb, resource, namespace).
const RIGHTS: [(&str, &str, &str, &str); 6] = [
    ("coloc-scheduler", "delete", "pods", "kube-system"),
    ("coloc-scheduler", "create", "pods/binding", "kube-system"),
    ("coloc-extender-requeue", "create", "pods", "batch"),
    ("coloc-extender", "list", "nodes", ""),
    ("coloc-extender-uninstall", "create", "pods", "batch"),
    ("coloc-extender-uninstall", "delete", "pods", "kube-system"),
];

/// Whether the request's user, acting as `identity` (as `kubectl --as`), may `verb`
/// `resource` in `namespace` (a SubjectAccessReview, as `kubectl auth can-i`; `resource`
/// may be `pods/binding`, a subresource). `token`: the user's own bearer token, or the
/// admin's.
fn may(bed: &Bed, token: Option<&str>, identity: &str, verb: &str, resource: &str, namespace: &str) -> bool {
    let mut args = vec!["auth", "can-i", verb];
    match resource.split_once('/') {
        Some((resource, sub)) => args.extend([resource, "--subresource", sub]),
        None => args.push(resource),
    }
    match namespace {
        "" => args.push("-A"),
        ns => args.extend(["-n", ns]),
    }
    let user = service_account(INSTALL_NAMESPACE, identity);
    args.extend(["--as", user.as_str()]);
    if let Some(token) = token {
        args.extend(["--token", token]);
    }
    bed.plane.kubectl(&args).unwrap_or_default().trim() == "yes"
}

/// The grants of the install still stored.
async fn grants_left(admin: &kube::Client) -> anyhow::Result<Vec<String>> {
    let owned = ListParams::default().labels(OWNED);
    let roles = Api::<ClusterRole>::all(admin.clone()).list(&owned).await?.items;
    let bindings = Api::<ClusterRoleBinding>::all(admin.clone()).list(&owned).await?.items;
    let names = roles.into_iter().map(|r| format!("ClusterRole/{}", r.metadata.name.unwrap_or_default()));
    Ok(names
        .chain(bindings.into_iter().map(|b| format!("ClusterRoleBinding/{}", b.metadata.name.unwrap_or_default())))
        .collect())
}

/// The mode does not reach admission or RBAC.
async fn no_grant_outlives_the_install(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let bed = Bed::up_without_install(bins, mode, kubelet::Options::default()).await?;
    let mut objects = default_install_with(&bed, &["requeue", "wake"])?;
    objects.extend(render(&bed, &repo("manifests/uninstall"))?);
    apply(&bed, &without(&objects, &["Deployment", "Job"]), "install")?;
    let admin = bed.client.clone();
    coloc_testbed::wait::until(MINUTE, "the install's grants in force", || async {
        let all = RIGHTS.iter().all(|(who, verb, what, ns)| may(&bed, None, who, verb, what, ns));
        all.then_some(()).ok_or("not yet".to_string())
    })
    .await?;
    // Each grant names its owner: the install's Namespace, by the uid it has now.
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let uid = namespaces.get(INSTALL_NAMESPACE).await?.metadata.uid.unwrap_or_default();
    let owned = ListParams::default().labels(OWNED);
    let bindings = Api::<ClusterRoleBinding>::all(admin.clone()).list(&owned).await?.items;
    anyhow::ensure!(bindings.len() >= 5, "the install's ClusterRoleBindings: {}", bindings.len());
    for b in &bindings {
        let owners: Vec<_> =
            b.metadata.owner_references.iter().flatten().map(|o| (o.kind.as_str(), o.uid.as_str())).collect();
        anyhow::ensure!(owners == [("Namespace", uid.as_str())], "{:?} owned by {owners:?}", b.metadata.name);
    }

    // The namespace first: its ServiceAccounts go, and the garbage collector takes the grants.
    namespaces.delete(INSTALL_NAMESPACE, &DeleteParams::default()).await?;
    coloc_testbed::wait::until(MINUTE, "the install namespace and its grants gone", || async {
        if namespaces.get_opt(INSTALL_NAMESPACE).await.map_err(|e| e.to_string())?.is_some() {
            return Err("still terminating".into());
        }
        let left = grants_left(&admin).await.map_err(|e| e.to_string())?;
        left.is_empty().then_some(()).ok_or(format!("left: {left:?}"))
    })
    .await?;

    // A self-service user makes the namespace again and is made its admin.
    let user_home = "self-service";
    let portal = json!({"metadata": {"name": user_home}});
    namespaces.create(&PostParams::default(), &serde_json::from_value(portal)?).await?;
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "tenant", "namespace": user_home}}))?;
    Api::<ServiceAccount>::namespaced(admin.clone(), user_home).create(&PostParams::default(), &account).await?;
    let user = service_account(user_home, "tenant");
    let token =
        bed.plane.kubectl(&["-n", user_home, "create", "token", "tenant", "--duration", "1h"])?.trim().to_string();
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "self-service"},
        "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["create", "get"]}],
    }))?;
    Api::<ClusterRole>::all(admin.clone()).create(&PostParams::default(), &role).await?;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "self-service"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "self-service"},
        "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": user_home}],
    }))?;
    Api::<ClusterRoleBinding>::all(admin.clone()).create(&PostParams::default(), &binding).await?;
    let as_user = crate::privilege::acting_as(&bed.plane.admin_kubeconfig, &user).await?;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": INSTALL_NAMESPACE}}))?;
    coloc_testbed::wait::until(MINUTE, "the namespace made again by the user", || async {
        Api::<Namespace>::all(as_user.clone())
            .create(&PostParams::default(), &ns)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    })
    .await?;
    let admin_of: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "namespace-admin", "namespace": INSTALL_NAMESPACE},
        // What `edit` (and so `admin`) holds of its own: the test bed runs no controller
        // aggregating them, and these rules are where they take impersonation from.
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:aggregate-to-edit"},
        "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": user_home}],
    }))?;
    Api::<RoleBinding>::namespaced(admin.clone(), INSTALL_NAMESPACE).create(&PostParams::default(), &admin_of).await?;
    // The attack is real: the user may act as the install's identities there, none of
    // which exists.
    coloc_testbed::wait::until(MINUTE, "the user may act as the namespace's ServiceAccounts", || async {
        let args = [
            "auth",
            "can-i",
            "impersonate",
            "serviceaccounts/coloc-scheduler",
            "-n",
            INSTALL_NAMESPACE,
            "--token",
            token.as_str(),
        ];
        let yes = bed.plane.kubectl(&args).unwrap_or_default().trim() == "yes";
        yes.then_some(()).ok_or("not yet".to_string())
    })
    .await?;

    // Acting as each identity of the old install, the user is granted none of its rights.
    let reached: Vec<String> = RIGHTS
        .iter()
        .filter(|(who, verb, what, ns)| may(&bed, Some(&token), who, verb, what, ns))
        .map(|(who, verb, what, ns)| format!("{who}: {verb} {what} in {ns:?}"))
        .collect();
    anyhow::ensure!(reached.is_empty(), "reached through a re-made namespace: {reached:?}");
    // And the acting itself goes through: a read the namespace admin grants its accounts
    // nothing of is refused as that identity, not as the user.
    let scheduler = service_account(INSTALL_NAMESPACE, "coloc-scheduler");
    let refusal = bed
        .plane
        .kubectl(&["get", "nodes", "--token", token.as_str(), "--as", scheduler.as_str()])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    anyhow::ensure!(refusal.contains("system:serviceaccount:coloc-system:coloc-scheduler"), "{refusal}");
    bed.finish()
}
