//! preempt: re-select victims on every candidate node under the policy, then return the
//! best candidate(s).
//!
//! With a cluster view that knows the node, victims are chosen afresh:
//! remove every pod the policy lets us evict, check the preemptor fits, then reprieve
//! pods most valuable first (PDB-violating ones before the others, gang members before
//! loners), keeping each whose return still lets the preemptor fit. Without one, kube's
//! own victims are kept only if every one of them is allowed; we never add a victim we
//! cannot see on the node.

use crate::explanation::{Code, Verdict};
use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};

mod aftermath;
mod gangs;
mod jobs;

use self::aftermath::Aftermath;
use super::eligibility::{self, Fate, Preemptor};
use super::fit::{fits, NodeUsage};
use super::{Context, Explanation};
use crate::cluster::View;
use crate::model::{GangInfo, Pod, PodRef, Timestamp};
use crate::policy::{ClassId, PdbMode, ReplacementPreemption, WithoutView};
use crate::requeue::RequeueIntent;
use crate::wire::request::{MetaVictims, Victims};
use crate::wire::{self, Candidates, PreemptArgs, PreemptionResult};

#[derive(Debug, Default)]
pub struct PreemptOutcome {
    pub result: PreemptionResult,
    pub explanations: Vec<Explanation>,
    /// Bare victims of `requeue` classes on the returned nodes: the replacements of those
    /// not `guarded` must be stored before `result` may be answered.
    pub requeues: Vec<RequeueIntent>,
    /// kube-scheduler proposed pods or nodes the view has not caught up with (unknown, or
    /// still unbound there): its cache is ahead, and a moment later the view may decide
    /// better (the edge may wait for the next view and decide again).
    pub view_behind: bool,
}

/// What evicting a victim set costs; compared field by field, lower is better.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cost {
    /// Members of gangs left below their minimum (the whole gang is charged).
    pub broken_gang_members: i64,
    pub pdb_violations: i64,
    /// Victims that nothing recreates (allowed only where the policy says so).
    pub lost_pods: i64,
    /// Budgets this eviction uses up: a PDB's last allowed disruption, a Job's last
    /// allowed failure. Nothing is lost now, but a later arrival whose only room is
    /// behind that budget would have to violate it (budgets are shared over time).
    pub budgets_spent: i64,
    /// Victims that came back a moment ago (recreated after a preemption, or requeued):
    /// evicted again, their disruption would be counted twice.
    pub re_evicted: i64,
    /// Pods the returning victims are expected to preempt, where they would find no room.
    pub follow_on_evictions: i64,
    /// How valuable the most valuable victim's class is (0: no victims).
    pub top_class_value: i64,
    pub max_priority: i64,
    pub priority_sum: i64,
    pub victims: i64,
    /// Run time thrown away in milli-CPU-seconds (seconds run × CPU requested), the
    /// expected follow-on evictions' included: a big pod's hour is more work than a small one's.
    pub lost_runtime: i64,
    /// Prefer taking from tenants with a high weighted share: minus the lowest share
    /// among victims' tenants, in millionths.
    pub tenant_penalty: i64,
    /// Bare victims that go back to the pending queue through a copy: nothing is lost
    /// either way, so only the copies' API writes tell it from a recreated victim, last.
    /// (Ranked before class and run time, it made owned pods look free: their controllers
    /// recreate them into a full cluster, where they evict in turn.)
    pub requeued: i64,
}

/// One victim as decisions rank it.
#[derive(Debug, Clone)]
struct Victim<'a> {
    pod: &'a Pod,
    class: ClassId,
    /// The priority victims are ranked by: its PodGroup's, if that sets one, else its own.
    priority: i32,
    /// The pod's own priority: the answer's order (kube-scheduler reads Pods[0] as the
    /// highest-priority victim from its own cache).
    pod_priority: i32,
    /// `status.startTime`: `None` for pods that never started.
    running_since: Option<Timestamp>,
    tenant_share: f64,
    gang: Option<GangInfo>,
    fate: Fate,
    /// kube-scheduler proposed it: among equals, prefer kube's own choice (its cache
    /// certainly holds that pod on that node).
    proposed: bool,
    /// What its eviction does to its Job, once the victim set is known (`jobs::charge`).
    job_note: Option<String>,
    /// Its eviction uses up its Job's last allowed failure (`jobs::charge`).
    last_job_failure: bool,
    /// Its return is expected to evict (`aftermath` explains it).
    follow_on: bool,
    /// It came back a moment ago (`aftermath`).
    recently_back: Option<String>,
}

