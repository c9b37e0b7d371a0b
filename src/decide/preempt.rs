//! preempt: the policy's answer to kube-scheduler's preemption, in five steps read as
//! kube-scheduler's `Evaluator.Preempt` reads: one comment and one call each, a file (or
//! a folder) per step, each calling only the steps before it.
//!
//! The steps: `refuse.rs`, `candidates.rs`, `select/` (victims re-selected where the view
//! knows the node, kube-scheduler's judged where it does not; the reprieve and the cost),
//! `wait_or_evict.rs`, `rank.rs`. What several steps read is no step: `plan.rs` (the
//! plans' vocabulary: `Victim`, `Plan`, `Cost`, `WaitPrice`), `proposed.rs`
//! (kube-scheduler's victims in either form), `held.rs` (room nominated and promised
//! pods hold), `room_on_its_way.rs` (room evicted pods free as they go).

use crate::explanation::Explanation;
use crate::wire::{PreemptArgs, PreemptionResult};
use std::collections::BTreeMap;

mod candidates;
mod held;
mod plan;
mod proposed;
mod rank;
mod refuse;
mod room_on_its_way;
mod select;
mod wait_or_evict;

use self::candidates::find_candidates;
use self::rank::rank;
use self::refuse::refuse;
use self::select::select_victims;
use self::wait_or_evict::waits_for_room_on_its_way;
use super::promised::{self, PromisedRoom};
use super::wait::Wait;
use super::Context;
use crate::model::RequeueIntent;

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
    pub promised: Vec<PromisedRoom>,
    /// How soon the room is free on each returned node.
    pub waits: BTreeMap<String, Wait>,
}

/// The policy's preemption for `args`: every node kube-scheduler proposed, its victims
/// chosen again under the policy, the cheapest `maxCandidates` returned.
pub fn preempt(args: &PreemptArgs, ctx: &Context) -> PreemptOutcome {
    let pod = &args.pod;
    // Victims earlier answers chose still count in their budgets until they are deleted.
    let undeleted = promised::undeleted_victims(ctx.promised, ctx.view, &pod.uid);
    let ctx = &Context { undeleted: &undeleted, ..*ctx };
    let key = pod.key();
    let mut ex = Vec::new();
    let refused = |explanations, view_behind| PreemptOutcome { explanations, view_behind, ..PreemptOutcome::default() };

    // 1. Refuse a pod that may not preempt (its preemptionPolicy, its class, no usable view).
    let Some(preemptor) = refuse(ctx, pod, &key, &mut ex) else { return refused(ex, false) };

    // 2. Find the candidates kube-scheduler proposed, and refuse where room comes without
    //    evicting anything (already free, or on its way at no price for waiting).
    let Some(candidates) = find_candidates(ctx, preemptor, pod, &args.candidates, &mut ex) else {
        return refused(ex, false);
    };

    // 3. Select the victims on each candidate under the policy, reprieved and costed.
    let selected = select_victims(ctx, preemptor, pod, &candidates, &mut ex);

    // 4. Wait for room on its way, unless a harmless plan frees room sooner by more than
    //    it throws away.
    if waits_for_room_on_its_way(ctx, preemptor, &candidates, &selected.plans, &mut ex) {
        return refused(ex, selected.view_behind);
    }

    // 5. Rank the plans, keep `maxCandidates`, explain their victims and promise their room.
    let ranked = rank(ctx, preemptor, pod, selected.plans, &mut ex);
    PreemptOutcome {
        result: ranked.result,
        explanations: ex,
        requeues: ranked.requeues,
        view_behind: selected.view_behind,
        promised: ranked.promised,
        waits: ranked.waits,
    }
}
