//! The requeue edge's lowest floor: the `Requeuer`, the writes `controller` and
//! `remove_after_0_1::finish` carry out (store a copy, release it, delete it), the Events that say so, and
//! pods as the API server serves them. Both build on it; it names neither.
//!
//! Every write is idempotent: deterministic names, 409 on create checked to be our own
//! copy (else the next of its names), JSON-patch `test` before a release, uid
//! preconditions before a delete.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{ApiResource, DeleteParams, DynamicObject, PostParams, Preconditions};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Api, Client};
use serde_json::{json, Value};

use std::sync::Arc;

use super::availability::Availability;
use super::plan::Release;
use super::retry::{Planned, Retry};
use crate::cluster::NotRecorded;
use crate::model::marks::{FROM_UID, GATE};
use crate::model::RequeueIntent;

pub struct Requeuer {
    /// Every read and write: the requeue identity, the only one admission lets create a
    /// copy, release it or delete it (`coloc-extender requeue` runs as it; `uninstall` as
    /// its own).
    pub(super) client: Client,
    recorder: Recorder,
    /// When each of the controller's failed actions may be tried again.
    pub(super) retry: Retry,
    /// Since when each action has been asked for (a replica standing by steps in late).
    pub(super) planned: Planned,
    /// Whether copies can be stored now: what decisions count on.
    pub availability: Arc<Availability>,
    /// Preemptions as the view sees them: its writes make way for kube-scheduler's.
    pub pace: Arc<super::pace::Pace>,
}

/// A create that found its name taken gives the pod there instead.
enum Created {
    New(DynamicObject),
    Found(DynamicObject),
}

/// Is `pod` a copy of the original with this UID?
fn copy_of(pod: &DynamicObject, original_uid: &str) -> bool {
    pod.metadata.annotations.as_ref().and_then(|a| a.get(FROM_UID)).map(String::as_str) == Some(original_uid)
}

/// Why a replacement was not stored: the API server's status code, if it answered.
#[derive(Debug)]
pub(super) struct StoreError {
    pub code: Option<u16>,
    pub message: String,
    /// It never will be: given up at once, for this reason (`coloc_requeue_given_up_total`).
    pub given_up: Option<&'static str>,
}

impl StoreError {
    pub(super) fn new(message: String) -> StoreError {
        StoreError { code: None, message, given_up: None }
    }

    pub(super) fn api(context: String, e: &kube::Error) -> StoreError {
        StoreError { code: api_code(e), message: format!("{context}: {e}"), given_up: None }
    }

    /// A copy that can never be stored, for `reason`.
    pub(super) fn for_good(reason: &'static str, message: String) -> StoreError {
        StoreError { code: None, message, given_up: Some(reason) }
    }
}

/// A copy stored, under the name given.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Stored {
    Created(String),
    /// A retry, or the other replica, stored it already.
    Existed(String),
}

impl Stored {
    /// The `outcome` label of `coloc_requeue_replacements_total`.
    pub(super) fn outcome(&self) -> &'static str {
        match self {
            Stored::Created(_) => "created",
            Stored::Existed(_) => "existed",
        }
    }

    pub(super) fn name(&self) -> &str {
        match self {
            Stored::Created(n) | Stored::Existed(n) => n,
        }
    }
}

pub fn pod_resource() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&())
}

pub fn pod_api(client: &Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &pod_resource())
}

pub(super) fn pod_ref(namespace: &str, name: &str, uid: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(namespace.into()),
        name: Some(name.into()),
        uid: (!uid.is_empty()).then(|| uid.into()),
        ..Default::default()
    }
}

/// A listed pod as JSON (what a replacement is copied from) and as the model.
pub fn decoded(object: &DynamicObject) -> Option<(Value, crate::model::Pod)> {
    let json = serde_json::to_value(object).ok()?;
    let pod = serde_json::from_value::<crate::wire::k8s::Pod>(json.clone()).ok()?.into_model().ok()?;
    Some((json, pod))
}

pub fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Every reason `give_up::give_up_after` may give, `plan::uncopied`'s and the copy's own.
pub const GIVEN_UP_REASONS: &[&str] = &[
    "max_attempts",
    "namespace_not_opted_in",
    "beyond_baseline",
    "name_taken",
    "state_not_kept",
    "namespace_terminating",
    "service_account_missing",
    "priority_class_missing",
    "pod_security",
    "forbidden",
    "namespace_missing",
    "invalid",
    "retries_exhausted",
];

