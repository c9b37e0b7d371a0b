//! The wall clock, in the one place every layer may read it from: decisions take `now` as
//! input, and the edges (HTTP, watches, requeue) ask here.

use crate::model::Timestamp;

/// Seconds since the Unix epoch.
pub fn system_now() -> Timestamp {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// Milliseconds since the Unix epoch.
pub fn system_now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}
