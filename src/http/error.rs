//! API errors, rendered as JSON bodies that name the problem.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::wire::error::DecodeError;
use crate::wire::error::{clip_message, MESSAGE_LIMIT};

/// No error body or log line carries more than this much text. `DecodeError` messages
/// already clip every quote of the input to about 200 bytes and themselves to
/// `MESSAGE_LIMIT`; this is the backstop for every other message.
const API_MESSAGE_LIMIT: usize = 4 * MESSAGE_LIMIT;

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
    /// `message` is clipped: long quotes of the input are shortened to about 200 bytes
    /// ("… (N bytes)"), and the whole to a few KiB, so no input can make a huge body or
    /// log line.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        let message = message.into();
        let message = match clip_message(&message, API_MESSAGE_LIMIT) {
            std::borrow::Cow::Borrowed(_) => message,
            std::borrow::Cow::Owned(clipped) => clipped,
        };
        ApiError { status, code, message }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&Body { code: self.code, error: &self.message }).unwrap_or_default();
        (self.status, [(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response()
    }
}

impl From<crate::service::Unanswered> for ApiError {
    fn from(e: crate::service::Unanswered) -> Self {
        match e {
            crate::service::Unanswered::Decode(e) => e.into(),
            e @ crate::service::Unanswered::WorkersGone => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
            }
        }
    }
}

impl From<DecodeError> for ApiError {
    fn from(e: DecodeError) -> Self {
        let (status, code) = match &e {
            DecodeError::Json(j) | DecodeError::Item { error: j, .. } if j.is_data() => {
                (StatusCode::UNPROCESSABLE_ENTITY, "invalid_field")
            }
            DecodeError::Json(j) | DecodeError::Item { error: j, .. } if j.is_eof() => {
                (StatusCode::BAD_REQUEST, "truncated_json")
            }
            DecodeError::Json(_) | DecodeError::Item { .. } => (StatusCode::BAD_REQUEST, "malformed_json"),
            DecodeError::NotUtf8(_) => (StatusCode::BAD_REQUEST, "malformed_json"),
            DecodeError::MissingPod => (StatusCode::UNPROCESSABLE_ENTITY, "missing_pod"),
            DecodeError::NoNodes => (StatusCode::UNPROCESSABLE_ENTITY, "missing_nodes"),
            DecodeError::VictimElsewhere { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "victim_not_on_node"),
            DecodeError::DuplicateNode { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "duplicate_node"),
            DecodeError::VictimWithoutUid { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "missing_uid"),
            DecodeError::TooMany { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "too_many_items"),
            DecodeError::Cancelled => (StatusCode::SERVICE_UNAVAILABLE, "cancelled"),
            DecodeError::PodField(_)
            | DecodeError::NodeField { .. }
            | DecodeError::VictimField { .. }
            | DecodeError::NegativePdbViolations { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_field"),
        };
        // `DecodeError`'s Display clips quotes of the input; `new` clips once more.
        ApiError::new(status, code, e.to_string())
    }
}
