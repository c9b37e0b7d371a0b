//! What one request may make the decoder hold, and whether its answer is still wanted.
//!
//! Element caps keep memory proportional to what a real cluster sends, whatever the body
//! holds: the decoder stops at the first element over a cap. The cancel flag is raised by
//! the HTTP edge when the request timed out or the client went away; the decoder checks it
//! at every element and stops.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

/// Element counts a request may carry, far above any real cluster (kube-scheduler proposes
/// at most every node, each with at most its pods).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// Nodes in `Nodes.items`, `NodeNames`, and candidate nodes in a preempt map.
    pub max_nodes: usize,
    /// Victims proposed on one candidate node.
    pub max_victims_per_node: usize,
    /// Victims proposed over all candidate nodes of one preempt.
    pub max_victims: usize,
}

impl Default for Caps {
    fn default() -> Self {
        Caps { max_nodes: 20_000, max_victims_per_node: 1_000, max_victims: 200_000 }
    }
}

/// Why decoding stopped early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// `what` has more than `cap` elements; `flag` is the setting that raises the cap.
    TooMany { what: String, cap: usize, flag: &'static str },
    /// The request's answer is no longer wanted.
    Cancelled,
}

/// The caps and cancel flag of one decode, and what stopped it. Used by one thread.
pub struct Bounds<'a> {
    pub caps: Caps,
    cancel: Option<&'a AtomicBool>,
    victims: Cell<usize>,
    stop: Cell<Option<Stop>>,
}

impl Default for Bounds<'_> {
    fn default() -> Self {
        Bounds::new(Caps::default(), None)
    }
}

impl<'a> Bounds<'a> {
    pub fn new(caps: Caps, cancel: Option<&'a AtomicBool>) -> Self {
        Bounds { caps, cancel, victims: Cell::new(0), stop: Cell::new(None) }
    }

    /// The same caps and cancel flag, nothing counted yet: for a second pass over a body.
    pub(crate) fn afresh(&self) -> Bounds<'a> {
        Bounds::new(self.caps, self.cancel)
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_some_and(|c| c.load(Ordering::Relaxed))
    }

    /// Err once the answer is no longer wanted.
    pub fn check(&self) -> Result<(), Stop> {
        if self.is_cancelled() {
            return Err(Stop::Cancelled);
        }
        Ok(())
    }

    /// Records why decoding stops; the serde error that unwinds the decoder is replaced
    /// by it (see `take_stop`).
    pub(crate) fn stop(&self, why: Stop) {
        self.stop.set(Some(why));
    }

    pub(crate) fn take_stop(&self) -> Option<Stop> {
        self.stop.take()
    }

    /// Counts one more proposed victim against the per-request cap.
    pub(crate) fn add_victim(&self) -> Result<(), Stop> {
        let n = self.victims.get() + 1;
        self.victims.set(n);
        if n > self.caps.max_victims {
            return Err(Stop::TooMany {
                what: "victims over all candidate nodes".into(),
                cap: self.caps.max_victims,
                flag: "--max-victims",
            });
        }
        Ok(())
    }
}
