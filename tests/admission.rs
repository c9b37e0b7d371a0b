//! Admission, timeouts and cancellation through the real router, in-process: a request
//! takes a concurrency slot only once its body has arrived, bodies in flight share a byte
//! budget, a body has its own upload timeout, and work whose request was given up keeps
//! its slot until it stops, which it does at its next check.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode};
use axum::Router;
use coloc_extender::cluster::ViewCell;
use coloc_extender::http::state::{AppState, ViewSource};
use coloc_extender::http::{admin_router, router};
use coloc_extender::policy::Policy;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

const NOW: i64 = 1_795_287_600;

fn state() -> AppState {
    let mut state =
        AppState::new(Policy::builtin_default().enforced(), Arc::new(ViewCell::default()), ViewSource::None);
    state.clock = Arc::new(|| NOW);
    state.limits.request_timeout = Duration::from_secs(30);
    state
}

fn filter_body() -> String {
    json!({"Pod": {"metadata": {"name": "p", "namespace": "online", "uid": "u"}}, "NodeNames": ["a", "b"]}).to_string()
}

async fn post(app: &Router, body: impl Into<Body>, length: Option<usize>) -> (StatusCode, Value) {
    let mut req = Request::post("/filter").header("content-type", "application/json");
    if let Some(n) = length {
        req = req.header("content-length", n.to_string());
    }
    let resp = app.clone().oneshot(req.body(body.into()).unwrap()).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into())))
}

