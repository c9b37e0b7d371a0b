//! Step 5: rank the plans by cost and keep `maxCandidates`.

use super::*;

/// Keeps the best `k` plans; never a gang-breaking plan while another avoids it.
pub(super) fn rank(
    mut plans: Vec<Plan>,
    k: usize,
    ex: &mut Vec<Explanation>,
) -> (PreemptionResult, Vec<RequeueIntent>) {
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
