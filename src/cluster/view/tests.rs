//! The view applies each change by itself and agrees with a view built from scratch.

use std::sync::Arc;

use super::*;
use crate::cluster::usage::{Aggregates, Counted};
use crate::model::{OwnerRef, Selector};

fn policy() -> Policy {
    Policy::builtin_default().enforced()
}

fn node(name: &str, cpu: i64) -> Node {
    Node {
        name: name.into(),
        allocatable: Resources { milli_cpu: cpu, memory: 8 << 30, ..Default::default() },
        allocatable_pods: 110,
        ..Default::default()
    }
}

fn pod(ns: &str, name: &str, node: Option<&str>) -> Pod {
    Pod {
        name: name.into(),
        namespace: ns.into(),
        uid: format!("uid-{ns}-{name}"),
        priority: Some(100),
        priority_class_name: Some("offline-batch".into()),
        node_name: node.map(Into::into),
        phase: Some("Running".into()),
        controller: Some(OwnerRef { kind: "ReplicaSet".into(), name: "rs".into() }),
        requests: Resources { milli_cpu: 500, memory: 1 << 30, ..Default::default() },
        ..Default::default()
    }
}

/// A node's pods by name (the view keeps them in arrival order).
fn names(pods: &[PodRef]) -> Vec<&str> {
    let mut names: Vec<&str> = pods.iter().map(|p| p.name.as_str()).collect();
    names.sort_unstable();
    names
}

#[test]
fn a_published_clone_does_not_change_when_the_source_moves_on() {
    let p = policy();
    let mut view = View::empty(&p);
    view.apply_node(node("n1", 4000));
    view.apply_pod(Arc::new(pod("b", "w1", Some("n1"))), &p);
    let published = view.clone();
    view.remove_pod("b/w1", &p);
    view.apply_pod(Arc::new(pod("b", "w2", Some("n1"))), &p);
    assert_eq!(names(published.pods_on("n1")), ["w1"]);
    assert_eq!(names(view.pods_on("n1")), ["w2"]);
    assert!(view.pod_by_uid("uid-b-w1").is_none());
    assert!(published.pod_by_uid("uid-b-w1").is_some());
}

#[test]
fn a_deleted_pod_is_gone_from_its_node_and_the_uid_index() {
    let p = policy();
    let mut view = View::empty(&p);
    view.apply_node(node("n1", 4000));
    view.apply_pod(Arc::new(pod("b", "w1", Some("n1"))), &p);
    let generation = view.node_generation("n1");
    assert!(view.remove_pod("b/w1", &p).is_some());
    assert!(view.pods_on("n1").is_empty());
    assert!(view.pod_by_uid("uid-b-w1").is_none());
    assert_eq!(view.pod_count(), 0);
    assert!(view.node_generation("n1") > generation, "the node's generation moves on every change");
}

#[test]
fn a_pod_that_turns_terminal_leaves_the_view() {
    let p = policy();
    let mut view = View::empty(&p);
    view.apply_node(node("n1", 4000));
    view.apply_pod(Arc::new(pod("b", "w1", Some("n1"))), &p);
    let mut done = pod("b", "w1", Some("n1"));
    done.phase = Some("Succeeded".into());
    view.apply_pod(Arc::new(done), &p);
    assert!(view.pods_on("n1").is_empty());
    assert_eq!(view.pod_count(), 0);
}

#[test]
fn a_pod_recreated_under_the_same_name_replaces_the_old_uid() {
    let p = policy();
    let mut view = View::empty(&p);
    view.apply_node(node("n1", 4000));
    view.apply_pod(Arc::new(pod("b", "w1", Some("n1"))), &p);
    let mut again = pod("b", "w1", Some("n1"));
    again.uid = "uid-new".into();
    view.apply_pod(Arc::new(again), &p);
    assert!(view.pod_by_uid("uid-b-w1").is_none());
    assert_eq!(view.pods_on("n1").len(), 1);
    assert_eq!(view.pods_on("n1")[0].uid, "uid-new");
}

