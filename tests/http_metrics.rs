//! Metrics recorded before the first scrape must not be lost, and the series alerts read
//! exist before anything happened. Its own test binary: the metrics recorder is
//! process-global, so nothing else may scrape first.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use coloc_extender::cluster::ViewCell;
use coloc_extender::http::state::{AppState, ViewSource};
use coloc_extender::http::{admin_router, router};
use coloc_extender::policy::Policy;
use http_body_util::BodyExt;
use tower::ServiceExt;

async fn scrape(state: AppState) -> String {
    let resp = admin_router(state).oneshot(Request::get("/metrics").body(Body::empty()).unwrap()).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    String::from_utf8(resp.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
}

/// The value of the sample whose line starts with `series`, if exported.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test]
async fn requests_before_the_first_scrape_are_counted() {
    let state = AppState::new(Policy::builtin_default().enforced(), Arc::new(ViewCell::default()), ViewSource::None);
    let app = router(state.clone(), "", decision_workers());
    let body = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/payloads/r2-nodecache-true/0001-filter.json"
    ))
    .unwrap();
    let req = Request::post("/filter").header("content-type", "application/json").body(Body::from(body)).unwrap();
    assert_eq!(app.clone().oneshot(req).await.unwrap().status(), StatusCode::OK);

    let text = scrape(state).await;
    assert!(
        text.lines().any(|l| l.starts_with("coloc_requests_total{")
            && l.contains(r#"verb="filter""#)
            && l.contains(r#"status="200""#)),
        "the filter answered before the first scrape is missing:\n{text}"
    );
}

/// rate() over a series born at its first increment misses that increment: every answer
/// ColocExtenderErrors counts, and the histogram ColocExtenderSlow reads, are there at 0
/// before the first request. (The test above answers a filter meanwhile: its ok count and
/// latency are left out.)
#[tokio::test]
async fn every_answer_an_alert_counts_is_exported_at_zero_before_any_request() {
    let state = AppState::new(Policy::builtin_default().enforced(), Arc::new(ViewCell::default()), ViewSource::None);
    let text = scrape(state).await;
    let errors = ["500\",code=\"internal", "503\",code=\"overloaded", "503\",code=\"timeout", "503\",code=\"cancelled"];
    for verb in ["filter", "prioritize", "preempt"] {
        for error in errors {
            let series = format!("coloc_requests_total{{verb=\"{verb}\",status=\"{error}\"}}");
            assert_eq!(sample(&text, &series), Some(0.0), "{series} missing or not 0:\n{text}");
        }
    }
    for verb in ["prioritize", "preempt"] {
        for series in [
            format!("coloc_requests_total{{verb=\"{verb}\",status=\"200\",code=\"ok\"}}"),
            format!("coloc_request_duration_seconds_bucket{{verb=\"{verb}\",le=\"1\"}}"),
            format!("coloc_request_duration_seconds_count{{verb=\"{verb}\"}}"),
        ] {
            assert_eq!(sample(&text, &series), Some(0.0), "{series} missing or not 0:\n{text}");
        }
    }
    for series in ["coloc_policy_fallback", "coloc_policy_reloads_total{result=\"error\"}"] {
        assert_eq!(sample(&text, series), Some(0.0), "{series} missing or not 0:\n{text}");
    }
}

/// The decision workers `serve` starts beside the router.
fn decision_workers() -> std::sync::Arc<coloc_extender::workers::Workers> {
    std::sync::Arc::new(coloc_extender::workers::Workers::new(1).unwrap())
}
