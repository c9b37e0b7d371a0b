//! The one data path every verb takes, in `serve` and in `replay` alike:
//! bytes → decode → decide → encode, plus the explanation.

use std::str::FromStr;

use crate::cluster::View;
use crate::decide::promised::PromisedRoom;
use crate::decide::{self, Context, Detail, Requeue};
use crate::discarded::{self, Discarded};
use crate::explanation::Explanation;
use crate::explanation::{Code, Verdict};
use crate::model::{RequeueIntent, Timestamp};
use crate::policy::{Mode, Policy};
use crate::shadow::{self, Diffs};
use crate::waiting::{self, Expected};
use crate::wire::{
    self, error::DecodeError, to_json, to_json_sized, Bounds, FilterResult, HostPriority, NodeSet, PreemptionResult,
};

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

    /// 0, 1, 2: for what is kept per verb.
    pub fn index(self) -> usize {
        self as usize
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

/// The wire answer and why it is what it is: what every verb answers, plus what only a
/// preempt, or only shadow mode, adds.
pub struct Answer {
    pub body: Vec<u8>,
    pub pod: String,
    /// The pod's UID: Events are matched to the pod by it.
    pub pod_uid: String,
    pub explanations: Vec<Explanation>,
    /// The policy's `mode` this answer was made in.
    pub mode: Mode,
    /// One line on the policy's answer, e.g. "kept 3 of 5 node(s)".
    pub summary: String,
    /// The decision's time (`Context::now`).
    pub decided_at: Timestamp,
    /// Filter only: the pod was kept off online room until then, when kube-scheduler
    /// should try it again (`wake`). Never in shadow mode, which keeps nothing off.
    pub retry_at: Option<Timestamp>,
    /// Preempt answers only.
    pub preempt: Option<PreemptPart>,
    /// Shadow mode only: the policy's answer, which was not sent, and what it would change.
    pub shadow: Option<ShadowPart>,
}

/// What a preempt answer carries besides the body.
#[derive(Debug, Default)]
pub struct PreemptPart {
    /// Bare victims the requeue controller brings back once they are evicted (never in
    /// shadow mode, where the victims are kube-scheduler's own).
    pub requeues: Vec<RequeueIntent>,
    /// kube-scheduler's cache was ahead of the view (see `PreemptOutcome`).
    pub view_behind: bool,
    /// The run time the sent answer discards (in shadow mode: kube-scheduler's own choice).
    pub discarded: Option<Discarded>,
    /// The room this answer promises its preemptor on each node it returns, held for the
    /// next preemptors until the view shows the nomination (none in shadow mode: the answer
    /// is kube-scheduler's own).
    pub promised: Vec<PromisedRoom>,
    /// How soon the sent answer's room is expected free (in shadow mode: kube-scheduler's
    /// own choice), on the node kube-scheduler picks.
    pub expected: Option<Expected>,
}

/// What shadow mode keeps aside: the policy's answer and what it would have changed.
#[derive(Debug)]
pub struct ShadowPart {
    pub diffs: Diffs,
    pub would_answer: Vec<u8>,
    /// Preempt: what the policy's answer would have discarded.
    pub would_discard: Option<Discarded>,
}

/// No differences: an enforced answer's.
static NO_DIFFS: Diffs = Diffs(std::collections::BTreeMap::new());

impl Answer {
    fn enforced(
        ctx: &Context,
        body: Vec<u8>,
        pod: &crate::model::Pod,
        explanations: Vec<Explanation>,
        summary: String,
    ) -> Answer {
        Answer {
            body,
            pod: pod.key(),
            pod_uid: pod.uid.clone(),
            explanations,
            mode: Mode::Enforce,
            summary,
            decided_at: ctx.now,
            retry_at: None,
            preempt: None,
            shadow: None,
        }
    }

    /// In shadow mode `body` becomes kube-scheduler's own answer (`neutral`) and the
    /// policy's is kept aside; requeue intents are dropped, so nothing is written.
    fn in_mode(
        mut self,
        mode: Mode,
        would_discard: Option<Discarded>,
        neutral: impl FnOnce() -> Vec<u8>,
        diffs: impl FnOnce(&Answer) -> Diffs,
    ) -> Answer {
        if mode == Mode::Shadow {
            let diffs = diffs(&self);
            let would_answer = std::mem::replace(&mut self.body, neutral());
            self.shadow = Some(ShadowPart { diffs, would_answer, would_discard });
            if let Some(p) = self.preempt.as_mut() {
                p.requeues.clear();
                p.promised.clear();
            }
            self.mode = Mode::Shadow;
            self.retry_at = None;
        }
        self
    }

    /// The bare victims the requeue controller brings back once they are evicted (preempt
    /// only; explained, never stored by the answer).
    pub fn requeues(&self) -> &[RequeueIntent] {
        self.preempt.as_ref().map_or(&[], |p| &p.requeues)
    }

    pub fn view_behind(&self) -> bool {
        self.preempt.as_ref().is_some_and(|p| p.view_behind)
    }

    /// The run time the sent answer discards (preempt only).
    pub fn discarded(&self) -> Option<&Discarded> {
        self.preempt.as_ref().and_then(|p| p.discarded.as_ref())
    }

    /// Shadow mode: what the policy's answer would have changed (none when enforcing).
    pub fn diffs(&self) -> &Diffs {
        self.shadow.as_ref().map_or(&NO_DIFFS, |s| &s.diffs)
    }

    /// Shadow mode: the policy's answer, which was not sent.
    pub fn would_answer(&self) -> Option<&[u8]> {
        self.shadow.as_ref().map(|s| s.would_answer.as_slice())
    }

    /// Shadow mode, preempt: what the policy's answer would have discarded.
    pub fn would_discard(&self) -> Option<&Discarded> {
        self.shadow.as_ref().and_then(|s| s.would_discard.as_ref())
    }
}

/// kube-scheduler's own answer to `body` echoed, decided by nothing: what shadow mode sends at
/// once, its policy's decision made after, off the answer path (`Service`). The body is
/// read as the decision reads it with the same `view` (what the view holds by name only,
/// the rest whole), so it is refused as the decision would refuse it.
pub fn echo(
    verb: Verb,
    body: &[u8],
    bounds: &Bounds,
    now: Timestamp,
    view: Option<&View>,
) -> Result<Answer, DecodeError> {
    let held = |node: &str| view.is_some_and(|v| v.node(node).is_some());
    let (sent, pod) = match verb {
        Verb::Filter | Verb::Prioritize => {
            let args = wire::decode_extender_args_for(body, held, bounds)?;
            let sent =
                if verb == Verb::Filter { shadow::filter_answer(&args) } else { shadow::prioritize_answer(&args) };
            (sent, args.pod)
        }
        Verb::Preempt => {
            let args = wire::decode_preempt_args_for(body, |node| !held(node), bounds)?;
            (to_json(&shadow::kube_candidates(&args)), args.pod)
        }
    };
    bounds.check()?;
    Ok(Answer {
        body: sent,
        pod: pod.key(),
        pod_uid: pod.uid,
        explanations: Vec::new(),
        mode: Mode::Shadow,
        summary: "kube-scheduler's own answer, the policy's decided after it".into(),
        decided_at: now,
        retry_at: None,
        preempt: None,
        shadow: None,
    })
}

/// `answer` with `view` as the whole truth and nothing carried between requests (tests,
/// benchmarks, fuzzing). Requeue is simulated as enabled: the answer shows what would be
/// requeued, and nothing is written.
pub fn replay(
    verb: Verb,
    body: &[u8],
    policy: &Policy,
    view: Option<&View>,
    now: Timestamp,
) -> Result<Answer, DecodeError> {
    let ctx = Context {
        policy,
        view,
        view_expected: view.is_some(),
        now,
        requeue: Requeue::enabled(),
        detail: Detail::Decisions,
        promised: &[],
        undeleted: &[],
    };
    answer(verb, body, &ctx, &Bounds::default())
}

/// The answer to `body` in the policy's `mode` (enforced, or in shadow as if the extender
/// were absent), under the request's caps and cancel flag: a cancelled request stops while
/// decoding, or before deciding.
pub fn answer(verb: Verb, body: &[u8], ctx: &Context, bounds: &Bounds) -> Result<Answer, DecodeError> {
    let ctx = *ctx;
    let mode = ctx.policy.mode;
    match verb {
        Verb::Filter => {
            // Node objects the view holds are read from the view: only their names here.
            let args = wire::decode_extender_args_for(body, |n| ctx.view.is_some_and(|v| v.node(n).is_some()), bounds)?;
            bounds.check()?;
            let out = decide::filter(&args, &ctx);
            let body = match &args.nodes {
                NodeSet::Objects(nodes) => {
                    let kept: Vec<_> = out.kept.iter().map(|&i| nodes[i].raw).collect();
                    let size = kept.iter().map(|r| r.get().len() + 1).sum::<usize>()
                        + 256
                        + 128 * (out.failed.len() + out.unresolvable.len());
                    to_json_sized(&FilterResult::objects(kept, &out.failed, &out.unresolvable), size)
                }
                NodeSet::Names(names) => to_json(&FilterResult::names(
                    out.kept.iter().map(|&i| names[i].as_ref()).collect(),
                    &out.failed,
                    &out.unresolvable,
                )),
            };
            let summary = format!("kept {} of {} node(s)", out.kept.len(), args.nodes.len());
            let answer =
                Answer { retry_at: out.retry_at, ..Answer::enforced(&ctx, body, &args.pod, out.explanations, summary) };
            Ok(answer.in_mode(
                mode,
                None,
                || shadow::filter_answer(&args),
                |_| shadow::filter_diffs(&args, out.kept.len()),
            ))
        }
        Verb::Prioritize => {
            let args = wire::decode_extender_args_for(body, |n| ctx.view.is_some_and(|v| v.node(n).is_some()), bounds)?;
            bounds.check()?;
            let out = decide::prioritize(&args, &ctx);
            let summary = scores_summary(&out.scores);
            Ok(Answer::enforced(&ctx, to_json(&out.scores), &args.pod, out.explanations, summary).in_mode(
                mode,
                None,
                || shadow::prioritize_answer(&args),
                |_| shadow::prioritize_diffs(&out.scores),
            ))
        }
        Verb::Preempt => {
            // Nodes the view knows are re-selected from its pods: skip decoding kube's.
            let args =
                wire::decode_preempt_args_for(body, |node| ctx.view.is_none_or(|v| v.node(node).is_none()), bounds)?;
            bounds.check()?;
            let out = decide::preempt(&args, &ctx);
            let summary = candidates_summary(&out.result);
            let result = out.result;
            let kube = (mode == Mode::Shadow).then(|| shadow::kube_candidates(&args));
            let policy_discards = discarded::of(&args, &result, &ctx);
            // In shadow mode `discarded` is counted on kube-scheduler's pick, `would_discard` on the policy's.
            let (discarded, would_discard) = match &kube {
                None => (policy_discards, None),
                Some(kube) => (discarded::of(&args, kube, &ctx), policy_discards),
            };
            let mut answer = Answer::enforced(&ctx, to_json(&result), &args.pod, out.explanations, summary);
            if let Some(line) = discard_line(discarded.as_ref(), would_discard.as_ref()) {
                answer.explanations.push(Explanation::request(Verdict::Discards, Code::DiscardedWork, line));
            }
            let picked = (discarded.as_ref().map(|d| d.node.clone()), would_discard.as_ref().map(|d| d.node.clone()));
            // How soon the room is free: the policy's plan and kube-scheduler's own choice.
            let policy_wait = waiting::of_plan(&args, &result, &out.waits, &ctx);
            let kube_wait = waiting::of_kube(&args, &ctx);
            if let Some(line) = waiting::line(policy_wait.as_ref(), kube_wait.as_ref(), mode == Mode::Shadow) {
                answer.explanations.push(Explanation::request(Verdict::Waits, Code::ExpectedWait, line));
            }
            let expected = match mode {
                Mode::Shadow => kube_wait,
                Mode::Enforce => policy_wait,
            };
            answer.preempt = Some(PreemptPart {
                requeues: out.requeues,
                view_behind: out.view_behind,
                discarded,
                promised: out.promised,
                expected,
            });
            Ok(answer.in_mode(
                mode,
                would_discard,
                || to_json(kube.as_ref().expect("made in shadow mode")),
                |a| {
                    let requeued = a.requeues().iter().map(|r| r.uid.as_str()).collect();
                    shadow::preempt_diffs(
                        &args,
                        kube.as_ref().expect("made in shadow mode"),
                        &result,
                        (picked.0.as_deref(), picked.1.as_deref()),
                        &requeued,
                        &ctx,
                    )
                },
            ))
        }
    }
}

/// The run time an answer throws away, and in shadow mode beside what the policy's would.
fn discard_line(sent: Option<&Discarded>, would: Option<&Discarded>) -> Option<String> {
    let described = sent.map_or("nothing".to_string(), Discarded::describe);
    match (sent, would) {
        (None, None) => None,
        (_, None) => Some(format!("evicting on {described}")),
        (_, Some(policy)) => Some(format!(
            "kube-scheduler's choice discards {described}; the policy's would discard {}",
            policy.describe()
        )),
    }
}

/// "node-a=6 node-b=2 …" (at most 8 nodes named).
fn scores_summary(scores: &[HostPriority]) -> String {
    const SHOWN: usize = 8;
    if scores.is_empty() {
        return "no scores: kube-scheduler's own rank the nodes".into();
    }
    let mut s: Vec<String> = scores.iter().take(SHOWN).map(|h| format!("{}={}", h.host, h.score)).collect();
    if scores.len() > SHOWN {
        s.push(format!("… {} more", scores.len() - SHOWN));
    }
    format!("scores {}", s.join(" "))
}

/// "no candidates" or "node-c1: 3 victim(s), 1 PDB violation(s)".
fn candidates_summary(result: &PreemptionResult) -> String {
    if result.node_name_to_meta_victims.is_empty() {
        return "no candidates: the pod stays pending".into();
    }
    let nodes: Vec<String> = result
        .node_name_to_meta_victims
        .iter()
        .map(|(n, v)| format!("{n}: {} victim(s), {} PDB violation(s)", v.pods.len(), v.num_pdb_violations))
        .collect();
    format!("candidates {}", nodes.join("; "))
}
