//! `GET /decisions?pod=NAMESPACE/NAME`: the recent decisions the log holds for one pod.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::decision_log::{parse_pod_key, PodDecisions};
use super::error::ApiError;
use super::state::AppState;
use crate::wire::error::clip;

#[derive(Deserialize)]
pub struct PodQuery {
    pod: Option<String>,
}

pub async fn handler(State(state): State<AppState>, query: Result<Query<PodQuery>, QueryRejection>) -> Response {
    let q = match query {
        Ok(Query(q)) => q,
        Err(e) => {
            return ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_query",
                format!("unreadable query string: {}", clip(&e.body_text(), 200)),
            )
            .into_response()
        }
    };
    let Some(pod) = q.pod else {
        return ApiError::new(StatusCode::BAD_REQUEST, "missing_pod", "query parameter pod=NAMESPACE/NAME is required")
            .into_response();
    };
    if let Err(why) = parse_pod_key(&pod) {
        return ApiError::new(StatusCode::BAD_REQUEST, "bad_pod", why).into_response();
    }
    let decisions = state.decisions.for_pod(&pod).iter().map(|d| (**d).clone()).collect();
    let body = PodDecisions { held: state.decisions.usage().0, pod, decisions };
    ([(header::CONTENT_TYPE, "application/json")], serde_json::to_vec(&body).unwrap_or_default()).into_response()
}
