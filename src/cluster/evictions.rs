//! Bare pods kube-scheduler preempted and that are going: what requeue copies, whoever
//! evicted them (the extender's answer, kube-scheduler on its own, another scheduler).
//!
//! kube-scheduler marks a victim (condition `DisruptionTarget`, reason
//! `PreemptionByScheduler`), then deletes it. Only both together mean preempted: a mark whose
//! delete never comes is reset by the disruption controller, and a pod deleted without the
//! mark was deleted by someone else. The watch shows the mark first, so the pod's bytes are
//! kept from then on (`RequeueView::last_state`) and survive a delete with grace period 0.
//!
//! An eviction is recorded here, and kept until its copy is released (or deleted): requeue
//! releases only a copy of an eviction it recorded, whose spec is the one its recorded
//! state gives (`Pod::spec_digest`). At most `KEPT` records, those whose copy is not in
//! the view going first, the oldest first, so a copy that can never be stored holds
//! nothing forever. Each record also fixes the requeue count its copy carries
//! (`attempt_after`).

use std::sync::Arc;

use super::PMap;
use crate::model::{marks, Phase, Pod, PodRef, Timestamp};

/// Evictions kept at most (a storm of a thousand victims fits several times over; each
/// holds one decoded pod, its bytes apart and bounded by `kept`). A copy waits for its
/// original at most `--requeue-stuck-after` (120 s): a cut that reaches a record whose
/// copy waits takes 2,500 evictions since, which are cut first while not copied yet.
pub const KEPT: usize = 5_000;

/// Originals whose copy was released or deleted, remembered at most (so that a late event
/// of the original, its last status or its removal, is not taken for a new eviction).
const FINISHED_KEPT: usize = 10_000;

/// A preempted bare pod seen going.
#[derive(Debug, Clone)]
pub struct Eviction {
    /// Its last state (its bytes are kept apart: `RequeueView::last_state`).
    pub pod: PodRef,
    /// The deletion itself was seen (a deletionTimestamp). `false`: the pod only left the
    /// watch with the mark on, which a delete with grace 0 and a pod ending on its own both
    /// look like (the watch drops terminal pods): the API server tells which.
    pub deletion_seen: bool,
    /// When the view saw it go: its deletionTimestamp, else its last known time.
    pub since: Timestamp,
    /// The requeue count its copy carries (`attempt_after`), fixed when it is recorded.
    pub attempt: u32,
    /// Every pod nominated to its node was of its own namespace when it was recorded: its
    /// count did not go up.
    pub self_inflicted: bool,
    /// Its copy is in the view.
    pub copied: bool,
}

#[derive(Debug, Clone, Default)]
pub struct Evictions {
    by_uid: PMap<String, Arc<Eviction>>,
    /// Originals whose copy is done with (released or deleted), with the order they came in.
    finished: PMap<String, u64>,
    finished_seq: u64,
}

/// Why a gated pod claiming to be a copy is not one this controller would release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotRecorded {
    /// No eviction of the original it names is recorded here.
    NoRecord,
    /// Not in its original's namespace, or not under a name its copy takes.
    OtherName,
    /// Its spec is not the one the recorded original gives (`Pod::spec_digest`).
    SpecDiffers,
}

impl NotRecorded {
    /// The `reason` label of `coloc_requeue_unrecorded_copies_total`.
    pub fn reason(self) -> &'static str {
        match self {
            NotRecorded::NoRecord => "no_record",
            NotRecorded::OtherName => "other_name",
            NotRecorded::SpecDiffers => "spec_differs",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            NotRecorded::NoRecord => "no replica of this extender recorded the eviction of the original it names",
            NotRecorded::OtherName => "it is not in its original's namespace under a name requeue gives its copy",
            NotRecorded::SpecDiffers => "its spec is not the one requeue builds from the original's recorded state",
        }
    }
}

/// A pod requeue may copy: bare, marked, decoded with its spec's digest, and not a gated
/// copy of ours (those never ran).
fn is_candidate(pod: &Pod) -> bool {
    (pod.preempted || pod.evicted)
        && pod.is_bare()
        && pod.spec_digest.is_some()
        && !(marks::is_replacement(pod) && pod.scheduling_gates.iter().any(|g| g == marks::GATE))
}

