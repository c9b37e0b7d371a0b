//! `placement.keepOffOnlineRoom`: for a while after it is created, an offline pod does not
//! take room an online pod of a size bound now fits in as is. The next online arrival
//! finds that room free instead of preempting the pod (a released copy, interrupted twice).
//!
//! The smallest cluster that shows it: `tight` holds a 2-CPU online pod and has 2 CPUs
//! free (another 2-CPU online pod fits there as is); `roomy` is empty. A 1-CPU batch pod
//! on `tight` would leave 1 CPU: no online pod of a size bound now fits after.

mod common;

use coloc_extender::cluster::View;
use coloc_extender::model::Pod;
use coloc_extender::pipeline::{replay, Answer, Verb};
use coloc_extender::policy::Policy;
use common::*;
use serde_json::{json, Value};

fn keeping(duration: &str) -> Policy {
    classes().batch(&format!("placement: {{keepOffOnlineRoom: {duration}}}")).build()
}

fn cluster(policy: &Policy, nodes: &[(&str, i64)]) -> View {
    nodes
        .iter()
        .fold(Scenario::new(policy.clone()), |s, (n, cpu)| s.node(node(n, *cpu, 8)))
        .pods([pod("web-0", "online", Some("tight"), 2000)])
        .view()
}

fn filter(policy: &Policy, view: &View, pod: &Pod, nodes: &[&str]) -> Answer {
    let created = jiff::Timestamp::from_second(pod.creation_time.unwrap()).unwrap().to_string();
    let body = json!({
        "Pod": {
            "metadata": {"name": pod.name, "namespace": "default", "uid": pod.uid, "creationTimestamp": created},
            "spec": {"priorityClassName": pod.priority_class_name, "priority": pod.priority,
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": format!("{}m", pod.requests.milli_cpu)}}}]},
        },
        "NodeNames": nodes,
    });
    replay(Verb::Filter, body.to_string().as_bytes(), policy, Some(view), NOW).unwrap()
}

fn body(answer: &Answer) -> Value {
    serde_json::from_slice(&answer.body).unwrap()
}

fn young_batch(secs: i64) -> Pod {
    pod("copy", "batch", None, 1000).bare().started(secs)
}

#[test]
fn a_young_offline_pod_keeps_off_the_room_an_online_pod_fits_in() {
    let policy = keeping("60s");
    let v = cluster(&policy, &[("tight", 4000), ("roomy", 8000)]);
    let out = body(&filter(&policy, &v, &young_batch(10), &["tight", "roomy"]));
    assert_eq!(out["NodeNames"], json!(["roomy"]), "{out}");
    let why = out["FailedAndUnresolvableNodes"]["tight"].as_str().unwrap_or_default();
    assert!(why.contains("class batch keeps its young pods off the room online pods fit in"), "{out}");
}

#[test]
fn once_its_time_is_up_it_takes_any_room() {
    let policy = keeping("60s");
    let v = cluster(&policy, &[("tight", 4000), ("roomy", 8000)]);
    let answer = filter(&policy, &v, &young_batch(60), &["tight", "roomy"]);
    assert_eq!(body(&answer)["NodeNames"], json!(["tight", "roomy"]), "{}", body(&answer));
    assert_eq!(answer.retry_at, None, "nothing to wake for");
}

#[test]
fn with_no_other_room_it_waits() {
    let policy = keeping("60s");
    let v = cluster(&policy, &[("tight", 4000)]);
    let answer = filter(&policy, &v, &young_batch(10), &["tight"]);
    assert_eq!(body(&answer)["NodeNames"], json!([]), "{}", body(&answer));
    let line = answer
        .explanations
        .iter()
        .find(|e| e.code == "online_room_kept")
        .unwrap_or_else(|| panic!("{:?}", answer.explanations));
    assert!(
        line.detail.contains("2000 m CPU free here, 1000 m once this pod is placed; 100 % of the online pods"),
        "{}",
        line.detail
    );
    assert!(line.detail.contains("50 s more"), "{}", line.detail);
    assert_eq!(answer.retry_at, Some(NOW + 50), "kube-scheduler is woken when its time is up");
}

#[test]
fn shadow_mode_keeps_nothing_off_and_wakes_nobody() {
    let policy = classes().extra("mode: shadow\n").batch("placement: {keepOffOnlineRoom: 60s}").build();
    let v = cluster(&policy, &[("tight", 4000)]);
    let answer = filter(&policy, &v, &young_batch(10), &["tight"]);
    assert_eq!(body(&answer)["NodeNames"], json!(["tight"]));
    assert_eq!(answer.retry_at, None);
    assert!(answer.explanations.iter().any(|e| e.code == "online_room_kept"), "still decided and explained");
}

#[test]
fn room_that_still_fits_every_online_size_after_is_not_kept() {
    let policy = keeping("60s");
    // 8 CPUs free on `tight`: 7 left after the batch pod, and the 2-CPU online size fits.
    let v = cluster(&policy, &[("tight", 10_000)]);
    let out = body(&filter(&policy, &v, &young_batch(10), &["tight"]));
    assert_eq!(out["NodeNames"], json!(["tight"]), "{out}");
}

#[test]
fn a_class_that_does_not_keep_off_takes_the_room_at_once() {
    let policy = classes().build();
    let v = cluster(&policy, &[("tight", 4000), ("roomy", 8000)]);
    let out = body(&filter(&policy, &v, &young_batch(0), &["tight", "roomy"]));
    assert_eq!(out["NodeNames"], json!(["tight", "roomy"]), "{out}");
}

#[test]
fn online_pods_are_never_kept_off() {
    let policy = keeping("60s");
    let v = cluster(&policy, &[("tight", 4000)]);
    let online = pod("web-1", "online", None, 1000).started(0);
    let out = body(&filter(&policy, &v, &online, &["tight"]));
    assert_eq!(out["NodeNames"], json!(["tight"]), "{out}");
}

#[test]
fn the_policy_refuses_it_on_an_online_class_and_beyond_ten_minutes() {
    let online = classes().online("placement: {keepOffOnlineRoom: 60s}").yaml();
    let err = Policy::from_yaml(&online).unwrap_err().to_string();
    assert!(err.contains("keepOffOnlineRoom") && err.contains("only for offline classes"), "{err}");
    let long = classes().batch("placement: {keepOffOnlineRoom: 11m}").yaml();
    let err = Policy::from_yaml(&long).unwrap_err().to_string();
    assert!(err.contains("keepOffOnlineRoom") && err.contains("at most 10m"), "{err}");
    assert!(Policy::from_yaml(&classes().batch("placement: {keepOffOnlineRoom: 10m}").yaml()).is_ok());
}

#[test]
fn room_kube_scheduler_sees_and_the_view_does_not_yet_is_kept_too() {
    let policy = keeping("60s");
    // `tight` full in the view (a 2-CPU pod there the view still counts); kube-scheduler,
    // which sent the node, has seen that pod go.
    let v = Scenario::new(policy.clone())
        .node(node("tight", 4000, 8))
        .pods([pod("web-0", "online", Some("tight"), 2000), pod("web-1", "online", Some("tight"), 2000)])
        .view();
    let answer = filter(&policy, &v, &young_batch(10), &["tight"]);
    assert_eq!(body(&answer)["NodeNames"], json!([]), "{}", body(&answer));
    let line = answer.explanations.iter().find(|e| e.code == "online_room_kept").expect("explained");
    assert!(line.detail.contains("the view does not show room for it here yet"), "{}", line.detail);
}
