//! The requeue controller: reacts to what the cluster view observes, apart from the verbs'
//! answers (no preempt waits for it). Each change of the view (a burst of them makes one
//! pass) runs `plan::reconcile` and carries out what it asks: store a copy of a preempted
//! bare pod that is going, release a copy whose original is gone, delete one that must not
//! run. Every action is idempotent, so two replicas, or a replica restarted mid-way, reach
//! the same end; a failed one is tried again with a growing back-off, and a copy that can
//! never be stored is given up visibly (a Warning Event, `coloc_requeue_given_up_total`).
//!
//! It reads the view the watches keep rather than a watch of its own: a second watch of
//! every pod, decoded whole, would double the API server's fan-out and hold 150,000 full
//! pods, where the view keeps the bytes of only the pods being preempted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use futures::StreamExt;
use kube::runtime::events::EventType;
use serde_json::Value;

use super::give_up;
use super::kube::{pod_api, pod_ref, Requeuer, StoreError};
use super::leader::Leadership;
use super::plan::{self, Action, Copy, Release, Unrecorded};
use super::replacement;
use crate::cluster::RequeueCell;
use crate::model::{marks, Timestamp};
use crate::policy::Policy;

/// After a change, wait this long for the rest of its burst before a pass.
const BURST: Duration = Duration::from_millis(20);
/// A pass at least this often, for retries and for originals stuck terminating.
const TICK: Duration = Duration::from_secs(1);
/// Writes in flight at once.
const CONCURRENT: usize = 16;
/// How often the permissions copies need are checked.
pub const ACCESS_EVERY: Duration = Duration::from_secs(5);
/// The first back-off after a failed action.
pub const BACKOFF_FIRST: Duration = Duration::from_millis(500);
/// A replica standing by carries out an action the plan has asked for this long: the
/// leader has not (it restarted and lost its records, it lost touch), and the standby's
/// records are what brings the pod back. Every action is idempotent, so a late double is
/// a no-op.
pub const STANDBY_AFTER: Duration = Duration::from_secs(3);

/// How this replica runs requeue.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Store copies (`serve --requeue`); without it, copies an earlier run left are still
    /// released or deleted.
    pub copies: bool,
    /// Seconds past an original's deletionTimestamp after which its copy is released anyway.
    pub stuck_after: i64,
    /// Seconds after which a gated copy this controller did not record is deleted
    /// (`plan::UNRECORDED_AFTER`; shorter only in tests).
    pub unrecorded_after: i64,
    /// The first back-off after a failed action (`BACKOFF_FIRST`); it doubles per failure.
    pub backoff: Duration,
}

impl Settings {
    /// Copies on, the default bounds.
    pub fn copying() -> Settings {
        Settings {
            copies: true,
            stuck_after: plan::STUCK_AFTER,
            unrecorded_after: plan::UNRECORDED_AFTER,
            backoff: BACKOFF_FIRST,
        }
    }

    fn bounds(&self) -> plan::Bounds {
        plan::Bounds { stuck_after: self.stuck_after, unrecorded_after: self.unrecorded_after }
    }
}

fn action_key(a: &Action) -> String {
    match a {
        Action::Copy(c) => format!("copy/{}", c.intent.uid),
        Action::Release(r) => format!("release/{}", r.uid),
        Action::Delete { uid, .. } => format!("delete/{uid}"),
        Action::Unrecorded(u) => format!("unrecorded/{}", u.uid),
    }
}

