//! Watch streams: newline-delimited JSON events from the change history, then live.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Bytes;
use futures::Stream;
use serde_json::{json, Value};

use super::resources::RESOURCES;
use super::selectors::{FieldSelector, LabelSelector};
use super::store::Change;
use super::Shared;

/// What a list or watch asks for: one resource, maybe one namespace, selectors.
#[derive(Debug, Clone)]
pub struct Filter {
    pub res: usize,
    pub ns: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Filter {
    pub fn matches(&self, ns: &str, obj: &Value) -> bool {
        self.ns.as_deref().is_none_or(|n| n == ns) && self.labels.matches(obj) && self.fields.matches(obj)
    }

    /// The event this watch sees for a change, like the API server's watch cache: an object that
    /// stops matching is DELETED, one that starts matching is ADDED.
    pub fn event_for(&self, c: &Change) -> Option<Value> {
        if c.res != self.res {
            return None;
        }
        let now = self.matches(&c.ns, &c.obj);
        let was = c.prev.as_ref().is_some_and(|p| self.matches(&c.ns, p));
        let (typ, obj) = match c.typ {
            "ADDED" if now => ("ADDED", c.obj.clone()),
            "DELETED" if now => ("DELETED", c.obj.clone()),
            "MODIFIED" if was && now => ("MODIFIED", c.obj.clone()),
            "MODIFIED" if now => ("ADDED", c.obj.clone()),
            "MODIFIED" if was => {
                let mut prev = c.prev.clone().expect("was matched");
                prev["metadata"]["resourceVersion"] = json!(c.rv.to_string());
                ("DELETED", prev)
            }
            _ => return None,
        };
        Some(json!({"type": typ, "object": obj}))
    }
}

pub fn expired_event() -> Value {
    json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": "too old resource version", "reason": "Expired", "code": 410}})
}

pub fn initial_events_end(res: usize, rv: u64) -> Value {
    let r = RESOURCES[res];
    json!({"type": "BOOKMARK", "object": {"kind": r.kind, "apiVersion": r.api_version(), "metadata": {"resourceVersion": rv.to_string(), "annotations": {"k8s.io/initial-events-end": "true"}}}})
}

/// An open watch: events queued, the RV seen so far, and the generations that end it.
pub struct Watch {
    pub shared: Arc<Shared>,
    pub rx: tokio::sync::watch::Receiver<u64>,
    pub filter: Filter,
    pub cursor: u64,
    pub break_gen: u64,
    pub expire_gen: u64,
    pub deadline: Option<tokio::time::Instant>,
    pub pending: VecDeque<Value>,
    pub done: bool,
}

/// One event as the API server writes it: `type` before `object` (Go's field order; a
/// client may read the object without buffering it), then a newline.
fn line(v: &Value) -> Bytes {
    let typ = serde_json::to_string(&v["type"]).expect("JSON values serialize");
    let object = serde_json::to_string(&v["object"]).expect("JSON values serialize");
    Bytes::from(format!("{{\"type\":{typ},\"object\":{object}}}\n"))
}

impl Watch {
    /// Pulls new history into `pending`, or marks the watch done.
    fn poll_store(&mut self) {
        let st = self.shared.store.lock().unwrap();
        if st.closed || st.break_gen != self.break_gen {
            self.done = true;
            return;
        }
        if st.expire_gen != self.expire_gen {
            self.pending.push_back(expired_event());
            self.done = true;
            return;
        }
        let from = st.history.partition_point(|c| c.rv <= self.cursor);
        for c in &st.history[from..] {
            if let Some(ev) = self.filter.event_for(c) {
                self.pending.push_back(ev);
            }
        }
        if let Some(last) = st.history.last() {
            self.cursor = self.cursor.max(last.rv);
        }
    }

    pub fn into_stream(self) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
        futures::stream::unfold(self, |mut w| async move {
            loop {
                if let Some(ev) = w.pending.pop_front() {
                    return Some((Ok(line(&ev)), w));
                }
                if w.done {
                    return None;
                }
                // Mark the tick seen before reading the store: a write after the read wakes us.
                w.rx.borrow_and_update();
                w.poll_store();
                if !w.pending.is_empty() || w.done {
                    continue;
                }
                let deadline = w.deadline;
                let changed = w.rx.changed();
                let ended = match deadline {
                    Some(d) => tokio::select! {
                        r = changed => r.is_err(),
                        _ = tokio::time::sleep_until(d) => true,
                    },
                    None => changed.await.is_err(),
                };
                if ended {
                    w.done = true;
                }
            }
        })
    }
}
