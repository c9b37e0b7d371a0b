//! Finishing the guards earlier releases left (`guard`), against the API server.
//!
//! Guarded pods are found by their label, once at start and then every minute (every few
//! seconds while some are left). Each is finished as `guard::finish` says: a preempted
//! pod's replacement is stored before its guard goes (one that reaches into its node,
//! whose copy admission refuses, is given up at once); any other guard just goes. A guard
//! is removed by a merge patch that carries the `resourceVersion` read, so a pod that
//! changed meanwhile (kube-scheduler marking it preempted) is looked at again first. A
//! replacement that cannot be stored is given up after `give_up::MAX_TRIES` tries (about
//! 20 s), or at once when its namespace is being deleted: the guard goes, and a Warning
//! Event, a metric and the log say the pod is lost, so nothing waits forever on a write
//! that can never succeed.

use std::time::Duration;

use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::events::EventType;
use serde_json::{json, Value};

use super::guard::{self, Finish};
use super::tries::Tries;
use crate::model::marks::GUARD;
use crate::model::Pod;
use crate::model::RequeueIntent;
use crate::requeue::give_up;
use crate::requeue::kube::{api_code, decoded, pod_api, pod_ref, pod_resource, Requeuer};
use crate::requeue::replacement;

/// Between two looks while guards are left, and once none are.
const AGAIN_SOON: Duration = Duration::from_secs(5);
const AGAIN_LATER: Duration = Duration::from_secs(60);

/// What one look found and did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct GuardReport {
    /// Pods that carried a guard.
    pub found: usize,
    /// Preempted pods whose replacement was stored, then their guard removed.
    pub requeued: usize,
    /// Guards removed from pods that were not preempted.
    pub unguarded: usize,
    /// Preempted pods whose replacement could never be stored: lost, guard removed.
    pub given_up: usize,
    /// Left for the next look (a conflict, a passing API error).
    pub left: usize,
    /// Why the first of those was left, for the one log line of the look.
    pub first_failure: Option<String>,
}

impl GuardReport {
    pub fn summary(&self) -> String {
        let why = self.first_failure.as_deref().map(|w| format!(" (first: {w})")).unwrap_or_default();
        format!(
            "{} guarded pod(s): {} requeued, {} unguarded, {} given up (lost), {} left to retry{why}",
            self.found, self.requeued, self.unguarded, self.given_up, self.left
        )
    }
}

enum Outcome {
    Requeued,
    Unguarded,
    GivenUp,
    /// Left for the next look, and why.
    Left(String),
    Nothing,
}

