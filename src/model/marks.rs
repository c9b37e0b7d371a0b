//! The names the extender writes on pods (labels, annotations, scheduling gates,
//! finalizers, resources), and reading them back. They sit below everything that reads
//! them: the wire decoder, the cluster view, requeue, the policy.

use crate::model::Pod;

/// The extended resource that marks a pod for filter/prioritize in the per-pod-verbs
/// registration (manifests/scheduler/kube-scheduler-config-per-pod-verbs.yaml, entry with
/// `managedResources`). No node offers it: it is `ignoredByScheduler`.
pub const PER_POD_VERBS_MARKER: &str = "coloc-extender.io/per-pod-verbs";

/// The scheduling gate that holds a replacement back while its original still runs.
pub const GATE: &str = "coloc-extender.io/requeue";
/// The finalizer earlier releases put on bare pods requeue would bring back (the pod stayed,
/// terminating, until its replacement was stored). No longer added; left ones are finished.
pub const GUARD: &str = "coloc-extender.io/requeue-guard";
/// Label on every replacement (list/watch selector, and for people).
pub const LABEL: &str = "coloc-extender.io/requeued";
/// UID of the pod this one replaces.
pub const FROM_UID: &str = "coloc-extender.io/requeued-from-uid";
/// `namespace/name` of the pod this one replaces.
pub const FROM_POD: &str = "coloc-extender.io/requeued-from";
/// How many times this workload has been requeued (1 for the first replacement).
pub const ATTEMPT: &str = "coloc-extender.io/requeue-attempt";
/// The node the original was preempted on.
pub const PREEMPTED_ON: &str = "coloc-extender.io/preempted-on";
/// The name of the first pod in the chain: replacements of replacements do not grow.
pub const BASE_NAME: &str = "coloc-extender.io/base-name";

/// Annotation by which a bare pod opts out of requeue (value `never`): whoever created it
/// brings it back under a name of its own, so a copy would run twice.
pub const OPT_OUT: &str = "coloc-extender.io/requeue";

/// A namespace opts in to requeue with this label (value `enabled`): copies of its bare
/// pods may be stored there. Admission (`manifests/admission/validatingadmissionpolicy.yaml`)
/// refuses a copy anywhere else.
pub const NAMESPACE_OPT_IN: (&str, &str) = ("coloc-extender.io/requeue", "enabled");
/// The routing label of the scheduler-of-its-own install: a namespace whose pods go to
/// coloc-scheduler has opted in to the extender, requeue included.
pub const NAMESPACE_ROUTED: (&str, &str) = ("coloc-extender.io/scheduler", "coloc-scheduler");
/// A namespace that opted in to copies also lets them keep what their original had beyond
/// Pod Security baseline (host ports, capabilities, ...) with this label (value `enabled`):
/// explicitly, by the namespace's own label, never in kube-system or the install namespace.
/// The controller releases only a copy whose spec is its original's (`copy_spec::digest`),
/// so a copy never asks for more than its original had.
pub const NAMESPACE_BEYOND_BASELINE: (&str, &str) = ("coloc-extender.io/requeue-beyond-baseline", "enabled");
/// Never a home for copies, whatever its labels: it is usually exempt from Pod Security.
pub const NEVER_REQUEUED_IN: &str = "kube-system";

/// How a namespace opts in, for the sentences that say it has not.
pub fn namespace_opt_in_labels() -> String {
    let ((label, value), (routed, to)) = (NAMESPACE_OPT_IN, NAMESPACE_ROUTED);
    format!("label {label}={value} or {routed}={to}")
}

/// What a namespace of this name and these labels opted in to.
pub fn namespace_opt_in(name: &str, labels: &crate::model::Labels) -> crate::model::NamespaceOptIn {
    let has = |(k, v): (&str, &str)| labels.get(k) == Some(v);
    let copies = name != NEVER_REQUEUED_IN && (has(NAMESPACE_OPT_IN) || has(NAMESPACE_ROUTED));
    crate::model::NamespaceOptIn { copies, beyond_baseline: copies && has(NAMESPACE_BEYOND_BASELINE) }
}

