//! The forged copy, a security fixture: a gated "copy" made as whoever holds the requeue
//! identity could make one. Shared by the fake-API tests and the end-to-end suite.

use coloc_extender::model::marks::{FROM_POD, FROM_UID, GATE, LABEL};
use serde_json::{json, Value};

/// `pod` turned into a gated copy that names `from_uid` (and `from_pod`, where given) as
/// its original, which need not exist: a copy's label, annotations and gate, and what a
/// thief would want of it: root, another ServiceAccount, every toleration, unbound.
pub fn forged_copy(mut pod: Value, from_uid: &str, from_pod: Option<&str>, service_account: &str) -> Value {
    let mut annotations = json!({FROM_UID: from_uid});
    if let Some(from) = from_pod {
        annotations[FROM_POD] = json!(from);
    }
    pod["metadata"]["labels"] = json!({LABEL: "true"});
    pod["metadata"]["annotations"] = annotations;
    pod["spec"]["nodeName"] = Value::Null;
    pod["spec"]["schedulingGates"] = json!([{"name": GATE}]);
    pod["spec"]["securityContext"] = json!({"runAsUser": 0});
    pod["spec"]["serviceAccountName"] = json!(service_account);
    pod["spec"]["tolerations"] = json!([{"operator": "Exists"}]);
    pod["status"] = json!({"phase": "Pending"});
    pod
}
