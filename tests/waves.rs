//! One preemption per node per wave: kube-scheduler holds the room an answer gave a
//! preemptor the moment it nominates it; the view learns of the nomination milliseconds
//! later. The room an earlier answer promised is held for the next preemptors until the
//! view shows it, so two preemptors of one wave are not given the same room.

mod common;

use std::collections::BTreeMap;

use coloc_extender::decide::promised::PromisedRoom;
use coloc_extender::model::Pod;
use common::*;

fn online(name: &str) -> Pod {
    pod(name, "online", None, 1000)
}

/// n1: a young free pod (the cheapest victim) beside a worker nothing may evict; n2: an
/// older free pod. Either node frees 1000m, once.
fn wave() -> Scenario {
    Scenario::new(policy("prefer", "")).node(node("n1", 2000, 8)).node(node("n2", 2000, 8)).pods([
        pod("young", "free", Some("n1"), 1000).started(900),
        pod("system", "unclassified", Some("n1"), 1000),
        pod("old", "free", Some("n2"), 1000).started(36_000),
        pod("other", "unclassified", Some("n2"), 1000),
    ])
}

fn promised(node: &str, pod: Pod) -> PromisedRoom {
    PromisedRoom { node: node.into(), pod, victims: vec![], at: NOW }
}

#[test]
fn the_first_preemptor_of_a_wave_takes_the_cheapest_room() {
    let out = wave().preempt(online("web-1"), &["n1", "n2"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["young"]))]), "{}", out.explain());
}

#[test]
fn the_room_an_answer_promised_is_not_given_to_the_next_preemptor_of_the_wave() {
    // web-1 was answered n1 a moment ago; the view does not show its nomination yet.
    let mut s = wave();
    s.promised = vec![promised("n1", online("web-1"))];
    let out = s.preempt(online("web-2"), &["n1", "n2"]);
    assert_eq!(out.victims(), BTreeMap::from([("n2".into(), uids(&["old"]))]), "{}", out.explain());
    assert!(out.has("charged", "nominated_room"), "{}", out.explain());
}

#[test]
fn a_promise_the_view_shows_already_is_counted_once() {
    // n1 has room for two (3000m): web-1's nomination is in the view, so its promise adds
    // nothing more and web-2 still takes the cheapest room beside it.
    let mut web_1 = online("web-1");
    web_1.nominated_node_name = Some("n1".into());
    let mut s = Scenario::new(policy("prefer", "")).node(node("n1", 3000, 8)).node(node("n2", 2000, 8)).pods([
        pod("young", "free", Some("n1"), 1000).started(900),
        pod("system", "unclassified", Some("n1"), 1000),
        web_1.clone(),
        pod("old", "free", Some("n2"), 1000).started(36_000),
        pod("other", "unclassified", Some("n2"), 1000),
    ]);
    s.promised = vec![promised("n1", web_1)];
    let out = s.preempt(online("web-2"), &["n1", "n2"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["young"]))]), "{}", out.explain());
}

#[test]
fn a_preemptor_asking_again_is_not_held_back_by_its_own_promise() {
    let mut s = wave();
    s.promised = vec![promised("n1", online("web-1"))];
    let out = s.preempt(online("web-1"), &["n1", "n2"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["young"]))]), "{}", out.explain());
}

#[test]
fn a_lower_priority_preemptors_promise_does_not_hold_room_against_a_higher_one() {
    // As kube-scheduler: nominated pods of lower priority do not hold room.
    let mut s = wave();
    s.promised = vec![promised("n1", pod("copy", "batch", None, 1000))];
    let out = s.preempt(online("web-2"), &["n1", "n2"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["young"]))]), "{}", out.explain());
}
