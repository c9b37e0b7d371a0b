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

/// Those of `undeleted` that it `counts`, by preemptor, then by the node its answer
/// named: a preemptor given several nodes evicts on one of them.
fn by_preemptor_and_node<'v>(
    undeleted: &[UndeletedVictim<'v>],
    counts: impl Fn(&Pod) -> bool,
) -> BTreeMap<&'v str, BTreeMap<&'v str, Vec<&'v Pod>>> {
    let mut by: BTreeMap<&str, BTreeMap<&str, Vec<&Pod>>> = BTreeMap::new();
    for u in undeleted.iter().filter(|u| counts(u.pod)) {
        by.entry(u.preemptor_uid).or_default().entry(u.node).or_default().push(u.pod);
    }
    by
}

/// Those of `undeleted` that it `counts` which go whichever node their preemptor is
/// given: of an answer naming several nodes, the node's that evicts the fewest (none if
/// a node it named evicts none of them).
pub fn certain<'v>(undeleted: &[UndeletedVictim<'v>], counts: impl Fn(&Pod) -> bool) -> Vec<&'v Pod> {
    let named: HashMap<&str, usize> = undeleted.iter().map(|u| (u.preemptor_uid, u.nodes)).collect();
    by_preemptor_and_node(undeleted, counts)
        .into_iter()
        .filter(|(preemptor, per_node)| per_node.len() == named[preemptor])
        .flat_map(|(_, per_node)| per_node.into_values().min_by_key(Vec::len).unwrap_or_default())
        .collect()
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
    let most = |per_node: &BTreeMap<&str, Vec<&Pod>>| per_node.values().map(Vec::len).max().unwrap_or(0);
    by_preemptor_and_node(undeleted, counts).values().map(|per_node| most(per_node) as i32).sum()
}

/// Whether an earlier answer chose `pod` already: chosen again, it spends nothing more.
pub fn chosen_before(undeleted: &[UndeletedVictim], pod: &Pod) -> bool {
    undeleted.iter().any(|u| u.pod.uid == pod.uid)
}