/// The requeue count a copy of `victim` carries, and whether it stayed: one more than the
/// victim's own, unless the eviction is self-inflicted. A tenant that preempts its own
/// pod with its own online pods must not count it up to `requeue.maxAttempts` (and so buy
/// it out of being a victim): `nominated`, the pods nominated to the victim's node when
/// its eviction is recorded, are taken for its preemptors; if there are some and all are
/// of the victim's namespace, the count stays. Otherwise (another namespace's, or none
/// seen: a drain, or a nomination not seen yet) it goes up.
pub fn attempt_after(victim: &Pod, nominated: &[PodRef]) -> (u32, bool) {
    let own = marks::attempt_of(victim);
    let self_inflicted = !nominated.is_empty() && nominated.iter().all(|p| p.namespace == victim.namespace);
    match self_inflicted {
        true => (own, true),
        false => (own.saturating_add(1), false),
    }
}

impl Evictions {
    /// A new state of a pod in the watch. `requeues`: its class requeues it, marked as it is
    /// (preempted; evicted through the API only where the class opts in). `nominated`: the
    /// pods nominated to its node now. Returns the UIDs of records cut to stay within `KEPT`.
    pub(super) fn observe(&mut self, pod: &PodRef, requeues: bool, nominated: &[PodRef]) -> Vec<String> {
        // A pod that finished its work while terminating is not brought back.
        if requeues && is_candidate(pod) && pod.phase != Some(Phase::Succeeded) {
            if let Some(at) = pod.deletion_time {
                return self.insert(pod, true, at, nominated);
            }
        }
        Vec::new()
    }

    /// `last`, the state the watch's final event carried, has left the watch: deleted, or
    /// reached a terminal phase (the API server then sends the state before).
    pub(super) fn observe_gone(&mut self, last: &PodRef, requeues: bool, nominated: &[PodRef]) -> Vec<String> {
        if requeues && is_candidate(last) && last.phase != Some(Phase::Succeeded) {
            let since = last.deletion_time.or(last.start_time).or(last.creation_time).unwrap_or_default();
            return self.insert(last, last.deletion_time.is_some(), since, nominated);
        }
        Vec::new()
    }

    /// The copy of `uid` this controller builds is in the view, gated.
    pub(super) fn copy_seen(&mut self, uid: &str) {
        if let Some(e) = self.by_uid.get_mut(uid) {
            if !e.copied {
                Arc::make_mut(e).copied = true;
            }
        }
    }

    /// The copy of `uid` was released or deleted: its record goes, and later events of
    /// the original record nothing. Returns whether there was a record.
    pub(super) fn finish(&mut self, uid: &str) -> bool {
        if self.by_uid.remove(uid).is_none() {
            return false;
        }
        if self.finished.len() >= FINISHED_KEPT {
            let mut order: Vec<u64> = self.finished.values().copied().collect();
            order.sort_unstable();
            let cut = order[order.len() / 2];
            self.finished.retain(|_, s| *s > cut);
        }
        self.finished_seq += 1;
        self.finished.insert(uid.to_string(), self.finished_seq);
        true
    }

    fn insert(&mut self, pod: &PodRef, deletion_seen: bool, since: Timestamp, nominated: &[PodRef]) -> Vec<String> {
        if self.finished.contains_key(&pod.uid) {
            return Vec::new();
        }
        let mut cut = Vec::new();
        let record = match self.by_uid.get(&pod.uid) {
            // A later event without the deletion (a re-list) never takes back one that had
            // it; the count and the copy stay as first recorded.
            Some(e) => {
                Eviction { pod: pod.clone(), deletion_seen: deletion_seen || e.deletion_seen, since, ..(**e).clone() }
            }
            None => {
                if self.by_uid.len() >= KEPT {
                    cut = self.cut_half();
                }
                let (attempt, self_inflicted) = attempt_after(pod, nominated);
                Eviction { pod: pod.clone(), deletion_seen, since, attempt, self_inflicted, copied: false }
            }
        };
        self.by_uid.insert(pod.uid.clone(), Arc::new(record));
        cut
    }

