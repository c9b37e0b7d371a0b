//! Metrics recorded before the first scrape must not be lost. Its own test binary: the
//! metrics recorder is process-global, so nothing else may scrape first.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use coloc_extender::cluster::ViewCell;
use coloc_extender::http::{admin_router, router, AppState, ViewSource};
use coloc_extender::policy::Policy;
use http_body_util::BodyExt;
use tower::ServiceExt;

#[tokio::test]
async fn requests_before_the_first_scrape_are_counted() {
    let state = AppState::new(Policy::builtin_default(), Arc::new(ViewCell::default()), ViewSource::None);
    let app = router(state.clone(), "");
    let body = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/payloads/r2-nodecache-true/0001-filter.json"
    ))
    .unwrap();
    let req = Request::post("/filter").header("content-type", "application/json").body(Body::from(body)).unwrap();
    assert_eq!(app.clone().oneshot(req).await.unwrap().status(), StatusCode::OK);

    let resp = admin_router(state).oneshot(Request::get("/metrics").body(Body::empty()).unwrap()).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let text = String::from_utf8(resp.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    assert!(
        text.lines().any(|l| l.starts_with("coloc_requests_total{")
            && l.contains(r#"verb="filter""#)
            && l.contains(r#"status="200""#)),
        "the filter answered before the first scrape is missing:\n{text}"
    );
}
