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

/// The view's persistent hash map: cheap to clone per publication, and hashed with
/// foldhash (node names are looked up per node on every filter and prioritize call).
pub type PMap<K, V> = imbl::GenericHashMap<K, V, foldhash::fast::RandomState, imbl::shared_ptr::DefaultSharedPtr>;

/// Where the current view lives; empty until the source has synced.
pub struct ViewCell {
    current: ArcSwapOption<View>,
    /// The source has been failing long enough that the view can no longer be trusted.
    stale: AtomicBool,
    /// Counts publications, so a decision that found the view behind can wait for the next.
    published: tokio::sync::watch::Sender<u64>,
}

impl Default for ViewCell {
    fn default() -> Self {
        ViewCell { current: ArcSwapOption::empty(), stale: AtomicBool::new(false), published: tokio::sync::watch::Sender::new(0) }
    }
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
        self.published.send_modify(|n| *n += 1);
    }

    /// Resolves at the next `publish` after this call (`changed()` on the receiver).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.published.subscribe()
    }

    pub fn set_stale(&self, stale: bool) {
        self.stale.store(stale, Ordering::Relaxed);
    }

    pub fn is_ready(&self) -> bool {
        self.current.load().is_some() && !self.stale.load(Ordering::Relaxed)
    }
}
