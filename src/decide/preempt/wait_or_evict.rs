//! Step 4: room on its way (found in step 2) weighed against the plans (step 3): waited
//! for, unless a plan that loses, violates and spends nothing frees room sooner by
//! seconds worth more than the work it throws away (the room on its way costs nothing but
//! its wait).

use super::candidates::Candidates;
use super::plan::{cpu_seconds_said, Cost, Plan, WaitPrice};
use crate::decide::eligibility::Preemptor;
use crate::decide::{wait, Context};
use crate::explanation::Explanation;
use crate::explanation::{Code, Verdict};

/// Whether the preemptor waits for the room on its way (refused, explained) rather than
/// evict for one of `plans`.
pub(super) fn waits_for_room_on_its_way(
    ctx: &Context,
    preemptor: Preemptor,
    candidates: &Candidates,
    plans: &[Plan],
    ex: &mut Vec<Explanation>,
) -> bool {
    let Some(room) = &candidates.on_its_way else { return false };
    let (node, wait) = (&room.node, &room.wait);
    let price = WaitPrice::of_preemptor(ctx, preemptor);
    let harmless = |c: &Cost| c.lost_unasked == 0 && c.pdb_violations == 0 && c.lost_pods == 0 && c.budgets_spent == 0;
    let best = plans.iter().map(|p| &p.cost).filter(|c| harmless(c)).min();
    match best {
        Some(c) if c.priced_loss < price.of(wait.ms) => {
            ex.push(Explanation::request(
                Verdict::Preemptor,
                Code::RoomOnItsWay,
                format!(
                    "pods preempted on {node} are still terminating, {}: evicting elsewhere frees room in ~{} for {}, worth it at {}",
                    wait.describe(),
                    wait::seconds(c.wait_ms),
                    cpu_seconds_said(c.loss_per_placed),
                    price.said()
                ),
            ));
            false
        }
        _ => {
            room.refuse(ctx, preemptor, best, ex);
            true
        }
    }
}
