//! Plain domain types that decisions read: no HTTP, no Kubernetes client types.

use std::collections::BTreeMap;
use std::sync::Arc;

// What baseline allows, read by the wire's check; the control itself is `BaselineControl`.
pub(crate) mod baseline;
pub mod copy_spec;
mod job;
mod labels;
pub mod marks;
mod requeue_intent;
pub use job::{parse_index_ranges, DisruptionAction, Job, COMPLETION_INDEX, INDEX_FAILURE_COUNT, TRACKING_FINALIZER};

pub use baseline::BaselineControl;
pub use labels::Labels;
pub(crate) use labels::LabelsVisitor;
pub use requeue_intent::RequeueIntent;
/// Seconds since the Unix epoch; decisions take `now` in the same unit.
pub type Timestamp = i64;

/// Resource amounts as kube-scheduler's NodeResourcesFit compares them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources {
    pub milli_cpu: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    /// Extended and hugepages resources, by name, in whole units.
    pub scalar: BTreeMap<String, i64>,
}

impl Resources {
    /// Sums saturate: absurd requests (`cpu: 1e18` twice) must not wrap into room.
    pub fn add(&mut self, other: &Resources) {
        self.milli_cpu = self.milli_cpu.saturating_add(other.milli_cpu);
        self.memory = self.memory.saturating_add(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.saturating_add(other.ephemeral_storage);
        for (k, v) in &other.scalar {
            let e = self.scalar.entry(k.clone()).or_insert(0);
            *e = e.saturating_add(*v);
        }
    }

    pub fn sub(&mut self, other: &Resources) {
        self.milli_cpu = self.milli_cpu.saturating_sub(other.milli_cpu);
        self.memory = self.memory.saturating_sub(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.saturating_sub(other.ephemeral_storage);
        for (k, v) in &other.scalar {
            let e = self.scalar.entry(k.clone()).or_insert(0);
            *e = e.saturating_sub(*v);
        }
    }

    /// Component-wise maximum (init containers run one at a time).
    pub fn max_with(&mut self, other: &Resources) {
        self.milli_cpu = self.milli_cpu.max(other.milli_cpu);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        for (k, v) in &other.scalar {
            let e = self.scalar.entry(k.clone()).or_insert(0);
            *e = (*e).max(*v);
        }
    }

    pub fn is_zero(&self) -> bool {
        self.milli_cpu == 0 && self.memory == 0 && self.ephemeral_storage == 0 && self.scalar.values().all(|v| *v == 0)
    }

    pub fn scalar(&self, name: &str) -> i64 {
        self.scalar.get(name).copied().unwrap_or(0)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    pub port: i32,
    pub protocol: String,
    /// "0.0.0.0" when unset: conflicts with every address.
    pub ip: String,
}

impl HostPort {
    pub fn conflicts(&self, other: &HostPort) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || is_wildcard(&self.ip) || is_wildcard(&other.ip))
    }
}

fn is_wildcard(ip: &str) -> bool {
    ip.is_empty() || ip == "0.0.0.0" || ip == "::"
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerRef {
    pub kind: String,
    pub name: String,
}

/// What decisions need of a Pod.
#[derive(Debug, Clone, Default)]
pub struct Pod {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub labels: Labels,
    /// Annotations, minus the bulky `last-applied-configuration`; in the cluster view,
    /// only those decisions read (`policy::AnnotationsRead`): read no other of a pod the
    /// view holds without adding it there.
    pub annotations: Labels,
    /// The managing controller (ownerReference with `controller: true`), if any.
    pub controller: Option<OwnerRef>,
    /// The first other ownerReference, when there is no controller: something tracks the
    /// pod (a CI runner, a workflow engine) and brings it back its own way.
    pub owner: Option<OwnerRef>,
    pub creation_time: Option<Timestamp>,
    pub start_time: Option<Timestamp>,
    pub deletion_time: Option<Timestamp>,
    /// `spec.terminationGracePeriodSeconds` (saturated to i32): how long its containers get
    /// after a delete. `None`: the API server's default, 30 s.
    pub grace_period: Option<i32>,
    /// `metadata.deletionGracePeriodSeconds` of a pod being deleted: the grace the delete
    /// gave it (its deletionTimestamp less this is when the delete came).
    pub deletion_grace_period: Option<i32>,
    pub priority: Option<i32>,
    pub priority_class_name: Option<String>,
    /// `Never` means the pod may not preempt.
    pub preemption_never: bool,
    pub node_name: Option<String>,
    /// `status.nominatedNodeName` of a pending pod: kube-scheduler holds room for it there.
    pub nominated_node_name: Option<String>,
    /// Names of `spec.schedulingGates`: a gated pod is not scheduled until they are removed.
    pub scheduling_gates: Vec<String>,
    /// `spec.schedulingGroup.podGroupName`: the native PodGroup this pod belongs to.
    pub scheduling_group: Option<String>,
    pub phase: Option<Phase>,
    /// Carries the Job controller's `batch.kubernetes.io/job-tracking` finalizer: a Job pod
    /// that has ended (or is terminating) with it has not been recorded by its Job yet.
    pub job_tracking: bool,
    /// Carries requeue's guard finalizer (`marks::GUARD`): if it is preempted, it stays
    /// until its replacement is stored.
    pub requeue_guarded: bool,
    /// kube-scheduler preempted it (condition `DisruptionTarget`, reason
    /// `PreemptionByScheduler`): once terminating, its room is on its way to a preemptor.
    pub preempted: bool,
    /// Evicted through the Eviction API (condition `DisruptionTarget`, reason
    /// `EvictionByEvictionAPI`): a drain. Requeued only where its class says
    /// `requeue.afterEviction`.
    pub evicted: bool,
    /// Its kubelet reports it not ready (condition `Ready` not `True`): the disruption
    /// controller does not count it healthy. A pod with no `Ready` condition yet is taken
    /// as ready, as snapshots of clusters without kubelets have it.
    pub unready: bool,
    /// kube-scheduler found no room for it (condition `PodScheduled` `False`, reason
    /// `Unschedulable`): a pending pod of an online class waiting for room, which room
    /// another preemption leaves over would place.
    pub unschedulable: bool,
    /// Effective requests: max(init, sum(app)) + sidecars + overhead.
    pub requests: Resources,
    pub host_ports: Vec<HostPort>,
    /// The first control of Pod Security's baseline profile its spec exceeds, if any: a
    /// requeue copy carries no such spec unless its namespace opted in to that. Decoded for
    /// a bare pod only (no ownerReference): requeue copies no other.
    pub beyond_baseline: Option<BaselineControl>,
    /// The whole object as the API server last sent it, kept only for a bare pod that
    /// kube-scheduler marked `preempted`: requeue copies it, and with a grace period of 0
    /// the watch's last event is the only place left to read it from.
    pub last_state: Option<Arc<str>>,
    /// The digest of the spec a copy of it carries (`copy_spec::digest`), decoded only for
    /// a requeue copy and a marked bare pod: requeue releases only a copy whose digest is
    /// the one its recorded original gives.
    pub spec_digest: Option<copy_spec::SpecDigest>,
}

impl Pod {
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// A DaemonSet's pod or a static pod (its mirror is owned by the Node): it runs where
    /// it is, and never needs room on another node.
    pub fn is_node_agent(&self) -> bool {
        self.controller.as_ref().is_some_and(|c| c.kind == "DaemonSet" || c.kind == "Node")
    }

    /// When the pod began to run (or was created, if it never started).
    pub fn running_since(&self) -> Option<Timestamp> {
        self.start_time.or(self.creation_time)
    }

    /// The Job that controls this pod (ownerReference kind Job, controller true).
    pub fn job(&self) -> Option<&str> {
        self.controller.as_ref().filter(|c| c.kind == "Job").map(|c| c.name.as_str())
    }

    /// The completion index of an Indexed Job's pod (annotation, else label).
    pub fn completion_index(&self) -> Option<u32> {
        self.annotations.get(COMPLETION_INDEX).or_else(|| self.labels.get(COMPLETION_INDEX))?.parse().ok()
    }

    /// No ownerReference at all: nothing but requeue would bring it back.
    pub fn is_bare(&self) -> bool {
        self.controller.is_none() && self.owner.is_none()
    }

    pub fn is_terminal(&self) -> bool {
        matches!(self.phase, Some(Phase::Succeeded | Phase::Failed))
    }
}

/// `status.phase`, a byte instead of a string per pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Pending,
    Running,
    Succeeded,
    Failed,
    /// `Unknown`, and any phase this build does not know: neither running nor ended.
    Unknown,
}

impl From<&str> for Phase {
    fn from(s: &str) -> Phase {
        match s {
            "Pending" => Phase::Pending,
            "Running" => Phase::Running,
            "Succeeded" => Phase::Succeeded,
            "Failed" => Phase::Failed,
            _ => Phase::Unknown,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: String,
}

/// What decisions need of a Node.
#[derive(Debug, Clone, Default)]
pub struct Node {
    pub name: String,
    pub labels: Labels,
    pub taints: Vec<Taint>,
    pub unschedulable: bool,
    pub allocatable: Resources,
    pub allocatable_pods: i64,
}

/// A label selector (matchLabels + matchExpressions).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    pub match_labels: Labels,
    pub match_expressions: Vec<SelectorRequirement>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectorRequirement {
    pub key: String,
    pub operator: String,
    pub values: Vec<String>,
}

impl Selector {
    pub fn matches(&self, labels: &Labels) -> bool {
        self.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let got = labels.get(&r.key);
                match r.operator.as_str() {
                    "In" => got.is_some_and(|v| r.values.iter().any(|x| x == v)),
                    "NotIn" => got.is_none_or(|v| !r.values.iter().any(|x| x == v)),
                    "Exists" => got.is_some(),
                    "DoesNotExist" => got.is_none(),
                    // Unknown operators match nothing, as the API server would reject them.
                    _ => false,
                }
            })
    }
}

#[derive(Debug, Clone, Default)]
pub struct Pdb {
    pub name: String,
    pub namespace: String,
    /// `None` (a null selector) selects no pods; an empty selector selects all in the namespace.
    pub selector: Option<Selector>,
    pub disruptions_allowed: i32,
    /// Pods already being disrupted: the controller has counted them already.
    pub disrupted_pods: Vec<String>,
    /// `status.currentHealthy` when the controller last looked: covered pods gone since
    /// (evicted a moment ago) still count in `disruptions_allowed` until it looks again.
    pub current_healthy: Option<i32>,
}

impl Pdb {
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    pub fn covers(&self, pod: &Pod) -> bool {
        pod.namespace == self.namespace && self.selector.as_ref().is_some_and(|s| s.matches(&pod.labels))
    }
}

#[derive(Debug, Clone)]
pub struct PriorityClass {
    pub name: String,
    pub value: i32,
}

/// A namespace, as far as decisions care: may requeue store copies in it?
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Namespace {
    pub name: String,
    pub opt_in: NamespaceOptIn,
}

/// What a namespace opted in to, by its own labels (`marks::namespace_opt_in`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NamespaceOptIn {
    /// Copies of its bare pods may be stored there.
    pub copies: bool,
    /// Copies may keep what their original had beyond Pod Security baseline.
    pub beyond_baseline: bool,
}

