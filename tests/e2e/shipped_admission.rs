//! The base's admission policies on a test bed, and writes made as whoever a case needs.

use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use kube::api::{Api, PostParams};
use kube::Client;

use crate::privilege::{BINDINGS, POLICIES};
use crate::Bed;

/// The base's ValidatingAdmissionPolicies and bindings, created as they ship (the install
/// namespace is coloc-system here, as the files name it). Each starts holding a moment
/// after: a case waits for the refusal it relies on first.
pub async fn apply(admin: &Client) -> anyhow::Result<()> {
    for text in POLICIES {
        let p: ValidatingAdmissionPolicy = serde_yaml_ng::from_str(text)?;
        Api::<ValidatingAdmissionPolicy>::all(admin.clone()).create(&PostParams::default(), &p).await?;
    }
    for text in BINDINGS {
        let b: ValidatingAdmissionPolicyBinding = serde_yaml_ng::from_str(text)?;
        Api::<ValidatingAdmissionPolicyBinding>::all(admin.clone()).create(&PostParams::default(), &b).await?;
    }
    Ok(())
}

/// A client acting as `user` in `groups`, by the admin's right to impersonate anyone (a
/// ServiceAccount's name brings its groups with it).
pub async fn as_user(bed: &Bed, user: &str, groups: &[&str]) -> anyhow::Result<Client> {
    let kc = kube::config::Kubeconfig::read_from(&bed.plane.admin_kubeconfig)?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    config.auth_info.impersonate = Some(user.into());
    if !groups.is_empty() {
        config.auth_info.impersonate_groups = Some(groups.iter().map(|g| g.to_string()).collect());
    }
    Ok(Client::try_from(config)?)
}

/// A dry-run create: admission judges it, nothing is stored.
pub fn dry() -> PostParams {
    PostParams { dry_run: true, ..Default::default() }
}
