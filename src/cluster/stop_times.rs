//! How long pods really take to stop once deleted, learned from what the view sees: a
//! deletionTimestamp, then the pod gone (a terminal phase, or its removal). Decisions read
//! it to weigh how soon the room a preemption frees is free: a victim whose owner's pods
//! checkpoint for minutes keeps the preemptor waiting for minutes, one that exits at once
//! does not, whatever their declared grace periods say.
//!
//! Per owner (its controller; a Deployment's ReplicaSets count as the Deployment, so a
//! rollout keeps what was learned) and per class of pods with the same declared grace in
//! a namespace (bare pods, and owners seen for the first time), an exponentially weighted
//! mean of the observed stops: O(1) per event, at most `KEPT` keys. Keys are hashes of
//! `namespace/Kind/name` and `namespace/class C/grace G` (64 bits: a decision looks one up
//! per candidate victim, without building a string).

use std::hash::Hasher;

use super::PMap;
use crate::model::{Pod, Timestamp};

/// Keys kept at most; past that, the half least recently updated is forgotten.
pub const KEPT: usize = 10_000;

/// Weight of a new observation in the mean (the older ones share the rest).
const WEIGHT: f64 = 0.3;

/// The grace period the API server gives a pod that declares none.
pub const DEFAULT_GRACE_SECONDS: i64 = 30;

/// What was learned for one key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Learned {
    /// The weighted mean of the observed stops, milliseconds.
    pub ms: i64,
    /// How many stops it is made of.
    pub seen: u32,
    /// When it was last updated (`StopTimes::seq`), for the bound.
    updated: u64,
}

/// Learned stop times, by owner and by class.
#[derive(Debug, Clone, Default)]
pub struct StopTimes {
    by_key: PMap<u64, Learned>,
    seq: u64,
}

/// The key of the text the parts make, end to end (what `StopTimes::get` hashes whole).
fn key(parts: &[&[u8]]) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    parts.iter().for_each(|p| h.write(p));
    h.finish()
}

/// `n` in decimal, in `buf`.
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

/// Where an expected stop comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// Its owner's pods were seen stop this many times.
    Owner(u32),
    /// Pods of its class in its namespace with its declared grace were seen stop this
    /// many times.
    Class(u32),
    /// Nothing learned: its declared grace period (30 s if it declares none).
    Declared,
}

impl Basis {
    /// "learned from 3 stops of its owner's pods", for explanations.
    pub fn describe(self) -> String {
        match self {
            Basis::Owner(n) => format!("learned from {n} stop(s) of its owner's pods"),
            Basis::Class(n) => format!("learned from {n} stop(s) of its class's pods with its grace period"),
            Basis::Declared => "its declared grace period".into(),
        }
    }

    /// The `basis` label of metrics: `owner`, `class` or `declared`.
    pub fn as_str(self) -> &'static str {
        match self {
            Basis::Owner(_) => "owner",
            Basis::Class(_) => "class",
            Basis::Declared => "declared",
        }
    }
}

/// How long a pod takes from its delete to gone, as expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stop {
    pub ms: i64,
    pub basis: Basis,
}

/// The pod's declared grace period in milliseconds (30 s where it declares none).
pub fn declared_grace_ms(pod: &Pod) -> i64 {
    i64::from(pod.grace_period.unwrap_or(DEFAULT_GRACE_SECONDS as i32)) * 1000
}

/// When the delete of a pod being deleted came, in milliseconds: its deletionTimestamp
/// (the end of its grace, to the second) less the grace the delete gave it, plus half a
/// second (the API server truncates the time it writes).
pub fn deleted_at_ms(pod: &Pod) -> Option<i64> {
    let end = pod.deletion_time?;
    let grace = pod.deletion_grace_period.or(pod.grace_period).map_or(DEFAULT_GRACE_SECONDS, i64::from);
    Some((end - grace).saturating_mul(1000) + 500)
}

