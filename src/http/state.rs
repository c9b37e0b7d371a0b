//! Shared state of the HTTP service.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

use crate::cluster::ViewCell;
use crate::model::Timestamp;
use crate::policy::Policy;

/// Where the cluster view comes from; decides what `/readyz` waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewSource {
    /// Request-only decisions; always ready once the policy is loaded.
    None,
    Snapshot,
    Kubernetes,
}

#[derive(Debug, Clone)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub request_timeout: Duration,
    pub max_concurrency: usize,
    /// Bodies above this are decoded on the blocking pool, off the I/O threads.
    pub inline_decode_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 128 << 20,
            request_timeout: Duration::from_secs(4),
            max_concurrency: 256,
            inline_decode_bytes: 256 << 10,
        }
    }
}

#[derive(Clone)]
pub struct AppState {
    pub policy: Arc<ArcSwap<Policy>>,
    pub view: Arc<ViewCell>,
    pub view_source: ViewSource,
    pub limits: Limits,
    /// Seconds since the epoch; replaceable so tests are deterministic.
    pub clock: Arc<dyn Fn() -> Timestamp + Send + Sync>,
}

impl AppState {
    pub fn new(policy: Policy, view: Arc<ViewCell>, view_source: ViewSource) -> Self {
        AppState {
            policy: Arc::new(ArcSwap::from_pointee(policy)),
            view,
            view_source,
            limits: Limits::default(),
            clock: Arc::new(system_now),
        }
    }

    pub fn is_ready(&self) -> bool {
        self.view_source == ViewSource::None || self.view.is_ready()
    }
}

pub fn system_now() -> Timestamp {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
