//! When each of the requeue controller's failed actions may be tried again: a back-off per
//! action that doubles with every failure, and actions settled for good. Held by the
//! `Requeuer` (`kube`), read and written by `controller`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Back-off after a failed action: doubling from `Settings::backoff`, up to this.
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Per action: when it may be tried again, and how often it failed; or settled for good.
#[derive(Default)]
pub struct Retry(Mutex<HashMap<String, Attempts>>);

#[derive(Debug, Clone, Copy)]
struct Attempts {
    failures: u32,
    next: Instant,
    /// Given up, or found to need no write: never tried again while the plan still asks.
    settled: bool,
}

impl Retry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Attempts>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn due(&self, key: &str, now: Instant) -> bool {
        self.lock().get(key).is_none_or(|a| !a.settled && a.next <= now)
    }

    /// Counts a failure, to be tried again after `first` doubled per failure before it;
    /// the failures so far.
    pub(super) fn failed(&self, key: &str, now: Instant, first: Duration) -> u32 {
        let mut map = self.lock();
        let a = map.entry(key.to_string()).or_insert(Attempts { failures: 0, next: now, settled: false });
        a.failures += 1;
        let wait = first.saturating_mul(1 << (a.failures - 1).min(10)).min(BACKOFF_MAX);
        a.next = now + wait;
        a.failures
    }

    pub(super) fn succeeded(&self, key: &str) {
        self.lock().remove(key);
    }

    pub(super) fn settle(&self, key: &str) {
        self.lock().insert(key.to_string(), Attempts { failures: 0, next: Instant::now(), settled: true });
    }

    /// Forgets actions the plan no longer asks for.
    pub(super) fn keep_only(&self, keys: &std::collections::HashSet<String>) {
        self.lock().retain(|k, _| keys.contains(k));
    }
}

/// Since when each action has been planned, while the plan keeps asking for it.
#[derive(Default)]
pub struct Planned(Mutex<HashMap<String, Instant>>);

impl Planned {
    /// How long `key` has been planned, counting from `now` if it is new.
    pub(super) fn for_how_long(&self, key: &str, now: Instant) -> Duration {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        now.saturating_duration_since(*map.entry(key.to_string()).or_insert(now))
    }

    /// Forgets actions the plan no longer asks for.
    pub(super) fn keep_only(&self, keys: &std::collections::HashSet<String>) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).retain(|k, _| keys.contains(k));
    }
}
