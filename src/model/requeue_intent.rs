//! A bare victim requeue will bring back: plain data that a preempt decision makes and
//! explains, and that the requeue controller copies once the victim is evicted. It sits
//! in the model so that decisions name nothing of requeue.

use super::marks::{attempt_of, replacement_name};
use super::Pod;

/// A bare victim requeue brings back: what a preempt decision explains for it, and what
/// the controller copies once it is evicted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequeueIntent {
    pub namespace: String,
    /// The original's name and UID.
    pub name: String,
    pub uid: String,
    pub node: String,
    /// The replacement's name (deterministic: two replicas or a retry name the same pod).
    pub replacement: String,
    pub attempt: u32,
    /// `namespace/name` of the preemptor, where a decision knows it (kube-scheduler's mark
    /// names none).
    pub preemptor: String,
}

impl RequeueIntent {
    pub fn for_victim(victim: &Pod, node: &str, preemptor: &str) -> RequeueIntent {
        RequeueIntent {
            namespace: victim.namespace.clone(),
            name: victim.name.clone(),
            uid: victim.uid.clone(),
            node: node.to_string(),
            replacement: replacement_name(victim),
            attempt: attempt_of(victim) + 1,
            preemptor: preemptor.to_string(),
        }
    }

    pub fn original_key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}
