//! Step 5: rank the plans by cost and keep `maxCandidates`, their victims explained.

use super::plan::{Plan, WaitPrice};
use super::reprieve;
use crate::decide::eligibility::Preemptor;
use crate::decide::wait::Wait;
use crate::decide::{Context, Explanation};
use crate::explanation::{Code, Verdict};
use crate::model::RequeueIntent;
use crate::wire;
use crate::wire::PreemptionResult;
use std::collections::BTreeMap;

/// Keeps the best `maxCandidates` plans, cheapest first (`Cost`: the wait priced at the
/// preemptor class's `waitPrice`; a broken gang charged its survivors, no tier of its
/// own). An outranked candidate whose room is free sooner or later says what the trade
/// was, in the policy's units.
pub(super) fn rank(
    ctx: &Context,
    preemptor: Preemptor,
    mut plans: Vec<Plan>,
    ex: &mut Vec<Explanation>,
) -> (PreemptionResult, Vec<RequeueIntent>, BTreeMap<String, Wait>) {
    let k = ctx.policy.max_candidates;
    let price = WaitPrice::of_preemptor(ctx, preemptor);
    plans.sort_by(|a, b| a.cost.cmp(&b.cost).then_with(|| a.node.cmp(&b.node)));
    let mut result = PreemptionResult::default();
    let mut requeues = Vec::new();
    let mut waits = BTreeMap::new();
    let best = plans.first().map(|p| (p.node.clone(), p.cost.clone()));
    let best_node = best.as_ref().map_or("-", |(n, _)| n.as_str()).to_string();
    let fewest_lost = plans.first().map_or(0, |p| p.cost.lost_unasked);
    for (i, p) in plans.into_iter().enumerate() {
        // kube-scheduler picks among the returned nodes by its own rules, blind to what
        // cannot come back: a plan losing more than the best (victims of last resort,
        // Jobs failed) is not offered at all.
        if i < k && p.cost.lost_unasked > fewest_lost {
            ex.push(Explanation::node(
                &p.node,
                Verdict::Dropped,
                Code::Outranked,
                format!(
                    "loses {} victim(s) nobody agreed to lose ({} of last resort: bare, cannot be requeued; the rest fail their Job), {} loses {fewest_lost}",
                    p.cost.lost_unasked,
                    p.cost.last_resort,
                    best_node
                ),
            ));
            continue;
        }
        if i >= k {
            let trade = best.as_ref().and_then(|(_, b)| price.trade(b, &p.cost));
            ex.push(Explanation::node(
                &p.node,
                Verdict::Dropped,
                Code::Outranked,
                match trade {
                    Some(t) => format!("against the chosen candidate ({best_node}): {t}; maxCandidates is {k}"),
                    None => format!("a cheaper candidate ({best_node}) was chosen; maxCandidates is {k}"),
                },
            ));
            continue;
        }
        ex.push(Explanation::node(
            &p.node,
            Verdict::Kept,
            Code::Selected,
            format!("rank {} of the candidates; room free {}", i + 1, p.wait.describe()),
        ));
        requeues.extend(reprieve::settle(ctx, preemptor, &p, ex));
        waits.insert(p.node.clone(), p.wait.clone());
        result.node_name_to_meta_victims.insert(
            p.node,
            wire::MetaVictims {
                pods: p.victims.iter().map(|v| wire::MetaPod { uid: v.pod.uid.clone() }).collect(),
                num_pdb_violations: p.pdb_violations,
            },
        );
    }
    (result, requeues, waits)
}
