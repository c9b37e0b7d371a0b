//! May this pod be evicted for that preemptor? The per-pod rules of the policy.

use super::Context;
use crate::explanation::Explanation;
use crate::explanation::{Code, Verdict};
use crate::model::{NamespaceOptIn, Pod};
use crate::policy::{requeue_rule, BareVictims, CannotRequeue, Circumstances, ClassId, JobVictims};

/// The pod asking for room.
#[derive(Debug, Clone, Copy)]
pub struct Preemptor<'a> {
    pub priority: i32,
    pub class: ClassId,
    /// `namespace/name`, for requeue annotations and explanations.
    pub key: &'a str,
}

/// Why a pod is protected: a stable code and a sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protection {
    pub code: Code,
    pub detail: String,
    /// Protected as a member of a gang declared by this source.
    pub gang_source: Option<crate::model::GangSource>,
}

impl Protection {
    /// This protection as a decision about `pod` on `node`.
    pub fn explain(&self, node: &str, pod: &str, verdict: Verdict) -> Explanation {
        let why = Explanation::pod(node, pod, verdict, self.code, self.detail.clone());
        match self.gang_source {
            Some(source) => why.for_gang(source),
            None => why,
        }
    }
}

fn protected<T>(code: Code, detail: String) -> Result<T, Protection> {
    Err(Protection { code, detail, gang_source: None })
}

/// What becomes of a victim once evicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Its controller recreates it.
    Recreated,
    /// Copied once kube-scheduler evicts it, the copy released once it is gone.
    Requeued,
    /// Nothing brings it back (the class says `bare: lose`).
    Lost,
    /// Whatever made it brings it back its own way: it has an owner that is not a
    /// controller, or it opted out of requeue. Not copied.
    LeftToOwner,
    /// A bare pod of a `requeue` class that requeue cannot bring back, for this reason:
    /// evicted only where no other victims place the preemptor, and then lost.
    LastResort(CannotRequeue),
}

impl Fate {
    pub fn is_last_resort(self) -> bool {
        matches!(self, Fate::LastResort(_))
    }
}

/// A pod the policy lets the preemptor evict.
#[derive(Debug, Clone, Copy)]
pub struct Eligible {
    pub class: ClassId,
    pub fate: Fate,
}

/// The victim's class and fate if the policy lets `preemptor` evict `victim`.
pub fn check(ctx: &Context, preemptor: Preemptor, victim: &Pod) -> Result<Eligible, Protection> {
    let policy = ctx.policy;
    let priority = ctx.priority_of(victim);
    let class_id = policy.classify(victim, priority);
    let class = policy.class(class_id);
    let preemptor_class = &policy.class(preemptor.class).name;
    if priority >= preemptor.priority {
        return protected(
            Code::NotLowerPriority,
            format!("priority {priority} is not below the preemptor's {}", preemptor.priority),
        );
    }
    // A gang's PodGroup priority ranks its members: a group at least as important as the
    // preemptor is not its victim, whatever its pods' own priority.
    if let Some((gang, group_priority)) = ctx.view.and_then(|v| {
        let gang = v.gang_of(victim)?;
        let info = v.gang(&gang, victim);
        Some((gang, info.priority?))
    }) {
        if group_priority >= preemptor.priority {
            let detail = format!(
                "{gang} ({}) has priority {group_priority}, not below the preemptor's {}",
                gang.source.name(),
                preemptor.priority
            );
            return Err(Protection { code: Code::GangPriority, detail, gang_source: Some(gang.source) });
        }
    }
    if !class.victim.allowed {
        return protected(Code::ClassProtected, format!("class {} is never a victim", class.name));
    }
    if !policy.may_preempt(preemptor.class, class_id) {
        return protected(
            Code::ClassNotPreemptible,
            format!("class {preemptor_class} may not preempt class {}", class.name),
        );
    }
    if victim.deletion_time.is_some() {
        return protected(Code::Terminating, "already terminating".into());
    }
    let fate = match () {
        _ if victim.controller.is_some() => job_fate(ctx, class, victim)?,
        _ if victim.owner.is_some() || crate::model::marks::opted_out(victim) => Fate::LeftToOwner,
        _ => bare_fate(ctx, preemptor, class, victim)?,
    };
    let min = class.victim.min_runtime;
    if min > 0 {
        let ran = victim.running_since().map(|t| ctx.now - t).unwrap_or(0);
        if ran < min {
            return protected(
                Code::MinRuntime,
                format!("running {ran}s, class {} requires {min}s before eviction", class.name),
            );
        }
    }
    Ok(Eligible { class: class_id, fate })
}

/// A controller-owned pod is recreated, unless it is a Job's and evicting it alone fails
/// the Job: then it is lost work, or protected where the class says `jobs: protect`.
/// (Several pods of one Job in one answer are counted together when the victim set is
/// known: `preempt::jobs`.)
fn job_fate(ctx: &Context, class: &crate::policy::Class, victim: &Pod) -> Result<Fate, Protection> {
    match super::jobs::charge_alone(ctx.view, ctx.undeleted, victim) {
        Some(c) if c.fails && class.victim.jobs == JobVictims::Protect => protected(
            Code::JobWouldFail,
            format!("{}; class {} protects such Job pods (jobs: protect)", c.note, class.name),
        ),
        Some(c) if c.fails => Ok(Fate::Lost),
        _ => Ok(Fate::Recreated),
    }
}

/// A bare pod (no controller owner) is protected, requeued or lost, as its class says. A
/// pod of a `requeue` class that cannot be requeued is, for an online preemptor, a victim
/// of last resort: placing an online pod comes before sparing it, but it is chosen only
/// where no other victims place the pod (`Cost::last_resort`), and lost. An offline
/// preemptor never takes it: that would lose offline work to place offline work. A class
/// that wants such pods never touched says `bare: protect`.
fn bare_fate(
    ctx: &Context,
    preemptor: Preemptor,
    class: &crate::policy::Class,
    victim: &Pod,
) -> Result<Fate, Protection> {
    let fate = match class.victim.bare() {
        BareVictims::Protect => {
            return protected(
                Code::NotRecreatable,
                format!(
                    "bare pod (no controller owner): evicting it would lose it; class {} protects bare pods",
                    class.name
                ),
            )
        }
        BareVictims::Lose => Fate::Lost,
        BareVictims::Requeue => match cannot_requeue(ctx, class, victim) {
            Some(reason) if ctx.policy.is_online(preemptor.class) => Fate::LastResort(reason),
            Some(reason) => {
                return protected(
                    Code::CannotRequeue,
                    format!(
                        "bare pod: {}; only an online pod takes it, as a last resort",
                        reason.sentence(victim, class)
                    ),
                )
            }
            None => Fate::Requeued,
        },
    };
    Ok(fate)
}

/// Why requeue cannot bring `victim` back, if it cannot (`requeue_rule`): requeue off or
/// unavailable, its spec beyond baseline where its namespace did not opt in to that, its
/// class's `maxAttempts` reached, its namespace not opted in (admission refuses a copy
/// there). Without a view, its namespace is taken as opted in to copies within baseline.
fn cannot_requeue(ctx: &Context, class: &crate::policy::Class, victim: &Pod) -> Option<CannotRequeue> {
    let namespace = ctx.view.map_or(NamespaceOptIn::WITHOUT_NAMESPACES, |v| v.namespace_opt_in(&victim.namespace));
    let at = Circumstances { requeue_available: ctx.requeue.enabled, namespace };
    requeue_rule(victim, class, at).err().and_then(|not| not.cannot())
}
