//! The cluster views and their sources: a snapshot file or Kubernetes watches. One view
//! per reader: decisions read `View` (kube-scheduler's cache, budgets, gangs, shares, stop
//! times) and never know which source built it; the requeue controller, in its own
//! process, reads `RequeueView` (the pods it copies and their copies). A source changes
//! a view only through a `writer::Writer`; readers only read the cell that holds it.

mod evictions;
pub mod jobs;
pub mod kept;
pub mod lean;
mod pod_context;
mod requeue_view;
pub mod snapshot;
pub mod stop_times;
mod uid_index;
pub mod usage;
mod view;
pub mod watch;
pub mod writer;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwapOption;

pub use evictions::{Eviction, Evictions, NotRecorded};
pub use requeue_view::RequeueView;
pub use view::{GangWork, NodeInfo, Objects, OnlineRoom, RoomTaken, View};

/// The view's persistent hash map: cheap to clone per publication, and hashed with
/// foldhash (node names are looked up per node on every filter and prioritize call).
pub type PMap<K, V> = imbl::GenericHashMap<K, V, foldhash::fast::RandomState, imbl::shared_ptr::DefaultSharedPtr>;

/// Where the decisions' view lives.
pub type ViewCell = StoreCell<View>;

/// Where the requeue controller's view lives.
pub type RequeueCell = StoreCell<RequeueView>;

/// Whether the view a process reads may be read: for `/readyz`, whichever view it is.
pub trait Readiness: Send + Sync {
    fn is_ready(&self) -> bool;
}

impl<S: Clone + Default + Send + Sync> Readiness for StoreCell<S> {
    fn is_ready(&self) -> bool {
        StoreCell::is_ready(self)
    }
}

/// Where the current view (of either reader) lives; empty until the source has synced.
///
/// A snapshot source `publish`es whole views. A live source (the watches) `change`s one
/// staged view in place, and a reader gets a clone of it only when it asks and something
/// changed since the last one: a clone shares structure with the staged view, so a change
/// while it lives copies the paths it touches. Cloning per read instead of per event
/// keeps a burst of bindings with no decision in between (the online pods of the
/// per-pod-verbs profile) free of those copies, and a change that finds the last clone
/// held by no reader any more lets it go first, so the events between two decisions (a
/// bind between two pods' calls in names mode) copy nothing either.
pub struct StoreCell<S> {
    current: ArcSwapOption<S>,
    /// The source has been failing long enough that the view can no longer be trusted.
    stale: AtomicBool,
    /// Counts publications and staged changes, so a decision that found the view behind
    /// can wait for the next.
    published: tokio::sync::watch::Sender<u64>,
    staged: Mutex<Staged<S>>,
    /// `staged` holds changes no reader has been given.
    dirty: AtomicBool,
    /// A long change (a re-index, a re-list's removals) holds `staged`: readers take the
    /// published view meanwhile instead of waiting.
    busy: AtomicBool,
    /// The staged view is open to readers (`open`): ready before any reader took a clone.
    /// Kept beside `Staged::open` so `/readyz` never waits for the lock a long change holds.
    opened: AtomicBool,
}

#[derive(Default)]
struct Staged<S> {
    view: S,
    /// Readers may see the staged view (a live source opens it once it has synced).
    open: bool,
}

impl<S: Default> Default for StoreCell<S> {
    fn default() -> Self {
        StoreCell {
            current: ArcSwapOption::empty(),
            stale: AtomicBool::new(false),
            published: tokio::sync::watch::Sender::new(0),
            staged: Mutex::default(),
            dirty: AtomicBool::new(false),
            busy: AtomicBool::new(false),
            opened: AtomicBool::new(false),
        }
    }
}

impl<S: Clone + Default> StoreCell<S> {
    /// The view decisions may use: `None` until the first sync, and while stale. Includes
    /// every change staged before the call.
    pub fn load(&self) -> Option<Arc<S>> {
        if self.stale.load(Ordering::Relaxed) {
            return None;
        }
        // The clone handed out last, unless changes came since (and no long change holds
        // the lock), or a change let it go (`release_unread`) after this read began.
        if !self.dirty.load(Ordering::Acquire) || self.busy.load(Ordering::Acquire) {
            match self.current.load_full() {
                None if self.opened.load(Ordering::Acquire) => {}
                current => return current,
            }
        }
        // A reader that finds `busy` unset a moment before a long change takes the lock
        // waits for that change: rare (a policy reload, a re-list), and bounded by it.
        let staged = self.lock();
        self.hand_out(&staged);
        self.current.load_full()
    }

