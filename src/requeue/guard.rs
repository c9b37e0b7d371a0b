//! Guarding bare pods ahead of preemption, so that requeue writes nothing while
//! kube-scheduler waits for a preempt answer.
//!
//! A bare pod requeue would bring back carries the finalizer [`GUARD`] (and the label of
//! the same name) while it runs. When kube-scheduler preempts it, the API server keeps the
//! pod, terminating, until the finalizer is removed; requeue first stores the replacement
//! from the pod as it is then, and only then removes the finalizer. A crash in between
//! leaves the pod held: the next start finds it (a guarded pod that has left the watch is
//! found again by its label) and finishes.
//!
//! What to do is decided here, from the pod alone; `kube` carries it out.

use crate::model::Pod;
use crate::policy::Class;

use super::would_requeue;
#[cfg(doc)]
use super::GUARD;

/// Which bare pods requeue guards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Guarding {
    /// Requeue is off: guards are neither added nor looked after.
    #[default]
    Off,
    /// Requeue stores replacements before answering; guards left by an earlier run are
    /// finished (preempted pods requeued, the others unguarded), no new ones added.
    FinishOnly,
    /// Every pod requeue would bring back is guarded while it runs.
    On,
}

/// What a pod needs of the guard loop, as the view sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Running unguarded, and requeue would bring it back: add the guard.
    Guard,
    /// Guarded, and evicted, ended, or no longer requeued: finish (look again first).
    Finish,
}

/// `class`: the pod's class under the current policy.
pub fn need(pod: &Pod, class: &Class, guarding: Guarding) -> Option<Need> {
    let running = pod.node_name.is_some() && pod.deletion_time.is_none() && !pod.is_terminal();
    let wanted = guarding == Guarding::On && would_requeue(pod, class);
    match (pod.requeue_guarded, guarding) {
        (_, Guarding::Off) => None,
        (true, _) => (!running || !wanted).then_some(Need::Finish),
        (false, _) => (running && wanted).then_some(Need::Guard),
    }
}

/// What finishing a guarded pod means, decided on the pod as the API server has it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    /// kube-scheduler preempted it: store its replacement, then remove the guard.
    Requeue,
    /// Remove the guard; the reason is logged.
    Unguard(&'static str),
    /// Nothing (the guard is gone already, or the pod runs on, still guarded).
    Nothing,
}

/// `wanted`: requeue would still bring it back (`need` with the current policy).
pub fn finish(pod: &Pod, wanted: bool) -> Finish {
    let ending = pod.deletion_time.is_some() || pod.is_terminal();
    match () {
        _ if !pod.requeue_guarded => Finish::Nothing,
        _ if ending && pod.preempted => Finish::Requeue,
        _ if pod.deletion_time.is_some() => Finish::Unguard("deleted, not by preemption"),
        _ if ending => Finish::Unguard("ended on its own"),
        _ if !wanted => Finish::Unguard("requeue would no longer bring it back"),
        _ => Finish::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::OwnerRef;
    use crate::policy::Policy;

    fn batch_class() -> Class {
        let p = Policy::builtin_default();
        p.classes.iter().find(|c| c.name == "batch").expect("the default policy has batch").clone()
    }

    fn running(guarded: bool) -> Pod {
        Pod { name: "b".into(), uid: "u".into(), node_name: Some("n".into()), phase: Some("Running".into()), requeue_guarded: guarded, ..Default::default() }
    }

    #[test]
    fn a_running_bare_pod_is_guarded_and_then_left_alone() {
        assert_eq!(need(&running(false), &batch_class(), Guarding::On), Some(Need::Guard));
        assert_eq!(need(&running(true), &batch_class(), Guarding::On), None);
        assert_eq!(need(&running(false), &batch_class(), Guarding::FinishOnly), None);
        assert_eq!(need(&running(true), &batch_class(), Guarding::Off), None);
    }

    #[test]
    fn pods_a_controller_recreates_and_pending_pods_are_not_guarded() {
        let owned = Pod { controller: Some(OwnerRef { kind: "ReplicaSet".into(), name: "rs".into() }), ..running(false) };
        assert_eq!(need(&owned, &batch_class(), Guarding::On), None);
        let pending = Pod { node_name: None, phase: Some("Pending".into()), ..running(false) };
        assert_eq!(need(&pending, &batch_class(), Guarding::On), None);
    }

    #[test]
    fn a_guarded_pod_that_ends_or_is_evicted_is_finished() {
        let deleted = Pod { deletion_time: Some(1), ..running(true) };
        assert_eq!(need(&deleted, &batch_class(), Guarding::On), Some(Need::Finish));
        let ended = Pod { phase: Some("Succeeded".into()), ..running(true) };
        assert_eq!(need(&ended, &batch_class(), Guarding::On), Some(Need::Finish));
        // Guards left behind by a run with guarding on are taken off when it is off.
        assert_eq!(need(&running(true), &batch_class(), Guarding::FinishOnly), Some(Need::Finish));
    }

    #[test]
    fn only_a_preempted_pod_is_requeued_when_finished() {
        let preempted = Pod { deletion_time: Some(1), preempted: true, ..running(true) };
        assert_eq!(finish(&preempted, true), Finish::Requeue);
        // Preempted and already failed (the kubelet was quicker than requeue): still requeued.
        let failed = Pod { phase: Some("Failed".into()), preempted: true, ..running(true) };
        assert_eq!(finish(&failed, false), Finish::Requeue);
        let deleted = Pod { deletion_time: Some(1), ..running(true) };
        assert_eq!(finish(&deleted, true), Finish::Unguard("deleted, not by preemption"));
        let done = Pod { phase: Some("Succeeded".into()), ..running(true) };
        assert_eq!(finish(&done, true), Finish::Unguard("ended on its own"));
        assert_eq!(finish(&running(true), false), Finish::Unguard("requeue would no longer bring it back"));
        assert_eq!(finish(&running(true), true), Finish::Nothing);
        assert_eq!(finish(&Pod { deletion_time: Some(1), preempted: true, ..running(false) }, true), Finish::Nothing);
    }
}
