//! Work discarded by preemption as a figure of its own: each victim's run time × its CPU
//! request, in the answer's explanation and in metrics, for the policy's choice and, in
//! shadow mode, for kube-scheduler's own.

mod common;

use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use coloc_extender::cluster::ViewCell;
use coloc_extender::http::state::{AppState, ViewSource};
use coloc_extender::http::{admin_router, router};
use coloc_extender::pipeline::{replay, Answer, Verb};
use common::*;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

/// n1 holds a free pod that has run an hour, n2 one that has run a minute; both 1 CPU.
/// kube-scheduler cannot tell them apart (same priority, one victim each) and takes n1 by
/// name; the policy keeps the hour of work and takes n2.
fn cluster(extra: &str) -> Scenario {
    Scenario::new(policy("strict", extra)).node(node("n1", 1000, 8)).node(node("n2", 1000, 8)).pods([
        pod("ran-an-hour", "free", Some("n1"), 1000).started(3600),
        pod("ran-a-minute", "free", Some("n2"), 1000).started(60),
    ])
}

fn body() -> Value {
    json!({
        "Pod": {"metadata": {"name": "web", "namespace": "default", "uid": "uid-web"},
                "spec": {"priorityClassName": "online", "priority": 10000,
                         "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}},
        "NodeNameToMetaVictims": {
            "n1": {"Pods": [{"UID": "uid-ran-an-hour"}], "NumPDBViolations": 0},
            "n2": {"Pods": [{"UID": "uid-ran-a-minute"}], "NumPDBViolations": 0},
        },
    })
}

fn preempt(extra: &str) -> Answer {
    let s = cluster(extra);
    replay(Verb::Preempt, body().to_string().as_bytes(), &s.policy, Some(&s.view()), NOW).unwrap()
}

#[test]
fn an_enforced_answer_counts_what_its_victims_had_run_by_class() {
    let a = preempt("");
    let d = a.discarded().expect("a preemption discards something");
    assert_eq!((d.node.as_str(), d.cpu_seconds.get("free")), ("n2", Some(&60.0)));
    assert!(a.would_discard().is_none());
    let line = a.explanations.iter().find(|e| e.code == "discarded_work").expect("explained");
    assert_eq!(line.detail, "evicting on n2: 1 victim(s), 60 CPU-seconds (free 60)");
}

#[test]
fn shadow_mode_counts_kube_schedulers_choice_beside_the_policys() {
    let a = preempt("mode: shadow");
    assert_eq!(
        a.discarded().map(|d| (d.node.as_str(), d.total())),
        Some(("n1", 3600.0)),
        "kube-scheduler's own choice"
    );
    assert_eq!(a.would_discard().map(|d| (d.node.as_str(), d.total())), Some(("n2", 60.0)), "the policy's");
    let line = a.explanations.iter().find(|e| e.code == "discarded_work").expect("explained");
    assert!(
        line.detail.contains("n1: 1 victim(s), 3600") && line.detail.contains("n2: 1 victim(s), 60"),
        "{}",
        line.detail
    );
}

#[test]
fn no_candidate_discards_nothing() {
    let s = Scenario::new(policy("strict", "")).node(node("n1", 1000, 8));
    let body = json!({
        "Pod": {"metadata": {"name": "web", "namespace": "default", "uid": "uid-web"},
                "spec": {"priorityClassName": "online", "priority": 10000, "containers": [{"name": "c"}]}},
        "NodeNameToMetaVictims": {},
    });
    let a = replay(Verb::Preempt, body.to_string().as_bytes(), &s.policy, Some(&s.view()), NOW).unwrap();
    assert!(a.discarded().is_none() && !a.explanations.iter().any(|e| e.code == "discarded_work"));
}

#[tokio::test]
async fn the_metric_adds_up_by_class() {
    let s = cluster("");
    let cell = Arc::new(ViewCell::default());
    cell.publish(s.view());
    let mut state = AppState::new(s.policy.clone(), cell, ViewSource::Snapshot);
    state.clock = Arc::new(|| NOW);
    let (app, admin) = (router(state.clone(), "", decision_workers()), admin_router(state));
    for _ in 0..2 {
        let req = Request::post("/preempt")
            .header("content-type", "application/json")
            .body(Body::from(body().to_string()))
            .unwrap();
        assert_eq!(app.clone().oneshot(req).await.unwrap().status(), 200);
    }
    let resp = admin.oneshot(Request::get("/metrics").body(Body::empty()).unwrap()).await.unwrap();
    let text = String::from_utf8(resp.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    assert!(text.lines().any(|l| l == r#"coloc_discarded_cpu_seconds_total{class="free"} 120"#), "{text}");
}

/// The decision workers `serve` starts beside the router.
fn decision_workers() -> std::sync::Arc<coloc_extender::workers::Workers> {
    std::sync::Arc::new(coloc_extender::workers::Workers::new(1).unwrap())
}