impl Victim<'_> {
    /// Most valuable first: class order, priority, longer running, lower tenant share,
    /// not proposed by kube-scheduler, then smaller (evicting the bigger of two equals
    /// frees more with fewer victims).
    fn value_order(&self, other: &Self) -> Ordering {
        let size = |v: &Victim| (v.pod.requests.milli_cpu, v.pod.requests.memory);
        self.class
            .cmp(&other.class)
            .then(other.priority.cmp(&self.priority))
            .then(self.running_since.unwrap_or(i64::MAX).cmp(&other.running_since.unwrap_or(i64::MAX)))
            .then(self.tenant_share.total_cmp(&other.tenant_share))
            .then(self.proposed.cmp(&other.proposed))
            .then(size(self).cmp(&size(other)))
            .then_with(|| (&self.pod.namespace, &self.pod.name).cmp(&(&other.pod.namespace, &other.pod.name)))
    }
}

/// A candidate node that survived, with its victims.
struct Plan {
    node: String,
    /// UIDs in answer order (descending priority).
    uids: Vec<String>,
    pdb_violations: i64,
    cost: Cost,
    requeues: Vec<RequeueIntent>,
}

/// One preemptor's request as every candidate node's re-selection reads it: the
/// decision's context, the view, what follows an eviction, and who asks.
#[derive(Clone, Copy)]
struct Asking<'a> {
    ctx: &'a Context<'a>,
    view: &'a View,
    aftermath: &'a Aftermath<'a>,
    preemptor: Preemptor<'a>,
    pod: &'a Pod,
}

/// kube-scheduler's victims on one candidate node, in the form it sent them.
#[derive(Clone, Copy)]
enum Proposed<'a> {
    Full(&'a Victims),
    Meta(&'a MetaVictims),
}

impl<'a> Proposed<'a> {
    /// No victims: a node where the pod fits as is.
    fn is_empty(self) -> bool {
        match self {
            Proposed::Full(v) => v.count == 0,
            Proposed::Meta(v) => v.uids.is_empty(),
        }
    }

    fn uids(self) -> &'a [String] {
        match self {
            Proposed::Full(v) => &v.uids,
            Proposed::Meta(v) => &v.uids,
        }
    }

    fn num_pdb_violations(self) -> i64 {
        match self {
            Proposed::Full(v) => v.num_pdb_violations,
            Proposed::Meta(v) => v.num_pdb_violations,
        }
    }
}

/// The candidate nodes kube-scheduler proposed, in name order, whatever their form.
fn proposed(candidates: &Candidates) -> Vec<(&str, Proposed<'_>)> {
    match candidates {
        Candidates::Full(map) => map.iter().map(|(n, v)| (n.as_str(), Proposed::Full(v))).collect(),
        Candidates::Meta(map) => map.iter().map(|(n, v)| (n.as_str(), Proposed::Meta(v))).collect(),
    }
}

