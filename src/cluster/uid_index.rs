//! Pods by UID, keyed by a 64-bit hash of the UID instead of the UID string.
//!
//! Keyed by the strings, this index cost 186 bytes per pod at 150,000 pods: a copy of
//! the 36-byte UID plus a persistent-map entry four words wide. Two UIDs with one hash
//! are possible, if never expected: the later one goes to `collided`, keyed by the UID
//! itself, and every lookup compares the UID, so a collision costs room, never a wrong pod.

use std::hash::BuildHasher;
use std::sync::Arc;

use super::PMap;
use crate::model::PodRef;

#[derive(Debug, Clone)]
pub(super) struct UidIndex {
    by_hash: PMap<u64, PodRef>,
    collided: PMap<String, PodRef>,
    hasher: foldhash::fast::RandomState,
    /// All ones; zero in tests, to make every UID collide.
    mask: u64,
}

impl Default for UidIndex {
    fn default() -> UidIndex {
        UidIndex { by_hash: PMap::default(), collided: PMap::default(), hasher: Default::default(), mask: u64::MAX }
    }
}

impl UidIndex {
    fn hash(&self, uid: &str) -> u64 {
        self.hasher.hash_one(uid) & self.mask
    }

    pub(super) fn get(&self, uid: &str) -> Option<&PodRef> {
        match self.by_hash.get(&self.hash(uid)) {
            Some(p) if p.uid == uid => Some(p),
            _ if self.collided.is_empty() => None,
            _ => self.collided.get(uid),
        }
    }

    /// Enters `pod`, in place of whatever had its UID.
    pub(super) fn insert(&mut self, pod: &PodRef) {
        let h = self.hash(&pod.uid);
        match self.by_hash.get(&h) {
            Some(other) if other.uid != pod.uid => {
                self.collided.insert(pod.uid.clone(), pod.clone());
            }
            _ => {
                self.by_hash.insert(h, pod.clone());
                // It may have collided before, with a pod gone since.
                if !self.collided.is_empty() {
                    self.collided.remove(&pod.uid);
                }
            }
        }
    }

    /// Removes `pod` if it is the one entered for its UID.
    pub(super) fn remove(&mut self, pod: &PodRef) {
        let h = self.hash(&pod.uid);
        if self.by_hash.get(&h).is_some_and(|p| Arc::ptr_eq(p, pod)) {
            self.by_hash.remove(&h);
        } else if self.collided.get(&pod.uid).is_some_and(|p| Arc::ptr_eq(p, pod)) {
            self.collided.remove(&pod.uid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Pod;

    fn pod(uid: &str, name: &str) -> PodRef {
        Arc::new(Pod { uid: uid.into(), name: name.into(), ..Default::default() })
    }

    fn name(index: &UidIndex, uid: &str) -> Option<String> {
        index.get(uid).map(|p| p.name.clone())
    }

    #[test]
    fn finds_each_pod_by_its_uid_even_when_all_hashes_collide() {
        for mask in [u64::MAX, 0] {
            let mut index = UidIndex { mask, ..Default::default() };
            let (a, b, c) = (pod("u-a", "a"), pod("u-b", "b"), pod("u-c", "c"));
            for p in [&a, &b, &c] {
                index.insert(p);
            }
            assert_eq!(
                [name(&index, "u-a"), name(&index, "u-b"), name(&index, "u-c")],
                [Some("a".into()), Some("b".into()), Some("c".into())]
            );
            assert_eq!(name(&index, "u-d"), None);
            // A newer version replaces the old one; removing the old one then does nothing.
            let b2 = pod("u-b", "b2");
            index.insert(&b2);
            index.remove(&b);
            assert_eq!(name(&index, "u-b"), Some("b2".into()));
            index.remove(&a);
            assert_eq!(name(&index, "u-a"), None);
            // With the first slot free, a colliding pod entered again moves there and
            // leaves no stale copy behind to be found after its removal.
            let c2 = pod("u-c", "c2");
            index.insert(&c2);
            assert_eq!(name(&index, "u-c"), Some("c2".into()));
            index.remove(&c2);
            assert_eq!(name(&index, "u-c"), None, "mask {mask}");
            index.remove(&b2);
            assert_eq!(name(&index, "u-b"), None);
        }
    }
}
