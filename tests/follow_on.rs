//! What follows an eviction is part of its cost: a victim that comes back and finds no
//! room evicts in turn, and a pod that came back a moment ago has just been disrupted.
//! Each rule on the smallest cluster that shows it.

mod common;

use std::collections::BTreeMap;

use coloc_extender::model::{OwnerRef, Pod};
use coloc_extender::policy::Policy;
use common::*;

/// online preempts batch and free, batch preempts free; bare pods are requeued and come
/// back as `preemption` says.
fn policy_with(preemption: &str) -> Policy {
    classes()
        .victims("{allowed: true, pdb: prefer, bare: requeue}")
        .batch(&format!("requeue: {{preemption: {preemption}}}"))
        .free("requeue: {preemption: never}")
        .build()
}

fn online(cpu: i64) -> Pod {
    pod("preemptor", "online", None, cpu)
}

/// n1 holds a ReplicaSet's worker, n2 a bare batch pod of the same size and age, n3 is full
/// of a free pod; n1 and n2 have 1 CPU free, the online pod needs 2.
fn worker_beside_bare() -> Scenario {
    Scenario::new(policy_with("never"))
        .node(node("n1", 4000, 8))
        .node(node("n2", 4000, 8))
        .node(node("n3", 4000, 8))
        .pods([
            pod("worker", "batch", Some("n1"), 3000),
            pod("report", "batch", Some("n2"), 3000).bare(),
            pod("scratch", "free", Some("n3"), 4000).bare(),
        ])
}

#[test]
fn an_owned_victim_whose_return_finds_no_room_loses_to_a_bare_one_that_waits() {
    // Evicting the worker: recreated at batch priority, it finds no room and preempts the
    // free pod (two evictions). Requeuing the bare pod: its copy waits (one eviction).
    let out = worker_beside_bare().preempt(online(2000), &["n1", "n2"]);
    assert_eq!(out.victims(), BTreeMap::from([("n2".into(), uids(&["report"]))]), "{}", out.explain());
    let follow = out.explanations.iter().find(|e| e.code == "follow_on").expect("the worker's follow-on is explained");
    assert_eq!(follow.pod.as_deref(), Some("default/worker"));
    assert!(
        follow.detail.contains("expected to evict 1 pod(s)") && follow.detail.contains("default/scratch"),
        "{}",
        follow.detail
    );
}

#[test]
fn an_owned_victim_whose_return_finds_room_is_as_cheap_as_a_requeue_and_writes_nothing() {
    // An empty n4 takes the recreated worker: nothing follows, and no copy is stored.
    let s = worker_beside_bare().node(node("n4", 4000, 8));
    let out = s.preempt(online(2000), &["n1", "n2"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["worker"]))]), "{}", out.explain());
    assert!(!out.has("charged", "follow_on"), "{}", out.explain());
}

#[test]
fn a_lower_class_goes_first_whatever_comes_back() {
    // A bare free pod on n2 instead of the batch one: the policy's class order decides
    // before anything that follows does.
    let s = Scenario::new(policy_with("never"))
        .node(node("n1", 4000, 8))
        .node(node("n2", 4000, 8))
        .node(node("n3", 4000, 8))
        .pods([
            pod("worker", "batch", Some("n1"), 3000),
            pod("scratch", "free", Some("n2"), 3000).bare(),
            pod("full", "batch", Some("n3"), 4000).bare(),
        ]);
    let out = s.preempt(online(2000), &["n1", "n2"]);
    assert_eq!(out.victims(), BTreeMap::from([("n2".into(), uids(&["scratch"]))]), "{}", out.explain());
}

#[test]
fn a_requeued_pod_counts_what_it_would_evict_only_if_it_may_preempt() {
    // A bare batch pod on n1; n2 is full of free pods it could preempt.
    let cluster = |preemption: &str| {
        Scenario::new(policy_with(preemption))
            .node(node("n1", 4000, 8))
            .node(node("n2", 4000, 8))
            .pods([pod("report", "batch", Some("n1"), 3000).bare(), pod("scratch", "free", Some("n2"), 4000).bare()])
    };
    let keep = cluster("keep").preempt(online(2000), &["n1"]);
    assert!(keep.has("charged", "follow_on"), "requeue.preemption keep: its copy preempts\n{}", keep.explain());
    let never = cluster("never").preempt(online(2000), &["n1"]);
    assert!(!never.has("charged", "follow_on"), "requeue.preemption never: its copy waits\n{}", never.explain());
    assert_eq!(never.victims(), keep.victims(), "the only candidate is taken either way");
}

