//! The policy's classes, published for admission (`serve --publish-classes`): the
//! ConfigMap `coloc-extender-classes` in the install namespace holds, one selector a line,
//! the classes whose pods are routed to coloc-scheduler (`routed`), those the per-pod
//! verbs registration sends (`perPodVerbs`) and those whose bare victims are requeued
//! (`requeued`), as `Policy::routed_selectors` writes them. The routing, per-pod-verbs
//! and copy-class admission policies read it as their parameter, and do nothing where it
//! is missing. It is owned by the pods that run the extender: once none
//! is left (the Deployment deleted or scaled to zero, the namespace deleted), the garbage
//! collector deletes it, and new pods go to the default scheduler again, unmarked. So a
//! half-removed install leaves no pod unplaced, and the classes are the policy's alone.

pub mod check;
pub mod probe;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

use crate::policy::Policy;

/// The ConfigMap's name in the install namespace.
pub const NAME: &str = "coloc-extender-classes";
/// Its keys.
pub const ROUTED: &str = "routed";
pub const PER_POD_VERBS: &str = "perPodVerbs";
pub const REQUEUED: &str = "requeued";
/// How often the ConfigMap is looked at (a policy reload, an owner gone).
const EVERY: Duration = Duration::from_secs(5);

/// The pod this replica runs in: an owner of the ConfigMap.
#[derive(Debug, Clone)]
pub struct OwnerPod {
    pub name: String,
    pub uid: String,
}

impl OwnerPod {
    fn reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            ..Default::default()
        }
    }
}

/// What the ConfigMap should hold for `policy`.
pub fn data_of(policy: &Policy) -> BTreeMap<String, String> {
    BTreeMap::from([
        (ROUTED.to_string(), policy.routed_selectors()),
        (PER_POD_VERBS.to_string(), policy.per_pod_verbs_selectors()),
        (REQUEUED.to_string(), policy.requeued_selectors()),
    ])
}

/// The ConfigMap to write, given the one found: `None` if it says `data` and names `owner`
/// already. Owners of other replicas are kept (the garbage collector drops those gone).
pub fn wanted(
    found: Option<&ConfigMap>,
    namespace: &str,
    data: &BTreeMap<String, String>,
    owner: &OwnerPod,
) -> Option<ConfigMap> {
    let mut map = match found {
        Some(found) => found.clone(),
        None => ConfigMap {
            metadata: ObjectMeta {
                name: Some(NAME.into()),
                namespace: Some(namespace.into()),
                labels: Some(BTreeMap::from([("app.kubernetes.io/name".to_string(), "coloc-extender".to_string())])),
                ..Default::default()
            },
            ..Default::default()
        },
    };
    let owners = map.metadata.owner_references.get_or_insert_with(Vec::new);
    let owned = owners.iter().any(|o| o.uid == owner.uid);
    if !owned {
        owners.push(owner.reference());
    }
    let same = map.data.as_ref() == Some(data);
    if found.is_some() && owned && same {
        return None;
    }
    map.data = Some(data.clone());
    Some(map)
}

/// Keeps the ConfigMap as the policy says, owned by `owner`, until the process ends.
pub async fn publish(client: Client, namespace: String, owner: OwnerPod, policy: Arc<ArcSwap<Policy>>) {
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let mut last_error = String::new();
    loop {
        match publish_once(&api, &namespace, &owner, &policy.load()).await {
            Ok(Some(what)) => {
                tracing::info!(configmap = %format!("{namespace}/{NAME}"), what, "the policy's classes published for admission (routing, per-pod verbs)");
                last_error.clear();
            }
            Ok(None) => last_error.clear(),
            Err(e) => {
                let e = e.to_string();
                if e != last_error {
                    tracing::warn!(configmap = %format!("{namespace}/{NAME}"), error = %e, "cannot publish the policy's classes; will retry (new pods are routed by what was published last, or not at all)");
                    last_error = e;
                }
            }
        }
        tokio::time::sleep(EVERY).await;
    }
}

async fn publish_once(
    api: &Api<ConfigMap>,
    namespace: &str,
    owner: &OwnerPod,
    policy: &Policy,
) -> Result<Option<&'static str>, kube::Error> {
    let found = api.get_opt(NAME).await?;
    let Some(map) = wanted(found.as_ref(), namespace, &data_of(policy), owner) else { return Ok(None) };
    // A create, or a replace carrying the resourceVersion read: of two replicas writing
    // at once, one gets a conflict and looks again.
    match found {
        None => api.create(&PostParams::default(), &map).await.map(|_| Some("created")),
        Some(_) => api.replace(NAME, &PostParams::default(), &map).await.map(|_| Some("updated")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(uid: &str) -> OwnerPod {
        OwnerPod { name: format!("coloc-scheduler-{uid}"), uid: uid.into() }
    }

    #[test]
    fn the_first_replica_creates_it_owned_by_its_pod_and_the_second_adds_itself() {
        let data = data_of(&Policy::builtin_default());
        let first = wanted(None, "coloc-system", &data, &owner("a")).expect("created");
        assert_eq!(first.metadata.name.as_deref(), Some(NAME));
        assert_eq!(first.data.as_ref(), Some(&data));
        let owners =
            |m: &ConfigMap| m.metadata.owner_references.iter().flatten().map(|o| o.uid.clone()).collect::<Vec<_>>();
        assert_eq!(owners(&first), ["a"]);
        assert!(wanted(Some(&first), "coloc-system", &data, &owner("a")).is_none(), "nothing to write");
        let second = wanted(Some(&first), "coloc-system", &data, &owner("b")).expect("its owner added");
        assert_eq!(owners(&second), ["a", "b"]);
    }

    #[test]
    fn a_changed_policy_rewrites_the_classes_and_keeps_the_owners() {
        let first = wanted(None, "coloc-system", &data_of(&Policy::builtin_default()), &owner("a")).unwrap();
        let renamed = Policy::from_yaml(
            "defaultClass: rest\nclasses:\n- name: web\n  match:\n  - priorityClassNames: [tier-1]\n- name: rest\n",
        )
        .unwrap();
        let changed = wanted(Some(&first), "coloc-system", &data_of(&renamed), &owner("a")).expect("rewritten");
        assert_eq!(changed.data.unwrap()[ROUTED], "tier-1|-2147483648|1000000000||");
        assert_eq!(changed.metadata.owner_references.unwrap().len(), 1);
    }
}
