//! The cluster view: what decisions read, kept current one object at a time.
//!
//! Like kube-scheduler's cache, the view is per-node state with generation numbers. Its
//! maps are persistent (structurally shared) so a change costs O(log n) plus the touched
//! node's pod list, and a clone, which is what readers get, costs O(1): sources apply each
//! event to their own copy and publish a clone; readers share it through `Arc` and never
//! lock. Snapshot files and watches go through the same `apply_*` methods.

use std::collections::BTreeMap;
use std::sync::Arc;

use imbl::OrdMap;

use super::PMap;

use super::jobs::Jobs;
use super::pod_context::PodContext;
use super::stop_times::{self, Stop, StopTimes};
use super::uid_index::UidIndex;
use super::usage::{Aggregates, Counted};
use crate::model::{
    DisruptionMode, GangInfo, GangRef, GangSource, Job, Namespace, NamespaceOptIn, Node, Pdb, Pod, PodGroup, PodRef,
    PriorityClass, Resources, Timestamp,
};
use crate::policy::{AnnotationsRead, ClassId, GangConfig, Policy};

/// Raw objects a view is built from.
#[derive(Debug, Clone, Default)]
pub struct Objects {
    pub nodes: Vec<Node>,
    pub pods: Vec<Pod>,
    pub pdbs: Vec<Pdb>,
    pub priority_classes: Vec<PriorityClass>,
    /// `None`: the source has no namespaces (a snapshot recorded without them).
    pub namespaces: Option<Vec<Namespace>>,
    pub pod_groups: Vec<PodGroup>,
    pub jobs: Vec<Job>,
}

/// One node's state: the Node object (if the view has seen it), the pods bound to it and
/// the pending pods nominated to it.
#[derive(Debug, Clone, Default)]
pub struct NodeInfo {
    /// `None` while pods name a node the view has not seen, or after it was deleted.
    /// Shared: a pod event on the node copies the pod lists, not the Node.
    pub node: Option<Arc<Node>>,
    /// Bound, non-terminal pods, in no particular order: a bind appends, a delete swaps the
    /// last one into its place. Keeping them sorted cost a binary search over other pods'
    /// names on every bind, each a cache miss by then (docs/journal/performance.md, "The watch path, event by event"); the rare
    /// readers that show pods in order (`preempt`'s explanations) sort what they read.
    pods: Vec<PodRef>,
    /// How each of `pods` (same index) is counted in `usage`.
    counted: Vec<Counted>,
    /// What `pods` hold, in total and per class of evictable pods.
    usage: Aggregates,
    /// Pending pods with `status.nominatedNodeName` = this node.
    nominated: Vec<PodRef>,
    /// The view generation of the last change to this node's state.
    pub generation: u64,
}

impl NodeInfo {
    fn is_empty(&self) -> bool {
        self.node.is_none() && self.pods.is_empty() && self.nominated.is_empty()
    }

    pub fn node(&self) -> Option<&Node> {
        self.node.as_deref()
    }

    /// What the bound pods hold: requests, count, host ports, and per class what could
    /// be evicted. O(1) to read.
    pub fn usage(&self) -> &Aggregates {
        &self.usage
    }

    /// Bound, non-terminal pods, in no particular order.
    pub fn pods(&self) -> &[PodRef] {
        &self.pods
    }

    /// Pending pods nominated to this node.
    pub fn nominated(&self) -> &[PodRef] {
        &self.nominated
    }

    fn add_pod(&mut self, pod: PodRef, counted: Counted) {
        self.usage.add(&pod, counted);
        self.pods.push(pod);
        self.counted.push(counted);
    }

    /// `pod` takes `old`'s place.
    fn replace_pod(&mut self, old: &PodRef, pod: PodRef, counted: Counted) {
        match self.pods.iter().position(|p| Arc::ptr_eq(p, old)) {
            Some(at) => {
                self.usage.remove(old, self.counted[at]);
                self.usage.add(&pod, counted);
                self.pods[at] = pod;
                self.counted[at] = counted;
            }
            None => self.add_pod(pod, counted),
        }
    }

    fn remove_pod(&mut self, pod: &PodRef) {
        if let Some(at) = self.pods.iter().position(|p| Arc::ptr_eq(p, pod)) {
            self.pods.swap_remove(at);
            let counted = self.counted.swap_remove(at);
            self.usage.remove(pod, counted);
        }
    }
}

/// Where a pod sits in the view.
enum Slot<'a> {
    Bound(&'a str),
    Nominated(&'a str),
    /// Pending with no nomination (e.g. scheduling-gated): known by UID and key only.
    Pending,
}

fn slot(pod: &Pod) -> Slot<'_> {
    match (&pod.node_name, &pod.nominated_node_name) {
        (Some(n), _) => Slot::Bound(n),
        (None, Some(n)) => Slot::Nominated(n),
        (None, None) => Slot::Pending,
    }
}

/// A gang's bound members, summed so that its work is read in O(1) at any time.
#[derive(Debug, Clone, Copy, Default)]
struct GangTally {
    members: usize,
    /// Of them, those being deleted: the gang loses them whatever a decision does.
    leaving: usize,
    /// The members staying (not being deleted).
    staying: Tally,
}

