//! prioritize, rule by rule: kube-scheduler sends only nodes where the pod fits, so the
//! score ranks by what differs between them (placement, packing), a node the view says is
//! full ranks at the bottom, and a class that prefers nothing is left to kube-scheduler.

mod common;

use std::collections::BTreeMap;

use coloc_extender::cluster::{Objects, View};
use coloc_extender::model::{Node, Pod};
use coloc_extender::pipeline::{answer, Verb};
use coloc_extender::policy::Policy;
use common::{node, pod, NOW};
use serde_json::{json, Value};

const COLOCATION: &str = "colocation.example.com/offline-allowed";

fn labelled(mut n: Node) -> Node {
    n.labels.insert(COLOCATION.into(), "true".into());
    n
}

/// The shipped policy's classes by PriorityClass: `batch` (packs, prefers co-location
/// nodes), `free` (packs) and `online` (prefers nothing).
fn priority_class(class: &str) -> (i32, &'static str) {
    match class {
        "batch" => (6000, "offline-batch"),
        "free" => (3500, "free"),
        _ => (10_000, "online-prod"),
    }
}

fn of_class(mut p: Pod, class: &str) -> Pod {
    let (priority, pc) = priority_class(class);
    (p.priority, p.priority_class_name) = (Some(priority), Some(pc.into()));
    p
}

fn request(class: &str, milli_cpu: i64, nodes: &[&str]) -> Vec<u8> {
    let (priority, pc) = priority_class(class);
    json!({"Pod": {"metadata": {"name": "p", "namespace": "default", "uid": "u-p"},
                   "spec": {"priority": priority, "priorityClassName": pc,
                            "containers": [{"resources": {"requests": {"cpu": format!("{milli_cpu}m")}}}]}},
           "NodeNames": nodes})
    .to_string()
    .into_bytes()
}

fn scores(body: &[u8], view: Option<&View>) -> BTreeMap<String, i64> {
    let policy = Policy::builtin_default().enforced();
    let a = answer(Verb::Prioritize, body, &policy, view, NOW).unwrap();
    let list: Vec<Value> = serde_json::from_slice(&a.body).unwrap();
    list.iter().map(|h| (h["Host"].as_str().unwrap().to_string(), h["Score"].as_i64().unwrap())).collect()
}

fn view(nodes: Vec<Node>, pods: Vec<Pod>) -> View {
    View::build(Objects { nodes, pods, ..Default::default() }, &Policy::builtin_default().enforced())
}

/// `pods` pods of `class`, 1 cpu each, on `node`.
fn filled(node: &str, pods: usize, class: &str) -> Vec<Pod> {
    (0..pods).map(|i| of_class(pod(&format!("{node}-{class}-{i}"), class, Some(node), 1000), class)).collect()
}

#[test]
fn a_batch_pod_prefers_colocation_nodes_then_fuller_ones() {
    let nodes = vec![labelled(node("half", 8000, 64)), node("unlabelled", 8000, 64), labelled(node("empty", 8000, 64))];
    let pods = [filled("half", 4, "batch"), filled("unlabelled", 4, "batch")].concat();
    let s = scores(&request("batch", 1000, &["half", "unlabelled", "empty"]), Some(&view(nodes, pods)));
    assert!(s["half"] > s["empty"], "fuller is better for a packing class: {s:?}");
    assert!(s["half"] > s["unlabelled"], "the preferred labels count: {s:?}");
}

#[test]
fn an_online_pod_is_ranked_by_kube_scheduler_alone() {
    // Its class prefers nothing; kube-scheduler's LeastAllocated already spreads it.
    let nodes = vec![node("half", 8000, 64), node("empty", 8000, 64)];
    let policy = Policy::builtin_default().enforced();
    let view = view(nodes, filled("half", 4, "batch"));
    let a = answer(Verb::Prioritize, &request("online", 1000, &["half", "empty"]), &policy, Some(&view), NOW).unwrap();
    assert_eq!(a.body, b"[]");
    assert!(a.explanations.iter().any(|e| e.code == "neutral" && e.is_routine()), "{:?}", a.explanations);
}

