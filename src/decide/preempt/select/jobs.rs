//! Job victims in a victim set: the failures of each Job's pods in one answer are counted
//! together, so a Job at its last allowed failure loses at most what its limit allows.

use crate::decide::eligibility::Fate;
use crate::decide::jobs::JobLedger;
use crate::decide::preempt::plan::Victim;
use crate::decide::Context;
use crate::explanation::Explanation;
use crate::explanation::{Code, Verdict};
use crate::policy::JobVictims;

/// Charges the Job pods of `chosen` (most valuable first) to their Jobs: a pod whose
/// eviction fails its Job is lost work. `None`: a `jobs: protect` class would lose a Job,
/// so the node is dropped.
pub(super) fn charge(ctx: &Context, node: &str, chosen: &mut [Victim], ex: &mut Vec<Explanation>) -> Option<()> {
    let mut ledger = JobLedger::new(ctx.undeleted);
    for c in chosen.iter_mut() {
        let Some(charge) = ledger.take(ctx.view, c.pod) else { continue };
        c.last_job_failure = charge.last;
        if charge.fails {
            let class = ctx.policy.class(c.class);
            if class.victim.jobs == JobVictims::Protect {
                ex.push(Explanation::node(
                    node,
                    Verdict::Dropped,
                    Code::JobWouldFail,
                    format!(
                        "the preemptor needs {} evicted: {} (class {} is jobs: protect)",
                        c.pod.key(),
                        charge.note,
                        class.name
                    ),
                ));
                return None;
            }
            c.fate = Fate::Lost;
        } else {
            c.fate = Fate::Recreated;
        }
        c.job_note = Some(charge.note);
    }
    Some(())
}

/// What evicting one candidate does to its Job, if all of them were evicted.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Effect {
    /// It fails its Job: tried for reprieve first, like PDB-violating ones.
    pub fails: bool,
    /// It uses up the Job's last allowed failure.
    pub last: bool,
}

/// What evicting each candidate does to its Job, if all of them were evicted (most
/// valuable first).
pub(super) fn effects(ctx: &Context, candidates: &[Victim]) -> Vec<Effect> {
    let mut ledger = JobLedger::new(ctx.undeleted);
    candidates
        .iter()
        .map(|c| ledger.take(ctx.view, c.pod).map_or(Effect::default(), |j| Effect { fails: j.fails, last: j.last }))
        .collect()
}
