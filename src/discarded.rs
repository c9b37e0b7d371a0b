//! Work a preemption throws away: each victim's run time (since `status.startTime`) times
//! its CPU request, in CPU-seconds, by the victim's class. Counted on the node
//! kube-scheduler picks among an answer's candidates (`shadow::pick`; the policy answers
//! one), so an enforced answer and kube-scheduler's own choice are measured alike.

use std::collections::BTreeMap;

use crate::decide::Context;
use crate::shadow::{pick, Resolver};
use crate::wire::{PreemptArgs, PreemptionResult};

/// The node whose victims would go, and what they had run, by class name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Discarded {
    pub node: String,
    pub cpu_seconds: BTreeMap<String, f64>,
    /// Pods evicted there.
    pub victims: usize,
    /// Victims neither the view nor the request describes (UIDs only): not counted.
    pub unknown: usize,
}

impl Discarded {
    pub fn total(&self) -> f64 {
        self.cpu_seconds.values().sum()
    }

    /// "node-2: 2 victim(s), 5400 CPU-seconds (batch 3600, free 1800)".
    pub fn describe(&self) -> String {
        let parts: Vec<String> = self.cpu_seconds.iter().map(|(c, s)| format!("{c} {s:.0}")).collect();
        let unknown = if self.unknown > 0 { format!(", {} victim(s) unknown", self.unknown) } else { String::new() };
        format!(
            "{}: {} victim(s), {:.0} CPU-seconds ({}){unknown}",
            self.node,
            self.victims,
            self.total(),
            parts.join(", ")
        )
    }
}

/// What `result` discards on the node kube-scheduler would pick; `None` without candidates.
pub fn of(args: &PreemptArgs, result: &PreemptionResult, ctx: &Context) -> Option<Discarded> {
    let pods = Resolver::new(args, ctx);
    let node = pick(result, &pods, ctx)?;
    let victims = &result.node_name_to_meta_victims[node].pods;
    let mut out = Discarded { node: node.clone(), victims: victims.len(), ..Discarded::default() };
    for v in victims {
        let Some(pod) = pods.pod(&v.uid) else {
            out.unknown += 1;
            continue;
        };
        let ran = pod.start_time.map_or(0, |t| (ctx.now - t).max(0)) as f64;
        let class = ctx.policy.class(ctx.class_of(pod)).name.clone();
        *out.cpu_seconds.entry(class).or_insert(0.0) += ran * pod.requests.milli_cpu as f64 / 1000.0;
    }
    Some(out)
}