/// Has `pod` opted out of requeue?
pub fn opted_out(pod: &Pod) -> bool {
    pod.annotations.get(OPT_OUT).is_some_and(|v| v.eq_ignore_ascii_case("never"))
}

/// Is `pod` a replacement we stored?
pub fn is_replacement(pod: &Pod) -> bool {
    pod.annotations.contains_key(FROM_UID)
}

/// Requeues so far of the workload `pod` belongs to (0 for an original). Read only from a
/// copy, which the extender alone writes: an original's owner cannot claim requeues (and
/// with them a pod that is never a victim) by annotating it.
pub fn attempt_of(pod: &Pod) -> u32 {
    if !is_replacement(pod) {
        return 0;
    }
    pod.annotations.get(ATTEMPT).and_then(|a| a.parse().ok()).unwrap_or(0)
}

/// `<base>-rq-<hash of the original's UID>`, at most 253 characters: deterministic, and
/// different for every original (each requeue of a chain has its own UID).
pub fn replacement_name(pod: &Pod) -> String {
    let base = pod.annotations.get(BASE_NAME).unwrap_or(&pod.name);
    let suffix = format!("-rq-{}", name_hash(&pod.uid, 0));
    let room = 253 - suffix.len();
    let mut cut = base.len().min(room);
    while !base.is_char_boundary(cut) {
        cut -= 1;
    }
    let base = base[..cut].trim_end_matches(['-', '.']);
    format!("{base}{suffix}")
}

/// Names a copy may take, in order: `replacement_name`, then as many others (the UID's
/// hash with 1, 2, 3): a pod that is not the copy holding one name does not stop the copy.
pub const COPY_NAMES: usize = 4;

/// The names the copy of the original `uid` may take, in order, `name` being one of them
/// (they differ only in their last ten characters). The same on every replica.
pub fn copy_names(name: &str, uid: &str) -> Vec<String> {
    let stem = name.get(..name.len().saturating_sub(10)).unwrap_or_default();
    (0..COPY_NAMES).map(|n| format!("{stem}{}", name_hash(uid, n))).collect()
}

/// The names the copy of `pod` may take, in order (`copy_names`).
pub fn replacement_names(pod: &Pod) -> Vec<String> {
    copy_names(&replacement_name(pod), &pod.uid)
}

/// Ten hex digits of the UID's hash, `n` mixed in after the first name.
fn name_hash(uid: &str, n: usize) -> String {
    let hash = match n {
        0 => fnv1a(uid.as_bytes()),
        n => fnv1a(format!("{uid}/{n}").as_bytes()),
    };
    format!("{:010x}", hash & 0xff_ffff_ffff)
}

/// FNV-1a, 64 bits: fully specified, so every replica and release derives the same name
/// (and the same policy fingerprint).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, uid: &str) -> Pod {
        Pod { name: name.into(), namespace: "batch".into(), uid: uid.into(), ..Default::default() }
    }

    #[test]
    fn the_name_is_deterministic_and_differs_per_original() {
        let a = replacement_name(&pod("free-3", "uid-1"));
        assert_eq!(a, replacement_name(&pod("free-3", "uid-1")));
        assert_ne!(a, replacement_name(&pod("free-3", "uid-2")));
        assert!(a.starts_with("free-3-rq-"), "{a}");
    }

    #[test]
    fn a_replacement_of_a_replacement_keeps_the_base_name() {
        let mut second = pod("free-3-rq-0123456789", "uid-2");
        second.annotations.insert(BASE_NAME.into(), "free-3".into());
        second.annotations.insert(ATTEMPT.into(), "1".into());
        second.annotations.insert(FROM_UID.into(), "uid-1".into());
        assert!(replacement_name(&second).starts_with("free-3-rq-"));
        assert_eq!(replacement_name(&second).len(), "free-3-rq-".len() + 10);
        assert_eq!(attempt_of(&second), 1);
    }

    #[test]
    fn long_names_are_cut_to_a_valid_length() {
        let long = "a".repeat(300);
        let name = replacement_name(&pod(&long, "u"));
        assert_eq!(name.len(), 253);
    }
}
