//! The lean serde view of a `batch/v1` Job (watches and snapshots): only what a
//! preemption does to the Job is decoded.

use serde::Deserialize;

use super::k8s::{nullable, FieldError, ObjectMeta};
use crate::model::{self, DisruptionAction};

/// `spec.backoffLimit` when unset.
pub const DEFAULT_BACKOFF_LIMIT: i32 = 6;

#[derive(Deserialize, Default)]
pub struct JobJson {
    #[serde(default, deserialize_with = "nullable")]
    pub metadata: ObjectMeta,
    #[serde(default, deserialize_with = "nullable")]
    pub spec: JobSpecJson,
    #[serde(default, deserialize_with = "nullable")]
    pub status: JobStatusJson,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct JobSpecJson {
    #[serde(default)]
    pub backoff_limit: Option<i32>,
    #[serde(default)]
    pub backoff_limit_per_index: Option<i32>,
    #[serde(default)]
    pub max_failed_indexes: Option<i32>,
    #[serde(default)]
    pub completion_mode: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub pod_failure_policy: PodFailurePolicyJson,
}

#[derive(Deserialize, Default)]
pub struct PodFailurePolicyJson {
    #[serde(default, deserialize_with = "nullable")]
    pub rules: Vec<PodFailurePolicyRuleJson>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct PodFailurePolicyRuleJson {
    #[serde(default, deserialize_with = "nullable")]
    pub action: String,
    #[serde(default, deserialize_with = "nullable")]
    pub on_pod_conditions: Vec<PodConditionPatternJson>,
}

#[derive(Deserialize, Default)]
pub struct PodConditionPatternJson {
    #[serde(default, rename = "type", deserialize_with = "nullable")]
    pub kind: String,
    #[serde(default)]
    pub status: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct JobStatusJson {
    #[serde(default)]
    pub failed: Option<i32>,
    #[serde(default)]
    pub failed_indexes: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub uncounted_terminated_pods: UncountedJson,
    #[serde(default, deserialize_with = "nullable")]
    pub conditions: Vec<ConditionJson>,
}

#[derive(Deserialize, Default)]
pub struct UncountedJson {
    #[serde(default, deserialize_with = "nullable")]
    pub failed: Vec<String>,
}

#[derive(Deserialize, Default)]
pub struct ConditionJson {
    #[serde(default, rename = "type", deserialize_with = "nullable")]
    pub kind: String,
    #[serde(default, deserialize_with = "nullable")]
    pub status: String,
}

impl JobJson {
    pub fn into_model(self) -> Result<model::Job, FieldError> {
        let spec = self.spec;
        let failed_indexes = match self.status.failed_indexes.as_deref() {
            None => Vec::new(),
            Some(s) => model::parse_index_ranges(s).ok_or_else(|| FieldError {
                field: "status.failedIndexes".into(),
                message: format!("not a list of indexes and ranges: {s:?}"),
            })?,
        };
        // Rules are evaluated in order; a preemption matches the first rule with an
        // onPodConditions entry for DisruptionTarget (status True, the default). Rules with
        // onExitCodes only never match a pod that was deleted.
        let on_disruption = spec
            .pod_failure_policy
            .rules
            .iter()
            .find(|r| {
                r.on_pod_conditions
                    .iter()
                    .any(|c| c.kind == "DisruptionTarget" && c.status.as_deref().unwrap_or("True") == "True")
            })
            .map(|r| {
                DisruptionAction::parse(&r.action).ok_or_else(|| FieldError {
                    field: "spec.podFailurePolicy.rules[].action".into(),
                    message: format!("unknown action {:?} (Ignore, FailJob, FailIndex, Count)", r.action),
                })
            })
            .transpose()?;
        Ok(model::Job {
            namespace: self.metadata.namespace,
            name: self.metadata.name,
            uid: self.metadata.uid,
            backoff_limit: spec.backoff_limit.unwrap_or(if spec.backoff_limit_per_index.is_some() {
                i32::MAX
            } else {
                DEFAULT_BACKOFF_LIMIT
            }),
            failed: self.status.failed.unwrap_or(0),
            uncounted_failed: self.status.uncounted_terminated_pods.failed,
            indexed: spec.completion_mode.as_deref() == Some("Indexed"),
            backoff_limit_per_index: spec.backoff_limit_per_index,
            max_failed_indexes: spec.max_failed_indexes,
            failed_indexes,
            on_disruption,
            finished: self
                .status
                .conditions
                .iter()
                .any(|c| (c.kind == "Complete" || c.kind == "Failed") && c.status == "True"),
        })
    }
}
