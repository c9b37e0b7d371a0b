//! Room an earlier preempt answer promised its preemptor, until the view shows it.
//!
//! kube-scheduler nominates a preemptor to the node the answer gave it and holds that room
//! in its own cache at once; the extender's view learns of the nomination only when the
//! pod's status update comes back through the watch, milliseconds later. A second
//! preemptor of the same wave answered in between would be given the same room, and find
//! it taken after its victims are gone: one more attempt, after kube-scheduler's back-off.
//! So a decision says what it promised (`PreemptOutcome::promised`), the edge remembers it
//! (`service::Promises`) and the next decisions count it as nominated room until the view
//! has caught up (or the promise expires).

use crate::cluster::View;
use crate::model::{Pod, Timestamp};

/// A preemptor and the node an answer gave it.
#[derive(Debug, Clone)]
pub struct PromisedRoom {
    pub node: String,
    pub pod: Pod,
    /// When it was answered.
    pub at: Timestamp,
}

impl PromisedRoom {
    /// What an answer returning `nodes` to `pod` at `now` promises it.
    pub fn of<'n>(pod: &Pod, nodes: impl Iterator<Item = &'n String>, now: Timestamp) -> Vec<PromisedRoom> {
        nodes.map(|node| PromisedRoom { node: node.clone(), pod: pod.clone(), at: now }).collect()
    }

    /// The view does not show it yet: not nominated there, not bound, not seen gone. Once it
    /// does, the view's own nominations (or the bound pod) hold the room instead.
    pub fn unseen_by(&self, view: &View) -> bool {
        match view.pod_by_uid(&self.pod.uid) {
            Some(p) => p.node_name.is_none() && p.nominated_node_name.as_deref() != Some(self.node.as_str()),
            None => !view.saw_go(&self.pod.uid),
        }
    }
}

/// The pods promised room on `node` that the view does not show there yet, other than
/// the preemptor's own (`preemptor_uid`), with a priority at least `priority` (as kube-scheduler holds nominated room).
pub fn on_node<'p>(
    promised: &'p [PromisedRoom],
    view: &'p View,
    node: &'p str,
    priority: i32,
    preemptor_uid: &'p str,
) -> impl Iterator<Item = &'p Pod> + 'p {
    promised
        .iter()
        .filter(move |p| {
            p.node == node && p.pod.uid != preemptor_uid && view.priority_of(&p.pod) >= priority && p.unseen_by(view)
        })
        .map(|p| &p.pod)
}
