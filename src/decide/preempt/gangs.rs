//! Gang rules of victim selection: a `disruptionMode: All` group goes whole or not at all,
//! and a gang left below its minimum is charged whole.

use std::collections::BTreeMap;

use super::Victim;
use crate::decide::Explanation;
use crate::explanation::{Code, Verdict};
use crate::model::{DisruptionMode, GangInfo, GangRef};

fn all_mode<'v>(v: &'v Victim) -> Option<&'v GangInfo> {
    v.gang.as_ref().filter(|g| g.disruption == DisruptionMode::All)
}

/// Spares the members of every `disruptionMode: All` group that cannot be evicted whole
/// from this node: a preempt answer is per node, so every bound member must be a
/// candidate here.
pub(super) fn keep_whole_groups<'a>(
    node: &str,
    candidates: Vec<Victim<'a>>,
    ex: &mut Vec<Explanation>,
) -> Vec<Victim<'a>> {
    // Per All group with members here: how many, out of how many bound members.
    let mut here: BTreeMap<GangRef, (usize, usize)> = BTreeMap::new();
    for g in candidates.iter().filter_map(all_mode) {
        here.entry(g.gang.clone()).or_insert((0, g.size)).0 += 1;
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

/// Members of gangs `chosen` leaves below their minimum (each such gang counts whole).
pub(super) fn charge(node: &str, chosen: &[Victim], ex: &mut Vec<Explanation>) -> i64 {
    let mut evicted: BTreeMap<&GangRef, (usize, &GangInfo)> = BTreeMap::new();
    for g in chosen.iter().filter_map(|c| c.gang.as_ref()) {
        evicted.entry(&g.gang).or_insert((0, g)).0 += 1;
    }
    let mut broken = 0;
    for (n, g) in evicted.into_values() {
        let remaining = g.size.saturating_sub(n);
        if remaining >= g.min {
            ex.push(
                Explanation::node(
                    node,
                    Verdict::Charged,
                    Code::GangSurplus,
                    format!("evicting {n} surplus member(s) of {}", g.describe(remaining)),
                )
                .for_gang(g.gang.source),
            );
            continue;
        }
        broken += g.size as i64;
        let detail = if g.disruption == DisruptionMode::All {
            format!("evicts {} whole (disruptionMode All): the whole gang is charged", g.describe(remaining))
        } else {
            format!("breaks {}: evicting {n} of {} member(s), the whole gang is charged", g.describe(remaining), g.size)
        };
        ex.push(Explanation::node(node, Verdict::Charged, Code::GangBroken, detail).for_gang(g.gang.source));
    }
    broken
}
