//! The replacement's manifest: the original pod, as the API server last sent it (being
//! deleted, or gone), made into a new pending pod. Same labels, annotations and spec; minus what belongs to the original
//! instance (uid, node, status, the injected service-account token, the node's topology
//! labels copied at binding); plus our annotations and the scheduling gate that keeps it
//! from running beside the original.

use serde_json::{json, Map, Value};

use crate::model::copy_spec::without_instance_fields;
use crate::model::marks::{ATTEMPT, BASE_NAME, FROM_POD, FROM_UID, GATE, GUARD, LABEL, PREEMPTED_ON};
use crate::model::RequeueIntent;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReplacementError {
    #[error("the original is not a JSON object with metadata and spec")]
    NotAPod,
    #[error("the original changed: uid {found:?}, the decision was about {expected:?}")]
    UidChanged { expected: String, found: String },
}

/// Metadata that names one instance of the original, or that the API server sets.
const INSTANCE_METADATA: &[&str] = &[
    "uid",
    "resourceVersion",
    "managedFields",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "selfLink",
    "generateName",
    "ownerReferences",
    "finalizers",
];

/// Labels the API server derives from where the original ran: since v1.35 the
/// PodTopologyLabels admission copies these from the node onto a pod when it is bound, and
/// overwrites whatever the pod had, so dropping them loses nothing. A copy would claim the
/// old node's zone while it waits (and would mislead topology spreading and selectors).
pub const BOUND_NODE_LABELS: &[&str] = &["topology.kubernetes.io/zone", "topology.kubernetes.io/region"];

/// The replacement of an evicted original.
pub fn build(original: &Value, intent: &RequeueIntent) -> Result<Value, ReplacementError> {
    let mut pod = original.clone();
    let obj = pod.as_object_mut().ok_or(ReplacementError::NotAPod)?;
    let meta = obj.get_mut("metadata").and_then(Value::as_object_mut).ok_or(ReplacementError::NotAPod)?;
    let uid = meta.get("uid").and_then(Value::as_str).unwrap_or_default();
    if uid != intent.uid {
        return Err(ReplacementError::UidChanged { expected: intent.uid.clone(), found: uid.to_string() });
    }
    let base = meta
        .get("annotations")
        .and_then(|a| a.get(BASE_NAME))
        .and_then(Value::as_str)
        .unwrap_or(&intent.name)
        .to_string();
    for key in INSTANCE_METADATA {
        meta.remove(*key);
    }
    meta.insert("name".into(), json!(intent.replacement));
    meta.insert("namespace".into(), json!(intent.namespace));
    let annotations = object_at(meta, "annotations");
    annotations.insert(FROM_UID.into(), json!(intent.uid));
    annotations.insert(FROM_POD.into(), json!(intent.original_key()));
    annotations.insert(ATTEMPT.into(), json!(intent.attempt.to_string()));
    if !intent.node.is_empty() {
        annotations.insert(PREEMPTED_ON.into(), json!(intent.node));
    }
    annotations.insert(BASE_NAME.into(), json!(base));
    let labels = object_at(meta, "labels");
    for key in BOUND_NODE_LABELS.iter().chain([&GUARD]) {
        labels.remove(*key);
    }
    labels.insert(LABEL.into(), json!("true"));

    let spec = object_at(obj, "spec");
    without_instance_fields(spec);
    let gates = spec.entry("schedulingGates").or_insert_with(|| json!([]));
    if !gates.is_array() {
        *gates = json!([]);
    }
    let gates = gates.as_array_mut().expect("just made an array");
    if !gates.iter().any(|g| g.get("name").and_then(Value::as_str) == Some(GATE)) {
        gates.push(json!({"name": GATE}));
    }
    obj.remove("status");
    obj.insert("apiVersion".into(), json!("v1"));
    obj.insert("kind".into(), json!("Pod"));
    Ok(pod)
}

