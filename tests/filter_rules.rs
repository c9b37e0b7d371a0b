//! filter in names mode: what a class's rules keep, and the fast path where no rule of the
//! class tells nodes apart (no node is looked up).

mod common;

use coloc_extender::cluster::View;
use coloc_extender::pipeline::{replay, Verb};
use common::*;
use serde_json::{json, Value};

fn filter(view: &View, class: &str, milli_cpu: i64, nodes: &[&str]) -> Value {
    let body = json!({
        "Pod": {
            "metadata": {"name": "p", "namespace": "default", "uid": "uid-p"},
            "spec": {"priorityClassName": class, "containers": [{"name": "c", "resources": {"requests": {"cpu": format!("{milli_cpu}m")}}}]},
        },
        "NodeNames": nodes,
    });
    let out = replay(Verb::Filter, body.to_string().as_bytes(), &policy("strict", ""), Some(view), NOW).unwrap();
    serde_json::from_slice(&out.body).unwrap()
}

fn view(nodes: &[(&str, i64)]) -> View {
    nodes.iter().fold(Scenario::new(policy("strict", "")), |s, (n, cpu)| s.node(node(n, *cpu, 8))).view()
}

#[test]
fn a_pod_that_fits_the_smallest_node_keeps_every_name_even_unknown_ones() {
    let v = view(&[("small", 1000), ("big", 8000)]);
    let out = filter(&v, "online", 1000, &["small", "big", "not-in-view"]);
    assert_eq!(out["NodeNames"], json!(["small", "big", "not-in-view"]));
    assert_eq!(out["FailedAndUnresolvableNodes"], json!({}), "{out}");
}

#[test]
fn a_pod_bigger_than_the_smallest_node_is_judged_node_by_node() {
    let v = view(&[("small", 1000), ("big", 8000)]);
    let out = filter(&v, "online", 2000, &["small", "big"]);
    assert_eq!(out["NodeNames"], json!(["big"]));
    assert!(out["FailedAndUnresolvableNodes"]["small"].as_str().unwrap().contains("can never fit"), "{out}");
}

#[test]
fn the_smallest_node_follows_nodes_added_resized_and_removed() {
    let mut v = view(&[("big", 8000)]);
    assert_eq!(v.smallest_node().unwrap().allocatable.milli_cpu, 8000);
    v.apply_node(node("small", 1000, 8));
    assert_eq!(v.smallest_node().unwrap().allocatable.milli_cpu, 1000);
    assert_eq!(filter(&v, "online", 2000, &["small", "big"])["NodeNames"], json!(["big"]));
    v.apply_node(node("small", 4000, 8));
    assert_eq!(v.smallest_node().unwrap().allocatable.milli_cpu, 4000, "grown");
    v.remove_node("small");
    assert_eq!(v.smallest_node().unwrap().allocatable.milli_cpu, 8000, "removed");
    v.remove_node("big");
    assert!(v.smallest_node().is_none());
}

#[test]
fn an_extended_resource_one_node_lacks_is_judged_node_by_node() {
    let mut gpu = node("gpu", 8000, 8);
    gpu.allocatable.scalar.insert("example.com/gpu".into(), 4);
    let v = Scenario::new(policy("strict", "")).node(gpu).node(node("plain", 8000, 8)).view();
    assert!(v.smallest_node().unwrap().allocatable.scalar.is_empty());
    let body = json!({
        "Pod": {"metadata": {"name": "p", "namespace": "default", "uid": "uid-p"},
                "spec": {"priorityClassName": "online", "containers": [{"name": "c", "resources": {"requests": {"example.com/gpu": "1"}}}]}},
        "NodeNames": ["gpu", "plain"],
    });
    let out = replay(Verb::Filter, body.to_string().as_bytes(), &policy("strict", ""), Some(&v), NOW).unwrap();
    let out: Value = serde_json::from_slice(&out.body).unwrap();
    assert_eq!(out["NodeNames"], json!(["gpu"]), "{out}");
}

#[test]
fn a_class_with_placement_rules_is_judged_node_by_node() {
    let yaml =
        "defaultClass: offline\nclasses:\n  - name: offline\n    placement: {requireNodeLabels: {pool: batch}}\n";
    let policy = coloc_extender::policy::Policy::from_yaml(yaml).unwrap();
    let mut batch = node("batch-node", 8000, 8);
    batch.labels.insert("pool".into(), "batch".into());
    let v = Scenario::new(policy.clone()).node(batch).node(node("web-node", 8000, 8)).view();
    let body = json!({
        "Pod": {"metadata": {"name": "p", "namespace": "default", "uid": "uid-p"}, "spec": {"containers": [{"name": "c"}]}},
        "NodeNames": ["batch-node", "web-node"],
    });
    let out = replay(Verb::Filter, body.to_string().as_bytes(), &policy, Some(&v), NOW).unwrap();
    let out: Value = serde_json::from_slice(&out.body).unwrap();
    assert_eq!(out["NodeNames"], json!(["batch-node"]), "{out}");
    assert!(out["FailedAndUnresolvableNodes"]["web-node"].as_str().unwrap().contains("pool"), "{out}");
}
