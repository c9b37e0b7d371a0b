//! Room an earlier preempt answer promised its preemptor, until the view shows it.
//!
//! kube-scheduler nominates a preemptor to the node the answer gave it and holds that room
//! in its own cache at once; the extender's view learns of the nomination only when the
//! pod's status update comes back through the watch, milliseconds later. A second
//! preemptor of the same wave answered in between would be given the same room, and find
//! it taken after its victims are gone: one more attempt, after kube-scheduler's back-off.
//! So a decision says what it promised (`PreemptOutcome::promised`), the edge remembers it
//! (`service::Promises`) and the next decisions count it as nominated room until the view
//! has caught up (or the promise expires). Its victims likewise: kube-scheduler deletes
//! them after it nominates, and until the view sees them go they still count healthy in
//! their PDBs' status, so the next decisions count them as disruptions already spent.

use std::collections::{HashMap, HashSet};

use crate::cluster::View;
use crate::model::{Pdb, Pod, Timestamp};

/// A preemptor and the node an answer gave it.
#[derive(Debug, Clone)]
pub struct PromisedRoom {
    pub node: String,
    pub pod: Pod,
    /// The UIDs of the victims the answer chose there.
    pub victims: Vec<String>,
    /// When it was answered.
    pub at: Timestamp,
}

impl PromisedRoom {
    /// What an answer returning `nodes` (each with its victims' UIDs) to `pod` at `now`
    /// promises it.
    pub fn of(pod: &Pod, nodes: impl Iterator<Item = (String, Vec<String>)>, now: Timestamp) -> Vec<PromisedRoom> {
        nodes.map(|(node, victims)| PromisedRoom { node, pod: pod.clone(), victims, at: now }).collect()
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

/// The victims earlier answers chose, other than for `preemptor_uid`, that `pdb` still
/// counts healthy (the view shows them bound, not terminating): disruptions its status
/// does not know are spent. A preemptor given several nodes evicts on one of them, so it
/// spends at most its costliest node's. Also returns those victims' UIDs: chosen again,
/// they spend nothing more.
pub fn spent_from<'p>(
    promised: &'p [PromisedRoom],
    view: &View,
    pdb: &Pdb,
    preemptor_uid: &str,
) -> (i32, HashSet<&'p str>) {
    let mut per_preemptor: HashMap<&str, i32> = HashMap::new();
    let mut victims = HashSet::new();
    for p in promised.iter().filter(|p| p.pod.uid != preemptor_uid) {
        let counted: Vec<&str> =
            p.victims.iter().map(String::as_str).filter(|uid| view.counts_toward_pdb(pdb, uid)).collect();
        let most = per_preemptor.entry(p.pod.uid.as_str()).or_default();
        *most = (*most).max(counted.len() as i32);
        victims.extend(counted);
    }
    (per_preemptor.values().sum(), victims)
}
