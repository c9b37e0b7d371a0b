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
use std::collections::{BTreeMap, HashMap};

mod aftermath;
mod gangs;
mod jobs;
mod rank;
mod reprieve;
mod request_victims;
mod reselect;

use self::aftermath::Aftermath;
use self::rank::rank;
use self::request_victims::{judge_request_victims, note_misplaced_uids};
use self::reselect::reselect_or_drop;
use super::eligibility::{self, Fate, Preemptor};
use super::fit::{fits, NodeUsage};
use super::wait::{self, Wait};
use super::{Context, Explanation};
use crate::cluster::View;
use crate::model::{GangInfo, Pod, PodRef, RequeueIntent, Timestamp};
use crate::policy::{ClassId, PdbMode, ReplacementPreemption, WithoutView};
use crate::wire::request::{MetaVictims, Victims};
use crate::wire::{self, Candidates, PreemptArgs, PreemptionResult};

#[derive(Debug, Default)]
pub struct PreemptOutcome {
    pub result: PreemptionResult,
    pub explanations: Vec<Explanation>,
    /// Bare victims of `requeue` classes on the returned nodes: the requeue controller
    /// copies them once kube-scheduler evicts them (explained, never stored here).
    pub requeues: Vec<RequeueIntent>,
    /// kube-scheduler proposed pods or nodes the view has not caught up with (unknown, or
    /// still unbound there): its cache is ahead, and a moment later the view may decide
    /// better (the edge may wait for the next view and decide again).
    pub view_behind: bool,
    /// The room this answer promises its preemptor on each node it returns, to be held for
    /// the next preemptors until the view shows the nomination (`promised`).
    pub promised: Vec<super::promised::PromisedRoom>,
    /// How soon the room is free on each returned node.
    pub waits: BTreeMap<String, Wait>,
}

/// What evicting a victim set costs; compared field by field, lower is better.
///
/// Ahead of everything: victims of last resort, then PDB violations, then work nothing
/// brings back (a failed Job, a bare pod of a `lose` class), then the policy's class
/// order, then budgets a later arrival would have to break (a PDB's or a Job's last).
/// Then how much later than the soonest candidate the room comes free (in factors of the
/// preemptor class's `waitTolerance`): an online pod is placed as soon as it can be.
/// Within them, what the owners lose: the work thrown away plus a restart for every pod
/// interrupted; then the wait itself. A broken gang is no tier of its own: its
/// survivors' run and restarts are in that figure, so a gang is broken only where keeping
/// it whole throws away more.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cost {
    /// Work lost that nobody agreed to lose: a bare pod whose class asks for requeue but
    /// that cannot be requeued (namespace not opted in, `maxAttempts` reached, requeue
    /// unavailable, beyond baseline: a victim of last resort), and a pod whose eviction fails
    /// its Job. First, ahead of PDB violations: a violated PDB's pods come back, these do
    /// not, and a `lose` class agreed to lose its pods. So such a victim is taken only
    /// where no other victims place the preemptor, and then as few as can be.
    pub lost_unasked: i64,
    pub pdb_violations: i64,
    /// Victims that nothing brings back (allowed only where the policy says so).
    pub lost_pods: i64,
    /// How valuable the most valuable victim's class is (0: no victims).
    pub top_class_value: i64,
    /// Budgets this eviction uses up: a PDB's last allowed disruption, a Job's last
    /// allowed failure. Nothing is lost now, but a later arrival whose only room is
    /// behind that budget would have to violate it (budgets are shared over time).
    pub budgets_spent: i64,
    /// How many factors of the preemptor class's `waitTolerance` the room comes free later
    /// than on the soonest candidate compared (`wait::later_by`; set where plans are
    /// compared: 0 for a plan alone).
    pub later: i64,
    /// `work_thrown_away + restarts`, milli-CPU-seconds.
    pub owners_loss: i64,
    /// Milliseconds until the room is free: the last victim gone, and the pods already
    /// terminating the plan waits for (`wait::until_gone`).
    pub wait_ms: i64,
    pub max_priority: i64,
    pub priority_sum: i64,
    pub victims: i64,
    /// Prefer taking from tenants with a high weighted share: minus the lowest share
    /// among victims' tenants, in millionths.
    pub tenant_penalty: i64,
    /// Bare victims that go back to the pending queue through a copy: nothing is lost
    /// either way, so only the copies' API writes tell it from a recreated victim, last.
    pub requeued: i64,
    /// Run time thrown away in milli-CPU-seconds (seconds run × CPU requested): the
    /// victims', a broken gang's survivors' and the expected follow-on evictions'.
    pub work_thrown_away: i64,
    /// Each interrupted pod's `victim.restartCost` at its CPU request, milli-CPU-seconds.
    pub restarts: i64,
    /// Pods interrupted: victims, survivors of the gangs they break, follow-on evictions.
    pub interrupted: i64,
    /// Members a broken gang keeps elsewhere: they run on but cannot progress.
    pub gang_survivors: i64,
    /// Pods the returning victims are expected to preempt, where they would find no room.
    pub follow_on_evictions: i64,
    /// Victims that came back a moment ago (recreated after a preemption, or requeued).
    pub re_evicted: i64,
    /// Of `lost_unasked`, the bare pods that cannot be requeued (the rest fail a Job).
    pub last_resort: i64,
}