/// CPU and run of a set of pods.
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    milli_cpu: i64,
    /// Σ CPU of started members, and Σ CPU × start time: work by `now` is
    /// `now × started_cpu − started_cpu_time`.
    started_cpu: i64,
    started_cpu_time: i128,
}

impl GangTally {
    fn count(&mut self, pod: &Pod, delta: i32) {
        self.members = self.members.saturating_add_signed(delta as isize);
        if pod.deletion_time.is_some() {
            self.leaving = self.leaving.saturating_add_signed(delta as isize);
            return;
        }
        let cpu = pod.requests.milli_cpu.max(1) * delta as i64;
        self.staying.milli_cpu += cpu;
        if let Some(start) = pod.start_time {
            self.staying.started_cpu += cpu;
            self.staying.started_cpu_time += cpu as i128 * start as i128;
        }
    }

    fn work(&self, now: Timestamp) -> GangWork {
        let t = &self.staying;
        let run = (now as i128 * t.started_cpu as i128 - t.started_cpu_time).max(0);
        GangWork { milli_cpu: t.milli_cpu, run: run.min(i64::MAX as i128) as i64 }
    }
}

/// The online pods' CPU requests, cumulated by size: what room an arriving online pod is
/// likely to need.
#[derive(Debug, Clone, Default)]
pub struct OnlineRoom {
    /// (milli-CPU, how many online pods request at most that), ascending.
    at_most: Vec<(i64, usize)>,
}

impl OnlineRoom {
    /// No online pod is bound.
    pub fn is_empty(&self) -> bool {
        self.at_most.is_empty()
    }

    /// The share of online pods whose request is more than `after` and at most `before`
    /// milli-CPU: those that fit in a node's free room before an offline pod takes some of
    /// it, and not after. 0 without online pods.
    pub fn share_between(&self, after: i64, before: i64) -> f64 {
        let total = self.at_most.last().map_or(0, |(_, n)| *n);
        if total == 0 || before <= after {
            return 0.0;
        }
        let upto = |cpu: i64| match self.at_most.partition_point(|(s, _)| *s <= cpu) {
            0 => 0,
            i => self.at_most[i - 1].1,
        };
        (upto(before) - upto(after)) as f64 / total as f64
    }

    /// What placing `pod_milli_cpu` on a node with `free` milli-CPU free takes of the room
    /// online pods fit in.
    pub fn taken(&self, free: i64, pod_milli_cpu: i64) -> RoomTaken {
        let after = free - pod_milli_cpu;
        RoomTaken { before: free, after, share: self.share_between(after, free) }
    }
}

/// A node's free CPU before and after a pod is placed, and the share of online pods that
/// fit in it before and not after (see `OnlineRoom::share_between`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoomTaken {
    pub before: i64,
    pub after: i64,
    pub share: f64,
}

/// What a gang's bound members not being deleted request and have run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GangWork {
    /// CPU they request, in milli-CPU.
    pub milli_cpu: i64,
    /// Milli-CPU-seconds they have run (each member's run time × its CPU request).
    pub run: i64,
}

#[derive(Debug, Clone, Default)]
pub struct View {
    nodes: PMap<String, Arc<NodeInfo>>,
    /// Every non-terminal pod, bound or pending, by namespace/name (watch keys); ordered,
    /// so a namespace's pods are one range.
    pods: OrdMap<String, PodRef>,
    pods_by_uid: UidIndex,
    pdbs_by_namespace: PMap<String, Arc<Vec<Pdb>>>,
    /// Per PDB ("namespace/name"): covered pods bound and not terminating, kept current
    /// on every pod event so a decision reads a budget in O(1).
    pdb_present: PMap<String, i32>,
    /// PriorityClasses and what namespaces opted in to.
    context: PodContext,
    /// Bound members per gang, as the policy's gang sources declare them, and their work.
    gang_sizes: PMap<GangRef, GangTally>,
    /// PodGroup objects of every source, by gang. Members may come before their group
    /// (or outlive it): a gang without one falls back to what its members declare.
    pod_groups: PMap<GangRef, Arc<PodGroup>>,
    /// Which declarations make a gang (the policy's, kept so reads need no policy).
    gangs: Arc<GangConfig>,
    /// The annotations decisions read: all a pod keeps of its annotations here.
    annotations_read: Arc<AnnotationsRead>,
    /// Requests held by evictable classes, per tenant (fair sharing).
    tenant_usage: PMap<String, Resources>,
    tenant_weights: Arc<BTreeMap<String, f64>>,
    /// CPU requests of the online pods bound now (classes that preempt and are never
    /// victims; DaemonSet and static pods aside: they never need room elsewhere), by size:
    /// the room an arriving online pod is likely to need.
    online_sizes: OrdMap<i64, usize>,
    /// Pending pods of the same online classes, neither nominated nor gated nor
    /// terminating, oldest first: those room left over by a preemption would place.
    waiting_online: OrdMap<(Timestamp, String), PodRef>,
    /// Jobs and their pods' failures not counted yet (`cluster::jobs`).
    jobs: Jobs,
    /// Sum of node allocatable: the denominator of shares.
    capacity: Resources,
    /// Per resource, the least any node can hold (`smallest_node`).
    smallest: Option<Arc<Node>>,
    node_count: usize,
    bound_pods: usize,
    generation: u64,
    /// Pods that left the view (deleted, ended, or gone at a re-list), by UID, with the
    /// generation they left at: kube-scheduler's cache may still hold them for a moment,
    /// and a proposed victim the view saw go means the view is ahead, not behind.
    gone: PMap<String, u64>,
    /// Per controller (`namespace/Kind/name`), when kube-scheduler last preempted one of
    /// its pods (the victim's deletion time): a pod it created since is that victim's
    /// replacement, its disruption barely over.
    preemptions: PMap<String, Timestamp>,
    /// How long deleted pods took to go, per owner and class (`cluster::stop_times`).
    stop_times: StopTimes,
    /// When the events applied next were received, milliseconds since the epoch (the
    /// watch sets it); 0 for a source without a clock (a snapshot): nothing is learned.
    clock_ms: i64,
}

