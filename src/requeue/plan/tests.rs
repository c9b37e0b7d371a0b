use std::sync::Arc;

use super::*;
use crate::model::{GangRef, Phase};

const NOW: i64 = 1_800_000_000;
/// Priority 6000: class batch of the default policy, which requeues bare victims.
const BATCH: i32 = 6000;

fn policy() -> Policy {
    Policy::builtin_default()
}

/// A running bare batch pod.
fn original() -> Pod {
    Pod {
        name: "free-3".into(),
        namespace: "batch".into(),
        uid: "u-1".into(),
        node_name: Some("n1".into()),
        phase: Some(Phase::Running),
        priority: Some(BATCH),
        start_time: Some(NOW - 600),
        ..Default::default()
    }
}

/// `original` as kube-scheduler marks it, with its bytes kept.
fn marked() -> Pod {
    Pod { preempted: true, last_state: Some(Arc::from(r#"{"metadata":{"uid":"u-1"}}"#)), ..original() }
}

fn deleting(p: Pod) -> Pod {
    Pod { deletion_time: Some(NOW + 30), ..p }
}

fn copy_of(p: &Pod, gated: bool) -> Pod {
    let mut r = Pod {
        name: replacement_name(p),
        namespace: p.namespace.clone(),
        uid: format!("r-{}", p.uid),
        phase: Some(Phase::Pending),
        priority: Some(BATCH),
        ..Default::default()
    };
    if gated {
        r.scheduling_gates = vec![GATE.into()];
    }
    r.annotations.insert(FROM_UID.into(), p.uid.clone());
    r.annotations.insert(FROM_POD.into(), p.key());
    r.annotations.insert(ATTEMPT.into(), "1".into());
    r.labels = p.labels.clone();
    r
}

fn view_of(pods: Vec<Pod>) -> View {
    let p = policy();
    let mut v = View::empty(&p);
    for pod in pods {
        v.apply_pod(Arc::new(pod), &p);
    }
    v
}

fn actions(v: &View) -> Vec<Action> {
    reconcile(v, &policy(), NOW, true, STUCK_AFTER)
}

fn copies(actions: &[Action]) -> Vec<(&str, bool)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Copy(c) => Some((c.intent.name.as_str(), c.confirm_deleted)),
            _ => None,
        })
        .collect()
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

/// Evicted through the Eviction API (a drain) rather than preempted.
fn drained() -> Pod {
    Pod { preempted: false, evicted: true, ..marked() }
}

#[test]
fn a_drained_bare_pod_is_copied_only_where_its_class_opts_in() {
    assert!(actions(&view_of(vec![drained(), deleting(drained())])).is_empty(), "requeue.afterEviction is off");

    let mut p = policy();
    p.classes.iter_mut().for_each(|c| c.requeue.after_eviction = true);
    let mut v = View::empty(&p);
    for pod in [drained(), deleting(drained())] {
        v.apply_pod(Arc::new(pod), &p);
    }
    let a = reconcile(&v, &p, NOW, true, STUCK_AFTER);
    assert_eq!(copies(&a), [("free-3", false)]);
}

#[test]
fn a_preempted_bare_pod_is_copied_once_its_deletion_is_seen() {
    assert!(actions(&view_of(vec![marked()])).is_empty(), "the mark alone is not a preemption");
    let a = actions(&view_of(vec![marked(), deleting(marked())]));
    assert_eq!(copies(&a), [("free-3", false)]);
    let Action::Copy(c) = &a[0] else { unreachable!() };
    assert_eq!(c.intent.replacement, replacement_name(&original()));
    assert_eq!(c.intent.node, "n1");
    assert_eq!(c.intent.attempt, 1);
    assert_eq!(&*c.source, r#"{"metadata":{"uid":"u-1"}}"#);
}

#[test]
fn a_pod_gone_at_once_is_copied_once_the_api_server_confirms_it_was_deleted() {
    // Grace 0: the watch shows the mark, then the pod leaves with no deletionTimestamp. A
    // pod that succeeded on its own after the mark leaves the same way: the edge asks.
    let p = policy();
    let mut v = view_of(vec![marked()]);
    v.remove_deleted_pod("batch/free-3", &marked(), &p);
    assert_eq!(copies(&actions(&v)), [("free-3", true)]);
}

#[test]
fn a_pod_deleted_without_the_mark_is_never_copied() {
    let p = policy();
    let mut v = view_of(vec![deleting(original())]);
    v.remove_deleted_pod("batch/free-3", &deleting(original()), &p);
    assert!(actions(&v).is_empty());
}

#[test]
fn a_pod_that_succeeded_while_terminating_is_not_copied() {
    let done = Pod { phase: Some(Phase::Succeeded), ..deleting(marked()) };
    assert!(actions(&view_of(vec![marked(), done])).is_empty());
}

#[test]
fn owned_pods_and_classes_that_do_not_requeue_are_not_copied() {
    let owned = Pod {
        controller: Some(crate::model::OwnerRef { kind: "ReplicaSet".into(), name: "rs".into() }),
        ..deleting(marked())
    };
    assert!(actions(&view_of(vec![owned])).is_empty());
    // Priority 9500: the online class, never a victim under the policy.
    let online = Pod { priority: Some(9500), ..deleting(marked()) };
    assert!(actions(&view_of(vec![online])).is_empty());
    let opted_out = {
        let mut p = deleting(marked());
        p.annotations.insert(marks::OPT_OUT.into(), "never".into());
        p
    };
    assert!(actions(&view_of(vec![opted_out])).is_empty());
}

#[test]
fn a_pod_requeued_max_attempts_times_is_not_copied_and_says_why() {
    let mut tired = deleting(marked());
    tired.annotations.insert(ATTEMPT.into(), "5".into());
    tired.annotations.insert(FROM_UID.into(), "u-0".into());
    let v = view_of(vec![tired]);
    assert!(actions(&v).is_empty());
    let e = v.evictions().iter().next().expect("the eviction is seen");
    assert!(uncopied(&v, &policy(), e).is_some_and(|(_, why)| why.contains("maxAttempts 5")));
}

fn namespace(name: &str, requeue: bool) -> crate::model::Namespace {
    crate::model::Namespace { name: name.into(), requeue }
}

#[test]
fn a_pod_in_a_namespace_that_has_not_opted_in_is_not_copied_and_says_why() {
    let mut v = view_of(vec![marked(), deleting(marked())]);
    v.watch_namespaces();
    assert!(actions(&v).is_empty(), "a namespace not seen yet takes no copy");
    v.apply_namespace(namespace("batch", false));
    assert!(actions(&v).is_empty());
    let e = v.evictions().iter().next().expect("the eviction is seen");
    let (reason, why) = uncopied(&v, &policy(), e).expect("said");
    assert_eq!(reason, "namespace_not_opted_in");
    assert!(
        why.contains("namespace batch has not opted in") && why.contains("coloc-extender.io/requeue=enabled"),
        "{why}"
    );

    v.apply_namespace(namespace("batch", true));
    assert_eq!(copies(&actions(&v)), [("free-3", false)]);
    assert!(uncopied(&v, &policy(), v.evictions().iter().next().expect("seen")).is_none());
}

#[test]
fn a_replica_names_the_namespaces_whose_bare_pods_it_protects_for_want_of_an_opt_in() {
    let owned = Pod {
        name: "owned".into(),
        uid: "u-2".into(),
        controller: Some(crate::model::OwnerRef { kind: "Job".into(), name: "j".into() }),
        ..original()
    };
    let mut v = view_of(vec![original(), owned, Pod { namespace: "other".into(), uid: "u-3".into(), ..original() }]);
    v.watch_namespaces();
    v.apply_namespace(namespace("batch", false));
    v.apply_namespace(namespace("other", true));
    let found = protected_for_namespace(&v, &policy());
    assert_eq!(found.iter().map(|(ns, n, _)| (ns.as_str(), *n)).collect::<Vec<_>>(), [("batch", 1)]);
}

#[test]
fn without_copies_nothing_is_copied_but_copies_left_are_still_released() {
    let v = view_of(vec![deleting(marked()), copy_of(&other("b", "u-b"), true)]);
    let a = reconcile(&v, &policy(), NOW, false, STUCK_AFTER);
    assert!(copies(&a).is_empty(), "{a:?}");
    assert_eq!(released(&a), [replacement_name(&other("b", "u-b"))]);
}

fn other(name: &str, uid: &str) -> Pod {
    Pod { name: name.into(), uid: uid.into(), ..marked() }
}

#[test]
fn a_copy_in_the_view_is_not_stored_again() {
    let v = view_of(vec![deleting(marked()), copy_of(&original(), true)]);
    assert!(copies(&actions(&v)).is_empty());
    assert!(v.evictions().is_empty(), "the eviction is forgotten once its copy shows up");
}

#[test]
fn an_original_seen_again_after_its_copy_is_not_an_eviction_again() {
    // The kubelet's last status of a copied original (the watch's final event for it).
    let p = policy();
    let mut v = view_of(vec![deleting(marked()), copy_of(&original(), true)]);
    v.apply_pod(Arc::new(Pod { phase: Some(Phase::Failed), ..deleting(marked()) }), &p);
    v.remove_deleted_pod("batch/free-3", &deleting(marked()), &p);
    assert!(v.evictions().is_empty(), "{:?}", v.evictions().iter().map(|e| e.pod.key()).collect::<Vec<_>>());
}

#[test]
fn a_gang_is_not_held_by_a_member_requeue_will_never_copy() {
    let (a, mut b) = (member("a", "u-a"), member("b", "u-b"));
    b.annotations.insert(ATTEMPT.into(), "5".into());
    b.annotations.insert(FROM_UID.into(), "u-b0".into());
    let p = policy();
    let mut v = view_of(vec![copy_of(&a, true), deleting(b.clone())]);
    v.remove_deleted_pod("batch/b", &deleting(b), &p);
    assert_eq!(released(&actions(&v)).len(), 1, "{:?}", actions(&v));
}

#[test]
fn a_copy_waits_while_its_original_terminates() {
    assert!(actions(&view_of(vec![deleting(marked()), copy_of(&original(), true)])).is_empty());
}

#[test]
fn a_copy_is_released_once_its_original_is_gone_after_the_api_server_agrees() {
    let a = actions(&view_of(vec![copy_of(&original(), true)]));
    assert!(matches!(&a[..], [Action::Release(r)] if r.confirm_gone && r.gates == [GATE] && r.stuck.is_none()));
}

#[test]
fn a_copy_whose_original_is_stuck_terminating_is_released_after_the_bound() {
    let stuck = Pod { deletion_time: Some(NOW - STUCK_AFTER - 1), ..marked() };
    let a = actions(&view_of(vec![stuck, copy_of(&original(), true)]));
    assert!(
        matches!(&a[..], [Action::Release(r)] if r.stuck.as_ref().is_some_and(|s| s.contains("still terminating")))
    );
    let within = Pod { deletion_time: Some(NOW - STUCK_AFTER + 1), ..marked() };
    assert!(actions(&view_of(vec![within, copy_of(&original(), true)])).is_empty());
}

#[test]
fn a_copy_whose_original_is_not_being_deleted_is_deleted() {
    // An earlier release stored copies before kube-scheduler evicted; this one never came.
    let a = actions(&view_of(vec![original(), copy_of(&original(), true)]));
    assert!(matches!(&a[..], [Action::Delete { reason, .. }] if reason.contains("not being deleted")), "{a:?}");
}

#[test]
fn a_released_copy_is_left_alone() {
    assert!(actions(&view_of(vec![copy_of(&original(), false)])).is_empty());
}

fn member(name: &str, uid: &str) -> Pod {
    let mut p = Pod { name: name.into(), uid: uid.into(), ..marked() };
    p.labels.insert("scheduling.x-k8s.io/pod-group".into(), "g".into());
    p
}

#[test]
fn a_gang_comes_back_together_once_every_member_is_gone() {
    let (a, b) = (member("a", "u-a"), member("b", "u-b"));
    // a is gone, b still terminates: a's copy waits for b's.
    let waiting = view_of(vec![copy_of(&a, true), deleting(b.clone()), copy_of(&b, true)]);
    assert!(released(&actions(&waiting)).is_empty(), "{:?}", actions(&waiting));
    // b is gone too, its copy not stored yet: still waiting.
    let p = policy();
    let mut not_copied = view_of(vec![copy_of(&a, true), deleting(b.clone())]);
    not_copied.remove_deleted_pod("batch/b", &deleting(b.clone()), &p);
    let acts = actions(&not_copied);
    assert!(released(&acts).is_empty() && copies(&acts) == [("b", false)], "{acts:?}");
    // Both gone, both copies stored: released in the same pass.
    let gone = view_of(vec![copy_of(&a, true), copy_of(&b, true)]);
    let acts = actions(&gone);
    assert_eq!(released(&acts).len(), 2, "{acts:?}");
    assert!(gone.gang_of(&copy_of(&a, true)).is_some_and(|g: GangRef| g.name == "g"));
}