impl Requeuer {
    /// Runs until the process ends, while this replica leads; says at start what it found.
    pub async fn finish_leftover_guards(
        self: std::sync::Arc<Self>,
        leadership: std::sync::Arc<crate::requeue::leader::Leadership>,
    ) {
        let mut last: Option<GuardReport> = None;
        let tries = Tries::default();
        loop {
            if !leadership.is_leading() {
                tokio::time::sleep(AGAIN_SOON).await;
                continue;
            }
            let again = match self.finish_guards_once(&tries).await {
                Ok(report) => {
                    // One line per look that found something new (per-pod detail is debug).
                    match &last {
                        None if report.found > 0 => {
                            tracing::warn!(summary = %report.summary(), "found guards left by an earlier release: finishing them")
                        }
                        Some(before) if report.found > 0 && *before != report => {
                            tracing::info!(summary = %report.summary(), "finishing guards left by an earlier release")
                        }
                        _ => {}
                    }
                    last = Some(report.clone());
                    metrics::gauge!("coloc_requeue_guards_left").set(report.left as f64);
                    if report.left > 0 {
                        AGAIN_SOON
                    } else {
                        AGAIN_LATER
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot list pods guarded by an earlier release; will retry");
                    AGAIN_SOON
                }
            };
            tokio::time::sleep(again).await;
        }
    }

    /// One look: every pod with the guard label listed and finished.
    pub async fn finish_guards_once(&self, tries: &Tries) -> Result<GuardReport, kube::Error> {
        let listed = kube::Api::<DynamicObject>::all_with(self.client.clone(), &pod_resource())
            .list(&ListParams::default().labels(GUARD))
            .await?;
        let uids: std::collections::HashSet<&str> =
            listed.items.iter().filter_map(|o| o.metadata.uid.as_deref()).collect();
        tries.keep_only(&uids);
        Ok(self.finish_listed(listed.items, tries).await)
    }

    /// Every pod listed, so that a guard whose label someone removed is found too
    /// (`uninstall`, once: a whole list is not for every minute).
    pub async fn finish_all_guards(&self, tries: &Tries) -> Result<GuardReport, kube::Error> {
        let listed = kube::Api::<DynamicObject>::all_with(self.client.clone(), &pod_resource())
            .list(&ListParams::default())
            .await?;
        let has_guard = |o: &DynamicObject| {
            o.metadata.finalizers.iter().flatten().any(|f| f == GUARD)
                || o.metadata.labels.as_ref().is_some_and(|l| l.contains_key(GUARD))
        };
        Ok(self.finish_listed(listed.items.into_iter().filter(has_guard).collect(), tries).await)
    }

    async fn finish_listed(&self, listed: Vec<DynamicObject>, tries: &Tries) -> GuardReport {
        let mut report = GuardReport::default();
        for object in listed {
            let Some((json, pod)) = decoded(&object) else { continue };
            if !pod.requeue_guarded {
                // The label without the finalizer: only the label to take off.
                self.remove_guard(&pod, &json, "label left without the finalizer").await;
                continue;
            }
            report.found += 1;
            match self.finish_guarded(&pod, &json, tries).await {
                Outcome::Requeued => report.requeued += 1,
                Outcome::Unguarded => report.unguarded += 1,
                Outcome::GivenUp => report.given_up += 1,
                Outcome::Left(why) => {
                    report.left += 1;
                    report
                        .first_failure
                        .get_or_insert_with(|| format!("{}: {}", pod.key(), crate::wire::error::clip(&why, 200)));
                }
                Outcome::Nothing => {}
            }
        }
        report
    }

    async fn finish_guarded(&self, pod: &Pod, json: &Value, tries: &Tries) -> Outcome {
        match guard::finish(pod) {
            Finish::Nothing => Outcome::Nothing,
            Finish::GiveUp { reason, why } => {
                let note = format!("preempted and not requeued: {why}; the guard is removed and the pod is lost");
                self.give_up(pod, json, reason, note, tries).await
            }
            Finish::Unguard(why) => match self.try_remove_guard(pod, json, why).await {
                Ok(()) => Outcome::Unguarded,
                Err(e) => Outcome::Left(e),
            },
            Finish::Requeue => {
                let intent = RequeueIntent::for_victim(
                    pod,
                    pod.node_name.as_deref().unwrap_or_default(),
                    "unknown (preempted by kube-scheduler)",
                );
                let stored = match replacement::build(json, &intent) {
                    Ok(manifest) => self.create_replacement(&intent, manifest).await,
                    Err(e) => Err(crate::requeue::kube::StoreError::new(e.to_string())),
                };
                match stored {
                    Ok(stored) => {
                        metrics::counter!("coloc_requeue_replacements_total", "outcome" => stored.outcome())
                            .increment(1);
                        tries.forget(&pod.uid);
                        match self.try_remove_guard(pod, json, "preempted; its replacement is stored").await {
                            Ok(()) => Outcome::Requeued,
                            Err(e) => Outcome::Left(e),
                        }
                    }
                    Err(e) => {
                        metrics::counter!("coloc_requeue_replacements_total", "outcome" => "failed").increment(1);
                        let failed = tries.failed(&pod.uid);
                        let reason = e.given_up.or_else(|| give_up::give_up_after(failed, e.code, &e.message));
                        match reason {
                            Some(reason) => {
                                let error = crate::wire::error::clip(&e.message, 300);
                                let note = format!("preempted, and its replacement {} could not be stored after {failed} tries ({reason}: {error}); the guard is removed and the pod is lost", intent.replacement);
                                self.give_up(pod, json, reason, note, tries).await
                            }
                            None => {
                                tracing::debug!(original = %pod.key(), replacement = %intent.replacement, tries = failed, error = %e.message, "requeue replacement not stored; will retry");
                                Outcome::Left(format!("replacement not stored (try {failed}): {}", e.message))
                            }
                        }
                    }
                }
            }
        }
    }

    /// The replacement can never be stored: the guard goes and the pod is lost, visibly.
    async fn give_up(&self, pod: &Pod, json: &Value, reason: &'static str, note: String, tries: &Tries) -> Outcome {
        if let Err(e) = self.try_remove_guard(pod, json, "its replacement cannot be stored").await {
            return Outcome::Left(e);
        }
        tries.forget(&pod.uid);
        metrics::counter!("coloc_requeue_given_up_total", "reason" => reason).increment(1);
        tracing::error!(original = %pod.key(), reason, why = %note, "requeue given up: the preempted pod is lost");
        self.event(pod_ref(&pod.namespace, &pod.name, &pod.uid), EventType::Warning, "RequeueGivenUp", note).await;
        Outcome::GivenUp
    }

    /// Removes the guard finalizer and label, if the pod is still as read (`json`'s
    /// resourceVersion); true once the guard is gone (removed now, or the pod is).
    pub async fn remove_guard(&self, pod: &Pod, json: &Value, why: &str) -> bool {
        self.try_remove_guard(pod, json, why).await.is_ok()
    }

    async fn try_remove_guard(&self, pod: &Pod, json: &Value, why: &str) -> Result<(), String> {
        let metadata = &json["metadata"];
        let finalizers: Vec<&Value> = metadata["finalizers"]
            .as_array()
            .map(|f| f.iter().filter(|f| f.as_str() != Some(GUARD)).collect())
            .unwrap_or_default();
        let patch = json!({"metadata": {
            "uid": pod.uid,
            "resourceVersion": metadata["resourceVersion"],
            "finalizers": finalizers,
            "labels": {GUARD: null},
        }});
        match pod_api(&self.client, &pod.namespace)
            .patch(&pod.name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => {
                metrics::counter!("coloc_requeue_guards_total", "change" => "removed").increment(1);
                tracing::debug!(pod = %pod.key(), why, preempted = pod.preempted, phase = ?pod.phase, deleting = pod.deletion_time.is_some(), "guard removed");
                Ok(())
            }
            Err(e) if api_code(&e) == Some(404) => Ok(()),
            Err(e) => {
                tracing::debug!(pod = %pod.key(), error = %e, "guard not removed; looked at again");
                Err(format!("guard not removed: {e}"))
            }
        }
    }
}
