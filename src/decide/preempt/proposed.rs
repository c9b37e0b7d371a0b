//! kube-scheduler's candidates as decisions read them: the one place the two forms its
//! victims arrive in (whole pods, or UIDs only) are told apart.

use crate::cluster::View;
use crate::wire::Candidates;
use crate::wire::{VictimUids, Victims};

/// kube-scheduler's victims on one candidate node, in the form it sent them.
#[derive(Clone, Copy)]
pub(super) enum Proposed<'a> {
    Full(&'a Victims),
    Meta(&'a VictimUids),
}

impl<'a> Proposed<'a> {
    /// No victims: a node where the pod fits as is.
    pub(super) fn is_empty(self) -> bool {
        match self {
            Proposed::Full(v) => v.count == 0,
            Proposed::Meta(v) => v.uids.is_empty(),
        }
    }

    pub(super) fn uids(self) -> &'a [String] {
        match self {
            Proposed::Full(v) => &v.uids,
            Proposed::Meta(v) => &v.uids,
        }
    }

    pub(super) fn num_pdb_violations(self) -> i64 {
        match self {
            Proposed::Full(v) => v.num_pdb_violations,
            Proposed::Meta(v) => v.num_pdb_violations,
        }
    }
}

/// The candidate nodes kube-scheduler proposed, in name order, whatever their form.
pub(super) fn proposed(candidates: &Candidates) -> Vec<(&str, Proposed<'_>)> {
    match candidates {
        Candidates::Full(map) => map.iter().map(|(n, v)| (n.as_str(), Proposed::Full(v))).collect(),
        Candidates::Meta(map) => map.iter().map(|(n, v)| (n.as_str(), Proposed::Meta(v))).collect(),
    }
}
/// Does kube-scheduler know proposed victims the view does not (and did not see go), or
/// has it seen them bound where the view has them pending? (A pod on another node is a
/// disagreement, not a lag; one the view saw go means kube-scheduler's cache is behind.)
pub(super) fn lags_behind(view: &View, uids: &[String]) -> bool {
    uids.iter().any(|uid| match view.pod_by_uid(uid) {
        None => !view.saw_go(uid),
        Some(p) => p.node_name.is_none(),
    })
}
