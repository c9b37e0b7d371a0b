//! Step 2: the candidates kube-scheduler proposed (`proposed.rs` reads either form), and
//! the room already coming to the preemptor without an eviction: on its way (pods
//! evicted a moment ago still terminating: `room_on_its_way.rs`) or already free
//! (proposed victims the view saw go).

use super::held::held_on;
use super::plan::WaitPrice;
use super::proposed::{lags_behind, proposed, Proposed};
use super::room_on_its_way::{self, RoomOnItsWay};
use crate::cluster::usage::NodeUsage;
use crate::cluster::View;
use crate::decide::eligibility::Preemptor;
use crate::decide::fit::fits;
use crate::decide::Context;
use crate::explanation::Explanation;
use crate::explanation::{Code, Verdict};
use crate::model::Pod;

/// What step 2 hands on: the candidate nodes in name order, and a node where room is on
/// its way to the preemptor (how soon it is free), weighed against the plans in step 4.
pub(super) struct Candidates<'a> {
    pub(super) nodes: Vec<(&'a str, Proposed<'a>)>,
    pub(super) on_its_way: Option<RoomOnItsWay>,
}

/// kube-scheduler's candidates, or `None` (refused, explained) where room comes to the
/// preemptor without evicting anything: on its way while its class puts no price on
/// waiting (no plan can beat it), or already free.
pub(super) fn find_candidates<'a>(
    ctx: &Context,
    preemptor: Preemptor,
    pod: &Pod,
    kube: &'a crate::wire::Candidates,
    ex: &mut Vec<Explanation>,
) -> Option<Candidates<'a>> {
    let nodes = proposed(kube);
    let names: Vec<&str> = nodes.iter().map(|(n, _)| *n).collect();
    let on_its_way = ctx.view.and_then(|v| room_on_its_way::find(ctx, v, preemptor, pod, &names));
    if let Some(room) = &on_its_way {
        if WaitPrice::of_preemptor(ctx, preemptor).0 == 0.0 {
            room.refuse(ctx, preemptor, None, ex);
            return None;
        }
    }
    if let Some(node) = ctx.view.and_then(|v| room_already_free(ctx, v, preemptor, pod, &nodes)) {
        ex.push(Explanation::request(
            Verdict::Refused,
            Code::RoomOnItsWay,
            format!("{} fits on {node} as the view has it, without evicting anything: kube-scheduler has not seen that room free yet, and evicting more would free room twice", preemptor.key),
        ));
        return None;
    }
    Some(Candidates { nodes, on_its_way })
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
