//! The bytes of marked bare pods that requeue may copy, bounded.
//!
//! The view keeps a preempted (or drained) bare pod's JSON from kube-scheduler's mark on,
//! so that a pod gone at the delete (grace 0) can still be copied. A tenant can make many
//! large pods, have them marked and hold them with a finalizer: unbounded, their bytes
//! would push every replica past its memory limit. So at most `PER_POD` bytes per pod and
//! `TOTAL` in all are kept, the largest dropped first (ordinary pods are a few KB; the
//! pods that fill the bound are the large ones). A pod whose bytes are not kept is copied
//! from a GET of the original at copy time, while it still terminates; one already gone by
//! then is given up visibly (`state_not_kept`).

use std::sync::Arc;

use imbl::OrdMap;

use super::PMap;

/// Bytes kept at most for one pod: a pod's JSON is a few KB, and admission caps its
/// annotations at 256 KiB.
pub const PER_POD: usize = 256 * 1024;
/// Bytes kept at most in all: 64 MiB, a few hundred pods at `PER_POD`, thousands of
/// ordinary ones; well under the memory a replica is given (docs/deploy.md).
pub const TOTAL: usize = 64 * 1024 * 1024;

#[derive(Debug, Clone)]
struct Kept {
    bytes: Arc<str>,
    /// Order of arrival: of two states of the same size the later is dropped first.
    seq: u64,
}

/// Pod JSON by UID, within `PER_POD` and `TOTAL`.
#[derive(Debug, Clone, Default)]
pub struct KeptStates {
    by_uid: PMap<String, Kept>,
    /// (size, arrival) → UID: the largest last.
    by_size: OrdMap<(usize, u64), String>,
    bytes: usize,
    seq: u64,
}

impl KeptStates {
    /// Keeps `bytes` as the state of `uid`, in place of any earlier one, unless it is over
    /// `PER_POD`, or it is the largest and the total would pass `TOTAL`; larger states go
    /// first to make room. Returns whether it is kept.
    pub fn keep(&mut self, uid: &str, bytes: Arc<str>) -> bool {
        self.keep_within(uid, bytes, TOTAL)
    }

    fn keep_within(&mut self, uid: &str, bytes: Arc<str>, total: usize) -> bool {
        self.forget(uid);
        let size = bytes.len();
        if size > PER_POD || size > total {
            return false;
        }
        while self.bytes + size > total {
            match self.by_size.get_max() {
                Some(((largest, _), _)) if *largest > size => {
                    let uid = self.by_size.get_max().map(|(_, u)| u.clone()).unwrap_or_default();
                    self.forget(&uid);
                }
                // The new state is the largest (or as large as any): it is the one not kept.
                _ => return false,
            }
        }
        self.seq += 1;
        self.by_size.insert((size, self.seq), uid.to_string());
        self.by_uid.insert(uid.to_string(), Kept { bytes, seq: self.seq });
        self.bytes += size;
        true
    }

    pub fn forget(&mut self, uid: &str) {
        if let Some(k) = self.by_uid.remove(uid) {
            self.by_size.remove(&(k.bytes.len(), k.seq));
            self.bytes -= k.bytes.len();
        }
    }

    pub fn get(&self, uid: &str) -> Option<&Arc<str>> {
        self.by_uid.get(uid).map(|k| &k.bytes)
    }

    pub fn contains(&self, uid: &str) -> bool {
        self.by_uid.contains_key(uid)
    }

    /// Bytes kept now.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Pods whose bytes are kept now.
    pub fn len(&self) -> usize {
        self.by_uid.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_uid.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(size: usize) -> Arc<str> {
        Arc::from("x".repeat(size))
    }

    #[test]
    fn a_pod_larger_than_the_bound_is_not_kept() {
        let mut k = KeptStates::default();
        assert!(!k.keep("u", state(PER_POD + 1)));
        assert!(k.keep("v", state(PER_POD)));
        assert_eq!((k.len(), k.bytes()), (1, PER_POD));
    }

    #[test]
    fn the_total_stays_under_its_bound_the_largest_going_first() {
        let mut k = KeptStates::default();
        for i in 0..10 {
            assert!(k.keep_within(&format!("large-{i}"), state(100), 1000));
        }
        // Full: a small state makes room by dropping a large one, a large one is not kept.
        assert!(k.keep_within("small", state(10), 1000));
        assert!(!k.contains("large-9") && k.contains("large-0"), "the last of the largest went");
        assert!(!k.keep_within("large-10", state(100), 1000));
        assert!(k.bytes() <= 1000 && k.contains("small"));
    }

    #[test]
    fn a_new_state_of_a_pod_takes_the_place_of_its_last() {
        let mut k = KeptStates::default();
        k.keep("u", state(10));
        k.keep("u", state(20));
        assert_eq!((k.len(), k.bytes()), (1, 20));
        k.forget("u");
        assert_eq!((k.len(), k.bytes()), (0, 0));
    }
}