#[test]
fn a_pending_pod_is_nominated_until_it_binds() {
    let p = policy();
    let mut view = View::empty(&p);
    view.apply_node(node("n1", 4000));
    let mut pending = pod("o", "web", None);
    pending.nominated_node_name = Some("n1".into());
    view.apply_pod(Arc::new(pending), &p);
    assert_eq!(names(view.nominated_on("n1")), ["web"]);
    assert!(view.pods_on("n1").is_empty());
    let bound = Arc::new(pod("o", "web", Some("n1")));
    view.apply_pod(bound.clone(), &p);
    assert!(view.nominated_on("n1").is_empty());
    assert_eq!(names(view.pods_on("n1")), ["web"]);
    // Moved in place: one pod, indexed by its new version.
    assert_eq!(view.pod_count(), 1);
    assert!(
        Arc::ptr_eq(view.pod_by_uid(&bound.uid).unwrap(), &bound) && Arc::ptr_eq(view.pod("o/web").unwrap(), &bound)
    );
    let built =
        View::build(Objects { nodes: vec![node("n1", 4000)], pods: vec![(*bound).clone()], ..Objects::default() }, &p);
    assert_eq!(view.node_info("n1").unwrap().usage(), built.node_info("n1").unwrap().usage());
}

#[test]
fn an_online_pod_waits_for_room_while_pending_and_neither_nominated_gated_nor_terminating() {
    let p = policy();
    let mut view = View::empty(&p);
    view.apply_node(node("n1", 4000));
    let online = |name: &str| Pod {
        priority: Some(10_000),
        priority_class_name: Some("online-prod".into()),
        creation_time: Some(if name == "older" { 1 } else { 2 }),
        ..pod("o", name, None)
    };
    let waiting = |view: &View| view.waiting_online().map(|p| p.name.clone()).collect::<Vec<_>>();
    view.apply_pod(Arc::new(online("web")), &p);
    view.apply_pod(Arc::new(online("older")), &p);
    view.apply_pod(Arc::new(pod("o", "batch", None)), &p);
    view.apply_pod(Arc::new(Pod { scheduling_gates: vec!["g".into()], ..online("gated") }), &p);
    assert_eq!(waiting(&view), ["older", "web"], "oldest first; offline and gated pods wait for nothing here");
    // A change in place (kube-scheduler's condition) keeps one entry, the new version.
    view.apply_pod(Arc::new(Pod { unschedulable: true, ..online("web") }), &p);
    assert_eq!(waiting(&view), ["older", "web"]);
    assert!(view.waiting_online().any(|w| w.name == "web" && w.unschedulable));
    view.apply_pod(Arc::new(online("gated")), &p);
    assert_eq!(waiting(&view), ["older", "gated", "web"], "its gate lifted (created with web: by UID then)");
    view.apply_pod(Arc::new(Pod { nominated_node_name: Some("n1".into()), ..online("web") }), &p);
    view.apply_pod(Arc::new(Pod { node_name: Some("n1".into()), ..online("older") }), &p);
    view.apply_pod(Arc::new(Pod { deletion_time: Some(5), ..online("gated") }), &p);
    assert!(waiting(&view).is_empty(), "{:?}", waiting(&view));
}

#[test]
fn a_node_holds_its_pods_whatever_order_they_arrive_in() {
    let p = policy();
    let mut view = View::empty(&p);
    for name in ["c", "a", "b"] {
        view.apply_pod(Arc::new(pod("x", name, Some("n1"))), &p);
    }
    assert_eq!(names(view.pods_on("n1")), ["a", "b", "c"]);
    assert!(view.node("n1").is_none(), "pods on a node the view has not seen yet");
    view.apply_node(node("n1", 4000));
    assert!(view.node("n1").is_some());
}

#[test]
fn a_deleted_node_keeps_its_pods_until_they_go() {
    let p = policy();
    let mut view = View::empty(&p);
    view.apply_node(node("n1", 4000));
    view.apply_pod(Arc::new(pod("b", "w1", Some("n1"))), &p);
    assert!(view.remove_node("n1"));
    assert!(view.node("n1").is_none());
    assert_eq!(view.node_count(), 0);
    assert_eq!(view.pods_on("n1").len(), 1);
    view.remove_pod("b/w1", &p);
    assert_eq!(view.node_generation("n1"), 0, "nothing left of the node");
}

