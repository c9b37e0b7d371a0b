//! What requeue must do now, from the cluster view alone: pure, so a restarted or second
//! replica reaches the same conclusions from the same view (reconcile, not remember).
//!
//! Gang members are requeued as a unit: a replacement whose original is gone is released
//! only once no other replacement of its gang still waits for its original, so the gang
//! comes back together. The wait is bounded: a replacement whose original was not evicted
//! within `evict_within` is deleted and stops holding the others back, so no member stays
//! gated forever.

use std::collections::BTreeSet;

use crate::cluster::{Departure, View};
use crate::model::{GangRef, Pod, Timestamp};

use super::{ATTEMPT, FROM_POD, FROM_UID, GATE, PREEMPTED_BY};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// The original was preempted and is gone: remove our gate so kube-scheduler
    /// schedules the replacement.
    Release(Release),
    /// The original was not evicted within the time allowed (kube-scheduler chose
    /// otherwise, or our answer never arrived), or it left without being preempted (it
    /// ended on its own, or someone deleted it): the replacement would run it again.
    Delete { namespace: String, name: String, uid: String, reason: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The gates as the view saw them: the patch tests them, so a concurrent change (the
    /// other replica released it already) makes it a no-op.
    pub gates: Vec<String>,
    pub from_uid: String,
    pub from_pod: String,
    pub attempt: String,
    pub preempted_by: String,
}

impl Release {
    /// The release of replacement `r`, from its own annotations.
    pub fn of(r: &Pod) -> Release {
        let annotation = |k: &str| r.annotations.get(k).map(str::to_owned).unwrap_or_default();
        Release {
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            uid: r.uid.clone(),
            gates: r.scheduling_gates.clone(),
            from_uid: annotation(FROM_UID),
            from_pod: annotation(FROM_POD),
            attempt: annotation(ATTEMPT),
            preempted_by: annotation(PREEMPTED_BY),
        }
    }
}

/// Gated replacements to release or delete. `evict_within`: seconds a replacement may wait
/// for its original to start terminating.
pub fn reconcile(view: &View, now: Timestamp, evict_within: i64) -> Vec<Action> {
    let held = gangs_held_back(view, now, evict_within);
    let mut actions: Vec<Action> =
        view.replacements().filter_map(|r| decide(view, r, now, evict_within, &held)).collect();
    actions.sort_by(|a, b| key(a).cmp(&key(b)));
    actions
}

fn key(a: &Action) -> (&str, &str) {
    match a {
        Action::Release(r) => (&r.namespace, &r.name),
        Action::Delete { namespace, name, .. } => (namespace, name),
    }
}

fn is_gated(r: &Pod) -> bool {
    r.scheduling_gates.iter().any(|g| g == GATE) && r.deletion_time.is_none()
}

/// Gangs with a gated replacement whose original still runs (or terminates), within the
/// time its eviction is waited for: their other replacements wait too.
fn gangs_held_back(view: &View, now: Timestamp, evict_within: i64) -> BTreeSet<GangRef> {
    view.replacements()
        .filter(|r| is_gated(r) && r.creation_time.map_or(0, |t| now - t) <= evict_within)
        .filter(|r| r.annotations.get(FROM_UID).is_some_and(|uid| view.pod_by_uid(uid).is_some()))
        .filter_map(|r| view.gang_of(r))
        .collect()
}

fn decide(view: &View, r: &Pod, now: Timestamp, evict_within: i64, held: &BTreeSet<GangRef>) -> Option<Action> {
    if !is_gated(r) {
        return None; // released already, or on its way out
    }
    let annotation = |k: &str| r.annotations.get(k).map(str::to_owned).unwrap_or_default();
    let from_uid = annotation(FROM_UID);
    let delete = |reason: String| Action::Delete {
        namespace: r.namespace.clone(),
        name: r.name.clone(),
        uid: r.uid.clone(),
        reason,
    };
    match view.pod_by_uid(&from_uid) {
        // It left on its own: a copy would run it a second time.
        None if view.departure(&from_uid) == Some(Departure::Ended) => {
            Some(delete(format!("original {} ({from_uid}) ended on its own, not by preemption", annotation(FROM_POD))))
        }
        None if view.departure(&from_uid) == Some(Departure::Deleted) => {
            Some(delete(format!("original {} ({from_uid}) was deleted, not by preemption", annotation(FROM_POD))))
        }
        // A gang member's siblings are still being evicted: the gang is released together.
        None if view.gang_of(r).is_some_and(|g| held.contains(&g)) => None,
        // Preempted, or gone while no replica watched (a restart): released, since a
        // preempt answer named it.
        None => Some(Action::Release(Release::of(r))),
        // Being evicted: released once it is gone.
        Some(original) if original.deletion_time.is_some() => None,
        Some(original) => {
            let age = r.creation_time.map_or(0, |t| now - t);
            (age > evict_within).then(|| {
                delete(format!(
                    "original {} was not evicted within {evict_within}s (still on {})",
                    original.key(),
                    original.node_name.as_deref().unwrap_or("no node")
                ))
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::policy::Policy;

    const NOW: i64 = 1_800_000_000;

    fn original() -> Pod {
        Pod {
            name: "free-3".into(),
            namespace: "batch".into(),
            uid: "u-1".into(),
            node_name: Some("n1".into()),
            phase: Some("Running".into()),
            ..Default::default()
        }
    }

    fn replacement(age: i64) -> Pod {
        let mut r = Pod {
            name: "free-3-rq-1".into(),
            namespace: "batch".into(),
            uid: "r-1".into(),
            creation_time: Some(NOW - age),
            phase: Some("Pending".into()),
            ..Default::default()
        };
        r.scheduling_gates = vec![GATE.into()];
        r.annotations.insert(FROM_UID.into(), "u-1".into());
        r.annotations.insert(ATTEMPT.into(), "1".into());
        r
    }

    fn view(pods: Vec<Pod>) -> View {
        let p = Policy::builtin_default();
        let mut v = View::empty(&p);
        for pod in pods {
            v.apply_pod(Arc::new(pod), &p);
        }
        v
    }

    #[test]
    fn a_replacement_waits_while_its_original_runs() {
        assert!(reconcile(&view(vec![original(), replacement(5)]), NOW, 60).is_empty());
    }

    #[test]
    fn a_replacement_is_released_once_its_original_is_gone() {
        let actions = reconcile(&view(vec![replacement(5)]), NOW, 60);
        assert!(matches!(&actions[..], [Action::Release(r)] if r.name == "free-3-rq-1" && r.gates == [GATE]));
    }

    /// The original as the view last saw it, then `leaves` it.
    fn departed(last: Pod, leaves: impl FnOnce(&mut View, &Policy)) -> View {
        let p = Policy::builtin_default();
        let mut v = view(vec![replacement(5), last]);
        leaves(&mut v, &p);
        v
    }

    #[test]
    fn a_replacement_is_released_when_its_original_was_preempted_and_deleted() {
        let preempted = Pod { preempted: true, ..original() };
        let v = departed(preempted, |v, p| {
            v.remove_pod("batch/free-3", p);
        });
        assert!(matches!(&reconcile(&v, NOW, 60)[..], [Action::Release(_)]));
    }

    #[test]
    fn a_replacement_is_released_when_its_original_was_preempted_and_failed() {
        let v = departed(original(), |v, p| {
            v.apply_pod(Arc::new(Pod { preempted: true, phase: Some("Failed".into()), ..original() }), p)
        });
        assert!(matches!(&reconcile(&v, NOW, 60)[..], [Action::Release(_)]));
    }

    #[test]
    fn a_replacement_is_deleted_when_its_original_succeeded_on_its_own() {
        let v = departed(original(), |v, p| {
            v.apply_pod(Arc::new(Pod { phase: Some("Succeeded".into()), ..original() }), p)
        });
        let actions = reconcile(&v, NOW, 60);
        assert!(
            matches!(&actions[..], [Action::Delete { reason, .. }] if reason.contains("ended on its own")),
            "{actions:?}"
        );
    }

    #[test]
    fn a_replacement_is_deleted_when_its_original_was_deleted_not_by_preemption() {
        let v = departed(original(), |v, p| {
            v.remove_pod("batch/free-3", p);
        });
        let actions = reconcile(&v, NOW, 60);
        assert!(
            matches!(&actions[..], [Action::Delete { reason, .. }] if reason.contains("deleted, not by preemption")),
            "{actions:?}"
        );
    }

    #[test]
    fn a_replacement_waits_while_its_original_terminates_even_past_the_deadline() {
        let mut going = original();
        going.deletion_time = Some(NOW - 1);
        assert!(reconcile(&view(vec![going, replacement(600)]), NOW, 60).is_empty());
    }

    #[test]
    fn a_replacement_whose_original_was_not_evicted_in_time_is_deleted() {
        let actions = reconcile(&view(vec![original(), replacement(61)]), NOW, 60);
        assert!(matches!(&actions[..], [Action::Delete { name, .. }] if name == "free-3-rq-1"));
    }

    fn gang_member(name: &str, uid: &str, replacement_age: Option<i64>) -> Pod {
        let label = |mut p: Pod| {
            p.labels.insert("scheduling.x-k8s.io/pod-group".into(), "g".into());
            p
        };
        match replacement_age {
            None => label(Pod { name: name.into(), uid: uid.into(), ..original() }),
            Some(age) => {
                let mut r = label(replacement(age));
                r.name = format!("{name}-rq");
                r.uid = format!("r-{uid}");
                r.annotations.insert(FROM_UID.into(), uid.into());
                r
            }
        }
    }

    fn released(actions: &[Action]) -> Vec<&str> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Release(r) => Some(r.name.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_gang_is_released_as_a_unit_once_every_original_is_gone() {
        // a's original is gone, b's still runs: a waits for b.
        let waiting = view(vec![
            gang_member("a", "u-a", Some(5)),
            gang_member("b", "u-b", Some(5)),
            gang_member("b", "u-b", None),
        ]);
        assert!(reconcile(&waiting, NOW, 60).is_empty(), "{:?}", reconcile(&waiting, NOW, 60));
        // Both gone: both released in the same pass.
        let gone = view(vec![gang_member("a", "u-a", Some(5)), gang_member("b", "u-b", Some(5))]);
        assert_eq!(released(&reconcile(&gone, NOW, 60)), ["a-rq", "b-rq"]);
    }

    #[test]
    fn no_gang_member_stays_gated_when_a_sibling_is_never_evicted() {
        // b's original was not evicted in time: its replacement is deleted, a's released.
        let stuck = view(vec![
            gang_member("a", "u-a", Some(61)),
            gang_member("b", "u-b", Some(61)),
            gang_member("b", "u-b", None),
        ]);
        let actions = reconcile(&stuck, NOW, 60);
        assert_eq!(released(&actions), ["a-rq"], "{actions:?}");
        assert!(actions.iter().any(|a| matches!(a, Action::Delete { name, .. } if name == "b-rq")), "{actions:?}");
    }

    #[test]
    fn a_released_replacement_is_left_alone() {
        let mut released = replacement(600);
        released.scheduling_gates.clear();
        assert!(reconcile(&view(vec![released]), NOW, 60).is_empty());
    }
}
