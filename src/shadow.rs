//! Shadow mode: answer exactly as kube-scheduler would decide without the extender, and
//! say what the policy's own answer would have changed.
//!
//! Without an extender kube-scheduler keeps every node its own filters kept, scores only
//! with its plugins, and evicts the victims of the candidate it picks itself. The neutral
//! answers: filter echoes every node in the mode it came (objects byte for byte, or names)
//! and fails none; prioritize gives every node score 0 (kube-scheduler adds
//! `score × weight` to each node's total, so 0 adds nothing); preempt echoes kube's
//! candidates with their victims in kube's order and kube's `NumPDBViolations`
//! (kube-scheduler rebuilds the victims from its own cache by UID, so they are the same
//! pods).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::decide::Context;
use crate::model::{GangRef, Pod};
use crate::wire::{to_json, to_json_sized};
use crate::wire::{
    Candidates, ExtenderArgs, FilterResult, HostPriority, MetaPod, MetaVictims, NodeSet, PreemptArgs, PreemptionResult,
};

/// What the policy would have changed, by kind (`coloc_shadow_diffs_total{kind}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiffKind {
    /// A node kube-scheduler kept (filter) or proposed (preempt) that the policy drops.
    NodeVetoed,
    /// A candidate the policy keeps with other victims than kube's.
    VictimsChanged,
    /// A bare pod kube-scheduler would evict and lose that the policy would not lose.
    BarePodLost,
    /// A gang kube-scheduler would leave below its minimum that the policy would not.
    GangBroken,
    /// PDB violations kube-scheduler would cause that the policy would not.
    PdbViolationAvoided,
    /// prioritize: the policy's scores differ between nodes, so they could change the
    /// ranking (equal scores add the same to every node and change nothing).
    ScoresChanged,
}

impl DiffKind {
    pub const ALL: [DiffKind; 6] = [
        DiffKind::NodeVetoed,
        DiffKind::VictimsChanged,
        DiffKind::BarePodLost,
        DiffKind::GangBroken,
        DiffKind::PdbViolationAvoided,
        DiffKind::ScoresChanged,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DiffKind::NodeVetoed => "node_vetoed",
            DiffKind::VictimsChanged => "victims_changed",
            DiffKind::BarePodLost => "bare_pod_lost",
            DiffKind::GangBroken => "gang_broken",
            DiffKind::PdbViolationAvoided => "pdb_violation_avoided",
            DiffKind::ScoresChanged => "scores_changed",
        }
    }
}

/// Differences with a count each; kinds with a zero count are left out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diffs(pub BTreeMap<DiffKind, u64>);

impl Diffs {
    fn add(&mut self, kind: DiffKind, n: u64) {
        if n > 0 {
            *self.0.entry(kind).or_insert(0) += n;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Display for Diffs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(k, n)| format!("{} {n}", k.as_str())).collect();
        write!(f, "{}", if parts.is_empty() { "none".to_string() } else { parts.join(", ") })
    }
}

/// filter without the extender: every node kept, none failed.
pub fn filter_answer(args: &ExtenderArgs) -> Vec<u8> {
    let none = BTreeMap::new();
    match &args.nodes {
        NodeSet::Objects(nodes) => {
            let size = nodes.iter().map(|n| n.raw.get().len() + 1).sum::<usize>() + 256;
            to_json_sized(&FilterResult::objects(nodes.iter().map(|n| n.raw).collect(), &none, &none), size)
        }
        NodeSet::Names(names) => {
            to_json(&FilterResult::names(names.iter().map(|n| n.as_ref()).collect(), &none, &none))
        }
    }
}

pub fn filter_diffs(args: &ExtenderArgs, kept: usize) -> Diffs {
    let mut d = Diffs::default();
    d.add(DiffKind::NodeVetoed, args.nodes.len().saturating_sub(kept) as u64);
    d
}

/// prioritize without the extender: 0 for every node.
pub fn prioritize_answer(args: &ExtenderArgs) -> Vec<u8> {
    let scores: Vec<HostPriority> =
        args.nodes.names().into_iter().map(|host| HostPriority { host, score: 0 }).collect();
    to_json(&scores)
}

pub fn prioritize_diffs(scores: &[HostPriority]) -> Diffs {
    let mut d = Diffs::default();
    let distinct: BTreeSet<i64> = scores.iter().map(|s| s.score).collect();
    d.add(DiffKind::ScoresChanged, u64::from(distinct.len() > 1));
    d
}