#[test]
fn incremental_changes_agree_with_a_view_built_from_scratch() {
    let p = policy();
    let mut view = View::empty(&p);
    let mut objects = Objects::default();
    for n in ["n1", "n2"] {
        view.apply_node(node(n, 4000));
        objects.nodes.push(node(n, 4000));
    }
    for i in 0..6 {
        let mut w = pod("b", &format!("w{i}"), Some(if i % 2 == 0 { "n1" } else { "n2" }));
        w.labels.insert("scheduling.x-k8s.io/pod-group".into(), "g".into());
        view.apply_pod(Arc::new(w.clone()), &p);
        if i != 3 {
            objects.pods.push(w);
        }
    }
    view.remove_pod("b/w3", &p);
    // An update in place: w4 leaves the gang and asks for more.
    let w4 = Pod { requests: Resources { milli_cpu: 800, ..Default::default() }, ..pod("b", "w4", Some("n1")) };
    view.apply_pod(Arc::new(w4.clone()), &p);
    objects.pods.retain(|x| x.name != "w4");
    objects.pods.push(w4);
    let pdb = Pdb {
        name: "pdb".into(),
        namespace: "b".into(),
        selector: Some(Selector::default()),
        disruptions_allowed: 1,
        disrupted_pods: vec![],
        current_healthy: None,
    };
    view.apply_pdb(pdb.clone());
    objects.pdbs.push(pdb);
    let built = View::build(objects, &p);
    for n in ["n1", "n2"] {
        assert_eq!(names(view.pods_on(n)), names(built.pods_on(n)));
        assert_eq!(view.node_info(n).unwrap().usage(), built.node_info(n).unwrap().usage(), "{n}");
    }
    let g = view.gang_of(&view.pod("b/w0").unwrap().clone()).expect("a coscheduling gang");
    assert_eq!(view.gang_size(&g), 4);
    assert_eq!(built.gang_size(&g), 4);
    assert_eq!(view.tenant_share("b"), built.tenant_share("b"));
    assert_eq!(view.pod_count(), built.pod_count());
    let w0 = view.pod("b/w0").unwrap().clone();
    assert_eq!(view.pdbs_covering(&w0).count(), 1);
    let rebuilt = view.rebuild(&p);
    assert_eq!(rebuilt.tenant_share("b"), view.tenant_share("b"));
    assert_eq!(rebuilt.gang_size(&g), 4);
}

#[test]
fn a_gang_member_being_deleted_is_leaving_and_its_run_no_longer_the_gangs() {
    let p = policy();
    let mut view = View::empty(&p);
    view.apply_node(node("n1", 4000));
    let member = |name: &str| {
        let mut w = pod("b", name, Some("n1"));
        w.labels.insert("scheduling.x-k8s.io/pod-group".into(), "g".into());
        w.start_time = Some(0);
        w
    };
    for name in ["w0", "w1"] {
        view.apply_pod(Arc::new(member(name)), &p);
    }
    let g = view.gang_of(&member("w0")).expect("a coscheduling gang");
    let whole = view.gang_work(&g, 100);
    // w1's delete arrives: still bound (and counted a member), but leaving.
    view.apply_pod(Arc::new(Pod { deletion_time: Some(30), ..member("w1") }), &p);
    assert_eq!((view.gang_size(&g), view.gang_leaving(&g)), (2, 1));
    assert_eq!(view.gang_work(&g, 100).run * 2, whole.run, "only w0's run is the gang's");
    assert_eq!(view.rebuild(&p).gang_leaving(&g), 1);
    view.remove_pod("b/w1", &p);
    assert_eq!((view.gang_size(&g), view.gang_leaving(&g)), (1, 0));
}

