//! Step 3's room left over: the online pods already waiting that a plan's freed room
//! places besides its preemptor. kube-scheduler's fewest victims often free more room than
//! one online pod needs, and the next one takes it without an eviction of its own; a
//! tighter victim set is cheaper for this pod alone and costs another eviction for the
//! next. So what a plan's owners lose is shared among the online pods its room places.

use crate::cluster::usage::NodeUsage;
use crate::cluster::View;
use crate::decide::fit::fits;
use crate::model::{Node, Pod};

/// Waiting pods looked at, at most, per plan: a node's room left over places a few.
const LOOKED_AT: usize = 32;

/// The waiting online pods (oldest first) that fit in `node`'s room once the victims
/// are gone (`usage` without them) and the preemptor `pod` is placed. Only those that
/// need a preemption too: kube-scheduler found no room for them, or they ask at least
/// what the preemptor asks (which fits nowhere as is, or it would not preempt).
pub(super) fn also_placed<'v>(view: &'v View, node: &Node, usage: &NodeUsage, pod: &Pod) -> Vec<&'v Pod> {
    let mut usage = usage.clone();
    usage.add(pod);
    let mut placed = Vec::new();
    for waiting in view.waiting_online().filter(|w| w.uid != pod.uid).take(LOOKED_AT) {
        if !(waiting.unschedulable || asks_at_least(waiting, pod)) {
            continue;
        }
        if fits(waiting, node, &usage).is_ok() {
            usage.add(waiting);
            placed.push(waiting);
        }
    }
    placed
}

fn asks_at_least(waiting: &Pod, pod: &Pod) -> bool {
    let (w, p) = (&waiting.requests, &pod.requests);
    w.milli_cpu >= p.milli_cpu && w.memory >= p.memory
}
