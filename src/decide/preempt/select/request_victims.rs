//! Step 3 where the view lacks the node: kube-scheduler's victims judged as they are (all allowed,
//! or the node is dropped), and UIDs the view places elsewhere noted.

use super::jobs;
use super::reprieve::{cost_of, finish};
use crate::cluster::View;
use crate::decide::eligibility::Preemptor;
use crate::decide::preempt::plan::{victim, Plan};
use crate::decide::{eligibility, Context};
use crate::explanation::Explanation;
use crate::explanation::{Code, Verdict};
use crate::model::Pod;
use crate::policy::PdbMode;
use crate::wire::{VictimUids, Victims};

pub(super) fn note_misplaced_uids(view: &View, node: &str, v: &VictimUids, ex: &mut Vec<Explanation>) {
    for uid in &v.uids {
        match view.pod_by_uid(uid) {
            None => ex.push(Explanation::pod(
                node,
                uid,
                Verdict::Ignored,
                Code::UnknownUid,
                "kube-scheduler proposed a pod the view does not know; it will not be returned",
            )),
            Some(p) if p.node_name.as_deref() != Some(node) => ex.push(Explanation::pod(
                node,
                &p.key(),
                Verdict::Ignored,
                Code::VictimElsewhere,
                format!(
                    "kube-scheduler proposed it here, the view has it on {}",
                    p.node_name.as_deref().unwrap_or("no node")
                ),
            )),
            Some(_) => {}
        }
    }
}

/// Without node state: keep kube-scheduler's victims only if every one is allowed. A
/// victim the view knows is judged by the view's data (it may be terminating, or bound
/// elsewhere, since kube-scheduler looked).
pub(super) fn judge_request_victims<'a>(
    ctx: &Context<'a>,
    preemptor: Preemptor,
    node: &str,
    v: &'a Victims,
    ex: &mut Vec<Explanation>,
) -> Option<Plan<'a>> {
    let mut victims = Vec::new();
    for sent in &v.pods {
        let pod: &Pod = match ctx.view.and_then(|view| view.pod_by_uid(&sent.uid)) {
            Some(known) => known,
            None => sent,
        };
        if pod.node_name.as_deref() != Some(node) {
            ex.push(Explanation::node(
                node,
                Verdict::Dropped,
                Code::VictimElsewhere,
                format!(
                    "proposed victim {} is on {} in the cluster view, not here",
                    pod.key(),
                    pod.node_name.as_deref().unwrap_or("no node")
                ),
            ));
            return None;
        }
        let eligible = match eligibility::check(ctx, preemptor, pod) {
            Ok(e) => e,
            Err(p) => {
                ex.push(p.explain(node, &pod.key(), Verdict::Protected));
                ex.push(Explanation::node(
                    node,
                    Verdict::Dropped,
                    p.code,
                    format!("proposed victim {} is protected: {}", pod.key(), p.detail),
                ));
                return None;
            }
        };
        if let Some(g) = ctx.policy.gangs.gang_of(pod) {
            ex.push(Explanation::node(node, Verdict::Dropped, Code::GangUnknown,
                format!("proposed victim {} belongs to {g} ({}); without a cluster view we cannot tell whether evicting it breaks the gang", pod.key(), g.source.name())).for_gang(g.source));
            return None;
        }
        victims.push(victim(ctx, pod, eligible, None, true));
    }
    if v.num_pdb_violations > 0 {
        if let Some(strict) = victims.iter().find(|x| ctx.policy.class(x.class).victim.pdb == PdbMode::Strict) {
            ex.push(Explanation::node(node, Verdict::Dropped, Code::PdbStrict,
                format!("kube-scheduler counts {} PDB violation(s) and class {} is strict; without PDB data we cannot tell which victim violates",
                    v.num_pdb_violations, ctx.policy.class(strict.class).name)));
            return None;
        }
    }
    victims.sort_by(|a, b| a.value_order(b));
    jobs::charge(ctx, node, &mut victims, ex)?;
    let mut cost = cost_of(ctx, &victims);
    cost.pdb_violations = v.num_pdb_violations;
    Some(finish(ctx, preemptor, node, victims, &[], cost, "kube's victims, all allowed", ex))
}
