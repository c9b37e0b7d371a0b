//! Jobs in the cluster view, and the failures of their pods that the Job controller has
//! not counted yet.
//!
//! A preempted Job pod counts as a failure once the controller has recorded it. Until
//! then the view counts it itself, as it does for PDBs (`disrupted_pods`,
//! `currentHealthy`), so that back-to-back preemptions do not spend the same failure
//! twice:
//!
//! - pods listed in `status.uncountedTerminatedPods.failed` (recorded, not yet in
//!   `status.failed`);
//! - pods of the Job that are terminating or Failed and still carry the controller's
//!   `batch.kubernetes.io/job-tracking` finalizer (it removes the finalizer only once it
//!   has recorded the pod). A pod that leaves the view in that state (the pod watch
//!   drops Failed pods) stays counted until the Job's next update, which is when the
//!   controller records it; a Job update that arrives first makes the view forget it a
//!   moment early.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::PMap;

use crate::model::{Job, Pod};

#[derive(Debug, Clone, Default)]
pub struct Jobs {
    jobs: PMap<String, Arc<Job>>,
    /// Per Job (`namespace/name`): UIDs of its pods that ended or are ending and are not
    /// recorded yet; `true` once the pod has left the view.
    unrecorded: PMap<String, Arc<BTreeMap<String, bool>>>,
}

fn job_key(pod: &Pod) -> Option<String> {
    pod.job().map(|job| format!("{}/{job}", pod.namespace))
}

impl Jobs {
    pub fn apply(&mut self, job: Job) {
        let key = job.key();
        if let Some(set) = self.unrecorded.get_mut(&key) {
            // The controller has written the Job since these pods left: recorded by now.
            Arc::make_mut(set).retain(|uid, gone| !*gone && !job.uncounted_failed.contains(uid));
            if set.is_empty() {
                self.unrecorded.remove(&key);
            }
        }
        self.jobs.insert(key, Arc::new(job));
    }

    pub fn remove(&mut self, namespace: &str, name: &str) -> bool {
        let key = format!("{namespace}/{name}");
        self.unrecorded.remove(&key);
        self.jobs.remove(&key).is_some()
    }

    /// A pod event: a Job pod that is ending and not recorded yet is counted.
    pub fn observe_pod(&mut self, pod: &Pod) {
        let Some(key) = job_key(pod) else { return };
        let ending = pod.deletion_time.is_some() || pod.phase == Some(crate::model::Phase::Failed);
        if ending && pod.job_tracking {
            Arc::make_mut(self.unrecorded.entry(key).or_default()).insert(pod.uid.clone(), pod.is_terminal());
        } else if let Some(set) = self.unrecorded.get_mut(&key) {
            Arc::make_mut(set).remove(&pod.uid);
            if set.is_empty() {
                self.unrecorded.remove(&key);
            }
        }
    }

    /// The pod left the view (deleted, or Failed and dropped by the watch): an unrecorded
    /// failure stays counted until the Job is written again.
    pub fn forget_pod(&mut self, pod: &Pod) {
        let Some(key) = job_key(pod) else { return };
        if let Some(set) = self.unrecorded.get_mut(&key) {
            if let Some(gone) = Arc::make_mut(set).get_mut(&pod.uid) {
                *gone = true;
            }
        }
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<&Job> {
        self.jobs.get(&format!("{namespace}/{name}")).map(|j| &**j)
    }

    /// The Job that controls `pod`, if the view has it.
    pub fn of(&self, pod: &Pod) -> Option<&Job> {
        self.get(&pod.namespace, pod.job()?)
    }

    /// Failures of `job` that `status.failed` does not count yet.
    pub fn uncounted_failures(&self, job: &Job) -> i32 {
        let seen = self
            .unrecorded
            .get(&job.key())
            .map_or(0, |s| s.keys().filter(|uid| !job.uncounted_failed.contains(uid)).count());
        (job.uncounted_failed.len() + seen).min(i32::MAX as usize) as i32
    }

    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.jobs.keys()
    }

    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }
}