    /// Forgets half the records: first those whose copy is not in the view, the oldest
    /// first (a copy that waits for its original must find its record at its release).
    fn cut_half(&mut self) -> Vec<String> {
        let mut order: Vec<(bool, Timestamp, String)> =
            self.by_uid.iter().map(|(uid, e)| (e.copied, e.since, uid.clone())).collect();
        order.sort_unstable();
        order.truncate(order.len() / 2);
        let cut: Vec<String> = order.into_iter().map(|(_, _, uid)| uid).collect();
        for uid in &cut {
            self.by_uid.remove(uid);
        }
        cut
    }

    /// Was the copy of `uid` released or deleted (recently: the last `FINISHED_KEPT`)?
    pub fn is_finished(&self, uid: &str) -> bool {
        self.finished.contains_key(uid)
    }

    /// The record `copy` is the copy of, as this controller builds it: the eviction of the
    /// original it names is recorded, it is in that namespace under one of the names its
    /// copy takes, and its spec is the one the recorded state gives.
    pub fn of_copy(&self, copy: &Pod) -> Result<&Eviction, NotRecorded> {
        let from = copy.annotations.get(marks::FROM_UID).unwrap_or_default();
        let e = self.get(from).ok_or(NotRecorded::NoRecord)?;
        if copy.namespace != e.pod.namespace || !marks::replacement_names(&e.pod).contains(&copy.name) {
            return Err(NotRecorded::OtherName);
        }
        match (&copy.spec_digest, &e.pod.spec_digest) {
            (Some(a), Some(b)) if a == b => Ok(e),
            _ => Err(NotRecorded::SpecDiffers),
        }
    }

    /// Every recorded eviction whose copy is not released yet.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::copy_spec::SpecDigest;

    fn pod(namespace: &str, name: &str) -> PodRef {
        Arc::new(Pod { name: name.into(), namespace: namespace.into(), uid: format!("u-{name}"), ..Default::default() })
    }

    #[test]
    fn an_eviction_for_another_namespaces_pod_counts_one_made_for_the_victims_own_does_not() {
        let victim = pod("batch", "free-1");
        assert_eq!(attempt_after(&victim, &[pod("online", "web")]), (1, false));
        assert_eq!(attempt_after(&victim, &[pod("batch", "mine")]), (0, true), "self-inflicted");
        assert_eq!(attempt_after(&victim, &[pod("batch", "mine"), pod("online", "web")]), (1, false));
        assert_eq!(attempt_after(&victim, &[]), (1, false), "no preemptor seen: it counts");
    }

    #[test]
    fn a_self_inflicted_eviction_of_a_copy_keeps_its_count() {
        let mut copy = Pod { namespace: "batch".into(), uid: "u-2".into(), ..Default::default() };
        copy.annotations.insert(marks::FROM_UID.into(), "u-1".into());
        copy.annotations.insert(marks::ATTEMPT.into(), "3".into());
        assert_eq!(attempt_after(&copy, &[pod("batch", "mine")]), (3, true));
        assert_eq!(attempt_after(&copy, &[pod("online", "web")]), (4, false));
    }

    fn going(i: usize) -> PodRef {
        Arc::new(Pod {
            name: format!("p-{i}"),
            namespace: "batch".into(),
            uid: format!("u-{i}"),
            preempted: true,
            deletion_time: Some(i as i64),
            spec_digest: Some(SpecDigest::of_bytes(b"spec")),
            ..Default::default()
        })
    }

    #[test]
    fn past_the_bound_records_without_a_copy_go_first() {
        let mut e = Evictions::default();
        for i in 0..KEPT {
            e.observe(&going(i), true, &[]);
        }
        // The oldest record's copy is in the view: it stays past the cut.
        e.copy_seen("u-0");
        let cut = e.observe(&going(KEPT), true, &[]);
        assert_eq!(cut.len(), KEPT / 2);
        assert!(e.get("u-0").is_some() && e.get("u-1").is_none() && e.get(&format!("u-{KEPT}")).is_some());
    }

    #[test]
    fn an_original_whose_copy_is_done_with_is_not_recorded_again() {
        let mut e = Evictions::default();
        e.observe(&going(1), true, &[]);
        assert!(e.finish("u-1"));
        e.observe_gone(&going(1), true, &[]);
        assert!(e.is_empty(), "its last event after its copy's release");
        assert!(!e.finish("u-2"), "no record, nothing finished");
    }
}