/// A waiting pod's place in `View::waiting_online`: kube-scheduler's queue order among
/// equals, oldest first.
fn waiting_key(pod: &Pod) -> (Timestamp, String) {
    (pod.creation_time.unwrap_or(0), pod.uid.clone())
}

/// Pods that left the view remembered at most; past that, the older half is forgotten.
const GONE_KEPT: usize = 50_000;

/// Controllers whose last preemption is kept at most.
const PREEMPTIONS_KEPT: usize = 10_000;

fn controller_key(pod: &Pod) -> Option<String> {
    let c = pod.controller.as_ref()?;
    Some(format!("{}/{}/{}", pod.namespace, c.kind, c.name))
}

impl View {
    /// An empty view for `policy` (gang labels, tenants and classes come from it: rebuild
    /// the view when the policy changes).
    pub fn empty(policy: &Policy) -> View {
        View {
            tenant_weights: Arc::new(policy.tenants.weights.clone()),
            gangs: Arc::new(policy.gangs.clone()),
            annotations_read: Arc::new(AnnotationsRead::of(&policy.gangs)),
            ..View::default()
        }
    }

    /// Indexes `objects` for decisions under `policy`.
    pub fn build(objects: Objects, policy: &Policy) -> View {
        let mut view = View::empty(policy);
        // Priority classes first: pods without `spec.priority` are classified through them.
        for pc in objects.priority_classes {
            view.apply_priority_class(pc);
        }
        if let Some(namespaces) = objects.namespaces {
            view.watch_namespaces();
            for ns in namespaces {
                view.apply_namespace(ns);
            }
        }
        for node in objects.nodes {
            view.apply_node(node);
        }
        for pdb in objects.pdbs {
            view.apply_pdb(pdb);
        }
        for group in objects.pod_groups {
            view.apply_pod_group(group);
        }
        for job in objects.jobs {
            view.apply_job(job);
        }
        for pod in objects.pods {
            view.apply_pod(Arc::new(pod), policy);
        }
        view
    }

    /// The same objects indexed under another policy (O(cluster); pods are shared, not copied).
    pub fn rebuild(&self, policy: &Policy) -> View {
        let mut view = View::empty(policy);
        view.context = self.context.clone();
        view.pdbs_by_namespace = self.pdbs_by_namespace.clone();
        view.pod_groups = self.pod_groups.clone();
        view.jobs = self.jobs.clone();
        // Counted again as the pods are applied below.
        for info in self.nodes.values() {
            if let Some(n) = &info.node {
                view.apply_node((**n).clone());
            }
        }
        view.gone = self.gone.clone();
        view.stop_times = self.stop_times.clone();
        view.clock_ms = self.clock_ms;
        view.preemptions = self.preemptions.clone();
        for pod in self.pods.values() {
            view.apply_pod(pod.clone(), policy);
        }
        view.generation = self.generation + 1;
        view
    }

    /// The time the events applied next were received (milliseconds since the epoch): a
    /// pod deleted before that and gone with them took that long to stop.
    pub fn set_clock_ms(&mut self, ms: i64) {
        self.clock_ms = ms;
    }

    /// How long `pod` of class `class` is expected to take from a delete to gone.
    pub fn expected_stop(&self, pod: &Pod, class: &str) -> Stop {
        self.stop_times.expected(pod, class)
    }

    /// The stop times learned so far.
    pub fn stop_times(&self) -> &StopTimes {
        &self.stop_times
    }

    /// `old`, bound and started, is gone (`last`: its last state): if it was being deleted,
    /// how long that took is learned for its owner and class.
    fn note_stopped(&mut self, old: &Pod, last: &Pod, policy: &Policy) {
        if self.clock_ms <= 0 || old.node_name.is_none() || old.start_time.is_none() {
            return;
        }
        let state = if last.uid == old.uid && last.deletion_time.is_some() { last } else { old };
        let Some(at) = stop_times::deleted_at_ms(state) else { return };
        let class = policy.classify(old, self.priority_of(old));
        let class = &policy.class(class).name;
        self.stop_times.observe(stop_times::owner_key(old), stop_times::class_key(old, class), self.clock_ms - at);
    }

    /// Did the view see the pod of `uid` go (recently: the last `GONE_KEPT`)?
    pub fn saw_go(&self, uid: &str) -> bool {
        self.gone.contains_key(uid)
    }

    fn note_gone(&mut self, uid: &str) {
        if self.gone.len() >= GONE_KEPT {
            let mut at: Vec<u64> = self.gone.values().copied().collect();
            at.sort_unstable();
            let cut = at[at.len() / 2];
            self.gone.retain(|_, g| *g > cut);
        }
        self.gone.insert(uid.to_string(), self.generation);
    }

