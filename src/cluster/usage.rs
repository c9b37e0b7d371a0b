//! What the pods on a node hold, kept current as pods are attached and detached (like
//! kube-scheduler's `NodeInfo.Requested`), so a decision reads a node in O(1) instead of
//! walking its pods.

use crate::model::{HostPort, Pod, Resources};
use crate::policy::{BareVictims, ClassId, Policy};

/// Requests, pod count and host ports of a set of pods.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeUsage {
    pub requested: Resources,
    pub pods: i64,
    pub ports: Vec<HostPort>,
}

impl NodeUsage {
    pub fn of<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> NodeUsage {
        let mut u = NodeUsage::default();
        for p in pods {
            u.add(p);
        }
        u
    }

    pub fn add(&mut self, pod: &Pod) {
        self.requested.add(&pod.requests);
        self.pods += 1;
        self.ports.extend(pod.host_ports.iter().cloned());
    }

    pub fn remove(&mut self, pod: &Pod) {
        self.requested.sub(&pod.requests);
        self.pods -= 1;
        self.remove_ports(&pod.host_ports);
    }

    /// Takes out everything `part` holds (`part` is a subset of these pods).
    pub fn remove_all(&mut self, part: &NodeUsage) {
        self.requested.sub(&part.requested);
        self.pods -= part.pods;
        self.remove_ports(&part.ports);
    }

    fn remove_ports(&mut self, ports: &[HostPort]) {
        for hp in ports {
            if let Some(i) = self.ports.iter().position(|p| p == hp) {
                self.ports.swap_remove(i);
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.pods == 0
    }
}

/// Which evictable bucket a bound pod was counted in, remembered per pod so that
/// detaching it takes out exactly what attaching it put in (its class may read
/// differently by then, e.g. after a PriorityClass changed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    /// Never a victim by its class and own state: class protected, terminating, or a
    /// bare pod of a `bare: protect` class.
    Protected,
    /// Evictable by class rules: owned, opted out of requeue, or bare in a `bare: lose` class.
    Evictable(ClassId),
    /// Bare in a `bare: requeue` class: evictable only while requeue is on.
    Requeue(ClassId),
}

impl Counted {
    /// The rules of `decide::eligibility::check` that depend on the pod and its class
    /// only. The others (priority below the preemptor's, a gang's priority, minRuntime,
    /// a replacement that could not be stored) depend on the preemptor or the time.
    pub fn of(pod: &Pod, class_id: ClassId, policy: &Policy) -> Counted {
        let class = policy.class(class_id);
        if !class.victim.allowed || pod.deletion_time.is_some() {
            return Counted::Protected;
        }
        if !pod.is_bare() || crate::model::marks::opted_out(pod) {
            return Counted::Evictable(class_id);
        }
        match class.victim.bare() {
            BareVictims::Protect => Counted::Protected,
            BareVictims::Lose => Counted::Evictable(class_id),
            BareVictims::Requeue => Counted::Requeue(class_id),
        }
    }
}

/// One class's evictable pods on a node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClassUsage {
    pub class: ClassId,
    /// Controller-owned pods and bare pods of `bare: lose` classes.
    pub evictable: NodeUsage,
    /// Bare pods of `bare: requeue` classes.
    pub requeue: NodeUsage,
}

/// A pod whose declared grace period is at least this long (seconds) stops slowly: as a
/// victim it keeps an online pod waiting that long, if it takes its grace (checkpointing
/// batch work does).
pub const SLOW_STOP_S: i32 = 60;

/// How a pod stops when deleted, by its declared grace period (the kubelet's default,
/// 30 s, where unset). Read the same when the pod is attached and detached: the grace is
/// part of a pod's spec, which does not change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopping {
    Fast = 0,
    Slow = 1,
}

impl Stopping {
    pub fn declared(pod: &Pod) -> Stopping {
        match pod.grace_period.unwrap_or(30) >= SLOW_STOP_S {
            true => Stopping::Slow,
            false => Stopping::Fast,
        }
    }

    pub fn other(self) -> Stopping {
        match self {
            Stopping::Fast => Stopping::Slow,
            Stopping::Slow => Stopping::Fast,
        }
    }
}

/// A node's aggregates: everything bound to it, and per class what could be evicted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Aggregates {
    pub all: NodeUsage,
    /// Sorted by class; only classes with evictable pods on the node (a handful).
    pub by_class: Vec<ClassUsage>,
    /// Milli-CPU requested by the evictable pods (of any class), by how they stop
    /// (`Stopping` as index): what prioritize keeps apart.
    pub evictable_cpu_by_stop: [i64; 2],
}

impl Aggregates {
    pub fn add(&mut self, pod: &Pod, counted: Counted) {
        self.all.add(pod);
        if let Some(bucket) = self.bucket(counted) {
            bucket.add(pod);
            self.evictable_cpu_by_stop[Stopping::declared(pod) as usize] += pod.requests.milli_cpu;
        }
    }

    pub fn remove(&mut self, pod: &Pod, counted: Counted) {
        self.all.remove(pod);
        if let Some(bucket) = self.bucket(counted) {
            bucket.remove(pod);
            self.evictable_cpu_by_stop[Stopping::declared(pod) as usize] -= pod.requests.milli_cpu;
        }
        self.by_class.retain(|c| !(c.evictable.is_empty() && c.requeue.is_empty()));
    }

    /// The share of the evictable CPU here that stops unlike `stopping` (0..=1; 0 on a
    /// node with no evictable pods).
    pub fn share_stopping_unlike(&self, stopping: Stopping) -> f64 {
        let [fast, slow] = self.evictable_cpu_by_stop.map(|c| c.max(0));
        match fast + slow {
            0 => 0.0,
            all => self.evictable_cpu_by_stop[stopping.other() as usize].max(0) as f64 / all as f64,
        }
    }

    fn bucket(&mut self, counted: Counted) -> Option<&mut NodeUsage> {
        let (class, requeue) = match counted {
            Counted::Protected => return None,
            Counted::Evictable(c) => (c, false),
            Counted::Requeue(c) => (c, true),
        };
        let at = match self.by_class.binary_search_by_key(&class, |c| c.class) {
            Ok(at) => at,
            Err(at) => {
                self.by_class.insert(at, ClassUsage { class, ..ClassUsage::default() });
                at
            }
        };
        let c = &mut self.by_class[at];
        Some(if requeue { &mut c.requeue } else { &mut c.evictable })
    }

    /// What the node would hold once every pod the class rules let `preemptor` evict is
    /// gone: a lower bound on the usage after preemption (the pod-level rules of
    /// eligibility can only spare more).
    pub fn after_evicting(&self, policy: &Policy, preemptor: ClassId, requeue: bool) -> NodeUsage {
        let mut left = self.all.clone();
        for c in self.by_class.iter().filter(|c| policy.may_preempt(preemptor, c.class)) {
            left.remove_all(&c.evictable);
            if requeue {
                left.remove_all(&c.requeue);
            }
        }
        left
    }
}
