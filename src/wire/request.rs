//! Extender request bodies. kube-scheduler's Go types have no json tags, so keys are Go
//! field names (`Pod`, `NodeNames`, ...); Go matches them case-insensitively and so do we.
//!
//! Decoding is strict where leniency would hide a broken or hostile client: an object is
//! never read from an array (serde's derive would decode `[..]` positionally), a node key
//! is never listed twice, `NumPDBViolations` is never negative and every victim has a UID.
//! Error messages never quote more than about [`QUOTE_LIMIT`] bytes of the input.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};

use serde::Deserialize;
use serde_json::value::RawValue;

use super::bounds::Bounds;
use super::error::{DecodeError, ItemAt, FULL, META};
use super::k8s;
use super::seeds::{self, Entries, ExtenderArgsSeed, FullPods, PreemptArgsSeed, UidOnly};
use super::strict;
use crate::model;

use super::error::Clip;

/// One Node object from a `Nodes` list: its raw bytes (returned unchanged if kept), its
/// name, and the fields decisions read, decoded only where the cluster view does not hold
/// the node (decisions read the view's Node otherwise).
pub struct WireNode<'a> {
    pub raw: &'a RawValue,
    pub name: String,
    pub node: Option<model::Node>,
}

/// Which nodes a filter/prioritize request carries: the answer mirrors the mode.
pub enum NodeSet<'a> {
    /// `nodeCacheCapable: false`: full Node objects.
    Objects(Vec<WireNode<'a>>),
    /// `nodeCacheCapable: true`: names only, borrowed from the body where they can be.
    Names(Vec<Cow<'a, str>>),
}

impl NodeSet<'_> {
    pub fn names(&self) -> Vec<&str> {
        match self {
            NodeSet::Objects(n) => n.iter().map(|n| n.name.as_str()).collect(),
            NodeSet::Names(n) => n.iter().map(|n| n.as_ref()).collect(),
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
    /// UIDs of every proposed victim, decoded or not, in kube-scheduler's order; each
    /// once (a repeated victim is kept where it first appears).
    pub uids: Vec<String>,
    /// How many distinct victims the request proposed (0: a placeholder candidate).
    pub count: usize,
    pub num_pdb_violations: i64,
}

/// A candidate's victims as `NodeNameToMetaVictims` sends them (its `MetaVictims`): UIDs.
pub struct VictimUids {
    /// Victim UIDs in kube-scheduler's order, each once.
    pub uids: Vec<String>,
    pub num_pdb_violations: i64,
}

/// The candidates kube-scheduler proposes, in the mode it sent them.
pub enum Candidates {
    /// `NodeNameToVictims` (`nodeCacheCapable: false`): full victim pods.
    Full(BTreeMap<String, Victims>),
    /// `NodeNameToMetaVictims` (`nodeCacheCapable: true`): victim UIDs only.
    Meta(BTreeMap<String, VictimUids>),
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

/// Just the name of an object, read leniently: only to name an item that failed to decode.
#[derive(Deserialize)]
struct Named {
    #[serde(default)]
    metadata: Option<NamedMeta>,
}

#[derive(Deserialize)]
struct NamedMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
}

/// `metadata.name` (with the namespace, `ns/name`, if `with_namespace` and there is
/// one) of an item that failed to decode, if it can be read at all.
fn name_of(raw: &RawValue, with_namespace: bool) -> Option<String> {
    let meta = serde_json::from_str::<Named>(raw.get()).ok()?.metadata?;
    let name = meta.name.filter(|n| !n.is_empty())?;
    Some(match meta.namespace.filter(|ns| with_namespace && !ns.is_empty()) {
        Some(ns) => format!("{ns}/{name}"),
        None => name,
    })
}

pub fn decode_extender_args(body: &[u8]) -> Result<ExtenderArgs<'_>, DecodeError> {
    decode_extender_args_within(body, &Bounds::default())
}

/// `decode_extender_args` under the request's caps and cancel flag.
pub fn decode_extender_args_within<'a>(body: &'a [u8], bounds: &Bounds) -> Result<ExtenderArgs<'a>, DecodeError> {
    decode_extender_args_for(body, |_| false, bounds)
}

