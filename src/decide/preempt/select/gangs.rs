//! Gang rules of victim selection: a `disruptionMode: All` group goes whole or not at all,
//! and a gang left below its minimum is charged whole.

use std::collections::BTreeMap;

use crate::cluster::View;
use crate::decide::preempt::plan::{cpu_seconds, restart_cost, Victim};
use crate::decide::{promised, Context};
use crate::explanation::Explanation;
use crate::explanation::{Code, Verdict};
use crate::model::{DisruptionMode, GangInfo, GangRef};

fn all_mode<'v>(v: &'v Victim) -> Option<&'v GangInfo> {
    v.gang.as_ref().filter(|g| g.disruption == DisruptionMode::All)
}

/// Spares the members of every `disruptionMode: All` group that cannot be evicted whole
/// from this node: a preempt answer is per node, so every bound member not being deleted
/// must be a candidate here.
pub(super) fn keep_whole_groups<'a>(
    node: &str,
    candidates: Vec<Victim<'a>>,
    ex: &mut Vec<Explanation>,
) -> Vec<Victim<'a>> {
    // Per All group with members here: how many, out of how many bound members.
    let mut here: BTreeMap<GangRef, (usize, usize)> = BTreeMap::new();
    for g in candidates.iter().filter_map(all_mode) {
        // Members being deleted go by themselves: the rest must all be here.
        here.entry(g.gang.clone()).or_insert((0, g.standing(0))).0 += 1;
    }
    here.retain(|_, (n, size)| n < size);
    let (spare, keep): (Vec<_>, Vec<_>) =
        candidates.into_iter().partition(|v| all_mode(v).is_some_and(|g| here.contains_key(&g.gang)));
    for v in &spare {
        let g = &v.gang.as_ref().expect("partitioned on the gang").gang;
        let (n, size) = here[g];
        ex.push(Explanation::pod(node, &v.pod.key(), Verdict::Spared, Code::GangAllSplit, format!(
            "{g} ({}, disruptionMode All): only {n} of its {size} members could be evicted here; the group goes whole or not at all",
            g.source.name()
        )).for_gang(g.source));
    }
    keep
}

/// `order` as reprieve steps: one candidate each, except a `disruptionMode: All` group,
/// which is one step at its first member's place.
pub(super) fn reprieve_units(candidates: &[Victim], order: &[usize]) -> Vec<Vec<usize>> {
    let mut units = Vec::with_capacity(order.len());
    let mut seen: Vec<&GangRef> = Vec::new();
    for &i in order {
        match all_mode(&candidates[i]) {
            None => units.push(vec![i]),
            Some(g) if seen.contains(&&g.gang) => {}
            Some(g) => {
                seen.push(&g.gang);
                units.push(
                    order
                        .iter()
                        .copied()
                        .filter(|&j| all_mode(&candidates[j]).is_some_and(|o| o.gang == g.gang))
                        .collect(),
                );
            }
        }
    }
    units
}

/// What breaking gangs costs beyond the victims themselves: the members they keep on
/// other nodes run on but cannot progress, so their run is thrown away too and each of
/// them is interrupted (left to their owner: a preempt answer names victims on one node).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Survivors {
    pub pods: i64,
    /// Milli-CPU-seconds they have run.
    pub work: i64,
    /// Their restarts, as `victim.restartCost` prices them.
    pub restarts: i64,
}

/// Charges the gangs `chosen` leaves below their minimum with their survivors, and
/// explains each gang it touches.
pub(super) fn charge(
    ctx: &Context,
    view: &View,
    node: &str,
    chosen: &[Victim],
    ex: &mut Vec<Explanation>,
) -> Survivors {
    let mut evicted: BTreeMap<&GangRef, (Vec<&Victim>, &GangInfo)> = BTreeMap::new();
    for c in chosen {
        if let Some(g) = &c.gang {
            evicted.entry(&g.gang).or_insert((Vec::new(), g)).0.push(c);
        }
    }
    let mut out = Survivors::default();
    for (members, g) in evicted.into_values() {
        // Members that go whatever is chosen here: being deleted, or earlier answers'.
        let promised = promised::gang_members(ctx.undeleted, view, &g.gang);
        if g.broken_already(promised.len()) {
            ex.push(
                Explanation::node(
                    node,
                    Verdict::Charged,
                    Code::GangBrokenAlready,
                    format!(
                        "{} is below its minimum already ({} member(s) being deleted, {} chosen by an earlier answer): its survivors' run was lost when it broke; evicting {} more of them throws away nothing more",
                        g.describe(g.standing(promised.len())),
                        g.leaving,
                        promised.len(),
                        members.len()
                    ),
                )
                .for_gang(g.gang.source),
            );
            continue;
        }
        let is_promised = |m: &&Victim| promised.iter().any(|p| p.uid == m.pod.uid);
        let (members, promised_too): (Vec<&Victim>, Vec<&Victim>) = members.into_iter().partition(|m| !is_promised(m));
        let n = members.len();
        let remaining = g.standing(promised.len()).saturating_sub(n);
        if n == 0 || remaining >= g.min {
            let detail = match n {
                0 => format!("{} member(s) of {} were chosen by an earlier answer too", promised_too.len(), g.gang),
                _ => format!("evicting {n} surplus member(s) of {}", g.describe(remaining)),
            };
            ex.push(Explanation::node(node, Verdict::Charged, Code::GangSurplus, detail).for_gang(g.gang.source));
            continue;
        }
        let promised_run: i64 = promised.iter().map(|p| cpu_seconds(ctx.now, p)).sum();
        let promised_cpu: i64 = promised.iter().map(|p| p.requests.milli_cpu.max(1)).sum();
        let whole = view.gang_work(&g.gang, ctx.now);
        let run: i64 = members.iter().map(|m| cpu_seconds(ctx.now, m.pod)).sum::<i64>() + promised_run;
        let cpu: i64 = members.iter().map(|m| m.pod.requests.milli_cpu.max(1)).sum::<i64>() + promised_cpu;
        // Each survivor's restart at their average CPU (the view sums the gang, not each).
        let each = (whole.milli_cpu - cpu).max(0) / (remaining as i64).max(1);
        let survivors = Survivors {
            pods: remaining as i64,
            work: (whole.run - run).max(0),
            restarts: restart_cost(ctx, members[0].class, each) * remaining as i64,
        };
        out.pods += survivors.pods;
        out.work += survivors.work;
        out.restarts += survivors.restarts;
        let detail = if g.disruption == DisruptionMode::All {
            format!("evicts {} whole (disruptionMode All)", g.describe(remaining))
        } else {
            format!(
                "breaks {}: evicting {n} of {} member(s); the {remaining} left elsewhere cannot progress: their {} CPU-s of run and their restarts are charged",
                g.describe(remaining),
                g.size,
                survivors.work / 1000
            )
        };
        ex.push(Explanation::node(node, Verdict::Charged, Code::GangBroken, detail).for_gang(g.gang.source));
    }
    out
}
