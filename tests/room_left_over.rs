//! Room left over: what a plan's owners lose is shared among the online pods its freed
//! room places, the preemptor and those already waiting for room that fit in what is left.
//! So a victim that frees room for two online pods can go before a tighter, cheaper one
//! that frees room for one, and the next pod needs no eviction of its own.

mod common;

use std::collections::BTreeMap;

use coloc_extender::model::Pod;
use coloc_extender::policy::Policy;
use common::*;

/// Restarts priced at nothing: the run thrown away alone decides.
fn run_alone() -> Policy {
    Policy::from_yaml(
        r#"
defaultClass: unclassified
classes:
  - name: online
    match: [{priorityClassNames: [online]}]
    preempts: [free]
  - name: free
    match: [{priorityClassNames: [free]}]
    victim: {allowed: true, pdb: prefer, recreatableOnly: true, restartCost: 0, interruptionCost: 0}
  - name: unclassified
"#,
    )
    .expect("test policy is valid")
}

/// n1: one free pod of 2 CPUs that ran 1,000 s (2,000 CPU-s); n2: two of 1 CPU that ran
/// 1,200 s each. The 1-CPU preemptor needs one of n2's (1,200 CPU-s), or n1's whole pod,
/// which leaves a CPU over.
fn one_bigger_or_one_tighter(waiting: Option<Pod>) -> Outcome {
    let s = Scenario::new(run_alone()).node(node("n1", 2000, 8)).node(node("n2", 2000, 8)).pods([
        pod("big", "free", Some("n1"), 2000).started(1000),
        pod("small-1", "free", Some("n2"), 1000).started(1200),
        pod("small-2", "free", Some("n2"), 1000).started(1200),
    ]);
    let s = match waiting {
        Some(w) => s.pods([w]),
        None => s,
    };
    s.preempt(pod("preemptor", "online", None, 1000), &["n1", "n2"])
}

/// An online pod kube-scheduler already found no room for.
fn unschedulable(name: &str, milli_cpu: i64) -> Pod {
    Pod { unschedulable: true, ..pod(name, "online", None, milli_cpu) }
}

fn node_of(out: &Outcome) -> Vec<String> {
    out.victims().into_keys().collect()
}

#[test]
fn a_victim_whose_room_also_places_an_online_pod_already_waiting_goes_before_a_tighter_one() {
    // Shared by two: 1,000 CPU-s each against n2's 1,200 for the preemptor alone.
    let out = one_bigger_or_one_tighter(Some(unschedulable("waiting", 1000)));
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["big"]))]), "{}", out.explain());
    assert!(out.has("charged", "room_left_over"), "{}", out.explain());
    let n1 = out.explanations.iter().find(|e| e.code == "candidate" && e.node.as_deref() == Some("n1")).unwrap();
    assert!(
        n1.detail.contains("owners lose 2000 CPU-s, 1000 CPU-s for each of the 2 online pods its room places"),
        "{}",
        n1.detail
    );

    // With nobody waiting, the room left over is worth nothing: 2,000 against 1,200.
    let out = one_bigger_or_one_tighter(None);
    assert_eq!(node_of(&out), ["n2"], "{}", out.explain());
    assert!(!out.has("charged", "room_left_over"), "{}", out.explain());
}

#[test]
fn a_waiting_pod_shares_the_cost_only_where_it_needs_a_preemption_too() {
    // Not yet tried and asking less than the preemptor: it may fit somewhere as is.
    let out = one_bigger_or_one_tighter(Some(pod("not-tried-smaller", "online", None, 500)));
    assert_eq!(node_of(&out), ["n2"], "{}", out.explain());
    // Not yet tried but asking as much: it fits nowhere the preemptor did not.
    let out = one_bigger_or_one_tighter(Some(pod("not-tried-as-big", "online", None, 1000)));
    assert_eq!(node_of(&out), ["n1"], "{}", out.explain());
    // Found unschedulable, but too big for what is left over.
    let out = one_bigger_or_one_tighter(Some(unschedulable("too-big", 1500)));
    assert_eq!(node_of(&out), ["n2"], "{}", out.explain());
    // Offline pods waiting share nothing: they would take the room online pods need.
    let out = one_bigger_or_one_tighter(Some(Pod { unschedulable: true, ..pod("batch", "free", None, 1000) }));
    assert_eq!(node_of(&out), ["n2"], "{}", out.explain());
}

#[test]
fn an_online_pod_nominated_elsewhere_or_gated_is_not_waiting_for_this_room() {
    let nominated = Pod { nominated_node_name: Some("n9".into()), ..unschedulable("nominated", 1000) };
    let out = one_bigger_or_one_tighter(Some(nominated));
    assert_eq!(node_of(&out), ["n2"], "{}", out.explain());
    let gated = Pod { scheduling_gates: vec!["hold".into()], ..unschedulable("gated", 1000) };
    let out = one_bigger_or_one_tighter(Some(gated));
    assert_eq!(node_of(&out), ["n2"], "{}", out.explain());
}
