//! The cluster view and its sources: a snapshot file or Kubernetes watches. Decisions
//! only see `View` and never know which source built it.

pub mod jobs;
pub mod lean;
pub mod snapshot;
pub mod usage;
mod view;
pub mod watch;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwapOption;

pub use view::{NodeInfo, Objects, View};

/// Where the current view lives; empty until the source has synced.
#[derive(Default)]
pub struct ViewCell {
    current: ArcSwapOption<View>,
    /// The source has been failing long enough that the view can no longer be trusted.
    stale: AtomicBool,
}

impl ViewCell {
    /// The view decisions may use: `None` until the first sync, and while stale.
    pub fn load(&self) -> Option<Arc<View>> {
        if self.stale.load(Ordering::Relaxed) {
            return None;
        }
        self.current.load_full()
    }

    pub fn publish(&self, view: View) {
        self.current.store(Some(Arc::new(view)));
    }

    pub fn set_stale(&self, stale: bool) {
        self.stale.store(stale, Ordering::Relaxed);
    }

    pub fn is_ready(&self) -> bool {
        self.current.load().is_some() && !self.stale.load(Ordering::Relaxed)
    }
}
