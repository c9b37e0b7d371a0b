//! Bare pods kube-scheduler preempted and that are going: what requeue copies, whoever
//! evicted them (the extender's answer, kube-scheduler on its own, another scheduler).
//!
//! kube-scheduler marks a victim (condition `DisruptionTarget`, reason
//! `PreemptionByScheduler`), then deletes it. Only both together mean preempted: a mark whose
//! delete never comes is reset by the disruption controller, and a pod deleted without the
//! mark was deleted by someone else. The watch shows the mark first, so the pod's bytes are
//! kept from then on (`Pod::last_state`) and survive a delete with grace period 0.
//!
//! An eviction is kept until its copy shows up in the view; at most `KEPT` of them, the
//! oldest going first, so a copy that can never be stored holds nothing forever.

use std::sync::Arc;

use super::PMap;
use crate::model::{marks, Phase, Pod, PodRef, Timestamp};

/// Evictions kept at most (a storm of a thousand victims fits several times over; each
/// holds one pod's JSON).
pub const KEPT: usize = 5_000;

/// A preempted bare pod seen going.
#[derive(Debug, Clone)]
pub struct Eviction {
    /// Its last state, with the bytes a copy is made from.
    pub pod: PodRef,
    /// The deletion itself was seen (a deletionTimestamp). `false`: the pod only left the
    /// watch with the mark on, which a delete with grace 0 and a pod ending on its own both
    /// look like (the watch drops terminal pods): the API server tells which.
    pub deletion_seen: bool,
    /// When the view saw it go: its deletionTimestamp, else its last known time.
    pub since: Timestamp,
}

#[derive(Debug, Clone, Default)]
pub struct Evictions {
    by_uid: PMap<String, Arc<Eviction>>,
}

/// A pod requeue may copy: bare, marked, and not a gated copy of ours (those never ran).
fn is_candidate(pod: &Pod) -> bool {
    (pod.preempted || pod.evicted)
        && pod.is_bare()
        && pod.last_state.is_some()
        && !(marks::is_replacement(pod) && pod.scheduling_gates.iter().any(|g| g == marks::GATE))
}

impl Evictions {
    /// A new state of a pod in the watch. `requeues`: its class requeues it, marked as it is
    /// (preempted; evicted through the API only where the class opts in).
    pub(super) fn observe(&mut self, pod: &PodRef, requeues: bool) {
        // A pod that finished its work while terminating is not brought back.
        if requeues && is_candidate(pod) && pod.phase != Some(Phase::Succeeded) {
            if let Some(at) = pod.deletion_time {
                self.insert(pod, true, at);
            }
        }
    }

    /// `last`, the state the watch's final event carried, has left the watch: deleted, or
    /// reached a terminal phase (the API server then sends the state before).
    pub(super) fn observe_gone(&mut self, last: &PodRef, requeues: bool) {
        if requeues && is_candidate(last) && last.phase != Some(Phase::Succeeded) {
            let since = last.deletion_time.or(last.start_time).or(last.creation_time).unwrap_or_default();
            self.insert(last, last.deletion_time.is_some(), since);
        }
    }

    /// A copy of `uid` is in the view: nothing left to do for it here.
    pub(super) fn copied(&mut self, uid: &str) {
        self.by_uid.remove(uid);
    }

    fn insert(&mut self, pod: &PodRef, deletion_seen: bool, since: Timestamp) {
        if self.by_uid.len() >= KEPT && !self.by_uid.contains_key(&pod.uid) {
            let mut times: Vec<Timestamp> = self.by_uid.values().map(|e| e.since).collect();
            times.sort_unstable();
            let cut = times[times.len() / 2];
            self.by_uid.retain(|_, e| e.since > cut);
        }
        // A later event without the deletion (a re-list) never takes back one that had it.
        let deletion_seen = deletion_seen || self.by_uid.get(&pod.uid).is_some_and(|e| e.deletion_seen);
        self.by_uid.insert(pod.uid.clone(), Arc::new(Eviction { pod: pod.clone(), deletion_seen, since }));
    }

    /// Every eviction whose copy the view has not seen yet.
    pub fn iter(&self) -> impl Iterator<Item = &Eviction> {
        self.by_uid.values().map(|e| &**e)
    }

    pub fn get(&self, uid: &str) -> Option<&Eviction> {
        self.by_uid.get(uid).map(|e| &**e)
    }

    pub fn len(&self) -> usize {
        self.by_uid.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_uid.is_empty()
    }
}
