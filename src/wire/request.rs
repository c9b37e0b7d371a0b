//! Extender request bodies. kube-scheduler's Go types have no json tags, so keys are Go
//! field names (`Pod`, `NodeNames`, ...); Go matches them case-insensitively and so do we.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::k8s;
use crate::model;

#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("{kind}: {0}", kind = if .0.is_data() { "request JSON has a value of the wrong type" } else { "malformed request JSON" })]
    Json(#[from] serde_json::Error),
    #[error("request body is not UTF-8 JSON: {0}")]
    NotUtf8(#[from] std::str::Utf8Error),
    #[error("request has no Pod (missing or null)")]
    MissingPod,
    #[error("Pod.{0}")]
    PodField(k8s::FieldError),
    #[error("Nodes.items[{index}] ({name}).{error}")]
    NodeField { index: usize, name: String, error: k8s::FieldError },
    #[error("NodeNameToVictims[{node}].Pods[{index}].{error}")]
    VictimField { node: String, index: usize, error: k8s::FieldError },
    #[error("request has neither Nodes nor NodeNames")]
    NoNodes,
    #[error("NodeNameToVictims[{node}].Pods[{index}] ({pod}) is bound to node {actual:?}, not {node}")]
    VictimElsewhere { node: String, index: usize, pod: String, actual: String },
    #[error("node {0} is listed more than once")]
    DuplicateNode(String),
}

/// One Node object from a `Nodes` list: its raw bytes (returned unchanged if kept) and
/// the fields decisions read.
pub struct WireNode<'a> {
    pub raw: &'a RawValue,
    pub node: model::Node,
}

/// Which nodes a filter/prioritize request carries: the answer mirrors the mode.
pub enum NodeSet<'a> {
    /// `nodeCacheCapable: false`: full Node objects.
    Objects(Vec<WireNode<'a>>),
    /// `nodeCacheCapable: true`: names only.
    Names(Vec<String>),
}

