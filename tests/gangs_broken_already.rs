//! A gang below its minimum already (a member being deleted, or chosen by an earlier
//! answer that kube-scheduler has not deleted yet) cannot progress whatever is evicted
//! now: its survivors' run was charged when it broke, so its members are the victims that
//! cost nothing more, and it is not charged again. Members that go by themselves leave
//! the rest nearer their minimum: one more eviction breaks the gang. Each rule on the
//! smallest cluster that shows it.

mod common;

use std::collections::BTreeMap;

use coloc_extender::decide::promised::PromisedRoom;
use coloc_extender::model::Pod;
use common::*;

const GANG: &str = "pod-group.scheduling.sigs.k8s.io/name";
const MIN: &str = "pod-group.scheduling.sigs.k8s.io/min-available";

fn online(cpu: i64) -> Pod {
    pod("preemptor", "online", None, cpu)
}

fn member(name: &str, node: &str, min: &str) -> Pod {
    pod(name, "batch", Some(node), 1000).label(GANG, "g").annotate(MIN, min)
}

/// A gang of 3 needing all 3: m-1 on n1 (ran two hours), m-2 and m-3 on n3; a plain
/// batch pod on n2 that ran ten minutes. All take 1 CPU; n1 and n2 are full.
fn gang_or_plain(m_2: Pod) -> Scenario {
    Scenario::new(policy("strict", ""))
        .node(node("n1", 1000, 8))
        .node(node("n2", 1000, 8))
        .node(node("n3", 2000, 8))
        .pods([
            member("m-1", "n1", "3").started(7200),
            m_2,
            member("m-3", "n3", "3"),
            pod("plain", "batch", Some("n2"), 1000).started(600),
        ])
}

#[test]
fn whole_the_gang_is_not_broken_for_a_younger_plain_pod() {
    // The rule the others depart from: m-1's two hours and its gang's survivors cost more
    // than the plain pod's ten minutes.
    let out = gang_or_plain(member("m-2", "n3", "3")).preempt(online(1000), &["n1", "n2"]);
    assert_eq!(out.victims(), BTreeMap::from([("n2".into(), uids(&["plain"]))]), "{}", out.explain());
}

#[test]
fn a_member_of_a_gang_with_a_member_being_deleted_costs_nothing_more() {
    let s = gang_or_plain(member("m-2", "n3", "3").deleted(5));
    let out = s.preempt(online(1000), &["n1", "n2"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["m-1"]))]), "{}", out.explain());
    let charged = out.explanations.iter().find(|e| e.code == "gang_broken_already").expect("explained");
    assert!(charged.detail.contains("1 member(s) being deleted, 0 chosen by an earlier answer"), "{}", charged.detail);
    assert!(!out.has("charged", "gang_broken"), "{}", out.explain());
    let n1 = out.explanations.iter().find(|e| e.code == "candidate" && e.node.as_deref() == Some("n1")).expect("n1");
    assert!(n1.detail.contains("owners lose 0 CPU-s"), "{}", n1.detail);
    assert!(n1.detail.contains("1 of them not counted, their gang broken already"), "{}", n1.detail);
}

#[test]
fn a_gang_an_earlier_answer_broke_is_not_charged_again() {
    // web-1 was promised room on n3 a moment ago by evicting m-2; it is not deleted yet.
    let mut s = gang_or_plain(member("m-2", "n3", "3"));
    s.promised = vec![PromisedRoom {
        node: "n3".into(),
        pod: pod("web-1", "online", None, 1000),
        victims: uids(&["m-2"]),
        at: NOW,
    }];
    let out = s.preempt(online(1000), &["n1", "n2"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["m-1"]))]), "{}", out.explain());
    let charged = out.explanations.iter().find(|e| e.code == "gang_broken_already").expect("explained");
    assert!(charged.detail.contains("0 member(s) being deleted, 1 chosen by an earlier answer"), "{}", charged.detail);
}

#[test]
fn an_earlier_answer_naming_several_nodes_breaks_a_gang_only_if_each_of_them_would() {
    // web-1's answer named n3 (evicting m-2) and n4 (evicting nothing of the gang): it may
    // be placed on n4, so the gang is whole still, and m-1 is charged as before.
    let mut s = gang_or_plain(member("m-2", "n3", "3")).node(node("n4", 1000, 8)).pods([pod(
        "other",
        "batch",
        Some("n4"),
        1000,
    )]);
    let web = pod("web-1", "online", None, 1000);
    s.promised =
        PromisedRoom::of(&web, [("n3".into(), uids(&["m-2"])), ("n4".into(), uids(&["other"]))].into_iter(), NOW);
    let out = s.preempt(online(1000), &["n1", "n2"]);
    assert_eq!(out.victims(), BTreeMap::from([("n2".into(), uids(&["plain"]))]), "{}", out.explain());
    assert!(!out.explanations.iter().any(|e| e.code == "gang_broken_already"), "{}", out.explain());
}

#[test]
fn a_gang_whose_surplus_member_is_being_deleted_breaks_with_the_next_eviction() {
    // 4 members needing 3: m-4 is being deleted, so evicting m-1 leaves 2 of the 3 needed.
    // m-1 ran 15 minutes, the plain pod 20: m-1 alone is cheaper, not with its survivors.
    let s = Scenario::new(policy("strict", ""))
        .node(node("n1", 1000, 8))
        .node(node("n2", 1000, 8))
        .node(node("n3", 3000, 8))
        .pods([
            member("m-1", "n1", "3").started(900),
            member("m-2", "n3", "3"),
            member("m-3", "n3", "3"),
            member("m-4", "n3", "3").deleted(5),
            pod("plain", "batch", Some("n2"), 1000).started(1200),
        ]);
    let out = s.preempt(online(1000), &["n1", "n2"]);
    assert_eq!(out.victims(), BTreeMap::from([("n2".into(), uids(&["plain"]))]), "{}", out.explain());
    let n1 = out.explanations.iter().find(|e| e.code == "candidate" && e.node.as_deref() == Some("n1")).expect("n1");
    assert!(n1.detail.contains("2 gang survivor(s)"), "{}", n1.detail);
}
