//! prioritize: a score in 0..=10 per node, from the node's labels and the view's per-node
//! aggregates: O(1) per node, no walk over its pods, nothing allocated per node.
//!
//! kube-scheduler sends prioritize only nodes where its own filters found that the pod
//! fits without preemption, so the score leaves out what is the same on all of them and
//! ranks by what differs:
//!
//! A class whose `scoring` prefers nothing (no `pack`, no `preferNodeLabels`) gets no
//! scores at all: kube-scheduler's own scoring (NodeResourcesFit's LeastAllocated) already
//! spreads its pods, and repeating it would cost a view lookup per node on every call.
//!
//! score = (placement (0 or 4) + packing (0..=6)) × (1 − headroom)
//! - placement: 4 if the class prefers node labels (`scoring.preferNodeLabels`) and the
//!   node has them all, else 0 (a class that prefers nothing scores 0 everywhere); 2 when
//!   the node's labels are unknown.
//! - packing: 6 × utilisation once the pod is placed (mean of cpu and memory) for
//!   `scoring.pack` classes (fuller is better), 6 × (1 − utilisation) for the others;
//!   3 when unknown (no cluster view).
//! - headroom, for offline classes (their pods may be victims): the share of the online
//!   pods bound now (`View::online_room`) whose CPU request fits in the node's free room
//!   before this pod and no longer after. Room an arriving online pod can use as is
//!   spares it a preemption; an offline pod (a released copy, a recreated worker) that
//!   fills it is evicted again, and more with it. Nothing is held back: a node that
//!   scores 0 is still one kube-scheduler may choose.
//! - stop mixing, for offline classes: the share of the node's evictable CPU that stops
//!   unlike this pod (`usage::Stopping`: a declared grace of a minute or more is slow),
//!   weighed by one half. A preemptor waits for its slowest victim: where pods that
//!   checkpoint for minutes sit beside pods that exit at once, every node's cheapest room
//!   holds a slow victim, and the last online pods wait minutes. Kept apart, nodes of fast
//!   pods free room in seconds, and the slow ones are evicted only where that is worth it.
//!
//! score = (placement + packing) × (1 − headroom) × (1 − ½ stop mixing)
//!
//! Where the view disagrees with kube-scheduler and says the pod does not fit as is (one
//! of them is stale), the node scores 1 if evicting every pod its class rules let this pod
//! evict would make room, 0 if not even that. "Class rules" are the view's aggregates
//! (`cluster::usage`): the class matrix, `victim.allowed`, bare pods and requeue,
//! terminating pods; not priority, gang priority or minRuntime. So "would make room" is
//! optimistic, and exact when classes are priority bands without a minRuntime.

use super::fit::{fits, Misfit};
use super::{Context, Detail, Explanation};
use crate::cluster::usage::{Aggregates, NodeUsage, Stopping};
use crate::cluster::{NodeInfo, OnlineRoom};
use crate::explanation::{Code, Verdict};
use crate::model::{Node, Pod};
use crate::policy::{ClassId, Scoring};
use crate::wire::{ExtenderArgs, HostPriority, NodeSet};

pub const MAX_SCORE: i64 = 10;
const PLACEMENT: i64 = 4;
const PACKING: i64 = 6;
/// How much a node whose evictable pods all stop unlike this pod loses of its score.
const STOP_MIXING: f64 = 0.5;

#[derive(Debug, Default)]
pub struct PrioritizeOutcome<'a> {
    /// Borrows the node names from the request.
    pub scores: Vec<HostPriority<'a>>,
    /// Per-node score lines only with `Detail::Routine`.
    pub explanations: Vec<Explanation>,
}

pub fn prioritize<'a>(args: &'a ExtenderArgs, ctx: &Context) -> PrioritizeOutcome<'a> {
    let class = ctx.class_of(&args.pod);
    let scoring = &ctx.policy.class(class).scoring;
    if scoring.is_neutral() {
        let name = &ctx.policy.class(class).name;
        let why =
            format!("class {name} prefers nothing: kube-scheduler's own scores rank the {} node(s)", args.nodes.len());
        return PrioritizeOutcome {
            scores: Vec::new(),
            explanations: vec![Explanation::request(Verdict::Score, Code::Neutral, why)],
        };
    }
    let names = args.nodes.names();
    let online = match ctx.view {
        Some(v) if ctx.policy.class(class).victim.allowed => v.online_room(),
        _ => OnlineRoom::default(),
    };
    let mut out = PrioritizeOutcome { scores: Vec::with_capacity(names.len()), explanations: Vec::new() };
    for (i, name) in names.into_iter().enumerate() {
        let info = ctx.view.and_then(|v| v.node_info(name));
        let node: Option<&Node> = match &args.nodes {
            NodeSet::Objects(nodes) => nodes[i].node.as_ref().or_else(|| info.and_then(NodeInfo::node)),
            NodeSet::Names(_) => info.and_then(NodeInfo::node),
        };
        // The aggregates describe the node only once the view has its Node object.
        let usage = info.filter(|i| i.node().is_some()).map(NodeInfo::usage);
        let parts = Parts::of(ctx, class, scoring, &args.pod, node, usage, &online);
        if ctx.detail == Detail::Routine {
            out.explanations.push(Explanation::node(
                name,
                Verdict::Score,
                Code::Score,
                parts.describe(&args.pod, node, usage),
            ));
        }
        out.scores.push(HostPriority { host: name, score: parts.score() });
    }
    out
}

