//! Requeue's writes (copies, releases) yield to kube-scheduler: while its preemptions keep
//! coming (new marks in the requeue controller's view), they wait for a pause of `QUIET`,
//! at most `MAX_WAIT`. The API server then serves
//! kube-scheduler's deletions and bindings first, and released copies do not queue beside
//! the online pods that are still being placed. Evicted pods wait in the view meanwhile
//! (their bytes are kept), so nothing is lost by waiting unless every replica dies within
//! it, and the wait is bounded for a storm that does not end.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A pause in preempt requests this long lets background work go.
pub const QUIET: Duration = Duration::from_millis(250);
/// Background work waits at most this long for a pause.
pub const MAX_WAIT: Duration = Duration::from_secs(15);

pub struct Pace {
    epoch: Instant,
    /// Milliseconds since `epoch` of the last preempt request (0: none yet).
    last_preempt: AtomicU64,
    /// Milliseconds since `epoch` when background work began to wait (0: not waiting).
    waiting_since: AtomicU64,
}

impl Default for Pace {
    fn default() -> Self {
        Pace { epoch: Instant::now(), last_preempt: AtomicU64::new(0), waiting_since: AtomicU64::new(0) }
    }
}

impl Pace {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    pub fn preempt_seen(&self) {
        self.preempt_seen_at(self.now_ms());
    }

    /// May background work go now?
    pub fn may_go(&self) -> bool {
        self.may_go_at(self.now_ms())
    }

    fn preempt_seen_at(&self, now: u64) {
        self.last_preempt.store(now, Ordering::Relaxed);
    }

    fn may_go_at(&self, now: u64) -> bool {
        let last = self.last_preempt.load(Ordering::Relaxed);
        if last == 0 || now.saturating_sub(last) >= QUIET.as_millis() as u64 {
            self.waiting_since.store(0, Ordering::Relaxed);
            return true;
        }
        match self.waiting_since.load(Ordering::Relaxed) {
            0 => {
                self.waiting_since.store(now, Ordering::Relaxed);
                false
            }
            since => now.saturating_sub(since) >= MAX_WAIT.as_millis() as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUIET_MS: u64 = QUIET.as_millis() as u64;
    const MAX_WAIT_MS: u64 = MAX_WAIT.as_millis() as u64;

    #[test]
    fn background_work_waits_for_a_pause_in_preempts() {
        let pace = Pace::default();
        assert!(pace.may_go_at(10), "no preempt yet");
        pace.preempt_seen_at(100);
        assert!(!pace.may_go_at(100 + QUIET_MS - 1));
        assert!(pace.may_go_at(100 + QUIET_MS), "a pause of QUIET");
    }

    #[test]
    fn but_not_longer_than_max_wait_in_a_storm_that_does_not_end() {
        let pace = Pace::default();
        let mut now = 1_000;
        pace.preempt_seen_at(now);
        assert!(!pace.may_go_at(now), "the wait begins");
        while now < 1_000 + MAX_WAIT_MS - QUIET_MS {
            now += QUIET_MS / 2;
            pace.preempt_seen_at(now);
            assert!(!pace.may_go_at(now), "still waiting at {now}");
        }
        now += QUIET_MS;
        pace.preempt_seen_at(now);
        assert!(pace.may_go_at(now), "waited MAX_WAIT: it goes");
    }
}