pub type PodRef = Arc<Pod>;

/// Where a gang is declared. Ordered by precedence: when a pod declares several, the
/// first one wins (see `policy::GangConfig::gang_of`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GangSource {
    /// Kubernetes' own PodGroup (`scheduling.k8s.io`), named by `spec.schedulingGroup.podGroupName`.
    Native,
    /// scheduler-plugins coscheduling: label `scheduling.x-k8s.io/pod-group`, PodGroup CRD.
    Coscheduling,
    /// Volcano: annotation `scheduling.k8s.io/group-name`, PodGroup CRD.
    Volcano,
    /// Kueue plain pod groups: label `kueue.x-k8s.io/pod-group-name`.
    Kueue,
    /// The policy's `groupLabels` / `minMemberAnnotations`, no object.
    Labels,
}

impl GangSource {
    /// A bounded name (metrics label, explanations).
    pub fn name(self) -> &'static str {
        match self {
            GangSource::Native => "native",
            GangSource::Coscheduling => "coscheduling",
            GangSource::Volcano => "volcano",
            GangSource::Kueue => "kueue",
            GangSource::Labels => "labels",
        }
    }

    /// What the source calls its minimum.
    fn minimum_name(self) -> &'static str {
        match self {
            GangSource::Native => "minCount",
            GangSource::Coscheduling | GangSource::Volcano => "minMember",
            GangSource::Kueue => "total-count",
            GangSource::Labels => "minimum",
        }
    }

    /// Sources whose gangs are described by a PodGroup object.
    pub fn has_object(self) -> bool {
        matches!(self, GangSource::Native | GangSource::Coscheduling | GangSource::Volcano)
    }
}

