//! No grant outlives its install. The rendered install (requeue and wake on, its
//! Deployments left out: no image runs here) applied; then its namespace deleted first,
//! as `kubectl delete ns` does, which leaves the cluster-scoped bindings naming the
//! install's ServiceAccounts. A self-service user who may create namespaces and
//! ServiceAccounts, but no RBAC, makes the namespace again: the install's identities are
//! refused to it, so none of the old grants (kube-scheduler's roles, the requeue identity's
//! pod writes) is reachable. An admin may still make them (the install re-applied). With
//! the identities policy and its backstop taken out, the same user gets kube-scheduler's
//! rights: what the policy prevents.

use coloc_testbed::control_plane::{service_account, INSTALL_NAMESPACE};
use coloc_testbed::{kubelet, Binaries};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

use crate::coloc_pod::{apply, default_install_with, without};
use crate::scenarios::MINUTE;
use crate::{Bed, Case, Mode};

pub fn cases() -> Vec<Case> {
    vec![Case {
        name: "grants_the_install_namespace_deleted_first_and_made_again_by_a_user_reaches_none_of_its_rights",
        run: |b, m| Box::pin(no_grant_outlives_the_install(b, m)),
    }]
}

/// The self-service user: namespaces and ServiceAccounts, nothing of RBAC.
const USER: &str = "self-service";

/// The message of the identities policy.
const IDENTITIES: &str = "only whoever may create ClusterRoleBindings may create them";

fn account(name: &str) -> anyhow::Result<ServiceAccount> {
    Ok(serde_json::from_value(json!({"metadata": {"name": name, "namespace": INSTALL_NAMESPACE}}))?)
}

/// Whether `user` may `verb` `resource` (a SubjectAccessReview, as `kubectl auth can-i`;
/// `resource` may be `pods/binding`, a subresource).
fn may(bed: &Bed, user: &str, verb: &str, resource: &str) -> anyhow::Result<bool> {
    let mut args = vec!["auth", "can-i", verb];
    match resource.split_once('/') {
        Some((resource, sub)) => args.extend([resource, "--subresource", sub]),
        None => args.push(resource),
    }
    args.extend(["--as", user, "-A"]);
    let answer = bed.plane.kubectl(&args).unwrap_or_default();
    Ok(answer.trim() == "yes")
}

/// The mode does not reach admission or RBAC.
async fn no_grant_outlives_the_install(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let bed = Bed::up_without_install(bins, mode, kubelet::Options::default()).await?;
    let objects = default_install_with(&bed, &["requeue", "wake"])?;
    apply(&bed, &without(&objects, &["Deployment"]), "install")?;
    let admin = bed.client.clone();
    let scheduler = service_account(INSTALL_NAMESPACE, "coloc-scheduler");
    let requeue = service_account(INSTALL_NAMESPACE, "coloc-extender-requeue");
    coloc_testbed::wait::until(MINUTE, "the install's grants in force", || async {
        let bound = may(&bed, &scheduler, "create", "pods/binding").map_err(|e| e.to_string())?
            && may(&bed, &requeue, "create", "pods").map_err(|e| e.to_string())?;
        bound.then_some(()).ok_or("not yet".to_string())
    })
    .await?;

    // The namespace first: its ServiceAccounts go, the ClusterRoleBindings stay.
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    namespaces.delete(INSTALL_NAMESPACE, &DeleteParams::default()).await?;
    coloc_testbed::wait::until(MINUTE, "the install namespace gone", || async {
        match namespaces.get_opt(INSTALL_NAMESPACE).await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(_) => Err("still terminating".into()),
        }
    })
    .await?;
    let left: Vec<String> = Api::<ClusterRoleBinding>::all(admin.clone())
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|b| b.subjects.iter().flatten().any(|s| s.namespace.as_deref() == Some(INSTALL_NAMESPACE)))
        .filter_map(|b| b.metadata.name)
        .collect();
    anyhow::ensure!(left.iter().any(|n| n == "coloc-scheduler"), "the bindings outlive the namespace: {left:?}");

    // A self-service user makes the namespace again and tries the install's identities.
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": USER},
        "rules": [
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["create", "get"]},
            {"apiGroups": [""], "resources": ["serviceaccounts", "serviceaccounts/token"], "verbs": ["create", "get"]},
        ],
    }))?;
    Api::<ClusterRole>::all(admin.clone()).create(&PostParams::default(), &role).await?;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": USER},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": USER},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
    }))?;
    Api::<ClusterRoleBinding>::all(admin.clone()).create(&PostParams::default(), &binding).await?;
    let user = crate::privilege::acting_as(&bed.plane.admin_kubeconfig, USER).await?;
    coloc_testbed::wait::until(MINUTE, "the self-service user's grant", || async {
        may(&bed, USER, "create", "namespaces").map_err(|e| e.to_string())?.then_some(()).ok_or("not yet".to_string())
    })
    .await?;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": INSTALL_NAMESPACE}}))?;
    Api::<Namespace>::all(user.clone()).create(&PostParams::default(), &ns).await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(user.clone(), INSTALL_NAMESPACE);
    for name in ["coloc-scheduler", "coloc-extender", "coloc-extender-requeue", "coloc-extender-wake"] {
        crate::privilege::refused(
            &format!("the ServiceAccount {name}, made again by a self-service user"),
            IDENTITIES,
            accounts.create(&PostParams::default(), &account(name)?).await,
        )?;
    }
    // Any other ServiceAccount of the user's is its own business.
    accounts
        .create(&PostParams::default(), &account("build-bot")?)
        .await
        .map_err(|e| anyhow::anyhow!("another ServiceAccount was refused: {e}"))?;
    // An admin (who may create ClusterRoleBindings) may: the install applied again.
    Api::<ServiceAccount>::namespaced(admin.clone(), INSTALL_NAMESPACE)
        .create(&PostParams::default(), &account("coloc-extender-requeue")?)
        .await
        .map_err(|e| anyhow::anyhow!("an admin was refused the install's identity: {e}"))?;

    // Control: without the policy and its backstop, the same user takes kube-scheduler's
    // rights by a ServiceAccount's name.
    for b in ["coloc-extender-identities", "coloc-extender-identities-backstop"] {
        bed.plane.kubectl(&["delete", "validatingadmissionpolicybinding", b])?;
    }
    coloc_testbed::wait::until(MINUTE, "the ServiceAccount admitted without the policies", || async {
        let dry = PostParams { dry_run: true, ..Default::default() };
        accounts
            .create(&dry, &account("coloc-scheduler").map_err(|e| e.to_string())?)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    })
    .await?;
    accounts.create(&PostParams::default(), &account("coloc-scheduler")?).await?;
    coloc_testbed::wait::until(MINUTE, "the control: the old install's grant reached by a name", || async {
        may(&bed, &scheduler, "create", "pods/binding")
            .map_err(|e| e.to_string())?
            .then_some(())
            .ok_or("no".to_string())
    })
    .await?;
    bed.finish()
}
