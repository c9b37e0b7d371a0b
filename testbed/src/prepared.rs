//! A control plane prepared as every end-to-end case and every loop-benchmark run needs
//! it: the namespaces `online` and `batch` (opted in to requeue copies), the default policy's PriorityClasses (admitted),
//! and the extender's shipped RBAC.

use std::path::{Path, PathBuf};

use kube::Client;

use crate::control_plane::{Options, INSTALL_NAMESPACE};
use crate::{cluster, Binaries, ControlPlane};

/// The online pods' namespace.
pub const ONLINE: &str = "online";
/// The offline (batch) pods' namespace.
pub const BATCH: &str = "batch";

/// What `serve --kube` needs (and `--publish-classes`).
pub const BASE_RBAC: [&str; 3] =
    ["manifests/clusterrole.yaml", "manifests/clusterrolebinding.yaml", "manifests/role-classes.yaml"];
/// What `--requeue` needs on top: the requeue controller's identity, grants and Lease.
pub const REQUEUE_RBAC: [&str; 4] = [
    "manifests/requeue/serviceaccount.yaml",
    "manifests/requeue/clusterrole.yaml",
    "manifests/requeue/clusterrolebinding.yaml",
    "manifests/requeue/lease.yaml",
];
/// What `--wake` needs on top.
pub const WAKE_RBAC: [&str; 4] = [
    "manifests/wake/serviceaccount.yaml",
    "manifests/wake/impersonate.yaml",
    "manifests/wake/role.yaml",
    "manifests/wake/rolebinding.yaml",
];

/// A file of this repository (manifests, policies), from whichever crate asks.
pub fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

/// Starts a control plane with `opts`, creates the two namespaces and the default
/// policy's PriorityClasses, waits until the API server admits pods of each class, and
/// applies `manifests` (paths from the repository's root) in the install namespace, made
/// for them (without them, an install applied whole brings its own).
pub async fn start(bins: &Binaries, opts: Options, manifests: &[&str]) -> anyhow::Result<(ControlPlane, Client)> {
    let service_accounts = opts.service_account_admission;
    let plane = ControlPlane::start(bins, opts).await?;
    let client = plane.client().await?;
    cluster::create_all(&client, vec![cluster::namespace(ONLINE), cluster::requeue_namespace(BATCH)]).await?;
    let mut namespaces = vec![ONLINE, BATCH];
    if !manifests.is_empty() {
        cluster::create(&client, cluster::namespace(INSTALL_NAMESPACE)).await?;
        namespaces.push(INSTALL_NAMESPACE);
    }
    if service_accounts {
        // What the ServiceAccount controller would make, which admission then looks up.
        let defaults = namespaces.iter().map(|ns| cluster::service_account(ns, "default")).collect();
        cluster::create_all(&client, defaults).await?;
    }
    cluster::create_all(&client, cluster::default_priority_classes()).await?;
    cluster::until_admitted(&client, BATCH, &["online-prod", "offline-batch", "free"]).await?;
    for f in manifests {
        plane.apply(&repo(f))?;
    }
    Ok((plane, client))
}
