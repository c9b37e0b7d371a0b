//! The cluster view and its sources: a snapshot file or Kubernetes watches. Decisions
//! only see `View` and never know which source built it.

pub mod snapshot;
mod view;
pub mod watch;

use std::sync::Arc;

use arc_swap::ArcSwapOption;

pub use view::{Objects, View};

/// Where the current view lives; empty until the source has synced.
#[derive(Default)]
pub struct ViewCell {
    current: ArcSwapOption<View>,
}

impl ViewCell {
    pub fn load(&self) -> Option<Arc<View>> {
        self.current.load_full()
    }

    pub fn publish(&self, view: View) {
        self.current.store(Some(Arc::new(view)));
    }

    pub fn is_ready(&self) -> bool {
        self.current.load().is_some()
    }
}