/// The key of a pod's owner: `namespace/Kind/name` of its controller, a Deployment's
/// ReplicaSet (named `<deployment>-<pod-template-hash>`) as the Deployment.
pub fn owner_key(pod: &Pod) -> Option<u64> {
    let c = pod.controller.as_ref()?;
    let deployment = (c.kind == "ReplicaSet")
        .then(|| pod.labels.get("pod-template-hash"))
        .flatten()
        .and_then(|hash| c.name.strip_suffix(hash)?.strip_suffix('-'));
    let ns = pod.namespace.as_bytes();
    Some(match deployment {
        Some(d) => key(&[ns, b"/Deployment/", d.as_bytes()]),
        None => key(&[ns, b"/", c.kind.as_bytes(), b"/", c.name.as_bytes()]),
    })
}

/// The key of pods of `class` in the pod's namespace declaring its grace period.
pub fn class_key(pod: &Pod, class: &str) -> u64 {
    let mut buf = [0u8; 20];
    let grace = decimal((declared_grace_ms(pod) / 1000).max(0) as u64, &mut buf);
    key(&[pod.namespace.as_bytes(), b"/class ", class.as_bytes(), b"/grace ", grace])
}

impl StopTimes {
    /// A stop of `ms` milliseconds of a pod with these keys.
    pub fn observe(&mut self, owner: Option<u64>, class: u64, ms: i64) {
        let ms = ms.max(0);
        if self.by_key.len() + 2 > KEPT {
            self.forget_older_half();
        }
        self.seq += 1;
        for key in owner.into_iter().chain([class]) {
            let seq = self.seq;
            self.by_key
                .entry(key)
                .and_modify(|l| {
                    l.ms = (WEIGHT * ms as f64 + (1.0 - WEIGHT) * l.ms as f64).round() as i64;
                    l.seen = l.seen.saturating_add(1);
                    l.updated = seq;
                })
                .or_insert(Learned { ms, seen: 1, updated: seq });
        }
    }

    fn forget_older_half(&mut self) {
        let mut at: Vec<u64> = self.by_key.values().map(|l| l.updated).collect();
        at.sort_unstable();
        let cut = at[at.len() / 2];
        self.by_key.retain(|_, l| l.updated > cut);
    }

    /// What was learned for `key` (`namespace/Kind/name`, `namespace/class C/grace G`).
    pub fn get(&self, key: &str) -> Option<Learned> {
        self.learned(self::key(&[key.as_bytes()]))
    }

    fn learned(&self, key: u64) -> Option<Learned> {
        self.by_key.get(&key).copied()
    }

    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// How long `pod` (of `class`) is expected to take from a delete to gone: what its
    /// owner's pods took, else its class's with its grace period, else its declared grace.
    /// Never more than its grace: the kubelet stops it then.
    pub fn expected(&self, pod: &Pod, class: &str) -> Stop {
        let grace = declared_grace_ms(pod);
        if self.by_key.is_empty() {
            return Stop { ms: grace, basis: Basis::Declared };
        }
        let learned = owner_key(pod)
            .and_then(|k| self.learned(k))
            .map(|l| (l, Basis::Owner(l.seen)))
            .or_else(|| self.learned(class_key(pod, class)).map(|l| (l, Basis::Class(l.seen))));
        match learned {
            Some((l, basis)) => Stop { ms: l.ms.min(grace), basis },
            None => Stop { ms: grace, basis: Basis::Declared },
        }
    }
}

