//! What happens once an answer is made: shadow differences counted, the decision kept for
//! `/decisions`, the preemptor's Event queued (written by another task).

use super::metrics;
use super::state::AppState;
use crate::pipeline::{Answer, Verb};
use crate::policy::Mode;

pub fn answered(state: &AppState, verb: Verb, answer: &Answer) {
    metrics::record_shadow_diffs(verb.as_str(), &answer.diffs);
    state.decisions.record(verb, answer, (state.clock)());
    // Shadow answers are kube-scheduler's own: an Event about the policy's would mislead.
    if let (Some(sink), Verb::Preempt, Mode::Enforce) = (&state.events, verb, answer.mode) {
        if let Some(event) = crate::events::for_preempt(answer) {
            sink.offer(event);
        }
    }
}
