//! Step 3: re-select the victims on a node the view knows: every pod the policy lets us
//! evict, the room nominated pods hold, fair sharing between tenants, gangs kept whole.

use super::reprieve::{reprieve, Budgets, Taken};
use super::{gangs, jobs, Asking};
use crate::cluster::usage::NodeUsage;
use crate::decide::fit::fits;
use crate::decide::preempt::held::held_on;
use crate::decide::preempt::plan::{victim, Plan, Victim};
use crate::decide::{eligibility, wait};
use crate::explanation::Explanation;
use crate::explanation::{Code, Verdict};
use crate::model::Pod;

/// Re-selection on a node the view knows. If the view says the pod already fits, the
/// view and kube-scheduler's cache disagree (one of them is stale): never answer an
/// empty victim list for a candidate that had victims (v1.35 rejects it), drop the node.
pub(super) fn reselect_or_drop<'a>(
    asking: &Asking<'a, '_>,
    node: &str,
    proposed: &[String],
    ex: &mut Vec<Explanation>,
) -> Option<Plan<'a>> {
    match reselect(asking, node, proposed, ex) {
        Reselected::Plan(p) => Some(*p),
        Reselected::Vetoed => None,
        Reselected::NoVictimsNeeded => {
            ex.push(Explanation::node(
                node,
                Verdict::Dropped,
                Code::ViewDisagrees,
                "the view says the pod fits without evicting anything, kube-scheduler says not: one of them is stale",
            ));
            None
        }
    }
}

enum Reselected<'a> {
    Plan(Box<Plan<'a>>),
    Vetoed,
    NoVictimsNeeded,
}

/// Full re-selection on a node the view knows.
fn reselect<'a>(
    asking: &Asking<'a, '_>,
    node_name: &str,
    proposed: &[String],
    ex: &mut Vec<Explanation>,
) -> Reselected<'a> {
    let Asking { ctx, view, pod, preemptor, .. } = *asking;
    let node = view.node(node_name).expect("caller checked the node is in the view");
    let mut pods: Vec<&Pod> = view.pods_on(node_name).iter().map(|p| &**p).filter(|p| p.uid != pod.uid).collect();
    // The view keeps a node's pods in arrival order: explain them in name order.
    pods.sort_unstable_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let mut usage = NodeUsage::of(pods.iter().copied());
    let held: Vec<&Pod> = held_on(ctx, view, node_name, preemptor.priority, &pod.uid).collect();
    for h in &held {
        usage.add(h);
    }
    if !held.is_empty() {
        let names: Vec<String> = held.iter().take(5).map(|p| p.key()).collect();
        ex.push(Explanation::node(
            node_name,
            Verdict::Charged,
            Code::NominatedRoom,
            format!(
                "{} pending pod(s) nominated here with priority at least {} hold their room: {}",
                held.len(),
                preemptor.priority,
                names.join(", ")
            ),
        ));
    }
    if fits(pod, node, &usage).is_ok() {
        return Reselected::NoVictimsNeeded;
    }
    let mut candidates: Vec<Victim> = Vec::new();
    for p in &pods {
        if ctx.priority_of(p) >= preemptor.priority {
            continue; // not a potential victim for kube-scheduler either
        }
        match eligibility::check(ctx, preemptor, p) {
            Ok(eligible) => candidates.push(victim(ctx, p, eligible, Some(view), proposed.contains(&p.uid))),
            Err(prot) => ex.push(prot.explain(node_name, &p.key(), Verdict::Spared)),
        }
    }
    if ctx.policy.tenants.fair_sharing && ctx.policy.class(preemptor.class).victim.allowed {
        candidates = fair_share(asking, node, &usage, candidates, ex);
    }
    let candidates = gangs::keep_whole_groups(node_name, candidates, ex);
    for c in &candidates {
        usage.remove(c.pod);
    }
    // Pods already terminating free their room by themselves, later or sooner: a plan may
    // count on it, and waits for them (`leaving`), or not (the pod fits with them there).
    let leaving: Vec<&Pod> = pods.iter().copied().filter(|p| p.deletion_time.is_some()).collect();
    let mut usage_without_leaving = usage.clone();
    leaving.iter().for_each(|p| usage_without_leaving.remove(p));
    let fits_with_leaving = fits(pod, node, &usage);
    let fits_without_leaving = !leaving.is_empty() && fits(pod, node, &usage_without_leaving).is_ok();
    if let (Err(why), false) = (&fits_with_leaving, fits_without_leaving) {
        ex.push(Explanation::node(
            node_name,
            Verdict::Dropped,
            Code::DoesNotFit,
            format!("does not fit even after evicting all {} evictable pod(s): {why}", candidates.len()),
        ));
        return Reselected::Vetoed;
    }

    // Victims of last resort (bare pods requeue cannot bring back) are tried for reprieve
    // before any other, in every order: one is kept a victim only where the preemptor does
    // not fit with it back and every other candidate gone. Then, like kube-scheduler: find
    // which candidates would violate a PDB if all were evicted (most valuable consume the
    // budget first), and try to reprieve those, then the rest most valuable first. Two
    // more orders, where they differ, and the cheaper victim set is kept: gang members
    // first (a broken gang throws away its survivors' run too), and smaller pods first
    // (fewer, bigger victims: each restart costs), and those that take longest to stop
    // first (the room comes free sooner: the fastest to stop are the victims), and members
    // of gangs broken already last (they are the victims: nothing more is lost).
    let mut candidates = candidates;
    candidates.sort_by(|a, b| a.value_order(b));
    let mut budgets = Budgets::new(ctx, view);
    let taken: Vec<Taken> = candidates.iter().map(|c| budgets.take(c.pod)).collect();
    let last_resort = |i: usize| candidates[i].fate.is_last_resort();
    let violating = |i: usize| taken[i].violated.is_some();
    // A pod whose eviction fails its Job is lost work: tried for reprieve right after
    // the PDB-violating ones; then those that would spend a last budget.
    let jobs = jobs::effects(ctx, &candidates);
    let spends = |i: usize| taken[i].spent_last.is_some() || jobs[i].last;
    let mut value_first: Vec<usize> = (0..candidates.len()).collect();
    // Losses nobody agreed to (last resort, a Job failed) are tried first, then PDBs.
    let lost = |i: usize| last_resort(i) || jobs[i].fails;
    value_first.sort_by_key(|&i| (!lost(i), !violating(i), !spends(i), i));
    let mut gang_first = value_first.clone();
    gang_first.sort_by_key(|&i| (!lost(i), candidates[i].gang.is_none(), !violating(i), !spends(i), i));
    let mut small_first = value_first.clone();
    let cpu = |i: usize| candidates[i].pod.requests.milli_cpu;
    small_first.sort_by_key(|&i| (!lost(i), !violating(i), !spends(i), candidates[i].class, cpu(i), i));
    let mut slow_first = value_first.clone();
    slow_first.sort_by_key(|&i| (!lost(i), !violating(i), !spends(i), std::cmp::Reverse(candidates[i].left_ms), i));
    // Members of gangs below their minimum already last (their run is lost already).
    let mut broken_last = value_first.clone();
    broken_last.sort_by_key(|&i| (!lost(i), !violating(i), !spends(i), !candidates[i].gang_broken_already, i));
    let mut orders = vec![value_first];
    for order in [gang_first, small_first, slow_first, broken_last] {
        if !orders.contains(&order) {
            orders.push(order);
        }
    }
    let mut plans: Vec<(Plan, Vec<Explanation>)> = Vec::new();
    let mut vetoed: Option<Vec<Explanation>> = None;
    let ways =
        [(fits_with_leaving.is_ok(), &[][..], &usage), (fits_without_leaving, &leaving[..], &usage_without_leaving)];
    for (_, leaving, usage) in ways.into_iter().filter(|(fits, ..)| *fits) {
        for order in &orders {
            let mut notes = Vec::new();
            match reprieve(asking, node, &candidates, order, leaving, usage.clone(), &mut notes) {
                // Counting on terminating pods alone is no preemption: an answer names victims.
                Some(plan) if plan.victims.is_empty() => {}
                Some(plan) => plans.push((plan, notes)),
                None => {
                    vetoed.get_or_insert(notes);
                }
            }
        }
    }
    let best = plans.into_iter().min_by(|(a, _), (b, _)| a.cost.cmp(&b.cost));
    match (best, vetoed) {
        (Some((plan, notes)), _) => {
            ex.extend(notes);
            Reselected::Plan(Box::new(plan))
        }
        (None, Some(notes)) => {
            ex.extend(notes);
            Reselected::Vetoed
        }
        (None, None) => {
            let wait = wait::until_gone(ctx, leaving.iter().copied());
            ex.push(Explanation::node(
                node_name,
                Verdict::Dropped,
                Code::RoomOnItsWay,
                format!(
                    "fits once the {} pod(s) already terminating here are gone, {}, evicting nothing more",
                    leaving.len(),
                    wait.describe()
                ),
            ));
            Reselected::Vetoed
        }
    }
}