impl NodeSet<'_> {
    pub fn names(&self) -> Vec<&str> {
        match self {
            NodeSet::Objects(n) => n.iter().map(|n| n.node.name.as_str()).collect(),
            NodeSet::Names(n) => n.iter().map(String::as_str).collect(),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            NodeSet::Objects(n) => n.len(),
            NodeSet::Names(n) => n.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `ExtenderArgs`: the filter and prioritize request.
pub struct ExtenderArgs<'a> {
    pub pod: model::Pod,
    pub nodes: NodeSet<'a>,
}

pub struct Victims {
    /// Decoded victims; left empty when the caller said it would not read them.
    pub pods: Vec<model::Pod>,
    /// UIDs of every proposed victim, decoded or not, in kube-scheduler's order.
    pub uids: Vec<String>,
    /// How many victims the request proposed (0: a placeholder candidate).
    pub count: usize,
    pub num_pdb_violations: i64,
}

pub struct MetaVictims {
    pub uids: Vec<String>,
    pub num_pdb_violations: i64,
}

/// The candidates kube-scheduler proposes, in the mode it sent them.
pub enum Candidates {
    /// `NodeNameToVictims` (`nodeCacheCapable: false`): full victim pods.
    Full(BTreeMap<String, Victims>),
    /// `NodeNameToMetaVictims` (`nodeCacheCapable: true`): victim UIDs only.
    Meta(BTreeMap<String, MetaVictims>),
}

impl Candidates {
    pub fn len(&self) -> usize {
        match self {
            Candidates::Full(m) => m.len(),
            Candidates::Meta(m) => m.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `ExtenderPreemptionArgs`.
pub struct PreemptArgs {
    pub pod: model::Pod,
    pub candidates: Candidates,
}

fn is(key: &str, name: &str) -> bool {
    key.eq_ignore_ascii_case(name)
}

/// Skips anything, including `null`.
fn skip<'de, A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
    map.next_value::<IgnoredAny>().map(|_| ())
}

// ---- top level -------------------------------------------------------------------------

struct RawExtenderArgs<'a> {
    pod: Option<k8s::Pod>,
    nodes: Option<RawNodeList<'a>>,
    node_names: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct RawNodeList<'a> {
    #[serde(borrow, default)]
    items: Option<Vec<&'a RawValue>>,
}

impl<'de: 'a, 'a> Deserialize<'de> for RawExtenderArgs<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = RawExtenderArgs<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an ExtenderArgs object {Pod, Nodes, NodeNames}")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = RawExtenderArgs { pod: None, nodes: None, node_names: None };
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    if is(&key, "Pod") {
                        out.pod = map.next_value()?;
                    } else if is(&key, "Nodes") {
                        out.nodes = map.next_value()?;
                    } else if is(&key, "NodeNames") {
                        out.node_names = map.next_value()?;
                    } else {
                        skip(&mut map)?;
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

pub fn decode_extender_args(body: &[u8]) -> Result<ExtenderArgs<'_>, DecodeError> {
    // One UTF-8 check for the whole body instead of one per string.
    let raw: RawExtenderArgs = serde_json::from_str(std::str::from_utf8(body)?)?;
    let pod = raw.pod.ok_or(DecodeError::MissingPod)?.into_model().map_err(DecodeError::PodField)?;
    // Objects win when both are present: they carry everything names do.
    let nodes = match (raw.nodes.and_then(|n| n.items), raw.node_names) {
        (Some(items), _) => NodeSet::Objects(
            items
                .into_iter()
                .enumerate()
                .map(|(index, raw)| {
                    let parsed: k8s::Node = serde_json::from_str(raw.get())?;
                    let name = parsed.metadata.name.clone();
                    let node = parsed
                        .into_model()
                        .map_err(|error| DecodeError::NodeField { index, name, error })?;
                    Ok(WireNode { raw, node })
                })
                .collect::<Result<_, DecodeError>>()?,
        ),
        (None, Some(names)) => NodeSet::Names(names),
        (None, None) => return Err(DecodeError::NoNodes),
    };
    let mut seen = std::collections::HashSet::with_capacity(nodes.len());
    if let Some(dup) = nodes.names().into_iter().find(|n| !seen.insert(*n)) {
        return Err(DecodeError::DuplicateNode(dup.to_string()));
    }
    Ok(ExtenderArgs { pod, nodes })
}

// ---- preempt --------------------------------------------------------------------------

struct RawPreemptArgs<'a> {
    pod: Option<k8s::Pod>,
    full: Option<BTreeMap<String, RawVictims<'a>>>,
    meta: Option<BTreeMap<String, RawMetaVictims>>,
}

/// Victim pods kept as raw JSON until someone needs them.
struct RawVictims<'a> {
    pods: Vec<&'a RawValue>,
    num_pdb_violations: i64,
}

struct RawMetaVictims {
    uids: Vec<String>,
    num_pdb_violations: i64,
}

struct MetaPod(String);

impl<'de: 'a, 'a> Deserialize<'de> for RawPreemptArgs<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = RawPreemptArgs<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an ExtenderPreemptionArgs object {Pod, NodeNameToVictims, NodeNameToMetaVictims}")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = RawPreemptArgs { pod: None, full: None, meta: None };
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    if is(&key, "Pod") {
                        out.pod = map.next_value()?;
                    } else if is(&key, "NodeNameToVictims") {
                        out.full = map.next_value()?;
                    } else if is(&key, "NodeNameToMetaVictims") {
                        out.meta = map.next_value()?;
                    } else {
                        skip(&mut map)?;
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// `{Pods, NumPDBViolations}` with pods of type `P`, keys in any case.
struct VictimsSeed<P>(std::marker::PhantomData<P>);

impl<'de, P: Deserialize<'de>> DeserializeSeed<'de> for VictimsSeed<P> {
    type Value = (Vec<P>, i64);
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        struct V<P>(std::marker::PhantomData<P>);
        impl<'de, P: Deserialize<'de>> Visitor<'de> for V<P> {
            type Value = (Vec<P>, i64);
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a victims object {Pods, NumPDBViolations}")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let (mut pods, mut n) = (Vec::new(), 0);
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    if is(&key, "Pods") {
                        pods = map.next_value::<Option<Vec<P>>>()?.unwrap_or_default();
                    } else if is(&key, "NumPDBViolations") {
                        n = map.next_value::<Option<i64>>()?.unwrap_or(0);
                    } else {
                        skip(&mut map)?;
                    }
                }
                Ok((pods, n))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for RawVictims<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (pods, num_pdb_violations) = VictimsSeed::<&'a RawValue>(std::marker::PhantomData).deserialize(d)?;
        Ok(RawVictims { pods, num_pdb_violations })
    }
}