    /// What the view keeps of `pod`: the annotations decisions read (`AnnotationsRead`),
    /// and no bytes (requeue keeps a marked pod's, in a view of its own).
    fn keep(&self, mut pod: PodRef) -> PodRef {
        if let Some(annotations) = self.annotations_read.kept(&pod.annotations) {
            // In place: a pod just decoded is the watch's alone.
            Arc::make_mut(&mut pod).annotations = annotations;
        }
        if pod.last_state.is_some() {
            Arc::make_mut(&mut pod).last_state = None;
        }
        pod
    }

    /// When kube-scheduler last preempted a pod of `pod`'s controller, if the view saw it.
    pub fn last_preemption_by_controller(&self, pod: &Pod) -> Option<Timestamp> {
        self.preemptions.get(&controller_key(pod)?).copied()
    }

    /// Notes a preempted, terminating pod of a controller.
    fn note_preemption(&mut self, pod: &Pod) {
        // Checked before the key is built: this runs on every pod event.
        let (true, Some(at)) = (pod.preempted, pod.deletion_time) else { return };
        let Some(key) = controller_key(pod) else { return };
        if self.preemptions.len() >= PREEMPTIONS_KEPT {
            // The oldest half goes: only recent preemptions change a decision.
            let mut times: Vec<Timestamp> = self.preemptions.values().copied().collect();
            times.sort_unstable();
            let cut = times[times.len() / 2];
            self.preemptions.retain(|_, t| *t > cut);
        }
        let last = self.preemptions.entry(key).or_insert(at);
        *last = (*last).max(at);
    }

    // ---- changes ------------------------------------------------------------------------

    fn bump(&mut self) -> u64 {
        self.generation += 1;
        self.generation
    }

    fn node_mut(&mut self, name: &str) -> &mut NodeInfo {
        let generation = self.bump();
        let info = Arc::make_mut(self.nodes.entry(name.to_string()).or_default());
        info.generation = generation;
        info
    }

    fn drop_if_empty(&mut self, name: &str) {
        if self.nodes.get(name).is_some_and(|i| i.is_empty()) {
            self.nodes.remove(name);
        }
    }

    /// Adds or replaces a pod (matched by namespace/name). Terminal pods leave the view:
    /// kube-scheduler's cache holds only bound, non-terminal pods.
    pub fn apply_pod(&mut self, pod: PodRef, policy: &Policy) {
        let key = pod.key();
        let pod = self.keep(pod);
        self.place_pod(pod, key, policy);
    }

    fn place_pod(&mut self, pod: PodRef, key: String, policy: &Policy) {
        self.jobs.observe_pod(&pod);
        self.note_preemption(&pod);
        let old = self.pods.get(&key).cloned();
        if let Some(old) = &old {
            if self.stays_in_place(old, &pod) {
                return self.update_in_place(old, pod, key, policy);
            }
            if self.same_pod(old, &pod) {
                return self.move_slot(old, pod, key, policy);
            }
            if pod.is_terminal() {
                self.note_stopped(old, &pod, policy);
            }
            self.detach(old, policy);
        }
        if pod.is_terminal() {
            self.note_gone(&pod.uid);
        } else {
            self.attach(pod, key, policy);
        }
    }

    /// A new version of the same pod in the same place (the common MODIFIED: status,
    /// labels, annotations), whose UID entry is `old`'s.
    fn stays_in_place(&self, old: &PodRef, pod: &Pod) -> bool {
        let same_place = match (slot(old), slot(pod)) {
            (Slot::Bound(a), Slot::Bound(b)) | (Slot::Nominated(a), Slot::Nominated(b)) => a == b,
            (Slot::Pending, Slot::Pending) => true,
            _ => false,
        };
        same_place && self.same_pod(old, pod)
    }

    /// A new version of `old` (same UID, whose entry is `old`'s) that stays in the view.
    fn same_pod(&self, old: &PodRef, pod: &Pod) -> bool {
        old.uid == pod.uid && !pod.is_terminal() && self.pods_by_uid.get(&pod.uid).is_some_and(|p| Arc::ptr_eq(p, old))
    }

    /// The same pod in another place (the common binding: pending, then bound): its map
    /// entries are replaced where they are; only its node changes.
    fn move_slot(&mut self, old: &PodRef, pod: PodRef, key: String, policy: &Policy) {
        self.index(&pod, key);
        self.leave_slot(old, policy);
        self.enter_slot(pod, policy);
    }

    /// Swaps `old` for `pod` where it stands: one write per map and one node copy, instead
    /// of detach + attach (two of each, plus a remove and a sorted insert in the node).
    fn update_in_place(&mut self, old: &PodRef, pod: PodRef, key: String, policy: &Policy) {
        self.index(&pod, key);
        match slot(&pod) {
            Slot::Bound(node) => {
                let old_class = policy.classify(old, self.priority_of(old));
                self.count_bound(old, old_class, policy, -1);
                let class = policy.classify(&pod, self.priority_of(&pod));
                let counted = Counted::of(&pod, class, policy);
                self.node_mut(node).replace_pod(old, pod.clone(), counted);
                self.count_bound(&pod, class, policy, 1);
            }
            Slot::Nominated(node) => {
                if let Some(p) = self.node_mut(node).nominated.iter_mut().find(|p| Arc::ptr_eq(p, old)) {
                    *p = pod;
                }
            }
            // Its gates, deletion or condition may have changed, and its key with none.
            Slot::Pending => {
                self.leave_slot(old, policy);
                self.enter_slot(pod, policy);
            }
        }
    }