/// Preempt, in kube-scheduler's steps: (1) refuse a pod that may not preempt; (2) the
/// candidates kube-scheduler proposed, unless room is already on its way; (3) re-select
/// the victims on each candidate under the policy (or judge kube's where the view cannot);
/// (4) each plan's cost; (5) rank, keeping `maxCandidates`.
pub fn preempt(args: &PreemptArgs, ctx: &Context) -> PreemptOutcome {
    let mut out = PreemptOutcome::default();
    let pod = &args.pod;
    // 1. Refuse.
    let class_id = ctx.class_of(pod);
    let class_name = &ctx.policy.class(class_id).name;
    if pod.preemption_never {
        out.explanations.push(Explanation::request(
            Verdict::Refused,
            Code::PreemptionNever,
            "the pod's preemptionPolicy is Never",
        ));
        return out;
    }
    if crate::requeue::is_replacement(pod)
        && ctx.policy.class(class_id).requeue.preemption == ReplacementPreemption::Never
    {
        out.explanations.push(Explanation::request(
            Verdict::Refused,
            Code::ReplacementWaits,
            format!(
                "{} is a requeued pod of class {class_name}: it waits for free room (requeue.preemption: never)",
                pod.key()
            ),
        ));
        return out;
    }
    if !ctx.policy.preempts_anything(class_id) {
        out.explanations.push(Explanation::request(
            Verdict::Refused,
            Code::ClassMayNotPreempt,
            format!("class {class_name} may not preempt any class"),
        ));
        return out;
    }
    let key = pod.key();
    let preemptor = Preemptor { priority: ctx.priority_of(pod), class: class_id, key: &key };
    out.explanations.push(Explanation::request(
        Verdict::Preemptor,
        Code::Classified,
        format!("{} is class {class_name}, priority {}", pod.key(), preemptor.priority),
    ));
    let view = ctx.view;
    if view.is_none() && ctx.view_expected && ctx.policy.class(class_id).without_view == WithoutView::Refuse {
        out.explanations.push(Explanation::request(
            Verdict::Refused,
            Code::ViewNotReady,
            format!(
                "the cluster view is not usable (not synced or stale) and class {class_name} is withoutView: refuse"
            ),
        ));
        return out;
    }
    if view.is_none() {
        out.explanations.push(Explanation::request(
            Verdict::Degraded,
            Code::NoView,
            "no cluster view: judging kube-scheduler's victims, not re-selecting them",
        ));
    }

    // 2. Candidates.
    let candidates = proposed(&args.candidates);
    let candidate_nodes: Vec<&str> = candidates.iter().map(|(n, _)| *n).collect();
    if let Some(node) = view.and_then(|v| room_on_its_way(ctx, v, preemptor, pod, &candidate_nodes)) {
        out.explanations.push(Explanation::request(
            Verdict::Refused,
            Code::RoomOnItsWay,
            format!("pods preempted on {node} are still terminating, and {key} fits there once they are gone: evicting more would free room twice"),
        ));
        return out;
    }

    // 3 and 4. A plan per candidate node, with its cost.
    let aftermath = view.map(|v| Aftermath::new(*ctx, v));
    let asking = view.zip(aftermath.as_ref()).map(|(view, aftermath)| Asking { ctx, view, aftermath, preemptor, pod });
    let mut plans = Vec::new();
    let ex = &mut out.explanations;
    for (node, victims) in candidates {
        if victims.is_empty() {
            plans.push(placeholder(node, victims.num_pdb_violations(), ex));
            continue;
        }
        let plan = match (asking.filter(|a| a.view.node(node).is_some()), victims) {
            (Some(asking), _) => {
                out.view_behind |= lags_behind(asking.view, victims.uids());
                if let Proposed::Meta(v) = victims {
                    note_misplaced_uids(asking.view, node, v, ex);
                }
                reselect_or_drop(&asking, node, victims.uids(), ex)
            }
            (None, Proposed::Full(v)) => {
                if view.is_some() {
                    ex.push(Explanation::node(
                        node,
                        Verdict::Degraded,
                        Code::NodeNotInView,
                        "node unknown to the cluster view: judging kube-scheduler's victims",
                    ));
                }
                judge_request_victims(ctx, preemptor, node, v, ex)
            }
            (None, Proposed::Meta(_)) if view.is_none() => {
                ex.push(Explanation::node(
                    node,
                    Verdict::Dropped,
                    Code::NoViewUidsOnly,
                    "victims arrived as UIDs only and there is no cluster view: none can be checked against the policy",
                ));
                None
            }
            (None, Proposed::Meta(_)) => {
                out.view_behind = true;
                ex.push(Explanation::node(
                    node,
                    Verdict::Dropped,
                    Code::NodeNotInView,
                    "node unknown to the cluster view: its victims cannot be checked",
                ));
                None
            }
        };
        plans.extend(plan);
    }

    // 5. Rank.
    (out.result, out.requeues) = rank(plans, ctx.policy.max_candidates, ex);
    out
}

/// A node where pods evicted to make room are still terminating, and where the preemptor
/// fits once the terminating pods are gone: its room is on its way. Evicted means
/// preempted by kube-scheduler (its `DisruptionTarget` condition) with a priority below
/// the preemptor's, or a bare pod whose replacement names this preemptor. kube-scheduler
/// preempts asynchronously and may ask again before the preemptor's nomination has reached
/// it; a second eviction then would free room twice, and might break a gang to do it.
/// Candidates and the nodes of the preemptor's own bare victims are looked at.
fn room_on_its_way(ctx: &Context, view: &View, preemptor: Preemptor, pod: &Pod, candidates: &[&str]) -> Option<String> {
    let own: HashSet<&str> = view
        .replacements()
        .filter(|r| r.annotations.get(crate::requeue::PREEMPTED_BY).is_some_and(|p| p == preemptor.key))
        .filter_map(|r| r.annotations.get(crate::requeue::FROM_UID))
        .collect();
    let mut nodes: Vec<&str> = own
        .iter()
        .filter_map(|uid| view.pod_by_uid(uid)?.node_name.as_deref())
        .chain(candidates.iter().copied())
        .collect();
    nodes.sort_unstable();
    nodes.dedup();
    let leaving_for_someone = |p: &Pod| {
        p.deletion_time.is_some()
            && ((p.preempted && ctx.priority_of(p) < preemptor.priority) || own.contains(p.uid.as_str()))
    };
    nodes
        .into_iter()
        .find(|n| {
            let Some(node) = view.node(n) else { return false };
            let pods = view.pods_on(n);
            if !pods.iter().any(|p| leaving_for_someone(p)) {
                return false;
            }
            let staying = pods.iter().map(|p| &**p).filter(|p| p.deletion_time.is_none() && p.uid != pod.uid);
            fits(
                pod,
                node,
                &NodeUsage::of(staying.chain(held_room(view, view.nominated_on(n), preemptor.priority, &pod.uid))),
            )
            .is_ok()
        })
        .map(str::to_string)
}

/// Like kube-scheduler, room held by the pods `nominated` to a node with a priority at
/// least `priority` is not available to a pod of that priority (`asking`, never counted
/// against itself); they are never victims either.
fn held_room<'v>(
    view: &'v View,
    nominated: &'v [PodRef],
    priority: i32,
    asking: &'v str,
) -> impl Iterator<Item = &'v Pod> + 'v {
    nominated.iter().map(|p| &**p).filter(move |p| p.uid != asking && view.priority_of(p) >= priority)
}