/// Registers requeue's series at zero, so an alert on their increase sees the first one.
pub fn register_metrics() {
    for reason in GIVEN_UP_REASONS {
        metrics::counter!("coloc_requeue_given_up_total", "reason" => *reason).absolute(0);
    }
    metrics::gauge!("coloc_requeue_guards_left").set(0.0);
    for after in ["original_gone", "original_stuck"] {
        metrics::counter!("coloc_requeue_released_total", "after" => after).absolute(0);
    }
    metrics::gauge!("coloc_requeue_copies_waiting").set(0.0);
    for reason in [NotRecorded::NoRecord, NotRecorded::OtherName, NotRecorded::SpecDiffers] {
        metrics::counter!("coloc_requeue_unrecorded_copies_total", "reason" => reason.reason()).absolute(0);
    }
    metrics::gauge!("coloc_requeue_kept_bytes").set(0.0);
    metrics::gauge!("coloc_requeue_kept_states").set(0.0);
    metrics::counter!("coloc_requeue_copies_from_get_total").absolute(0);
}

impl Requeuer {
    /// `instance` names this replica in Events (the pod name, typically); `copies`: it
    /// stores copies of preempted pods (`requeue`, unless `--copies=false`).
    pub fn new(client: Client, instance: Option<String>, copies: bool) -> Requeuer {
        register_metrics();
        let recorder = Recorder::new(client.clone(), crate::events::kube::reporter(instance));
        let availability = Arc::new(Availability::new(copies));
        Requeuer {
            client,
            recorder,
            retry: Default::default(),
            planned: Default::default(),
            availability,
            pace: Default::default(),
        }
    }

    /// Creates the replacement `manifest` of `intent` under `intent.replacement`, or the
    /// next of its names where a pod that is not its copy holds one; one that exists
    /// already counts if it is the live replacement of the same original (a retry, the
    /// other replica).
    pub(super) async fn create_replacement(
        &self,
        intent: &RequeueIntent,
        manifest: Value,
    ) -> Result<Stored, StoreError> {
        let names = crate::model::marks::copy_names(&intent.replacement, &intent.uid);
        let from = names.iter().position(|n| *n == intent.replacement).unwrap_or(0);
        let names = match names.get(from) {
            Some(_) => names[from..].to_vec(),
            None => vec![intent.replacement.clone()],
        };
        self.create_under(intent, manifest, &names).await
    }

    /// Creates `manifest` under the first of `names` no pod holds: a pod there that is not
    /// the copy of `intent`'s original (another `requeued-from-uid`, or none) passes to the
    /// next; all taken, the copy is given up (`name_taken`).
    pub(super) async fn create_under(
        &self,
        intent: &RequeueIntent,
        mut manifest: Value,
        names: &[String],
    ) -> Result<Stored, StoreError> {
        for name in names {
            manifest["metadata"]["name"] = json!(name);
            match self.create_or_find(&intent.namespace, name, manifest.clone()).await? {
                Created::New(_) => return Ok(Stored::Created(name.clone())),
                // Ours: a retry, the other replica.
                Created::Found(existing) if copy_of(&existing, &intent.uid) => {
                    return match existing.metadata.deletion_timestamp {
                        None => Ok(Stored::Existed(name.clone())),
                        Some(_) => Err(StoreError::new(format!("{name}, this pod's copy, is being deleted"))),
                    };
                }
                Created::Found(_) => {
                    tracing::warn!(original = %intent.original_key(), name, "requeue: a pod that is not the copy holds its name; the next one");
                }
            }
        }
        Err(StoreError::for_good(
            "name_taken",
            format!("every name its copy may take ({}) is held by a pod that is not its copy", names.join(", ")),
        ))
    }

    /// Creates `manifest` as `name`; where a
    /// pod of that name exists already, reads it for the caller to tell whose it is.
    async fn create_or_find(&self, namespace: &str, name: &str, manifest: Value) -> Result<Created, StoreError> {
        let object: DynamicObject = serde_json::from_value(manifest).map_err(|e| StoreError::new(e.to_string()))?;
        match pod_api(&self.client, namespace).create(&PostParams::default(), &object).await {
            Ok(created) => Ok(Created::New(created)),
            Err(e) if api_code(&e) == Some(409) => pod_api(&self.client, namespace)
                .get(name)
                .await
                .map(Created::Found)
                .map_err(|e| StoreError::api(format!("{name} exists but cannot be read"), &e)),
            Err(e) => Err(StoreError::api(format!("cannot create {name}"), &e)),
        }
    }

    /// Stores the copy of the evicted original `json` now: `uninstall`.
    pub async fn store_copy(&self, json: &Value, intent: &RequeueIntent) -> Result<(), String> {
        let manifest = super::replacement::build(json, intent).map_err(|e| e.to_string())?;
        self.create_replacement(intent, manifest).await.map(|_| ()).map_err(|e| e.message)
    }