    /// Removes the pod `namespace/name` (deleted, as last seen); returns it if it was there.
    pub fn remove_pod(&mut self, key: &str, policy: &Policy) -> Option<PodRef> {
        self.remove_pod_as(key, None, policy)
    }

    /// Removes the pod `namespace/name` that the API server deleted, `last` being the
    /// object its watch event carried (kube-scheduler marks a victim before deleting it).
    pub fn remove_deleted_pod(&mut self, key: &str, last: &Pod, policy: &Policy) -> Option<PodRef> {
        self.remove_pod_as(key, Some(last), policy)
    }

    /// Removes the pod `namespace/name` that a re-list no longer finds: it went while the
    /// watch was down, and how it went is not known: no eviction is noted (a preempted pod
    /// gone while no replica watched is requeue's one window).
    pub fn remove_unseen_pod(&mut self, key: &str, policy: &Policy) -> Option<PodRef> {
        let old = self.pods.get(key).cloned()?;
        self.note_gone(&old.uid);
        self.jobs.forget_pod(&old);
        self.detach(&old, policy);
        Some(old)
    }

    fn remove_pod_as(&mut self, key: &str, last: Option<&Pod>, policy: &Policy) -> Option<PodRef> {
        let old = self.pods.get(key).cloned()?;
        if let Some(last) = last {
            self.note_preemption(last);
        }
        self.note_stopped(&old, last.unwrap_or(&old), policy);
        self.note_gone(&old.uid);
        self.jobs.forget_pod(&old);
        self.detach(&old, policy);
        Some(old)
    }

    /// Enters `pod` in the view's maps, in place of `old` (same key) if given.
    fn index(&mut self, pod: &PodRef, key: String) {
        self.pods.insert(key, pod.clone());
        self.pods_by_uid.insert(pod);
    }

    fn attach(&mut self, pod: PodRef, key: String, policy: &Policy) {
        self.index(&pod, key);
        self.enter_slot(pod, policy);
    }

    /// Puts `pod` on its node (bound or nominated).
    fn enter_slot(&mut self, pod: PodRef, policy: &Policy) {
        match slot(&pod) {
            Slot::Bound(node) => {
                let class = policy.classify(&pod, self.priority_of(&pod));
                self.node_mut(node).add_pod(pod.clone(), Counted::of(&pod, class, policy));
                self.count_bound(&pod, class, policy, 1);
            }
            Slot::Nominated(node) => self.node_mut(node).nominated.push(pod.clone()),
            Slot::Pending => {
                if self.waits_for_online_room(&pod, policy) {
                    self.waiting_online.insert(waiting_key(&pod), pod);
                }
            }
        }
    }

    fn waits_for_online_room(&self, pod: &Pod, policy: &Policy) -> bool {
        pod.scheduling_gates.is_empty()
            && pod.deletion_time.is_none()
            && !pod.is_node_agent()
            && policy.is_online(policy.classify(pod, self.priority_of(pod)))
    }

    fn detach(&mut self, pod: &PodRef, policy: &Policy) {
        let key = pod.key();
        if self.pods.get(&key).is_some_and(|p| Arc::ptr_eq(p, pod)) {
            self.pods.remove(&key);
        }
        self.pods_by_uid.remove(pod);
        self.leave_slot(pod, policy);
    }

    /// Takes `pod` off its node (bound or nominated).
    fn leave_slot(&mut self, pod: &PodRef, policy: &Policy) {
        match slot(pod) {
            Slot::Bound(node) => {
                self.node_mut(node).remove_pod(pod);
                self.drop_if_empty(node);
                let class = policy.classify(pod, self.priority_of(pod));
                self.count_bound(pod, class, policy, -1);
            }
            Slot::Nominated(node) => {
                self.node_mut(node).nominated.retain(|p| !Arc::ptr_eq(p, pod));
                self.drop_if_empty(node);
            }
            Slot::Pending => {
                self.waiting_online.remove(&waiting_key(pod));
            }
        }
    }

    /// What a bound pod of `class` adds to (`delta` 1) or takes from (-1) the view's
    /// counters: bound pods, PDB presence, gang sizes, tenant usage (only pods of evictable
    /// classes count toward their tenant's share).
    fn count_bound(&mut self, pod: &Pod, class: ClassId, policy: &Policy, delta: i32) {
        self.bound_pods = self.bound_pods.saturating_add_signed(delta as isize);
        if let Some(list) = self.pdbs_by_namespace.get(&pod.namespace).cloned() {
            for pdb in list.iter().filter(|p| counts_toward(p, pod)) {
                *self.pdb_present.entry(pdb.key()).or_default() += delta;
            }
        }
        if let Some(group) = self.gangs.gang_of(pod) {
            let tally = self.gang_sizes.entry(group.clone()).or_default();
            tally.count(pod, delta);
            if tally.members == 0 {
                self.gang_sizes.remove(&group);
            }
        }
        if policy.is_online(class) && !pod.is_node_agent() {
            let n = self.online_sizes.entry(pod.requests.milli_cpu).or_default();
            *n = n.saturating_add_signed(delta as isize);
            if *n == 0 {
                self.online_sizes.remove(&pod.requests.milli_cpu);
            }
        }
        if let Some(tenant) = policy.class(class).victim.allowed.then(|| policy.tenants.tenant_of(pod)) {
            let usage = self.tenant_usage.entry(tenant).or_default();
            if delta > 0 {
                usage.add(&pod.requests);
            } else {
                usage.sub(&pod.requests);
            }
        }
    }