/// The process-wide metrics, as the admin port serves them.
async fn metrics() -> String {
    let resp = admin_router(state()).oneshot(Request::get("/metrics").body(Body::empty()).unwrap()).await.unwrap();
    String::from_utf8(resp.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
}

/// One chunk of an unfinished request, then nothing, ever.
fn stalled_body() -> Body {
    use futures::StreamExt;
    let first = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from_static(br#"{"Pod": {"#))]);
    Body::from_stream(first.chain(futures::stream::pending()))
}

/// A clock that blocks its caller (a decision worker) until released, and says when a
/// decision has reached it.
struct Gate {
    entered: Mutex<mpsc::Receiver<()>>,
    release: mpsc::Sender<()>,
}

fn blocking_clock(state: &mut AppState) -> Arc<Gate> {
    let (entered_tx, entered_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let release_rx = Mutex::new(release_rx);
    let entered_tx = Mutex::new(entered_tx);
    state.clock = Arc::new(move || {
        let _ = entered_tx.lock().unwrap().send(());
        let _ = release_rx.lock().unwrap().recv_timeout(Duration::from_secs(30));
        NOW
    });
    // Every body goes to the workers, where blocking is harmless.
    state.limits.inline_decode_bytes = 0;
    Arc::new(Gate { entered: Mutex::new(entered_rx), release: release_tx })
}

impl Gate {
    async fn wait_entered(self: &Arc<Self>) {
        let gate = self.clone();
        tokio::task::spawn_blocking(move || {
            gate.entered.lock().unwrap().recv_timeout(Duration::from_secs(10)).expect("a decision reached the clock")
        })
        .await
        .unwrap();
    }
}

/// A router with one slot, taken by a request whose decision waits at the clock.
async fn one_slot_held(request_timeout: Duration) -> (Router, Arc<Gate>, tokio::task::JoinHandle<(StatusCode, Value)>) {
    let mut state = state();
    state.limits.max_concurrency = 1;
    state.limits.request_timeout = request_timeout;
    let gate = blocking_clock(&mut state);
    let app = router(state, "", decision_workers());
    let first = tokio::spawn({
        let app = app.clone();
        async move { post(&app, filter_body(), None).await }
    });
    gate.wait_entered().await;
    (app, gate, first)
}

#[tokio::test]
async fn a_slow_upload_holds_no_slot() {
    let mut state = state();
    state.limits.max_concurrency = 1;
    let app = router(state, "", decision_workers());
    let slow = tokio::spawn({
        let app = app.clone();
        async move { post(&app, stalled_body(), None).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (status, answer) = post(&app, filter_body(), None).await;
    assert_eq!(status, StatusCode::OK, "the only slot is free while a body is still arriving: {answer}");
    slow.abort();
}

#[tokio::test]
async fn a_body_that_does_not_arrive_in_time_is_408_body_timeout() {
    let mut state = state();
    state.limits.body_timeout = Duration::from_millis(50);
    let app = router(state, "", decision_workers());
    let (status, v) = tokio::time::timeout(Duration::from_secs(10), post(&app, stalled_body(), None))
        .await
        .expect("the service gives up on its own");
    assert_eq!(status, StatusCode::REQUEST_TIMEOUT, "{v}");
    assert_eq!(v["code"], "body_timeout");
    assert!(v["error"].as_str().unwrap().contains("--body-timeout"), "{v}");
    let m = metrics().await;
    assert!(
        m.lines().any(|l| l.starts_with("coloc_requests_total")
            && l.contains("code=\"body_timeout\"")
            && l.contains("status=\"408\"")),
        "{m}"
    );
}

#[tokio::test]
async fn bodies_in_flight_share_a_byte_budget() {
    let mut state = state();
    state.limits.max_body_bytes = 32 << 10;
    state.limits.max_inflight_body_bytes = 48 << 10;
    let app = router(state, "", decision_workers());
    // A sender that announced 32 KiB holds them while it uploads.
    let slow = tokio::spawn({
        let app = app.clone();
        async move { post(&app, stalled_body(), Some(32 << 10)).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let big = format!("{}{}", filter_body(), " ".repeat((20 << 10) - filter_body().len()));
    let (status, v) = post(&app, big.clone(), Some(big.len())).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert_eq!(v["code"], "overloaded");
    assert!(v["error"].as_str().unwrap().contains("--max-inflight-body-bytes"), "{v}");
    // What fits in the rest of the budget is answered.
    assert_eq!(post(&app, filter_body(), Some(filter_body().len())).await.0, StatusCode::OK);
    // Once the slow sender is gone its bytes are free again.
    slow.abort();
    let _ = slow.await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(post(&app, big.clone(), Some(big.len())).await.0, StatusCode::OK);
}

#[tokio::test]
async fn a_body_without_length_counts_against_the_limit_as_it_arrives() {
    let mut state = state();
    state.limits.max_body_bytes = 1 << 10;
    let app = router(state, "", decision_workers());
    use futures::StreamExt;
    let chunks = futures::stream::iter((0..8).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![b' '; 512]))));
    let (status, v) = post(&app, Body::from_stream(chunks.boxed()), None).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{v}");
    assert_eq!(v["code"], "body_too_large");
}

#[tokio::test]
async fn a_request_beyond_the_concurrency_limit_is_refused_not_queued() {
    let (app, gate, first) = one_slot_held(Duration::from_secs(30)).await;
    let m = metrics().await;
    let in_flight =
        m.lines().find_map(|l| l.strip_prefix("coloc_requests_in_flight ")).and_then(|v| v.parse::<f64>().ok());
    assert!(in_flight >= Some(1.0), "the gauge counts the request being decided: {m}");
    let (status, v) = post(&app, filter_body(), None).await;
    assert_eq!((status, v["code"].as_str()), (StatusCode::SERVICE_UNAVAILABLE, Some("overloaded")), "{v}");
    gate.release.send(()).unwrap();
    assert_eq!(first.await.unwrap().0, StatusCode::OK);
    gate.release.send(()).unwrap();
    assert_eq!(post(&app, filter_body(), None).await.0, StatusCode::OK, "the slot is free again");
}

#[tokio::test]
async fn timed_out_work_keeps_its_slot_until_it_stops_and_then_stops_at_once() {
    let (app, gate, first) = one_slot_held(Duration::from_secs(1)).await;
    let (status, v) = first.await.unwrap();
    assert_eq!((status, v["code"].as_str()), (StatusCode::SERVICE_UNAVAILABLE, Some("timeout")), "{v}");
    // The answer is gone but its work is not: the slot is still taken.
    let (status, v) = post(&app, filter_body(), None).await;
    assert_eq!((status, v["code"].as_str()), (StatusCode::SERVICE_UNAVAILABLE, Some("overloaded")), "{v}");
    // Released, the work sees it was given up and stops before deciding.
    gate.release.send(()).unwrap();
    let mut m = String::new();
    for _ in 0..500 {
        m = metrics().await;
        if m.lines().any(|l| l.starts_with("coloc_requests_abandoned_total{verb=\"filter\"}")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(m.lines().any(|l| l.starts_with("coloc_requests_abandoned_total{verb=\"filter\"}")), "{m}");
    gate.release.send(()).unwrap();
    assert_eq!(post(&app, filter_body(), None).await.0, StatusCode::OK, "the slot is free again");
}

/// The decision workers `serve` starts beside the router.
fn decision_workers() -> std::sync::Arc<coloc_extender::workers::Workers> {
    std::sync::Arc::new(coloc_extender::workers::Workers::new(1).unwrap())
}
