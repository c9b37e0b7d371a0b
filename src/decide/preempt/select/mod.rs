//! Step 3: the victims on each candidate, kube-scheduler's `SelectVictimsOnNode` under
//! the policy: re-selected where the view knows the node (`reselect.rs`: every pod the
//! policy lets this preemptor evict, then `reprieve.rs` puts them back while the pod
//! fits and costs what is left), judged as kube-scheduler chose them where it does not
//! (`request_victims.rs`). What the cost counts: Jobs failed (`jobs.rs`), gangs broken
//! (`gangs.rs`), what the victims' return evicts (`aftermath.rs`), and the online pods
//! waiting that the room left over places too, who share the cost (`room_left_over.rs`).

mod aftermath;
mod gangs;
mod jobs;
mod reprieve;
mod request_victims;
mod reselect;
mod room_left_over;

use self::aftermath::Aftermath;
use self::request_victims::{judge_request_victims, note_misplaced_uids};
use self::reselect::reselect_or_drop;
use super::candidates::Candidates;
use super::proposed::{lags_behind, Proposed};
use crate::cluster::View;
use crate::decide::eligibility::Preemptor;
use crate::decide::preempt::plan::{Cost, Plan};
use crate::decide::wait::Wait;
use crate::decide::Context;
use crate::explanation::Explanation;
use crate::explanation::{Code, Verdict};
use crate::model::Pod;

/// One preemptor's request as every candidate node's re-selection reads it: the
/// decision's context, the view, what follows an eviction, and who asks.
#[derive(Clone, Copy)]
struct Asking<'a, 'r> {
    ctx: &'r Context<'a>,
    view: &'a View,
    aftermath: &'r Aftermath<'a>,
    preemptor: Preemptor<'r>,
    pod: &'a Pod,
}

/// What step 3 hands on: a plan per candidate that can make room, and whether
/// kube-scheduler proposed pods or nodes the view has not caught up with.
pub(super) struct Selected<'a> {
    pub(super) plans: Vec<Plan<'a>>,
    pub(super) view_behind: bool,
}

/// A plan per candidate node, with its cost: victims re-selected on nodes the view
/// knows, kube-scheduler's judged on the others; a candidate without victims as is.
pub(super) fn select_victims<'a>(
    ctx: &Context<'a>,
    preemptor: Preemptor,
    pod: &'a Pod,
    candidates: &Candidates<'a>,
    ex: &mut Vec<Explanation>,
) -> Selected<'a> {
    let view = ctx.view;
    let aftermath = view.map(|v| Aftermath::new(*ctx, v));
    let asking = view.zip(aftermath.as_ref()).map(|(view, aftermath)| Asking { ctx, view, aftermath, preemptor, pod });
    let mut selected = Selected { plans: Vec::new(), view_behind: false };
    for &(node, victims) in &candidates.nodes {
        if victims.is_empty() {
            selected.plans.push(placeholder(node, victims.num_pdb_violations(), ex));
            continue;
        }
        let plan = match (asking.filter(|a| a.view.node(node).is_some()), victims) {
            (Some(asking), _) => {
                selected.view_behind |= lags_behind(asking.view, victims.uids());
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
                selected.view_behind = true;
                ex.push(Explanation::node(
                    node,
                    Verdict::Dropped,
                    Code::NodeNotInView,
                    "node unknown to the cluster view: its victims cannot be checked",
                ));
                None
            }
        };
        selected.plans.extend(plan);
    }
    selected
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
