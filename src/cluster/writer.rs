//! How a source changes a view: a `Writer` applies each watch event to the view staged in
//! its cell, as kube-rs' `reflector::store::Writer` applies events to its store; readers
//! only read the cell. Each view says here how each kind it is built from enters and
//! leaves it (`Takes`): the watches know kinds and events, never a view's methods, and
//! nothing a writer runs calls back into them.

use std::collections::HashSet;
use std::sync::Arc;

use super::lean::LeanKind;
use super::StoreCell;
use crate::policy::Policy;

/// A view a watch keeps: the decisions' `View`, or the requeue controller's `RequeueView`.
pub trait Store: Clone + Default + Send + Sync + 'static {
    /// An empty view for `policy`, of a source that has namespaces.
    fn watched(policy: &Policy) -> Self;
    /// The same objects indexed under another policy.
    fn rebuild(&self, policy: &Policy) -> Self;
    /// When the events applied next were received, milliseconds since the epoch (0: not
    /// when they changed).
    fn set_clock_ms(&mut self, _ms: i64) {}
    /// Sets the gauges of what the view holds.
    fn record(&self);
}

/// How objects of kind `K` enter and leave a view.
pub trait Takes<K: LeanKind>: Store {
    fn apply(&mut self, model: K::Model, policy: &Policy);
    /// Removes the object with `Lean::key()` `key`.
    fn remove(&mut self, key: &str, policy: &Policy);
    /// Removes an object the API server deleted; `last` is what the event carried.
    fn deleted(&mut self, key: &str, _last: Option<&K::Model>, policy: &Policy) {
        Takes::<K>::remove(self, key, policy)
    }
    /// Removes an object a re-list no longer finds (it went while the watch was down).
    fn unseen(&mut self, key: &str, policy: &Policy) {
        Takes::<K>::remove(self, key, policy)
    }
    /// Keys (as `Lean::key()` spells them) of every object of this kind in the view.
    fn keys(&self) -> Vec<String>;
    /// Does the view hold any object of this kind?
    fn holds_any(&self) -> bool {
        !Takes::<K>::keys(self).is_empty()
    }
}

/// Pods (decoded as `$pods`), PriorityClasses and Namespaces enter and leave `$view`, either
/// view, through the methods of the same names both have.
macro_rules! takes_pods_and_context {
    ($view:ty, $pods:ty) => {
        impl $crate::cluster::writer::Takes<$pods> for $view {
            fn apply(&mut self, model: $crate::model::Pod, policy: &$crate::policy::Policy) {
                self.apply_pod(std::sync::Arc::new(model), policy);
            }
            fn remove(&mut self, key: &str, policy: &$crate::policy::Policy) {
                self.remove_pod(key, policy);
            }
            fn deleted(&mut self, key: &str, last: Option<&$crate::model::Pod>, policy: &$crate::policy::Policy) {
                match last {
                    Some(last) => self.remove_deleted_pod(key, last, policy),
                    None => self.remove_pod(key, policy),
                };
            }
            fn unseen(&mut self, key: &str, policy: &$crate::policy::Policy) {
                self.remove_unseen_pod(key, policy);
            }
            fn keys(&self) -> Vec<String> {
                self.all_pods().map(|p| p.key()).collect()
            }
            fn holds_any(&self) -> bool {
                self.all_pods().next().is_some()
            }
        }

        impl $crate::cluster::writer::Takes<$crate::cluster::lean::PriorityClassKind> for $view {
            fn apply(&mut self, model: $crate::model::PriorityClass, _: &$crate::policy::Policy) {
                self.apply_priority_class(model);
            }
            fn remove(&mut self, key: &str, _: &$crate::policy::Policy) {
                self.remove_priority_class($crate::cluster::writer::split(key).1);
            }
            fn keys(&self) -> Vec<String> {
                self.priority_class_names().map(|n| format!("/{n}")).collect()
            }
        }

        // Namespaces are required: a view without them would take every namespace for
        // opted in (copies stored where none may be, or lost to admission).
        impl $crate::cluster::writer::Takes<$crate::cluster::lean::NamespaceKind> for $view {
            fn apply(&mut self, model: $crate::model::Namespace, _: &$crate::policy::Policy) {
                self.apply_namespace(model);
            }
            fn remove(&mut self, key: &str, _: &$crate::policy::Policy) {
                self.remove_namespace($crate::cluster::writer::split(key).1);
            }
            fn keys(&self) -> Vec<String> {
                self.namespace_names().map(|n| format!("/{n}")).collect()
            }
        }
    };
}
/// `namespace/name` as (namespace, name); ("", name) for a cluster-scoped `/name`.
fn split(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("", key))
}

