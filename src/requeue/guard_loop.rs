//! The guard loop: carries out `guard::need` and `guard::finish` against the API server.
//!
//! Woken by view changes (a burst is taken together), and every second. Every write is
//! idempotent, so a second replica, a retry or a restart is harmless: the guard is added
//! and removed by strategic merge (a set), with the pod's UID in the patch as a
//! precondition; a replacement has a deterministic name, and a 409 on it is checked to be
//! our own. A guarded pod that left the watch (it ended before it was finished, or during
//! a restart) is found again by the guard label, listed at start and every
//! `SWEEP_EVERY`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use kube::api::{DynamicObject, GetParams, ListParams, Patch, PatchParams};
use serde_json::{json, Value};

use super::guard::{self, Finish, Guarding};
use super::kube::{api_code, pod_api, pod_resource, Requeuer};
use super::{replacement, would_requeue, RequeueIntent, GUARD};
use crate::cluster::ViewCell;
use crate::model::{Pod, PodRef};
use crate::policy::{Mode, Policy};

/// Guard work in flight at once. Requeue's writes yield to kube-scheduler's: in a storm
/// of preemptions on a 2-core control plane, 16 in flight made online pods wait 1.8×
/// as long as without the extender, 2 in flight 1.17× (`docs/performance.md`). The
/// evicted pods are held meanwhile, so nothing is lost by going slower.
const CONCURRENCY: usize = 2;
/// Work handed out and not finished, at most: a pass takes only what fits, so thousands
/// of pods to guard (a first start) cost each pass a few checks, not one per pod.
const QUEUED_MAX: usize = 4 * CONCURRENCY;
/// How long a burst of view changes is gathered before the loop looks.
const GATHER: Duration = Duration::from_millis(5);
/// A pod done with is not looked at again for this long: the view trails our own writes.
const VIEW_TRAILS: Duration = Duration::from_secs(3);
/// How often guarded pods that ended are listed by label (and once at start).
const SWEEP_EVERY: Duration = Duration::from_secs(60);
/// Preemptors remembered for the replacements' `preempted-by` annotation.
const ANSWERS_KEPT: usize = 10_000;

/// Who preempted which guarded victim (by UID), from this replica's answers: the
/// replacement names it. After a restart, or from another replica, it says "unknown".
#[derive(Default)]
pub struct Answered {
    by_uid: HashMap<String, String>,
}

impl Answered {
    pub fn note(&mut self, intents: &[RequeueIntent]) {
        if self.by_uid.len() + intents.len() > ANSWERS_KEPT {
            self.by_uid.clear();
        }
        for i in intents.iter().filter(|i| i.guarded) {
            self.by_uid.insert(i.uid.clone(), i.preemptor.clone());
        }
    }

    fn preemptor(&self, uid: &str) -> String {
        self.by_uid.get(uid).cloned().unwrap_or_else(|| "unknown (preempted by kube-scheduler)".into())
    }
}

#[derive(Clone, Copy)]
enum Busy {
    InFlight,
    DoneAt(Instant),
}

impl Busy {
    /// Keeps its pod from being handed out again: in flight, or done within `VIEW_TRAILS`.
    fn holds(&self) -> bool {
        match self {
            Busy::InFlight => true,
            Busy::DoneAt(t) => t.elapsed() < VIEW_TRAILS,
        }
    }
}

/// Pods being worked on or done a moment ago, by UID.
#[derive(Default)]
struct Ledger {
    pods: Mutex<HashMap<String, Busy>>,
    in_flight: std::sync::atomic::AtomicUsize,
}

