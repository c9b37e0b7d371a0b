//! What happens after an answer is made, off its critical path: shadow differences counted,
//! the decision kept for `/decisions`.

use super::metrics;
use super::state::AppState;
use crate::pipeline::{Answer, Verb};

pub fn answered(state: &AppState, verb: Verb, answer: &Answer) {
    metrics::record_shadow_diffs(verb.as_str(), &answer.diffs);
    state.decisions.record(verb, answer, (state.clock)());
}