/// What one pass found in the view.
struct Pass {
    actions: Vec<Action>,
    /// Gated copies in the view.
    waiting: usize,
    /// Preempted pods the policy does not bring back any more (uid, key, reason, why).
    uncopied: Vec<(String, String, &'static str, String)>,
    /// Bytes and pods whose state is kept for copies.
    kept: (usize, usize),
}

impl Requeuer {
    /// Runs until the process ends: a pass after each burst of changes requeue reacts to
    /// (most view changes are not: a bind, a status), and every `TICK` for retries and
    /// bounds, while this replica leads. A replica that stands by keeps its view, so it
    /// has recorded the same evictions when it takes over.
    pub async fn run(
        self: Arc<Self>,
        cell: Arc<RequeueCell>,
        policy: Arc<ArcSwap<Policy>>,
        settings: Settings,
        leadership: Arc<Leadership>,
    ) {
        let mut changes = cell.subscribe();
        let mut seen = None;
        let mut preemptions = None;
        let mut last_pass = Instant::now();
        let mut namespaces_said = !settings.copies;
        loop {
            tokio::select! {
                _ = changes.changed() => tokio::time::sleep(BURST).await,
                _ = tokio::time::sleep(TICK) => {}
            }
            changes.borrow_and_update();
            let now_seen = cell.read_latest(|v| (v.changes(), v.preemptions_seen()));
            if now_seen.map(|s| s.1) != preemptions {
                preemptions = now_seen.map(|s| s.1);
                self.pace.preempt_seen();
            }
            if !self.pace.may_go() {
                continue; // kube-scheduler is preempting: its writes first
            }
            let now_seen = now_seen.map(|s| s.0);
            if now_seen == seen && last_pass.elapsed() < TICK {
                continue;
            }
            seen = now_seen;
            last_pass = Instant::now();
            let leading = leadership.is_leading();
            if leading && !namespaces_said {
                namespaces_said = self.say_namespaces_not_opted_in(&cell, &policy.load()).await;
            }
            self.reconcile_once(&cell, &policy.load(), settings, leading).await;
        }
    }

    /// Checks every `every` whether this replica may write copies, and says so to decisions
    /// (`Availability`) and, on a change, to the log.
    pub async fn watch_access(self: Arc<Self>, every: Duration) {
        if !self.availability.is_on() {
            return;
        }
        loop {
            match self.may_write_copies().await {
                Ok(why_not) => self.access_found(why_not),
                Err(e) => tracing::debug!(error = %e, "requeue: cannot check its permissions; keeps the last finding"),
            }
            tokio::time::sleep(every).await;
        }
    }

    fn access_found(&self, why_not: Option<String>) {
        let writable = why_not.is_none();
        if self.availability.set(writable, why_not.clone()) {
            match why_not {
                None => {
                    tracing::info!("requeue can store copies again: bare victims of requeue classes may be evicted")
                }
                Some(why) => tracing::warn!(
                    why,
                    "requeue cannot store copies: until it can, bare pods of requeue classes are victims of last resort (taken only for an online pod nothing else places, and lost)"
                ),
            }
        }
    }

