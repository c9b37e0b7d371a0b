//! Extender answers, with Go field names as kube-scheduler's decoder expects them.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::value::RawValue;

#[derive(Serialize)]
struct NodeList<'a> {
    metadata: BTreeMap<(), ()>,
    items: Vec<&'a RawValue>,
}

/// `ExtenderFilterResult`.
#[derive(Serialize)]
pub struct FilterResult<'a> {
    #[serde(rename = "Nodes")]
    nodes: Option<NodeList<'a>>,
    #[serde(rename = "NodeNames")]
    node_names: Option<Vec<&'a str>>,
    #[serde(rename = "FailedNodes")]
    failed_nodes: &'a BTreeMap<String, String>,
    #[serde(rename = "FailedAndUnresolvableNodes")]
    failed_and_unresolvable: &'a BTreeMap<String, String>,
    #[serde(rename = "Error")]
    error: &'a str,
}

impl<'a> FilterResult<'a> {
    /// `nodeCacheCapable: false`: the kept Node objects, byte for byte as they came in.
    pub fn objects(
        kept: Vec<&'a RawValue>,
        failed: &'a BTreeMap<String, String>,
        unresolvable: &'a BTreeMap<String, String>,
    ) -> Self {
        FilterResult {
            nodes: Some(NodeList { metadata: BTreeMap::new(), items: kept }),
            node_names: None,
            failed_nodes: failed,
            failed_and_unresolvable: unresolvable,
            error: "",
        }
    }

    /// `nodeCacheCapable: true`: the kept names.
    pub fn names(
        kept: Vec<&'a str>,
        failed: &'a BTreeMap<String, String>,
        unresolvable: &'a BTreeMap<String, String>,
    ) -> Self {
        FilterResult {
            nodes: None,
            node_names: Some(kept),
            failed_nodes: failed,
            failed_and_unresolvable: unresolvable,
            error: "",
        }
    }
}

/// `HostPriority`; the name is borrowed from the request.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct HostPriority<'a> {
    #[serde(rename = "Host")]
    pub host: &'a str,
    #[serde(rename = "Score")]
    pub score: i64,
}

#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct MetaPod {
    #[serde(rename = "UID")]
    pub uid: String,
}

#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct MetaVictims {
    #[serde(rename = "Pods")]
    pub pods: Vec<MetaPod>,
    #[serde(rename = "NumPDBViolations")]
    pub num_pdb_violations: i64,
}

/// `ExtenderPreemptionResult`: always answered in the meta (UID) form.
#[derive(Serialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct PreemptionResult {
    #[serde(rename = "NodeNameToMetaVictims")]
    pub node_name_to_meta_victims: BTreeMap<String, MetaVictims>,
}

pub fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    to_json_sized(value, 128)
}

/// `to_json` into a buffer of the expected size: a 40 MB filter answer is written once
/// instead of being re-grown (and re-faulted) by doubling.
pub fn to_json_sized<T: Serialize>(value: &T, expected: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(expected);
    // Serializing these plain structs cannot fail: no maps with non-string keys, no I/O.
    serde_json::to_writer(&mut out, value).expect("extender answers serialize");
    out
}
