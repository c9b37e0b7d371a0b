//! kube-scheduler's cache runs a few milliseconds ahead of the extender's watch. A preempt
//! that proposes a pod bound a moment ago must be decided on a view that has it, not
//! answered with that node dropped (which once sent an online pod to a gang member's node
//! behind the real kube-scheduler).

mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request};
use coloc_extender::cluster::ViewCell;
use coloc_extender::http::router;
use coloc_extender::http::state::{AppState, ViewSource};
use common::*;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

/// n1 holds `just-bound` (free), which kube-scheduler has bound and the view may still
/// have pending; n2 holds a batch pod, worth more. The right answer is n1.
fn cluster(bound: bool) -> Scenario {
    let mut just_bound = pod("just-bound", "free", Some("n1"), 1000);
    if !bound {
        just_bound.node_name = None;
    }
    Scenario::new(policy("strict", ""))
        .node(node("n1", 1000, 8))
        .node(node("n2", 1000, 8))
        .pods([just_bound, pod("worth-more", "batch", Some("n2"), 1000)])
}

fn preempt_body() -> String {
    json!({
        "Pod": {
            "metadata": {"name": "web", "namespace": "default", "uid": "uid-web"},
            "spec": {"priorityClassName": "online", "priority": 10000,
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
        },
        "NodeNameToMetaVictims": {
            "n1": {"Pods": [{"UID": "uid-just-bound"}], "NumPDBViolations": 0},
            "n2": {"Pods": [{"UID": "uid-worth-more"}], "NumPDBViolations": 0},
        },
    })
    .to_string()
}

fn app(cell: Arc<ViewCell>, source: ViewSource) -> axum::Router {
    let mut state = AppState::new(policy("strict", ""), cell, source);
    state.clock = Arc::new(|| NOW);
    router(state, "", decision_workers())
}

/// The answer's node → victim UIDs.
async fn answer(app: axum::Router) -> Value {
    let req = Request::builder()
        .method(Method::POST)
        .uri("/preempt")
        .header("content-type", "application/json")
        .body(Body::from(preempt_body()))
        .unwrap();
    let resp = app.oneshot(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let body: Value = serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    body["NodeNameToMetaVictims"].clone()
}

#[tokio::test]
async fn a_preempt_waits_for_the_view_to_catch_up_and_decides_on_it() {
    let cell = Arc::new(ViewCell::default());
    cell.publish(cluster(false).view());
    let asked = tokio::spawn(answer(app(cell.clone(), ViewSource::Kubernetes)));
    tokio::time::sleep(Duration::from_millis(30)).await;
    cell.publish(cluster(true).view());
    let victims = asked.await.unwrap();
    assert_eq!(victims, json!({"n1": {"Pods": [{"UID": "uid-just-bound"}], "NumPDBViolations": 0}}));
}

#[tokio::test]
async fn a_view_that_never_catches_up_is_answered_as_decided_not_waited_on_forever() {
    let cell = Arc::new(ViewCell::default());
    cell.publish(cluster(false).view());
    let victims = answer(app(cell, ViewSource::Kubernetes)).await;
    assert_eq!(victims, json!({"n2": {"Pods": [{"UID": "uid-worth-more"}], "NumPDBViolations": 0}}));
}

#[tokio::test]
async fn a_snapshot_view_is_the_whole_truth_and_is_not_waited_on() {
    let cell = Arc::new(ViewCell::default());
    cell.publish(cluster(false).view());
    let asked = tokio::spawn(answer(app(cell.clone(), ViewSource::Snapshot)));
    tokio::time::sleep(Duration::from_millis(30)).await;
    cell.publish(cluster(true).view());
    assert_eq!(asked.await.unwrap(), json!({"n2": {"Pods": [{"UID": "uid-worth-more"}], "NumPDBViolations": 0}}));
}

/// The decision workers `serve` starts beside the router.
fn decision_workers() -> std::sync::Arc<coloc_extender::workers::Workers> {
    std::sync::Arc::new(coloc_extender::workers::Workers::new(1).unwrap())
}
