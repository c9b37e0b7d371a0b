//! Step 1: refuse a pod that may not preempt, or name it a preemptor (its class and
//! priority), judging by kube-scheduler's victims alone where there is no view.

use crate::decide::eligibility::Preemptor;
use crate::decide::Context;
use crate::explanation::Explanation;
use crate::explanation::{Code, Verdict};
use crate::model::Pod;
use crate::policy::{ReplacementPreemption, WithoutView};

/// The preemptor `pod` (`key` its namespace/name), or `None` where it may not preempt:
/// its `preemptionPolicy` is Never, it is a requeued copy of a class whose copies wait
/// for free room, its class may preempt no class, or there is no usable view and its
/// class refuses then.
pub(super) fn refuse<'k>(ctx: &Context, pod: &Pod, key: &'k str, ex: &mut Vec<Explanation>) -> Option<Preemptor<'k>> {
    let class_id = ctx.class_of(pod);
    let class_name = &ctx.policy.class(class_id).name;
    if pod.preemption_never {
        ex.push(Explanation::request(Verdict::Refused, Code::PreemptionNever, "the pod's preemptionPolicy is Never"));
        return None;
    }
    if crate::model::marks::is_replacement(pod)
        && ctx.policy.class(class_id).requeue.preemption == ReplacementPreemption::Never
    {
        ex.push(Explanation::request(
            Verdict::Refused,
            Code::ReplacementWaits,
            format!(
                "{key} is a requeued pod of class {class_name}: it waits for free room (requeue.preemption: never)"
            ),
        ));
        return None;
    }
    if !ctx.policy.preempts_anything(class_id) {
        ex.push(Explanation::request(
            Verdict::Refused,
            Code::ClassMayNotPreempt,
            format!("class {class_name} may not preempt any class"),
        ));
        return None;
    }
    let preemptor = Preemptor { priority: ctx.priority_of(pod), class: class_id, key };
    ex.push(Explanation::request(
        Verdict::Preemptor,
        Code::Classified,
        format!("{key} is class {class_name}, priority {}", preemptor.priority),
    ));
    if ctx.view.is_none() && ctx.view_expected && ctx.policy.class(class_id).without_view == WithoutView::Refuse {
        ex.push(Explanation::request(
            Verdict::Refused,
            Code::ViewNotReady,
            format!(
                "the cluster view is not usable (not synced or stale) and class {class_name} is withoutView: refuse"
            ),
        ));
        return None;
    }
    if ctx.view.is_none() {
        ex.push(Explanation::request(
            Verdict::Degraded,
            Code::NoView,
            "no cluster view: judging kube-scheduler's victims, not re-selecting them",
        ));
    }
    Some(preemptor)
}