#[test]
fn a_pdb_budget_counts_covered_pods_gone_since_the_controller_looked() {
    let p = policy();
    let mut view = View::empty(&p);
    let pdb = Pdb {
        name: "pdb".into(),
        namespace: "b".into(),
        selector: Some(Selector::default()),
        disruptions_allowed: 2,
        disrupted_pods: vec![],
        current_healthy: Some(3),
    };
    for name in ["w1", "w2", "w3"] {
        view.apply_pod(Arc::new(pod("b", name, Some("n1"))), &p);
    }
    view.apply_pod(Arc::new(pod("other", "x", Some("n1"))), &p);
    view.apply_pdb(pdb.clone()); // after its pods: counted once, then kept current
    assert_eq!(view.disruptions_allowed(&pdb), 2);
    view.remove_pod("b/w1", &p);
    assert_eq!(view.disruptions_allowed(&pdb), 1, "w1 was evicted; the status does not know yet");
    let mut going = pod("b", "w2", Some("n1"));
    going.deletion_time = Some(1);
    view.apply_pod(Arc::new(going), &p);
    assert_eq!(view.disruptions_allowed(&pdb), 0, "terminating counts as gone");
    view.remove_pod("b/w3", &p);
    assert_eq!(view.disruptions_allowed(&pdb), 0, "never below zero");
    view.apply_pod(Arc::new(pod("b", "w4", Some("n1"))), &p);
    view.apply_pod(Arc::new(pod("b", "w5", Some("n1"))), &p);
    assert_eq!(view.disruptions_allowed(&pdb), 1, "two new pods bound: one of three gone");
    let rebuilt = view.rebuild(&p);
    assert_eq!(rebuilt.disruptions_allowed(&pdb), 1, "counts survive a rebuild");
    let unknown = Pdb { current_healthy: None, ..pdb };
    assert_eq!(view.disruptions_allowed(&unknown), 2, "without currentHealthy the status is all we have");
    assert_eq!(view.pods_in_namespace("b").count(), 3);
    assert_eq!(view.pods_in_namespace("other").count(), 1);
}

// ---- per-node aggregates ------------------------------------------------------------------

/// The aggregates a walk over the node's pods would give.
fn walked(view: &View, node: &str, p: &Policy) -> Aggregates {
    let mut a = Aggregates::default();
    for pod in view.pods_on(node) {
        a.add(pod, Counted::of(pod, p.classify(pod, view.priority_of(pod)), p));
    }
    a
}

fn usage_of<'a>(view: &'a View, node: &str) -> &'a Aggregates {
    view.node_info(node).expect("node in the view").usage()
}

#[test]
fn node_aggregates_follow_every_pod_event_and_equal_a_walk_over_its_pods() {
    let p = policy();
    let mut view = View::empty(&p);
    view.apply_node(node("n1", 8000));
    view.apply_node(node("n2", 8000));
    let mut bare = pod("b", "bare", Some("n1"));
    bare.controller = None;
    let mut online = pod("o", "api", Some("n1"));
    online.priority = Some(10_000);
    online.priority_class_name = Some("online-prod".into());
    online.host_ports = vec![crate::model::HostPort { port: 80, protocol: "TCP".into(), ip: String::new() }];
    let mut terminating = pod("b", "w3", Some("n1"));
    terminating.deletion_time = Some(1);
    let mut moved = pod("b", "w1", Some("n2"));
    moved.requests.milli_cpu = 700;
    type Step<'a> = Box<dyn Fn(&mut View) + 'a>;
    let steps: Vec<Step<'_>> = vec![
        Box::new(|v| v.apply_pod(Arc::new(pod("b", "w1", Some("n1"))), &p)),
        Box::new(|v| v.apply_pod(Arc::new(pod("b", "w2", Some("n1"))), &p)),
        Box::new(|v| v.apply_pod(Arc::new(bare.clone()), &p)),
        Box::new(|v| v.apply_pod(Arc::new(online.clone()), &p)),
        Box::new(|v| v.apply_pod(Arc::new(terminating.clone()), &p)),
        // Updates in place: more cpu, then terminating (no longer evictable).
        Box::new(|v| {
            v.apply_pod(
                Arc::new(Pod {
                    requests: Resources { milli_cpu: 900, ..Default::default() },
                    ..pod("b", "w2", Some("n1"))
                }),
                &p,
            )
        }),
        Box::new(|v| v.apply_pod(Arc::new(Pod { deletion_time: Some(2), ..pod("b", "w2", Some("n1")) }), &p)),
        Box::new(|v| v.apply_pod(Arc::new(moved.clone()), &p)),
        Box::new(|v| drop(v.remove_pod("b/w2", &p))),
        Box::new(|v| drop(v.remove_pod("o/api", &p))),
    ];
    for (i, step) in steps.iter().enumerate() {
        step(&mut view);
        for n in ["n1", "n2"] {
            assert_eq!(usage_of(&view, n), &walked(&view, n, &p), "step {i}, {n}");
        }
    }
    let n1 = usage_of(&view, "n1");
    assert_eq!((n1.all.pods, n1.all.requested.milli_cpu), (2, 1000), "bare and terminating are left");
    assert!(n1.all.ports.is_empty(), "the online pod's host port left with it");
}

