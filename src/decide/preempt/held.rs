//! The room other pods hold on a node, as kube-scheduler counts it: read by the steps
//! that ask whether the preemptor fits (2 and 3), and by what follows an eviction.

use crate::cluster::View;
use crate::decide::promised;
use crate::decide::Context;
use crate::model::{Pod, PodRef};

/// Like kube-scheduler, room held by the pods `nominated` to a node with a priority at
/// least `priority` is not available to a pod of that priority (`preemptor_uid`, never counted
/// against itself); they are never victims either.
pub(super) fn held_room<'v>(
    view: &'v View,
    nominated: &'v [PodRef],
    priority: i32,
    preemptor_uid: &'v str,
) -> impl Iterator<Item = &'v Pod> + 'v {
    nominated.iter().map(|p| &**p).filter(move |p| p.uid != preemptor_uid && view.priority_of(p) >= priority)
}

/// The room held on `node` for a pod of `priority`: pods nominated there, and preemptors
/// an earlier answer sent there that the view does not show yet (`promised`).
pub(super) fn held_on<'v>(
    ctx: &Context<'v>,
    view: &'v View,
    node: &'v str,
    priority: i32,
    preemptor_uid: &'v str,
) -> impl Iterator<Item = &'v Pod> + 'v {
    held_room(view, view.nominated_on(node), priority, preemptor_uid).chain(promised::on_node(
        ctx.promised,
        view,
        node,
        priority,
        preemptor_uid,
    ))
}