/// Re-selection on a node the view knows. If the view says the pod already fits, the
/// view and kube-scheduler's cache disagree (one of them is stale): never answer an
/// empty victim list for a candidate that had victims (v1.35 rejects it), drop the node.
fn reselect_or_drop(asking: &Asking, node: &str, proposed: &[String], ex: &mut Vec<Explanation>) -> Option<Plan> {
    match reselect(asking, node, proposed, ex) {
        Reselected::Plan(p) => Some(p),
        Reselected::Vetoed => None,
        Reselected::NoVictimsNeeded => {
            ex.push(Explanation::node(
                node,
                Verdict::Dropped,
                Code::ViewDisagrees,
                "the view says the pod fits without evicting anything, kube-scheduler says not: one of them is stale",
            ));
            None
        }
    }
}

fn placeholder(node: &str, num_pdb_violations: i64, ex: &mut Vec<Explanation>) -> Plan {
    ex.push(Explanation::node(node, Verdict::Kept, Code::NoVictims, "candidate without victims: returned as is"));
    Plan {
        node: node.to_string(),
        uids: Vec::new(),
        pdb_violations: num_pdb_violations,
        cost: Cost::default(),
        requeues: Vec::new(),
    }
}

/// Does kube-scheduler know proposed victims the view does not, or has it seen them bound
/// where the view has them pending? (A pod on another node is a disagreement, not a lag.)
fn lags_behind(view: &View, uids: &[String]) -> bool {
    uids.iter().any(|uid| view.pod_by_uid(uid).is_none_or(|p| p.node_name.is_none()))
}

fn note_misplaced_uids(view: &View, node: &str, v: &MetaVictims, ex: &mut Vec<Explanation>) {
    for uid in &v.uids {
        match view.pod_by_uid(uid) {
            None => ex.push(Explanation::pod(
                node,
                uid,
                Verdict::Ignored,
                Code::UnknownUid,
                "kube-scheduler proposed a pod the view does not know; it will not be returned",
            )),
            Some(p) if p.node_name.as_deref() != Some(node) => ex.push(Explanation::pod(
                node,
                &p.key(),
                Verdict::Ignored,
                Code::VictimElsewhere,
                format!(
                    "kube-scheduler proposed it here, the view has it on {}",
                    p.node_name.as_deref().unwrap_or("no node")
                ),
            )),
            Some(_) => {}
        }
    }
}

/// Without node state: keep kube-scheduler's victims only if every one is allowed. A
/// victim the view knows is judged by the view's data (it may be terminating, or bound
/// elsewhere, since kube-scheduler looked).
fn judge_request_victims<'a>(
    ctx: &Context<'a>,
    preemptor: Preemptor,
    node: &str,
    v: &'a Victims,
    ex: &mut Vec<Explanation>,
) -> Option<Plan> {
    let mut victims = Vec::new();
    for sent in &v.pods {
        let pod: &Pod = match ctx.view.and_then(|view| view.pod_by_uid(&sent.uid)) {
            Some(known) => known,
            None => sent,
        };
        if pod.node_name.as_deref() != Some(node) {
            ex.push(Explanation::node(
                node,
                Verdict::Dropped,
                Code::VictimElsewhere,
                format!(
                    "proposed victim {} is on {} in the cluster view, not here",
                    pod.key(),
                    pod.node_name.as_deref().unwrap_or("no node")
                ),
            ));
            return None;
        }
        let eligible = match eligibility::check(ctx, preemptor, pod) {
            Ok(e) => e,
            Err(p) => {
                ex.push(p.explain(node, &pod.key(), Verdict::Protected));
                ex.push(Explanation::node(
                    node,
                    Verdict::Dropped,
                    p.code,
                    format!("proposed victim {} is protected: {}", pod.key(), p.detail),
                ));
                return None;
            }
        };
        if let Some(g) = ctx.policy.gangs.gang_of(pod) {
            ex.push(Explanation::node(node, Verdict::Dropped, Code::GangUnknown,
                format!("proposed victim {} belongs to {g} ({}); without a cluster view we cannot tell whether evicting it breaks the gang", pod.key(), g.source.name())).for_gang(g.source));
            return None;
        }
        victims.push(victim(ctx, pod, eligible, None, true));
    }
    if v.num_pdb_violations > 0 {
        if let Some(strict) = victims.iter().find(|x| ctx.policy.class(x.class).victim.pdb == PdbMode::Strict) {
            ex.push(Explanation::node(node, Verdict::Dropped, Code::PdbStrict,
                format!("kube-scheduler counts {} PDB violation(s) and class {} is strict; without PDB data we cannot tell which victim violates",
                    v.num_pdb_violations, ctx.policy.class(strict.class).name)));
            return None;
        }
    }
    victims.sort_by(|a, b| a.value_order(b));
    jobs::charge(ctx, node, &mut victims, ex)?;
    let mut cost = cost_of(ctx, &victims);
    cost.pdb_violations = v.num_pdb_violations;
    Some(finish(ctx, preemptor, node, victims, cost, "kube's victims, all allowed", ex))
}

