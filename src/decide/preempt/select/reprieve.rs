//! Step 3's reprieve (kube-scheduler's is inside `SelectVictimsOnNode` too): put
//! candidates back most valuable first while the preemptor still fits, then cost what is
//! left exactly (PDBs, Jobs, what follows, gangs) and order the victims.

use super::Asking;
use super::{gangs, jobs, room_left_over};
use crate::cluster::usage::NodeUsage;
use crate::cluster::View;
use crate::decide::eligibility::{Fate, Preemptor};
use crate::decide::fit::fits;
use crate::decide::preempt::plan::{restarts_of, run_thrown_away, Cost, Plan, Victim, WaitPrice};
use crate::decide::promised::{self, UndeletedVictim};
use crate::decide::{wait, Context};
use crate::explanation::Explanation;
use crate::explanation::{Code, Verdict};
use crate::model::{Pdb, Pod};
use crate::policy::PdbMode;
use std::collections::HashMap;

/// Puts candidates back in `order`, keeping each whose return still lets the preemptor
/// fit, then accounts PDBs and gangs exactly. `leaving`: pods already terminating that
/// `usage` counts as gone; those whose room the preemptor still needs once the victims
/// are chosen (the slowest put back first) are waited for. `None`: a strict class's PDB
/// would be exceeded.
pub(super) fn reprieve<'a>(
    asking: &Asking<'a, '_>,
    node: &crate::model::Node,
    candidates: &[Victim<'a>],
    order: &[usize],
    leaving: &[&'a Pod],
    mut usage: NodeUsage,
    ex: &mut Vec<Explanation>,
) -> Option<Plan<'a>> {
    let Asking { ctx, view, aftermath, pod, .. } = *asking;
    let node_name = node.name.as_str();
    let mut chosen = Vec::new();
    // A disruptionMode All gang comes back, or goes, as one.
    for unit in gangs::reprieve_units(candidates, order) {
        let members = || unit.iter().map(|&i| &candidates[i]);
        members().for_each(|c| usage.add(c.pod));
        if fits(pod, node, &usage).is_ok() {
            for c in members() {
                ex.push(Explanation::pod(
                    node_name,
                    &c.pod.key(),
                    Verdict::Spared,
                    Code::Reprieved,
                    "the preemptor still fits with it in place",
                ));
            }
        } else {
            members().for_each(|c| usage.remove(c.pod));
            chosen.extend(members().cloned());
        }
    }
    chosen.sort_by(|a, b| a.value_order(b));
    let mut slowest_first: Vec<(i64, &Pod)> = leaving.iter().map(|p| (wait::left(ctx, p).0, *p)).collect();
    slowest_first.sort_by_key(|(ms, p)| (std::cmp::Reverse(*ms), p.key()));
    let mut waits_for = Vec::new();
    for (_, p) in slowest_first {
        usage.add(p);
        if fits(pod, node, &usage).is_err() {
            usage.remove(p);
            waits_for.push(p);
        }
    }

    // Exact PDB accounting on the final set.
    let mut budgets = Budgets::new(ctx, view);
    let mut violations = 0;
    let mut spent = 0;
    for c in chosen.iter_mut() {
        let taken = budgets.take(c.pod);
        if let Some(pdb) = taken.spent_last {
            c.pdb_notes.push((
                Code::LastDisruption,
                format!("spends the last disruption PDB {pdb} allows: a later preemption there would violate it"),
            ));
            spent += 1;
        }
        if let Some(pdb) = taken.violated {
            let class = ctx.policy.class(c.class);
            if class.victim.pdb == PdbMode::Strict {
                ex.push(Explanation::node(
                    node_name,
                    Verdict::Dropped,
                    Code::PdbStrict,
                    format!(
                        "the preemptor needs {} evicted, which exceeds PDB {pdb} (class {} is strict)",
                        c.pod.key(),
                        class.name
                    ),
                ));
                return None;
            }
            c.pdb_notes.push((Code::PdbViolation, format!("violates PDB {pdb} (class {} is best-effort)", class.name)));
            violations += 1;
        }
    }

    jobs::charge(ctx, node_name, &mut chosen, ex)?;
    // What follows: pods that came back a moment ago are evicted twice; returning ones
    // that find no room evict in turn.
    for c in chosen.iter_mut() {
        c.recently_back = aftermath.recently_back(c.pod);
        c.interrupted_before = aftermath.interrupted_before(c.pod);
    }
    let follow_on = aftermath.charge(node, &mut chosen, ex);
    let mut cost = cost_of(ctx, &chosen);
    cost.pdb_violations = violations;
    cost.budgets_spent += spent;
    cost.re_evicted = chosen.iter().filter(|c| c.recently_back.is_some()).count() as i64;
    cost.follow_on_evictions = follow_on.evictions;
    cost.interrupt(follow_on.runtime, follow_on.evictions, follow_on.restarts);
    let survivors = gangs::charge(ctx, view, node_name, &chosen, ex);
    cost.gang_survivors = survivors.pods;
    cost.interrupt(survivors.work, survivors.pods, survivors.restarts);
    // The room left over: online pods already waiting that it places share the cost.
    let also = room_left_over::also_placed(view, node, &usage, pod);
    cost.share(1 + also.len() as i64);
    if !also.is_empty() {
        let names: Vec<String> = also.iter().take(5).map(|p| p.key()).collect();
        ex.push(Explanation::node(
            node_name,
            Verdict::Charged,
            Code::RoomLeftOver,
            format!(
                "the room left over places {} online pod(s) already waiting too, who share the cost: {}",
                also.len(),
                names.join(", ")
            ),
        ));
    }
    let how = match waits_for.len() {
        0 => "re-selected under the policy".to_string(),
        n => format!("re-selected under the policy, counting the room of {n} pod(s) already terminating"),
    };
    Some(finish(ctx, asking.preemptor, node_name, chosen, &waits_for, cost, &how, ex))
}

