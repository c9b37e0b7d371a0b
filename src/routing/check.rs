//! Whether routing is in effect, as the API server itself answers: a pod the routing
//! admission policy must send to coloc-scheduler, created as a dry run in a namespace
//! labelled for it (stored nowhere), and the scheduler the answer names. The objects of
//! the install can all be there and correct while the API server applies none of them (a
//! v1.36 kube-apiserver whose ConfigMap parameter cache stopped once no binding used it:
//! docs/troubleshooting.md), so only an admission pass proves it. Pure: the probe, the
//! verdict, and which pods were created while it did not hold.

use serde_json::{json, Value};

use crate::model::{Pod, Timestamp};
use crate::policy::routing::RoutingProbe;
use crate::policy::Policy;

/// The label that sends a namespace's pods to coloc-scheduler (manifests/routing).
pub const NAMESPACE_LABEL: (&str, &str) = ("coloc-extender.io/scheduler", "coloc-scheduler");
/// The scheduler routing names.
pub const ROUTED_TO: &str = "coloc-scheduler";
/// The probe's generateName; admission lets the routing-check identity create nothing else,
/// and only as a dry run.
pub const PROBE_PREFIX: &str = "coloc-extender-routing-check-";
/// The probe's own label.
pub const PROBE_LABEL: &str = "coloc-extender.io/routing-check";
/// The label of a copy, which routing leaves alone (and so does this check).
const COPY_LABEL: &str = "coloc-extender.io/requeued";

/// The probe for `namespace`: `probe`'s class and labels, one container of an image that
/// cannot exist, Pod Security "restricted" as it stands, no token.
pub fn probe_pod(namespace: &str, probe: &RoutingProbe) -> Value {
    let mut labels: serde_json::Map<String, Value> = probe.labels.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
    labels.insert(PROBE_LABEL.into(), json!("true"));
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": PROBE_PREFIX, "namespace": namespace, "labels": labels},
        "spec": {
            "priorityClassName": probe.priority_class_name,
            "automountServiceAccountToken": false,
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65534, "runAsGroup": 65534, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "check",
                "image": "coloc-extender-routing-check.invalid/never:never",
                "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}, "limits": {"cpu": "1m", "memory": "1Mi"}},
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
            }],
        },
    })
}

/// What a dry run of the probe said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    InEffect,
    /// Admitted, but left to `scheduler`.
    NotInEffect {
        scheduler: String,
    },
}

/// The verdict on the probe as admitted, by the scheduler it names.
pub fn verdict(admitted_scheduler: Option<&str>) -> Verdict {
    match admitted_scheduler.unwrap_or("default-scheduler") {
        ROUTED_TO => Verdict::InEffect,
        other => Verdict::NotInEffect { scheduler: other.to_string() },
    }
}

/// The pods of a labelled namespace left to `scheduler` that routing should have sent to
/// coloc-scheduler, created at or after `since` (while it did not hold): not a copy, of a
/// governed class below the system's priorities, as `priority` resolves them.
pub fn missed<'a>(
    pods: &'a [(Pod, String)],
    policy: &Policy,
    since: Timestamp,
    priority: impl Fn(&Pod) -> i32,
) -> Vec<&'a Pod> {
    pods.iter()
        .filter(|(p, scheduler)| scheduler == "default-scheduler" && p.creation_time.is_some_and(|t| t >= since))
        .map(|(p, _)| p)
        .filter(|p| p.labels.get(COPY_LABEL) != Some("true") && p.labels.get(PROBE_LABEL).is_none())
        .filter(|p| policy.routes(p, priority(p)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, class: &str, created: Timestamp) -> Pod {
        Pod {
            name: name.into(),
            namespace: "batch".into(),
            priority_class_name: Some(class.into()),
            creation_time: Some(created),
            ..Default::default()
        }
    }

    #[test]
    fn the_probe_is_the_governed_class_restricted_and_runs_nothing() {
        let probe = RoutingProbe { priority_class_name: "free".into(), labels: vec![("tier".into(), "x".into())] };
        let p = probe_pod("batch", &probe);
        assert_eq!(p["metadata"]["generateName"], PROBE_PREFIX);
        assert_eq!(p["metadata"]["labels"]["tier"], "x");
        assert_eq!(p["spec"]["priorityClassName"], "free");
        assert!(p["spec"].get("schedulerName").is_none(), "left to the default, as a user's pod");
        assert_eq!(p["spec"]["automountServiceAccountToken"], false);
    }

    #[test]
    fn routing_holds_only_where_the_probe_names_coloc_scheduler() {
        assert_eq!(verdict(Some("coloc-scheduler")), Verdict::InEffect);
        assert_eq!(verdict(None), Verdict::NotInEffect { scheduler: "default-scheduler".into() });
        assert_eq!(verdict(Some("other")), Verdict::NotInEffect { scheduler: "other".into() });
    }

    #[test]
    fn the_pods_missed_are_governed_ones_left_to_the_default_scheduler_since_it_stopped() {
        let policy = Policy::builtin_default();
        let mut copy = pod("copy", "free", 20);
        copy.labels = crate::model::Labels::from([(COPY_LABEL, "true")]);
        let pods = vec![
            (pod("missed", "free", 20), "default-scheduler".to_string()),
            (pod("before", "free", 5), "default-scheduler".to_string()),
            (pod("routed", "free", 20), "coloc-scheduler".to_string()),
            (pod("system", "system-cluster-critical", 20), "default-scheduler".to_string()),
            (copy, "default-scheduler".to_string()),
        ];
        let priority = |p: &Pod| if p.name == "system" { 2_000_000_000 } else { 3000 };
        let names: Vec<&str> = missed(&pods, &policy, 10, priority).iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["missed"]);
    }
}
