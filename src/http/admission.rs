//! Admission of a verb request, in the order that keeps one client from starving others:
//! the declared length is checked first; the body is then read within its own upload
//! timeout against a budget of in-flight body bytes; only once it has arrived does the
//! request take one of the concurrency slots. A slow sender holds bytes it has announced,
//! never a slot.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, StatusCode};
use futures::StreamExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::error::ApiError;
use super::state::Limits;

/// Byte budgets are counted in KiB so that a budget of several GiB fits a semaphore.
const UNIT: usize = 1024;

fn units(bytes: usize) -> u32 {
    u32::try_from(bytes.div_ceil(UNIT)).unwrap_or(u32::MAX)
}

/// The shared budgets of every verb request.
pub struct Gate {
    body_bytes: Arc<Semaphore>,
    budget_bytes: usize,
    slots: Arc<Semaphore>,
}

/// What an admitted request holds until its last piece of work ends (a decision that runs
/// on after a timeout still counts).
pub struct Admitted {
    _bytes: Vec<OwnedSemaphorePermit>,
    _slot: OwnedSemaphorePermit,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        metrics::gauge!("coloc_requests_in_flight").decrement(1.0);
    }
}

impl Gate {
    pub fn new(limits: &Limits) -> Self {
        let budget_bytes = limits.max_inflight_body_bytes.max(limits.max_body_bytes);
        Gate {
            body_bytes: Arc::new(Semaphore::new(units(budget_bytes) as usize)),
            budget_bytes,
            slots: Arc::new(Semaphore::new(limits.max_concurrency)),
        }
    }

    /// Reads the body and takes a slot, or refuses with the reason.
    pub async fn admit(&self, headers: &HeaderMap, body: Body, limits: &Limits) -> Result<(Bytes, Admitted), ApiError> {
        let max = limits.max_body_bytes;
        let declared =
            headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
        if let Some(n) = declared.filter(|&n| n > max as u64) {
            return Err(too_large(format!("Content-Length {n} exceeds the limit of {max} bytes (--max-body-bytes)")));
        }
        let mut held = Vec::new();
        let mut reserved = 0usize;
        if let Some(n) = declared {
            held.push(self.reserve(n as usize)?);
            reserved = n as usize;
        }
        let upload = limits.body_timeout.min(limits.request_timeout);
        let bytes = tokio::time::timeout(upload, async {
            let mut buf = Vec::with_capacity(reserved);
            let mut stream = body.into_data_stream();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| {
                    ApiError::new(
                        StatusCode::BAD_REQUEST,
                        "unreadable_body",
                        format!("request body could not be read: {e}"),
                    )
                })?;
                if buf.len() + chunk.len() > max {
                    return Err(too_large(format!("request body exceeds the limit of {max} bytes (--max-body-bytes)")));
                }
                // A body longer than announced, or without a length, reserves as it comes.
                if buf.len() + chunk.len() > reserved {
                    let more = (buf.len() + chunk.len()).max(reserved + 64 * UNIT).min(max) - reserved;
                    held.push(self.reserve(more)?);
                    reserved += more;
                }
                buf.extend_from_slice(&chunk);
            }
            Ok(Bytes::from(buf))
        })
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "body_timeout",
                format!("request body not received within {} ms (--body-timeout)", upload.as_millis()),
            )
        })??;
        let slot = self
            .slots
            .clone()
            .try_acquire_owned()
            .map_err(|_| overloaded("too many requests in flight (--max-concurrency); retry".into()))?;
        metrics::gauge!("coloc_requests_in_flight").increment(1.0);
        Ok((bytes, Admitted { _bytes: held, _slot: slot }))
    }

    fn reserve(&self, bytes: usize) -> Result<OwnedSemaphorePermit, ApiError> {
        self.body_bytes.clone().try_acquire_many_owned(units(bytes)).map_err(|_| {
            overloaded(format!(
                "request bodies in flight would exceed the budget of {} MiB (--max-inflight-body-bytes); retry",
                self.budget_bytes >> 20
            ))
        })
    }
}

fn too_large(message: String) -> ApiError {
    ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large", message)
}

fn overloaded(message: String) -> ApiError {
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "overloaded", message)
}
