//! Pod events fed to the watch, and the wait until the view shows each.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc as std_mpsc, Arc};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use coloc_extender::cluster::ViewCell;
use tokio::sync::mpsc;

use crate::cluster::{pod_key, write_pod, Spec, SEQ_LABEL};

/// Pods touched by successive events: a stride through every pod, so consecutive events
/// land on different nodes and namespaces.
pub(crate) struct Events {
    pub(crate) spec: Spec,
    pub(crate) stride: usize,
    pub(crate) next: usize,
    pub(crate) seq: u64,
}

impl Events {
    pub(crate) fn new(spec: Spec) -> Events {
        let total = spec.pods();
        let stride = [7919, 7907, 7901, 7883, 1].into_iter().find(|s| total % s != 0).unwrap_or(1);
        Events { spec, stride, next: 0, seq: 0 }
    }

    /// The next MODIFIED event: (pod key, sequence number, the event line).
    pub(crate) fn next(&mut self) -> (String, u64, Bytes) {
        self.seq += 1;
        let p = self.next;
        self.next = (self.next + self.stride) % self.spec.pods();
        let mut s = String::with_capacity(3400);
        s.push_str(r#"{"type":"MODIFIED","object":"#);
        write_pod(&mut s, self.spec, p, 1_000_000 + self.seq, Some(self.seq));
        s.push_str("}\n");
        (pod_key(self.spec, p), self.seq, Bytes::from(s))
    }
}

/// The sequence number the view shows for `key` (0 if none).
pub(crate) fn visible_seq(cell: &ViewCell, key: &str) -> u64 {
    cell.load().and_then(|v| v.pod(key).and_then(|p| p.labels.get(SEQ_LABEL)).and_then(|s| s.parse().ok())).unwrap_or(0)
}

/// Polls `cell.load()` until `key` shows `seq` or later; the instant it was seen. Spins
/// (yielding) for the first `spin`, then sleeps `nap` between looks, so that on 2 cores the
/// poller does not take the CPU the watch needs to apply the event.
pub(crate) fn wait_visible(
    cell: &ViewCell,
    key: &str,
    seq: u64,
    spin: Duration,
    nap: Duration,
    limit: Duration,
) -> Option<Instant> {
    let start = Instant::now();
    loop {
        if visible_seq(cell, key) >= seq {
            return Some(Instant::now());
        }
        let waited = start.elapsed();
        if waited > limit {
            return None;
        }
        if waited < spin {
            std::hint::spin_loop();
            std::thread::yield_now();
        } else {
            std::thread::sleep(nap);
        }
    }
}

/// Sends events at `rate`/s while `on` (until `stop`), stamping each in `side` if given.
pub(crate) fn feeder(
    mut events: Events,
    tx: mpsc::Sender<Bytes>,
    rate: f64,
    on: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    side: Option<std_mpsc::Sender<(String, u64, Instant)>>,
) -> (Events, u64) {
    let period = Duration::from_secs_f64(1.0 / rate);
    let mut sent = 0u64;
    let mut next_at = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if !on.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(1));
            next_at = Instant::now();
            continue;
        }
        let now = Instant::now();
        if next_at > now {
            std::thread::sleep(next_at - now);
        }
        next_at += period;
        let (key, seq, line) = events.next();
        let at = Instant::now();
        if let Some(side) = &side {
            let _ = side.send((key, seq, at));
        }
        if tx.blocking_send(line).is_err() {
            break;
        }
        sent += 1;
    }
    (events, sent)
}
