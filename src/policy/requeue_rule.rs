//! Does requeue bring this pod back? One rule, asked wherever it matters: by decisions (a
//! bare victim is requeued, or a victim of last resort), by the cluster view (which
//! evictions to record, whose bytes to keep), by the controller (copy it, or say why not)
//! and by uninstall. Each caller says what it knows of the circumstances.

use super::{BareVictims, Class};
use crate::model::{marks, BaselineControl, NamespaceOptIn, Pod};

/// What the rule is asked against besides the pod and its class.
#[derive(Debug, Clone, Copy)]
pub struct Circumstances {
    /// Can copies be stored now (requeue on, its permission held)?
    pub requeue_available: bool,
    /// What the pod's namespace opted in to.
    pub namespace: NamespaceOptIn,
}

impl NamespaceOptIn {
    /// A source without namespaces (a snapshot recorded without them): copies anywhere,
    /// nothing beyond baseline (that takes a namespace's own label).
    pub const WITHOUT_NAMESPACES: NamespaceOptIn = NamespaceOptIn { copies: true, beyond_baseline: false };
    /// Whoever stores the copy cannot read namespaces (uninstall): it tries, and admission,
    /// which reads the namespace's labels, decides.
    pub const ADMISSION_DECIDES: NamespaceOptIn = NamespaceOptIn { copies: true, beyond_baseline: true };
}

/// Why requeue does not bring a pod back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotRequeued {
    /// It has an owner: its controller (or whatever tracks it) brings it back its own way.
    NotBare,
    /// It opted out (annotation `coloc-extender.io/requeue: never`).
    OptedOut,
    /// Its class is never a victim, or loses or protects its bare pods.
    ClassDoesNotRequeue,
    /// Requeue would bring it back, but cannot: evicted, it is lost.
    Cannot(CannotRequeue),
}

/// Why requeue cannot bring back a bare pod of a class that requeues: such a pod is a
/// victim of last resort, and when it is evicted it is lost, said with a Warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CannotRequeue {
    /// Requeue is off, or cannot store copies.
    Unavailable,
    /// Its spec exceeds this control of Pod Security baseline, and its namespace has not
    /// opted in to copies beyond baseline.
    BeyondBaseline(BaselineControl),
    /// Requeued `done` times, as often as its class allows.
    MaxAttempts { done: u32, max: u32 },
    /// Its namespace has not opted in to copies.
    NamespaceNotOptedIn,
}

/// `Ok` if requeue brings `pod` (of `class`) back once it is evicted; else the first reason
/// it does not, in this order: it is not bare, it opted out, its class does not requeue;
/// requeue unavailable, its spec beyond baseline, `maxAttempts` reached, its namespace not
/// opted in.
pub fn requeue_rule(pod: &Pod, class: &Class, at: Circumstances) -> Result<(), NotRequeued> {
    if !pod.is_bare() {
        return Err(NotRequeued::NotBare);
    }
    if marks::opted_out(pod) {
        return Err(NotRequeued::OptedOut);
    }
    if !class.victim.allowed || class.victim.bare() != BareVictims::Requeue {
        return Err(NotRequeued::ClassDoesNotRequeue);
    }
    let cannot = |c| Err(NotRequeued::Cannot(c));
    if !at.requeue_available {
        return cannot(CannotRequeue::Unavailable);
    }
    if let Some(control) = pod.beyond_baseline.filter(|_| !at.namespace.beyond_baseline) {
        return cannot(CannotRequeue::BeyondBaseline(control));
    }
    let done = marks::attempt_of(pod);
    if let Some(max) = class.requeue.max_attempts.filter(|max| done >= *max) {
        return cannot(CannotRequeue::MaxAttempts { done, max });
    }
    if !at.namespace.copies {
        return cannot(CannotRequeue::NamespaceNotOptedIn);
    }
    Ok(())
}

impl NotRequeued {
    /// What requeue cannot do for a pod it would bring back, if that is why.
    pub fn cannot(self) -> Option<CannotRequeue> {
        match self {
            NotRequeued::Cannot(c) => Some(c),
            _ => None,
        }
    }
}

