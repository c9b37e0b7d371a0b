//! Guards left by earlier releases, and how to finish them.
//!
//! Releases before this one put the finalizer [`GUARD`] (and a label of the same name) on
//! every running bare pod that requeue would bring back, so that a preempted pod stayed,
//! terminating, until its replacement was stored. A finalizer is a promise that someone
//! comes back: an extender scaled to zero, switched off or uninstalled cannot keep it, and
//! then `kubectl delete` on those pods and the deletion of their namespace wait forever.
//! So no guard is added any more; every start (whatever the flags) and `uninstall` finish
//! those that are left: a preempted pod is requeued first, any other is let go.
//!
//! What to do is decided here, from the pod alone; `leftovers` carries it out.

use crate::model::Pod;

#[cfg(doc)]
use crate::model::marks::GUARD;

/// What finishing a guarded pod means, decided on the pod as the API server has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    /// kube-scheduler preempted it: store its replacement, then remove the guard.
    Requeue,
    /// kube-scheduler preempted it, and no copy of it can ever be stored: remove the guard,
    /// and say the pod is lost (the `reason` label of `coloc_requeue_given_up_total`).
    GiveUp { reason: &'static str, why: String },
    /// Remove the guard; the reason is logged.
    Unguard(&'static str),
    /// The guard is gone already.
    Nothing,
}

pub fn finish(pod: &Pod) -> Finish {
    let ending = pod.deletion_time.is_some() || pod.is_terminal();
    match () {
        _ if !pod.requeue_guarded => Finish::Nothing,
        // Admission refuses its copy unless its namespace opted in beyond baseline, which
        // the pod alone does not say: trying would only hold the pod.
        _ if pod.preempted && pod.is_bare() && pod.beyond_baseline.is_some() => Finish::GiveUp {
            reason: "beyond_baseline",
            why: format!(
                "it asks for {} beyond Pod Security baseline, and admission refuses such a copy unless its namespace opted in",
                pod.beyond_baseline.map(|c| c.describe()).unwrap_or_default()
            ),
        },
        // Marked by kube-scheduler and about to be deleted, or deleted already: the copy
        // first, or the pod would go with nothing to bring it back.
        _ if pod.preempted && pod.is_bare() => Finish::Requeue,
        _ if pod.deletion_time.is_some() => Finish::Unguard("deleted, not by preemption"),
        _ if ending => Finish::Unguard("ended on its own"),
        _ => Finish::Unguard("guards are no longer added"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::OwnerRef;

    fn guarded() -> Pod {
        Pod {
            name: "b".into(),
            uid: "u".into(),
            node_name: Some("n".into()),
            phase: Some("Running".into()),
            requeue_guarded: true,
            ..Default::default()
        }
    }

    #[test]
    fn a_preempted_bare_pod_is_requeued_before_its_guard_goes() {
        let preempted = Pod { deletion_time: Some(1), preempted: true, ..guarded() };
        assert_eq!(finish(&preempted), Finish::Requeue);
        // Preempted and already failed (the kubelet was quicker than us): still requeued.
        let failed = Pod { phase: Some("Failed".into()), preempted: true, ..guarded() };
        assert_eq!(finish(&failed), Finish::Requeue);
        // Marked, not deleted yet: the deletion follows at once, so the copy comes first.
        assert_eq!(finish(&Pod { preempted: true, ..guarded() }), Finish::Requeue);
    }

    #[test]
    fn a_preempted_pod_beyond_baseline_is_given_up_at_once() {
        let host = Pod {
            deletion_time: Some(1),
            preempted: true,
            beyond_baseline: Some(crate::model::BaselineControl::HostPorts),
            ..guarded()
        };
        assert!(
            matches!(finish(&host), Finish::GiveUp { reason: "beyond_baseline", why } if why.contains("admission refuses"))
        );
    }

    #[test]
    fn every_other_guard_is_let_go() {
        assert_eq!(finish(&Pod { deletion_time: Some(1), ..guarded() }), Finish::Unguard("deleted, not by preemption"));
        assert_eq!(finish(&Pod { phase: Some("Succeeded".into()), ..guarded() }), Finish::Unguard("ended on its own"));
        assert_eq!(finish(&guarded()), Finish::Unguard("guards are no longer added"));
        // Something else brings an owned pod back: no copy.
        let owned = Pod {
            deletion_time: Some(1),
            preempted: true,
            owner: Some(OwnerRef { kind: "Workflow".into(), name: "w".into() }),
            ..guarded()
        };
        assert_eq!(finish(&owned), Finish::Unguard("deleted, not by preemption"));
        assert_eq!(finish(&Pod { requeue_guarded: false, ..guarded() }), Finish::Nothing);
    }
}