    fn recount_pdb(&mut self, pdb: &Pdb) {
        let present = self.pods_in_namespace(&pdb.namespace).filter(|p| counts_toward(pdb, p)).count() as i32;
        self.pdb_present.insert(pdb.key(), present);
    }

    pub fn apply_node(&mut self, node: Node) {
        let name = node.name.clone();
        let info = self.node_mut(&name);
        let node = Arc::new(node);
        let old = info.node.replace(node.clone());
        match &old {
            Some(old) => self.capacity.sub(&old.allocatable),
            None => self.node_count += 1,
        }
        self.capacity.add(&node.allocatable);
        match old {
            // A status update leaves allocatable alone: the common case costs nothing.
            Some(old) if old.allocatable == node.allocatable && old.allocatable_pods == node.allocatable_pods => {}
            Some(_) => self.recompute_smallest(),
            None => {
                self.smallest = Some(Arc::new(match &self.smallest {
                    Some(s) => smaller_of(s, &node),
                    None => smaller_of(&node, &node),
                }))
            }
        }
    }

    /// O(nodes): only when a node shrinks, grows or goes away.
    fn recompute_smallest(&mut self) {
        let mut nodes = self.nodes.values().filter_map(|i| i.node.as_deref());
        self.smallest =
            nodes.next().map(|first| Arc::new(nodes.fold(smaller_of(first, first), |s, n| smaller_of(&s, n))));
    }

    /// Forgets the Node object; its pods stay until they are deleted, as in kube's cache.
    pub fn remove_node(&mut self, name: &str) -> bool {
        if self.nodes.get(name).is_none_or(|i| i.node.is_none()) {
            return false;
        }
        let old = self.node_mut(name).node.take();
        if let Some(old) = old {
            self.capacity.sub(&old.allocatable);
            self.node_count -= 1;
        }
        self.drop_if_empty(name);
        self.recompute_smallest();
        true
    }

    /// O(pods in the namespace) when the PDB is new or its selector changed (rare); a
    /// status update costs O(1).
    pub fn apply_pdb(&mut self, pdb: Pdb) {
        self.bump();
        let list = Arc::make_mut(self.pdbs_by_namespace.entry(pdb.namespace.clone()).or_default());
        let recount = match list.iter_mut().find(|p| p.name == pdb.name) {
            Some(slot) => {
                let changed = slot.selector != pdb.selector;
                *slot = pdb.clone();
                changed
            }
            None => {
                list.push(pdb.clone());
                true
            }
        };
        if recount {
            self.recount_pdb(&pdb);
        }
    }

    pub fn remove_pdb(&mut self, namespace: &str, name: &str) -> bool {
        self.bump();
        let Some(list) = self.pdbs_by_namespace.get_mut(namespace) else { return false };
        let list = Arc::make_mut(list);
        let before = list.len();
        list.retain(|p| p.name != name);
        let removed = list.len() != before;
        if list.is_empty() {
            self.pdbs_by_namespace.remove(namespace);
        }
        self.pdb_present.remove(&format!("{namespace}/{name}"));
        removed
    }

    pub fn apply_pod_group(&mut self, group: PodGroup) {
        self.bump();
        self.pod_groups.insert(group.gang(), Arc::new(group));
    }

    /// Forgets a PodGroup; its members stay a gang, judged by what they declare.
    pub fn remove_pod_group(&mut self, source: GangSource, namespace: &str, name: &str) -> bool {
        self.bump();
        self.pod_groups.remove(&GangRef { source, namespace: namespace.into(), name: name.into() }).is_some()
    }

