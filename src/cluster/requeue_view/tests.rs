//! The requeue controller's view records evictions, keeps the bytes it copies from within
//! their bound, and counts the changes its controller reacts to.

use std::sync::Arc;

use super::*;

fn policy() -> Policy {
    Policy::builtin_default().enforced()
}

/// A running pod of priority 100.
fn pod(ns: &str, name: &str, node: Option<&str>) -> Pod {
    let uid = format!("uid-{ns}-{name}");
    let (name, namespace, node_name) = (name.into(), ns.into(), node.map(Into::into));
    Pod { name, namespace, uid, priority: Some(100), node_name, phase: Some("Running".into()), ..Default::default() }
}

#[test]
fn only_what_requeue_reacts_to_counts_as_a_requeue_change() {
    let p = policy();
    let mut v = RequeueView::empty(&p);
    v.apply_pod(Arc::new(pod("batch", "a", None)), &p);
    v.apply_pod(Arc::new(pod("batch", "a", Some("n1"))), &p);
    assert_eq!(v.changes(), 0, "a create and a bind are not");
    v.apply_pod(Arc::new(Pod { preempted: true, ..pod("batch", "a", Some("n1")) }), &p);
    assert_eq!(v.changes(), 1, "kube-scheduler's mark is");
    v.remove_pod("batch/a", &p);
    assert_eq!(v.changes(), 2, "the marked pod going is");
    let mut copy = pod("batch", "a-rq-1", None);
    copy.annotations.insert(crate::model::marks::FROM_UID.into(), "uid-batch-a".into());
    v.apply_pod(Arc::new(copy), &p);
    assert_eq!(v.changes(), 3, "a copy is");
}

// ---- the bytes requeue keeps ---------------------------------------------------------------

/// A bare batch pod (requeued by the default policy) marked preempted, as the watch decodes
/// it: its JSON of `size` bytes and its spec's digest.
fn marked(name: &str, size: usize) -> Pod {
    Pod {
        controller: None,
        priority: Some(6000),
        priority_class_name: None,
        preempted: true,
        last_state: Some(Arc::from("x".repeat(size))),
        spec_digest: Some(crate::model::copy_spec::SpecDigest::of_bytes(name.as_bytes())),
        ..pod("batch", name, Some("n1"))
    }
}

#[test]
fn a_marked_pods_bytes_are_kept_apart_and_go_once_nothing_needs_them() {
    let p = policy();
    let mut view = RequeueView::empty(&p);
    view.apply_pod(Arc::new(marked("a", 100)), &p);
    assert!(view.pod("batch/a").is_some_and(|a| a.last_state.is_none()), "the pod holds no bytes");
    assert_eq!(view.last_state("uid-batch-a").map(|s| s.len()), Some(100));
    // Its mark reset (the delete never came): nothing to copy from.
    view.apply_pod(Arc::new(Pod { preempted: false, last_state: None, ..marked("a", 100) }), &p);
    assert!(view.last_state("uid-batch-a").is_none());
    // A class that does not requeue: never kept.
    view.apply_pod(Arc::new(Pod { priority: Some(9500), ..marked("b", 100) }), &p);
    assert_eq!(view.kept_states().len(), 0);
    // Gone without an eviction recorded (it succeeded after the mark): forgotten.
    view.apply_pod(Arc::new(marked("c", 100)), &p);
    view.apply_pod(Arc::new(Pod { phase: Some(crate::model::Phase::Succeeded), ..marked("c", 100) }), &p);
    assert!(view.pod("batch/c").is_none());
    assert_eq!(view.kept_states().len(), 0);
    // Gone at the delete, its eviction recorded: kept for the copy.
    view.apply_pod(Arc::new(marked("d", 100)), &p);
    view.remove_deleted_pod("batch/d", &marked("d", 100), &p);
    assert!(view.evictions().get("uid-batch-d").is_some() && view.last_state("uid-batch-d").is_some());
    // A re-index under a new policy keeps them.
    assert!(view.rebuild(&p).last_state("uid-batch-d").is_some());
}

/// The pod and its eviction's record keep only the annotations decisions read; the bytes
/// requeue copies from keep every one.
#[test]
fn a_marked_pod_keeps_the_annotations_decisions_read_and_its_bytes_all_of_them() {
    use crate::model::{marks, Labels};
    let p = policy();
    let mut view = RequeueView::empty(&p);
    let notes = "n".repeat(64 * 1024);
    let json: Arc<str> = Arc::from(format!(r#"{{"metadata":{{"annotations":{{"notes":"{notes}"}}}}}}"#));
    let annotations = Labels::from([("notes", notes.as_str()), (marks::BASE_NAME, "first"), ("team", "ml")]);
    let d = Pod { annotations, last_state: Some(json.clone()), ..marked("d", 0) };
    view.apply_pod(Arc::new(d.clone()), &p);
    let read = Labels::from([(marks::BASE_NAME, "first")]);
    assert_eq!(view.pod("batch/d").unwrap().annotations, read);
    // Gone at the delete: the record is made from the event's pod.
    view.remove_deleted_pod("batch/d", &d, &p);
    assert_eq!(view.evictions().get("uid-batch-d").unwrap().pod.annotations, read);
    assert_eq!(view.last_state("uid-batch-d"), Some(&json));
}

#[test]
fn many_large_marked_pods_held_terminating_keep_the_bytes_under_their_bound() {
    let p = policy();
    let mut view = RequeueView::empty(&p);
    let large = crate::cluster::kept::PER_POD - 1024;
    let held = crate::cluster::kept::TOTAL / large + 20;
    for i in 0..held {
        let pod = marked(&format!("hostile-{i}"), large);
        view.apply_pod(Arc::new(Pod { deletion_time: Some(1), ..pod }), &p);
    }
    assert!(view.kept_states().bytes() <= crate::cluster::kept::TOTAL);
    assert_eq!(view.evictions().len(), held, "every eviction recorded, its bytes kept or not");
    // An ordinary victim after them is kept: the largest go first.
    view.apply_pod(Arc::new(Pod { deletion_time: Some(2), ..marked("ordinary", 4096) }), &p);
    assert!(view.last_state("uid-batch-ordinary").is_some());
    assert!(view.kept_states().bytes() <= crate::cluster::kept::TOTAL);
}

/// A victim whose node has only pods of its own namespace nominated to it was preempted
/// by its own tenant: its copy's count stays. Another namespace's nominee counts it up.
#[test]
fn an_eviction_is_self_inflicted_only_where_every_nominee_of_its_node_is_its_namespaces() {
    let p = policy();
    let mut view = RequeueView::empty(&p);
    let nominated = |ns: &str, name: &str| Pod { nominated_node_name: Some("n1".into()), ..pod(ns, name, None) };
    view.apply_pod(Arc::new(nominated("batch", "own")), &p);
    view.apply_pod(Arc::new(Pod { deletion_time: Some(1), ..marked("a", 10) }), &p);
    assert!(view.evictions().get("uid-batch-a").unwrap().self_inflicted);
    view.apply_pod(Arc::new(nominated("online", "other")), &p);
    view.apply_pod(Arc::new(Pod { deletion_time: Some(1), ..marked("b", 10) }), &p);
    assert!(!view.evictions().get("uid-batch-b").unwrap().self_inflicted);
    // Bound, it is nominated no more.
    view.apply_pod(Arc::new(pod("online", "other", Some("n1"))), &p);
    assert_eq!(view.nominated_on("n1").len(), 1);
}
