//! Lean serde views of Kubernetes objects as they appear in extender requests and
//! snapshots (camelCase JSON, `null` for absent values). Only the fields decisions read
//! are decoded; everything else is skipped without being built.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

use super::baseline;
use super::baseline::{Handler, Lifecycle, SecurityContext, Volume};
use crate::model::{self, HostPort, Labels, LabelsVisitor, OwnerRef, Resources, Selector, SelectorRequirement, Taint};
use crate::quantity;

/// `null` and missing both mean "default".
pub fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    #[serde(default, deserialize_with = "nullable")]
    pub namespace: String,
    #[serde(default, deserialize_with = "nullable")]
    pub uid: String,
    /// Read by watches (kube-rs resumes from it); requests and snapshots ignore it.
    #[serde(default, deserialize_with = "nullable")]
    pub resource_version: String,
    #[serde(default, deserialize_with = "nullable")]
    pub labels: Labels,
    #[serde(default, deserialize_with = "lean_annotations")]
    pub annotations: Labels,
    #[serde(default, deserialize_with = "nullable")]
    pub owner_references: Vec<OwnerReference>,
    #[serde(default)]
    pub creation_timestamp: Option<String>,
    #[serde(default)]
    pub deletion_timestamp: Option<String>,
    #[serde(default)]
    pub deletion_grace_period_seconds: Option<i64>,
    #[serde(default, deserialize_with = "nullable")]
    pub finalizers: Vec<String>,
}

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Annotations without the (often several KB) last-applied configuration, which is
/// skipped without being copied.
fn lean_annotations<'de, D: Deserializer<'de>>(d: D) -> Result<Labels, D::Error> {
    struct V;
    impl<'de> serde::de::Visitor<'de> for V {
        type Value = Labels;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map of annotations")
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(Labels::new())
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(Labels::new())
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(LabelsVisitor { skip: Some(LAST_APPLIED) })
        }
    }
    d.deserialize_option(V)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference {
    #[serde(default, deserialize_with = "nullable")]
    pub kind: String,
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    #[serde(default)]
    pub controller: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRequirements {
    #[serde(default, deserialize_with = "nullable")]
    pub requests: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerPort {
    #[serde(default)]
    pub host_port: Option<i32>,
    #[serde(default)]
    pub protocol: Option<String>,
    #[serde(default, rename = "hostIP")]
    pub host_ip: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    #[serde(default, deserialize_with = "nullable")]
    pub resources: ResourceRequirements,
    #[serde(default, deserialize_with = "nullable")]
    pub ports: Vec<ContainerPort>,
    /// `Always` on an init container makes it a sidecar that keeps running.
    #[serde(default)]
    pub restart_policy: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub security_context: SecurityContext,
    #[serde(default)]
    pub liveness_probe: Option<Handler>,
    #[serde(default)]
    pub readiness_probe: Option<Handler>,
    #[serde(default)]
    pub startup_probe: Option<Handler>,
    #[serde(default)]
    pub lifecycle: Option<Lifecycle>,
}

/// A lifecycle without handlers, for containers that have none.
static NO_HANDLER: Option<Handler> = None;

impl Container {
    /// What Pod Security's baseline reads of it.
    fn baseline(&self) -> baseline::ContainerLevel<'_> {
        let lifecycle = self.lifecycle.as_ref();
        baseline::ContainerLevel {
            security_context: &self.security_context,
            host_port: self.ports.iter().any(|p| p.host_port.is_some_and(|p| p != 0)),
            handlers: [
                &self.liveness_probe,
                &self.readiness_probe,
                &self.startup_probe,
                lifecycle.map_or(&NO_HANDLER, |l| &l.post_start),
                lifecycle.map_or(&NO_HANDLER, |l| &l.pre_stop),
            ],
        }
    }
}

impl PodSpec {
    /// The first control of Pod Security's baseline this spec (with the pod's
    /// `annotations`) exceeds, if any.
    fn beyond_baseline(&self, annotations: &Labels) -> Option<model::BaselineControl> {
        let pod = baseline::PodLevel {
            host_network: self.host_network,
            host_pid: self.host_pid,
            host_ipc: self.host_ipc,
            host_users: self.host_users,
            security_context: &self.security_context,
            volumes: &self.volumes,
        };
        let containers = self.containers.iter().chain(&self.init_containers).map(Container::baseline);
        baseline::first_exceeded(pod, containers, annotations)
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    #[serde(default, deserialize_with = "nullable")]
    pub containers: Vec<Container>,
    #[serde(default, deserialize_with = "nullable")]
    pub init_containers: Vec<Container>,
    #[serde(default, deserialize_with = "nullable")]
    pub overhead: BTreeMap<String, String>,
    #[serde(default)]
    pub priority: Option<i32>,
    #[serde(default)]
    pub priority_class_name: Option<String>,
    #[serde(default)]
    pub preemption_policy: Option<String>,
    #[serde(default)]
    pub node_name: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub scheduling_gates: Vec<SchedulingGate>,
    #[serde(default, deserialize_with = "nullable")]
    pub scheduling_group: SchedulingGroup,
    #[serde(default)]
    pub host_network: Option<bool>,
    #[serde(rename = "hostPID", default)]
    pub host_pid: Option<bool>,
    #[serde(rename = "hostIPC", default)]
    pub host_ipc: Option<bool>,
    /// `false`: the pod runs in a user namespace (baseline then allows any procMount).
    #[serde(default)]
    pub host_users: Option<bool>,
    #[serde(default, deserialize_with = "nullable")]
    pub security_context: SecurityContext,
    #[serde(default, deserialize_with = "nullable")]
    pub volumes: Vec<Volume>,
    #[serde(default)]
    pub termination_grace_period_seconds: Option<i64>,
}

/// `spec.schedulingGroup` (Kubernetes v1.36+): the pod's native PodGroup.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingGroup {
    #[serde(default)]
    pub pod_group_name: Option<String>,
}

#[derive(Deserialize)]
pub struct SchedulingGate {
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    #[serde(default)]
    pub phase: Option<String>,
    #[serde(default)]
    pub start_time: Option<String>,
    #[serde(default)]
    pub nominated_node_name: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub conditions: Vec<PodCondition>,
}

/// A pod condition: kube-scheduler's `DisruptionTarget` and the kubelet's `Ready` are read.
#[derive(Deserialize, Default)]
pub struct PodCondition {
    #[serde(rename = "type", default, deserialize_with = "nullable")]
    pub type_: String,
    #[serde(default, deserialize_with = "nullable")]
    pub status: String,
    #[serde(default, deserialize_with = "nullable")]
    pub reason: String,
}

#[derive(Deserialize, Default)]
pub struct Pod {
    #[serde(default, deserialize_with = "nullable")]
    pub metadata: ObjectMeta,
    #[serde(default, deserialize_with = "nullable")]
    pub spec: PodSpec,
    #[serde(default, deserialize_with = "nullable")]
    pub status: PodStatus,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct NodeSpec {
    #[serde(default, deserialize_with = "nullable")]
    pub taints: Vec<TaintJson>,
    #[serde(default)]
    pub unschedulable: Option<bool>,
}

#[derive(Deserialize)]
pub struct TaintJson {
    #[serde(default, deserialize_with = "nullable")]
    pub key: String,
    #[serde(default, deserialize_with = "nullable")]
    pub value: String,
    #[serde(default, deserialize_with = "nullable")]
    pub effect: String,
}

#[derive(Deserialize, Default)]
pub struct NodeStatus {
    #[serde(default, deserialize_with = "nullable")]
    pub allocatable: BTreeMap<String, String>,
}

/// Metadata of a cluster-scoped object whose labels are read (nodes, namespaces): its
/// annotations, often large, are skipped.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct NodeMeta {
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    #[serde(default, deserialize_with = "nullable")]
    pub resource_version: String,
    #[serde(default, deserialize_with = "nullable")]
    pub labels: Labels,
}

#[derive(Deserialize, Default)]
pub struct Node {
    #[serde(default, deserialize_with = "nullable")]
    pub metadata: NodeMeta,
    #[serde(default, deserialize_with = "nullable")]
    pub spec: NodeSpec,
    #[serde(default, deserialize_with = "nullable")]
    pub status: NodeStatus,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelectorJson {
    #[serde(default, deserialize_with = "nullable")]
    pub match_labels: Labels,
    #[serde(default, deserialize_with = "nullable")]
    pub match_expressions: Vec<RequirementJson>,
}

#[derive(Deserialize)]
pub struct RequirementJson {
    #[serde(default, deserialize_with = "nullable")]
    pub key: String,
    #[serde(default, deserialize_with = "nullable")]
    pub operator: String,
    #[serde(default, deserialize_with = "nullable")]
    pub values: Vec<String>,
}

#[derive(Deserialize, Default)]
pub struct PdbSpec {
    #[serde(default)]
    pub selector: Option<LabelSelectorJson>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct PdbStatus {
    #[serde(default)]
    pub disruptions_allowed: Option<i32>,
    #[serde(default)]
    pub current_healthy: Option<i32>,
    #[serde(default, deserialize_with = "nullable")]
    pub disrupted_pods: BTreeMap<String, serde::de::IgnoredAny>,
}

#[derive(Deserialize, Default)]
pub struct Pdb {
    #[serde(default, deserialize_with = "nullable")]
    pub metadata: ObjectMeta,
    #[serde(default, deserialize_with = "nullable")]
    pub spec: PdbSpec,
    #[serde(default, deserialize_with = "nullable")]
    pub status: PdbStatus,
}

/// A namespace: its name and labels (whether it opts in to requeue).
#[derive(Deserialize, Default)]
pub struct NamespaceJson {
    #[serde(default, deserialize_with = "nullable")]
    pub metadata: NodeMeta,
}

impl NamespaceJson {
    pub fn into_model(self) -> model::Namespace {
        let opt_in = model::marks::namespace_opt_in(&self.metadata.name, &self.metadata.labels);
        model::Namespace { name: self.metadata.name, opt_in }
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct PriorityClassJson {
    #[serde(default, deserialize_with = "nullable")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub value: i32,
}

/// A field whose value could not be understood, named so a person can find it.
#[derive(Debug, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

pub fn parse_time(field: &str, s: &Option<String>) -> Result<Option<model::Timestamp>, FieldError> {
    match s.as_deref() {
        None | Some("") => Ok(None),
        Some(t) => t
            .parse::<jiff::Timestamp>()
            .map(|ts| Some(ts.as_second()))
            .map_err(|e| FieldError { field: field.into(), message: format!("invalid time {t:?}: {e}") }),
    }
}

/// Converts a `ResourceList` the way NodeResourcesFit reads it. `field` names the list
/// in errors; it is only built when there is one.
pub fn resources(field: impl Fn() -> String, list: &BTreeMap<String, String>) -> Result<(Resources, i64), FieldError> {
    let mut r = Resources::default();
    let mut pods = 0;
    for (name, raw) in list {
        let q = quantity::parse(raw)
            .map_err(|e| FieldError { field: format!("{}.{name}", field()), message: e.to_string() })?;
        match name.as_str() {
            "cpu" => r.milli_cpu = q.milli_ceil(),
            "memory" => r.memory = q.value_ceil(),
            "ephemeral-storage" => r.ephemeral_storage = q.value_ceil(),
            "pods" => pods = q.value_ceil(),
            // The per-pod-verbs marker is registered ignoredByScheduler and no node offers
            // it: kube-scheduler's fit does not count it, and neither may ours.
            crate::model::marks::PER_POD_VERBS_MARKER => {}
            // Extended resources (vendor.com/x) and hugepages are counted as whole units;
            // other native names (storage, ...) are not checked by NodeResourcesFit.
            n if n.contains('/') || n.starts_with("hugepages-") => {
                r.scalar.insert(n.to_string(), q.value_ceil());
            }
            _ => {}
        }
    }
    Ok((r, pods))
}

/// A number of seconds as the model keeps it: negative as 0, past `i32::MAX` as that.
fn seconds_i32(s: i64) -> i32 {
    s.clamp(0, i32::MAX as i64) as i32
}

impl Pod {
    pub fn into_model(self) -> Result<model::Pod, FieldError> {
        let m = self.metadata;
        let spec = self.spec;
        // kube-scheduler's computePodResourceRequest: app containers and sidecars run
        // together; each ordinary init container runs alone beside the sidecars started
        // before it; the pod needs the larger of the two, plus overhead.
        let mut running = Resources::default();
        for (i, c) in spec.containers.iter().enumerate() {
            running.add(&resources(|| format!("spec.containers[{i}].resources.requests"), &c.resources.requests)?.0);
        }
        let mut sidecars = Resources::default();
        let mut init_peak = Resources::default();
        for (i, c) in spec.init_containers.iter().enumerate() {
            let (req, _) = resources(|| format!("spec.initContainers[{i}].resources.requests"), &c.resources.requests)?;
            if c.restart_policy.as_deref() == Some("Always") {
                sidecars.add(&req);
                running.add(&req);
            } else {
                let mut peak = req;
                peak.add(&sidecars);
                init_peak.max_with(&peak);
            }
        }
        running.max_with(&init_peak);
        running.add(&resources(|| "spec.overhead".into(), &spec.overhead)?.0);

        let host_ports = spec
            .containers
            .iter()
            .flat_map(|c| c.ports.iter())
            .filter_map(|p| {
                let port = p.host_port.filter(|p| *p > 0)?;
                Some(HostPort {
                    port,
                    protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                    ip: p.host_ip.clone().filter(|s| !s.is_empty()).unwrap_or_else(|| "0.0.0.0".into()),
                })
            })
            .collect();

        let disrupted = |reason: &str| {
            self.status
                .conditions
                .iter()
                .any(|c| c.type_ == "DisruptionTarget" && c.status == "True" && c.reason == reason)
        };
        let (preempted, evicted) = (disrupted("PreemptionByScheduler"), disrupted("EvictionByEvictionAPI"));
        let unready = self.status.conditions.iter().any(|c| c.type_ == "Ready" && c.status != "True");
        let unschedulable = self
            .status
            .conditions
            .iter()
            .any(|c| c.type_ == "PodScheduled" && c.status == "False" && c.reason == "Unschedulable");
        // Only a bare pod's is ever asked (requeue copies no other): an owned one pays nothing.
        let beyond_baseline = m.owner_references.is_empty().then(|| spec.beyond_baseline(&m.annotations)).flatten();
        Ok(model::Pod {
            beyond_baseline,
            last_state: None,
            spec_digest: None,
            preempted,
            evicted,
            unready,
            unschedulable,
            job_tracking: m.finalizers.iter().any(|f| f == model::TRACKING_FINALIZER),
            requeue_guarded: m.finalizers.iter().any(|f| f == crate::model::marks::GUARD),
            creation_time: parse_time("metadata.creationTimestamp", &m.creation_timestamp)?,
            deletion_time: parse_time("metadata.deletionTimestamp", &m.deletion_timestamp)?,
            grace_period: spec.termination_grace_period_seconds.map(seconds_i32),
            deletion_grace_period: m.deletion_grace_period_seconds.map(seconds_i32),
            start_time: parse_time("status.startTime", &self.status.start_time)?,
            controller: m
                .owner_references
                .iter()
                .find(|o| o.controller == Some(true))
                .map(|o| OwnerRef { kind: o.kind.clone(), name: o.name.clone() }),
            owner: match m.owner_references.iter().any(|o| o.controller == Some(true)) {
                true => None,
                false => m.owner_references.into_iter().next().map(|o| OwnerRef { kind: o.kind, name: o.name }),
            },
            name: m.name,
            namespace: m.namespace,
            uid: m.uid,
            labels: m.labels,
            annotations: m.annotations,
            priority: spec.priority,
            priority_class_name: spec.priority_class_name.filter(|s| !s.is_empty()),
            preemption_never: spec.preemption_policy.as_deref() == Some("Never"),
            node_name: spec.node_name.filter(|s| !s.is_empty()),
            nominated_node_name: self.status.nominated_node_name.filter(|s| !s.is_empty()),
            scheduling_gates: spec.scheduling_gates.into_iter().map(|g| g.name).collect(),
            scheduling_group: spec.scheduling_group.pod_group_name.filter(|s| !s.is_empty()),
            phase: self.status.phase.as_deref().map(model::Phase::from),
            requests: running,
            host_ports,
        })
    }
}

impl Node {
    pub fn into_model(self) -> Result<model::Node, FieldError> {
        let (allocatable, pods) = resources(|| "status.allocatable".into(), &self.status.allocatable)?;
        Ok(model::Node {
            name: self.metadata.name,
            labels: self.metadata.labels,
            taints: self
                .spec
                .taints
                .into_iter()
                .map(|t| Taint { key: t.key, value: t.value, effect: t.effect })
                .collect(),
            unschedulable: self.spec.unschedulable.unwrap_or(false),
            allocatable,
            allocatable_pods: pods,
        })
    }
}

impl LabelSelectorJson {
    pub fn into_model(self) -> Selector {
        Selector {
            match_labels: self.match_labels,
            match_expressions: self
                .match_expressions
                .into_iter()
                .map(|r| SelectorRequirement { key: r.key, operator: r.operator, values: r.values })
                .collect(),
        }
    }
}

impl Pdb {
    pub fn into_model(self) -> model::Pdb {
        model::Pdb {
            name: self.metadata.name,
            namespace: self.metadata.namespace,
            selector: self.spec.selector.map(LabelSelectorJson::into_model),
            disruptions_allowed: self.status.disruptions_allowed.unwrap_or(0),
            disrupted_pods: self.status.disrupted_pods.into_keys().collect(),
            current_healthy: self.status.current_healthy,
        }
    }
}

/// A PodGroup of any source: native `scheduling.k8s.io` (v1beta1, v1alpha2), coscheduling
/// `scheduling.x-k8s.io/v1alpha1` or Volcano `scheduling.volcano.sh/v1beta1`. Their specs
/// share no field names that mean different things, so one lean type reads all of them.
#[derive(Deserialize, Default)]
pub struct PodGroupJson {
    #[serde(default, deserialize_with = "nullable")]
    pub metadata: ObjectMeta,
    #[serde(default, deserialize_with = "nullable")]
    pub spec: PodGroupSpecJson,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupSpecJson {
    /// Native: `schedulingPolicy.gang.minCount` (absent with the `basic` policy).
    #[serde(default, deserialize_with = "nullable")]
    pub scheduling_policy: SchedulingPolicyJson,
    /// Coscheduling and Volcano.
    #[serde(default)]
    pub min_member: Option<i64>,
    /// Native: `Single`/`All` (v1beta1, also as `{all: {}}`), `Pod`/`PodGroup` (v1alpha2).
    #[serde(default)]
    pub disruption_mode: Option<DisruptionModeJson>,
    #[serde(default)]
    pub priority: Option<i32>,
    #[serde(default)]
    pub priority_class_name: Option<String>,
}

#[derive(Deserialize, Default)]
pub struct SchedulingPolicyJson {
    #[serde(default)]
    pub gang: Option<GangPolicyJson>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct GangPolicyJson {
    #[serde(default)]
    pub min_count: Option<i64>,
}

/// A mode name, or the v1beta1 union object (`{"all": {}}`, exactly one key set).
#[derive(Deserialize)]
#[serde(untagged)]
pub enum DisruptionModeJson {
    Name(String),
    Union(BTreeMap<String, serde::de::IgnoredAny>),
}

impl DisruptionModeJson {
    fn into_model(self) -> Result<model::DisruptionMode, FieldError> {
        let name = match self {
            DisruptionModeJson::Name(n) => n,
            DisruptionModeJson::Union(m) if m.len() == 1 => m.into_keys().next().unwrap_or_default(),
            DisruptionModeJson::Union(m) => {
                return Err(FieldError {
                    field: "spec.disruptionMode".into(),
                    message: format!("exactly one mode must be set, found {:?}", m.keys().collect::<Vec<_>>()),
                })
            }
        };
        match name.to_ascii_lowercase().as_str() {
            "" | "single" | "pod" => Ok(model::DisruptionMode::Single),
            "all" | "podgroup" => Ok(model::DisruptionMode::All),
            _ => Err(FieldError {
                field: "spec.disruptionMode".into(),
                message: format!("unknown mode {name:?} (Single, All, Pod or PodGroup)"),
            }),
        }
    }
}

impl PodGroupJson {
    pub fn into_model(self, source: model::GangSource) -> Result<model::PodGroup, FieldError> {
        let spec = self.spec;
        let (field, min) = match source {
            model::GangSource::Native => {
                ("spec.schedulingPolicy.gang.minCount", spec.scheduling_policy.gang.and_then(|g| g.min_count))
            }
            _ => ("spec.minMember", spec.min_member),
        };
        let min_count = match min {
            Some(n) if n < 0 => return Err(FieldError { field: field.into(), message: format!("{n} is negative") }),
            n => n.map(|n| n as usize),
        };
        Ok(model::PodGroup {
            source,
            namespace: self.metadata.namespace,
            name: self.metadata.name,
            min_count,
            disruption: spec.disruption_mode.map(DisruptionModeJson::into_model).transpose()?.unwrap_or_default(),
            priority: spec.priority,
            priority_class_name: spec.priority_class_name.filter(|s| !s.is_empty()),
        })
    }
}

/// Which gang source a PodGroup's API group belongs to (`apiVersion` or bare group).
pub fn pod_group_source(api_version: &str) -> Option<model::GangSource> {
    match api_version.split('/').next().unwrap_or("") {
        "scheduling.k8s.io" => Some(model::GangSource::Native),
        "scheduling.x-k8s.io" => Some(model::GangSource::Coscheduling),
        "scheduling.volcano.sh" => Some(model::GangSource::Volcano),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(metadata: &str) -> model::Pod {
        let json = format!(r#"{{"metadata":{metadata},"spec":{{"containers":[]}},"status":{{"phase":"Running"}}}}"#);
        serde_json::from_slice::<Pod>(json.as_bytes()).unwrap().into_model().unwrap()
    }

    #[test]
    fn metadata_maps_decode_without_the_last_applied_configuration() {
        let p = pod(
            r#"{"name":"a","labels":{"team":"ml","app":"w\u00e9b"},"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"big\":1}","x":"1"}}"#,
        );
        assert_eq!(p.labels.iter().collect::<Vec<_>>(), [("app", "wéb"), ("team", "ml")]);
        assert_eq!(p.annotations.iter().collect::<Vec<_>>(), [("x", "1")]);
        assert_eq!(p.phase, Some(model::Phase::Running));
        let empty = pod(r#"{"name":"b","labels":null,"annotations":null}"#);
        assert!(empty.labels.is_empty() && empty.annotations.is_empty());
        assert!(
            serde_json::from_str::<Pod>(r#"{"metadata":{"labels":{"a":1}}}"#).is_err(),
            "a label that is not a string is refused"
        );
    }

    #[test]
    fn a_pod_kube_scheduler_found_no_room_for_is_unschedulable_and_no_other() {
        let with = |conditions: &str| {
            let json = format!(r#"{{"metadata":{{"name":"a"}},"spec":{{}},"status":{{"conditions":{conditions}}}}}"#);
            serde_json::from_str::<Pod>(&json).unwrap().into_model().unwrap().unschedulable
        };
        assert!(with(r#"[{"type":"PodScheduled","status":"False","reason":"Unschedulable"}]"#));
        assert!(!with(r#"[{"type":"PodScheduled","status":"True"}]"#));
        assert!(!with(r#"[{"type":"PodScheduled","status":"False","reason":"SchedulingGated"}]"#));
        assert!(!with("null"));
    }

    // ---- Pod Security baseline: the first control a pod exceeds ----

    use model::BaselineControl as B;

    fn exceeded(spec: &str, annotations: &str) -> Option<B> {
        let json = format!(r#"{{"metadata":{{"name":"p","annotations":{annotations}}},"spec":{spec}}}"#);
        serde_json::from_str::<Pod>(&json).unwrap().into_model().unwrap().beyond_baseline
    }

    fn with_container(security_context: &str) -> String {
        format!(r#"{{"containers":[{{"name":"c","securityContext":{security_context}}}]}}"#)
    }

    /// Everything baseline allows, set explicitly: nothing is exceeded.
    #[test]
    fn a_pod_within_baseline_exceeds_nothing() {
        let within = r#"{"hostNetwork":false,"hostPID":false,"hostIPC":false,
            "securityContext":{"runAsUser":1000,"seccompProfile":{"type":"RuntimeDefault"},
                "appArmorProfile":{"type":"Localhost","localhostProfile":"p"},
                "seLinuxOptions":{"type":"container_t","level":"s0:c123,c456"},
                "windowsOptions":{"hostProcess":false},
                "sysctls":[{"name":"net.ipv4.tcp_keepalive_time","value":"60"},{"name":"net.ipv4.tcp_rmem","value":"4096 87380 6291456"}]},
            "volumes":[{"name":"v","emptyDir":{}}],
            "containers":[{"name":"c","ports":[{"containerPort":80,"hostPort":0}],
                "securityContext":{"privileged":false,"capabilities":{"drop":["ALL"],"add":["NET_BIND_SERVICE","CHOWN","SYS_CHROOT"]},
                    "procMount":"Default","seccompProfile":{"type":"Localhost","localhostProfile":"x.json"},
                    "appArmorProfile":{"type":"RuntimeDefault"},"seLinuxOptions":{"type":"container_engine_t"}},
                "livenessProbe":{"httpGet":{"path":"/","port":80}},"readinessProbe":{"tcpSocket":{"port":80,"host":""}},
                "lifecycle":{"preStop":{"exec":{"command":["true"]}}}}],
            "initContainers":[{"name":"i","securityContext":{"procMount":"Default"}}]}"#;
        let annotations = r#"{"container.apparmor.security.beta.kubernetes.io/c":"localhost/p","team":"ml"}"#;
        assert_eq!(exceeded(within, annotations), None);
        // An unmasked /proc is baseline in a user namespace.
        let user_ns = r#"{"hostUsers":false,"containers":[{"name":"c","securityContext":{"procMount":"Unmasked"}}]}"#;
        assert_eq!(exceeded(user_ns, "null"), None);
    }

    /// Each control on its own, at every place baseline looks for it.
    #[test]
    fn each_control_of_baseline_is_found_wherever_it_is_set() {
        let container = with_container;
        let init =
            |sc: &str| format!(r#"{{"containers":[],"initContainers":[{{"name":"i","securityContext":{sc}}}]}}"#);
        let pod_level = |sc: &str| format!(r#"{{"containers":[],"securityContext":{sc}}}"#);
        let probe = |which: &str, handler: &str| format!(r#"{{"containers":[{{"name":"c","{which}":{handler}}}]}}"#);
        let cases: Vec<(String, B)> = vec![
            (pod_level(r#"{"windowsOptions":{"hostProcess":true}}"#), B::HostProcess),
            (container(r#"{"windowsOptions":{"hostProcess":true}}"#), B::HostProcess),
            (r#"{"hostNetwork":true,"containers":[]}"#.into(), B::HostNamespaces),
            (r#"{"hostPID":true,"containers":[]}"#.into(), B::HostNamespaces),
            (r#"{"hostIPC":true,"containers":[]}"#.into(), B::HostNamespaces),
            (init(r#"{"privileged":true}"#), B::Privileged),
            (container(r#"{"capabilities":{"add":["NET_RAW"]}}"#), B::Capabilities),
            (container(r#"{"capabilities":{"add":["CHOWN","SYS_ADMIN"]}}"#), B::Capabilities),
            (r#"{"volumes":[{"name":"root","hostPath":{"path":"/"}}],"containers":[]}"#.into(), B::HostPathVolumes),
            (r#"{"containers":[{"ports":[{"containerPort":80,"hostPort":8080}]}]}"#.into(), B::HostPorts),
            (
                r#"{"initContainers":[{"ports":[{"containerPort":80,"hostPort":1}]}],"containers":[]}"#.into(),
                B::HostPorts,
            ),
            (pod_level(r#"{"appArmorProfile":{"type":"Unconfined"}}"#), B::AppArmor),
            (container(r#"{"appArmorProfile":{"type":"Unconfined"}}"#), B::AppArmor),
            (pod_level(r#"{"seLinuxOptions":{"type":"spc_t"}}"#), B::SeLinux),
            (container(r#"{"seLinuxOptions":{"type":"unconfined_t"}}"#), B::SeLinux),
            (init(r#"{"seLinuxOptions":{"user":"system_u"}}"#), B::SeLinux),
            (container(r#"{"seLinuxOptions":{"role":"system_r"}}"#), B::SeLinux),
            (container(r#"{"procMount":"Unmasked"}"#), B::ProcMount),
            (pod_level(r#"{"seccompProfile":{"type":"Unconfined"}}"#), B::Seccomp),
            (init(r#"{"seccompProfile":{"type":"Unconfined"}}"#), B::Seccomp),
            (pod_level(r#"{"sysctls":[{"name":"kernel.msgmax","value":"65536"}]}"#), B::Sysctls),
            (
                pod_level(
                    r#"{"sysctls":[{"name":"kernel.shm_rmid_forced","value":"1"},{"name":"net.core.somaxconn","value":"1024"}]}"#,
                ),
                B::Sysctls,
            ),
            (probe("livenessProbe", r#"{"httpGet":{"host":"10.0.0.1","port":80}}"#), B::ProbeOrLifecycleHost),
            (probe("readinessProbe", r#"{"tcpSocket":{"host":"metadata","port":80}}"#), B::ProbeOrLifecycleHost),
            (probe("startupProbe", r#"{"httpGet":{"host":"a","port":1}}"#), B::ProbeOrLifecycleHost),
            (probe("lifecycle", r#"{"postStart":{"httpGet":{"host":"a","port":1}}}"#), B::ProbeOrLifecycleHost),
            (probe("lifecycle", r#"{"preStop":{"tcpSocket":{"host":"a","port":1}}}"#), B::ProbeOrLifecycleHost),
        ];
        for (spec, want) in cases {
            assert_eq!(exceeded(&spec, "null"), Some(want), "{spec}");
        }
        let annotated = r#"{"container.apparmor.security.beta.kubernetes.io/c":"unconfined"}"#;
        assert_eq!(exceeded(&container("{}"), annotated), Some(B::AppArmor));
    }

    #[test]
    fn every_control_is_tried_and_the_first_in_the_standards_order_is_named() {
        let both = r#"{"hostNetwork":true,"containers":[{"name":"c","securityContext":{"privileged":true}}]}"#;
        assert_eq!(exceeded(both, "null"), Some(B::HostNamespaces));
        let ids: std::collections::BTreeSet<_> = B::ALL.iter().map(|c| c.id()).collect();
        assert_eq!(ids.len(), 12, "one check of pod-security-admission each");
    }
}