/// kube-scheduler's own candidates, unchanged.
pub fn kube_candidates(args: &PreemptArgs) -> PreemptionResult {
    let entry = |uids: &[String], pdb: i64| MetaVictims {
        pods: uids.iter().map(|uid| MetaPod { uid: uid.clone() }).collect(),
        num_pdb_violations: pdb,
    };
    let map = match &args.candidates {
        Candidates::Full(m) => m.iter().map(|(n, v)| (n.clone(), entry(&v.uids, v.num_pdb_violations))).collect(),
        Candidates::Meta(m) => m.iter().map(|(n, v)| (n.clone(), entry(&v.uids, v.num_pdb_violations))).collect(),
    };
    PreemptionResult { node_name_to_meta_victims: map }
}

/// What the enforced answer changes against kube's own: vetoed nodes and changed victim
/// sets over all candidates; lost bare pods, broken gangs and PDB violations on the node
/// kube-scheduler would pick from each (see `pick`). `requeued`: UIDs the enforced answer
/// requeues (evicted, not lost).
/// `picked`: the node kube-scheduler picks among `kube`'s candidates and among
/// `enforced`'s (`pick`; the caller has them from counting discarded work).
pub fn preempt_diffs(
    args: &PreemptArgs,
    kube: &PreemptionResult,
    enforced: &PreemptionResult,
    picked: (Option<&str>, Option<&str>),
    requeued: &BTreeSet<&str>,
    ctx: &Context,
) -> Diffs {
    let mut d = Diffs::default();
    for (node, theirs) in &kube.node_name_to_meta_victims {
        match enforced.node_name_to_meta_victims.get(node) {
            None => d.add(DiffKind::NodeVetoed, 1),
            Some(ours) => {
                let set = |v: &MetaVictims| v.pods.iter().map(|p| p.uid.clone()).collect::<BTreeSet<_>>();
                d.add(DiffKind::VictimsChanged, u64::from(set(theirs) != set(ours)));
            }
        }
    }
    let pods = Resolver { args, ctx };
    let without = picked.0.map(|n| Effects::of(&kube.node_name_to_meta_victims[n], &pods, &BTreeSet::new(), ctx));
    let with = picked.1.map(|n| Effects::of(&enforced.node_name_to_meta_victims[n], &pods, requeued, ctx));
    if let Some(without) = without {
        let with = with.unwrap_or_else(Effects::none);
        d.add(DiffKind::PdbViolationAvoided, without.pdb_violations.saturating_sub(with.pdb_violations));
        // Unknown pods (UIDs only, no view) cannot be judged: those kinds are not counted.
        if without.known && with.known {
            d.add(DiffKind::BarePodLost, without.lost_bare.saturating_sub(with.lost_bare));
            d.add(DiffKind::GangBroken, without.broken_gangs.saturating_sub(with.broken_gangs));
        }
    }
    d
}

/// Finds victim pods by UID: the cluster view first, then the request's full victims.
pub(crate) struct Resolver<'a> {
    args: &'a PreemptArgs,
    ctx: &'a Context<'a>,
}

impl<'a> Resolver<'a> {
    pub(crate) fn new(args: &'a PreemptArgs, ctx: &'a Context<'a>) -> Self {
        Resolver { args, ctx }
    }

    pub(crate) fn pod(&self, uid: &str) -> Option<&Pod> {
        if let Some(p) = self.ctx.view.and_then(|v| v.pod_by_uid(uid)) {
            return Some(p);
        }
        match &self.args.candidates {
            Candidates::Full(m) => m.values().flat_map(|v| v.pods.iter()).find(|p| p.uid == uid),
            Candidates::Meta(_) => None,
        }
    }
}

/// The node kube-scheduler picks among `candidates` (pickOneNodeForPreemption): fewest
/// PDB violations, then lowest highest victim priority, lowest priority sum, fewest
/// victims; remaining ties by name (kube-scheduler then prefers the latest start time).
pub(crate) fn pick<'r>(candidates: &'r PreemptionResult, pods: &Resolver, ctx: &Context) -> Option<&'r String> {
    let nodes = candidates.node_name_to_meta_victims.iter();
    pick_among(nodes.map(|(n, v)| (n, v.pods.iter().map(|p| p.uid.as_str()), v.num_pdb_violations)), pods, ctx)
}

