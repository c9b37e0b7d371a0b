//! Decisions: pure functions over a request, the cluster view and the policy. No I/O, no
//! clock: `now` is an input. Every rule leaves an `Explanation`.

mod eligibility;
mod filter;
pub mod fit;
mod jobs;
mod preempt;
mod prioritize;
pub mod promised;
pub mod wait;

pub use eligibility::Fate;
pub use filter::{filter, FilterOutcome};
pub use preempt::{preempt, PreemptOutcome};
pub use prioritize::{prioritize, PrioritizeOutcome};

use crate::cluster::View;
use crate::explanation::Explanation;
use crate::model::{Node, Pod, Timestamp};
use crate::policy::{ClassId, Policy};

/// Everything a decision may read besides the request.
#[derive(Clone, Copy)]
pub struct Context<'a> {
    pub policy: &'a Policy,
    /// `None` when no view is configured, it has not synced yet, or it is stale.
    pub view: Option<&'a View>,
    /// A view is configured (`--kube`/`--snapshot`), so its absence is a fault.
    pub view_expected: bool,
    pub now: Timestamp,
    pub requeue: Requeue,
    pub detail: Detail,
    /// Room earlier answers promised preemptors the view does not show yet
    /// (`promised::PromisedRoom`): held as kube-scheduler holds its nominations.
    pub promised: &'a [promised::PromisedRoom],
    /// Of their victims, those kube-scheduler has not deleted yet (other than for the
    /// preemptor being decided): set by `preempt` itself.
    pub undeleted: &'a [promised::UndeletedVictim<'a>],
}

/// How much a decision explains.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Detail {
    /// Every decision that rejects, changes or degrades something, and the request-level
    /// lines: what logs at info, metrics and `/decisions` keep. The hot path.
    #[default]
    Decisions,
    /// Also the routine per-node lines (each node's score): `replay` and debug logs.
    Routine,
}

/// Can bare victims of `requeue` classes be requeued in this decision?
#[derive(Clone, Copy, Debug)]
pub struct Requeue {
    /// The requeue controller copies preempted bare pods (`serve --kube --requeue`), or a
    /// replay simulates it.
    pub enabled: bool,
}

impl Requeue {
    pub fn enabled() -> Self {
        Requeue { enabled: true }
    }

    pub fn disabled() -> Self {
        Requeue { enabled: false }
    }
}

impl<'a> Context<'a> {
    /// A decision at `now` under `policy` on `view` (a view given is a view expected):
    /// requeue off, decisions explained, no room promised. The fields say the rest.
    pub fn new(policy: &'a Policy, view: Option<&'a View>, now: Timestamp) -> Self {
        Context {
            policy,
            view,
            view_expected: view.is_some(),
            now,
            requeue: Requeue::disabled(),
            detail: Detail::Decisions,
            promised: &[],
            undeleted: &[],
        }
    }

    /// With requeue on or off.
    pub fn with_requeue(self, enabled: bool) -> Self {
        Context { requeue: Requeue { enabled }, ..self }
    }

    /// Whether a view is configured, whatever `view` holds.
    pub fn with_view_expected(self, view_expected: bool) -> Self {
        Context { view_expected, ..self }
    }
}

impl Context<'_> {
    pub fn priority_of(&self, pod: &Pod) -> i32 {
        match self.view {
            Some(v) => v.priority_of(pod),
            None => pod.priority.unwrap_or(0),
        }
    }

    pub fn class_of(&self, pod: &Pod) -> ClassId {
        self.policy.classify(pod, self.priority_of(pod))
    }

    pub fn view_node(&self, name: &str) -> Option<&Node> {
        self.view.and_then(|v| v.node(name))
    }
}
