//! filter: nodes a pod may never use under the policy go to FailedAndUnresolvableNodes
//! (kube-scheduler then skips them in preemption too); the rest are kept.
//!
//! A young pod of a class that keeps off online room (`placement.keepOffOnlineRoom`) is
//! also unresolvable where it would take room an online pod of a size bound now fits in
//! as is: the next online arrival finds that room free instead of preempting the pod
//! (and a released copy is not interrupted twice). It waits, or goes where it leaves that
//! room; once the class's time is up, any node. kube-scheduler would try it again only on
//! a cluster event its own filters wait for, or after its five-minute flush: the outcome
//! says when the time is up (`retry_at`), for the wake component to wake it then.

use std::collections::BTreeMap;

use super::fit::exceeds_allocatable;
use super::{Context, Explanation};
use crate::cluster::{OnlineRoom, RoomTaken, View};
use crate::explanation::{Code, Verdict};
use crate::model::{Node, Pod, Timestamp};
use crate::policy::{Class, Placement};
use crate::wire::{ExtenderArgs, NodeSet};

#[derive(Debug, Default)]
pub struct FilterOutcome {
    /// Indexes into the request's node list, in request order.
    pub kept: Vec<usize>,
    /// Nodes preemption might fix (none of our rules produce these today: resource
    /// shortages are already reported by kube-scheduler's own filters).
    pub failed: BTreeMap<String, String>,
    pub unresolvable: BTreeMap<String, String>,
    pub explanations: Vec<Explanation>,
    /// A node was kept off online room for this pod: when its time is up, and
    /// kube-scheduler should try it again (it waits for a cluster event otherwise).
    pub retry_at: Option<Timestamp>,
}

pub fn filter(args: &ExtenderArgs, ctx: &Context) -> FilterOutcome {
    let class_id = ctx.class_of(&args.pod);
    let class = ctx.policy.class(class_id);
    let mut out = FilterOutcome::default();
    if matches!(args.nodes, NodeSet::Names(_)) && ctx.view.is_none() {
        out.explanations.push(Explanation::request(
            Verdict::Degraded,
            Code::NoNodeData,
            "NodeNames only and no cluster view: placement rules need node labels, every node is kept",
        ));
    }
    let kept_room = KeptRoom::of(&args.pod, class, ctx);
    if let Some(smallest) = uniform_verdict(args, ctx, &class.placement).filter(|_| kept_room.is_none()) {
        // kube-scheduler sends hundreds of names per call: no rule of this class tells
        // them apart, so none is looked up.
        let n = args.nodes.len();
        out.kept = (0..n).collect();
        out.explanations.push(Explanation::request(
            Verdict::Kept,
            Code::Allowed,
            format!("{n} of {n} node(s) kept for class {}: no placement rules, and the pod fits the smallest node ({} m CPU)", class.name, smallest.allocatable.milli_cpu),
        ));
        return out;
    }
    let names = args.nodes.names();
    for (i, name) in names.iter().enumerate() {
        let node: Option<&Node> = match &args.nodes {
            // A Node object the view holds was not decoded: the view's is read instead.
            NodeSet::Objects(nodes) => nodes[i].node.as_ref().or_else(|| ctx.view_node(name)),
            NodeSet::Names(_) => ctx.view_node(name),
        };
        let Some(node) = node else {
            out.kept.push(i);
            // Without any view the request-level line above already says why.
            if ctx.view.is_some() {
                out.explanations.push(Explanation::node(
                    name,
                    Verdict::Kept,
                    Code::UnknownNode,
                    "node not in the cluster view: kept unjudged",
                ));
            }
            continue;
        };
        if let Some(reason) = class.placement.rejects(&node.labels) {
            let reason = format!("class {}: {reason}", class.name);
            out.explanations.push(Explanation::node(name, Verdict::Unresolvable, Code::Placement, reason.clone()));
            out.unresolvable.insert(name.to_string(), reason);
            continue;
        }
        if let Some(reason) = exceeds_allocatable(&args.pod, node) {
            let reason = format!("pod can never fit, even on the empty node: {reason}");
            out.explanations.push(Explanation::node(
                name,
                Verdict::Unresolvable,
                Code::ExceedsAllocatable,
                reason.clone(),
            ));
            out.unresolvable.insert(name.to_string(), reason);
            continue;
        }
        if let Some((kept, why)) = kept_room.as_ref().and_then(|k| k.takes(&args.pod, name, node).map(|why| (k, why))) {
            out.explanations.push(Explanation::node(name, Verdict::Unresolvable, Code::OnlineRoomKept, why));
            out.unresolvable.insert(name.to_string(), kept.reason.clone());
            out.retry_at = Some(ctx.now + kept.left);
            continue;
        }
        out.kept.push(i);
    }
    // Kept nodes are the rule, not news: one line for all of them.
    out.explanations.push(Explanation::request(
        Verdict::Kept,
        Code::Allowed,
        format!("{} of {} node(s) kept for class {}", out.kept.len(), names.len(), class.name),
    ));
    out
}

/// The room online pods fit in, kept from a young pod of a class that keeps off it.
struct KeptRoom<'v> {
    view: &'v View,
    online: OnlineRoom,
    class: &'v str,
    /// Seconds the pod is still kept off.
    left: i64,
    /// What kube-scheduler is told: the same on every node, so its message counts them.
    reason: String,
}

impl<'v> KeptRoom<'v> {
    fn of(pod: &Pod, class: &'v Class, ctx: &Context<'v>) -> Option<Self> {
        let left = class.placement.kept_off_online_room_for(pod.creation_time, ctx.now)?;
        let view = ctx.view?;
        let online = view.online_room();
        (!online.is_empty()).then(|| KeptRoom {
            view,
            online,
            class: &class.name,
            left,
            reason: format!("class {} keeps its young pods off the room online pods fit in", class.name),
        })
    }

    /// Why `pod` may not take its room on `node`, if it would take room online pods fit in.
    /// A node whose pods the view does not hold yet is not judged.
    fn takes(&self, pod: &Pod, name: &str, node: &Node) -> Option<String> {
        let usage = &self.view.node_info(name).filter(|i| i.node().is_some())?.usage().all;
        let RoomTaken { before, after, share } =
            self.online.taken(node.allocatable.milli_cpu - usage.requested.milli_cpu, pod.requests.milli_cpu);
        if after < 0 {
            // kube-scheduler found room the view does not show yet: a pod has left (an
            // online one, maybe) and its delete is still on its way here.
            return Some(format!(
                "class {} keeps its pods off online room for {} s more: the view does not show room for it here yet ({before} m CPU free), so what it would take is not known",
                self.class, self.left
            ));
        }
        (share > 0.0).then(|| {
            format!(
                "class {} keeps its pods off online room for {} s more: {before} m CPU free here, {} m once this pod is placed; {:.0} % of the online pods bound now fit in as is, not after",
                self.class,
                self.left,
                after,
                share * 100.0
            )
        })
    }
}

/// Names mode with a view, a class without placement rules, and a pod that fits the
/// smallest node's allocatable: every node is kept, whatever its name. (Objects mode
/// reads the nodes the view does not hold from the request, and checks each.)
fn uniform_verdict<'v>(args: &ExtenderArgs, ctx: &Context<'v>, placement: &Placement) -> Option<&'v Node> {
    if !matches!(args.nodes, NodeSet::Names(_)) || !placement.is_empty() {
        return None;
    }
    let smallest = ctx.view?.smallest_node()?;
    exceeds_allocatable(&args.pod, smallest).is_none().then_some(smallest)
}
