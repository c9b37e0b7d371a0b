//! The one data path every verb takes, in `serve` and in `replay` alike:
//! bytes → decode → decide → encode, plus the explanation.

use std::str::FromStr;

use crate::cluster::View;
use crate::decide::{self, Context, Explanation, Requeue};
use crate::model::Timestamp;
use crate::policy::Policy;
use crate::requeue::RequeueIntent;
use crate::wire::{self, response::to_json, Bounds, response::to_json_sized, DecodeError, FilterResult, NodeSet};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Filter,
    Prioritize,
    Preempt,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Filter => "filter",
            Verb::Prioritize => "prioritize",
            Verb::Preempt => "preempt",
        }
    }
}

impl FromStr for Verb {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "filter" => Ok(Verb::Filter),
            "prioritize" => Ok(Verb::Prioritize),
            "preempt" => Ok(Verb::Preempt),
            other => Err(format!("unknown verb {other:?}: expected filter, prioritize or preempt")),
        }
    }
}

/// The wire answer and why it is what it is.
pub struct Answer {
    pub body: Vec<u8>,
    pub pod: String,
    pub explanations: Vec<Explanation>,
    /// Replacements to store before `body` may be sent (preempt only).
    pub requeues: Vec<RequeueIntent>,
}

/// Answers with `view` as the whole truth (replay, tests, benchmarks). Requeue is
/// simulated as enabled: the answer shows what would be requeued, and nothing is written.
pub fn answer(verb: Verb, body: &[u8], policy: &Policy, view: Option<&View>, now: Timestamp) -> Result<Answer, DecodeError> {
    answer_in(verb, body, &Context { policy, view, view_expected: view.is_some(), now, requeue: Requeue::enabled() })
}

pub fn answer_in(verb: Verb, body: &[u8], ctx: &Context) -> Result<Answer, DecodeError> {
    answer_within(verb, body, ctx, &Bounds::default())
}

/// `answer_in` under the request's caps and cancel flag: a cancelled request stops while
/// decoding, or before deciding.
pub fn answer_within(verb: Verb, body: &[u8], ctx: &Context, bounds: &Bounds) -> Result<Answer, DecodeError> {
    let ctx = *ctx;
    match verb {
        Verb::Filter => {
            let args = wire::decode_extender_args_within(body, bounds)?;
            bounds.check()?;
            let out = decide::filter(&args, &ctx);
            let body = match &args.nodes {
                NodeSet::Objects(nodes) => {
                    let kept: Vec<_> = out.kept.iter().map(|&i| nodes[i].raw).collect();
                    let size = kept.iter().map(|r| r.get().len() + 1).sum::<usize>() + 256 + 128 * (out.failed.len() + out.unresolvable.len());
                    to_json_sized(&FilterResult::objects(kept, &out.failed, &out.unresolvable), size)
                }
                NodeSet::Names(names) => to_json(&FilterResult::names(
                    out.kept.iter().map(|&i| names[i].as_str()).collect(),
                    &out.failed,
                    &out.unresolvable,
                )),
            };
            Ok(Answer { body, pod: args.pod.key(), explanations: out.explanations, requeues: Vec::new() })
        }
        Verb::Prioritize => {
            let args = wire::decode_extender_args_within(body, bounds)?;
            bounds.check()?;
            let out = decide::prioritize(&args, &ctx);
            Ok(Answer { body: to_json(&out.scores), pod: args.pod.key(), explanations: out.explanations, requeues: Vec::new() })
        }
        Verb::Preempt => {
            // Nodes the view knows are re-selected from its pods: skip decoding kube's.
            let args = wire::decode_preempt_args_for(body, |node| ctx.view.is_none_or(|v| v.node(node).is_none()), bounds)?;
            bounds.check()?;
            let out = decide::preempt(&args, &ctx);
            Ok(Answer { body: to_json(&out.result), pod: args.pod.key(), explanations: out.explanations, requeues: out.requeues })
        }
    }
}
