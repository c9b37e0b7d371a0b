//! Step 5: rank the plans by cost and keep `maxCandidates`, their victims explained.

use super::plan::{Cost, Plan};
use super::reprieve;
use crate::decide::eligibility::Preemptor;
use crate::decide::wait::Wait;
use crate::decide::{wait, Context, Explanation};
use crate::explanation::{Code, Verdict};
use crate::model::RequeueIntent;
use crate::wire;
use crate::wire::PreemptionResult;
use std::collections::{BTreeMap, HashMap};

/// Keeps the best `maxCandidates` plans, cheapest first (`Cost`: a broken gang is
/// charged its survivors, no tier of its own).
pub(super) fn rank(
    ctx: &Context,
    preemptor: Preemptor,
    mut plans: Vec<Plan>,
    ex: &mut Vec<Explanation>,
) -> (PreemptionResult, Vec<RequeueIntent>, BTreeMap<String, Wait>) {
    let k = ctx.policy.max_candidates;
    compare_waits(ctx, preemptor, plans.iter_mut());
    plans.sort_by(|a, b| a.cost.cmp(&b.cost).then_with(|| a.node.cmp(&b.node)));
    let mut result = PreemptionResult::default();
    let mut requeues = Vec::new();
    let mut waits = BTreeMap::new();
    let best = plans.first().map(|p| p.node.clone());
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
                    best.as_deref().unwrap_or("-")
                ),
            ));
            continue;
        }
        if i >= k {
            ex.push(Explanation::node(
                &p.node,
                Verdict::Dropped,
                Code::Outranked,
                format!("a cheaper candidate ({}) was chosen; maxCandidates is {k}", best.as_deref().unwrap_or("-")),
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

/// Sets each plan's `later`: how many factors of the preemptor class's `waitTolerance` its
/// room comes free later than the soonest plan's among those that lose, violate, take from
/// a class and spend as little as it does (a plan is only ever weighed against the plans
/// it could lose to on time: the soonest of all may violate a PDB).
pub(super) fn compare_waits<'p, 'a: 'p>(
    ctx: &Context,
    preemptor: Preemptor,
    plans: impl Iterator<Item = &'p mut Plan<'a>>,
) {
    let tolerance = ctx.policy.class(preemptor.class).wait_tolerance;
    let plans: Vec<&mut Plan> = plans.collect();
    let ahead = |c: &Cost| (c.lost_unasked, c.pdb_violations, c.lost_pods, c.top_class_value, c.budgets_spent);
    let soonest: HashMap<_, i64> = plans.iter().fold(HashMap::new(), |mut m, p| {
        let w = m.entry(ahead(&p.cost)).or_insert(p.cost.wait_ms);
        *w = (*w).min(p.cost.wait_ms);
        m
    });
    for p in plans {
        p.cost.later = wait::later_by(p.cost.wait_ms, soonest[&ahead(&p.cost)], tolerance);
    }
}
