//! The wake edge: asked for by the request path (never waits there), carried out by one
//! task once the view is ready, at most once per `min_interval`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::{Api, Client};
use tokio::sync::Notify;

use super::due::Due;
use super::{placeholder, Reason, LABEL};
use crate::cluster::ViewCell;
use crate::model::Timestamp;

/// How long a placeholder exists: long enough for kube-scheduler's pod informer to see it
/// even across a short reconnect, so that its deletion is an event there.
const HOLD: Duration = Duration::from_secs(2);

pub struct Waker {
    client: Client,
    namespace: String,
    wanted: AtomicBool,
    notify: Notify,
    /// Wakes owed later: pods kept off online room until then.
    due: Mutex<Due>,
}

impl Waker {
    pub fn new(client: Client, namespace: String) -> Arc<Waker> {
        Arc::new(Waker {
            client,
            namespace,
            wanted: AtomicBool::new(false),
            notify: Notify::new(),
            due: Mutex::new(Due::default()),
        })
    }

    /// Asks for a wake; cheap, never blocks. Requests before the next wake merge.
    pub fn request(&self, reason: Reason) {
        metrics::counter!("coloc_wake_requests_total", "reason" => reason.as_str()).increment(1);
        if !self.wanted.swap(true, Ordering::AcqRel) {
            tracing::debug!(reason = reason.as_str(), "wake requested");
            self.notify.notify_one();
        }
    }

    /// Asks for a wake at `at` (seconds since the epoch); cheap, never blocks.
    pub fn request_at(&self, at: Timestamp) {
        self.due.lock().unwrap_or_else(|e| e.into_inner()).owe(at);
    }

    /// Wakes whenever asked or the view becomes ready, once it is ready, at most once per
    /// `min_interval`; a failed wake is tried again.
    pub async fn run(self: Arc<Self>, cell: Arc<ViewCell>, min_interval: Duration) {
        let mut was_ready = false;
        let mut last: Option<Instant> = None;
        loop {
            tokio::select! {
                _ = self.notify.notified() => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
            if self.due.lock().unwrap_or_else(|e| e.into_inner()).take(crate::clock::system_now()) {
                self.request(Reason::KeptOffOver);
            }
            let ready = cell.is_ready();
            if ready && !was_ready {
                self.request(Reason::Ready);
            }
            was_ready = ready;
            if !ready || !self.wanted.load(Ordering::Acquire) || last.is_some_and(|t| t.elapsed() < min_interval) {
                continue;
            }
            self.wanted.store(false, Ordering::Release);
            last = Some(Instant::now());
            match self.wake().await {
                Ok(name) => {
                    metrics::counter!("coloc_wakes_total", "outcome" => "ok").increment(1);
                    tracing::info!(placeholder = %format!("{}/{name}", self.namespace), "woke pods kube-scheduler may have parked");
                }
                Err(e) => {
                    metrics::counter!("coloc_wakes_total", "outcome" => "failed").increment(1);
                    tracing::warn!(error = %e, "cannot wake parked pods; will retry");
                    self.wanted.store(true, Ordering::Release);
                }
            }
        }
    }

    fn api(&self) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            &self.namespace,
            &ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
        )
    }

    async fn wake(&self) -> Result<String, kube::Error> {
        let api = self.api();
        let object: DynamicObject =
            serde_json::from_value(placeholder(&self.namespace)).map_err(kube::Error::SerdeError)?;
        let created = api.create(&PostParams::default(), &object).await?;
        let name = created.metadata.name.unwrap_or_default();
        tokio::time::sleep(HOLD).await;
        // This one and any leftover of an earlier failed delete.
        let leftovers = api.list(&ListParams::default().labels(&format!("{LABEL}=true"))).await?;
        let now = DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
        for pod in leftovers.items {
            if let Some(n) = pod.metadata.name {
                match api.delete(&n, &now).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(name)
    }
}
