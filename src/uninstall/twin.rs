//! A copy's twin: the copy under another scheduler (a pod's scheduler cannot change), for
//! the copies that name coloc-scheduler when it goes.

use serde_json::{json, Value};

use crate::model::marks::GATE;

/// The name of the twin a copy is moved to: the copy's, `-d` added (cut to 253).
pub fn twin_name(name: &str) -> String {
    let mut cut = name.len().min(251);
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}-d", &name[..cut])
}

/// The twin of the copy `json` under `scheduler`: the same labels, annotations, gates and
/// spec, another name; what the API server set (uid, status, ...) left out. Admission
/// admits it as a copy; its scheduling gate is the requeue one whether or not the copy
/// was released (a copy is created gated).
pub fn twin(json: &Value, scheduler: &str) -> Value {
    let mut t = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": twin_name(json["metadata"]["name"].as_str().unwrap_or_default()),
            "namespace": json["metadata"]["namespace"],
            "labels": json["metadata"]["labels"],
            "annotations": json["metadata"]["annotations"],
        },
        "spec": json["spec"],
    });
    if let Some(spec) = t["spec"].as_object_mut() {
        crate::model::copy_spec::without_instance_fields(spec);
    }
    t["spec"]["schedulerName"] = json!(scheduler);
    let mut gates: Vec<Value> = t["spec"]["schedulingGates"].as_array().cloned().unwrap_or_default();
    if !gates.iter().any(|g| g["name"] == GATE) {
        gates.push(json!({"name": GATE}));
    }
    t["spec"]["schedulingGates"] = Value::Array(gates);
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::marks::{FROM_UID, LABEL};

    #[test]
    fn a_copys_twin_names_the_other_scheduler_and_keeps_the_rest() {
        let copy = json!({
            "metadata": {"name": "free-1-rq-0123456789", "namespace": "batch", "uid": "c", "resourceVersion": "9",
                "labels": {LABEL: "true"}, "annotations": {FROM_UID: "u"}},
            "spec": {"schedulerName": "coloc-scheduler", "priority": 3000,
                "containers": [{"name": "main", "image": "w",
                    "volumeMounts": [{"name": "kube-api-access-x1", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]}],
                "volumes": [{"name": "kube-api-access-x1", "projected": {"sources": []}}]},
            "status": {"phase": "Pending"},
        });
        let t = twin(&copy, "default-scheduler");
        assert_eq!(t["metadata"]["name"], "free-1-rq-0123456789-d");
        assert_eq!(t["spec"]["schedulerName"], "default-scheduler");
        assert_eq!(t["spec"]["schedulingGates"], json!([{"name": GATE}]), "created gated, as a copy is");
        assert_eq!(t["metadata"]["labels"][LABEL], "true");
        assert_eq!(t["metadata"]["annotations"][FROM_UID], "u");
        assert!(t["metadata"].get("uid").is_none() && t.get("status").is_none());
        // What admission gave the copy it gives the twin anew.
        assert!(t["spec"].get("priority").is_none());
        assert_eq!(t["spec"]["volumes"], json!([]));
        assert_eq!(t["spec"]["containers"][0]["volumeMounts"], json!([]));
        assert_eq!(twin_name(&"a".repeat(253)).len(), 253);
    }
}
