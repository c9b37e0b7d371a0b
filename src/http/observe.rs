//! What happens once an answer is made: shadow differences counted, the decision kept for
//! `/decisions`, the preemptor's Event queued (written by another task), and a victim of
//! last resort counted and told on the pod and its namespace.

use super::prometheus;
use super::state::{AppState, ViewSource};
use crate::clock::system_now;
use crate::cluster::watch::STALE_AFTER_SECS;
use crate::pipeline::{Answer, Verb};
use crate::policy::Mode;

pub fn answered(state: &AppState, verb: Verb, answer: &Answer) {
    prometheus::record_shadow_diffs(verb.as_str(), answer.diffs());
    prometheus::record_discarded(answer);
    state.decisions.record(verb, answer, answer.decided_at);
    // Shadow answers are kube-scheduler's own: an Event about the policy's would mislead.
    if (verb, answer.mode) != (Verb::Preempt, Mode::Enforce) {
        return;
    }
    if state.view_source == ViewSource::Kubernetes {
        state.waits.record(answer, std::time::Instant::now());
    }
    for (_, reason) in crate::events::last_resort_victims(&answer.explanations) {
        ::metrics::counter!("coloc_bare_lost_total", "reason" => reason.as_str()).increment(1);
    }
    if let Some(sink) = &state.events {
        if let Some(event) = crate::events::for_preempt(&answer.pod, &answer.pod_uid, &answer.explanations) {
            sink.offer(event);
        }
        for event in crate::events::for_last_resort(&answer.pod, &answer.explanations) {
            sink.offer(event);
        }
    }
}

/// View freshness as gauges, computed when scraped: `coloc_view_stale` (1 once a watch has
/// failed for longer than STALE_AFTER_SECS and decisions fall back to `withoutView`) and
/// `coloc_view_watch_failing_seconds` (the longest-failing watch, 0 when all are well).
pub fn view_freshness(state: &AppState) {
    if state.view_source == ViewSource::None {
        return;
    }
    let now = system_now();
    ::metrics::gauge!("coloc_view_ready").set(if state.readiness.is_ready() { 1.0 } else { 0.0 });
    let (stale, failing) = match &state.freshness {
        Some(f) => (
            f.is_stale(now, STALE_AFTER_SECS),
            f.failing_kinds().iter().map(|k| now - f.failing_since(k)).max().unwrap_or(0),
        ),
        None => (false, 0),
    };
    ::metrics::gauge!("coloc_view_stale").set(if stale { 1.0 } else { 0.0 });
    ::metrics::gauge!("coloc_view_watch_failing_seconds").set(failing.max(0) as f64);
}
