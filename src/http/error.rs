//! API errors, rendered as JSON bodies that name the problem.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::wire::DecodeError;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

#[derive(Serialize)]
struct Body<'a> {
    code: &'a str,
    error: &'a str,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, code, message: message.into() }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&Body { code: self.code, error: &self.message }).unwrap_or_default();
        (self.status, [(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response()
    }
}

impl From<DecodeError> for ApiError {
    fn from(e: DecodeError) -> Self {
        let (status, code) = match &e {
            DecodeError::Json(j) if j.is_data() => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_field"),
            DecodeError::Json(j) if j.is_eof() => (StatusCode::BAD_REQUEST, "truncated_json"),
            DecodeError::Json(_) => (StatusCode::BAD_REQUEST, "malformed_json"),
            DecodeError::NotUtf8(_) => (StatusCode::BAD_REQUEST, "malformed_json"),
            DecodeError::MissingPod => (StatusCode::UNPROCESSABLE_ENTITY, "missing_pod"),
            DecodeError::NoNodes => (StatusCode::UNPROCESSABLE_ENTITY, "missing_nodes"),
            DecodeError::VictimElsewhere { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "victim_not_on_node"),
            DecodeError::DuplicateNode(_) => (StatusCode::UNPROCESSABLE_ENTITY, "duplicate_node"),
            DecodeError::PodField(_) | DecodeError::NodeField { .. } | DecodeError::VictimField { .. } => {
                (StatusCode::UNPROCESSABLE_ENTITY, "invalid_field")
            }
        };
        ApiError::new(status, code, e.to_string())
    }
}