    /// PodGroups of `source` in the view.
    pub fn pod_groups(&self, source: GangSource) -> impl Iterator<Item = &PodGroup> + '_ {
        self.pod_groups.values().filter(move |g| g.source == source).map(|g| &**g)
    }

    pub fn apply_job(&mut self, job: Job) {
        self.bump();
        self.jobs.apply(job);
    }

    pub fn remove_job(&mut self, namespace: &str, name: &str) -> bool {
        self.bump();
        self.jobs.remove(namespace, name)
    }

    /// Jobs and the failures of their pods not counted yet.
    pub fn jobs(&self) -> &Jobs {
        &self.jobs
    }

    /// From now on only namespaces seen (and labelled to opt in) take copies: the view
    /// follows a source that has namespaces.
    pub fn watch_namespaces(&mut self) {
        self.context.watch_namespaces();
    }

    pub fn apply_namespace(&mut self, ns: Namespace) {
        self.bump();
        self.context.apply_namespace(ns);
    }

    pub fn remove_namespace(&mut self, name: &str) -> bool {
        self.bump();
        self.context.remove_namespace(name)
    }

    pub fn namespace_names(&self) -> impl Iterator<Item = &str> {
        self.context.namespace_names()
    }

    /// What `namespace` opted in to (`NamespaceOptIn::WITHOUT_NAMESPACES` where the source
    /// has no namespaces; nothing for one not seen).
    pub fn namespace_opt_in(&self, namespace: &str) -> NamespaceOptIn {
        self.context.namespace_opt_in(namespace)
    }

    pub fn apply_priority_class(&mut self, pc: PriorityClass) {
        self.bump();
        self.context.apply_priority_class(pc);
    }

    pub fn remove_priority_class(&mut self, name: &str) -> bool {
        self.bump();
        self.context.remove_priority_class(name)
    }

    // ---- reads --------------------------------------------------------------------------

    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.get(name)?.node.as_deref()
    }

    /// A node no bigger, in any resource, than the smallest node of the view (nameless,
    /// unlabelled): a pod that fits its allocatable fits every node's. `None` without nodes.
    pub fn smallest_node(&self) -> Option<&Node> {
        self.smallest.as_deref()
    }

    /// A node's state (Node object, aggregates), if the view knows anything about it.
    pub fn node_info(&self, name: &str) -> Option<&NodeInfo> {
        self.nodes.get(name).map(|i| &**i)
    }

    /// The generation of the last change to `name`'s state (0: unknown node).
    pub fn node_generation(&self, name: &str) -> u64 {
        self.nodes.get(name).map_or(0, |i| i.generation)
    }

    /// The generation of the last change to anything in the view.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The bound, non-terminal pods on `node`, in no particular order.
    pub fn pods_on(&self, node: &str) -> &[PodRef] {
        self.nodes.get(node).map(|i| i.pods.as_slice()).unwrap_or(&[])
    }

    /// Pending pods nominated to `node`: kube-scheduler reserves their room there.
    pub fn nominated_on(&self, node: &str) -> &[PodRef] {
        self.nodes.get(node).map(|i| i.nominated.as_slice()).unwrap_or(&[])
    }

    pub fn pod_by_uid(&self, uid: &str) -> Option<&PodRef> {
        self.pods_by_uid.get(uid)
    }

    /// A pod by `namespace/name`, bound or pending.
    pub fn pod(&self, key: &str) -> Option<&PodRef> {
        self.pods.get(key)
    }

    /// Every non-terminal pod, bound or pending.
    pub fn all_pods(&self) -> impl Iterator<Item = &PodRef> {
        self.pods.values()
    }

    /// Every non-terminal pod of `namespace`, bound or pending.
    pub fn pods_in_namespace<'a>(&'a self, namespace: &str) -> impl Iterator<Item = &'a PodRef> + 'a {
        // "ns/" up to "ns0": '0' follows '/' in ASCII.
        self.pods.range(format!("{namespace}/")..format!("{namespace}0")).map(|(_, p)| p)
    }

    /// Disruptions `pdb` allows now: its status, less covered pods that have gone since the
    /// disruption controller counted them (kube-scheduler deletes victims; the controller
    /// notices a moment later, and another preemption may come in between).
    pub fn disruptions_allowed(&self, pdb: &Pdb) -> i32 {
        let Some(counted) = pdb.current_healthy else { return pdb.disruptions_allowed };
        let present = self.pdb_present.get(&pdb.key()).copied().unwrap_or(0);
        let gone = (counted - present).max(0);
        (pdb.disruptions_allowed - gone).max(0)
    }

    /// Whether `pod` counts healthy in `pdb`'s status: bound, not terminating, ready and
    /// covered.
    pub fn counts_toward_pdb(&self, pdb: &Pdb, pod: &Pod) -> bool {
        counts_toward(pdb, pod)
    }

    /// Every node the view has the Node object of, with its state, in no particular order.
    pub fn nodes(&self) -> impl Iterator<Item = (&Node, &NodeInfo)> {
        self.nodes.values().filter_map(|i| Some((i.node.as_deref()?, &**i)))
    }

    pub fn node_names(&self) -> impl Iterator<Item = &str> {
        self.nodes.iter().filter(|(_, i)| i.node.is_some()).map(|(n, _)| n.as_str())
    }

    pub fn pdb_keys(&self) -> impl Iterator<Item = String> + '_ {
        self.pdbs_by_namespace.values().flat_map(|l| l.iter().map(Pdb::key))
    }

    pub fn priority_class_names(&self) -> impl Iterator<Item = &str> {
        self.context.priority_class_names()
    }

    /// PDBs whose selector covers `pod`.
    pub fn pdbs_covering<'a>(&'a self, pod: &'a Pod) -> impl Iterator<Item = &'a Pdb> + 'a {
        self.pdbs_by_namespace.get(&pod.namespace).into_iter().flat_map(|l| l.iter()).filter(move |p| p.covers(pod))
    }

    /// The pod's priority: `spec.priority` as admitted, else its PriorityClass, else 0.
    pub fn priority_of(&self, pod: &Pod) -> i32 {
        self.context.priority_of(pod)
    }

    /// The pod's gang, as the policy's gang sources declare it.
    pub fn gang_of(&self, pod: &Pod) -> Option<GangRef> {
        self.gangs.gang_of(pod)
    }

    /// Bound members of `gang`.
    pub fn gang_size(&self, gang: &GangRef) -> usize {
        self.gang_sizes.get(gang).map_or(0, |t| t.members)
    }

    /// Bound members of `gang` being deleted.
    pub fn gang_leaving(&self, gang: &GangRef) -> usize {
        self.gang_sizes.get(gang).map_or(0, |t| t.leaving)
    }

    /// What `gang`'s bound members not being deleted have run by `now`, and the CPU they
    /// request: the work and the restarts breaking it throws away (an all-or-nothing group
    /// cannot go on once a member is gone).
    pub fn gang_work(&self, gang: &GangRef, now: Timestamp) -> GangWork {
        self.gang_sizes.get(gang).map_or(GangWork::default(), |t| t.work(now))
    }

    /// `gang` as decisions see it; `member` is one of its pods (what it declares counts
    /// where the gang has no PodGroup, or its PodGroup sets no minimum).
    ///
    /// Without a PodGroup (not created yet, deleted while its pods run, or a source that
    /// has none), the gang needs the minimum its members declare, else all its bound
    /// members; it may be disrupted one member at a time and ranks by its pods' priority.
    pub fn gang(&self, gang: &GangRef, member: &Pod) -> GangInfo {
        let size = self.gang_size(gang);
        let object = gang.source.has_object().then(|| self.pod_groups.get(gang)).flatten();
        let declared = || self.gangs.declared_minimum(gang.source, member);
        let (min, min_from) = match (object, object.and_then(|g| g.min_count)) {
            (_, Some(n)) => (n, GangInfo::minimum_label(gang.source, n)),
            // A native PodGroup with the basic policy is a group, not a gang.
            (Some(_), None) if gang.source == GangSource::Native => {
                (0, "basic scheduling policy: no minimum".to_string())
            }
            _ => declared().unwrap_or_else(|| (size, format!("no minimum declared: all {size} members"))),
        };
        let min_from = match object {
            None if gang.source.has_object() => format!("{min_from}; PodGroup not in the view"),
            _ => min_from,
        };
        GangInfo {
            gang: gang.clone(),
            size,
            leaving: self.gang_leaving(gang),
            min,
            min_from,
            disruption: object.map_or(DisruptionMode::Single, |g| g.disruption),
            priority: object
                .and_then(|g| g.priority.or_else(|| self.context.priority_class(g.priority_class_name.as_ref()?))),
        }
    }

    /// The CPU requests of the online pods bound now, read once per request.
    pub fn online_room(&self) -> OnlineRoom {
        let mut at_most = Vec::with_capacity(self.online_sizes.len());
        let mut total = 0;
        for (size, n) in &self.online_sizes {
            total += n;
            at_most.push((*size, total));
        }
        OnlineRoom { at_most }
    }

    /// Pending pods of online classes waiting for room (neither nominated nor gated nor
    /// terminating), oldest first.
    pub fn waiting_online(&self) -> impl Iterator<Item = &Pod> {
        self.waiting_online.values().map(|p| &**p)
    }

    /// Weighted dominant share of the cluster that `tenant`'s evictable pods hold.
    pub fn tenant_share(&self, tenant: &str) -> f64 {
        let weight = crate::policy::weight_in(&self.tenant_weights, tenant);
        self.tenant_usage.get(tenant).map_or(0.0, |u| dominant_share(u, &self.capacity) / weight)
    }

    /// The weighted share `requests` adds to `tenant` (what one pod moves the needle).
    pub fn share_of(&self, requests: &Resources, weight: f64) -> f64 {
        dominant_share(requests, &self.capacity) / weight
    }

    pub fn node_count(&self) -> usize {
        self.node_count
    }

    /// Bound, non-terminal pods.
    pub fn pod_count(&self) -> usize {
        self.bound_pods
    }
}