#[test]
fn a_preemptor_could_free_the_evictable_pods_of_the_classes_it_may_preempt() {
    let p = policy();
    let (online, batch) = (
        p.classes.iter().position(|c| c.name == "online").unwrap(),
        p.classes.iter().position(|c| c.name == "batch").unwrap(),
    );
    let mut view = View::empty(&p);
    view.apply_node(node("n1", 8000));
    view.apply_pod(Arc::new(pod("b", "owned", Some("n1"))), &p);
    let mut bare = pod("b", "bare", Some("n1"));
    bare.controller = None;
    view.apply_pod(Arc::new(bare), &p);
    let mut prod = pod("o", "api", Some("n1"));
    (prod.priority, prod.priority_class_name) = (Some(10_000), Some("online-prod".into()));
    view.apply_pod(Arc::new(prod), &p);
    let usage = usage_of(&view, "n1");
    // Online may evict batch: the owned pod always, the bare one only if it can be requeued.
    assert_eq!(usage.after_evicting(&p, online, false).pods, 2);
    assert_eq!(usage.after_evicting(&p, online, true).pods, 1);
    // Batch may evict only free pods: nothing here.
    assert_eq!(usage.after_evicting(&p, batch, true).pods, 3);
}

#[test]
fn the_view_remembers_pods_that_left_and_a_re_index_keeps_them() {
    let p = policy();
    let mut v = View::empty(&p);
    for name in ["done", "deleted", "marked-late", "unseen", "stays"] {
        v.apply_pod(Arc::new(pod("batch", name, Some("n1"))), &p);
    }
    v.apply_pod(Arc::new(Pod { phase: Some(crate::model::Phase::Succeeded), ..pod("batch", "done", Some("n1")) }), &p);
    v.remove_pod("batch/deleted", &p);
    v.remove_deleted_pod("batch/marked-late", &Pod { preempted: true, ..pod("batch", "marked-late", Some("n1")) }, &p);
    v.remove_unseen_pod("batch/unseen", &p);
    let rebuilt = v.rebuild(&p);
    for view in [&v, &rebuilt] {
        for name in ["done", "deleted", "marked-late", "unseen"] {
            assert!(view.saw_go(&format!("uid-batch-{name}")), "{name}");
        }
        assert!(!view.saw_go("uid-batch-stays"));
        assert!(!view.saw_go("uid-never-seen"));
    }
}

/// The decisions' view holds no pod's bytes: requeue keeps them, in a view of its own.
#[test]
fn a_marked_pod_in_the_decisions_view_holds_no_bytes() {
    let p = policy();
    let mut view = View::empty(&p);
    let marked = Pod { preempted: true, last_state: Some(Arc::from("x".repeat(100))), ..pod("batch", "a", Some("n1")) };
    view.apply_pod(Arc::new(marked), &p);
    let a = view.pod("batch/a").expect("in the view");
    assert!(a.preempted, "decisions see the mark");
    assert!(a.last_state.is_none(), "and no bytes");
}

/// `pod`, started, deleted at second 1000 with `grace` seconds of grace.
fn being_deleted(mut p: Pod, grace: i32) -> Pod {
    p.start_time = Some(900);
    p.grace_period = Some(grace);
    p.deletion_grace_period = Some(grace);
    p.deletion_time = Some(1000 + i64::from(grace));
    p
}

/// The view's clock at `secs` after the delete (which came at 1000.5 s, as the API server
/// truncates it).
fn after_delete(secs: f64) -> i64 {
    1_000_500 + (secs * 1000.0) as i64
}