    /// `None` if the API server lets this identity create, patch and delete pods
    /// (cluster-wide, as the requeue component grants), else why not.
    async fn may_write_copies(&self) -> Result<Option<String>, kube::Error> {
        use k8s_openapi::api::authorization::v1::{
            ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
        };
        for verb in ["create", "patch", "delete"] {
            let reviews: kube::Api<SelfSubjectAccessReview> = kube::Api::all(self.client.clone());
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(ResourceAttributes {
                        verb: Some(verb.into()),
                        resource: Some("pods".into()),
                        group: Some(String::new()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                ..Default::default()
            };
            let status = reviews.create(&kube::api::PostParams::default(), &review).await?.status.unwrap_or_default();
            if !status.allowed {
                let reason = status.reason.filter(|r| !r.is_empty()).unwrap_or_else(|| "no RBAC rule allows it".into());
                return Ok(Some(format!("the API server does not let the requeue controller {verb} pods ({reason})")));
            }
        }
        Ok(None)
    }

    /// One pass; nothing happens until the view is synced (a missing original must mean
    /// "gone", never "not listed yet"). The leader carries out every action and says what
    /// is not requeued; a replica standing by only what the plan has asked for
    /// `STANDBY_AFTER` (a copy, a release, a delete of a copy it recorded). Returns the
    /// actions tried.
    pub async fn reconcile_once(
        &self,
        cell: &RequeueCell,
        policy: &Policy,
        settings: Settings,
        leading: bool,
    ) -> usize {
        let now = crate::clock::system_now();
        let Some(pass) = cell.read_latest(|view| Pass {
            actions: plan::reconcile(view, policy, now, settings.copies, settings.bounds()),
            waiting: view.replacements().filter(|r| r.scheduling_gates.iter().any(|g| g == marks::GATE)).count(),
            uncopied: match settings.copies {
                true => view
                    .evictions()
                    .iter()
                    .filter_map(|e| {
                        let (reason, why) = plan::uncopied(view, policy, e)?;
                        Some((e.pod.uid.clone(), e.pod.key(), reason, why))
                    })
                    .collect(),
                false => Vec::new(),
            },
            kept: (view.kept_states().bytes(), view.kept_states().len()),
        }) else {
            return 0;
        };
        metrics::gauge!("coloc_requeue_copies_waiting").set(pass.waiting as f64);
        metrics::gauge!("coloc_requeue_kept_bytes").set(pass.kept.0 as f64);
        metrics::gauge!("coloc_requeue_kept_states").set(pass.kept.1 as f64);
        let mut keys: std::collections::HashSet<String> = pass.actions.iter().map(action_key).collect();
        keys.extend(pass.uncopied.iter().map(|(uid, ..)| format!("uncopied/{uid}")));
        keys.extend(pass.actions.iter().filter_map(|a| match a {
            Action::Unrecorded(u) => Some(format!("said/{}", u.uid)),
            _ => None,
        }));
        self.retry.keep_only(&keys);
        self.planned.keep_only(&keys);
        if leading {
            for (uid, key, reason, why) in pass.uncopied {
                self.say_uncopied(&uid, &key, reason, &why).await;
            }
        }
        let at = Instant::now();
        let stepping_in = |a: &Action| {
            !matches!(a, Action::Unrecorded(_)) && self.planned.for_how_long(&action_key(a), at) >= STANDBY_AFTER
        };
        let due: Vec<Action> = pass
            .actions
            .into_iter()
            .filter(|a| self.retry.due(&action_key(a), at))
            .filter(|a| leading || stepping_in(a))
            .collect();
        let tried = due.len();
        futures::stream::iter(due).for_each_concurrent(CONCURRENT, |a| self.carry_out(a, now, settings.backoff)).await;
        tried
    }

    async fn carry_out(&self, action: Action, now: Timestamp, backoff: Duration) {
        let key = action_key(&action);
        let failed = match &action {
            Action::Copy(c) => match self.copy(c).await {
                Ok(Copied::Stored) => None,
                Ok(Copied::NotEvicted(why)) => {
                    tracing::info!(original = %c.intent.original_key(), why, "requeue: no copy");
                    self.retry.settle(&key);
                    return;
                }
                Err(e) => return self.copy_failed(c, &key, e, now, backoff).await,
            },
            Action::Release(r) => self.release_checked(r).await.err(),
            Action::Delete { namespace, name, uid, reason } => self.delete(namespace, name, uid, reason).await.err(),
            Action::Unrecorded(u) => {
                self.say_unrecorded(u).await;
                if !u.delete {
                    return;
                }
                self.delete(&u.namespace, &u.name, &u.uid, &u.why).await.err()
            }
        };
        match failed {
            None => self.retry.succeeded(&key),
            Some(e) => {
                let tries = self.retry.failed(&key, Instant::now(), backoff);
                tracing::warn!(action = %key, tries, error = %e, "requeue: will retry");
            }
        }
    }

    /// Stores the copy, once the API server says the original is being deleted or gone
    /// where the view could not tell; from the original as the API server has it where the
    /// view did not keep its state.
    async fn copy(&self, c: &Copy) -> Result<Copied, StoreError> {
        let mut read = None;
        if c.confirm_deleted || c.source.is_none() {
            let api = pod_api(&self.client, &c.intent.namespace);
            let found = api
                .get_opt(&c.intent.name)
                .await
                .map_err(|e| StoreError::api(format!("cannot read {}", c.intent.original_key()), &e))?;
            if let Some(o) = found.filter(|o| o.metadata.uid.as_deref() == Some(c.intent.uid.as_str())) {
                if o.metadata.deletion_timestamp.is_none() {
                    let phase = o.data["status"]["phase"].as_str().unwrap_or("unknown").to_string();
                    return Ok(Copied::NotEvicted(format!("it ended on its own (phase {phase}), not deleted")));
                }
                read = Some(o);
            }
        }
        let from_get = c.source.is_none();
        let original: Value = match (&c.source, read) {
            (Some(bytes), _) => serde_json::from_str(bytes).map_err(|e| StoreError::new(e.to_string()))?,
            (None, Some(o)) => serde_json::to_value(&o).map_err(|e| StoreError::new(e.to_string()))?,
            (None, None) => {
                return Err(StoreError::for_good(
                    "state_not_kept",
                    format!(
                        "its state was not kept (over {} KiB, or past the {} MiB all such states may take) and the API server no longer has it",
                        crate::cluster::kept::PER_POD / 1024,
                        crate::cluster::kept::TOTAL / (1024 * 1024)
                    ),
                ))
            }
        };
        let manifest = replacement::build(&original, &c.intent).map_err(|e| StoreError::new(e.to_string()))?;
        let stored = self.create_under(&c.intent, manifest, &c.names).await?;
        let outcome = stored.outcome();
        metrics::counter!("coloc_requeue_replacements_total", "outcome" => outcome).increment(1);
        if from_get && matches!(stored, super::kube::Stored::Created(_)) {
            metrics::counter!("coloc_requeue_copies_from_get_total").increment(1);
        }
        tracing::info!(original = %c.intent.original_key(), replacement = %stored.name(), node = %c.intent.node,
            attempt = c.intent.attempt, self_inflicted = c.self_inflicted, from_get, outcome,
            "requeue: preempted pod copied (gated until it is gone)");
        Ok(Copied::Stored)
    }

    async fn copy_failed(&self, c: &Copy, key: &str, e: StoreError, now: Timestamp, backoff: Duration) {
        metrics::counter!("coloc_requeue_replacements_total", "outcome" => "failed").increment(1);
        let tries = self.retry.failed(key, Instant::now(), backoff);
        if give_up::refused_for_good(e.code, &e.message) == Some("forbidden") {
            // Decisions stop counting on copies at once, not at the next check.
            self.access_found(Some(format!("a copy was refused: {}", crate::wire::error::clip(&e.message, 200))));
        }
        // A terminating original still counts against the namespace's quota: a refusal is
        // final only once the original has had time to go.
        let reason = e.given_up.or_else(|| {
            give_up::give_up_after(tries, e.code, &e.message)
                .filter(|r| *r == "namespace_terminating" || now > c.since + plan::STUCK_AFTER)
        });
        let Some(reason) = reason else {
            tracing::warn!(original = %c.intent.original_key(), replacement = %c.intent.replacement, tries,
                error = %e.message, "requeue: copy not stored; will retry");
            return;
        };
        self.retry.settle(key);
        metrics::counter!("coloc_requeue_given_up_total", "reason" => reason).increment(1);
        let error = crate::wire::error::clip(&e.message, 300);
        tracing::error!(original = %c.intent.original_key(), replacement = %c.intent.replacement, reason, tries,
            error = %error, "requeue given up: the preempted pod is lost");
        let note = format!(
            "preempted, and its copy {} could not be stored after {tries} tries ({reason}: {error}): the pod is lost",
            c.intent.replacement
        );
        let i = &c.intent;
        self.event(pod_ref(&i.namespace, &i.name, &i.uid), EventType::Warning, "RequeueGivenUp", note).await;
    }

    /// Once the view is synced: the namespaces whose bare pods of requeue classes are
    /// victims of last resort because the namespace has not opted in, in one log line and
    /// an Event on each namespace. False while the view is not synced.
    async fn say_namespaces_not_opted_in(&self, cell: &RequeueCell, policy: &Policy) -> bool {
        let Some(found) = cell.read_latest(|view| plan::last_resort_namespaces(view, policy)) else {
            return false;
        };
        if found.is_empty() {
            return true;
        }
        let listed: Vec<String> = found.iter().map(|(ns, n, _)| format!("{ns} ({n})")).collect();
        tracing::warn!(namespaces = %listed.join(", "),
            "requeue: bare pods of requeue classes in namespaces that have not opted in are not copied: victims of last resort (taken only for an online pod nothing else places, and lost)");
        for (namespace, pods, why) in found {
            let note = format!(
                "{pods} bare pod(s) of requeue classes here cannot be requeued, so they are victims of last resort (taken only for an online pod nothing else places, and lost): {why}"
            );
            let regarding = k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Namespace".into()),
                name: Some(namespace),
                ..Default::default()
            };
            self.event(regarding, EventType::Warning, "RequeueNotOptedIn", note).await;
        }
        true
    }

    /// A preempted pod the policy does not bring back: said once.
    async fn say_uncopied(&self, uid: &str, key: &str, reason: &'static str, why: &str) {
        let said = format!("uncopied/{uid}");
        if !self.retry.due(&said, Instant::now()) {
            return;
        }
        self.retry.settle(&said);
        metrics::counter!("coloc_requeue_given_up_total", "reason" => reason).increment(1);
        tracing::warn!(original = %key, why, "requeue: a preempted pod is not copied");
        let (namespace, name) = key.split_once('/').unwrap_or(("", key));
        let note = format!("preempted and not requeued: {why}");
        self.event(pod_ref(namespace, name, uid), EventType::Warning, "RequeueGivenUp", note).await;
    }

    /// A gated copy this controller did not record: said once (a Warning Event on it, a
    /// metric), never released.
    async fn say_unrecorded(&self, u: &Unrecorded) {
        let said = format!("said/{}", u.uid);
        if !self.retry.due(&said, Instant::now()) {
            return;
        }
        self.retry.settle(&said);
        metrics::counter!("coloc_requeue_unrecorded_copies_total", "reason" => u.reason).increment(1);
        tracing::warn!(copy = %format!("{}/{}", u.namespace, u.name), reason = u.reason, why = %u.why,
            "requeue: a gated copy it did not record is never released");
        let note = u.why.clone();
        self.event(pod_ref(&u.namespace, &u.name, &u.uid), EventType::Warning, "RequeueCopyNotRecorded", note).await;
    }

    /// Releases `r`; where the view has lost its original, only once the API server agrees
    /// it is gone or failed. One that succeeded has done its work: its copy is deleted.
    async fn release_checked(&self, r: &Release) -> Result<(), String> {
        if r.confirm_gone {
            let (namespace, name) = r.from_pod.split_once('/').unwrap_or(("", &r.from_pod));
            let found = pod_api(&self.client, namespace).get_opt(name).await;
            let found = match found {
                Ok(found) => found.filter(|o| o.metadata.uid.as_deref() == Some(r.from_uid.as_str())),
                Err(e) => return Err(format!("cannot read the original {}: {e}", r.from_pod)),
            };
            if let Some(original) = found {
                match original.data["status"]["phase"].as_str() {
                    Some("Succeeded") => {
                        let reason = format!("its original {} finished its work while terminating", r.from_pod);
                        return self.delete(&r.namespace, &r.name, &r.uid, &reason).await;
                    }
                    Some("Failed") => {}
                    _ => return Err(format!("the original {} still runs as the API server has it", r.from_pod)),
                }
            }
        }
        self.release(r).await
    }
}

/// What storing a copy came to.
enum Copied {
    Stored,
    /// The API server says the pod was not deleted: nothing to copy.
    NotEvicted(String),
}