/// Remaining disruptions per PDB while a victim set is built.
pub(super) struct Budgets<'a> {
    view: &'a View,
    /// Earlier answers' victims not deleted yet: disruptions spent that no status shows.
    undeleted: &'a [UndeletedVictim<'a>],
    /// By the PDB's namespace and name.
    left: HashMap<(&'a str, &'a str), i32>,
}

/// What one eviction does to the PDBs covering the pod.
#[derive(Debug, Default)]
pub(super) struct Taken {
    /// The first PDB it pushes past its budget, described.
    pub(super) violated: Option<String>,
    /// The first PDB whose last allowed disruption it spends.
    pub(super) spent_last: Option<String>,
}

impl<'a> Budgets<'a> {
    pub(super) fn new(ctx: &Context<'a>, view: &'a View) -> Self {
        Budgets { view, undeleted: ctx.undeleted, left: HashMap::new() }
    }

    /// Counts `pod`'s eviction against every PDB covering it.
    pub(super) fn take(&mut self, pod: &'a Pod) -> Taken {
        let mut taken = Taken::default();
        // Chosen by an earlier answer too: its PDBs have it spent already.
        if promised::chosen_before(self.undeleted, pod) {
            return taken;
        }
        for pdb in self.view.pdbs_covering(pod) {
            // Pods already disrupted were counted by the disruption controller.
            if pdb.disrupted_pods.iter().any(|d| d == &pod.name) {
                continue;
            }
            let (view, undeleted) = (self.view, self.undeleted);
            let left = self
                .left
                .entry((&pdb.namespace, &pdb.name))
                .or_insert_with(|| view.disruptions_allowed(pdb) - spent_unseen(view, undeleted, pdb));
            *left -= 1;
            if *left == 0 && taken.spent_last.is_none() {
                taken.spent_last = Some(pdb.key());
            }
            if *left < 0 && taken.violated.is_none() {
                taken.violated = Some(self.describe(pdb));
            }
        }
        taken
    }
}