#[test]
fn a_deleted_pod_gone_teaches_how_long_its_owners_pods_take_to_stop() {
    let p = policy();
    let mut view = View::empty(&p);
    view.apply_node(node("n1", 4000));
    let going = being_deleted(pod("b", "w1", Some("n1")), 300);
    view.set_clock_ms(after_delete(0.2));
    view.apply_pod(Arc::new(going.clone()), &p);
    let other = being_deleted(pod("b", "w2", Some("n1")), 300);
    assert_eq!(view.expected_stop(&other, "batch").ms, 300_000, "nothing learned yet: its grace");
    // Gone (the API server's delete after its kubelet stopped it) 42 s later.
    view.set_clock_ms(after_delete(42.0));
    view.remove_deleted_pod("b/w1", &going, &p);
    assert_eq!(view.expected_stop(&other, "batch"), Stop { ms: 42_000, basis: stop_times::Basis::Owner(1) });
}

#[test]
fn a_terminal_phase_is_the_stop_and_the_delete_after_it_teaches_nothing_more() {
    let p = policy();
    let mut view = View::empty(&p);
    view.apply_node(node("n1", 4000));
    let going = being_deleted(pod("b", "w1", Some("n1")), 30);
    view.set_clock_ms(after_delete(0.1));
    view.apply_pod(Arc::new(going.clone()), &p);
    let mut stopped = going.clone();
    stopped.phase = Some(crate::model::Phase::Failed);
    view.set_clock_ms(after_delete(3.0));
    view.apply_pod(Arc::new(stopped.clone()), &p);
    view.set_clock_ms(after_delete(3.3));
    view.remove_deleted_pod("b/w1", &stopped, &p);
    let learned = view.stop_times().get("b/ReplicaSet/rs").expect("learned");
    assert_eq!((learned.ms, learned.seen), (3_000, 1));
}

#[test]
fn pods_gone_at_no_known_time_or_that_never_ran_teach_nothing() {
    let p = policy();
    let mut view = View::empty(&p);
    view.apply_node(node("n1", 4000));
    // A snapshot's view has no clock.
    let going = being_deleted(pod("b", "w1", Some("n1")), 30);
    view.apply_pod(Arc::new(going.clone()), &p);
    view.remove_deleted_pod("b/w1", &going, &p);
    // A re-list that no longer finds it.
    view.set_clock_ms(after_delete(1.0));
    view.apply_pod(Arc::new(being_deleted(pod("b", "w2", Some("n1")), 30)), &p);
    view.remove_unseen_pod("b/w2", &p);
    // Deleted while pending, or bound but never started.
    view.apply_pod(Arc::new(being_deleted(pod("b", "w3", None), 30)), &p);
    view.remove_pod("b/w3", &p);
    let mut unstarted = being_deleted(pod("b", "w4", Some("n1")), 30);
    unstarted.start_time = None;
    view.apply_pod(Arc::new(unstarted.clone()), &p);
    view.remove_deleted_pod("b/w4", &unstarted, &p);
    // Gone without a delete (it ended on its own).
    let mut ended = pod("b", "w5", Some("n1"));
    ended.start_time = Some(900);
    view.apply_pod(Arc::new(ended.clone()), &p);
    ended.phase = Some(crate::model::Phase::Succeeded);
    view.apply_pod(Arc::new(ended), &p);
    assert!(view.stop_times().is_empty(), "{:?}", view.stop_times());
}

#[test]
fn what_was_learned_survives_a_policy_change() {
    let p = policy();
    let mut view = View::empty(&p);
    view.apply_node(node("n1", 4000));
    let going = being_deleted(pod("b", "w1", Some("n1")), 30);
    view.set_clock_ms(after_delete(0.0));
    view.apply_pod(Arc::new(going.clone()), &p);
    view.set_clock_ms(after_delete(7.0));
    view.remove_deleted_pod("b/w1", &going, &p);
    let rebuilt = view.rebuild(&p);
    assert_eq!(rebuilt.stop_times().get("b/ReplicaSet/rs").map(|l| l.ms), Some(7_000));
}