    pub fn publish(&self, view: S) {
        self.current.store(Some(Arc::new(view)));
        self.tell_waiters();
    }

    /// Changes the staged view in place (the source's `writer::Writer` does). Readers see
    /// it at their next `load` once the cell is `open`.
    pub fn change<R>(&self, f: impl FnOnce(&mut S) -> R) -> R {
        let mut staged = self.lock();
        self.release_unread(&staged);
        let r = f(&mut staged.view);
        if staged.open {
            self.dirty.store(true, Ordering::Release);
            self.tell_waiters();
        }
        r
    }

    /// `change`, for one that may take long: readers keep the published view meanwhile,
    /// and the result is published at once.
    pub fn change_long<R>(&self, f: impl FnOnce(&mut S) -> R) -> R {
        self.busy.store(true, Ordering::Release);
        let mut staged = self.lock();
        // What readers get meanwhile: every change before this one.
        self.hand_out(&staged);
        let r = f(&mut staged.view);
        if staged.open {
            self.dirty.store(true, Ordering::Release);
            self.hand_out(&staged);
            self.tell_waiters();
        }
        drop(staged);
        self.busy.store(false, Ordering::Release);
        r
    }

    /// Reads the newest view in place, for background work that keeps nothing of it
    /// (metrics, requeue's plan): `None` when `load` would give `None`. Unlike `load` it
    /// hands out no clone, which would make the next events copy what they touch.
    pub fn read_latest<R>(&self, f: impl FnOnce(&S) -> R) -> Option<R> {
        if self.stale.load(Ordering::Relaxed) {
            return None;
        }
        let staged = self.lock();
        if staged.open {
            return Some(f(&staged.view));
        }
        drop(staged);
        // A snapshot source publishes whole views and never opens the staged one.
        self.current.load_full().map(|v| f(&v))
    }

    /// Reads the staged view, open or not: for the writer's own bookkeeping.
    pub fn read_staged<R>(&self, f: impl FnOnce(&S) -> R) -> R {
        f(&self.lock().view)
    }

    /// Lets readers see the staged view, from now on. The first reader takes the first
    /// clone: handed out now, it would share every node with the staged view, and the next
    /// event on each node would copy it even if no reader ever came (the per-pod-verbs
    /// profile, where only `preempt` reads: measured, docs/journal/performance.md, "The watch path on a thread of its own").
    pub fn open(&self) {
        let mut staged = self.lock();
        if !staged.open {
            staged.open = true;
            self.dirty.store(true, Ordering::Release);
            self.opened.store(true, Ordering::Release);
            self.tell_waiters();
        }
    }

    /// Drops the clone handed out last if no reader holds it any more, so the change about
    /// to be made copies nothing for it; the next `load` hands out a fresh one. A reader
    /// that takes it in between keeps a valid view of the state before the change.
    fn release_unread(&self, staged: &Staged<S>) {
        if !staged.open || self.busy.load(Ordering::Acquire) {
            return;
        }
        let Some(last) = self.current.load_full() else { return };
        // This `last` and the cell's own: nobody else.
        if Arc::strong_count(&last) == 2 {
            self.dirty.store(true, Ordering::Release);
            self.current.store(None);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Staged<S>> {
        self.staged.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Publishes a clone of the staged view if it has changes no reader has.
    fn hand_out(&self, staged: &Staged<S>) {
        if staged.open && self.dirty.load(Ordering::Acquire) {
            self.current.store(Some(Arc::new(staged.view.clone())));
            self.dirty.store(false, Ordering::Release);
        }
    }

    fn tell_waiters(&self) {
        if self.published.receiver_count() > 0 {
            self.published.send_modify(|n| *n += 1);
        }
    }

    /// Resolves at the next `publish` or staged change after this call (`changed()` on the
    /// receiver).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.published.subscribe()
    }

    pub fn set_stale(&self, stale: bool) {
        self.stale.store(stale, Ordering::Relaxed);
    }

    pub fn is_ready(&self) -> bool {
        (self.opened.load(Ordering::Acquire) || self.current.load().is_some()) && !self.stale.load(Ordering::Relaxed)
    }
}