impl Budgets<'_> {
    /// A PDB pushed past its budget, and what spent the budget its status does not show.
    fn describe(&self, pdb: &Pdb) -> String {
        let gone = pdb.disruptions_allowed - self.view.disruptions_allowed(pdb);
        let promised = spent_unseen(self.view, self.undeleted, pdb);
        let mut since = Vec::new();
        if gone > 0 {
            since.push(format!("{gone} covered pod(s) evicted since"));
        }
        if promised > 0 {
            since.push(format!("{promised} chosen by an earlier answer, not yet deleted"));
        }
        match since.is_empty() {
            true => format!("{} (disruptionsAllowed {})", pdb.key(), pdb.disruptions_allowed),
            false => format!(
                "{} (disruptionsAllowed {} in status, {} now: {})",
                pdb.key(),
                pdb.disruptions_allowed,
                (pdb.disruptions_allowed - gone - promised).max(0),
                since.join(", ")
            ),
        }
    }
}

/// Disruptions of `pdb` spent on victims of earlier answers that its status does not
/// know of: still counted healthy, and not among the pods it has counted disrupted.
fn spent_unseen(view: &View, undeleted: &[UndeletedVictim], pdb: &Pdb) -> i32 {
    promised::spent(undeleted, |p| view.counts_toward_pdb(pdb, p) && !pdb.disrupted_pods.iter().any(|d| d == &p.name))
}

pub(super) fn cost_of(ctx: &Context, victims: &[Victim]) -> Cost {
    let classes = ctx.policy.classes.len() as i64;
    let mut cost = Cost { victims: victims.len() as i64, ..Cost::default() };
    let mut min_share = f64::INFINITY;
    for v in victims {
        cost.top_class_value = cost.top_class_value.max(classes - v.class as i64);
        cost.max_priority = cost.max_priority.max(v.priority as i64);
        cost.priority_sum += v.priority as i64;
        if v.gang_broken_already {
            cost.of_gangs_broken_already += 1;
        } else {
            cost.interrupt(run_thrown_away(ctx, v.class, v.pod), 1, restarts_of(ctx, v));
        }
        match v.fate {
            // A Job's pod lost fails its Job: nobody agreed to that (a `lose` class did).
            Fate::Lost if v.job_note.is_some() => {
                cost.lost_unasked += 1;
                cost.lost_pods += 1;
            }
            Fate::Lost => cost.lost_pods += 1,
            Fate::LastResort(_) => {
                cost.lost_unasked += 1;
                cost.last_resort += 1;
                cost.lost_pods += 1;
            }
            Fate::Requeued => cost.requeued += 1,
            Fate::Recreated | Fate::LeftToOwner => {}
        }
        if v.last_job_failure {
            cost.budgets_spent += 1;
        }
        min_share = min_share.min(v.tenant_share);
    }
    if min_share.is_finite() {
        cost.tenant_penalty = -(min_share * 1e6) as i64;
    }
    cost
}

/// A candidate's plan: the victims in answer order, what they cost, and how soon its room
/// is free (the victims gone, and `waits_for`, pods already terminating whose room it
/// needs), that wait priced at the preemptor class's `waitPrice`. The line naming each victim (and its requeue intent) is written only for the
/// plans kept (`settle`): kube-scheduler proposes up to a hundred candidates and evicts
/// on one.
#[allow(clippy::too_many_arguments)]
pub(super) fn finish<'a>(
    ctx: &Context,
    preemptor: Preemptor,
    node: &str,
    mut victims: Vec<Victim<'a>>,
    waits_for: &[&Pod],
    mut cost: Cost,
    how: &str,
    ex: &mut Vec<Explanation>,
) -> Plan<'a> {
    let pdb_violations = cost.pdb_violations;
    // kube-scheduler reads Pods[0] as the highest-priority victim.
    victims.sort_by(|a, b| b.pod_priority.cmp(&a.pod_priority).then(a.value_order(b)));
    let wait = wait::until_gone(ctx, victims.iter().map(|v| v.pod).chain(waits_for.iter().copied()));
    cost.price_wait(wait.ms, WaitPrice::of_preemptor(ctx, preemptor));
    ex.push(Explanation::node(
        node,
        Verdict::Candidate,
        Code::Candidate,
        format!(
            "{how}: {} victim(s); {}; room free {}; weighed {} with the wait",
            victims.len(),
            cost.describe(),
            wait.describe(),
            crate::decide::preempt::plan::cpu_seconds_said(cost.priced_loss)
        ),
    ));
    Plan { node: node.to_string(), victims, pdb_violations, cost, wait }
}
