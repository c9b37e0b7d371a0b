//! GET /decisions?pod=NAMESPACE/NAME on the admin port: the pod's recent decisions with
//! every reason, from a ring bounded in entries and bytes.

use std::path::Path;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use coloc_extender::cluster::{snapshot, View, ViewCell};
use coloc_extender::decide::Context;
use coloc_extender::http::decision_log::{DecisionLog, PodDecisions, RingLimits};
use coloc_extender::http::state::{AppState, ViewSource};
use coloc_extender::http::{admin_router, health_router, router};
use coloc_extender::pipeline::{answer, replay, Verb};
use coloc_extender::policy::Policy;
use coloc_extender::wire::Bounds;
use http_body_util::BodyExt;
use tower::ServiceExt;

const PAYLOADS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/payloads/r1-nodecache-false");

fn state() -> AppState {
    let policy = Policy::builtin_default().enforced();
    let objects = snapshot::load(&Path::new(PAYLOADS).join("0037-preempt.snapshot.json")).unwrap();
    let view = Arc::new(ViewCell::default());
    view.publish(View::build(objects, &policy));
    let mut state = AppState::new(policy, view, ViewSource::Snapshot);
    state.clock = Arc::new(|| 1_795_000_000);
    state
}

async fn send(app: &Router, req: Request<Body>) -> (StatusCode, String) {
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    (status, String::from_utf8(resp.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap())
}

async fn preempt(app: &Router) {
    let body = std::fs::read(Path::new(PAYLOADS).join("0037-preempt.json")).unwrap();
    let req = Request::post("/preempt").header("content-type", "application/json").body(Body::from(body)).unwrap();
    assert_eq!(send(app, req).await.0, StatusCode::OK);
}

fn get(uri: &str) -> Request<Body> {
    Request::get(uri).body(Body::empty()).unwrap()
}

#[tokio::test]
async fn a_preempt_decision_is_served_with_every_reason_on_the_admin_port_only() {
    let state = state();
    let (app, health, admin) =
        (router(state.clone(), "", decision_workers()), health_router(state.clone()), admin_router(state));
    preempt(&app).await;

    let (status, body) = send(&admin, get("/decisions?pod=online/online-2")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let found: PodDecisions = serde_json::from_str(&body).unwrap();
    assert_eq!(found.decisions.len(), 1);
    let d = &found.decisions[0];
    assert_eq!((d.verb.as_str(), d.mode.as_str(), d.time), ("preempt", "enforce", 1_795_000_000));
    assert!(d.summary.starts_with("candidates ") || d.summary.starts_with("no candidates"), "{}", d.summary);
    // Every reason the decision gave (routine lines aside) is there.
    let policy = Policy::builtin_default().enforced();
    let view = View::build(snapshot::load(&Path::new(PAYLOADS).join("0037-preempt.snapshot.json")).unwrap(), &policy);
    let ctx = Context::new(&policy, Some(&view), 1_795_000_000);
    let decided = answer(
        Verb::Preempt,
        &std::fs::read(Path::new(PAYLOADS).join("0037-preempt.json")).unwrap(),
        &ctx,
        &Bounds::default(),
    )
    .unwrap();
    let expected: Vec<_> = decided
        .explanations
        .iter()
        .filter(|e| !e.is_routine())
        .map(|e| (e.verdict.as_str(), e.code.as_str(), e.detail.clone()))
        .collect();
    assert_eq!(
        d.reasons.iter().map(|r| (r.verdict.as_str(), r.code.as_str(), r.detail.clone())).collect::<Vec<_>>(),
        expected
    );
    assert!(d.reasons.iter().any(|r| r.verdict == "preemptor" && r.code == "classified"), "{body}");
    // How soon the room is free, beside kube-scheduler's own choice.
    assert!(
        d.reasons.iter().any(|r| r.code == "expected_wait"
            && r.detail.starts_with("room free on ")
            && r.detail.contains("kube-scheduler's own choice: ")),
        "{body}"
    );
    assert!(d.reasons.iter().any(|r| r.subject == "node"), "{body}");
    assert_eq!(d.truncated, 0);

    // Another pod: nothing. Neither the scheduler-facing nor the health router serves decisions.
    let (status, body) = send(&admin, get("/decisions?pod=online/someone-else")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(serde_json::from_str::<PodDecisions>(&body).unwrap().decisions.is_empty());
    assert_eq!(send(&app, get("/decisions?pod=online/online-2")).await.0, StatusCode::NOT_FOUND);
    assert_eq!(send(&health, get("/decisions?pod=online/online-2")).await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_bad_pod_parameter_gets_400_naming_the_problem() {
    let admin = admin_router(state());
    for (uri, says) in [
        ("/decisions", "pod=NAMESPACE/NAME is required"),
        ("/decisions?pod=online-2", "is not NAMESPACE/NAME"),
        ("/decisions?pod=Online/x", "not a valid namespace name"),
        ("/decisions?pod=online/", "not a valid pod name"),
        ("/decisions?pod=online/a%20b", "not a valid pod name"),
        ("/decisions?pod=%FF", "is not NAMESPACE/NAME"),
        ("/decisions?pod=a/b&pod=c/d", "unreadable query"),
    ] {
        let (status, body) = send(&admin, get(uri)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}: {body}");
        assert!(body.contains(says), "{uri}: {body}");
    }
}

fn one_answer(pod: &str) -> coloc_extender::pipeline::Answer {
    let body = format!(
        r#"{{"Pod":{{"metadata":{{"name":"{pod}","namespace":"ns","uid":"u-{pod}"}},"spec":{{"containers":[]}}}},"NodeNames":["a","b"]}}"#
    );
    replay(Verb::Filter, body.as_bytes(), &Policy::builtin_default().enforced(), None, 0).unwrap()
}

#[test]
fn the_ring_keeps_the_newest_within_its_entries_and_bytes() {
    let log = DecisionLog::new(RingLimits { entries: 3, bytes: 1 << 20 });
    for i in 0..5 {
        log.record(Verb::Filter, &one_answer(&format!("p{i}")), i);
    }
    assert_eq!(log.usage().0, 3);
    assert!(log.for_pod("ns/p1").is_empty());
    assert_eq!(log.for_pod("ns/p4").len(), 1);

    let size = {
        let probe = DecisionLog::default();
        probe.record(Verb::Filter, &one_answer("p0"), 0);
        probe.usage().1
    };
    let limit = size * 4 + size / 2;
    let log = DecisionLog::new(RingLimits { entries: 100, bytes: limit });
    for i in 0..10 {
        log.record(Verb::Filter, &one_answer(&format!("p{i}")), i);
    }
    let (entries, bytes) = log.usage();
    assert_eq!(entries, 4, "{bytes} bytes held");
    assert!(bytes <= limit);
    assert_eq!(log.for_pod("ns/p9").len(), 1);
}

#[test]
fn one_huge_decision_keeps_at_most_a_quarter_of_the_bytes_and_says_what_it_cut() {
    let mut a = one_answer("big");
    let filler = a.explanations[0].clone();
    a.explanations = (0..1000)
        .map(|i| coloc_extender::explanation::Explanation {
            detail: format!("reason {i} {}", "x".repeat(200)),
            verdict: coloc_extender::explanation::Verdict::Unresolvable,
            ..filler.clone()
        })
        .collect();
    let log = DecisionLog::new(RingLimits { entries: 10, bytes: 64 << 10 });
    log.record(Verb::Filter, &a, 0);
    let d = &log.for_pod("ns/big")[0];
    assert!(d.bytes() <= 16 << 10, "{}", d.bytes());
    assert_eq!(d.reasons.len() + d.truncated, 1000);
    assert!(d.truncated > 0);
}

/// The decision workers `serve` starts beside the router.
fn decision_workers() -> std::sync::Arc<coloc_extender::workers::Workers> {
    std::sync::Arc::new(coloc_extender::workers::Workers::new(1).unwrap())
}