/// Where the pod fits, per the view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fit {
    /// As is (what kube-scheduler's filters found), or unknown without a view.
    AsIs,
    /// Only once the pods its class rules allow are evicted.
    AfterEviction,
    Not,
}

/// A node's score in its parts, numbers only.
#[derive(Debug, Clone, Copy)]
struct Parts {
    fit: Fit,
    placement: i64,
    packing: i64,
    /// The share of online pods this pod would leave no room for here (0..=1).
    headroom: f64,
    /// The share of the node's evictable CPU that stops unlike this pod (0..=1), for
    /// pods that may be victims.
    stop_mixing: f64,
}

impl Parts {
    fn of(
        ctx: &Context,
        class: ClassId,
        scoring: &Scoring,
        pod: &Pod,
        node: Option<&Node>,
        usage: Option<&Aggregates>,
        online: &OnlineRoom,
    ) -> Parts {
        let prefer = &scoring.prefer_node_labels;
        let placement = match node {
            _ if prefer.is_empty() => 0,
            Some(n) if prefer.iter().all(|(k, v)| n.labels.get(k) == Some(v)) => PLACEMENT,
            Some(_) => 0,
            None => PLACEMENT / 2,
        };
        let headroom = match (node, usage) {
            (Some(node), Some(usage)) => {
                online.taken(node.allocatable.milli_cpu - usage.all.requested.milli_cpu, pod.requests.milli_cpu).share
            }
            _ => 0.0,
        };
        let stop_mixing = match usage {
            Some(usage) if ctx.policy.class(class).victim.allowed => {
                usage.share_stopping_unlike(Stopping::declared(pod))
            }
            _ => 0.0,
        };
        let (fit, packing) = match (node, usage) {
            (Some(node), Some(usage)) => {
                let fit = if fits(pod, node, &usage.all).is_ok() {
                    Fit::AsIs
                // An online pod takes bare pods of requeue classes even with requeue off:
                // as a last resort.
                } else if fits(pod, node, &usage.after_evicting(ctx.policy, class, bare_evictable(ctx, class))).is_ok()
                {
                    Fit::AfterEviction
                } else {
                    Fit::Not
                };
                let util = utilisation_after(node, &usage.all, pod);
                let u = if scoring.pack { util } else { 1.0 - util };
                (fit, (PACKING as f64 * u).round() as i64)
            }
            _ => (Fit::AsIs, PACKING / 2),
        };
        Parts { fit, placement, packing, headroom, stop_mixing }
    }

    fn score(&self) -> i64 {
        match self.fit {
            Fit::AsIs => (((self.placement + self.packing) as f64)
                * (1.0 - self.headroom)
                * (1.0 - STOP_MIXING * self.stop_mixing))
                .round()
                .clamp(0.0, MAX_SCORE as f64) as i64,
            Fit::AfterEviction => 1,
            Fit::Not => 0,
        }
    }

    /// The sentence for `replay` and debug logs (built only when asked for).
    fn describe(&self, pod: &Pod, node: Option<&Node>, usage: Option<&Aggregates>) -> String {
        let misfit = || -> Option<Misfit> { fits(pod, node?, &usage?.all).err() };
        let known = if usage.is_some() { "" } else { " (usage unknown without the view)" };
        let mixing = match self.stop_mixing {
            0.0 => String::new(),
            m => format!(" × (1 − ½ × {m:.2}: {:.0} % of the evictable CPU here stops unlike this pod)", m * 100.0),
        };
        match (self.fit, misfit()) {
            (Fit::AsIs, _) if self.headroom > 0.0 => format!(
                "{} = (placement {} + packing {}) × (1 − {:.2}: the room {:.0} % of the online pods would fit in as is){mixing}",
                self.score(),
                self.placement,
                self.packing,
                self.headroom,
                self.headroom * 100.0
            ),
            (Fit::AsIs, _) if self.stop_mixing > 0.0 => {
                format!("{} = (placement {} + packing {}){mixing}", self.score(), self.placement, self.packing)
            }
            (Fit::AsIs, _) => {
                format!("{} = placement {} + packing {}{known}", self.score(), self.placement, self.packing)
            }
            (Fit::AfterEviction, Some(why)) => format!(
                "1: the view says it does not fit as is ({why}), but would after evicting what its class may evict"
            ),
            (_, why) => format!(
                "0: the view says it does not fit, even after evicting what its class may evict ({})",
                why.map(|w| w.to_string()).unwrap_or_default()
            ),
        }
    }
}

/// Mean of CPU and memory utilisation once `pod` is placed, in 0..=1.
fn utilisation_after(node: &Node, usage: &NodeUsage, pod: &Pod) -> f64 {
    let frac = |used: i64, add: i64, alloc: i64| {
        if alloc <= 0 {
            1.0
        } else {
            (used.saturating_add(add) as f64 / alloc as f64).clamp(0.0, 1.0)
        }
    };
    let cpu = frac(usage.requested.milli_cpu, pod.requests.milli_cpu, node.allocatable.milli_cpu);
    let mem = frac(usage.requested.memory, pod.requests.memory, node.allocatable.memory);
    (cpu + mem) / 2.0
}

#[cfg(test)]
mod tests;

/// Are bare pods of `requeue` classes victims of a preemptor of `class` even while requeue
/// is off? For an online one, as a last resort.
pub(crate) fn bare_evictable(ctx: &Context, class: ClassId) -> bool {
    ctx.requeue.enabled || ctx.policy.is_online(class)
}