/// Between offline tenants (the preemptor's class is itself evictable), Kueue's fair
/// sharing: first only victims whose tenant would still hold at least the preemptor
/// tenant's share after the eviction (LessThanOrEqualToFinalShare); if that is not
/// enough room, also those whose tenant holds more than it before the eviction
/// (LessThanInitialShare). A tenant's own pods are always candidates.
fn fair_share<'a>(
    asking: &Asking,
    node: &crate::model::Node,
    usage: &NodeUsage,
    candidates: Vec<Victim<'a>>,
    ex: &mut Vec<Explanation>,
) -> Vec<Victim<'a>> {
    let Asking { ctx, view, pod, .. } = *asking;
    let tenants = &ctx.policy.tenants;
    let mine = tenants.tenant_of(pod);
    let mine_after = view.tenant_share(&mine) + view.share_of(&pod.requests, tenants.weight(&mine));
    let allowed = |c: &Victim, final_share: bool| {
        let theirs = tenants.tenant_of(c.pod);
        if theirs == mine {
            return true;
        }
        if final_share {
            mine_after <= c.tenant_share - view.share_of(&c.pod.requests, tenants.weight(&theirs))
        } else {
            mine_after < c.tenant_share
        }
    };
    let fits_without = |set: &[&Victim]| {
        let mut u = usage.clone();
        for c in set {
            u.remove(c.pod);
        }
        fits(pod, node, &u).is_ok()
    };
    let strict: Vec<&Victim> = candidates.iter().filter(|c| allowed(c, true)).collect();
    let final_share = fits_without(&strict);
    let (keep, spare): (Vec<_>, Vec<_>) = candidates.into_iter().partition(|c| allowed(c, final_share));
    for c in &spare {
        ex.push(Explanation::pod(
            &node.name,
            &c.pod.key(),
            Verdict::Spared,
            Code::FairShare,
            format!(
                "tenant {} holds a share of {:.3}, not above tenant {mine}'s {:.3} after admission",
                tenants.tenant_of(c.pod),
                c.tenant_share,
                mine_after
            ),
        ));
    }
    keep
}
