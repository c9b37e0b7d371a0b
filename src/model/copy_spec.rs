//! The spec a requeue copy carries, and its digest: what requeue compares before it
//! releases a gated copy, so that only a copy it would build itself from an eviction it
//! recorded is ever released.
//!
//! A copy's spec is its original's minus what belonged to that instance (its node, the
//! priority admission computed, the injected ServiceAccount token), plus the requeue gate.
//! Admission adds a new token and the priority to the copy as it is stored. The digest
//! leaves all of these out, so the original's JSON and the copy as the API server returns
//! it give the same digest, and any other change to the spec (a user, an image, a host
//! path, a toleration, another ServiceAccount) gives another one. So a copy released in a
//! namespace that lets copies go beyond Pod Security baseline asks for nothing its original
//! did not: every control of baseline is a field of the spec (the deprecated AppArmor
//! annotation too: the API server writes it into the spec as it stores a pod).

use serde_json::{Map, Value};

use super::marks::GATE;

/// SHA-256 of a copy's spec without what admission adds (`digest`). A collision would let
/// a forged copy be released: hence a cryptographic hash, not the names' FNV.
#[derive(Clone, PartialEq, Eq)]
pub struct SpecDigest(Box<[u8; 32]>);

impl std::fmt::Debug for SpecDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for b in &self.0[..6] {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl SpecDigest {
    /// A digest of `seed` alone, for tests that need distinct digests.
    pub fn of_bytes(seed: &[u8]) -> SpecDigest {
        let d = ring::digest::digest(&ring::digest::SHA256, seed);
        let mut out = [0u8; 32];
        out.copy_from_slice(d.as_ref());
        SpecDigest(Box::new(out))
    }
}

/// The token volume the ServiceAccount admission plugin injects (it injects a new one).
fn is_injected_token_volume(volume: &Value) -> bool {
    volume.get("name").and_then(Value::as_str).is_some_and(|n| n.starts_with("kube-api-access-"))
        && volume.get("projected").is_some()
}

/// A pod spec without what belonged to the pod it was read from: its node, the priority
/// admission computes, ephemeral containers (not settable at creation), and the token
/// volume the ServiceAccount admission plugin injects (it injects a new one).
pub fn without_instance_fields(spec: &mut Map<String, Value>) {
    spec.remove("nodeName");
    // Admission computes it from priorityClassName; a stale copy would be rejected.
    spec.remove("priority");
    // Ephemeral containers cannot be set at creation.
    spec.remove("ephemeralContainers");
    let mut dropped = Vec::new();
    if let Some(Value::Array(volumes)) = spec.get_mut("volumes") {
        volumes.retain(|v| {
            let injected = is_injected_token_volume(v);
            if injected {
                dropped.extend(v.get("name").and_then(Value::as_str).map(str::to_string));
            }
            !injected
        });
    }
    for list in ["containers", "initContainers"] {
        if let Some(Value::Array(containers)) = spec.get_mut(list) {
            for c in containers {
                if let Some(Value::Array(mounts)) = c.get_mut("volumeMounts") {
                    mounts.retain(|m| {
                        !m.get("name").and_then(Value::as_str).is_some_and(|n| dropped.iter().any(|d| d == n))
                    });
                }
            }
        }
    }
}

/// The digest of the spec of `pod` (a pod object), as a copy of it would carry it, or as a
/// copy carries it: without the instance's fields and without the requeue gate. `None`
/// without a spec object.
pub fn digest(pod: &Value) -> Option<SpecDigest> {
    let mut spec = pod.get("spec")?.as_object()?.clone();
    without_instance_fields(&mut spec);
    if let Some(Value::Array(gates)) = spec.get_mut("schedulingGates") {
        gates.retain(|g| g.get("name").and_then(Value::as_str) != Some(GATE));
        if gates.is_empty() {
            spec.remove("schedulingGates");
        }
    }
    // serde_json's maps are ordered by key: the encoding is canonical.
    let bytes = serde_json::to_vec(&spec).ok()?;
    Some(SpecDigest::of_bytes(&bytes))
}

/// `digest` of a pod's JSON text, reading only its spec.
pub fn digest_json(json: &str) -> Option<SpecDigest> {
    #[derive(serde::Deserialize)]
    struct SpecOnly {
        #[serde(default)]
        spec: Value,
    }
    let only: SpecOnly = serde_json::from_str(json).ok()?;
    digest(&serde_json::json!({ "spec": only.spec }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn original() -> Value {
        json!({"metadata": {"name": "free-3", "uid": "u-1"},
            "spec": {"nodeName": "n1", "priority": 10, "priorityClassName": "free", "serviceAccountName": "runner",
                "containers": [{"name": "main", "image": "busybox", "volumeMounts": [
                    {"name": "kube-api-access-abcde", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]}],
                "volumes": [{"name": "kube-api-access-abcde", "projected": {"sources": []}}]},
            "status": {"phase": "Running"}})
    }

    /// The copy as the API server returns it: gated, a new token, the priority again.
    fn stored_copy() -> Value {
        json!({"metadata": {"name": "free-3-rq-1", "uid": "u-2"},
            "spec": {"priority": 10, "priorityClassName": "free", "serviceAccountName": "runner",
                "schedulingGates": [{"name": GATE}],
                "containers": [{"name": "main", "image": "busybox", "volumeMounts": [
                    {"name": "kube-api-access-zzzzz", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]}],
                "volumes": [{"name": "kube-api-access-zzzzz", "projected": {"sources": []}}]}})
    }

    #[test]
    fn a_copy_as_stored_has_the_digest_of_its_original() {
        assert_eq!(digest(&original()), digest(&stored_copy()));
        assert_eq!(digest_json(&original().to_string()), digest(&original()));
    }

    #[test]
    fn any_other_change_to_the_spec_changes_the_digest() {
        let changes: [fn(&mut Value); 4] = [
            |c| c["spec"]["securityContext"] = json!({"runAsUser": 0}),
            |c| c["spec"]["serviceAccountName"] = json!("admin"),
            |c| c["spec"]["tolerations"] = json!([{"operator": "Exists"}]),
            |c| c["spec"]["schedulingGates"] = json!([{"name": GATE}, {"name": "example.com/hold"}]),
        ];
        for change in changes {
            let mut forged = stored_copy();
            change(&mut forged);
            assert_ne!(digest(&forged), digest(&original()), "{forged}");
        }
        assert_eq!(digest(&json!({"metadata": {}})), None);
    }

    /// Where copies may go beyond baseline, the digest is what holds a copy to its
    /// original: one asking for any control of baseline more is never released.
    #[test]
    fn a_copy_asking_for_more_than_its_original_beyond_baseline_has_another_digest() {
        let more: [fn(&mut Value); 12] = [
            |c| c["spec"]["securityContext"] = json!({"windowsOptions": {"hostProcess": true}}),
            |c| c["spec"]["hostNetwork"] = json!(true),
            |c| c["spec"]["containers"][0]["securityContext"] = json!({"privileged": true}),
            |c| c["spec"]["containers"][0]["securityContext"] = json!({"capabilities": {"add": ["SYS_ADMIN"]}}),
            |c| c["spec"]["volumes"].as_array_mut().unwrap().push(json!({"name": "root", "hostPath": {"path": "/"}})),
            |c| c["spec"]["containers"][0]["ports"] = json!([{"containerPort": 80, "hostPort": 80}]),
            |c| c["spec"]["containers"][0]["securityContext"] = json!({"appArmorProfile": {"type": "Unconfined"}}),
            |c| c["spec"]["securityContext"] = json!({"seLinuxOptions": {"type": "spc_t"}}),
            |c| c["spec"]["containers"][0]["securityContext"] = json!({"procMount": "Unmasked"}),
            |c| c["spec"]["securityContext"] = json!({"seccompProfile": {"type": "Unconfined"}}),
            |c| c["spec"]["securityContext"] = json!({"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}),
            |c| c["spec"]["containers"][0]["livenessProbe"] = json!({"httpGet": {"host": "10.0.0.1", "port": 1}}),
        ];
        for change in more {
            let mut forged = stored_copy();
            change(&mut forged);
            assert_ne!(digest(&forged), digest(&original()), "{forged}");
        }
    }
}