#[test]
fn a_pod_that_may_not_preempt_waits_and_evicts_nobody() {
    // Two workers alike but for preemptionPolicy: the one that would wait is the victim.
    let mut waits = pod("waits", "batch", Some("n2"), 3000);
    waits.preemption_never = true;
    let s = Scenario::new(policy_with("never"))
        .node(node("n1", 4000, 8))
        .node(node("n2", 4000, 8))
        .node(node("n3", 4000, 8))
        .pods([pod("preempts", "batch", Some("n1"), 3000), waits, pod("scratch", "free", Some("n3"), 4000).bare()]);
    let out = s.preempt(online(2000), &["n1", "n2"]);
    assert_eq!(out.victims(), BTreeMap::from([("n2".into(), uids(&["waits"]))]), "{}", out.explain());
}

#[test]
fn a_pod_recreated_a_moment_ago_costs_its_run_since_its_return_and_the_restart_its_owner_paid_already() {
    // rs-a lost a pod to preemption 40 s ago and recreated it on n1 30 s ago; rs-b's pod
    // on n2 has run `b_ran`. Both would come back to the empty n3. The fresh one throws
    // away 30 s × 3 CPU, but its owner restarts it a second time for an online pod: two
    // restarts of 2 h × 3 CPU and 28,800 CPU-s each, 100,890 CPU-s in all; rs-b's throws
    // away its run and one restart (50,400). So rs-a's is no cheap victim: rs-b's is
    // taken after an hour (10,800 + 50,400), and rs-a's only against five hours of run
    // (54,000 + 50,400), said beside the victim.
    let owned_by = |mut p: Pod, rs: &str| {
        p.controller = Some(OwnerRef { kind: "ReplicaSet".into(), name: rs.into() });
        p
    };
    let answer = |b_ran: i64| {
        let mut preempted = owned_by(pod("a-old", "batch", Some("n4"), 1000), "rs-a");
        preempted.preempted = true;
        preempted.deletion_time = Some(NOW - 40);
        let s = Scenario::new(policy_with("never"))
            .node(node("n1", 4000, 8))
            .node(node("n2", 4000, 8))
            .node(node("n3", 8000, 8))
            .node(node("n4", 1000, 8))
            .pods([
                owned_by(pod("a-new", "batch", Some("n1"), 3000).started(30), "rs-a"),
                owned_by(pod("b", "batch", Some("n2"), 3000).started(b_ran), "rs-b"),
                preempted,
            ]);
        s.preempt(online(2000), &["n1", "n2"])
    };
    let hour = answer(3600);
    assert_eq!(hour.victims(), BTreeMap::from([("n2".into(), uids(&["b"]))]), "{}", hour.explain());
    let five = answer(5 * 3600);
    assert_eq!(five.victims(), BTreeMap::from([("n1".into(), uids(&["a-new"]))]), "{}", five.explain());
    let said = five.explanations.iter().find(|e| e.pod.as_deref() == Some("default/a-new") && e.verdict == "victim");
    assert!(said.is_some_and(|e| e.detail.contains("recreated by ReplicaSet rs-a 30s ago")), "{}", five.explain());
}

#[test]
fn a_pdb_counts_a_recreated_pod_healthy_only_once_it_is_ready() {
    // The PDB's status counted w-1 and a pod preempted since: one disruption allowed.
    // Its replacement w-2 is bound but not ready, so the budget is spent already.
    let mut recreated = pod("w-2", "batch", Some("n2"), 4000);
    recreated.unready = true;
    let mut budget = pdb("w-pdb", "w", 1);
    budget.current_healthy = Some(2);
    let s = Scenario::new(policy_with("never"))
        .node(node("n1", 4000, 8))
        .node(node("n2", 4000, 8))
        .node(node("n3", 4000, 8))
        .pdb(budget)
        .pods([pod("w-1", "batch", Some("n1"), 4000), recreated]);
    let out = s.preempt(online(2000), &["n1"]);
    assert_eq!(out.violations("n1"), 1, "{}", out.explain());
    assert!(out.has("victim", "pdb_violation"));
}
