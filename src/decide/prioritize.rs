//! prioritize: a preemption-aware score in 0..=10 per node.
//!
//! score = fit (0..=6) + placement (0..=2) + packing (0..=2)
//! - fit: 6 if the pod fits without evicting anything, 2 if it fits after evicting pods
//!   the policy lets it evict, 0 if not even then; 3 when unknown (no cluster view).
//! - placement: 2 if the node has all of the class's `scoring.preferNodeLabels` (or the
//!   class prefers nothing), 0 if not, 1 when the node's labels are unknown.
//! - packing: for `scoring.pack` classes 2 × utilisation after placement (fuller is
//!   better), otherwise 2 × (1 − utilisation); 1 when unknown.

use super::eligibility::{self, Preemptor};
use super::fit::{fits, NodeUsage};
use super::{Context, Explanation};
use crate::model::{Node, Pod, PodRef};
use crate::wire::{ExtenderArgs, HostPriority, NodeSet};

pub const MAX_SCORE: i64 = 10;

#[derive(Debug, Default)]
pub struct PrioritizeOutcome {
    pub scores: Vec<HostPriority>,
    pub explanations: Vec<Explanation>,
}

pub fn prioritize(args: &ExtenderArgs, ctx: &Context) -> PrioritizeOutcome {
    let class_id = ctx.class_of(&args.pod);
    let class = ctx.policy.class(class_id);
    let key = args.pod.key();
    let preemptor = Preemptor { priority: ctx.priority_of(&args.pod), class: class_id, key: &key };
    let mut out = PrioritizeOutcome::default();
    for (i, name) in args.nodes.names().into_iter().enumerate() {
        let node: Option<&Node> = match &args.nodes {
            NodeSet::Objects(nodes) => Some(&nodes[i].node),
            NodeSet::Names(_) => ctx.view_node(name),
        };
        // What the view says is on the node, computed once for fit and packing.
        let on_node = ctx.view.filter(|v| v.node(name).is_some()).map(|v| {
            let pods = v.pods_on(name);
            (pods, NodeUsage::of(pods.iter().map(|p| &**p)))
        });
        let (fit, fit_why) = match (node, &on_node) {
            (Some(node), Some((pods, usage))) => fit_score(ctx, pods, usage.clone(), preemptor, &args.pod, node),
            _ => (3, "fit unknown without a cluster view"),
        };
        let prefer = &class.scoring.prefer_node_labels;
        let placement = match node {
            _ if prefer.is_empty() => 2,
            Some(n) if prefer.iter().all(|(k, v)| n.labels.get(k) == Some(v)) => 2,
            Some(_) => 0,
            None => 1,
        };
        let packing = match (node, &on_node) {
            (Some(node), Some((_, usage))) => {
                let util = utilisation_after(node, usage, &args.pod);
                let u = if class.scoring.pack { util } else { 1.0 - util };
                (2.0 * u).round() as i64
            }
            _ => 1,
        };
        let score = (fit + placement + packing).clamp(0, MAX_SCORE);
        out.explanations.push(Explanation::node(
            name,
            "score",
            "score",
            format!("{score} = fit {fit} ({fit_why}) + placement {placement} + packing {packing}"),
        ));
        out.scores.push(HostPriority { host: name.to_string(), score });
    }
    out
}

fn fit_score(ctx: &Context, pods: &[PodRef], mut usage: NodeUsage, preemptor: Preemptor, pod: &Pod, node: &Node) -> (i64, &'static str) {
    if fits(pod, node, &usage).is_ok() {
        return (6, "fits without preemption");
    }
    for p in pods {
        if eligibility::check(ctx, preemptor, p).is_ok() {
            usage.remove(p);
        }
    }
    if fits(pod, node, &usage).is_ok() {
        (2, "fits after preemption")
    } else {
        (0, "does not fit even with preemption")
    }
}

/// Mean of CPU and memory utilisation once `pod` is placed, in 0..=1.
fn utilisation_after(node: &Node, usage: &NodeUsage, pod: &Pod) -> f64 {
    let frac = |used: i64, add: i64, alloc: i64| {
        if alloc <= 0 {
            1.0
        } else {
            ((used + add) as f64 / alloc as f64).clamp(0.0, 1.0)
        }
    };
    let cpu = frac(usage.requested.milli_cpu, pod.requests.milli_cpu, node.allocatable.milli_cpu);
    let mem = frac(usage.requested.memory, pod.requests.memory, node.allocatable.memory);
    (cpu + mem) / 2.0
}