/// `pick` over candidates in any form: (node, its victims' UIDs, NumPDBViolations).
pub(crate) fn pick_among<'r, U: Iterator<Item = &'r str>>(
    candidates: impl Iterator<Item = (&'r String, U, i64)>,
    pods: &Resolver,
    ctx: &Context,
) -> Option<&'r String> {
    let priority = |uid: &str| pods.pod(uid).map_or(0, |p| ctx.priority_of(p) as i64);
    candidates
        .map(|(node, uids, pdb)| {
            let (mut highest, mut sum, mut count) = (i64::MIN, 0i64, 0usize);
            for p in uids.map(priority) {
                highest = highest.max(p);
                // kube-scheduler offsets each priority by MaxInt32+1 so that more victims cost more.
                sum += p + i32::MAX as i64 + 1;
                count += 1;
            }
            ((pdb, highest, sum, count, node), node)
        })
        .min_by(|(a, _), (b, _)| a.cmp(b))
        .map(|(_, node)| node)
}

/// What evicting one candidate's victims does.
#[derive(Debug)]
struct Effects {
    pdb_violations: u64,
    lost_bare: u64,
    broken_gangs: u64,
    /// Every victim was found (in the view or the request).
    known: bool,
}

impl Effects {
    /// No preemption at all.
    fn none() -> Effects {
        Effects { pdb_violations: 0, lost_bare: 0, broken_gangs: 0, known: true }
    }

    fn of(victims: &MetaVictims, pods: &Resolver, requeued: &BTreeSet<&str>, ctx: &Context) -> Effects {
        let mut e = Effects { pdb_violations: victims.num_pdb_violations.max(0) as u64, ..Effects::none() };
        let mut gangs: BTreeMap<GangRef, (usize, &Pod)> = BTreeMap::new();
        for v in &victims.pods {
            let Some(pod) = pods.pod(&v.uid) else {
                e.known = false;
                continue;
            };
            if pod.is_bare() && !requeued.contains(v.uid.as_str()) {
                e.lost_bare += 1;
            }
            if let Some(g) = ctx.policy.gangs.gang_of(pod) {
                gangs.entry(g).or_insert((0, pod)).0 += 1;
            }
        }
        if let Some(view) = ctx.view {
            for (group, (n, member)) in gangs {
                let gang = view.gang(&group, member);
                // A gang below its minimum already is not broken again.
                e.broken_gangs += u64::from(!gang.broken_already(0) && gang.standing(n) < gang.min);
            }
        } else if !gangs.is_empty() {
            // Without the view the gang's size is unknown.
            e.known = false;
        }
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::View;
    use crate::model::{Node, Resources};
    use crate::policy::Policy;
    use std::sync::Arc;

    /// A member of a coscheduling gang of two that needs both, bound to n1.
    fn member(name: &str, deleted: bool) -> Pod {
        let mut p = Pod {
            name: name.into(),
            namespace: "batch".into(),
            uid: format!("uid-{name}"),
            node_name: Some("n1".into()),
            phase: Some("Running".into()),
            priority: Some(100),
            deletion_time: deleted.then_some(1_000),
            ..Default::default()
        };
        p.labels.insert("scheduling.x-k8s.io/pod-group".into(), "g".into());
        p.annotations.insert("scheduling.x-k8s.io/min-member".into(), "2".into());
        p
    }

    fn gangs_broken(b_deleted: bool) -> u64 {
        let policy = Policy::builtin_default().enforced();
        let mut view = View::empty(&policy);
        let node = Resources { milli_cpu: 4000, memory: 8 << 30, ..Default::default() };
        view.apply_node(Node { name: "n1".into(), allocatable: node, allocatable_pods: 110, ..Default::default() });
        view.apply_pod(Arc::new(member("a", false)), &policy);
        view.apply_pod(Arc::new(member("b", b_deleted)), &policy);
        let ctx = Context::new(&policy, Some(&view), 2_000);
        let args = PreemptArgs { pod: Pod::default(), candidates: Candidates::Meta(BTreeMap::new()) };
        let victims = MetaVictims { pods: vec![MetaPod { uid: "uid-a".into() }], num_pdb_violations: 0 };
        Effects::of(&victims, &Resolver::new(&args, &ctx), &BTreeSet::new(), &ctx).broken_gangs
    }

    #[test]
    fn evicting_a_member_of_a_gang_below_its_minimum_already_breaks_no_gang() {
        assert_eq!(gangs_broken(false), 1, "whole, the gang is broken by evicting a");
        assert_eq!(gangs_broken(true), 0, "b is being deleted: the gang was broken already");
    }
}
