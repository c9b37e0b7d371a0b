//! The HTTP edge: routing, limits, errors, metrics.

pub mod decisions;
mod error;
mod handlers;
mod observe;
pub mod metrics;
pub mod server;
mod state;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tokio::sync::Semaphore;

pub use error::ApiError;
pub use state::{system_now, AppState, Limits, ViewSource};

/// The service's routes: `POST {prefix}/{filter,prioritize,preempt}`, `GET /healthz`,
/// `/readyz`, `/metrics`. `prefix` is "" or starts with '/'.
pub fn router(state: AppState, prefix: &str) -> Router {
    // Install the recorder before the first request records anything.
    metrics::handle();
    let prefix = prefix.trim_end_matches('/');
    let permits = Arc::new(Semaphore::new(state.limits.max_concurrency));
    let timeout = state.limits.request_timeout;
    let verbs = Router::new()
        .route(&format!("{prefix}/filter"), post(handlers::filter))
        .route(&format!("{prefix}/prioritize"), post(handlers::prioritize))
        .route(&format!("{prefix}/preempt"), post(handlers::preempt))
        .layer(DefaultBodyLimit::max(state.limits.max_body_bytes))
        .layer(middleware::from_fn_with_state(state.limits.max_body_bytes, declared_length))
        .layer(middleware::from_fn_with_state(timeout, time_limit))
        .layer(middleware::from_fn_with_state(permits, concurrency_limit));
    let expected = format!("POST {prefix}/filter, {prefix}/prioritize or {prefix}/preempt; GET /healthz, /readyz, /metrics");
    let not_allowed = expected.clone();
    Router::new()
        .merge(verbs)
        .route("/healthz", get(handlers::healthz))
        .route("/readyz", get(handlers::readyz))
        .route("/metrics", get(handlers::metrics_text))
        .fallback(move |req: Request| async move {
            ApiError::new(StatusCode::NOT_FOUND, "unknown_path", format!("no route for {} {}: expected {expected}", req.method(), req.uri().path()))
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

/// `/healthz`, `/readyz`, `/metrics` and `/decisions`: for a plain-HTTP port that probes,
/// Prometheus and operators (`explain`) reach without the client certificate the verbs
/// require. Decisions name pods and reasons: they are not served to the scheduler-facing port.
pub fn health_router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(handlers::healthz))
        .route("/readyz", get(handlers::readyz))
        .route("/metrics", get(handlers::metrics_text))
        .route("/decisions", get(decisions::handler))
        .fallback(|req: Request| async move {
            ApiError::new(StatusCode::NOT_FOUND, "unknown_path", format!("no route for {}: this port serves /healthz, /readyz, /metrics, /decisions", req.uri().path()))
        })
        .with_state(state)
}

/// Answers 503 instead of queueing when too many requests are in flight: kube-scheduler
/// retries, a queue would only make every answer late.
async fn concurrency_limit(State(permits): State<Arc<Semaphore>>, req: Request, next: Next) -> Response {
    match permits.try_acquire() {
        Ok(_permit) => next.run(req).await,
        Err(_) => {
            metrics::record_refusal(req.uri().path(), 503, "overloaded");
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "overloaded", "too many requests in flight; retry").into_response()
        }
    }
}

/// A `Content-Length` over the limit is refused before a byte of the body is read (a slow
/// sender would otherwise hold the request until the timeout).
async fn declared_length(State(limit): State<usize>, req: Request, next: Next) -> Response {
    let declared = req.headers().get(axum::http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    match declared {
        Some(n) if n > limit as u64 => {
            metrics::record_refusal(req.uri().path(), 413, "body_too_large");
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("Content-Length {n} exceeds the limit of {limit} bytes (--max-body-bytes)"),
            )
            .into_response()
        }
        _ => next.run(req).await,
    }
}

/// Bounds the whole request, body upload included (slow clients).
async fn time_limit(State(limit): State<std::time::Duration>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(r) => r,
        Err(_) => {
            metrics::record_refusal(&path, 503, "timeout");
            ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "timeout",
            format!("request not answered within {} ms (--request-timeout)", limit.as_millis()),
        )
        .into_response()
        }
    }
}