impl Ledger {
    fn in_flight(&self) -> usize {
        self.in_flight.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Claims `uid` unless it is in flight or was done within `VIEW_TRAILS`.
    fn claim(&self, uid: &str) -> bool {
        let mut pods = self.pods.lock().unwrap_or_else(|e| e.into_inner());
        if pods.len() > 4 * ANSWERS_KEPT {
            pods.retain(|_, b| b.holds());
        }
        if pods.get(uid).is_some_and(Busy::holds) {
            return false;
        }
        pods.insert(uid.to_string(), Busy::InFlight);
        self.in_flight.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        true
    }

    fn release(&self, uid: &str) {
        self.pods.lock().unwrap_or_else(|e| e.into_inner()).insert(uid.to_string(), Busy::DoneAt(Instant::now()));
        self.in_flight.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Requeuer {
    /// Runs until the process ends.
    pub async fn guard_loop(self: Arc<Self>, cell: Arc<ViewCell>, policy: Arc<ArcSwap<Policy>>, guarding: Guarding) {
        let ledger = Arc::new(Ledger::default());
        let limit = Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
        let mut changed = cell.subscribe();
        let mut swept: Option<Instant> = None;
        loop {
            tokio::select! {
                _ = changed.changed() => tokio::time::sleep(GATHER).await,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
            changed.borrow_and_update();
            if !self.pace.may_go() {
                continue;
            }
            // Shadow mode writes nothing of its own: no new guards (guarded pods are still
            // finished, so none stays held).
            let shadow = policy.load().mode == Mode::Shadow;
            let room = QUEUED_MAX.saturating_sub(ledger.in_flight());
            // Claimed as they are taken (`take` stops asking at `room`): one look in the
            // ledger per pod.
            let takes = |p: &&PodRef| (!shadow || p.requeue_guarded) && ledger.claim(&p.uid);
            let Some(work) = cell.read_latest(|v| v.guard_work().filter(takes).take(room).cloned().collect::<Vec<_>>()) else { continue };
            for pod in work {
                let (this, cell, policy, ledger, limit) = (self.clone(), cell.clone(), policy.clone(), ledger.clone(), limit.clone());
                tokio::spawn(async move {
                    let _permit = limit.acquire().await;
                    match pod.requeue_guarded {
                        false => this.add_guard(&pod).await,
                        true => this.finish_guarded(&pod, &cell, &policy.load(), guarding).await,
                    }
                    ledger.release(&pod.uid);
                });
            }
            if swept.is_none_or(|t| t.elapsed() >= SWEEP_EVERY) {
                swept = Some(Instant::now());
                tokio::spawn(self.clone().sweep(cell.clone(), policy.clone(), guarding));
            }
        }
    }

    /// Guarded pods that ended, wherever the watch lost them: finished like the others.
    async fn sweep(self: Arc<Self>, cell: Arc<ViewCell>, policy: Arc<ArcSwap<Policy>>, guarding: Guarding) {
        let params = ListParams::default().labels(GUARD).fields("status.phase!=Pending,status.phase!=Running");
        let listed = match kube::Api::<DynamicObject>::all_with(self.client.clone(), &pod_resource()).list(&params).await {
            Ok(list) => list.items,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list guarded pods that ended; will retry");
                return;
            }
        };
        for object in listed {
            let Ok(json) = serde_json::to_value(&object) else { continue };
            if let Some(pod) = decode(&json) {
                self.finish_from(&pod, json, &cell, &policy.load(), guarding).await;
            }
        }
    }

    async fn add_guard(&self, pod: &Pod) {
        let patch = json!({"metadata": {"uid": pod.uid, "finalizers": [GUARD], "labels": {GUARD: "true"}}});
        match pod_api(&self.client, &pod.namespace).patch(&pod.name, &PatchParams::default(), &Patch::Strategic(patch)).await {
            Ok(_) => metrics::counter!("coloc_requeue_guards_total", "change" => "added").increment(1),
            // Gone, or another pod of that name now.
            Err(e) if matches!(api_code(&e), Some(404 | 409 | 422)) => tracing::debug!(pod = %pod.key(), error = %e, "guard not added"),
            Err(e) => tracing::warn!(pod = %pod.key(), error = %e, "cannot guard pod; will retry"),
        }
    }

    /// Guards are trusted in a preempt only while requeue's writes succeed: after a failed
    /// one (a permission removed, an API server refusing), until the next success, a guarded
    /// victim's replacement is stored before the answer, as an unguarded one's is.
    pub fn guards_trusted(&self) -> bool {
        !self.writes_failing.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(super) fn wrote(&self, ok: bool) {
        self.writes_failing.store(!ok, std::sync::atomic::Ordering::Relaxed);
    }

    /// Looks at the guarded pod as the API server has it now, then finishes it.
    async fn finish_guarded(&self, seen: &Pod, cell: &ViewCell, policy: &Policy, guarding: Guarding) {
        // From the API server's watch cache (resourceVersion 0): no quorum read from etcd.
        // A cached copy that lags is fine: it is the pod being copied, and `finish` acts
        // only on what it shows (a guard still on, a deletion or end already seen).
        let json = match pod_api(&self.client, &seen.namespace).get_with(&seen.name, &GetParams::any()).await {
            Ok(object) => serde_json::to_value(&object).unwrap_or(Value::Null),
            Err(e) if api_code(&e) == Some(404) => return forget(cell, seen),
            Err(e) => return tracing::warn!(pod = %seen.key(), error = %e, "cannot read guarded pod; will retry"),
        };
        match decode(&json) {
            Some(now) if now.uid == seen.uid => self.finish_from(&now, json, cell, policy, guarding).await,
            _ => forget(cell, seen),
        }
    }

    async fn finish_from(&self, pod: &Pod, json: Value, cell: &ViewCell, policy: &Policy, guarding: Guarding) {
        // Classified as the view classifies it (a pod without `spec.priority` through its class).
        let priority = cell.read_latest(|v| v.priority_of(pod)).unwrap_or(pod.priority.unwrap_or(0));
        let class = policy.class(policy.classify(pod, priority));
        let wanted = guarding == Guarding::On && would_requeue(pod, class);
        match guard::finish(pod, wanted) {
            Finish::Nothing if !pod.requeue_guarded => forget(cell, pod),
            Finish::Nothing => {}
            Finish::Unguard(why) => {
                if self.remove_guard(pod, why).await {
                    forget(cell, pod);
                }
            }
            Finish::Requeue => {
                let preemptor = self.answered.lock().unwrap_or_else(|e| e.into_inner()).preemptor(&pod.uid);
                let intent = RequeueIntent::for_victim(pod, pod.node_name.as_deref().unwrap_or_default(), &preemptor);
                let stored = self.store_after_eviction(&intent, &json).await;
                self.wrote(stored.is_ok());
                match stored {
                    Ok(outcome) => {
                        metrics::counter!("coloc_requeue_replacements_total", "outcome" => outcome).increment(1);
                        if self.remove_guard(pod, "preempted; its replacement is stored").await {
                            forget(cell, pod);
                        }
                    }
                    Err(why) => {
                        metrics::counter!("coloc_requeue_replacements_total", "outcome" => "failed").increment(1);
                        // The guard holds the pod: nothing is lost while this is retried.
                        tracing::warn!(original = %pod.key(), replacement = %intent.replacement, error = %why, "requeue replacement not stored; the guard holds the pod, will retry");
                    }
                }
            }
        }
    }

    async fn store_after_eviction(&self, intent: &RequeueIntent, original: &Value) -> Result<&'static str, String> {
        let manifest = replacement::build_after_eviction(original, intent).map_err(|e| e.to_string())?;
        Ok(self.create_replacement(intent, manifest).await?.outcome())
    }

    /// True once the guard is gone (removed now, or the pod is).
    async fn remove_guard(&self, pod: &Pod, why: &str) -> bool {
        let patch = json!({"metadata": {"uid": pod.uid, "$deleteFromPrimitiveList/finalizers": [GUARD], "labels": {GUARD: null}}});
        match pod_api(&self.client, &pod.namespace).patch(&pod.name, &PatchParams::default(), &Patch::Strategic(patch)).await {
            Ok(_) => {
                metrics::counter!("coloc_requeue_guards_total", "change" => "removed").increment(1);
                tracing::debug!(pod = %pod.key(), why, "guard removed");
                true
            }
            Err(e) if matches!(api_code(&e), Some(404 | 422)) => true,
            Err(e) => {
                tracing::warn!(pod = %pod.key(), error = %e, "cannot remove guard; will retry");
                false
            }
        }
    }
}

fn decode(json: &Value) -> Option<Pod> {
    serde_json::from_value::<crate::wire::k8s::Pod>(json.clone()).ok()?.into_model().ok()
}

/// The view keeps a guarded pod that left the watch until the loop is done with it.
fn forget(cell: &ViewCell, pod: &Pod) {
    let key = pod.key();
    cell.change(|v| v.forget_guard(&key, &pod.uid));
}