impl<'de> Deserialize<'de> for RawMetaVictims {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (pods, num_pdb_violations) = VictimsSeed::<MetaPod>(std::marker::PhantomData).deserialize(d)?;
        Ok(RawMetaVictims { uids: pods.into_iter().map(|p| p.0).collect(), num_pdb_violations })
    }
}

impl<'de> Deserialize<'de> for MetaPod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MetaPod;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a MetaPod object {UID}")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut uid = None;
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    if is(&key, "UID") {
                        uid = map.next_value::<Option<String>>()?;
                    } else {
                        skip(&mut map)?;
                    }
                }
                uid.filter(|u| !u.is_empty())
                    .map(MetaPod)
                    .ok_or_else(|| de::Error::custom("MetaPod without a UID"))
            }
        }
        d.deserialize_map(V)
    }
}

/// A victim pod of which only the UID is read.
#[derive(Deserialize)]
struct UidOnly {
    #[serde(default, deserialize_with = "k8s::nullable")]
    metadata: UidMeta,
}

#[derive(Deserialize, Default)]
struct UidMeta {
    #[serde(default, deserialize_with = "k8s::nullable")]
    uid: String,
}

pub fn decode_preempt_args(body: &[u8]) -> Result<PreemptArgs, DecodeError> {
    decode_preempt_args_for(body, |_| true)
}

/// Like `decode_preempt_args`, but full victim pods are decoded only for nodes where
/// `needs_pods(node)` (the cluster view re-selects the others from its own pods).
pub fn decode_preempt_args_for(body: &[u8], needs_pods: impl Fn(&str) -> bool) -> Result<PreemptArgs, DecodeError> {
    let raw: RawPreemptArgs = serde_json::from_str(std::str::from_utf8(body)?)?;
    let pod = raw.pod.ok_or(DecodeError::MissingPod)?.into_model().map_err(DecodeError::PodField)?;
    // Full victims win when both are present: they carry everything UIDs do.
    let candidates = match (raw.full, raw.meta) {
        (Some(full), _) => Candidates::Full(
            full.into_iter()
                .map(|(node, v)| {
                    let count = v.pods.len();
                    if !needs_pods(&node) {
                        let uids = v
                            .pods
                            .iter()
                            .map(|raw| Ok(serde_json::from_str::<UidOnly>(raw.get())?.metadata.uid))
                            .collect::<Result<_, DecodeError>>()?;
                        return Ok((node, Victims { pods: Vec::new(), uids, count, num_pdb_violations: v.num_pdb_violations }));
                    }
                    let pods: Vec<model::Pod> = v
                        .pods
                        .into_iter()
                        .enumerate()
                        .map(|(index, raw)| {
                            let pod = serde_json::from_str::<k8s::Pod>(raw.get())?
                                .into_model()
                                .map_err(|error| DecodeError::VictimField { node: node.clone(), index, error })?;
                            match &pod.node_name {
                                Some(actual) if actual != &node => Err(DecodeError::VictimElsewhere {
                                    node: node.clone(),
                                    index,
                                    pod: pod.key(),
                                    actual: actual.clone(),
                                }),
                                _ => Ok(pod),
                            }
                        })
                        .collect::<Result<_, _>>()?;
                    let uids = pods.iter().map(|p| p.uid.clone()).collect();
                    Ok((node, Victims { pods, uids, count, num_pdb_violations: v.num_pdb_violations }))
                })
                .collect::<Result<_, DecodeError>>()?,
        ),
        (None, Some(meta)) => Candidates::Meta(
            meta.into_iter()
                .map(|(node, v)| (node, MetaVictims { uids: v.uids, num_pdb_violations: v.num_pdb_violations }))
                .collect(),
        ),
        // Both null: nothing to choose from; the answer is an empty map.
        (None, None) => Candidates::Meta(BTreeMap::new()),
    };
    Ok(PreemptArgs { pod, candidates })
}