#[test]
fn a_node_the_view_says_is_full_scores_1_if_eviction_would_make_room_and_0_if_not() {
    // A batch pod may evict free pods, never other batch pods.
    let nodes = vec![node("room", 8000, 64), node("full-of-free", 8000, 64), node("full-of-batch", 8000, 64)];
    let pods =
        [filled("room", 6, "free"), filled("full-of-free", 8, "free"), filled("full-of-batch", 8, "batch")].concat();
    let s = scores(&request("batch", 2000, &["room", "full-of-free", "full-of-batch"]), Some(&view(nodes, pods)));
    assert_eq!((s["full-of-free"], s["full-of-batch"]), (1, 0), "{s:?}");
    assert!(s["room"] > 1, "{s:?}");
}

#[test]
fn without_a_view_only_what_the_request_says_counts() {
    // Names only and no view: nothing tells the nodes apart.
    let s = scores(&request("batch", 1000, &["a", "b"]), None);
    assert_eq!(s["a"], s["b"], "{s:?}");
}

#[test]
fn scores_stay_within_0_and_10() {
    let nodes = vec![labelled(node("tiny", 100, 1)), labelled(node("big", 64_000, 256))];
    let s = scores(&request("batch", 1000, &["tiny", "big", "unknown"]), Some(&view(nodes, Vec::new())));
    assert!(s.values().all(|v| (0..=10).contains(v)), "{s:?}");
}

/// hole: 8 CPU with 7 of free pods (1 free); snug: 4 CPU with 2.4 of free pods (1.6
/// free); `online` pods of 1 CPU run on a third node. A 0.5 CPU free pod packs best on
/// hole (94 % full after, against 73 %).
fn hole_or_snug(online: usize) -> BTreeMap<String, i64> {
    let small = of_class(pod("snug-small", "free", Some("snug"), 400), "free");
    let nodes = vec![node("hole", 8000, 64), node("snug", 4000, 64), node("web", 8000, 64)];
    let web = (0..online).map(|i| of_class(pod(&format!("web-{i}"), "online", Some("web"), 1000), "online"));
    let pods = [filled("hole", 7, "free"), filled("snug", 2, "free"), vec![small], web.collect()].concat();
    scores(&request("free", 500, &["hole", "snug"]), Some(&view(nodes, pods)))
}

#[test]
fn an_offline_pod_keeps_off_the_room_an_online_pod_would_fit_in_as_is() {
    let alone = hole_or_snug(0);
    assert!(alone["hole"] > alone["snug"], "packing alone fills the hole: {alone:?}");
    // With online pods of 1 CPU about, hole's 1 CPU is room the next one fits in without
    // a preemption; snug keeps 1.1 after.
    let s = hole_or_snug(2);
    assert_eq!(s["hole"], 0, "{s:?}");
    assert!(s["snug"] > s["hole"], "{s:?}");
}

/// A batch pod of 1 CPU declaring `grace` seconds.
fn request_with_grace(grace: i64, nodes: &[&str]) -> Vec<u8> {
    let mut body: Value = serde_json::from_slice(&request("batch", 1000, nodes)).unwrap();
    body["Pod"]["spec"]["terminationGracePeriodSeconds"] = json!(grace);
    body.to_string().into_bytes()
}

#[test]
fn offline_pods_that_stop_slowly_keep_together_away_from_those_that_exit_at_once() {
    // Two co-location nodes alike but for how their batch pods stop: checkpointing (a
    // grace of 10 minutes) on one, exiting at once on the other. Mixed, every node's
    // cheapest room would hold a slow victim, and an online pod would wait for it.
    let with_grace = |node: &str, grace: i32| {
        filled(node, 4, "batch").into_iter().map(move |mut p| {
            p.grace_period = Some(grace);
            p
        })
    };
    let nodes = vec![labelled(node("slow", 8000, 64)), labelled(node("fast", 8000, 64))];
    let pods = with_grace("slow", 600).chain(with_grace("fast", 2)).collect();
    let view = view(nodes, pods);
    let checkpointing = scores(&request_with_grace(600, &["slow", "fast"]), Some(&view));
    assert!(checkpointing["slow"] > checkpointing["fast"], "{checkpointing:?}");
    let quick = scores(&request_with_grace(2, &["slow", "fast"]), Some(&view));
    assert!(quick["fast"] > quick["slow"], "{quick:?}");
}
