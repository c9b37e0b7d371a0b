//! What requeue must do now, from the cluster view alone: pure, so a restarted or second
//! replica reaches the same conclusions from the same view (reconcile, not remember).
//!
//! - **Copy** every preempted bare pod of a requeue class that is going (`RequeueView::evictions`),
//!   whoever evicted it: a gated copy built from its last state, under a name derived from
//!   its UID (a second create is a no-op); the next such name where a pod that is not its
//!   copy holds one.
//! - **Release** a gated copy once its original is gone; gang members together, once no
//!   original of the gang is still going. An original still terminating `stuck_after`
//!   seconds past its deletionTimestamp (its node gone, say) holds its copy no longer: the
//!   copy is released as the ReplicaSet and Job controllers replace terminating pods. Only
//!   a copy of an eviction this controller recorded, as it builds it, is ever released
//!   (`RequeueView::recorded_copy`): whoever else can create a gated "copy" cannot have the
//!   extender run it.
//! - **Delete** a gated copy whose original is not being deleted: an earlier release stored
//!   it before an eviction that never came, or someone else made it; and a gated copy not
//!   recorded, once `unrecorded_after` old (said at once).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::cluster::{Eviction, RequeueView};
use crate::model::{marks, GangRef, Pod, Timestamp};
use crate::policy::{CannotRequeue, NotRequeued, Policy};

use crate::model::marks::{replacement_names, ATTEMPT, FROM_POD, FROM_UID, GATE};
use crate::model::RequeueIntent;

/// Seconds past an original's deletionTimestamp after which its copy is released anyway.
pub const STUCK_AFTER: i64 = 120;

/// Seconds a gated copy this controller did not record stays before it is deleted. Longer
/// than any recorded copy stays gated (its original's `STUCK_AFTER`, plus back-offs of at
/// most 30 s and a 15 s pause for kube-scheduler's writes), so that a replica that started
/// without the record of a copy the other replica recorded never deletes it first: the
/// other releases it well before. Short enough that a forged copy does not hold its
/// namespace's quota for long.
pub const UNRECORDED_AFTER: i64 = 600;

