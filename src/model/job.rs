//! A `batch/v1` Job, cut down to what a preemption does to it: how many failures it may
//! still take, per Job or per index, and what its `podFailurePolicy` says about the
//! `DisruptionTarget` condition that kube-scheduler sets on every victim.

/// Annotation (and label, since v1.28) with a pod's completion index in an Indexed Job.
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
/// Annotation with the failures of the pod's index before this pod (backoffLimitPerIndex).
pub const INDEX_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-failure-count";
/// Finalizer the Job controller keeps on its pods until it has recorded how they ended.
pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";

/// What the first `podFailurePolicy` rule on `DisruptionTarget` does with a preempted pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisruptionAction {
    /// Not counted against any limit: the pod is simply recreated.
    Ignore,
    /// The whole Job fails at once.
    FailJob,
    /// The pod's index fails (Indexed Jobs with `backoffLimitPerIndex`).
    FailIndex,
    /// Counted as usual (the same as no rule).
    Count,
}

impl DisruptionAction {
    pub fn parse(action: &str) -> Option<Self> {
        Some(match action {
            "Ignore" => DisruptionAction::Ignore,
            "FailJob" => DisruptionAction::FailJob,
            "FailIndex" => DisruptionAction::FailIndex,
            "Count" => DisruptionAction::Count,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            DisruptionAction::Ignore => "Ignore",
            DisruptionAction::FailJob => "FailJob",
            DisruptionAction::FailIndex => "FailIndex",
            DisruptionAction::Count => "Count",
        }
    }
}

/// What decisions need of a Job.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Job {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// `spec.backoffLimit` (default 6; with `backoffLimitPerIndex`, effectively unlimited).
    pub backoff_limit: i32,
    /// `status.failed`: failures the controller has counted.
    pub failed: i32,
    /// `status.uncountedTerminatedPods.failed`: failed pods recorded, not yet in `failed`.
    pub uncounted_failed: Vec<String>,
    /// `spec.completionMode: Indexed`.
    pub indexed: bool,
    /// `spec.backoffLimitPerIndex`.
    pub backoff_limit_per_index: Option<i32>,
    /// `spec.maxFailedIndexes`.
    pub max_failed_indexes: Option<i32>,
    /// `status.failedIndexes` ("1,3-5"), expanded.
    pub failed_indexes: Vec<(u32, u32)>,
    /// The action of the first `podFailurePolicy` rule with an `onPodConditions` entry of
    /// type `DisruptionTarget` (status `True`, the default); `None`: no such rule.
    pub on_disruption: Option<DisruptionAction>,
    /// The Job has finished (condition `Complete` or `Failed` is `True`).
    pub finished: bool,
}

impl Job {
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// How many indexes have failed already.
    pub fn failed_index_count(&self) -> u64 {
        self.failed_indexes.iter().map(|(a, b)| u64::from(b - a) + 1).sum()
    }

    pub fn index_failed(&self, index: u32) -> bool {
        self.failed_indexes.iter().any(|(a, b)| (*a..=*b).contains(&index))
    }
}

/// Parses `status.failedIndexes` ("1,3-5"); `None` if it is not such a list.
pub fn parse_index_ranges(s: &str) -> Option<Vec<(u32, u32)>> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse().ok()?, b.trim().parse().ok()?),
            None => {
                let n = part.parse().ok()?;
                (n, n)
            }
        };
        if a > b {
            return None;
        }
        out.push((a, b));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_indexes_are_ranges() {
        assert_eq!(parse_index_ranges("1,3-5"), Some(vec![(1, 1), (3, 5)]));
        assert_eq!(parse_index_ranges(""), Some(vec![]));
        assert_eq!(parse_index_ranges("5-3"), None);
        assert_eq!(parse_index_ranges("x"), None);
        let job = Job { failed_indexes: vec![(1, 1), (3, 5)], ..Default::default() };
        assert_eq!(job.failed_index_count(), 4);
        assert!(job.index_failed(4) && !job.index_failed(2));
    }
}
