//! Watched objects decoded once, straight from the API server's bytes into the lean model
//! (the same decoders requests and snapshots use), never into full k8s-openapi types.
//!
//! kube-rs watches any type that implements `Resource`; `Lean<K>` keeps only the metadata
//! kube-rs needs (name, namespace, resourceVersion) beside the decoded model. A conversion
//! failure (a bad quantity, say) is kept as an error value instead of failing the decode,
//! so one odd object cannot break a whole list: the watch logs and counts it.

use std::borrow::Cow;
use std::fmt::Debug;
use std::marker::PhantomData;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::model;
use crate::wire::k8s;

/// One watched kind: where it is served and how its JSON becomes the model.
pub trait LeanKind: Clone + Debug + Send + Sync + 'static {
    const KIND: &'static str;
    /// How logs, metrics and `/readyz` name this watch (kinds served by several API
    /// groups, like PodGroup, need more than the kind).
    const LABEL: &'static str = Self::KIND;
    const GROUP: &'static str;
    const VERSION: &'static str;
    const PLURAL: &'static str;
    type Scope;
    type Json: DeserializeOwned;
    type Model: Clone + Debug + Send + Sync + 'static;
    /// name, namespace and resourceVersion of the JSON object.
    fn meta(json: &Self::Json) -> (String, String, String);
    fn into_model(json: Self::Json) -> Result<Self::Model, String>;
    /// One object: `meta`'s triple and the model.
    fn decode<'de, D: Deserializer<'de>>(d: D) -> Result<Decoded<Self>, D::Error> {
        let json = Self::Json::deserialize(d)?;
        Ok(Decoded { meta: Self::meta(&json), model: Self::into_model(json) })
    }
}

/// What `LeanKind::decode` makes of one object.
pub struct Decoded<K: LeanKind> {
    pub meta: (String, String, String),
    pub model: Result<K::Model, String>,
}

#[derive(Clone, Debug)]
pub struct Lean<K: LeanKind> {
    meta: ObjectMeta,
    pub model: Result<K::Model, String>,
    kind: PhantomData<K>,
}

impl<K: LeanKind> Lean<K> {
    /// `namespace/name` (`/name` for cluster-scoped kinds), the view's key.
    pub fn key(&self) -> String {
        format!("{}/{}", self.meta.namespace.as_deref().unwrap_or(""), self.meta.name.as_deref().unwrap_or(""))
    }

    pub fn name(&self) -> &str {
        self.meta.name.as_deref().unwrap_or("")
    }

    pub fn namespace(&self) -> &str {
        self.meta.namespace.as_deref().unwrap_or("")
    }
}

impl<'de, K: LeanKind> Deserialize<'de> for Lean<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Decoded { meta: (name, namespace, resource_version), model } = K::decode(d)?;
        let some = |s: String| (!s.is_empty()).then_some(s);
        Ok(Lean {
            meta: ObjectMeta {
                name: some(name),
                namespace: some(namespace),
                resource_version: some(resource_version),
                ..Default::default()
            },
            model,
            kind: PhantomData,
        })
    }
}

impl<K: LeanKind> kube::Resource for Lean<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(_: &()) -> Cow<'_, str> {
        K::KIND.into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        K::GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        K::VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        K::PLURAL.into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

fn object_meta(m: &k8s::ObjectMeta) -> (String, String, String) {
    (m.name.clone(), m.namespace.clone(), m.resource_version.clone())
}

