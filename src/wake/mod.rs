//! Waking the pods kube-scheduler parked because of us.
//!
//! When a `preempt` call fails (the extender is restarting, its view is not ready, the API
//! server refuses the replacements), kube-scheduler parks the pod as unschedulable. With
//! queueing hints (the default), it retries such a pod only on a cluster event its filters
//! care about, or after `podMaxInUnschedulablePodsDuration` (5 minutes): an online pod
//! waits although the extender is back. The event that NodeResourcesFit (the filter that
//! rejects a pod waiting for preemption) always takes as a reason to retry is the deletion
//! of an assigned pod. So a wake is: store a placeholder pod bound to a node that cannot
//! exist, keep it a moment so kube-scheduler's informer sees it, and delete it. It never
//! runs (no kubelet has that node) and carries no requests; the pod GC controller removes
//! a leftover one (orphaned on a missing node) if our delete fails.

pub mod due;
pub mod kube;

use serde_json::{json, Value};

/// The node a placeholder is bound to: a reserved `.invalid` name no node can have.
pub const NODE: &str = "coloc-extender-wake.invalid";
/// Label on every placeholder, to find leftovers.
pub const LABEL: &str = "coloc-extender.io/wake";
/// The placeholder's image: a reserved `.invalid` registry, so that it could not run even
/// were a node of [`NODE`]'s name ever to exist, and never pulled. Admission admits no other
/// (a constant in the policy: nothing to look up, nothing an install can lose).
pub const IMAGE: &str = "coloc-extender-wake.invalid/placeholder:never";

/// Why a wake was asked for (a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The view became ready: after a start, or after it went stale.
    Ready,
    /// A preempt was answered while the view was not ready.
    ViewNotReady,
    /// A preempt call was answered with an error.
    PreemptFailed,
    /// A pod kept off online room (`placement.keepOffOnlineRoom`) may take it now.
    KeptOffOver,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Ready => "ready",
            Reason::ViewNotReady => "view_not_ready",
            Reason::PreemptFailed => "preempt_failed",
            Reason::KeptOffOver => "kept_off_over",
        }
    }
}

/// Why a placeholder exists, on it for whoever finds one (admission admits this text only).
pub const WHY: &str = "wakes pods kube-scheduler parked while the extender could not answer; deleted at once";
/// The user and group a placeholder would run as: nobody (it never runs).
pub const NOBODY: i64 = 65534;

/// The placeholder pod: bound to [`NODE`], of [`IMAGE`], no requests, no token, never run.
/// Pod Security "restricted" as it stands, so that an install namespace enforcing it admits
/// the placeholder (admission checks exactly this shape).
pub fn placeholder(namespace: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "coloc-extender-wake-",
            "namespace": namespace,
            "labels": {LABEL: "true", "app.kubernetes.io/managed-by": "coloc-extender"},
            "annotations": {"coloc-extender.io/why": WHY},
        },
        "spec": {
            "nodeName": NODE,
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 0,
            "securityContext": {
                "runAsNonRoot": true,
                "runAsUser": NOBODY,
                "runAsGroup": NOBODY,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [{
                "name": "wake",
                "image": IMAGE,
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
            }],
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_placeholder_is_bound_to_a_node_that_cannot_exist_and_requests_nothing() {
        let p = placeholder("kube-system");
        assert_eq!(p["spec"]["nodeName"], NODE);
        assert!(NODE.ends_with(".invalid"));
        assert!(p["spec"]["containers"][0].get("resources").is_none());
        assert_eq!(p["spec"]["automountServiceAccountToken"], false);
        assert_eq!(p["metadata"]["labels"][LABEL], "true");
        assert_eq!(p["metadata"]["namespace"], "kube-system");
    }

    #[test]
    fn a_placeholder_is_what_pod_security_restricted_asks_and_its_metadata_what_admission_admits() {
        let p = placeholder("ns");
        let policy = include_str!("../../manifests/admission/validatingadmissionpolicy.yaml");
        assert!(policy.contains(&format!("'coloc-extender.io/why': '{WHY}'")), "the policy admits the annotation");
        assert!(policy.contains(&format!("runAsUser.orValue(0) == {NOBODY}")));
        assert_eq!(p["spec"]["securityContext"]["runAsNonRoot"], true);
        assert_eq!(p["spec"]["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
        let c = &p["spec"]["containers"][0]["securityContext"];
        assert_eq!(
            (c["allowPrivilegeEscalation"].clone(), c["capabilities"].clone()),
            (json!(false), json!({"drop": ["ALL"]}))
        );
        assert!(p["metadata"].get("finalizers").is_none() && p["metadata"].get("ownerReferences").is_none());
    }

    #[test]
    fn the_image_is_the_one_admission_admits_and_cannot_be_pulled() {
        let policy = include_str!("../../manifests/admission/validatingadmissionpolicy.yaml");
        assert!(policy.contains(&format!("c.image == '{IMAGE}'")), "the policy admits {IMAGE}");
        assert_eq!(placeholder("ns")["spec"]["containers"][0]["image"], IMAGE);
        assert!(IMAGE.split('/').next().is_some_and(|registry| registry.ends_with(".invalid")));
    }
}
