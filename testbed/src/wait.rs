//! Polling until something holds, with a deadline and a message saying what did not.

use std::future::Future;
use std::time::{Duration, Instant};

/// Polls `check` every 100 ms until it returns `Some`, or fails after `timeout` with
/// `what` and the last state `check` described.
pub async fn until<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let last = match check().await {
            Ok(v) => return Ok(v),
            Err(state) => state,
        };
        if Instant::now() >= deadline {
            anyhow::bail!("timed out after {timeout:?} waiting for {what}; last: {last}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
