use std::sync::Arc;

use super::*;
use crate::model::copy_spec::SpecDigest;
use crate::model::marks::replacement_name;
use crate::model::{GangRef, Phase};

const NOW: i64 = 1_800_000_000;
/// Priority 6000: class batch of the default policy, which requeues bare victims.
const BATCH: i32 = 6000;

fn policy() -> Policy {
    Policy::builtin_default().enforced()
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

/// The digest of the spec `p`'s copy carries (any fixed value per pod will do here).
fn spec_of(p: &Pod) -> Option<SpecDigest> {
    Some(SpecDigest::of_bytes(p.name.as_bytes()))
}

/// `original` as kube-scheduler marks it, with its bytes kept (decoded so by the watch).
fn marked() -> Pod {
    let p = original();
    Pod { preempted: true, last_state: Some(Arc::from(r#"{"metadata":{"uid":"u-1"}}"#)), spec_digest: spec_of(&p), ..p }
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
        creation_time: Some(NOW - 5),
        spec_digest: p.spec_digest.clone(),
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

fn view_of(pods: Vec<Pod>) -> RequeueView {
    let p = policy();
    let mut v = RequeueView::empty(&p);
    for pod in pods {
        v.apply_pod(Arc::new(pod), &p);
    }
    v
}

fn actions(v: &RequeueView) -> Vec<Action> {
    reconcile(v, &policy(), NOW, true, Bounds::default())
}

/// The view once `p`, evicted and seen going, has left: its eviction recorded, its copy
/// (if any) stored.
fn gone_after_eviction(p: &Pod, others: Vec<Pod>) -> RequeueView {
    let mut pods = vec![deleting(p.clone())];
    pods.extend(others);
    let mut v = view_of(pods);
    v.remove_deleted_pod(&p.key(), &deleting(p.clone()), &policy());
    v
}

fn unrecorded(actions: &[Action]) -> Vec<(&str, &'static str, bool)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Unrecorded(u) => Some((u.name.as_str(), u.reason, u.delete)),
            _ => None,
        })
        .collect()
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
    let mut v = RequeueView::empty(&p);
    for pod in [drained(), deleting(drained())] {
        v.apply_pod(Arc::new(pod), &p);
    }
    let a = reconcile(&v, &p, NOW, true, Bounds::default());
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
    assert_eq!(c.source.as_deref(), Some(r#"{"metadata":{"uid":"u-1"}}"#));
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
    let opt_in = crate::model::NamespaceOptIn { copies: requeue, beyond_baseline: false };
    crate::model::Namespace { name: name.into(), opt_in }
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
fn a_replica_names_the_namespaces_whose_bare_pods_are_last_resort_victims_for_want_of_an_opt_in() {
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
    let found = last_resort_namespaces(&v, &policy());
    assert_eq!(found.iter().map(|(ns, n, _)| (ns.as_str(), *n)).collect::<Vec<_>>(), [("batch", 1)]);
}

#[test]
fn without_copies_nothing_is_copied_but_copies_left_are_still_released() {
    let b = other("b", "u-b");
    let mut v = gone_after_eviction(&b, vec![copy_of(&b, true)]);
    v.apply_pod(Arc::new(deleting(marked())), &policy());
    let a = reconcile(&v, &policy(), NOW, false, Bounds::default());
    assert!(copies(&a).is_empty(), "{a:?}");
    assert_eq!(released(&a), [replacement_name(&b)]);
}

fn other(name: &str, uid: &str) -> Pod {
    Pod { name: name.into(), uid: uid.into(), ..marked() }
}

#[test]
fn a_copy_in_the_view_is_not_stored_again() {
    let mut v = view_of(vec![deleting(marked()), copy_of(&marked(), true)]);
    assert!(copies(&actions(&v)).is_empty());
    let e = v.evictions().get("u-1").expect("the eviction is kept until its copy is released");
    assert!(e.copied);
    assert!(v.last_state("u-1").is_none(), "its bytes are needed no more");
    // The original's next event (its containers stopping) carries them again: not kept.
    v.apply_pod(Arc::new(Pod { phase: Some(Phase::Failed), ..deleting(marked()) }), &policy());
    assert!(v.last_state("u-1").is_none());
}

#[test]
fn an_original_seen_again_after_its_copy_is_released_is_not_an_eviction_again() {
    // Released while it still terminates (stuck); then the kubelet's last status of the
    // original, and the watch's final event for it.
    let p = policy();
    let mut v = view_of(vec![deleting(marked()), copy_of(&marked(), true)]);
    v.apply_pod(Arc::new(copy_of(&marked(), false)), &p);
    assert!(v.evictions().is_empty(), "done with once its copy is released");
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
    let mut v = gone_after_eviction(&a, vec![copy_of(&a, true), deleting(b.clone())]);
    v.remove_deleted_pod("batch/b", &deleting(b), &p);
    assert_eq!(released(&actions(&v)).len(), 1, "{:?}", actions(&v));
}

#[test]
fn a_copy_waits_while_its_original_terminates() {
    assert!(actions(&view_of(vec![deleting(marked()), copy_of(&marked(), true)])).is_empty());
}

#[test]
fn a_copy_is_released_once_its_original_is_gone_after_the_api_server_agrees() {
    let a = actions(&gone_after_eviction(&marked(), vec![copy_of(&marked(), true)]));
    assert!(matches!(&a[..], [Action::Release(r)] if r.confirm_gone && r.gates == [GATE] && r.stuck.is_none()));
}

#[test]
fn a_copy_whose_original_is_stuck_terminating_is_released_after_the_bound() {
    let stuck = Pod { deletion_time: Some(NOW - STUCK_AFTER - 1), ..marked() };
    let a = actions(&view_of(vec![stuck, copy_of(&marked(), true)]));
    assert!(
        matches!(&a[..], [Action::Release(r)] if r.stuck.as_ref().is_some_and(|s| s.contains("still terminating")))
    );
    let within = Pod { deletion_time: Some(NOW - STUCK_AFTER + 1), ..marked() };
    assert!(actions(&view_of(vec![within, copy_of(&marked(), true)])).is_empty());
}

#[test]
fn a_copy_whose_original_is_not_being_deleted_is_deleted() {
    // An earlier release stored copies before kube-scheduler evicted; this one never came.
    let a = actions(&view_of(vec![original(), copy_of(&marked(), true)]));
    assert!(matches!(&a[..], [Action::Delete { reason, .. }] if reason.contains("not being deleted")), "{a:?}");
}

#[test]
fn a_released_copy_is_left_alone() {
    assert!(actions(&view_of(vec![copy_of(&marked(), false)])).is_empty());
}

// ---- only what it recorded is released ------------------------------------------------

/// A gated "copy" of no original, made by whoever holds the requeue identity: root, another
/// ServiceAccount, every toleration. Its name and annotations are a copy's.
fn forged() -> Pod {
    let ghost = Pod { name: "ghost".into(), uid: "u-ghost".into(), ..original() };
    Pod { spec_digest: Some(SpecDigest::of_bytes(b"runAsUser 0, admin, tolerate all")), ..copy_of(&ghost, true) }
}

#[test]
fn a_gated_copy_of_no_recorded_eviction_is_never_released_and_deleted_after_the_bound() {
    let a = actions(&view_of(vec![forged()]));
    assert_eq!(unrecorded(&a), [(forged().name.as_str(), "no_record", false)], "said, not yet deleted: {a:?}");
    assert!(released(&a).is_empty());
    let old = Pod { creation_time: Some(NOW - UNRECORDED_AFTER), ..forged() };
    let a = actions(&view_of(vec![old.clone()]));
    assert_eq!(unrecorded(&a), [(old.name.as_str(), "no_record", true)], "deleted once the bound has passed");
    assert!(released(&a).is_empty());
}

#[test]
fn a_copy_is_released_only_with_the_spec_requeue_builds_from_the_recorded_original() {
    let other_spec = Pod { spec_digest: Some(SpecDigest::of_bytes(b"tolerate all")), ..copy_of(&marked(), true) };
    let a = actions(&gone_after_eviction(&marked(), vec![other_spec]));
    assert_eq!(unrecorded(&a), [(replacement_name(&marked()).as_str(), "spec_differs", false)], "{a:?}");
    assert!(released(&a).is_empty());
    // Under another name, or a second pod claiming the same original: never released.
    let renamed = Pod { name: "free-3-rq-forged".into(), ..copy_of(&marked(), true) };
    let a = actions(&gone_after_eviction(&marked(), vec![copy_of(&marked(), true), renamed]));
    assert_eq!(released(&a), [replacement_name(&marked())]);
    assert_eq!(unrecorded(&a), [("free-3-rq-forged", "other_name", false)]);
}

#[test]
fn a_replica_started_while_the_original_terminates_records_it_and_releases_its_copy() {
    // The list of a replica that starts: the copy may come before its original.
    let mut v = view_of(vec![copy_of(&marked(), true), deleting(marked())]);
    assert!(actions(&v).is_empty(), "adopted: the copy waits for its original");
    v.remove_deleted_pod("batch/free-3", &deleting(marked()), &policy());
    assert_eq!(released(&actions(&v)), [replacement_name(&marked())]);
}

#[test]
fn a_copy_whose_original_went_before_any_replica_saw_it_go_is_unrecorded() {
    // Requeue's one window: no replica ran from the mark until the original was gone.
    let a = actions(&view_of(vec![copy_of(&marked(), true)]));
    assert_eq!(unrecorded(&a), [(replacement_name(&marked()).as_str(), "no_record", false)]);
}

// ---- what is copied, and how ---------------------------------------------------------------

#[test]
fn a_bare_pod_beyond_baseline_is_not_copied_and_says_which_control() {
    let host = Pod { beyond_baseline: Some(crate::model::BaselineControl::HostPathVolumes), ..deleting(marked()) };
    let v = view_of(vec![host]);
    assert!(copies(&actions(&v)).is_empty());
    let e = v.evictions().get("u-1").expect("its eviction is recorded");
    let (reason, why) = uncopied(&v, &policy(), e).expect("said");
    assert_eq!(reason, "beyond_baseline");
    assert!(why.contains("a hostPath volume") && why.contains("requeue-beyond-baseline=enabled"), "{why}");
}

#[test]
fn a_namespace_that_opted_in_beyond_baseline_gets_its_copy() {
    let ports = Pod { beyond_baseline: Some(crate::model::BaselineControl::HostPorts), ..deleting(marked()) };
    let mut v = view_of(vec![ports]);
    v.watch_namespaces();
    v.apply_namespace(namespace("batch", true));
    assert!(copies(&actions(&v)).is_empty(), "within baseline only, by default");
    let beyond = crate::model::NamespaceOptIn { copies: true, beyond_baseline: true };
    v.apply_namespace(crate::model::Namespace { name: "batch".into(), opt_in: beyond });
    assert_eq!(copies(&actions(&v)), [("free-3", false)]);
    assert!(uncopied(&v, &policy(), v.evictions().get("u-1").expect("recorded")).is_none());
}

/// A pod of `name` that is not the copy of free-3 (another original's, or no copy at all).
fn stranger(name: &str, from_uid: Option<&str>) -> Pod {
    let mut p = Pod { name: name.into(), uid: format!("s-{name}"), phase: Some(Phase::Pending), ..original() };
    p.node_name = None;
    if let Some(uid) = from_uid {
        p.annotations.insert(FROM_UID.into(), uid.into());
    }
    p
}

#[test]
fn a_pod_holding_the_copys_name_passes_it_to_the_next_and_all_taken_is_said() {
    let names = replacement_names(&marked());
    let v = view_of(vec![deleting(marked()), stranger(&names[0], Some("someone-else"))]);
    let a = actions(&v);
    let [Action::Copy(c)] = &a[..] else { panic!("{a:?}") };
    assert_eq!(c.intent.replacement, names[1]);
    assert_eq!(c.names, names[1..]);

    let mut all = vec![deleting(marked())];
    all.extend(names.iter().map(|n| stranger(n, None)));
    let v = view_of(all);
    assert!(copies(&actions(&v)).is_empty());
    let (reason, why) = uncopied(&v, &policy(), v.evictions().get("u-1").expect("recorded")).expect("said");
    assert_eq!(reason, "name_taken");
    assert!(why.contains(&names[3]), "{why}");
}

#[test]
fn a_copy_stored_under_its_next_name_is_its_copy() {
    let names = replacement_names(&marked());
    let next = Pod { name: names[1].clone(), ..copy_of(&marked(), true) };
    let mut v = view_of(vec![deleting(marked()), stranger(&names[0], None), next]);
    assert!(actions(&v).is_empty(), "stored, waiting");
    v.remove_deleted_pod("batch/free-3", &deleting(marked()), &policy());
    assert_eq!(released(&actions(&v)), [names[1].clone()]);
}

/// A pending pod of `namespace` nominated to n1 (kube-scheduler's preemptor).
fn nominated(namespace: &str) -> Pod {
    Pod {
        name: "preemptor".into(),
        namespace: namespace.into(),
        uid: format!("p-{namespace}"),
        phase: Some(Phase::Pending),
        priority: Some(9500),
        nominated_node_name: Some("n1".into()),
        ..Default::default()
    }
}

#[test]
fn an_eviction_for_the_victims_own_namespace_does_not_count_another_namespaces_does() {
    let attempt = |preemptor: Pod| {
        let a = actions(&view_of(vec![preemptor, marked(), deleting(marked())]));
        let [Action::Copy(c)] = &a[..] else { panic!("{a:?}") };
        (c.intent.attempt, c.self_inflicted)
    };
    assert_eq!(attempt(nominated("batch")), (0, true), "self-inflicted: the count stays");
    assert_eq!(attempt(nominated("online")), (1, false));
    let a = actions(&view_of(vec![marked(), deleting(marked())]));
    assert!(matches!(&a[..], [Action::Copy(c)] if c.intent.attempt == 1), "no preemptor seen: it counts");
}

#[test]
fn a_pod_whose_state_is_not_kept_is_copied_from_the_api_server() {
    // Over the bound per pod: the watch decoded its digest but kept no bytes.
    let large = Pod { last_state: None, ..deleting(marked()) };
    let a = actions(&view_of(vec![large]));
    assert!(matches!(&a[..], [Action::Copy(c)] if c.source.is_none()), "{a:?}");
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
    let waiting = gone_after_eviction(&a, vec![copy_of(&a, true), deleting(b.clone()), copy_of(&b, true)]);
    assert!(released(&actions(&waiting)).is_empty(), "{:?}", actions(&waiting));
    // b is gone too, its copy not stored yet: still waiting.
    let p = policy();
    let mut not_copied = gone_after_eviction(&a, vec![copy_of(&a, true), deleting(b.clone())]);
    not_copied.remove_deleted_pod("batch/b", &deleting(b.clone()), &p);
    let acts = actions(&not_copied);
    assert!(released(&acts).is_empty() && copies(&acts) == [("b", false)], "{acts:?}");
    // Both gone, both copies stored: released in the same pass.
    let mut gone = gone_after_eviction(&a, vec![copy_of(&a, true), deleting(b.clone()), copy_of(&b, true)]);
    gone.remove_deleted_pod("batch/b", &deleting(b.clone()), &p);
    let acts = actions(&gone);
    assert_eq!(released(&acts).len(), 2, "{acts:?}");
    assert!(gone.gang_of(&copy_of(&a, true)).is_some_and(|g: GangRef| g.name == "g"));
}