/// One gang: its source and `namespace/name`. Two sources never share a gang, even with
/// the same name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GangRef {
    pub source: GangSource,
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for GangRef {
    /// "PodGroup ml/train-7" or "gang ml/x" (Kueue and label gangs have no object).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let noun = if self.source.has_object() { "PodGroup" } else { "gang" };
        write!(f, "{noun} {}/{}", self.namespace, self.name)
    }
}

/// How a gang may be disrupted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DisruptionMode {
    /// Members may be evicted one by one (above the minimum).
    #[default]
    Single,
    /// `All` (v1beta1) / `PodGroup` (v1alpha2): evicted together or not at all.
    All,
}

/// A PodGroup object of any source, cut down to what decisions read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodGroup {
    pub source: GangSource,
    pub namespace: String,
    pub name: String,
    /// `spec.schedulingPolicy.gang.minCount` (native) or `spec.minMember` (CRDs); `None`
    /// for a native PodGroup with the basic (non-gang) policy.
    pub min_count: Option<usize>,
    pub disruption: DisruptionMode,
    pub priority: Option<i32>,
    pub priority_class_name: Option<String>,
}

impl PodGroup {
    pub fn gang(&self) -> GangRef {
        GangRef { source: self.source, namespace: self.namespace.clone(), name: self.name.clone() }
    }
}