/// A covered pod the disruption controller counts healthy: bound, not terminating, ready.
/// A pod recreated a moment ago is not healthy until it is ready, whatever the PDB's
/// status still says.
fn counts_toward(pdb: &Pdb, pod: &Pod) -> bool {
    pod.node_name.is_some() && pod.deletion_time.is_none() && !pod.unready && pdb.covers(pod)
}

/// Kueue-style dominant resource share: the largest fraction of any cluster resource used.
fn dominant_share(used: &Resources, capacity: &Resources) -> f64 {
    let frac = |u: i64, c: i64| if c > 0 { u as f64 / c as f64 } else { 0.0 };
    let mut share = frac(used.milli_cpu, capacity.milli_cpu).max(frac(used.memory, capacity.memory));
    for (name, u) in &used.scalar {
        share = share.max(frac(*u, capacity.scalar(name)));
    }
    share
}

#[cfg(test)]
mod tests;

/// Per resource, the smaller allocatable of two nodes (a resource one of them lacks: 0).
fn smaller_of(a: &Node, b: &Node) -> Node {
    let (x, y) = (&a.allocatable, &b.allocatable);
    let scalar = x.scalar.iter().filter_map(|(k, v)| Some((k.clone(), (*v).min(*y.scalar.get(k)?)))).collect();
    Node {
        allocatable: Resources {
            milli_cpu: x.milli_cpu.min(y.milli_cpu),
            memory: x.memory.min(y.memory),
            ephemeral_storage: x.ephemeral_storage.min(y.ephemeral_storage),
            scalar,
        },
        allocatable_pods: a.allocatable_pods.min(b.allocatable_pods),
        ..Node::default()
    }
}
