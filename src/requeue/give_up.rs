//! When a copy that keeps failing is given up: its reason, from the API server's refusal,
//! and the bound on tries. A write that can never succeed is given up visibly (a Warning
//! Event, `coloc_requeue_given_up_total{reason}`), never retried for ever.

/// Tries to store a copy before it is given up: the pod is then lost, visibly.
pub const MAX_TRIES: u32 = 5;

/// Whether to give up on a replacement after `tries` failed tries, and the reason (the
/// `reason` label of `coloc_requeue_given_up_total`). A namespace being deleted is given
/// up at once: it must never wait on the extender. Anything else gets `MAX_TRIES`, as a
/// permission or a quota may be mended meanwhile.
pub fn give_up_after(tries: u32, code: Option<u16>, message: &str) -> Option<&'static str> {
    match refused_for_good(code, message) {
        Some("namespace_terminating") => Some("namespace_terminating"),
        _ if tries < MAX_TRIES => None,
        Some(reason) => Some(reason),
        None => Some("retries_exhausted"),
    }
}

/// Why a replacement can never be stored as things stand, from the API server's refusal.
/// `None`: a passing failure (a timeout, an overloaded server).
pub fn refused_for_good(code: Option<u16>, message: &str) -> Option<&'static str> {
    let m = message.to_ascii_lowercase();
    match code? {
        403 if m.contains("being terminated") || m.contains("is terminating") => Some("namespace_terminating"),
        403 if m.contains("serviceaccount") || m.contains("service account") => Some("service_account_missing"),
        403 if m.contains("priorityclass") || m.contains("priority class") => Some("priority_class_missing"),
        403 if m.contains("pod security") || m.contains("violates podsecurity") => Some("pod_security"),
        403 => Some("forbidden"),
        404 if m.contains("priorityclass") || m.contains("priority class") => Some("priority_class_missing"),
        404 if m.contains("serviceaccount") => Some("service_account_missing"),
        404 => Some("namespace_missing"),
        422 => Some("invalid"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminating_namespace_is_given_up_at_once_anything_else_after_the_bound() {
        let ns = "unable to create new content in namespace batch because it is being terminated";
        assert_eq!(give_up_after(1, Some(403), ns), Some("namespace_terminating"));
        assert_eq!(give_up_after(1, Some(403), "forbidden: RBAC"), None);
        assert_eq!(give_up_after(MAX_TRIES, Some(403), "forbidden: RBAC"), Some("forbidden"));
        assert_eq!(give_up_after(MAX_TRIES - 1, Some(500), "timeout"), None);
        assert_eq!(give_up_after(MAX_TRIES, Some(500), "timeout"), Some("retries_exhausted"));
    }

    #[test]
    fn refusals_that_cannot_pass_are_told_from_those_that_can() {
        let ns =
            r#"pods "x" is forbidden: unable to create new content in namespace batch because it is being terminated"#;
        assert_eq!(refused_for_good(Some(403), ns), Some("namespace_terminating"));
        let sa = r#"pods "x" is forbidden: error looking up service account batch/runner: serviceaccount "runner" not found"#;
        assert_eq!(refused_for_good(Some(403), sa), Some("service_account_missing"));
        assert_eq!(refused_for_good(Some(422), "spec: Invalid value"), Some("invalid"));
        assert_eq!(refused_for_good(Some(500), "etcdserver: request timed out"), None);
        assert_eq!(refused_for_good(Some(429), "too many requests"), None);
        assert_eq!(refused_for_good(None, "connection refused"), None);
    }
}
