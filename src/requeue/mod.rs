//! Requeue: a bare offline pod (no controller would recreate it) that is preempted goes
//! back to the pending queue instead of being lost, whoever preempted it.
//!
//! A controller apart from the verbs' answers, in pods of its own (`coloc-extender
//! requeue`, the requeue identity, one replica leading: `leader`): when its cluster view
//! sees such a pod marked by kube-scheduler (`DisruptionTarget`, `PreemptionByScheduler`)
//! and being deleted, it stores a copy built from the pod's last state, held back by a
//! scheduling gate so that it cannot run beside the original, and removes the gate once
//! the original is gone. It publishes on its Lease (`lease`) whether it can store copies;
//! the extender reads that (`published`) and nothing else of it. The pure parts (names,
//! the copy's manifest, what to do now, the Lease's rules) live here; `kube` carries them
//! out against the API server.

pub mod availability;
pub mod controller;
pub mod give_up;
pub mod kube;
pub mod leader;
pub mod lease;
pub mod pace;
pub mod plan;
pub mod published;
pub mod remove_after_0_1;
pub mod replacement;
mod retry;

// Decisions make intents and the controller carries them out: plain data, in the model.
pub use crate::model::RequeueIntent;

// What requeue writes on pods is read below requeue too (the view, the wire decoder):
// the names live in `model::marks`.
pub use crate::model::marks::{
    attempt_of, copy_names, is_replacement, opted_out, replacement_name, replacement_names, ATTEMPT, BASE_NAME,
    FROM_POD, FROM_UID, GATE, GUARD, LABEL, OPT_OUT, PREEMPTED_ON,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Pod;

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