impl Cost {
    /// Adds `work` thrown away and `pods` interrupted whose restarts cost `restarts`.
    fn interrupt(&mut self, work: i64, pods: i64, restarts: i64) {
        self.work_thrown_away = self.work_thrown_away.saturating_add(work);
        self.restarts = self.restarts.saturating_add(restarts);
        self.interrupted += pods;
        self.owners_loss = self.work_thrown_away.saturating_add(self.restarts);
    }

    /// The figure owners lose and what it is made of, for explanations.
    pub fn describe(&self) -> String {
        let cpu_s = |m: i64| m / 1000;
        let mut parts = vec![format!("{} evicted", self.victims)];
        if self.gang_survivors > 0 {
            parts.push(format!("{} gang survivor(s)", self.gang_survivors));
        }
        if self.follow_on_evictions > 0 {
            parts.push(format!("{} follow-on eviction(s)", self.follow_on_evictions));
        }
        let budgets = match self.budgets_spent {
            0 => String::new(),
            n => format!(", {n} last budget(s) spent (a PDB's last disruption, a Job's last failure)"),
        };
        let last_resort = match self.last_resort {
            0 => String::new(),
            n => format!(" ({n} a last resort: bare, cannot be requeued)"),
        };
        format!(
            "owners lose {} CPU-s: {} run thrown away + {} for {} pod(s) interrupted ({}); {} PDB violation(s), {} lost{last_resort}{budgets}",
            cpu_s(self.owners_loss),
            cpu_s(self.work_thrown_away),
            cpu_s(self.restarts),
            self.interrupted,
            parts.join(", "),
            self.pdb_violations,
            self.lost_pods,
        )
    }
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
    /// Milliseconds until it would be gone if evicted now (`wait::left`).
    left_ms: i64,
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
    /// What its eviction does to the PDBs covering it (`reprieve`), said only where the
    /// plan is kept: a pod on an outranked candidate is not a victim.
    pdb_notes: Vec<(Code, String)>,
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
struct Plan<'a> {
    node: String,
    /// In answer order (descending priority).
    victims: Vec<Victim<'a>>,
    pdb_violations: i64,
    cost: Cost,
    /// How soon its room is free (`cost.wait_ms`), and for whom last.
    wait: Wait,
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
    if crate::model::marks::is_replacement(pod)
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
    let on_its_way = view.and_then(|v| room_on_its_way(ctx, v, preemptor, pod, &candidate_nodes));
    let tolerance = ctx.policy.class(class_id).wait_tolerance;
    let refuse_on_its_way = |ex: &mut Vec<Explanation>, node: &str, wait: &Wait, sooner: Option<i64>| {
        let alternative = match sooner {
            Some(ms) => format!(
                "; evicting elsewhere would free room in ~{}, not sooner by more than waitTolerance {tolerance}",
                wait::seconds(ms)
            ),
            None => String::new(),
        };
        ex.push(Explanation::request(
            Verdict::Refused,
            Code::RoomOnItsWay,
            format!("pods preempted on {node} are still terminating, and {key} fits there once they are gone, {}: evicting more would free room twice{alternative}", wait.describe()),
        ));
    };
    if let Some((node, wait)) = &on_its_way {
        if tolerance == 0.0 {
            refuse_on_its_way(&mut out.explanations, node, wait, None);
            return out;
        }
    }
    if let Some(node) = view.and_then(|v| room_already_free(ctx, v, preemptor, pod, &candidates)) {
        out.explanations.push(Explanation::request(
            Verdict::Refused,
            Code::RoomOnItsWay,
            format!("{key} fits on {node} as the view has it, without evicting anything: kube-scheduler has not seen that room free yet, and evicting more would free room twice"),
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

    // Room on its way is waited for, unless a plan that loses, violates and spends nothing
    // frees room sooner by more than the class's tolerance.
    if let Some((node, wait)) = &on_its_way {
        let harmless =
            |c: &Cost| c.lost_unasked == 0 && c.pdb_violations == 0 && c.lost_pods == 0 && c.budgets_spent == 0;
        let sooner = plans.iter().filter(|p| harmless(&p.cost)).map(|p| p.cost.wait_ms).min();
        match sooner {
            Some(ms) if wait::later_by(wait.ms, ms, tolerance) > 0 => ex.push(Explanation::request(
                Verdict::Preemptor,
                Code::RoomOnItsWay,
                format!("pods preempted on {node} are still terminating, {}: evicting elsewhere frees room in ~{}, sooner by more than waitTolerance {tolerance}", wait.describe(), wait::seconds(ms)),
            )),
            _ => {
                refuse_on_its_way(ex, node, wait, sooner);
                return out;
            }
        }
    }

    // 5. Rank.
    (out.result, out.requeues, out.waits) = rank(ctx, preemptor, plans, ex);
    out.promised = super::promised::PromisedRoom::of(pod, out.result.node_name_to_meta_victims.keys(), ctx.now);
    out
}

/// A node where pods evicted to make room are still terminating, and where the preemptor
/// fits once they are gone: its room is on its way. Evicted means marked by kube-scheduler
/// (`DisruptionTarget`) with a priority below the preemptor's, or any pod of lower priority
/// terminating on the node the preemptor is nominated to (kube-scheduler's own rule).
/// kube-scheduler preempts asynchronously and may ask again before the preemptor's
/// nomination has reached it; a second eviction then would free room twice, and might
/// break a gang to do it. The nominated node and the candidates are looked at.
fn room_on_its_way(
    ctx: &Context,
    view: &View,
    preemptor: Preemptor,
    pod: &Pod,
    candidates: &[&str],
) -> Option<(String, Wait)> {
    let nominated =
        pod.nominated_node_name.as_deref().or_else(|| view.pod_by_uid(&pod.uid)?.nominated_node_name.as_deref());
    let mut nodes: Vec<&str> = nominated.into_iter().chain(candidates.iter().copied()).collect();
    nodes.sort_unstable();
    nodes.dedup();
    nodes.into_iter().find_map(|n| {
        let node = view.node(n)?;
        let pods = view.pods_on(n);
        let leaving = |p: &Pod| {
            p.deletion_time.is_some()
                && ctx.priority_of(p) < preemptor.priority
                && (p.preempted || nominated == Some(n))
        };
        if !pods.iter().any(|p| leaving(p)) {
            return None;
        }
        let staying = pods.iter().map(|p| &**p).filter(|p| p.deletion_time.is_none() && p.uid != pod.uid);
        fits(pod, node, &NodeUsage::of(staying.chain(held_on(ctx, view, n, preemptor.priority, &pod.uid)))).ok()?;
        let wait = wait::until_gone(ctx, pods.iter().map(|p| &**p).filter(|p| leaving(p)));
        Some((n.to_string(), wait))
    })
}

/// A candidate where the view has seen some of kube-scheduler's proposed victims go and
/// the pod fits as is: the victims of an earlier preemption are gone already, and
/// kube-scheduler's cache trails the view for a moment. (Only then: where the view still
/// holds every proposed victim and says the pod fits, kube-scheduler may have a reason the
/// view does not model, an anti-affinity say, and re-selection decides as before.) With a
/// proposed victim the view never saw, the view is the one behind: the decision is made
/// and the edge waits for it to catch up.
fn room_already_free(
    ctx: &Context,
    view: &View,
    preemptor: Preemptor,
    pod: &Pod,
    candidates: &[(&str, Proposed)],
) -> Option<String> {
    if candidates.iter().any(|(n, victims)| view.node(n).is_some() && lags_behind(view, victims.uids())) {
        return None;
    }
    let some_gone = |uids: &[String]| uids.iter().any(|u| view.pod_by_uid(u).is_none() && view.saw_go(u));
    candidates
        .iter()
        .filter(|(_, victims)| some_gone(victims.uids()))
        .map(|(n, _)| *n)
        .find(|n| {
            let Some(node) = view.node(n) else { return false };
            let pods = view.pods_on(n).iter().map(|p| &**p).filter(|p| p.uid != pod.uid);
            let held = held_on(ctx, view, n, preemptor.priority, &pod.uid);
            fits(pod, node, &NodeUsage::of(pods.chain(held))).is_ok()
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

/// The room held on `node` for a pod of `priority`: pods nominated there, and preemptors
/// an earlier answer sent there that the view does not show yet (`promised`).
fn held_on<'v>(
    ctx: &Context<'v>,
    view: &'v View,
    node: &'v str,
    priority: i32,
    asking: &'v str,
) -> impl Iterator<Item = &'v Pod> + 'v {
    held_room(view, view.nominated_on(node), priority, asking).chain(super::promised::on_node(
        ctx.promised,
        view,
        node,
        priority,
        asking,
    ))
}

fn placeholder(node: &str, num_pdb_violations: i64, ex: &mut Vec<Explanation>) -> Plan<'static> {
    ex.push(Explanation::node(node, Verdict::Kept, Code::NoVictims, "candidate without victims: returned as is"));
    Plan {
        node: node.to_string(),
        victims: Vec::new(),
        pdb_violations: num_pdb_violations,
        cost: Cost::default(),
        wait: Wait::default(),
    }
}

/// Does kube-scheduler know proposed victims the view does not (and did not see go), or
/// has it seen them bound where the view has them pending? (A pod on another node is a
/// disagreement, not a lag; one the view saw go means kube-scheduler's cache is behind.)
fn lags_behind(view: &View, uids: &[String]) -> bool {
    uids.iter().any(|uid| match view.pod_by_uid(uid) {
        None => !view.saw_go(uid),
        Some(p) => p.node_name.is_none(),
    })
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
        left_ms: wait::left_in(ctx, pod, eligible.class).0,
        tenant_share: view.map(|v| v.tenant_share(&ctx.policy.tenants.tenant_of(pod))).unwrap_or(0.0),
        gang,
        proposed,
        job_note: None,
        last_job_failure: false,
        follow_on: false,
        recently_back: None,
        pdb_notes: Vec::new(),
    }
}

/// Work a pod has done so far: seconds run × milli-CPU requested (at least 1 milli-CPU,
/// so a pod without requests still counts its time).
pub(super) fn cpu_seconds(now: crate::model::Timestamp, pod: &Pod) -> i64 {
    let ran = pod.start_time.map_or(0, |t| (now - t).max(0));
    ran.saturating_mul(pod.requests.milli_cpu.max(1))
}

/// The run evicting `pod` of `class` throws away: all of it, unless its class saves its
/// progress on SIGTERM (`victim.checkpointsOnTerm`): then none.
pub(super) fn run_thrown_away(ctx: &Context, class: ClassId, pod: &Pod) -> i64 {
    match ctx.policy.class(class).victim.checkpoints_on_term {
        true => 0,
        false => cpu_seconds(ctx.now, pod),
    }
}

/// What restarting a pod of `class` requesting `milli_cpu` costs its owner, in
/// milli-CPU-seconds: `victim.restartCost` at its CPU, but at least one CPU's (a small
/// pod's restart takes as long: an eviction is never cheap because the pod is small).
fn restart_cost(ctx: &Context, class: ClassId, milli_cpu: i64) -> i64 {
    ctx.policy.class(class).victim.restart_cost.saturating_mul(milli_cpu.max(1000))
}
