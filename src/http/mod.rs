//! The HTTP edge: routing, limits, errors, metrics.

pub mod admin_auth;
mod admission;
pub mod decision_log;
pub mod decisions;
pub mod error;
mod handlers;
pub mod memory;
mod observe;
pub mod prometheus;
pub mod server;
pub mod state;
pub mod waits;

use std::sync::Arc;

use axum::extract::{Extension, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::workers::Workers;
use admission::Gate;
use handlers::Verbs;

use error::ApiError;
use state::AppState;

/// The scheduler-facing routes: `POST {prefix}/{filter,prioritize,preempt}`, `GET /healthz`,
/// `/readyz`. `prefix` is "" or starts with '/'. `/metrics` and `/decisions` are on
/// [`admin_router`] only. Large bodies are decided on `workers`, which the caller started.
pub fn router(state: AppState, prefix: &str, workers: Arc<Workers>) -> Router {
    // Install the recorder before the first request records anything.
    prometheus::handle();
    let prefix = prefix.trim_end_matches('/');
    let timeout = state.limits.request_timeout;
    let shared = Arc::new(Verbs { gate: Gate::new(&state.limits), workers });
    let verbs = Router::new()
        .route(&format!("{prefix}/filter"), post(handlers::post_filter))
        .route(&format!("{prefix}/prioritize"), post(handlers::post_prioritize))
        .route(&format!("{prefix}/preempt"), post(handlers::post_preempt))
        .layer(Extension(shared))
        .layer(middleware::from_fn_with_state(timeout, time_limit));
    let expected = format!("POST {prefix}/filter, {prefix}/prioritize or {prefix}/preempt; GET /healthz, /readyz");
    let not_allowed = expected.clone();
    Router::new()
        .merge(verbs)
        .route("/healthz", get(handlers::healthz))
        .route("/readyz", get(handlers::readyz))
        .fallback(move |req: Request| async move {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "unknown_path",
                format!("no route for {} {}: expected {expected}", req.method(), req.uri().path()),
            )
        })
        .method_not_allowed_fallback(move |req: Request| async move {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                format!("{} is not allowed on {}: expected {not_allowed}", req.method(), req.uri().path()),
            )
        })
        .with_state(state)
}

/// `/healthz` and `/readyz` on a plain-HTTP port, for probes, which carry no client
/// certificate.
pub fn health_router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(handlers::healthz))
        .route("/readyz", get(handlers::readyz))
        .fallback(|req: Request| async move {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "unknown_path",
                format!("no route for {}: this port serves /healthz, /readyz", req.uri().path()),
            )
        })
        .with_state(state)
}

/// `/metrics` and `/decisions` (`explain`), on a port of their own, open to whoever
/// reaches it (`--admin-auth none`): for loopback, where only this pod and
/// `kubectl port-forward` reach it. Elsewhere, [`guarded_admin_router`].
pub fn admin_router(state: AppState) -> Router {
    admin_routes(state, |routes| routes.route_layer(middleware::from_fn(admin_auth::open)))
}

/// The admin routes behind `guard` (`--admin-auth kube`): each request bears a token the
/// API server accepts, of a user it allows to GET the path.
pub fn guarded_admin_router(state: AppState, guard: Arc<admin_auth::Guard>) -> Router {
    admin_routes(state, |routes| routes.route_layer(middleware::from_fn_with_state(guard, admin_auth::require)))
}

fn admin_routes(state: AppState, access: impl FnOnce(Router<AppState>) -> Router<AppState>) -> Router {
    prometheus::handle();
    let routes =
        Router::new().route("/metrics", get(handlers::metrics_text)).route("/decisions", get(decisions::handler));
    access(routes)
        .fallback(|req: Request| async move {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "unknown_path",
                format!("no route for {}: this port serves /metrics, /decisions", req.uri().path()),
            )
        })
        .with_state(state)
}

/// Bounds the whole request: upload, admission and decision. Dropping the request on
/// timeout raises its cancel flag (see `crate::workers::Cancel`).
async fn time_limit(State(limit): State<std::time::Duration>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(r) => r,
        Err(_) => {
            let e = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "timeout",
                format!("request not answered within {} ms (--request-timeout)", limit.as_millis()),
            );
            prometheus::record_refusal(&path, e.status.as_u16(), e.code, &e.message);
            e.into_response()
        }
    }
}
