//! The admin port behind `--admin-auth kube`: `/metrics` and `/decisions` only for a bearer
//! token the API server accepts (TokenReview), of a user it allows to GET that path
//! (SubjectAccessReview); never an open door when it cannot say. Against the loopback fake
//! API server. Its own test binary: the metrics recorder is process-global.

mod fake_api;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use coloc_extender::cluster::ViewCell;
use coloc_extender::http::admin_auth::{CacheLimits, Guard};
use coloc_extender::http::state::{AppState, ViewSource};
use coloc_extender::http::{admin_router, guarded_admin_router, health_router, router};
use coloc_extender::policy::Policy;
use fake_api::FakeApi;
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

const SCRAPER: &str = "system:serviceaccount:monitoring:prometheus";
const SCRAPER_GROUPS: &[&str] = &["system:serviceaccounts", "system:serviceaccounts:monitoring"];

fn state() -> AppState {
    AppState::new(Policy::builtin_default().enforced(), Arc::new(ViewCell::default()), ViewSource::None)
}

fn guarded(api: &FakeApi) -> Router {
    let guard = Guard::new(api.client(), CacheLimits::default()).unwrap();
    guarded_admin_router(state(), Arc::new(guard))
}

struct Answer {
    status: StatusCode,
    www_authenticate: Option<String>,
    body: String,
}

impl Answer {
    /// The JSON error body's `code` and `error`.
    fn error(&self) -> (String, String) {
        let v: Value = serde_json::from_str(&self.body).unwrap_or_else(|_| panic!("not JSON: {}", self.body));
        (v["code"].as_str().unwrap().to_string(), v["error"].as_str().unwrap().to_string())
    }
}

async fn get(app: &Router, path: &str, token: Option<&str>) -> Answer {
    let mut req = Request::get(path);
    if let Some(token) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let resp = app.clone().oneshot(req.body(Body::empty()).unwrap()).await.unwrap();
    let status = resp.status();
    let www_authenticate = resp.headers().get(header::WWW_AUTHENTICATE).map(|v| v.to_str().unwrap().to_string());
    let body = String::from_utf8(resp.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    Answer { status, www_authenticate, body }
}

/// A fake API server where `scraper-token` is Prometheus's ServiceAccount, allowed /metrics.
async fn api_with_a_scraper() -> FakeApi {
    let api = FakeApi::start().await;
    api.accept_token("scraper-token", SCRAPER, SCRAPER_GROUPS);
    api.allow(SCRAPER, "/metrics");
    api
}

#[tokio::test]
async fn without_a_bearer_token_each_admin_path_is_401_and_the_api_server_is_not_asked() {
    let api = api_with_a_scraper().await;
    let app = guarded(&api);
    for path in ["/metrics", "/decisions?pod=online/web-0"] {
        let a = get(&app, path, None).await;
        assert_eq!(a.status, StatusCode::UNAUTHORIZED, "{path}: {}", a.body);
        assert_eq!(a.www_authenticate.as_deref(), Some("Bearer"));
        let (code, error) = a.error();
        assert_eq!(code, "unauthenticated");
        assert!(
            error.contains("Authorization: Bearer <token>") && error.contains("no Authorization header"),
            "{error}"
        );
    }
    let basic = app
        .clone()
        .oneshot(Request::get("/metrics").header(header::AUTHORIZATION, "Basic YTpi").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(basic.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(api.count("create", "TokenReview"), 0);
}

#[tokio::test]
async fn a_token_the_api_server_does_not_accept_is_401_without_asking_about_access() {
    let api = api_with_a_scraper().await;
    let a = get(&guarded(&api), "/metrics", Some("forged-token")).await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED, "{}", a.body);
    let (code, error) = a.error();
    assert_eq!(code, "unauthenticated");
    assert!(
        error.contains("does not accept the bearer token") && error.contains("coloc-extender-metrics-reader"),
        "{error}"
    );
    assert!(!a.body.contains("forged-token"), "a refusal never repeats the token");
    assert_eq!((api.count("create", "TokenReview"), api.count("create", "SubjectAccessReview")), (1, 0));
}

#[tokio::test]
async fn a_user_allowed_the_path_reads_it_and_is_asked_about_get_on_that_path_alone() {
    let api = api_with_a_scraper().await;
    let app = guarded(&api);
    let a = get(&app, "/metrics", Some("scraper-token")).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert!(a.body.contains("coloc_build_info"), "{}", a.body);
    let asked = api.access_reviews();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0]["user"], SCRAPER);
    assert_eq!(asked[0]["groups"], serde_json::json!(SCRAPER_GROUPS));
    assert_eq!(asked[0]["nonResourceAttributes"], serde_json::json!({"path": "/metrics", "verb": "get"}));
    assert!(asked[0]["resourceAttributes"].is_null());

    // Allowed to scrape is not allowed to read decisions: 403, naming who and what to bind.
    let a = get(&app, "/decisions?pod=online/web-0", Some("scraper-token")).await;
    assert_eq!(a.status, StatusCode::FORBIDDEN, "{}", a.body);
    let (code, error) = a.error();
    assert_eq!(code, "forbidden");
    assert!(
        error.contains(&format!("{SCRAPER} may not GET /decisions"))
            && error.contains("ClusterRole coloc-extender-decisions-reader"),
        "{error}"
    );
    assert_eq!(api.access_reviews()[1]["nonResourceAttributes"]["path"], "/decisions");
}

#[tokio::test]
async fn a_grant_to_one_of_the_users_groups_is_a_grant() {
    let api = FakeApi::start().await;
    api.accept_token("alice-token", "alice", &["oncall"]);
    api.allow("oncall", "/decisions");
    let a = get(&guarded(&api), "/decisions?pod=online/web-0", Some("alice-token")).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    let decisions: Value = serde_json::from_str(&a.body).unwrap();
    assert_eq!(decisions["pod"], "online/web-0");
}

