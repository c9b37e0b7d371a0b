//! What requeue must do now, from the cluster view alone: pure, so a restarted or second
//! replica reaches the same conclusions from the same view (reconcile, not remember).

use crate::cluster::View;
use crate::model::{Pod, Timestamp};

use super::{ATTEMPT, FROM_POD, FROM_UID, GATE, PREEMPTED_BY};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// The original is gone (deleted or terminal): remove our gate so kube-scheduler
    /// schedules the replacement.
    Release(Release),
    /// The original was not evicted within the time allowed (kube-scheduler chose
    /// otherwise, or our answer never arrived): the replacement would duplicate it.
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

/// Gated replacements to release or delete. `evict_within`: seconds a replacement may wait
/// for its original to start terminating.
pub fn reconcile(view: &View, now: Timestamp, evict_within: i64) -> Vec<Action> {
    let mut actions: Vec<Action> = view.replacements().filter_map(|r| decide(view, r, now, evict_within)).collect();
    actions.sort_by(|a, b| key(a).cmp(&key(b)));
    actions
}

fn key(a: &Action) -> (&str, &str) {
    match a {
        Action::Release(r) => (&r.namespace, &r.name),
        Action::Delete { namespace, name, .. } => (namespace, name),
    }
}

fn decide(view: &View, r: &Pod, now: Timestamp, evict_within: i64) -> Option<Action> {
    if !r.scheduling_gates.iter().any(|g| g == GATE) || r.deletion_time.is_some() {
        return None; // released already, or on its way out
    }
    let annotation = |k: &str| r.annotations.get(k).cloned().unwrap_or_default();
    let from_uid = annotation(FROM_UID);
    match view.pod_by_uid(&from_uid) {
        None => Some(Action::Release(Release {
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            uid: r.uid.clone(),
            gates: r.scheduling_gates.clone(),
            from_uid,
            from_pod: annotation(FROM_POD),
            attempt: annotation(ATTEMPT),
            preempted_by: annotation(PREEMPTED_BY),
        })),
        // Being evicted: released once it is gone.
        Some(original) if original.deletion_time.is_some() => None,
        Some(original) => {
            let age = r.creation_time.map_or(0, |t| now - t);
            (age > evict_within).then(|| Action::Delete {
                namespace: r.namespace.clone(),
                name: r.name.clone(),
                uid: r.uid.clone(),
                reason: format!("original {} was not evicted within {evict_within}s (still on {})", original.key(), original.node_name.as_deref().unwrap_or("no node")),
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
        Pod { name: "free-3".into(), namespace: "batch".into(), uid: "u-1".into(), node_name: Some("n1".into()), phase: Some("Running".into()), ..Default::default() }
    }

    fn replacement(age: i64) -> Pod {
        let mut r = Pod { name: "free-3-rq-1".into(), namespace: "batch".into(), uid: "r-1".into(), creation_time: Some(NOW - age), phase: Some("Pending".into()), ..Default::default() };
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

    #[test]
    fn a_released_replacement_is_left_alone() {
        let mut released = replacement(600);
        released.scheduling_gates.clear();
        assert!(reconcile(&view(vec![released]), NOW, 60).is_empty());
    }
}
