//! Shared state of the HTTP service.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::{ArcSwap, ArcSwapOption};

use super::decision_log::DecisionLog;
use crate::clock::system_now;
use crate::cluster::watch::Freshness;
use crate::cluster::{Readiness, ViewCell};
use crate::model::Timestamp;
use crate::policy::Policy;
use crate::wire::Caps;

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
    /// Bytes of request bodies held at once, over all requests; beyond it new ones get 503.
    pub max_inflight_body_bytes: usize,
    /// Time for a body to arrive (within `request_timeout`).
    pub body_timeout: Duration,
    /// Element caps of one request.
    pub caps: Caps,
    /// Threads deciding bodies above `inline_decode_bytes`.
    pub decision_workers: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 128 << 20,
            request_timeout: Duration::from_secs(4),
            max_concurrency: 256,
            inline_decode_bytes: 256 << 10,
            max_inflight_body_bytes: 512 << 20,
            body_timeout: Duration::from_secs(2),
            caps: Caps::default(),
            decision_workers: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2),
        }
    }
}

#[derive(Clone)]
pub struct AppState {
    pub policy: Arc<ArcSwap<Policy>>,
    pub view: Arc<ViewCell>,
    pub view_source: ViewSource,
    /// The view `/readyz` waits for: `view`, or the requeue controller's in its process.
    pub readiness: Arc<dyn Readiness>,
    pub limits: Limits,
    /// Seconds since the epoch; replaceable so tests are deterministic.
    pub clock: Arc<dyn Fn() -> Timestamp + Send + Sync>,
    /// Whether the requeue controller copies preempted bare pods (its Lease, `serve
    /// --requeue`); while it cannot, bare pods of `requeue` classes are victims of last
    /// resort.
    pub requeue: Arc<crate::requeue::availability::Availability>,
    /// Per-kind watch health, with `--kube` (for `/readyz` detail).
    pub freshness: Option<Arc<Freshness>>,
    /// Why the policy file could not be reloaded (the last good policy is in force).
    pub policy_problem: Arc<ArcSwapOption<String>>,
    /// Recent decisions per pod (`GET /decisions` on the admin port).
    pub decisions: Arc<DecisionLog>,
    /// Writes Events on preemptors (`serve --kube --events`).
    pub events: Option<Arc<crate::events::kube::EventSink>>,
    /// What the verbs' answers share between requests: the preempt flow's catch-up, the
    /// room recent answers promised, wakes.
    pub service: Arc<crate::service::Service>,
    /// Enforced preempt answers whose victims are not all gone: their expected wait is
    /// checked against the one observed (`serve --kube`).
    pub waits: Arc<super::waits::Waits>,
}

impl AppState {
    pub fn new(policy: Policy, view: Arc<ViewCell>, view_source: ViewSource) -> Self {
        // Only a watched view trails kube-scheduler: a snapshot is the whole truth.
        let watched = (view_source == ViewSource::Kubernetes).then(|| view.clone());
        AppState {
            policy: Arc::new(ArcSwap::from_pointee(policy)),
            readiness: view.clone(),
            view,
            view_source,
            limits: Limits::default(),
            clock: Arc::new(system_now),
            requeue: Arc::new(crate::requeue::availability::Availability::new(false)),
            freshness: None,
            policy_problem: Arc::new(ArcSwapOption::empty()),
            decisions: Arc::new(DecisionLog::default()),
            events: None,
            service: Arc::new(crate::service::Service::new(watched, None)),
            waits: Default::default(),
        }
    }

    pub fn is_ready(&self) -> bool {
        self.view_source == ViewSource::None || self.readiness.is_ready()
    }

    /// What `/readyz` says besides ready or not: view source and health, requeue.
    pub fn readiness_detail(&self) -> String {
        let mut lines = vec![format!("view: {:?}", self.view_source)];
        if let Some(f) = &self.freshness {
            let unsynced = f.unsynced_kinds();
            if !unsynced.is_empty() {
                lines.push(format!("waiting for the first list of: {}", unsynced.join(", ")));
            }
            let stale = f.stale_kinds(system_now(), crate::cluster::watch::STALE_AFTER_SECS);
            if !stale.is_empty() {
                lines.push(format!(
                    "stale (watch failing for over {}s): {}",
                    crate::cluster::watch::STALE_AFTER_SECS,
                    stale.join(", ")
                ));
            }
        }
        if let Some(problem) = self.policy_problem.load_full() {
            lines.push(problem.to_string());
        }
        let policy = self.policy.load();
        let requeue_classes = policy.requeue_classes();
        lines.push(match (self.requeue.is_on(), requeue_classes.is_empty()) {
            (true, _) if self.requeue.copies_possible() => "requeue: on".to_string(),
            (true, _) => format!(
                "requeue: unavailable ({}): until it is back, bare pods of {} are victims of last resort (taken only for an online pod nothing else places, and lost)",
                self.requeue.why_not().unwrap_or_default(),
                requeue_classes.join(", ")
            ),
            (false, true) => "requeue: off (no class requeues bare victims)".to_string(),
            (false, false) => format!(
                "requeue: off (serve --kube --requeue): bare pods of {} are victims of last resort (taken only for an online pod nothing else places, and lost)",
                requeue_classes.join(", ")
            ),
        });
        lines.join("\n")
    }
}