    /// Stores `twin` (a copy of `copy` under another scheduler, gated), released where
    /// `released`, then deletes `copy`: `uninstall`. A twin stored by an earlier run is
    /// taken as stored, only if it is this one: the same original, the same spec (a pod
    /// another identity put under its name is never released for it). Returns the twin's
    /// name.
    pub async fn store_twin(&self, copy: &crate::model::Pod, twin: Value, released: bool) -> Result<String, String> {
        let name = twin["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let from_uid = copy.annotations.get(FROM_UID).unwrap_or_default();
        let spec = crate::model::copy_spec::digest(&twin);
        let same_spec =
            |o: &DynamicObject| serde_json::to_value(o).ok().and_then(|v| crate::model::copy_spec::digest(&v)) == spec;
        let stored = match self.create_or_find(&copy.namespace, &name, twin).await.map_err(|e| e.message)? {
            Created::New(o) => o,
            Created::Found(o) if copy_of(&o, from_uid) && same_spec(&o) => o,
            Created::Found(_) => return Err(format!("a pod named {name} exists and is not this copy's twin")),
        };
        if released {
            let (_, model) = decoded(&stored).ok_or_else(|| format!("cannot read {name}"))?;
            self.release_now(&model).await?;
        }
        self.delete(&copy.namespace, &copy.name, &copy.uid, "moved to another scheduler").await?;
        Ok(name)
    }

    /// Releases `replacement` now: `uninstall`, once it checked it against its original.
    pub async fn release_now(&self, replacement: &crate::model::Pod) -> Result<(), String> {
        self.release(&Release::of(replacement)).await
    }

    /// Deletes the gated `replacement` now: `uninstall`.
    pub async fn delete_now(&self, replacement: &crate::model::Pod) -> Result<(), String> {
        self.delete(&replacement.namespace, &replacement.name, &replacement.uid, "uninstall").await
    }

    pub(super) async fn release(&self, r: &Release) -> Result<(), String> {
        let remaining: Vec<Value> = r.gates.iter().filter(|g| *g != GATE).map(|g| json!({"name": g})).collect();
        let seen: Vec<Value> = r.gates.iter().map(|g| json!({"name": g})).collect();
        // The tests make a concurrent release (the other replica) or a recreated pod a no-op.
        let patch = json!([
            {"op": "test", "path": "/metadata/uid", "value": r.uid},
            {"op": "test", "path": "/spec/schedulingGates", "value": seen},
            {"op": "replace", "path": "/spec/schedulingGates", "value": remaining},
        ]);
        let path = format!("/api/v1/namespaces/{}/pods/{}", r.namespace, r.name);
        let request = axum::http::Request::patch(path)
            .header("Content-Type", "application/json-patch+json")
            .body(patch.to_string().into_bytes());
        let result = match request {
            Ok(req) => self.client.request_text(req).await,
            Err(e) => return Err(format!("cannot build the release request: {e}")),
        };
        match result {
            Ok(_) => {
                let after = if r.stuck.is_some() { "original_stuck" } else { "original_gone" };
                metrics::counter!("coloc_requeue_released_total", "after" => after).increment(1);
                tracing::info!(replacement = %format!("{}/{}", r.namespace, r.name), original = %r.from_pod, after, "requeue released");
                // One Event per requeued pod, on the pod that stays (the original is gone).
                let (type_, note) = match &r.stuck {
                    None => (
                        EventType::Normal,
                        format!(
                            "requeued from {} ({}) after its eviction, attempt {}",
                            r.from_pod, r.from_uid, r.attempt
                        ),
                    ),
                    Some(why) => (
                        EventType::Warning,
                        format!("requeued from {} ({}), attempt {}, although {why}", r.from_pod, r.from_uid, r.attempt),
                    ),
                };
                self.event(pod_ref(&r.namespace, &r.name, &r.uid), type_, "Requeued", note).await;
                Ok(())
            }
            Err(e) if matches!(api_code(&e), Some(404 | 409 | 422)) => {
                tracing::debug!(replacement = %r.name, error = %e, "release skipped: released or changed meanwhile");
                Ok(())
            }
            Err(e) => Err(format!("cannot release requeue replacement {}/{}: {e}", r.namespace, r.name)),
        }
    }

    pub(super) async fn delete(&self, namespace: &str, name: &str, uid: &str, reason: &str) -> Result<(), String> {
        let params = DeleteParams {
            preconditions: Some(Preconditions { uid: Some(uid.into()), resource_version: None }),
            ..Default::default()
        };
        match pod_api(&self.client, namespace).delete(name, &params).await {
            Ok(_) => {
                metrics::counter!("coloc_requeue_cleaned_total").increment(1);
                tracing::info!(replacement = %format!("{namespace}/{name}"), reason, "requeue replacement deleted");
                Ok(())
            }
            Err(e) if matches!(api_code(&e), Some(404 | 409)) => Ok(()),
            Err(e) => Err(format!("cannot delete requeue replacement {namespace}/{name}: {e}")),
        }
    }

    pub(super) async fn event(&self, regarding: ObjectReference, type_: EventType, reason: &str, note: String) {
        let event = Event { type_, reason: reason.into(), note: Some(note), action: "Requeue".into(), secondary: None };
        match self.recorder.publish(&event, &regarding).await {
            Ok(()) => metrics::counter!("coloc_requeue_events_total").increment(1),
            Err(e) => tracing::warn!(pod = ?regarding.name, error = %e, "cannot record requeue event"),
        }
    }
}