/// The object at `key`, made one if it is missing or null.
fn object_at<'a>(parent: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let v = parent.entry(key).or_insert_with(|| json!({}));
    if !v.is_object() {
        *v = json!({});
    }
    v.as_object_mut().expect("just made an object")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intent() -> RequeueIntent {
        RequeueIntent {
            namespace: "batch".into(),
            name: "free-3".into(),
            uid: "u-1".into(),
            node: "node-gpu1".into(),
            replacement: "free-3-rq-00000000ab".into(),
            attempt: 1,
            preemptor: "online/online-2".into(),
        }
    }

    fn original() -> Value {
        json!({
            "metadata": {"name": "free-3", "namespace": "batch", "uid": "u-1", "resourceVersion": "42",
                "creationTimestamp": "2026-11-22T02:00:00Z", "managedFields": [{"manager": "kubectl"}],
                "labels": {"app": "free"}, "annotations": {"team": "ml"}},
            "spec": {"nodeName": "node-gpu1", "priority": 10, "priorityClassName": "free",
                "containers": [{"name": "main", "image": "busybox", "volumeMounts": [
                    {"name": "kube-api-access-abcde", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
                    {"name": "data", "mountPath": "/data"}]}],
                "volumes": [{"name": "kube-api-access-abcde", "projected": {"sources": []}}, {"name": "data", "emptyDir": {}}]},
            "status": {"phase": "Running"}
        })
    }

    #[test]
    fn a_replacement_is_a_gated_copy_without_the_instance_fields() {
        let r = build(&original(), &intent()).unwrap();
        assert_eq!(r["metadata"]["name"], "free-3-rq-00000000ab");
        for gone in ["uid", "resourceVersion", "managedFields", "creationTimestamp"] {
            assert!(r["metadata"].get(gone).is_none(), "{gone} copied");
        }
        assert_eq!(r["metadata"]["labels"]["app"], "free");
        assert_eq!(r["metadata"]["labels"][LABEL], "true");
        assert_eq!(r["metadata"]["annotations"]["team"], "ml");
        assert_eq!(r["metadata"]["annotations"][FROM_UID], "u-1");
        assert_eq!(r["metadata"]["annotations"][ATTEMPT], "1");
        assert_eq!(r["metadata"]["annotations"][BASE_NAME], "free-3");
        assert!(r["spec"].get("nodeName").is_none());
        assert!(r["spec"].get("priority").is_none());
        assert!(r.get("status").is_none());
        assert_eq!(r["spec"]["schedulingGates"], json!([{"name": GATE}]));
        assert_eq!(r["spec"]["volumes"], json!([{"name": "data", "emptyDir": {}}]));
        assert_eq!(r["spec"]["containers"][0]["volumeMounts"], json!([{"name": "data", "mountPath": "/data"}]));
        assert_eq!(r["spec"]["priorityClassName"], "free");
    }

    #[test]
    fn labels_the_api_server_copied_from_the_old_node_stay_behind() {
        let mut o = original();
        o["metadata"]["labels"]["topology.kubernetes.io/zone"] = json!("zone-3");
        o["metadata"]["labels"]["topology.kubernetes.io/region"] = json!("region-1");
        let r = build(&o, &intent()).unwrap();
        assert!(r["metadata"]["labels"].get("topology.kubernetes.io/zone").is_none());
        assert!(r["metadata"]["labels"].get("topology.kubernetes.io/region").is_none());
        assert_eq!(r["metadata"]["labels"]["app"], "free", "what the user wrote is kept");
    }

    #[test]
    fn another_pod_of_the_same_name_is_not_copied() {
        let mut other = original();
        other["metadata"]["uid"] = json!("u-2");
        assert!(matches!(build(&other, &intent()), Err(ReplacementError::UidChanged { .. })));
        assert_eq!(build(&json!([1]), &intent()), Err(ReplacementError::NotAPod));
    }

    #[test]
    fn a_copy_as_built_has_the_spec_digest_of_its_original() {
        // What the release compares: the copy requeue builds, as it is stored.
        let digest = crate::model::copy_spec::digest;
        assert_eq!(digest(&build(&original(), &intent()).unwrap()), digest(&original()));
    }

    #[test]
    fn the_copy_names_the_node_the_original_was_preempted_on() {
        let r = build(&original(), &intent()).unwrap();
        assert_eq!(r["metadata"]["annotations"][PREEMPTED_ON], "node-gpu1");
    }

    #[test]
    fn a_guarded_original_is_copied_while_it_is_evicted_without_its_guard() {
        let mut going = original();
        going["metadata"]["deletionTimestamp"] = json!("2026-11-22T02:01:00Z");
        going["metadata"]["finalizers"] = json!([GUARD]);
        going["metadata"]["labels"][GUARD] = json!("true");
        let r = build(&going, &intent()).unwrap();
        assert!(r["metadata"].get("deletionTimestamp").is_none());
        assert!(r["metadata"].get("finalizers").is_none());
        assert!(r["metadata"]["labels"].get(GUARD).is_none(), "the copy is guarded on its own once it runs");
        assert_eq!(r["spec"]["schedulingGates"], json!([{"name": GATE}]));
    }

    /// Admission refuses a copy with any finalizer or owner: the builder carries neither
    /// of the original's (a foreign finalizer would keep the copy, and its namespace, for
    /// ever).
    #[test]
    fn a_copy_carries_none_of_its_originals_finalizers_or_owners() {
        let mut o = original();
        o["metadata"]["finalizers"] = json!(["example.com/cleanup", GUARD]);
        o["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "x"}]);
        o["metadata"]["generateName"] = json!("free-");
        let r = build(&o, &intent()).unwrap();
        for gone in ["finalizers", "ownerReferences", "generateName"] {
            assert!(r["metadata"].get(gone).is_none(), "{gone} copied");
        }
    }

    #[test]
    fn existing_gates_are_kept_and_ours_is_added_once() {
        let mut o = original();
        o["spec"]["schedulingGates"] = json!([{"name": "example.com/quota"}, {"name": GATE}]);
        let r = build(&o, &intent()).unwrap();
        assert_eq!(r["spec"]["schedulingGates"], json!([{"name": "example.com/quota"}, {"name": GATE}]));
    }
}
