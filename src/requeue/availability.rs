//! Can requeue store copies now? Checked apart from the answers (a SelfSubjectAccessReview
//! every few seconds, and every copy refused as forbidden), read by every decision: while
//! it cannot, bare pods of `requeue` classes are victims of last resort, as with requeue
//! off (taken only for an online pod nothing else places, and lost), rather than evicted
//! as if a copy would bring them back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

#[derive(Debug, Default)]
pub struct Availability {
    /// `serve --requeue`: this replica copies preempted bare pods.
    on: bool,
    /// The last check found the copies' writes allowed (assumed until a check says not).
    writable: AtomicBool,
    /// Why not, for `/readyz` and the log.
    why_not: Mutex<Option<String>>,
}

impl Availability {
    /// `on`: its gauge is exported (1 until a check says otherwise), so that an alert
    /// sees only replicas that run requeue.
    pub fn new(on: bool) -> Availability {
        if on {
            metrics::gauge!("coloc_requeue_available").set(1.0);
        }
        Availability { on, writable: AtomicBool::new(true), why_not: Mutex::new(None) }
    }

    /// May decisions count on a bare victim being copied once it is evicted?
    pub fn copies_possible(&self) -> bool {
        self.on && self.writable.load(Ordering::Relaxed)
    }

    pub fn is_on(&self) -> bool {
        self.on
    }

    /// Why copies cannot be stored now, while they cannot.
    pub fn why_not(&self) -> Option<String> {
        self.why_not.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Records a check's finding; true if it changed.
    pub fn set(&self, writable: bool, why_not: Option<String>) -> bool {
        *self.why_not.lock().unwrap_or_else(|e| e.into_inner()) = if writable { None } else { why_not };
        let was = self.writable.swap(writable, Ordering::Relaxed);
        if self.on {
            metrics::gauge!("coloc_requeue_available").set(if writable { 1.0 } else { 0.0 });
        }
        was != writable
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_are_possible_only_while_on_and_writable() {
        assert!(!Availability::new(false).copies_possible());
        let a = Availability::new(true);
        assert!(a.copies_possible());
        assert!(a.set(false, Some("cannot create pods".into())));
        assert!(!a.copies_possible());
        assert_eq!(a.why_not().as_deref(), Some("cannot create pods"));
        assert!(!a.set(false, Some("still not".into())), "no change");
        assert!(a.set(true, None));
        assert!(a.copies_possible() && a.why_not().is_none());
    }
}