#[derive(Clone, Debug)]
pub struct PodKind;
impl LeanKind for PodKind {
    const KIND: &'static str = "Pod";
    const GROUP: &'static str = "";
    const VERSION: &'static str = "v1";
    const PLURAL: &'static str = "pods";
    type Scope = k8s_openapi::NamespaceResourceScope;
    type Json = k8s::Pod;
    type Model = model::Pod;
    fn meta(json: &k8s::Pod) -> (String, String, String) {
        object_meta(&json.metadata)
    }
    fn into_model(json: k8s::Pod) -> Result<model::Pod, String> {
        json.into_model().map_err(|e| e.to_string())
    }
    /// Keeps the bytes of a bare pod kube-scheduler marked preempted, or one marked evicted
    /// through the Eviction API (`Pod::last_state`), up to `kept::PER_POD`: requeue copies
    /// it from them, whoever evicted it and however fast it went. Such a pod and a requeue
    /// copy (label `coloc-extender.io/requeued`) also get their spec's digest
    /// (`Pod::spec_digest`), which requeue compares before it releases a copy; any other
    /// pod pays nothing. (A watch event's object is read straight from the line because the
    /// API server writes `type` before `object`, as Go orders the struct's fields; a
    /// reordered event, which serde would buffer first, is refused and the watch starts
    /// again.)
    fn decode<'de, D: Deserializer<'de>>(d: D) -> Result<Decoded<Self>, D::Error> {
        let raw = Box::<RawValue>::deserialize(d)?;
        let json: k8s::Pod = serde_json::from_str(raw.get()).map_err(serde::de::Error::custom)?;
        let meta = Self::meta(&json);
        let model = Self::into_model(json).map(|mut pod| {
            let marked_bare = (pod.preempted || pod.evicted) && pod.is_bare();
            if marked_bare || pod.labels.get(model::marks::LABEL).is_some() {
                pod.spec_digest = model::copy_spec::digest_json(raw.get());
            }
            if marked_bare && raw.get().len() <= super::kept::PER_POD {
                pod.last_state = Some(Arc::from(raw.get()));
            }
            pod
        });
        Ok(Decoded { meta, model })
    }
}

/// Pods as decisions read them and nothing more: the extender's view (`serve`), whose
/// process never copies a pod. Each event is decoded once, straight into the model: no
/// copy of its bytes, no spec digest, nothing kept of marked pods (`PodKind` keeps those,
/// for the requeue controller).
#[derive(Clone, Debug)]
pub struct DecisionPodKind;
impl LeanKind for DecisionPodKind {
    const KIND: &'static str = PodKind::KIND;
    const GROUP: &'static str = PodKind::GROUP;
    const VERSION: &'static str = PodKind::VERSION;
    const PLURAL: &'static str = PodKind::PLURAL;
    type Scope = <PodKind as LeanKind>::Scope;
    type Json = k8s::Pod;
    type Model = model::Pod;
    fn meta(json: &k8s::Pod) -> (String, String, String) {
        PodKind::meta(json)
    }
    fn into_model(json: k8s::Pod) -> Result<model::Pod, String> {
        PodKind::into_model(json)
    }
}

#[derive(Clone, Debug)]
pub struct NodeKind;
impl LeanKind for NodeKind {
    const KIND: &'static str = "Node";
    const GROUP: &'static str = "";
    const VERSION: &'static str = "v1";
    const PLURAL: &'static str = "nodes";
    type Scope = k8s_openapi::ClusterResourceScope;
    type Json = k8s::Node;
    type Model = model::Node;
    fn meta(json: &k8s::Node) -> (String, String, String) {
        (json.metadata.name.clone(), String::new(), json.metadata.resource_version.clone())
    }
    fn into_model(json: k8s::Node) -> Result<model::Node, String> {
        json.into_model().map_err(|e| e.to_string())
    }
}

#[derive(Clone, Debug)]
pub struct PdbKind;
impl LeanKind for PdbKind {
    const KIND: &'static str = "PodDisruptionBudget";
    const GROUP: &'static str = "policy";
    const VERSION: &'static str = "v1";
    const PLURAL: &'static str = "poddisruptionbudgets";
    type Scope = k8s_openapi::NamespaceResourceScope;
    type Json = k8s::Pdb;
    type Model = model::Pdb;
    fn meta(json: &k8s::Pdb) -> (String, String, String) {
        object_meta(&json.metadata)
    }
    fn into_model(json: k8s::Pdb) -> Result<model::Pdb, String> {
        Ok(json.into_model())
    }
}

#[derive(Clone, Debug)]
pub struct JobKind;
impl LeanKind for JobKind {
    const KIND: &'static str = "Job";
    const GROUP: &'static str = "batch";
    const VERSION: &'static str = "v1";
    const PLURAL: &'static str = "jobs";
    type Scope = k8s_openapi::NamespaceResourceScope;
    type Json = crate::wire::job::JobJson;
    type Model = model::Job;
    fn meta(json: &Self::Json) -> (String, String, String) {
        object_meta(&json.metadata)
    }
    fn into_model(json: Self::Json) -> Result<model::Job, String> {
        json.into_model().map_err(|e| e.to_string())
    }
}