// After the macro: they use it.
mod decisions;
mod requeue;

/// The one writer of a cell's staged view.
pub struct Writer<S> {
    cell: Arc<StoreCell<S>>,
}

impl<S: Store> Writer<S> {
    pub fn new(cell: Arc<StoreCell<S>>) -> Writer<S> {
        Writer { cell }
    }

    /// Starts over from an empty view for `policy`.
    pub fn reset(&self, policy: &Policy) {
        self.cell.change(|view| *view = S::watched(policy));
    }

    /// An object as the watch received it at `clock_ms` (0: listed, not when it changed).
    pub fn apply<K: LeanKind>(&self, model: K::Model, clock_ms: i64, policy: &Policy)
    where
        S: Takes<K>,
    {
        self.cell.change(|view| {
            view.set_clock_ms(clock_ms);
            Takes::<K>::apply(view, model, policy)
        });
    }

    /// An object the watch cannot read: out of the view (a pod the view cannot read is
    /// never offered as a victim), for being unreadable, not for having stopped.
    pub fn leave_out<K: LeanKind>(&self, key: &str, policy: &Policy)
    where
        S: Takes<K>,
    {
        self.cell.change(|view| {
            view.set_clock_ms(0);
            Takes::<K>::remove(view, key, policy)
        });
    }

    /// An object the API server deleted at `clock_ms`; `last` is what the event carried.
    pub fn delete<K: LeanKind>(&self, key: &str, last: Option<&K::Model>, clock_ms: i64, policy: &Policy)
    where
        S: Takes<K>,
    {
        self.cell.change(|view| {
            view.set_clock_ms(clock_ms);
            Takes::<K>::deleted(view, key, last, policy)
        });
    }

    /// Does the staged view hold any object of `K`?
    pub fn holds_any<K: LeanKind>(&self) -> bool
    where
        S: Takes<K>,
    {
        self.cell.read_staged(Takes::<K>::holds_any)
    }

    /// Removes every object of `K` a list just completed did not find, and says how many.
    /// O(objects of the kind): readers keep the published view meanwhile.
    pub fn remove_unlisted<K: LeanKind>(&self, listed: &HashSet<String>, policy: &Policy) -> usize
    where
        S: Takes<K>,
    {
        self.cell.change_long(|view| {
            let gone: Vec<String> = Takes::<K>::keys(view).into_iter().filter(|k| !listed.contains(k)).collect();
            for key in &gone {
                Takes::<K>::unseen(view, key, policy);
            }
            gone.len()
        })
    }

    /// Removes every object of `K` (a kind no longer watched).
    pub fn clear<K: LeanKind>(&self, policy: &Policy)
    where
        S: Takes<K>,
    {
        self.cell.change(|view| {
            for key in Takes::<K>::keys(view) {
                Takes::<K>::remove(view, &key, policy);
            }
        });
    }

    /// Indexes the view again under `policy`: O(cluster), readers keep the published view
    /// meanwhile.
    pub fn rebuild(&self, policy: &Policy) {
        self.cell.change_long(|view| *view = view.rebuild(policy));
    }

    /// Lets readers see the view, from now on (every kind has synced).
    pub fn open(&self) {
        self.cell.open();
    }

    pub fn set_stale(&self, stale: bool) {
        self.cell.set_stale(stale);
    }

    /// Sets the gauges of what the newest view holds (none before the first sync).
    pub fn record(&self) {
        self.cell.read_latest(S::record);
    }
}