impl CannotRequeue {
    /// The reason's name: the `reason` label of `coloc_bare_lost_total` and
    /// `coloc_requeue_given_up_total`.
    pub fn code(self) -> &'static str {
        match self {
            CannotRequeue::Unavailable => "requeue_unavailable",
            CannotRequeue::BeyondBaseline(_) => "beyond_baseline",
            CannotRequeue::MaxAttempts { .. } => "max_attempts",
            CannotRequeue::NamespaceNotOptedIn => "namespace_not_opted_in",
        }
    }

    /// Why `pod` of `class` is not requeued, as a person reads it (Events, explanations).
    pub fn sentence(self, pod: &Pod, class: &Class) -> String {
        match self {
            CannotRequeue::Unavailable => {
                "requeue is off or cannot store copies (serve --kube --requeue; /readyz says why)".into()
            }
            CannotRequeue::BeyondBaseline(control) => {
                let (label, value) = marks::NAMESPACE_BEYOND_BASELINE;
                format!(
                    "it asks for {} ({}), beyond Pod Security baseline, which a copy may carry only where its namespace opted in (label {label}={value}); admission refuses it elsewhere",
                    control.describe(),
                    control.id()
                )
            }
            CannotRequeue::MaxAttempts { done, max } => {
                format!("requeued {done} time(s) already; class {} allows requeue.maxAttempts {max}", class.name)
            }
            CannotRequeue::NamespaceNotOptedIn => format!(
                "namespace {} has not opted in to copies ({}; never kube-system), and admission refuses one there",
                pod.namespace,
                marks::namespace_opt_in_labels()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::OwnerRef;
    use crate::policy::Policy;

    fn policy() -> Policy {
        Policy::from_yaml(
            "defaultClass: free\nclasses:\n\
             - {name: online}\n\
             - {name: kept, victim: {allowed: true, bare: protect}}\n\
             - {name: free, victim: {allowed: true}, requeue: {maxAttempts: 2}}\n",
        )
        .unwrap()
    }

    fn class<'a>(p: &'a Policy, name: &str) -> &'a Class {
        p.classes.iter().find(|c| c.name == name).unwrap()
    }

    fn bare() -> Pod {
        Pod { name: "free-1".into(), namespace: "batch".into(), uid: "u-1".into(), ..Default::default() }
    }

    const OPTED_IN: Circumstances =
        Circumstances { requeue_available: true, namespace: NamespaceOptIn { copies: true, beyond_baseline: false } };

    #[test]
    fn a_bare_pod_of_a_requeue_class_in_a_namespace_that_opted_in_comes_back() {
        let p = policy();
        assert_eq!(requeue_rule(&bare(), class(&p, "free"), OPTED_IN), Ok(()));
    }

    #[test]
    fn what_requeue_leaves_to_others_is_not_requeue_s_loss() {
        let p = policy();
        let owned = Pod { owner: Some(OwnerRef { kind: "Workflow".into(), name: "w".into() }), ..bare() };
        assert_eq!(requeue_rule(&owned, class(&p, "free"), OPTED_IN), Err(NotRequeued::NotBare));
        let mut opted_out = bare();
        opted_out.annotations.insert(marks::OPT_OUT.into(), "Never".into());
        assert_eq!(requeue_rule(&opted_out, class(&p, "free"), OPTED_IN), Err(NotRequeued::OptedOut));
        for other in ["online", "kept"] {
            assert_eq!(requeue_rule(&bare(), class(&p, other), OPTED_IN), Err(NotRequeued::ClassDoesNotRequeue));
        }
    }

    #[test]
    fn each_reason_requeue_cannot_is_said_and_the_first_wins() {
        let p = policy();
        let free = class(&p, "free");
        let cannot = |pod: &Pod, at| requeue_rule(pod, free, at).err().and_then(NotRequeued::cannot);
        let unavailable = Circumstances { requeue_available: false, ..OPTED_IN };
        assert_eq!(cannot(&bare(), unavailable), Some(CannotRequeue::Unavailable));
        let host = Pod { beyond_baseline: Some(BaselineControl::HostPorts), ..bare() };
        assert_eq!(cannot(&host, OPTED_IN), Some(CannotRequeue::BeyondBaseline(BaselineControl::HostPorts)));
        let mut twice = bare();
        twice.annotations.insert(marks::FROM_UID.into(), "u-0".into());
        twice.annotations.insert(marks::ATTEMPT.into(), "2".into());
        assert_eq!(cannot(&twice, OPTED_IN), Some(CannotRequeue::MaxAttempts { done: 2, max: 2 }));
        let not_opted_in = Circumstances { namespace: NamespaceOptIn::default(), ..OPTED_IN };
        assert_eq!(cannot(&bare(), not_opted_in), Some(CannotRequeue::NamespaceNotOptedIn));
        // The first that holds is named.
        assert_eq!(cannot(&host, unavailable), Some(CannotRequeue::Unavailable));
        assert_eq!(
            cannot(&Pod { beyond_baseline: Some(BaselineControl::Sysctls), ..twice.clone() }, not_opted_in),
            Some(CannotRequeue::BeyondBaseline(BaselineControl::Sysctls))
        );
    }

    #[test]
    fn a_namespace_that_opted_in_beyond_baseline_gets_its_pods_back_whatever_they_ask_for() {
        let p = policy();
        let beyond = Circumstances { namespace: NamespaceOptIn { copies: true, beyond_baseline: true }, ..OPTED_IN };
        for control in BaselineControl::ALL {
            let pod = Pod { beyond_baseline: Some(control), ..bare() };
            assert_eq!(requeue_rule(&pod, class(&p, "free"), beyond), Ok(()), "{control:?}");
        }
    }

    #[test]
    fn a_reason_says_what_would_change_it() {
        let p = policy();
        let free = class(&p, "free");
        let said = CannotRequeue::BeyondBaseline(BaselineControl::HostPorts).sentence(&bare(), free);
        assert!(
            said.contains("a hostPort") && said.contains("coloc-extender.io/requeue-beyond-baseline=enabled"),
            "{said}"
        );
        let said = CannotRequeue::NamespaceNotOptedIn.sentence(&bare(), free);
        assert!(said.contains("namespace batch") && said.contains("coloc-extender.io/requeue=enabled"), "{said}");
        let said = CannotRequeue::MaxAttempts { done: 2, max: 2 }.sentence(&bare(), free);
        assert!(said.contains("class free allows requeue.maxAttempts 2"), "{said}");
    }
}
