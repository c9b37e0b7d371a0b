//! Room on its way: pods evicted a moment ago still terminating where the preemptor fits
//! once they are gone. Found with the candidates (step 2), weighed against the plans
//! (step 4); its refusal said the same way in both.

use super::held::held_on;
use super::plan::{Cost, WaitPrice};
use crate::cluster::usage::NodeUsage;
use crate::cluster::View;
use crate::decide::eligibility::Preemptor;
use crate::decide::fit::fits;
use crate::decide::wait::{self, Wait};
use crate::decide::Context;
use crate::explanation::Explanation;
use crate::explanation::{Code, Verdict};
use crate::model::Pod;

/// The node where room is on its way, and how soon it is free.
pub(super) struct RoomOnItsWay {
    pub(super) node: String,
    pub(super) wait: Wait,
}

/// A node where pods evicted to make room are still terminating, and where the preemptor
/// fits once they are gone: its room is on its way. Evicted means marked by kube-scheduler
/// (`DisruptionTarget`) with a priority below the preemptor's, or any pod of lower priority
/// terminating on the node the preemptor is nominated to (kube-scheduler's own rule).
/// kube-scheduler preempts asynchronously and may ask again before the preemptor's
/// nomination has reached it; a second eviction then would free room twice, and might
/// break a gang to do it. The nominated node and the candidates are looked at.
pub(super) fn find(
    ctx: &Context,
    view: &View,
    preemptor: Preemptor,
    pod: &Pod,
    candidates: &[&str],
) -> Option<RoomOnItsWay> {
    let nominated =
        pod.nominated_node_name.as_deref().or_else(|| view.pod_by_uid(&pod.uid)?.nominated_node_name.as_deref());
    let mut nodes: Vec<&str> = nominated.into_iter().chain(candidates.iter().copied()).collect();
    nodes.sort_unstable();
    nodes.dedup();
    nodes.into_iter().find_map(|n| {
        let node = view.node(n)?;
        let pods = view.pods_on(n);
        let leaving = |p: &Pod| {
            p.deletion_time.is_some()
                && ctx.priority_of(p) < preemptor.priority
                && (p.preempted || nominated == Some(n))
        };
        if !pods.iter().any(|p| leaving(p)) {
            return None;
        }
        let staying = pods.iter().map(|p| &**p).filter(|p| p.deletion_time.is_none() && p.uid != pod.uid);
        fits(pod, node, &NodeUsage::of(staying.chain(held_on(ctx, view, n, preemptor.priority, &pod.uid)))).ok()?;
        let wait = wait::until_gone(ctx, pods.iter().map(|p| &**p).filter(|p| leaving(p)));
        Some(RoomOnItsWay { node: n.to_string(), wait })
    })
}

impl RoomOnItsWay {
    /// The refusal to evict while the room is on its way; `sooner`: the cost of the best
    /// plan that would free room elsewhere, in the policy's units.
    pub(super) fn refuse(&self, ctx: &Context, preemptor: Preemptor, sooner: Option<&Cost>, ex: &mut Vec<Explanation>) {
        let RoomOnItsWay { node, wait } = self;
        let price = WaitPrice::of_preemptor(ctx, preemptor);
        let alternative = match sooner {
            Some(c) => format!(
                "; evicting elsewhere would free room in ~{}, {}",
                wait::seconds(c.wait_ms),
                price
                    .trade(&Cost { wait_ms: wait.ms, owners_loss: 0, loss_per_placed: 0, ..c.clone() }, c)
                    .unwrap_or_default()
            ),
            None => String::new(),
        };
        ex.push(Explanation::request(
        Verdict::Refused,
        Code::RoomOnItsWay,
        format!("pods preempted on {node} are still terminating, and {} fits there once they are gone, {}: evicting more would free room twice{alternative}", preemptor.key, wait.describe()),
    ));
    }
}
