//! What a preemption does to a Job: the Job controller recreates the pod, but
//! the preemption counts as a failure against `backoffLimit` (or the index's
//! `backoffLimitPerIndex`) unless the Job's `podFailurePolicy` ignores `DisruptionTarget`;
//! a `FailJob` (`FailIndex`) rule on that condition fails the Job (the index) at once.
//!
//! Only the first rule with an `onPodConditions` entry of type `DisruptionTarget`
//! (status `True`) is read (`wire::job`); a rule on exit codes never matches a deleted pod,
//! and a rule on another condition is taken not to match a preemption.

use std::collections::HashMap;

use crate::cluster::View;
use crate::decide::promised::{self, UndeletedVictim};
use crate::model::{DisruptionAction, Job, Pod, INDEX_FAILURE_COUNT};

/// What evicting one Job pod does to its Job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobCharge {
    /// The Job (or the pod's index) fails: the Job's work is lost.
    pub fails: bool,
    /// The preemption is the last failure the Job (or the index) allows: the next one
    /// fails it.
    pub last: bool,
    /// "Job batch/train: preemption is failure 2 of backoffLimit 3 ...".
    pub note: String,
}

/// Failures a victim set adds, per Job and per index, while it is built: the second pod
/// of a Job in one answer is its Job's next failure, and so is a pod an earlier answer
/// chose that kube-scheduler has not deleted yet (the Job has not counted it).
#[derive(Default)]
pub struct JobLedger<'u> {
    undeleted: &'u [UndeletedVictim<'u>],
    taken: HashMap<String, i32>,
    taken_index: HashMap<(String, u32), i32>,
}

impl<'u> JobLedger<'u> {
    /// A ledger counting the victims of earlier answers not deleted yet.
    pub fn new(undeleted: &'u [UndeletedVictim<'u>]) -> Self {
        JobLedger { undeleted, ..JobLedger::default() }
    }

    /// Counts `pod`'s eviction; `None` for a pod no Job in the view controls.
    pub fn take(&mut self, view: Option<&View>, pod: &Pod) -> Option<JobCharge> {
        let jobs = view?.jobs();
        let job = jobs.of(pod)?;
        let key = job.key();
        if job.finished {
            return Some(JobCharge {
                fails: false,
                last: false,
                note: format!("Job {key} has finished: its preemption changes nothing for the Job"),
            });
        }
        let action = job.on_disruption;
        if action == Some(DisruptionAction::Ignore) {
            return Some(JobCharge {
                fails: false,
                last: false,
                note: format!(
                    "Job {key}: podFailurePolicy Ignore on DisruptionTarget: recreated, not counted as a failure"
                ),
            });
        }
        if action == Some(DisruptionAction::FailJob) {
            return Some(JobCharge {
                fails: true,
                last: false,
                note: format!("Job {key}: podFailurePolicy FailJob on DisruptionTarget: preemption fails the Job"),
            });
        }
        // Chosen by an earlier answer too: its failure is among the earlier ones.
        let again = promised::chosen_before(self.undeleted, pod);
        let earlier = promised::spent(self.undeleted, |p| jobs.of(p).is_some_and(|j| j.key() == key));
        let taken = self.taken.entry(key.clone()).or_insert(0);
        *taken += i32::from(!again);
        let counted = job.failed;
        let uncounted = jobs.uncounted_failures(job);
        let failure = counted.saturating_add(uncounted).saturating_add(earlier).saturating_add(*taken);
        let detail = format!(
            "{counted} counted, {uncounted} seen but not counted yet{}{}",
            if earlier > 0 {
                format!(", {earlier} chosen by an earlier answer, not yet deleted")
            } else {
                String::new()
            },
            if *taken > 1 { format!(", {} more in this answer", *taken - 1) } else { String::new() }
        );
        // backoffLimit holds with backoffLimitPerIndex too, where it is set explicitly.
        if failure > job.backoff_limit {
            return Some(JobCharge { fails: true, last: false, note: format!("Job {key}: preemption would be failure {failure} of backoffLimit {} ({detail}): preemption fails the Job", job.backoff_limit) });
        }
        if let (Some(limit), Some(index)) =
            (job.backoff_limit_per_index, pod.completion_index().filter(|_| job.indexed))
        {
            let in_answer = self.taken_index.entry((key.clone(), index)).or_insert(0);
            *in_answer += i32::from(!again);
            let earlier = promised::spent(self.undeleted, |p| {
                jobs.of(p).is_some_and(|j| j.key() == key) && p.completion_index() == Some(index)
            });
            return Some(per_index(job, &key, index, limit, pod, earlier + *in_answer, action));
        }
        let last = failure == job.backoff_limit;
        let tail = if last { ", the last failure it allows" } else { "" };
        Some(JobCharge {
            fails: false,
            last,
            note: format!(
                "Job {key}: preemption {failure} of backoffLimit {} ({detail}): recreated{tail}",
                job.backoff_limit
            ),
        })
    }
}

/// An Indexed Job with `backoffLimitPerIndex`: the index fails once its failures exceed
/// the limit (or at once with `FailIndex`), and a Job with a failed index ends Failed.
fn per_index(
    job: &Job,
    key: &str,
    index: u32,
    limit: i32,
    pod: &Pod,
    in_answer: i32,
    action: Option<DisruptionAction>,
) -> JobCharge {
    let already = job.failed_index_count();
    let failed_note = if already > 0 { format!("; {already} index(es) failed already") } else { String::new() };
    let max_note = match job.max_failed_indexes {
        Some(max) if already + 1 > max.max(0) as u64 => {
            format!(", more than maxFailedIndexes {max}: the Job fails at once")
        }
        _ => String::new(),
    };
    if action == Some(DisruptionAction::FailIndex) {
        return JobCharge { fails: true, last: false, note: format!("Job {key}: podFailurePolicy FailIndex on DisruptionTarget: preemption fails index {index}{max_note}{failed_note}") };
    }
    let before: i32 = pod.annotations.get(INDEX_FAILURE_COUNT).and_then(|v| v.parse().ok()).unwrap_or(0);
    let failure = before.saturating_add(in_answer);
    if failure > limit {
        JobCharge { fails: true, last: false, note: format!("Job {key}: preemption would be failure {failure} of index {index}, backoffLimitPerIndex {limit}: preemption fails the index{max_note}{failed_note}") }
    } else {
        let last = failure == limit;
        let tail = if last { ", the last failure the index allows" } else { "" };
        JobCharge { fails: false, last, note: format!("Job {key}: index {index}: preemption {failure} of backoffLimitPerIndex {limit}: recreated{tail}{failed_note}") }
    }
}

/// What evicting `pod` alone (beside the victims of earlier answers not deleted yet)
/// does to its Job.
pub fn charge_alone(view: Option<&View>, undeleted: &[UndeletedVictim], pod: &Pod) -> Option<JobCharge> {
    JobLedger::new(undeleted).take(view, pod)
}