enum Reselected {
    Plan(Plan),
    Vetoed,
    NoVictimsNeeded,
}

fn victim<'a>(
    ctx: &Context,
    pod: &'a Pod,
    eligible: eligibility::Eligible,
    view: Option<&View>,
    proposed: bool,
) -> Victim<'a> {
    let gang = view.and_then(|v| Some(v.gang(&v.gang_of(pod)?, pod)));
    let pod_priority = ctx.priority_of(pod);
    Victim {
        pod,
        class: eligible.class,
        fate: eligible.fate,
        priority: gang.as_ref().and_then(|g| g.priority).unwrap_or(pod_priority),
        pod_priority,
        // Like kube-scheduler, a pod that never started has run for no time at all.
        running_since: pod.start_time,
        tenant_share: view.map(|v| v.tenant_share(&ctx.policy.tenants.tenant_of(pod))).unwrap_or(0.0),
        gang,
        proposed,
        job_note: None,
        last_job_failure: false,
        follow_on: false,
        recently_back: None,
    }
}

/// Full re-selection on a node the view knows.
fn reselect(asking: &Asking, node_name: &str, proposed: &[String], ex: &mut Vec<Explanation>) -> Reselected {
    let Asking { ctx, view, pod, preemptor, .. } = *asking;
    let node = view.node(node_name).expect("caller checked the node is in the view");
    let mut pods: Vec<&Pod> = view.pods_on(node_name).iter().map(|p| &**p).filter(|p| p.uid != pod.uid).collect();
    // The view keeps a node's pods in arrival order: explain them in name order.
    pods.sort_unstable_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let mut usage = NodeUsage::of(pods.iter().copied());
    let held: Vec<&Pod> = held_room(view, view.nominated_on(node_name), preemptor.priority, &pod.uid).collect();
    for h in &held {
        usage.add(h);
    }
    if !held.is_empty() {
        let names: Vec<String> = held.iter().take(5).map(|p| p.key()).collect();
        ex.push(Explanation::node(
            node_name,
            Verdict::Charged,
            Code::NominatedRoom,
            format!(
                "{} pending pod(s) nominated here with priority at least {} hold their room: {}",
                held.len(),
                preemptor.priority,
                names.join(", ")
            ),
        ));
    }
    if fits(pod, node, &usage).is_ok() {
        return Reselected::NoVictimsNeeded;
    }
    let mut candidates: Vec<Victim> = Vec::new();
    for p in &pods {
        if ctx.priority_of(p) >= preemptor.priority {
            continue; // not a potential victim for kube-scheduler either
        }
        match eligibility::check(ctx, preemptor, p) {
            Ok(eligible) => candidates.push(victim(ctx, p, eligible, Some(view), proposed.contains(&p.uid))),
            Err(prot) => ex.push(prot.explain(node_name, &p.key(), Verdict::Spared)),
        }
    }
    if ctx.policy.tenants.fair_sharing && ctx.policy.class(preemptor.class).victim.allowed {
        candidates = fair_share(asking, node, &usage, candidates, ex);
    }
    let candidates = gangs::keep_whole_groups(node_name, candidates, ex);
    for c in &candidates {
        usage.remove(c.pod);
    }
    if let Err(why) = fits(pod, node, &usage) {
        ex.push(Explanation::node(
            node_name,
            Verdict::Dropped,
            Code::DoesNotFit,
            format!("does not fit even after evicting all {} evictable pod(s): {why}", candidates.len()),
        ));
        return Reselected::Vetoed;
    }

    // Like kube-scheduler: find which candidates would violate a PDB if all were evicted
    // (most valuable consume the budget first), and try to reprieve those first. Gang
    // members are tried next; where both kinds compete for the same room, the opposite
    // order is tried too and the cheaper victim set kept (a broken gang costs more than
    // a PDB violation).
    let mut candidates = candidates;
    candidates.sort_by(|a, b| a.value_order(b));
    let mut budgets = Budgets::new(view);
    let taken: Vec<Taken> = candidates.iter().map(|c| budgets.take(c.pod)).collect();
    let violating = |i: usize| taken[i].violated.is_some();
    // A pod whose eviction fails its Job is lost work: tried for reprieve right after
    // the PDB-violating ones; then those that would spend a last budget.
    let jobs = jobs::effects(ctx, &candidates);
    let spends = |i: usize| taken[i].spent_last.is_some() || jobs[i].last;
    let mut pdb_first: Vec<usize> = (0..candidates.len()).collect();
    pdb_first.sort_by_key(|&i| (!violating(i), !jobs[i].fails, !spends(i), candidates[i].gang.is_none(), i));
    let mut gang_first = pdb_first.clone();
    gang_first.sort_by_key(|&i| (candidates[i].gang.is_none(), !violating(i), !jobs[i].fails, !spends(i), i));
    let mut orders = vec![pdb_first];
    if gang_first != orders[0] {
        orders.push(gang_first);
    }
    let mut best: Option<(Plan, Vec<Explanation>)> = None;
    let mut vetoed: Option<Vec<Explanation>> = None;
    for order in orders {
        let mut notes = Vec::new();
        match reprieve(asking, node, &candidates, &order, usage.clone(), &mut notes) {
            Some(plan) if best.as_ref().is_none_or(|(b, _)| plan.cost < b.cost) => best = Some((plan, notes)),
            Some(_) => {}
            None => {
                vetoed.get_or_insert(notes);
            }
        }
    }
    match (best, vetoed) {
        (Some((plan, notes)), _) => {
            ex.extend(notes);
            Reselected::Plan(plan)
        }
        (None, notes) => {
            ex.extend(notes.unwrap_or_default());
            Reselected::Vetoed
        }
    }
}

