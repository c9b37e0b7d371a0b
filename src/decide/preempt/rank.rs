//! Step 5: rank the plans by cost and keep `maxCandidates`, their victims explained and
//! their room promised; the one place the answer is built.

use super::plan::{worse_ahead_of_price, Plan, WaitPrice};
use crate::decide::eligibility::{Fate, Preemptor};
use crate::decide::promised::PromisedRoom;
use crate::decide::wait::Wait;
use crate::decide::Context;
use crate::explanation::Explanation;
use crate::explanation::{Code, Verdict};
use crate::model::{Pod, RequeueIntent};
use crate::wire;
use crate::wire::PreemptionResult;
use std::collections::BTreeMap;

/// What step 5 hands back: the answer, the requeue intents of its bare victims, how soon
/// each returned node's room is free, and the room promised to the preemptor there.
pub(super) struct Ranked {
    pub(super) result: PreemptionResult,
    pub(super) requeues: Vec<RequeueIntent>,
    pub(super) waits: BTreeMap<String, Wait>,
    pub(super) promised: Vec<PromisedRoom>,
}

/// Keeps the best `maxCandidates` plans, cheapest first (`Cost`: the wait priced at the
/// preemptor class's `waitPrice`; a broken gang charged its survivors, no tier of its
/// own). An outranked candidate whose room is free sooner or later says what the trade
/// was, in the policy's units.
pub(super) fn rank(
    ctx: &Context,
    preemptor: Preemptor,
    pod: &Pod,
    mut plans: Vec<Plan>,
    ex: &mut Vec<Explanation>,
) -> Ranked {
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
            let ahead = best.as_ref().and_then(|(_, b)| worse_ahead_of_price(b, &p.cost));
            ex.push(Explanation::node(
                &p.node,
                Verdict::Dropped,
                Code::Outranked,
                match (trade, ahead) {
                    (Some(t), _) => format!("against the chosen candidate ({best_node}): {t}; maxCandidates is {k}"),
                    (None, Some(a)) => {
                        format!("ranked after the chosen candidate ({best_node}): {a}; maxCandidates is {k}")
                    }
                    (None, None) => format!("a cheaper candidate ({best_node}) was chosen; maxCandidates is {k}"),
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
        requeues.extend(settle(ctx, preemptor, &p, ex));
        waits.insert(p.node.clone(), p.wait.clone());
        result.node_name_to_meta_victims.insert(
            p.node,
            wire::MetaVictims {
                pods: p.victims.iter().map(|v| wire::MetaPod { uid: v.pod.uid.clone() }).collect(),
                num_pdb_violations: p.pdb_violations,
            },
        );
    }
    let chosen = result.node_name_to_meta_victims.iter();
    let promised = PromisedRoom::of(
        pod,
        chosen.map(|(n, v)| (n.clone(), v.pods.iter().map(|p| p.uid.clone()).collect())),
        ctx.now,
    );
    Ranked { result, requeues, waits, promised }
}

/// A kept plan's victims, each explained, and the requeue intents of its bare ones.
fn settle(ctx: &Context, preemptor: Preemptor, plan: &Plan, ex: &mut Vec<Explanation>) -> Vec<RequeueIntent> {
    let node = plan.node.as_str();
    let mut requeues = Vec::new();
    for v in &plan.victims {
        for (code, detail) in &v.pdb_notes {
            ex.push(Explanation::pod(node, &v.pod.key(), Verdict::Victim, *code, detail.clone()));
        }
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
            Fate::LastResort(reason) => {
                let why_not = reason.sentence(v.pod, ctx.policy.class(v.class));
                (
                    Code::LastResort,
                    format!("{why}; bare pod: {why_not}; chosen as a last resort: no other victims place the pod; lost"),
                )
            }
            Fate::Lost => match &v.job_note {
                Some(note) => (Code::Lost, format!("{why}; lost work: {note}")),
                None => (Code::Lost, format!("{why}; bare pod: lost (class {class} is bare: lose)")),
            },
            Fate::LeftToOwner => match &v.pod.owner {
                Some(o) => (Code::LeftToOwner, format!("{why}; owned by {} {} (not a controller): not requeued, left to its owner", o.kind, o.name)),
                None => (Code::LeftToOwner, format!("{why}; opted out of requeue ({}: never): not copied, left to whoever created it", crate::model::marks::OPT_OUT)),
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
        let line = Explanation::pod(node, &v.pod.key(), Verdict::Victim, code, detail);
        ex.push(match v.fate {
            Fate::LastResort(reason) => line.lost_for(reason.into()),
            _ => line,
        });
    }
    requeues
}