/// `decode_extender_args_within`, reading only the name of each Node object the cluster
/// view holds (`held`): decisions read the view's Node, and the object's bytes go back as
/// they came. The rest are decoded whole, and checked.
pub fn decode_extender_args_for<'a>(
    body: &'a [u8],
    held: impl Fn(&str) -> bool,
    bounds: &Bounds,
) -> Result<ExtenderArgs<'a>, DecodeError> {
    let raw = seeds::parse(body, ExtenderArgsSeed(bounds), bounds)?;
    let pod = raw.pod.ok_or(DecodeError::MissingPod)?.into_model().map_err(DecodeError::PodField)?;
    // Objects win when both are present: they carry everything names do.
    let (nodes, list) = match (raw.node_items, raw.node_names) {
        (Some(items), _) => (
            NodeSet::Objects(
                items
                    .into_iter()
                    .enumerate()
                    .map(|(index, raw)| {
                        bounds.check()?;
                        if let Some(name) = super::first_name::first_name(raw.get()).filter(|n| held(n)) {
                            return Ok(WireNode { raw, name, node: None });
                        }
                        let parsed: k8s::Node = strict::from_str(raw.get()).map_err(|error| DecodeError::Item {
                            at: ItemAt::Node { index },
                            name: name_of(raw, false),
                            error,
                        })?;
                        let name = parsed.metadata.name.clone();
                        let node = parsed.into_model().map_err(|error| DecodeError::NodeField {
                            index,
                            name: name.clone(),
                            error,
                        })?;
                        Ok(WireNode { raw, name, node: Some(node) })
                    })
                    .collect::<Result<_, DecodeError>>()?,
            ),
            "Nodes.items",
        ),
        (None, Some(names)) => (NodeSet::Names(names.into_iter().map(|n| n.0).collect()), "NodeNames"),
        (None, None) => return Err(DecodeError::NoNodes),
    };
    let mut seen = HashSet::with_capacity_and_hasher(nodes.len(), foldhash::fast::RandomState::default());
    if let Some(dup) = nodes.names().into_iter().find(|n| !seen.insert(*n)) {
        return Err(DecodeError::DuplicateNode { node: dup.to_string(), list });
    }
    Ok(ExtenderArgs { pod, nodes })
}

// ---- preempt --------------------------------------------------------------------------

/// A preempt map's entries as a map; a node listed twice is an error, as in filter.
fn into_map<P, T>(
    entries: Entries<P>,
    list: &'static str,
    mut f: impl FnMut(&str, seeds::Listed<P>) -> Result<T, DecodeError>,
) -> Result<BTreeMap<String, T>, DecodeError> {
    let mut out = BTreeMap::new();
    for (node, v) in entries {
        match out.entry(node) {
            std::collections::btree_map::Entry::Occupied(e) => {
                return Err(DecodeError::DuplicateNode { node: e.key().clone(), list })
            }
            std::collections::btree_map::Entry::Vacant(e) => {
                let value = f(e.key(), v)?;
                e.insert(value);
            }
        }
    }
    Ok(out)
}
fn check_violations(map: &'static str, node: &str, value: i64) -> Result<i64, DecodeError> {
    if value < 0 {
        return Err(DecodeError::NegativePdbViolations { map, node: node.to_string(), value });
    }
    Ok(value)
}

/// A victim must name its pod: an empty UID is an error naming node and index.
fn check_uid(map: &'static str, node: &str, index: usize, uid: &str) -> Result<(), DecodeError> {
    if uid.is_empty() {
        return Err(DecodeError::VictimWithoutUid { map, node: node.to_string(), index });
    }
    Ok(())
}

/// Keeps the first of each UID, in order (kube-scheduler never repeats a victim; a
/// repeat would be answered, and counted, twice).
fn keep_first<T>(map: &'static str, node: &str, items: &mut Vec<T>, uid: impl Fn(&T) -> &str) {
    if items.len() < 2 {
        return;
    }
    // The usual case, no repeat, without hashing every UID: equal UIDs have equal
    // fingerprints, so distinct fingerprints prove there is none.
    let mut small = [0u64; 64];
    let mut large = Vec::new();
    let prints = if items.len() <= small.len() {
        &mut small[..items.len()]
    } else {
        large.resize(items.len(), 0);
        &mut large[..]
    };
    for (p, x) in prints.iter_mut().zip(items.iter()) {
        *p = fingerprint(uid(x));
    }
    prints.sort_unstable();
    if prints.windows(2).all(|w| w[0] != w[1]) {
        return;
    }
    let mut seen = HashSet::with_capacity(items.len());
    let keep: Vec<bool> = items.iter().map(|x| seen.insert(uid(x))).collect();
    drop(seen);
    let repeated = keep.iter().filter(|k| !**k).count();
    if repeated > 0 {
        let mut keep = keep.into_iter();
        items.retain(|_| keep.next().unwrap_or(true));
        tracing::warn!(node = %Clip(node), repeated, "{map} lists the same victim more than once: each is kept once");
    }
}

/// Length and first and last 8 bytes (random in a Kubernetes UID).
fn fingerprint(s: &str) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let b = s.as_bytes();
    let len = (b.len() as u64).wrapping_mul(K);
    match (b.first_chunk::<8>(), b.last_chunk::<8>()) {
        (Some(head), Some(tail)) => u64::from_le_bytes(*head) ^ u64::from_le_bytes(*tail).rotate_left(31) ^ len,
        _ => b.iter().fold(0u64, |a, &x| a << 8 | u64::from(x)) ^ len,
    }
}