/// Puts candidates back in `order`, keeping each whose return still lets the preemptor
/// fit, then accounts PDBs and gangs exactly. `None`: a strict class's PDB would be
/// exceeded.
fn reprieve(
    asking: &Asking,
    node: &crate::model::Node,
    candidates: &[Victim],
    order: &[usize],
    mut usage: NodeUsage,
    ex: &mut Vec<Explanation>,
) -> Option<Plan> {
    let Asking { ctx, view, aftermath, preemptor, pod } = *asking;
    let node_name = node.name.as_str();
    let mut chosen = Vec::new();
    // A disruptionMode All gang comes back, or goes, as one.
    for unit in gangs::reprieve_units(candidates, order) {
        let members = || unit.iter().map(|&i| &candidates[i]);
        members().for_each(|c| usage.add(c.pod));
        if fits(pod, node, &usage).is_ok() {
            for c in members() {
                ex.push(Explanation::pod(
                    node_name,
                    &c.pod.key(),
                    Verdict::Spared,
                    Code::Reprieved,
                    "the preemptor still fits with it in place",
                ));
            }
        } else {
            members().for_each(|c| usage.remove(c.pod));
            chosen.extend(members().cloned());
        }
    }
    chosen.sort_by(|a, b| a.value_order(b));

    // Exact PDB accounting on the final set.
    let mut budgets = Budgets::new(view);
    let mut violations = 0;
    let mut spent = 0;
    for c in &chosen {
        let taken = budgets.take(c.pod);
        if let Some(pdb) = taken.spent_last {
            ex.push(Explanation::pod(
                node_name,
                &c.pod.key(),
                Verdict::Victim,
                Code::LastDisruption,
                format!("spends the last disruption PDB {pdb} allows: a later preemption there would violate it"),
            ));
            spent += 1;
        }
        if let Some(pdb) = taken.violated {
            let class = ctx.policy.class(c.class);
            if class.victim.pdb == PdbMode::Strict {
                ex.push(Explanation::node(
                    node_name,
                    Verdict::Dropped,
                    Code::PdbStrict,
                    format!(
                        "the preemptor needs {} evicted, which exceeds PDB {pdb} (class {} is strict)",
                        c.pod.key(),
                        class.name
                    ),
                ));
                return None;
            }
            ex.push(Explanation::pod(
                node_name,
                &c.pod.key(),
                Verdict::Victim,
                Code::PdbViolation,
                format!("violates PDB {pdb} (class {} is best-effort)", class.name),
            ));
            violations += 1;
        }
    }

    jobs::charge(ctx, node_name, &mut chosen, ex)?;
    // What follows: pods that came back a moment ago are evicted twice; returning ones
    // that find no room evict in turn.
    for c in chosen.iter_mut() {
        c.recently_back = aftermath.recently_back(c.pod);
    }
    let follow_on = aftermath.charge(node, &mut chosen, ex);
    let mut cost = cost_of(ctx, &chosen);
    cost.pdb_violations = violations;
    cost.budgets_spent += spent;
    cost.re_evicted = chosen.iter().filter(|c| c.recently_back.is_some()).count() as i64;
    cost.follow_on_evictions = follow_on.evictions;
    cost.lost_runtime += follow_on.runtime;
    cost.broken_gang_members = gangs::charge(node_name, &chosen, ex);
    Some(finish(ctx, preemptor, node_name, chosen, cost, "re-selected under the policy", ex))
}

