//! Expected against observed waits. An enforced preempt answer says how soon its room is
//! free (`pipeline::PreemptPart::expected`); this keeps that until the view has seen every
//! victim go, then records the wait it took beside the one expected
//! (`coloc_preempt_wait_seconds`, `coloc_preempt_wait_error_seconds`), so an estimate that
//! is wrong shows. At most `KEPT` answers are followed, each for at most `FOLLOWED_FOR`
//! (kube-scheduler may evict elsewhere, or not at all): those are counted as unobserved.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::cluster::{View, ViewCell};
use crate::pipeline::Answer;
use crate::policy::Mode;

/// Answers followed at most; past that the oldest is dropped (counted unobserved).
pub const KEPT: usize = 2_048;

/// How long an answer's victims are waited for.
pub const FOLLOWED_FOR: Duration = Duration::from_secs(30 * 60);

/// How often the view is looked at (the precision of the observed wait).
pub const EVERY: Duration = Duration::from_millis(250);

/// Histogram buckets of the waits, seconds.
pub const WAIT_BUCKETS: &[f64] = &[0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0];

/// Histogram buckets of observed minus expected, seconds.
pub const ERROR_BUCKETS: &[f64] =
    &[-300.0, -120.0, -60.0, -30.0, -10.0, -5.0, -2.0, -1.0, 0.0, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];

struct Followed {
    pod_uid: String,
    victims: Vec<String>,
    expected: Duration,
    /// What the last victim's expected stop came from (`owner`, `class`, `declared`).
    basis: &'static str,
    since: Instant,
}

/// Enforced answers whose victims are not all gone yet.
#[derive(Default)]
pub struct Waits(Mutex<VecDeque<Followed>>);

/// What became of one followed answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Seen {
    /// Every victim gone after `observed`; `expected` was said.
    Gone { expected: Duration, observed: Duration, basis: &'static str },
    /// Not all gone within `FOLLOWED_FOR`, or dropped for a newer answer.
    Unobserved,
}

impl Waits {
    /// Follows an enforced preempt answer that names victims; a preemptor answered again
    /// is followed for its latest answer only.
    pub fn record(&self, answer: &Answer, now: Instant) {
        let Some(expected) = answer.preempt.as_ref().and_then(|p| p.expected.as_ref()) else { return };
        if answer.mode != Mode::Enforce || expected.victims.is_empty() {
            return;
        }
        let mut followed = self.lock();
        followed.retain(|f| f.pod_uid != answer.pod_uid);
        if followed.len() >= KEPT {
            followed.pop_front();
            record(&Seen::Unobserved);
        }
        followed.push_back(Followed {
            pod_uid: answer.pod_uid.clone(),
            victims: expected.victims.clone(),
            expected: Duration::from_millis(expected.wait.ms.max(0) as u64),
            basis: expected.wait.last.as_ref().map_or("declared", |(_, b)| b.as_str()),
            since: now,
        });
    }

    /// Takes what became of the followed answers by `now`, as `view` shows it.
    pub fn check(&self, view: &View, now: Instant) -> Vec<Seen> {
        let mut seen = Vec::new();
        self.lock().retain(|f| {
            let waited = now.saturating_duration_since(f.since);
            if f.victims.iter().all(|uid| view.pod_by_uid(uid).is_none()) {
                seen.push(Seen::Gone { expected: f.expected, observed: waited, basis: f.basis });
                return false;
            }
            if waited > FOLLOWED_FOR {
                seen.push(Seen::Unobserved);
                return false;
            }
            true
        });
        seen
    }

    /// Looks at the view every `EVERY` and records what it shows, until the process ends.
    pub async fn run(self: std::sync::Arc<Self>, view: std::sync::Arc<ViewCell>) {
        let mut tick = tokio::time::interval(EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if self.lock().is_empty() {
                continue;
            }
            let seen = view.read_latest(|v| self.check(v, Instant::now()));
            seen.iter().flatten().for_each(record);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Followed>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn record(seen: &Seen) {
    match seen {
        Seen::Gone { expected, observed, basis } => {
            metrics::histogram!("coloc_preempt_wait_seconds", "estimate" => "expected").record(expected.as_secs_f64());
            metrics::histogram!("coloc_preempt_wait_seconds", "estimate" => "observed").record(observed.as_secs_f64());
            metrics::histogram!("coloc_preempt_wait_error_seconds", "basis" => *basis)
                .record(observed.as_secs_f64() - expected.as_secs_f64());
        }
        Seen::Unobserved => metrics::counter!("coloc_preempt_wait_unobserved_total").increment(1),
    }
}
