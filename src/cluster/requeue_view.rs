//! The requeue controller's view: what it reads to copy preempted bare pods and settle
//! their copies, kept current one pod at a time, in its own process. Decisions never
//! read it, and the extender never builds it.
//!
//! It holds every non-terminal pod (by key and UID: the names a copy may take, and the
//! originals of copies), the pods nominated to each node (taken for an eviction's
//! preemptors), the copies in the cluster, the evictions recorded (`evictions`) and the
//! bytes of the marked pods it may copy (`kept`), and the PriorityClasses and Namespaces
//! that say which evictions it copies. Nothing of nodes, budgets or shares.

use std::sync::Arc;

use imbl::OrdMap;

use super::evictions::{Eviction, Evictions, NotRecorded};
use super::kept::KeptStates;
use super::pod_context::PodContext;
use super::uid_index::UidIndex;
use super::view::Objects;
use super::PMap;
use crate::model::marks::{self, GATE};
use crate::model::{GangRef, Namespace, NamespaceOptIn, Pod, PodRef, PriorityClass};
use crate::policy::{requeue_rule, AnnotationsRead, Circumstances, GangConfig, NotRequeued, Policy};

#[derive(Debug, Clone, Default)]
pub struct RequeueView {
    /// Every non-terminal pod, bound or pending, by namespace/name.
    pods: OrdMap<String, PodRef>,
    pods_by_uid: UidIndex,
    /// Pending pods by the node of their `status.nominatedNodeName`.
    nominated: PMap<String, Vec<PodRef>>,
    /// Requeue replacements (gated or released), by namespace/name: what requeue reconciles.
    replacements: PMap<String, PodRef>,
    /// PriorityClasses and what namespaces opted in to.
    context: PodContext,
    /// Which declarations make a gang (the policy's, kept so reads need no policy).
    gangs: Arc<GangConfig>,
    /// The annotations a pod keeps here, as in the decisions' view.
    annotations_read: Arc<AnnotationsRead>,
    /// Preempted bare pods going, until their copy is released: what requeue copies, and
    /// the only originals whose copies it releases.
    evictions: Evictions,
    /// The bytes of marked bare pods requeue may copy, by UID, bounded.
    kept: KeptStates,
    /// Counts changes requeue reacts to (copies, pods marked or being deleted), so its
    /// controller skips a pass where no such change came.
    changes: u64,
    /// Counts pods seen newly marked by a preemption: the requeue controller makes way for
    /// kube-scheduler's writes while they keep coming.
    preemptions_seen: u64,
}

impl RequeueView {
    /// An empty view for `policy` (gang labels and classes come from it: rebuild the view
    /// when the policy changes).
    pub fn empty(policy: &Policy) -> RequeueView {
        RequeueView {
            gangs: Arc::new(policy.gangs.clone()),
            annotations_read: Arc::new(AnnotationsRead::of(&policy.gangs)),
            ..RequeueView::default()
        }
    }

    /// Indexes what requeue reads of `objects` under `policy`.
    pub fn build(objects: Objects, policy: &Policy) -> RequeueView {
        let mut view = RequeueView::empty(policy);
        // Priority classes first: pods without `spec.priority` are classified through them.
        view.context = PodContext::of(objects.priority_classes, objects.namespaces);
        for pod in objects.pods {
            view.apply_pod(Arc::new(pod), policy);
        }
        view
    }

    /// The same objects indexed under another policy (pods are shared, not copied).
    pub fn rebuild(&self, policy: &Policy) -> RequeueView {
        let mut view = RequeueView::empty(policy);
        view.context = self.context.clone();
        view.evictions = self.evictions.clone();
        view.changes = self.changes + 1;
        view.preemptions_seen = self.preemptions_seen;
        for pod in self.pods.values() {
            view.apply_pod(pod.clone(), policy);
        }
        // The pods carry their bytes no more: they are kept as they were.
        view.kept = self.kept.clone();
        view
    }

    // ---- changes ------------------------------------------------------------------------