/// Between offline tenants (the preemptor's class is itself evictable), Kueue's fair
/// sharing: first only victims whose tenant would still hold at least the preemptor
/// tenant's share after the eviction (LessThanOrEqualToFinalShare); if that is not
/// enough room, also those whose tenant holds more than it before the eviction
/// (LessThanInitialShare). A tenant's own pods are always candidates.
fn fair_share<'a>(
    asking: &Asking,
    node: &crate::model::Node,
    usage: &NodeUsage,
    candidates: Vec<Victim<'a>>,
    ex: &mut Vec<Explanation>,
) -> Vec<Victim<'a>> {
    let Asking { ctx, view, pod, .. } = *asking;
    let tenants = &ctx.policy.tenants;
    let mine = tenants.tenant_of(pod);
    let mine_after = view.tenant_share(&mine) + view.share_of(&pod.requests, tenants.weight(&mine));
    let allowed = |c: &Victim, final_share: bool| {
        let theirs = tenants.tenant_of(c.pod);
        if theirs == mine {
            return true;
        }
        if final_share {
            mine_after <= c.tenant_share - view.share_of(&c.pod.requests, tenants.weight(&theirs))
        } else {
            mine_after < c.tenant_share
        }
    };
    let fits_without = |set: &[&Victim]| {
        let mut u = usage.clone();
        for c in set {
            u.remove(c.pod);
        }
        fits(pod, node, &u).is_ok()
    };
    let strict: Vec<&Victim> = candidates.iter().filter(|c| allowed(c, true)).collect();
    let final_share = fits_without(&strict);
    let (keep, spare): (Vec<_>, Vec<_>) = candidates.into_iter().partition(|c| allowed(c, final_share));
    for c in &spare {
        ex.push(Explanation::pod(
            &node.name,
            &c.pod.key(),
            Verdict::Spared,
            Code::FairShare,
            format!(
                "tenant {} holds a share of {:.3}, not above tenant {mine}'s {:.3} after admission",
                tenants.tenant_of(c.pod),
                c.tenant_share,
                mine_after
            ),
        ));
    }
    keep
}

/// Remaining disruptions per PDB while a victim set is built.
struct Budgets<'a> {
    view: &'a View,
    left: HashMap<String, i32>,
}

/// What one eviction does to the PDBs covering the pod.
#[derive(Debug, Default)]
struct Taken {
    /// The first PDB it pushes past its budget, described.
    violated: Option<String>,
    /// The first PDB whose last allowed disruption it spends.
    spent_last: Option<String>,
}

impl<'a> Budgets<'a> {
    fn new(view: &'a View) -> Self {
        Budgets { view, left: HashMap::new() }
    }

    /// Counts `pod`'s eviction against every PDB covering it.
    fn take(&mut self, pod: &Pod) -> Taken {
        let mut taken = Taken::default();
        for pdb in self.view.pdbs_covering(pod) {
            // Pods already disrupted were counted by the disruption controller.
            if pdb.disrupted_pods.iter().any(|d| d == &pod.name) {
                continue;
            }
            let view = self.view;
            let left = self.left.entry(pdb.key()).or_insert_with(|| view.disruptions_allowed(pdb));
            *left -= 1;
            if *left == 0 && taken.spent_last.is_none() {
                taken.spent_last = Some(pdb.key());
            }
            if *left < 0 && taken.violated.is_none() {
                let now = view.disruptions_allowed(pdb);
                taken.violated = Some(if now == pdb.disruptions_allowed {
                    format!("{} (disruptionsAllowed {})", pdb.key(), pdb.disruptions_allowed)
                } else {
                    format!(
                        "{} (disruptionsAllowed {} in status, {now} now: covered pods evicted since)",
                        pdb.key(),
                        pdb.disruptions_allowed
                    )
                });
            }
        }
        taken
    }
}

/// Work a pod has done so far: seconds run × milli-CPU requested (at least 1 milli-CPU,
/// so a pod without requests still counts its time).
pub(super) fn cpu_seconds(now: crate::model::Timestamp, pod: &Pod) -> i64 {
    let ran = pod.start_time.map_or(0, |t| (now - t).max(0));
    ran.saturating_mul(pod.requests.milli_cpu.max(1))
}

fn cost_of(ctx: &Context, victims: &[Victim]) -> Cost {
    let classes = ctx.policy.classes.len() as i64;
    let mut cost = Cost { victims: victims.len() as i64, ..Cost::default() };
    let mut min_share = f64::INFINITY;
    for v in victims {
        cost.top_class_value = cost.top_class_value.max(classes - v.class as i64);
        cost.max_priority = cost.max_priority.max(v.priority as i64);
        cost.priority_sum += v.priority as i64;
        cost.lost_runtime += cpu_seconds(ctx.now, v.pod);
        match v.fate {
            Fate::Lost => cost.lost_pods += 1,
            Fate::Requeued => cost.requeued += 1,
            Fate::Recreated | Fate::LeftToOwner => {}
        }
        if v.last_job_failure {
            cost.budgets_spent += 1;
        }
        min_share = min_share.min(v.tenant_share);
    }
    if min_share.is_finite() {
        cost.tenant_penalty = -(min_share * 1e6) as i64;
    }
    cost
}