/// How long copies wait, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Past an original's deletionTimestamp, its copy is released anyway.
    pub stuck_after: i64,
    /// A gated copy not recorded is deleted once this old.
    pub unrecorded_after: i64,
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds { stuck_after: STUCK_AFTER, unrecorded_after: UNRECORDED_AFTER }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Store the gated copy of a preempted bare pod.
    Copy(Copy),
    /// Remove our gate so kube-scheduler schedules the copy.
    Release(Release),
    /// Delete a gated copy that must not run.
    Delete { namespace: String, name: String, uid: String, reason: String },
    /// A gated copy this controller did not record, or not as it builds it: never
    /// released; said, and deleted once old enough.
    Unrecorded(Unrecorded),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unrecorded {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The `reason` label of `coloc_requeue_unrecorded_copies_total`.
    pub reason: &'static str,
    pub why: String,
    /// It is `unrecorded_after` old: delete it now.
    pub delete: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copy {
    pub intent: RequeueIntent,
    /// The names to try, in order, `intent.replacement` first: those of its names that no
    /// pod held in the view (one that is not its copy may have taken one since).
    pub names: Vec<String>,
    /// The original's last state, as the API server sent it; `None` where it was not kept
    /// (`cluster::kept`): the edge reads it from the API server, while it still terminates.
    pub source: Option<Arc<str>>,
    /// Only the pod's leaving the watch was seen, not its deletion: a delete with grace 0
    /// or a pod that ended on its own look alike there. Copy only if the API server no
    /// longer has it, or has it being deleted.
    pub confirm_deleted: bool,
    /// Its deletionTimestamp (or when it was last seen): a copy refused for good is given up
    /// only once the original has had time to go (a terminating pod still counts against
    /// the namespace's quota).
    pub since: Timestamp,
    /// Its count did not go up: only pods of its own namespace were nominated to its node.
    pub self_inflicted: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The gates as the view saw them: the patch tests them, so a concurrent change (the
    /// other replica released it already) makes it a no-op.
    pub gates: Vec<String>,
    pub from_uid: String,
    pub from_pod: String,
    pub attempt: String,
    /// The original is gone from the view: the edge asks the API server first (a pod that
    /// succeeded on its own leaves the view as a deleted one does, and its copy must go).
    pub confirm_gone: bool,
    /// Why it is released while its original is still there, if it is.
    pub stuck: Option<String>,
}

impl Release {
    /// The release of copy `r`, from its own annotations.
    pub fn of(r: &Pod) -> Release {
        let annotation = |k: &str| r.annotations.get(k).map(str::to_owned).unwrap_or_default();
        Release {
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            uid: r.uid.clone(),
            gates: r.scheduling_gates.clone(),
            from_uid: annotation(FROM_UID),
            from_pod: annotation(FROM_POD),
            attempt: annotation(ATTEMPT),
            confirm_gone: false,
            stuck: None,
        }
    }
}

/// What to do now. `copies`: this replica makes copies (`serve --requeue`); without it,
/// copies an earlier run left are still released or deleted.
pub fn reconcile(view: &RequeueView, policy: &Policy, now: Timestamp, copies: bool, bounds: Bounds) -> Vec<Action> {
    let held = gangs_held_back(view, policy, now, bounds.stuck_after);
    let mut actions: Vec<Action> = Vec::new();
    if copies {
        actions.extend(view.evictions().iter().filter_map(|e| copy(view, policy, e)));
    }
    actions.extend(view.replacements().filter_map(|r| settle(view, r, now, bounds, &held)));
    actions.sort_by(|a, b| key(a).cmp(&key(b)));
    actions
}

fn key(a: &Action) -> (u8, &str, &str) {
    match a {
        Action::Copy(c) => (0, &c.intent.namespace, &c.intent.name),
        Action::Release(r) => (1, &r.namespace, &r.name),
        Action::Delete { namespace, name, .. } => (2, namespace, name),
        Action::Unrecorded(u) => (3, &u.namespace, &u.name),
    }
}

/// Where the copy of `pod` stands in the view.
#[derive(Debug, PartialEq, Eq)]
enum Names {
    /// A pod under one of its names names `pod` as its original: stored.
    Stored,
    /// Its names no pod holds, in order.
    Free(Vec<String>),
    /// Every one of its names is held by a pod that is not its copy.
    Taken(Vec<String>),
}

fn names_in_view(view: &RequeueView, pod: &Pod) -> Names {
    let names = replacement_names(pod);
    let held = |name: &String| view.pod(&format!("{}/{name}", pod.namespace));
    if names.iter().filter_map(held).any(|p| p.annotations.get(FROM_UID) == Some(pod.uid.as_str())) {
        return Names::Stored;
    }
    let free: Vec<String> = names.iter().filter(|n| held(n).is_none()).cloned().collect();
    match free.is_empty() {
        true => Names::Taken(names),
        false => Names::Free(free),
    }
}

/// Evictions that are the pod's last word: why a pod is not copied is for the edge to say
/// (`uncopied`), once.
fn copy(view: &RequeueView, policy: &Policy, e: &Eviction) -> Option<Action> {
    let pod = &e.pod;
    if view.requeue_verdict(pod, policy).is_err() {
        return None;
    }
    let Names::Free(names) = names_in_view(view, pod) else {
        return None; // stored already, or every name taken (`uncopied` says so)
    };
    let node = pod.node_name.as_deref().unwrap_or_default();
    let intent =
        RequeueIntent { replacement: names[0].clone(), attempt: e.attempt, ..RequeueIntent::for_victim(pod, node, "") };
    Some(Action::Copy(Copy {
        intent,
        names,
        source: view.last_state(&pod.uid).cloned(),
        confirm_deleted: !e.deletion_seen,
        since: e.since,
        self_inflicted: e.self_inflicted,
    }))
}

/// Why a pod kube-scheduler preempted is not copied, if the policy says so: for the
/// operator (an Event, a metric labelled by the first), since such a pod is gone for good.
/// The reasons are `requeue_rule`'s (`CannotRequeue::code`), and `name_taken`.
pub fn uncopied(view: &RequeueView, policy: &Policy, e: &Eviction) -> Option<(&'static str, String)> {
    let pod = &e.pod;
    match view.requeue_verdict(pod, policy) {
        Err(NotRequeued::Cannot(cannot)) => {
            let class = policy.class(policy.classify(pod, view.priority_of(pod)));
            Some((cannot.code(), cannot.sentence(pod, class)))
        }
        Err(_) => None,
        Ok(()) => match names_in_view(view, pod) {
            Names::Taken(names) => {
                let why = format!(
                    "every name its copy may take ({}) is held by a pod that is not its copy",
                    names.join(", ")
                );
                Some(("name_taken", why))
            }
            _ => None,
        },
    }
}

/// Namespaces holding bare pods that requeue would bring back were they in a namespace
/// that opts in, with how many: such pods are victims of last resort (an online pod takes
/// them where nothing else places it, and they are lost), which a replica says at start so
/// that an upgrade never silently stops requeue there.
pub fn last_resort_namespaces(view: &RequeueView, policy: &Policy) -> Vec<(String, usize, String)> {
    let mut found: BTreeMap<&str, (usize, String)> = BTreeMap::new();
    for pod in view.all_pods().filter(|p| !marks::is_replacement(p)) {
        if let Err(NotRequeued::Cannot(CannotRequeue::NamespaceNotOptedIn)) = view.requeue_verdict(pod, policy) {
            let class = policy.class(policy.classify(pod, view.priority_of(pod)));
            let why = || CannotRequeue::NamespaceNotOptedIn.sentence(pod, class);
            found.entry(&pod.namespace).or_insert_with(|| (0, why())).0 += 1;
        }
    }
    found.into_iter().map(|(ns, (n, why))| (ns.to_string(), n, why)).collect()
}

fn is_gated(r: &Pod) -> bool {
    r.scheduling_gates.iter().any(|g| g == GATE) && r.deletion_time.is_none()
}

/// Is this original still going, within the time its copy waits for it?
fn still_going(original: &Pod, now: Timestamp, stuck_after: i64) -> bool {
    original.deletion_time.is_some_and(|at| now - at <= stuck_after)
}

/// Gangs one of whose preempted members is still going, or gone without its copy yet
/// (one requeue will copy): their other copies wait, so the gang comes back together.
fn gangs_held_back(view: &RequeueView, policy: &Policy, now: Timestamp, stuck_after: i64) -> BTreeSet<GangRef> {
    let copies_waiting = view
        .replacements()
        .filter(|r| is_gated(r))
        .filter(|r| {
            r.annotations
                .get(FROM_UID)
                .and_then(|uid| view.pod_by_uid(uid))
                .is_some_and(|o| still_going(o, now, stuck_after))
        })
        .filter_map(|r| view.gang_of(r));
    let not_copied_yet = view
        .evictions()
        .iter()
        .filter(|e| view.requeue_verdict(&e.pod, policy).is_ok())
        .filter(|e| names_in_view(view, &e.pod) != Names::Stored)
        .filter_map(|e| view.gang_of(&e.pod));
    copies_waiting.chain(not_copied_yet).collect()
}

/// Is `r` the copy this controller builds of an eviction it recorded, and the first of its
/// names to hold one (a second pod claiming the same original is never released)?
fn recorded(view: &RequeueView, r: &Pod) -> Result<(), crate::cluster::NotRecorded> {
    let e = view.recorded_copy(r)?;
    let uid = e.pod.uid.as_str();
    let first = replacement_names(&e.pod)
        .into_iter()
        .find(|n| view.pod(&format!("{}/{n}", r.namespace)).is_some_and(|p| p.annotations.get(FROM_UID) == Some(uid)));
    match first.as_deref() == Some(r.name.as_str()) {
        true => Ok(()),
        false => Err(crate::cluster::NotRecorded::OtherName),
    }
}

fn settle(view: &RequeueView, r: &Pod, now: Timestamp, bounds: Bounds, held: &BTreeSet<GangRef>) -> Option<Action> {
    if !is_gated(r) {
        return None; // released already, or on its way out
    }
    let from_uid = r.annotations.get(FROM_UID).unwrap_or_default();
    let original = view.pod_by_uid(from_uid);
    if let Some(original) = original.filter(|o| o.deletion_time.is_none()) {
        return Some(Action::Delete {
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            uid: r.uid.clone(),
            reason: format!(
                "its original {} is not being deleted (a copy stored ahead of an eviction that never came)",
                original.key()
            ),
        });
    }
    if let Err(not) = recorded(view, r) {
        let age = r.creation_time.map(|at| now - at);
        return Some(Action::Unrecorded(Unrecorded {
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            uid: r.uid.clone(),
            reason: not.reason(),
            why: format!(
                "a gated copy of {from_uid} that is never released: {}; deleted {}s after its creation",
                not.describe(),
                bounds.unrecorded_after
            ),
            delete: age.is_some_and(|age| age >= bounds.unrecorded_after),
        }));
    }
    let stuck_after = bounds.stuck_after;
    match original {
        // A gang member's siblings are still going: the gang is released together.
        None if view.gang_of(r).is_some_and(|g| held.contains(&g)) => None,
        None => Some(Action::Release(Release { confirm_gone: true, ..Release::of(r) })),
        Some(original) if still_going(original, now, stuck_after) => None,
        Some(original) => {
            let at = original.deletion_time.unwrap_or_default();
            Some(Action::Release(Release {
                stuck: Some(format!(
                    "its original {} is still terminating {}s past its deletionTimestamp (on {})",
                    original.key(),
                    now - at,
                    original.node_name.as_deref().unwrap_or("no node")
                )),
                ..Release::of(r)
            }))
        }
    }
}

#[cfg(test)]
mod tests;
