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

use std::collections::{BTreeMap, HashMap};

use crate::cluster::View;
use crate::model::{GangRef, Pod, Timestamp};

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

/// A victim an earlier answer chose that the view still shows bound and not terminating:
/// kube-scheduler has not deleted it yet, so its PDBs still count it healthy and its Job
/// has not counted its failure.
#[derive(Debug, Clone, Copy)]
pub struct UndeletedVictim<'v> {
    /// The preemptor it was chosen for, and on which node.
    pub preemptor_uid: &'v str,
    pub node: &'v str,
    pub pod: &'v Pod,
    /// How many nodes that answer named (kube-scheduler evicts on one of them).
    pub nodes: usize,
}

/// The victims earlier answers chose for preemptors other than `preemptor_uid` that
/// kube-scheduler has not deleted yet. Few: it deletes them milliseconds after answering.
pub fn undeleted_victims<'v>(
    promised: &'v [PromisedRoom],
    view: Option<&'v View>,
    preemptor_uid: &str,
) -> Vec<UndeletedVictim<'v>> {
    let Some(view) = view else { return Vec::new() };
    let mut nodes: HashMap<&str, usize> = HashMap::new();
    for p in promised {
        *nodes.entry(&p.pod.uid).or_default() += 1;
    }
    let mut undeleted = Vec::new();
    for p in promised.iter().filter(|p| p.pod.uid != preemptor_uid) {
        for uid in &p.victims {
            let Some(pod) = view.pod_by_uid(uid) else { continue };
            if pod.node_name.is_some() && pod.deletion_time.is_none() {
                let nodes = nodes[p.pod.uid.as_str()];
                undeleted.push(UndeletedVictim { preemptor_uid: &p.pod.uid, node: &p.node, pod, nodes });
            }
        }
    }
    undeleted
}

/// Those of `undeleted` that it `counts` which go whichever node their preemptor is
/// given: of an answer naming several nodes, the node's that evicts the fewest (none if
/// a node it named evicts none of them).
pub fn certain<'v>(undeleted: &[UndeletedVictim<'v>], counts: impl Fn(&Pod) -> bool) -> Vec<&'v Pod> {
    let mut per_node: BTreeMap<(&str, &str), (usize, Vec<&'v Pod>)> = BTreeMap::new();
    for u in undeleted.iter().filter(|u| counts(u.pod)) {
        per_node.entry((u.preemptor_uid, u.node)).or_insert((u.nodes, Vec::new())).1.push(u.pod);
    }
    // Per preemptor: how many of its nodes evict some, and the fewest any of them does.
    let mut per_preemptor: BTreeMap<&str, (usize, usize, Vec<&'v Pod>)> = BTreeMap::new();
    for ((preemptor, _), (nodes, pods)) in per_node {
        let (seen, _, fewest) = per_preemptor.entry(preemptor).or_insert((0, nodes, pods.clone()));
        *seen += 1;
        if pods.len() < fewest.len() {
            *fewest = pods;
        }
    }
    per_preemptor.into_values().filter(|(seen, nodes, _)| seen == nodes).flat_map(|(_, _, pods)| pods).collect()
}

/// The members of `gang` that earlier answers chose, which go whichever node their
/// preemptors are given.
pub fn gang_members<'v>(undeleted: &[UndeletedVictim<'v>], view: &View, gang: &GangRef) -> Vec<&'v Pod> {
    if undeleted.is_empty() {
        return Vec::new();
    }
    certain(undeleted, |p| view.gang_of(p).as_ref() == Some(gang))
}

/// How many of `undeleted` a budget (a PDB's disruptions, a Job's failures) has spent
/// already, those it `counts`: a preemptor given several nodes evicts on one of them, so
/// it spends at most its costliest node's.
pub fn spent(undeleted: &[UndeletedVictim], counts: impl Fn(&Pod) -> bool) -> i32 {
    let mut per_node: HashMap<(&str, &str), i32> = HashMap::new();
    for u in undeleted.iter().filter(|u| counts(u.pod)) {
        *per_node.entry((u.preemptor_uid, u.node)).or_default() += 1;
    }
    let mut per_preemptor: HashMap<&str, i32> = HashMap::new();
    for ((preemptor, _), n) in per_node {
        let most = per_preemptor.entry(preemptor).or_default();
        *most = (*most).max(n);
    }
    per_preemptor.values().sum()
}

/// Whether an earlier answer chose `pod` already: chosen again, it spends nothing more.
pub fn chosen_before(undeleted: &[UndeletedVictim], pod: &Pod) -> bool {
    undeleted.iter().any(|u| u.pod.uid == pod.uid)
}