fn finish(
    ctx: &Context,
    preemptor: Preemptor,
    node: &str,
    mut victims: Vec<Victim>,
    cost: Cost,
    how: &str,
    ex: &mut Vec<Explanation>,
) -> Plan {
    let pdb_violations = cost.pdb_violations;
    // kube-scheduler reads Pods[0] as the highest-priority victim.
    victims.sort_by(|a, b| b.pod_priority.cmp(&a.pod_priority).then(a.value_order(b)));
    let mut requeues = Vec::new();
    for v in &victims {
        let class = &ctx.policy.class(v.class).name;
        let why = match &v.gang {
            Some(g) if g.priority.is_some() => {
                format!("priority {} (of {}), class {class}, needed for the preemptor to fit", v.priority, g.gang)
            }
            _ => format!("priority {}, class {class}, needed for the preemptor to fit", v.priority),
        };
        let (code, detail) = match v.fate {
            Fate::Requeued => {
                let intent = RequeueIntent::for_victim(v.pod, node, preemptor.key);
                let detail = format!("{why}; bare pod: requeued as {} (attempt {})", intent.replacement, intent.attempt);
                requeues.push(intent);
                (Code::Requeued, detail)
            }
            Fate::Lost => match &v.job_note {
                Some(note) => (Code::Lost, format!("{why}; lost work: {note}")),
                None => (Code::Lost, format!("{why}; bare pod: lost (class {class} is bare: lose)")),
            },
            Fate::LeftToOwner => match &v.pod.owner {
                Some(o) => (Code::LeftToOwner, format!("{why}; owned by {} {} (not a controller): not requeued, left to its owner", o.kind, o.name)),
                None => (Code::LeftToOwner, format!("{why}; opted out of requeue ({}: never): not copied, left to whoever created it", crate::requeue::OPT_OUT)),
            },
            Fate::Recreated => match (&v.pod.controller, &v.job_note) {
                (Some(_), Some(note)) => (Code::Chosen, format!("{why}; {note}")),
                (Some(c), None) if c.kind == "Job" => (Code::Chosen, format!(
                    "{why}; recreated by Job {} (not in the cluster view), and the preemption counts against its backoffLimit unless its podFailurePolicy ignores DisruptionTarget",
                    c.name
                )),
                (Some(c), None) => (Code::Chosen, format!("{why}; recreated by its {} {}", c.kind, c.name)),
                (None, _) => (Code::Chosen, why),
            },
        };
        let detail = match (&v.recently_back, v.follow_on) {
            (None, false) => detail,
            (back, follow_on) => format!(
                "{detail}{}{}",
                back.as_deref().map(|b| format!("; {b}")).unwrap_or_default(),
                if follow_on { "; its return is expected to evict (follow_on)" } else { "" }
            ),
        };
        ex.push(Explanation::pod(node, &v.pod.key(), Verdict::Victim, code, detail));
    }
    ex.push(Explanation::node(
        node,
        Verdict::Candidate,
        Code::Candidate,
        format!("{how}: {} victim(s), {pdb_violations} PDB violation(s), cost {cost:?}", victims.len()),
    ));
    Plan {
        node: node.to_string(),
        uids: victims.iter().map(|v| v.pod.uid.clone()).collect(),
        pdb_violations,
        cost,
        requeues,
    }
}

/// Keeps the best `k` plans; never a gang-breaking plan while another avoids it.
fn rank(mut plans: Vec<Plan>, k: usize, ex: &mut Vec<Explanation>) -> (PreemptionResult, Vec<RequeueIntent>) {
    if plans.iter().any(|p| p.cost.broken_gang_members == 0) {
        plans.retain(|p| {
            let keep = p.cost.broken_gang_members == 0;
            if !keep {
                ex.push(Explanation::node(
                    &p.node,
                    Verdict::Dropped,
                    Code::GangBroken,
                    "breaks a gang while another candidate does not",
                ));
            }
            keep
        });
    }
    plans.sort_by(|a, b| a.cost.cmp(&b.cost).then_with(|| a.node.cmp(&b.node)));
    let mut result = PreemptionResult::default();
    let mut requeues = Vec::new();
    let best = plans.first().map(|p| p.node.clone());
    for (i, p) in plans.into_iter().enumerate() {
        if i >= k {
            ex.push(Explanation::node(
                &p.node,
                Verdict::Dropped,
                Code::Outranked,
                format!("a cheaper candidate ({}) was chosen; maxCandidates is {k}", best.as_deref().unwrap_or("-")),
            ));
            continue;
        }
        ex.push(Explanation::node(&p.node, Verdict::Kept, Code::Selected, format!("rank {} of the candidates", i + 1)));
        requeues.extend(p.requeues);
        result.node_name_to_meta_victims.insert(
            p.node,
            wire::MetaVictims {
                pods: p.uids.into_iter().map(|uid| wire::MetaPod { uid }).collect(),
                num_pdb_violations: p.pdb_violations,
            },
        );
    }
    (result, requeues)
}