    /// Adds or replaces a pod (matched by namespace/name). Terminal pods leave the view.
    pub fn apply_pod(&mut self, pod: PodRef, policy: &Policy) {
        let key = pod.key();
        let pod = self.keep(pod, policy);
        self.note_change(&pod);
        if pod.preempted && !self.pods.get(&key).is_some_and(|o| o.preempted) {
            self.preemptions_seen += 1;
        }
        if pod.preempted || pod.evicted {
            self.observe_eviction(&pod, false, policy);
        }
        if let Some(old) = self.pods.get(&key).cloned() {
            if self.same_pod(&old, &pod) {
                self.index(&pod, key, Some(&old));
                self.leave_slot(&old);
                self.enter_slot(&pod);
                return;
            }
            self.detach(&old);
        }
        match pod.is_terminal() {
            true => self.forget_state_unless_recorded(&pod.uid),
            false => {
                self.index(&pod, key, None);
                self.enter_slot(&pod);
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
    /// gone while no replica watched is requeue's one window). (No policy is needed: it is
    /// taken as the decisions' view takes it, so that one writer serves both.)
    pub fn remove_unseen_pod(&mut self, key: &str, _policy: &Policy) -> Option<PodRef> {
        let old = self.pods.get(key).cloned()?;
        self.note_change(&old);
        self.detach(&old);
        self.forget_state_unless_recorded(&old.uid);
        Some(old)
    }

    fn remove_pod_as(&mut self, key: &str, last: Option<&Pod>, policy: &Policy) -> Option<PodRef> {
        let old = self.pods.get(key).cloned()?;
        if let Some(last) = last {
            self.note_change(last);
        }
        self.note_change(&old);
        // The event's state if it is the same marked pod's (its bytes the latest), else the
        // view's last.
        let gone = match last {
            Some(last) if last.uid == old.uid && (last.preempted || last.evicted) && last.spec_digest.is_some() => {
                self.keep(Arc::new(last.clone()), policy)
            }
            _ => old.clone(),
        };
        if gone.preempted || gone.evicted {
            self.observe_eviction(&gone, true, policy);
        }
        self.detach(&old);
        self.forget_state_unless_recorded(&old.uid);
        Some(old)
    }

    /// From now on only namespaces seen (and labelled to opt in) take copies: the view
    /// follows a source that has namespaces.
    pub fn watch_namespaces(&mut self) {
        self.context.watch_namespaces();
    }

    pub fn apply_namespace(&mut self, ns: Namespace) {
        // An opt-in that changes may let an eviction be copied, or no longer.
        self.changes += 1;
        self.context.apply_namespace(ns);
    }

    pub fn remove_namespace(&mut self, name: &str) -> bool {
        self.context.remove_namespace(name)
    }

    pub fn apply_priority_class(&mut self, pc: PriorityClass) {
        self.context.apply_priority_class(pc);
    }

    pub fn remove_priority_class(&mut self, name: &str) -> bool {
        self.context.remove_priority_class(name)
    }

    /// What the view keeps of `pod`: the annotations decisions read (`AnnotationsRead`),
    /// and no bytes. The bytes a marked bare pod's state carries move into `kept` if
    /// requeue may copy it; else any it kept are forgotten. (Kept apart, so that the bound
    /// can drop them without touching the pod, and an eviction's record holds none.)
    fn keep(&mut self, mut pod: PodRef, policy: &Policy) -> PodRef {
        if let Some(annotations) = self.annotations_read.kept(&pod.annotations) {
            // In place: a pod just decoded is the watch's alone.
            Arc::make_mut(&mut pod).annotations = annotations;
        }
        if pod.last_state.is_none() {
            // Its mark is gone, or it is too large to keep.
            if !self.kept.is_empty() {
                self.kept.forget(&pod.uid);
            }
            return pod;
        }
        let mut pod = Arc::unwrap_or_clone(pod);
        let bytes = pod.last_state.take();
        // Not once its copy is stored: the original's last events (its containers
        // stopping) would keep them until its copy's release.
        let copied = self.evictions.get(&pod.uid).is_some_and(|e| e.copied);
        let wanted = self.requeues(&pod, policy)
            && self.requeue_verdict(&pod, policy).is_ok()
            && !copied
            && !self.evictions.is_finished(&pod.uid);
        match bytes {
            Some(bytes) if wanted => {
                self.kept.keep(&pod.uid, bytes);
            }
            _ => self.kept.forget(&pod.uid),
        }
        Arc::new(pod)
    }

    /// Is `pod`'s eviction requeue's, marked as it is: its class brings such a mark back,
    /// and requeue would copy it or must say why it cannot (`requeue_rule`)?
    fn requeues(&self, pod: &Pod, policy: &Policy) -> bool {
        let class = policy.class(policy.classify(pod, self.priority_of(pod)));
        class.requeue.brings_back(pod)
            && match self.requeue_verdict(pod, policy) {
                Ok(()) => true,
                Err(not) => not.cannot().is_some(),
            }
    }

    fn note_change(&mut self, pod: &Pod) {
        if pod.preempted || pod.evicted || pod.deletion_time.is_some() || marks::is_replacement(pod) {
            self.changes += 1;
        }
    }

    /// Records `pod`'s eviction where it is one (`gone`: it left the watch), and forgets
    /// the bytes of records cut to stay within their bound.
    fn observe_eviction(&mut self, pod: &PodRef, gone: bool, policy: &Policy) {
        let requeues = self.requeues(pod, policy);
        let nominated = pod.node_name.as_deref().map(|n| self.nominated_on(n).to_vec()).unwrap_or_default();
        let cut = match gone {
            false => self.evictions.observe(pod, requeues, &nominated),
            true => self.evictions.observe_gone(pod, requeues, &nominated),
        };
        for uid in cut.iter().filter(|uid| self.pods_by_uid.get(uid).is_none()) {
            self.kept.forget(uid);
        }
    }

    /// `uid` has left the view: its bytes go unless its eviction is recorded.
    fn forget_state_unless_recorded(&mut self, uid: &str) {
        if !self.kept.is_empty() && self.evictions.get(uid).is_none() {
            self.kept.forget(uid);
        }
    }

    /// A copy came, changed or went: the eviction it is the recorded copy of is copied
    /// (gated), or done with (released, being deleted, gone), and its bytes are needed no
    /// more.
    fn note_copy(&mut self, copy: &Pod, gone: bool) {
        let Ok(e) = self.evictions.of_copy(copy) else { return };
        let from = e.pod.uid.clone();
        let waits = !gone && copy.deletion_time.is_none() && copy.scheduling_gates.iter().any(|g| g == GATE);
        match waits {
            true => self.evictions.copy_seen(&from),
            false => {
                self.evictions.finish(&from);
            }
        }
        self.kept.forget(&from);
    }

    /// A new version of `old` (same UID, whose entry is `old`'s) that stays in the view.
    fn same_pod(&self, old: &PodRef, pod: &Pod) -> bool {
        old.uid == pod.uid && !pod.is_terminal() && self.pods_by_uid.get(&pod.uid).is_some_and(|p| Arc::ptr_eq(p, old))
    }

    /// Enters `pod` in the view's maps, in place of `old` (same key) if given.
    fn index(&mut self, pod: &PodRef, key: String, old: Option<&PodRef>) {
        if marks::is_replacement(pod) {
            self.note_copy(pod, false);
            self.replacements.insert(key.clone(), pod.clone());
        } else if old.is_some_and(|o| marks::is_replacement(o)) {
            self.replacements.remove(&key);
        }
        self.pods.insert(key, pod.clone());
        self.pods_by_uid.insert(pod);
    }

    fn detach(&mut self, pod: &PodRef) {
        let key = pod.key();
        if self.pods.get(&key).is_some_and(|p| Arc::ptr_eq(p, pod)) {
            self.pods.remove(&key);
            if self.replacements.remove(&key).is_some() {
                self.note_copy(pod, true);
            }
        }
        self.pods_by_uid.remove(pod);
        self.leave_slot(pod);
    }

    /// A pending pod nominated to a node joins that node's nominated pods.
    fn enter_slot(&mut self, pod: &PodRef) {
        if let (None, Some(node)) = (&pod.node_name, &pod.nominated_node_name) {
            self.nominated.entry(node.clone()).or_default().push(pod.clone());
        }
    }

    fn leave_slot(&mut self, pod: &PodRef) {
        let (None, Some(node)) = (&pod.node_name, &pod.nominated_node_name) else { return };
        if let Some(on) = self.nominated.get_mut(node) {
            on.retain(|p| !Arc::ptr_eq(p, pod));
            if on.is_empty() {
                self.nominated.remove(node);
            }
        }
    }

    // ---- reads --------------------------------------------------------------------------

    /// A pod by `namespace/name`, bound or pending.
    pub fn pod(&self, key: &str) -> Option<&PodRef> {
        self.pods.get(key)
    }

    pub fn pod_by_uid(&self, uid: &str) -> Option<&PodRef> {
        self.pods_by_uid.get(uid)
    }

    /// Every non-terminal pod, bound or pending.
    pub fn all_pods(&self) -> impl Iterator<Item = &PodRef> {
        self.pods.values()
    }

    /// Non-terminal pods, bound or pending.
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    /// Pending pods nominated to `node`.
    pub fn nominated_on(&self, node: &str) -> &[PodRef] {
        self.nominated.get(node).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Requeue replacements still in the cluster, gated or released (unordered).
    pub fn replacements(&self) -> impl Iterator<Item = &PodRef> {
        self.replacements.values()
    }

    pub fn namespace_names(&self) -> impl Iterator<Item = &str> {
        self.context.namespace_names()
    }

    pub fn priority_class_names(&self) -> impl Iterator<Item = &str> {
        self.context.priority_class_names()
    }

    /// The pod's priority: `spec.priority` as admitted, else its PriorityClass, else 0.
    pub fn priority_of(&self, pod: &Pod) -> i32 {
        self.context.priority_of(pod)
    }

    /// What `namespace` opted in to.
    pub fn namespace_opt_in(&self, namespace: &str) -> NamespaceOptIn {
        self.context.namespace_opt_in(namespace)
    }

    /// The pod's gang, as the policy's gang sources declare it.
    pub fn gang_of(&self, pod: &Pod) -> Option<GangRef> {
        self.gangs.gang_of(pod)
    }

    /// Does requeue bring `pod` back, as this view knows its namespace (`requeue_rule`;
    /// whether copies can be stored now is the controller's to know, taken as yes)?
    pub fn requeue_verdict(&self, pod: &Pod, policy: &Policy) -> Result<(), NotRequeued> {
        let class = policy.class(policy.classify(pod, self.priority_of(pod)));
        let at = Circumstances { requeue_available: true, namespace: self.namespace_opt_in(&pod.namespace) };
        requeue_rule(pod, class, at)
    }

    /// Changes requeue reacts to, counted.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// Pods seen newly marked by a preemption, counted.
    pub fn preemptions_seen(&self) -> u64 {
        self.preemptions_seen
    }

    /// Preempted bare pods going, recorded until their copy is released.
    pub fn evictions(&self) -> &Evictions {
        &self.evictions
    }

    /// Is `copy` the copy this controller builds of an eviction it recorded? The record if
    /// so, else why not.
    pub fn recorded_copy(&self, copy: &Pod) -> Result<&Eviction, NotRecorded> {
        self.evictions.of_copy(copy)
    }

    /// The JSON of the marked bare pod `uid`, if it is kept (`cluster::kept`).
    pub fn last_state(&self, uid: &str) -> Option<&Arc<str>> {
        self.kept.get(uid)
    }

    /// The bytes kept for requeue.
    pub fn kept_states(&self) -> &KeptStates {
        &self.kept
    }
}

#[cfg(test)]
mod tests;