/// A gang as decisions see it: bound members, minimum, mode and priority, whatever the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GangInfo {
    pub gang: GangRef,
    /// Bound, non-terminal members in the view.
    pub size: usize,
    /// Of them, those being deleted: gone whatever a decision does.
    pub leaving: usize,
    /// Members that must stay for the gang to keep running.
    pub min: usize,
    /// Where `min` came from, for explanations ("minCount 4", "no PodGroup: all members").
    pub min_from: String,
    pub disruption: DisruptionMode,
    /// The PodGroup's priority: it overrides the members' when victims are ranked.
    pub priority: Option<i32>,
}

impl GangInfo {
    /// Members that stay once those being deleted and `gone` more have left.
    pub fn standing(&self, gone: usize) -> usize {
        self.size.saturating_sub(self.leaving + gone)
    }

    /// Below its minimum once those being deleted and `gone` more have left: its
    /// survivors cannot progress whatever a decision evicts now.
    pub fn broken_already(&self, gone: usize) -> bool {
        self.standing(gone) < self.min
    }

    /// "PodGroup ml/train-7 (native, minCount 4, 3 would remain)".
    pub fn describe(&self, remaining: usize) -> String {
        format!("{} ({}, {}, {remaining} would remain)", self.gang, self.gang.source.name(), self.min_from)
    }

    pub(crate) fn minimum_label(source: GangSource, min: usize) -> String {
        format!("{} {min}", source.minimum_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_succeeded_and_failed_pods_have_ended() {
        let with = |phase: &str| Pod { phase: Some(phase.into()), ..Default::default() };
        assert!(with("Succeeded").is_terminal() && with("Failed").is_terminal());
        assert!(!with("Running").is_terminal() && !with("Pending").is_terminal());
        assert_eq!(with("Evicting").phase, Some(Phase::Unknown));
        assert!(!with("Evicting").is_terminal());
        assert!(!Pod::default().is_terminal());
    }
}