#[derive(Clone, Debug)]
pub struct PriorityClassKind;
impl LeanKind for PriorityClassKind {
    const KIND: &'static str = "PriorityClass";
    const GROUP: &'static str = "scheduling.k8s.io";
    const VERSION: &'static str = "v1";
    const PLURAL: &'static str = "priorityclasses";
    type Scope = k8s_openapi::ClusterResourceScope;
    type Json = k8s::PriorityClassJson;
    type Model = model::PriorityClass;
    fn meta(json: &k8s::PriorityClassJson) -> (String, String, String) {
        object_meta(&json.metadata)
    }
    fn into_model(json: k8s::PriorityClassJson) -> Result<model::PriorityClass, String> {
        Ok(model::PriorityClass { name: json.metadata.name, value: json.value })
    }
}

#[derive(Clone, Debug)]
pub struct NamespaceKind;
impl LeanKind for NamespaceKind {
    const KIND: &'static str = "Namespace";
    const GROUP: &'static str = "";
    const VERSION: &'static str = "v1";
    const PLURAL: &'static str = "namespaces";
    type Scope = k8s_openapi::ClusterResourceScope;
    type Json = k8s::NamespaceJson;
    type Model = model::Namespace;
    fn meta(json: &k8s::NamespaceJson) -> (String, String, String) {
        (json.metadata.name.clone(), String::new(), json.metadata.resource_version.clone())
    }
    fn into_model(json: k8s::NamespaceJson) -> Result<model::Namespace, String> {
        Ok(json.into_model())
    }
}

/// The gang sources whose PodGroups are objects of an API (`PodGroupApi`).
pub const POD_GROUP_SOURCES: [model::GangSource; 3] =
    [model::GangSource::Native, model::GangSource::Coscheduling, model::GangSource::Volcano];

/// One PodGroup API: its group, version and the gang source it describes.
pub trait PodGroupApi: Clone + Debug + Send + Sync + 'static {
    const GROUP: &'static str;
    const VERSION: &'static str;
    /// `group/version`, as discovery is asked.
    const API_VERSION: &'static str;
    const LABEL: &'static str;
    const SOURCE: model::GangSource;
}

macro_rules! pod_group_api {
    ($name:ident, $group:literal, $version:literal, $source:ident) => {
        #[derive(Clone, Debug)]
        pub struct $name;
        impl PodGroupApi for $name {
            const GROUP: &'static str = $group;
            const VERSION: &'static str = $version;
            const API_VERSION: &'static str = concat!($group, "/", $version);
            const LABEL: &'static str = concat!("PodGroup.", $group, "/", $version);
            const SOURCE: model::GangSource = model::GangSource::$source;
        }
    };
}

pod_group_api!(NativeV1beta1, "scheduling.k8s.io", "v1beta1", Native);
pod_group_api!(NativeV1alpha2, "scheduling.k8s.io", "v1alpha2", Native);
pod_group_api!(CoschedulingV1alpha1, "scheduling.x-k8s.io", "v1alpha1", Coscheduling);
pod_group_api!(VolcanoV1beta1, "scheduling.volcano.sh", "v1beta1", Volcano);

/// A PodGroup of any of the APIs above, decoded by one lean type.
#[derive(Clone, Debug)]
pub struct PodGroupKind<A>(PhantomData<A>);
impl<A: PodGroupApi> LeanKind for PodGroupKind<A> {
    const KIND: &'static str = "PodGroup";
    const LABEL: &'static str = A::LABEL;
    const GROUP: &'static str = A::GROUP;
    const VERSION: &'static str = A::VERSION;
    const PLURAL: &'static str = "podgroups";
    type Scope = k8s_openapi::NamespaceResourceScope;
    type Json = k8s::PodGroupJson;
    type Model = model::PodGroup;
    fn meta(json: &k8s::PodGroupJson) -> (String, String, String) {
        object_meta(&json.metadata)
    }
    fn into_model(json: k8s::PodGroupJson) -> Result<model::PodGroup, String> {
        json.into_model(A::SOURCE).map_err(|e| e.to_string())
    }
}
