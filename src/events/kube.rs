//! Writes the Events of preempt answers (and a replica's own) through kube-rs's `Recorder` (reporting controller
//! `coloc-extender`), on a task of its own: the answer never waits for the API server, a
//! full queue drops the Event, and a failed write is logged and counted.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Client;
use tokio::sync::mpsc;

use super::{PodEvent, Regarding, Throttle};
use crate::model::Timestamp;

/// The reporting controller on every Event the extender writes.
pub const REPORTER: &str = "coloc-extender";

/// `instance` names this replica (the pod name, typically).
pub fn reporter(instance: Option<String>) -> Reporter {
    Reporter { controller: REPORTER.into(), instance }
}

/// Events waiting to be written; beyond this they are dropped (and counted).
const QUEUE: usize = 1024;
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

pub struct EventSink {
    queue: mpsc::Sender<PodEvent>,
    throttle: Arc<Mutex<Throttle>>,
    clock: Arc<dyn Fn() -> Timestamp + Send + Sync>,
}

impl EventSink {
    /// Starts the writer task. `throttle` decides per pod what is written.
    pub fn start(
        client: Client,
        reporter: Reporter,
        throttle: Throttle,
        clock: Arc<dyn Fn() -> Timestamp + Send + Sync>,
    ) -> EventSink {
        let (queue, rx) = mpsc::channel(QUEUE);
        tokio::spawn(write_loop(client, reporter, rx));
        EventSink { queue, throttle: Arc::new(Mutex::new(throttle)), clock }
    }

    /// Never waits: throttled Events are skipped, a full queue drops the Event.
    pub fn offer(&self, event: PodEvent) {
        let admitted = self.throttle.lock().unwrap_or_else(|e| e.into_inner()).admit(&event, (self.clock)());
        if !admitted {
            count("throttled");
            return;
        }
        if self.queue.try_send(event).is_err() {
            count("dropped");
        }
    }
}

fn count(result: &'static str) {
    metrics::counter!("coloc_events_total", "result" => result).increment(1);
}

async fn write_loop(client: Client, reporter: Reporter, mut rx: mpsc::Receiver<PodEvent>) {
    while let Some(e) = rx.recv().await {
        // A Namespace is cluster-scoped: the recorder writes its Events in `default`.
        let regarding = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some(e.regarding.kind().into()),
            namespace: (e.regarding == Regarding::Pod).then(|| e.namespace.clone()),
            name: Some(e.name.clone()),
            uid: (!e.uid.is_empty()).then(|| e.uid.clone()),
            ..Default::default()
        };
        let event = Event {
            type_: if e.warning { EventType::Warning } else { EventType::Normal },
            reason: e.reason.into(),
            note: Some(e.note.clone()),
            action: e.action.into(),
            secondary: None,
        };
        // A recorder per Event: its cache would turn a changed note into a count on the
        // old one; repeats are already held back by the Throttle.
        let recorder = Recorder::new(client.clone(), reporter.clone());
        match tokio::time::timeout(WRITE_TIMEOUT, recorder.publish(&event, &regarding)).await {
            Ok(Ok(())) => count("written"),
            Ok(Err(err)) => {
                count("failed");
                tracing::warn!(pod = %format!("{}/{}", e.namespace, e.name), reason = e.reason, error = %err, "cannot record event");
            }
            Err(_) => {
                count("failed");
                tracing::warn!(pod = %format!("{}/{}", e.namespace, e.name), reason = e.reason, "event not recorded within 5 s");
            }
        }
    }
}