/// How long from `now` (seconds) until `pod` is gone, if deleted now, or, where it is being
/// deleted already, what is left of its expected stop (never past its grace's end).
pub fn left_ms(pod: &Pod, stop: Stop, now: Timestamp) -> i64 {
    let now_ms = now.saturating_mul(1000);
    match deleted_at_ms(pod) {
        None => stop.ms,
        Some(at) => {
            let grace_end = pod.deletion_time.map_or(i64::MAX, |t| t.saturating_mul(1000) + 1000);
            (at.saturating_add(stop.ms)).min(grace_end).saturating_sub(now_ms).max(0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::OwnerRef;

    fn pod(grace: Option<i32>) -> Pod {
        Pod {
            name: "w-1".into(),
            namespace: "batch".into(),
            controller: Some(OwnerRef { kind: "Job".into(), name: "train".into() }),
            grace_period: grace,
            ..Default::default()
        }
    }

    #[test]
    fn without_history_the_declared_grace() {
        let t = StopTimes::default();
        assert_eq!(t.expected(&pod(Some(120)), "batch"), Stop { ms: 120_000, basis: Basis::Declared });
        assert_eq!(t.expected(&pod(None), "batch").ms, 30_000, "the API server's default");
    }

    #[test]
    fn what_the_owner_took_overrides_the_declared_grace_but_never_exceeds_it() {
        let mut t = StopTimes::default();
        let p = pod(Some(120));
        t.observe(owner_key(&p), class_key(&p, "batch"), 4_000);
        assert_eq!(t.expected(&p, "batch"), Stop { ms: 4_000, basis: Basis::Owner(1) });
        // A weighted mean: a second stop of 14 s moves it 30 % of the way.
        t.observe(owner_key(&p), class_key(&p, "batch"), 14_000);
        assert_eq!(t.expected(&p, "batch"), Stop { ms: 7_000, basis: Basis::Owner(2) });
        // A pod of that owner now declaring 5 s is stopped by then.
        assert_eq!(t.expected(&pod(Some(5)), "batch").ms, 5_000);
    }

    #[test]
    fn a_bare_pod_reads_its_class_with_its_grace() {
        let mut t = StopTimes::default();
        let mut bare = pod(Some(600));
        bare.controller = None;
        t.observe(None, class_key(&bare, "free"), 500_000);
        assert_eq!(t.expected(&bare, "free"), Stop { ms: 500_000, basis: Basis::Class(1) });
        // Another grace, another class key: nothing learned.
        assert_eq!(t.expected(&pod(Some(30)), "free").basis, Basis::Declared);
    }

    #[test]
    fn a_deployments_replica_sets_share_what_was_learned() {
        let mut old = pod(Some(30));
        old.controller = Some(OwnerRef { kind: "ReplicaSet".into(), name: "web-5d9f".into() });
        old.labels.insert("pod-template-hash".into(), "5d9f".into());
        let mut t = StopTimes::default();
        t.observe(owner_key(&old), class_key(&old, "batch"), 2_000);
        assert!(t.get("batch/Deployment/web").is_some() && t.get("batch/class batch/grace 30").is_some());
        let mut plain = old.clone();
        plain.labels = Default::default();
        assert_eq!(owner_key(&plain), Some(key(&[b"batch/ReplicaSet/web-5d9f"])));
        assert_eq!(decimal(0, &mut [0; 20]), b"0");
        assert_eq!(decimal(600, &mut [0; 20]), b"600");
    }

    #[test]
    fn memory_is_bounded() {
        let mut t = StopTimes::default();
        for i in 0..3 * KEPT as u64 {
            t.observe(Some(2 * i), 2 * i + 1, 1);
            assert!(t.len() <= KEPT);
        }
        assert!(t.learned(2 * (3 * KEPT as u64 - 1)).is_some(), "the latest is kept");
    }

    #[test]
    fn what_is_left_of_a_stop_under_way() {
        let stop = Stop { ms: 10_000, basis: Basis::Declared };
        let mut p = pod(Some(30));
        assert_eq!(left_ms(&p, stop, 1_000), 10_000, "not deleted: all of it");
        // Deleted at 1000 (deletionTimestamp 1030, grace 30): at 1004, 6.5 s left.
        p.deletion_time = Some(1_030);
        p.deletion_grace_period = Some(30);
        assert_eq!(left_ms(&p, stop, 1_004), 6_500);
        assert_eq!(left_ms(&p, stop, 1_020), 0, "overdue: gone any moment");
        // Never past the grace's end.
        assert_eq!(left_ms(&p, Stop { ms: 90_000, basis: Basis::Declared }, 1_000), 31_000);
    }
}