#[tokio::test]
async fn an_authenticated_user_without_any_grant_is_403() {
    let api = FakeApi::start().await;
    api.accept_token("bob-token", "bob", &["system:authenticated"]);
    let app = guarded(&api);
    for path in ["/metrics", "/decisions?pod=online/web-0"] {
        let a = get(&app, path, Some("bob-token")).await;
        assert_eq!(a.status, StatusCode::FORBIDDEN, "{path}: {}", a.body);
        assert!(a.error().1.starts_with("bob may not GET"), "{}", a.body);
    }
}

#[tokio::test]
async fn an_api_server_that_cannot_answer_is_503_and_its_silence_is_not_kept() {
    let api = api_with_a_scraper().await;
    let app = guarded(&api);
    // The review fails: refused, never served.
    api.fail("create", "TokenReview", 500, 1);
    let a = get(&app, "/metrics", Some("scraper-token")).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE, "{}", a.body);
    let (code, error) = a.error();
    assert_eq!(code, "auth_unavailable");
    assert!(
        error.contains("cannot check the bearer token with the API server") && error.contains("tokenreviews failed"),
        "{error}"
    );
    // Nothing was kept: once the API server answers, so does the port.
    assert_eq!(get(&app, "/metrics", Some("scraper-token")).await.status, StatusCode::OK);

    // This replica may not ask (its RBAC lacks the reviews): 503, saying so.
    api.fail("create", "SubjectAccessReview", 403, 1);
    let a = get(&app, "/decisions?pod=online/web-0", Some("scraper-token")).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE, "{}", a.body);
    assert!(a.error().1.contains("may not create subjectaccessreviews"), "{}", a.body);

    // The API server is gone.
    let other = FakeApi::start().await;
    other.accept_token("scraper-token", SCRAPER, SCRAPER_GROUPS);
    let app = guarded(&other);
    drop(other);
    let a = get(&app, "/metrics", Some("scraper-token")).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE, "{}", a.body);
    assert_eq!(a.error().0, "auth_unavailable");
}

#[tokio::test]
async fn a_verdict_is_kept_so_repeated_scrapes_cost_one_pair_of_reviews() {
    let api = api_with_a_scraper().await;
    let app = guarded(&api);
    for _ in 0..3 {
        assert_eq!(get(&app, "/metrics", Some("scraper-token")).await.status, StatusCode::OK);
    }
    assert_eq!((api.count("create", "TokenReview"), api.count("create", "SubjectAccessReview")), (1, 1));
    // Kept means kept: a grant taken back holds until the verdict expires (30 s).
    api.revoke(SCRAPER, "/metrics");
    assert_eq!(get(&app, "/metrics", Some("scraper-token")).await.status, StatusCode::OK);
    // Refusals are kept too: a client retrying a bad token asks the API server once.
    for _ in 0..3 {
        assert_eq!(get(&app, "/metrics", Some("forged-token")).await.status, StatusCode::UNAUTHORIZED);
    }
    assert_eq!(api.count("create", "TokenReview"), 2);
    // Per path: the decisions path is asked about on its own.
    assert_eq!(get(&app, "/decisions?pod=a/b", Some("scraper-token")).await.status, StatusCode::FORBIDDEN);
    assert_eq!(api.count("create", "SubjectAccessReview"), 2);
}

#[tokio::test]
async fn probes_stay_open_and_other_paths_are_not_found_without_a_review() {
    let api = api_with_a_scraper().await;
    let state = state();
    let (health, verbs) = (health_router(state.clone()), router(state, "", decision_workers()));
    for app in [&health, &verbs] {
        assert_eq!(get(app, "/healthz", None).await.status, StatusCode::OK);
        assert_eq!(get(app, "/readyz", None).await.status, StatusCode::OK);
    }
    let a = get(&guarded(&api), "/readyz", None).await;
    assert_eq!((a.status, a.error().0.as_str()), (StatusCode::NOT_FOUND, "unknown_path"));
    assert_eq!(api.count("create", "*"), 0);
}

#[tokio::test]
async fn each_outcome_is_counted_by_path() {
    let api = api_with_a_scraper().await;
    api.accept_token("bob-token", "bob", &[]);
    let app = guarded(&api);
    get(&app, "/decisions?pod=a/b", None).await;
    get(&app, "/decisions?pod=a/b", Some("bob-token")).await;
    api.fail("create", "TokenReview", 500, 1);
    get(&app, "/metrics", Some("other-token")).await;
    get(&admin_router(state()), "/metrics", None).await;
    let metrics = get(&app, "/metrics", Some("scraper-token")).await.body;
    for series in [
        r#"coloc_admin_requests_total{path="/decisions",outcome="unauthenticated"}"#,
        r#"coloc_admin_requests_total{path="/decisions",outcome="forbidden"}"#,
        r#"coloc_admin_requests_total{path="/metrics",outcome="unavailable"}"#,
        r#"coloc_admin_requests_total{path="/metrics",outcome="open"}"#,
        r#"coloc_admin_reviews_total{review="token"}"#,
        r#"coloc_admin_reviews_total{review="access"}"#,
    ] {
        assert!(metrics.contains(series), "{series} missing from:\n{metrics}");
    }
    // This scrape itself is counted after it is answered.
    assert!(get(&app, "/metrics", Some("scraper-token")).await.body.contains(r#"path="/metrics",outcome="allowed""#));
}

/// The decision workers `serve` starts beside the router.
fn decision_workers() -> std::sync::Arc<coloc_extender::workers::Workers> {
    std::sync::Arc::new(coloc_extender::workers::Workers::new(1).unwrap())
}