pub fn decode_preempt_args(body: &[u8]) -> Result<PreemptArgs, DecodeError> {
    decode_preempt_args_for(body, |_| true, &Bounds::default())
}

/// Like `decode_preempt_args`, but full victim pods are decoded only for nodes where
/// `needs_pods(node)` (the cluster view re-selects the others from its own pods), under the
/// request's caps and cancel flag.
pub fn decode_preempt_args_for(
    body: &[u8],
    needs_pods: impl Fn(&str) -> bool,
    bounds: &Bounds,
) -> Result<PreemptArgs, DecodeError> {
    // One pass reads the UIDs of victims the view holds; a body that fails it is read
    // again, every victim raw first, so that the error names the item (and its pod).
    match decode_preempt(body, &needs_pods, bounds, true) {
        Err(DecodeError::Json(_)) => decode_preempt(body, &needs_pods, &bounds.afresh(), false),
        decoded => decoded,
    }
}

fn decode_preempt(
    body: &[u8],
    needs_pods: &dyn Fn(&str) -> bool,
    bounds: &Bounds,
    uids_in_place: bool,
) -> Result<PreemptArgs, DecodeError> {
    let raw = seeds::parse(body, PreemptArgsSeed { bounds, needs_pods, uids_in_place }, bounds)?;
    let pod = raw.pod.ok_or(DecodeError::MissingPod)?.into_model().map_err(DecodeError::PodField)?;
    // Full victims win when both are present: they carry everything UIDs do.
    let candidates = match (raw.full, raw.meta) {
        (Some(full), _) => Candidates::Full(into_map(full, FULL, |node, v| {
            bounds.check()?;
            let num_pdb_violations = check_violations(FULL, node, v.num_pdb_violations)?;
            let item_error = |index: usize, raw: &RawValue, error| DecodeError::Item {
                at: ItemAt::Victim { node: node.to_string(), index },
                name: name_of(raw, true),
                error,
            };
            let victims = match v.pods {
                FullPods::Uids(mut uids) => {
                    for (index, uid) in uids.iter().enumerate() {
                        check_uid(FULL, node, index, uid)?;
                    }
                    keep_first(FULL, node, &mut uids, |u| u);
                    Victims { pods: Vec::new(), count: uids.len(), uids, num_pdb_violations }
                }
                FullPods::Raw(raws) if !needs_pods(node) => {
                    let mut uids = Vec::with_capacity(raws.len());
                    for (index, raw) in raws.into_iter().enumerate() {
                        let uid =
                            strict::from_str::<UidOnly>(raw.get()).map_err(|e| item_error(index, raw, e))?.metadata.uid;
                        check_uid(FULL, node, index, &uid)?;
                        uids.push(uid);
                    }
                    keep_first(FULL, node, &mut uids, |u| u);
                    Victims { pods: Vec::new(), count: uids.len(), uids, num_pdb_violations }
                }
                FullPods::Raw(raws) => {
                    let mut pods = Vec::with_capacity(raws.len());
                    for (index, raw) in raws.into_iter().enumerate() {
                        bounds.check()?;
                        let pod = strict::from_str::<k8s::Pod>(raw.get())
                            .map_err(|e| item_error(index, raw, e))?
                            .into_model()
                            .map_err(|error| DecodeError::VictimField { node: node.to_string(), index, error })?;
                        if let Some(actual) = pod.node_name.as_ref().filter(|actual| *actual != node) {
                            return Err(DecodeError::VictimElsewhere {
                                node: node.to_string(),
                                index,
                                pod: pod.key(),
                                actual: actual.clone(),
                            });
                        }
                        check_uid(FULL, node, index, &pod.uid)?;
                        pods.push(pod);
                    }
                    keep_first(FULL, node, &mut pods, |p| &p.uid);
                    let uids: Vec<String> = pods.iter().map(|p| p.uid.clone()).collect();
                    Victims { pods, count: uids.len(), uids, num_pdb_violations }
                }
            };
            Ok(victims)
        })?),
        (None, Some(meta)) => Candidates::Meta(into_map(meta, META, |node, v| {
            let num_pdb_violations = check_violations(META, node, v.num_pdb_violations)?;
            if let Some(index) = v.pods.iter().position(|u| u.0.as_deref().is_none_or(str::is_empty)) {
                check_uid(META, node, index, "")?;
            }
            let mut uids: Vec<String> = v.pods.into_iter().map(|p| p.0.unwrap_or_default()).collect();
            keep_first(META, node, &mut uids, |u| u);
            Ok(VictimUids { uids, num_pdb_violations })
        })?),
        // Both null: nothing to choose from; the answer is an empty map.
        (None, None) => Candidates::Meta(BTreeMap::new()),
    };
    Ok(PreemptArgs { pod, candidates })
}
