//! May this pod be evicted for that preemptor? The per-pod rules of the policy.

use super::Context;
use crate::model::Pod;
use crate::policy::ClassId;

/// The pod asking for room.
#[derive(Debug, Clone, Copy)]
pub struct Preemptor {
    pub priority: i32,
    pub class: ClassId,
}

/// Why a pod is protected: a stable code and a sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protection {
    pub code: &'static str,
    pub detail: String,
}

fn protected(code: &'static str, detail: String) -> Result<ClassId, Protection> {
    Err(Protection { code, detail })
}

/// The victim's class if the policy lets `preemptor` evict `victim`.
pub fn check(ctx: &Context, preemptor: Preemptor, victim: &Pod) -> Result<ClassId, Protection> {
    let policy = ctx.policy;
    let priority = ctx.priority_of(victim);
    let class_id = policy.classify(victim, priority);
    let class = policy.class(class_id);
    let preemptor_class = &policy.class(preemptor.class).name;
    if priority >= preemptor.priority {
        return protected("not_lower_priority", format!("priority {priority} is not below the preemptor's {}", preemptor.priority));
    }
    if !class.victim.allowed {
        return protected("class_protected", format!("class {} is never a victim", class.name));
    }
    if !policy.may_preempt(preemptor.class, class_id) {
        return protected("class_not_preemptible", format!("class {preemptor_class} may not preempt class {}", class.name));
    }
    if victim.deletion_time.is_some() {
        return protected("terminating", "already terminating".into());
    }
    if class.victim.recreatable_only && victim.controller.is_none() {
        return protected(
            "not_recreatable",
            format!("bare pod (no controller owner): evicting it would lose it; class {} is recreatableOnly", class.name),
        );
    }
    let min = class.victim.min_runtime;
    if min > 0 {
        let ran = victim.running_since().map(|t| ctx.now - t).unwrap_or(0);
        if ran < min {
            return protected("min_runtime", format!("running {ran}s, class {} requires {min}s before eviction", class.name));
        }
    }
    Ok(class_id)
}
