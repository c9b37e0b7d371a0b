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
use std::collections::BTreeMap;

mod aftermath;
mod gangs;
mod jobs;
mod plan;
mod proposed;
mod rank;
mod reprieve;
mod request_victims;
mod reselect;

use self::aftermath::Aftermath;
pub use self::plan::Cost;
use self::plan::{cpu_seconds_said, Plan, WaitPrice};
use self::proposed::{proposed, Proposed};
use self::rank::rank;
use self::request_victims::{judge_request_victims, note_misplaced_uids};
use self::reselect::reselect_or_drop;
use super::eligibility::Preemptor;
use super::fit::{fits, NodeUsage};
use super::wait::{self, Wait};
use super::{Context, Explanation};
use crate::cluster::View;
use crate::model::{Pod, PodRef, RequeueIntent};
use crate::policy::{ReplacementPreemption, WithoutView};
use crate::wire::{PreemptArgs, PreemptionResult};

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

/// Preempt, in kube-scheduler's steps, a file each: (1) refuse a pod that may not
/// preempt; (2) the candidates kube-scheduler proposed (`proposed.rs`), unless room is
/// already on its way; (3) re-select the victims on each candidate under the policy
/// (`reselect.rs`, or judge kube's where the view cannot: `request_victims.rs`); (4) each
/// plan's victims and exact cost (`reprieve.rs`); (5) rank, keeping `maxCandidates`
/// (`rank.rs`).
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
    let price = WaitPrice::of_preemptor(ctx, preemptor);
    let refuse_on_its_way = |ex: &mut Vec<Explanation>, node: &str, wait: &Wait, sooner: Option<&Cost>| {
        let alternative = match sooner {
            Some(c) => format!(
                "; evicting elsewhere would free room in ~{}, {}",
                wait::seconds(c.wait_ms),
                price.trade(&Cost { wait_ms: wait.ms, ..Cost::default() }, c).unwrap_or_default()
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
        if price.0 == 0.0 {
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

    // 3 and 4. A plan per candidate node, with its cost (reselect.rs, reprieve.rs).
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

    // 2, once the plans are known: room on its way is waited for, unless a plan that
    // loses, violates and spends nothing frees room sooner by seconds worth more than the
    // work it throws away (the room on its way costs nothing but its wait).
    if let Some((node, wait)) = &on_its_way {
        let harmless =
            |c: &Cost| c.lost_unasked == 0 && c.pdb_violations == 0 && c.lost_pods == 0 && c.budgets_spent == 0;
        let best = plans.iter().map(|p| &p.cost).filter(|c| harmless(c)).min();
        match best {
            Some(c) if c.priced_loss < price.of(wait.ms) => ex.push(Explanation::request(
                Verdict::Preemptor,
                Code::RoomOnItsWay,
                format!(
                    "pods preempted on {node} are still terminating, {}: evicting elsewhere frees room in ~{} for {}, worth it at {}",
                    wait.describe(),
                    wait::seconds(c.wait_ms),
                    cpu_seconds_said(c.owners_loss),
                    price.said()
                ),
            )),
            _ => {
                refuse_on_its_way(ex, node, wait, best);
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
