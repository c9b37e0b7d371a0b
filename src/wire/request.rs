//! Extender request bodies. kube-scheduler's Go types have no json tags, so keys are Go
//! field names (`Pod`, `NodeNames`, ...); Go matches them case-insensitively and so do we.
//!
//! Decoding is strict where leniency would hide a broken or hostile client: an object is
//! never read from an array (serde's derive would decode `[..]` positionally), a node key
//! is never listed twice, `NumPDBViolations` is never negative and every victim has a UID.
//! Error messages never quote more than about [`QUOTE_LIMIT`] bytes of the input.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::fmt::{self, Write as _};

use serde::Deserialize;
use serde_json::value::RawValue;

use super::bounds::{Bounds, Stop};
use super::k8s;
use super::seeds::{self, Entries, ExtenderArgsSeed, PreemptArgsSeed, FULL, META};
use super::strict;
use crate::model;

/// At most this many bytes of any one piece of input (a name, a quoted value) are quoted
/// in an error message.
pub const QUOTE_LIMIT: usize = 200;
/// No error message is longer than this (plus a short "… (N bytes)" note).
pub const MESSAGE_LIMIT: usize = 1024;

#[derive(Debug)]
pub enum DecodeError {
    /// The body as a whole: malformed JSON, or a value of the wrong type outside the
    /// items decoded one by one (positions are the body's).
    Json(serde_json::Error),
    NotUtf8(std::str::Utf8Error),
    MissingPod,
    PodField(k8s::FieldError),
    NodeField { index: usize, name: String, error: k8s::FieldError },
    VictimField { node: String, index: usize, error: k8s::FieldError },
    /// A `Nodes.items[i]` or `NodeNameToVictims[node].Pods[i]` that could not be decoded;
    /// `error`'s position is relative to the item.
    Item { at: ItemAt, name: Option<String>, error: serde_json::Error },
    NoNodes,
    VictimElsewhere { node: String, index: usize, pod: String, actual: String },
    /// `list` names where: `NodeNames`, `Nodes.items`, `NodeNameToVictims`, ...
    DuplicateNode { node: String, list: &'static str },
    NegativePdbViolations { map: &'static str, node: String, value: i64 },
    VictimWithoutUid { map: &'static str, node: String, index: usize },
    /// A list over its cap (`flag` raises it): refused before it is held in memory.
    TooMany { what: String, cap: usize, flag: &'static str },
    /// The answer is no longer wanted (timed out, client gone): decoding stopped.
    Cancelled,
}

impl From<Stop> for DecodeError {
    fn from(stop: Stop) -> Self {
        match stop {
            Stop::TooMany { what, cap, flag } => DecodeError::TooMany { what, cap, flag },
            Stop::Cancelled => DecodeError::Cancelled,
        }
    }
}

/// Where an item decoded on its own sits in the request.
#[derive(Debug, Clone)]
pub enum ItemAt {
    Node { index: usize },
    Victim { node: String, index: usize },
}

impl fmt::Display for ItemAt {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            ItemAt::Node { index } => write!(f, "Nodes.items[{index}]"),
            ItemAt::Victim { node, index } => write!(f, "{FULL}[{}].Pods[{index}]", Clip(node)),
        }
    }
}


impl From<serde_json::Error> for DecodeError {
    fn from(e: serde_json::Error) -> Self {
        DecodeError::Json(e)
    }
}

impl From<std::str::Utf8Error> for DecodeError {
    fn from(e: std::str::Utf8Error) -> Self {
        DecodeError::NotUtf8(e)
    }
}

impl std::error::Error for DecodeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DecodeError::Json(e) | DecodeError::Item { error: e, .. } => Some(e),
            DecodeError::NotUtf8(e) => Some(e),
            DecodeError::PodField(e) | DecodeError::NodeField { error: e, .. } | DecodeError::VictimField { error: e, .. } => Some(e),
            _ => None,
        }
    }
}

impl DecodeError {
    /// The message before input quotes are clipped.
    fn write_unclipped(&self, out: &mut String) -> fmt::Result {
        match self {
            DecodeError::Json(e) => {
                let kind = if e.is_data() { "request JSON has a value of the wrong type" } else { "malformed request JSON" };
                write!(out, "{kind}: {e}")
            }
            DecodeError::NotUtf8(e) => write!(out, "request body is not UTF-8 JSON: {e}"),
            DecodeError::MissingPod => out.write_str("request has no Pod (missing or null)"),
            DecodeError::PodField(e) => write!(out, "Pod.{}", FieldMsg(e)),
            DecodeError::NodeField { index, name, error } => write!(out, "Nodes.items[{index}] ({}).{}", Clip(name), FieldMsg(error)),
            DecodeError::VictimField { node, index, error } => write!(out, "{FULL}[{}].Pods[{index}].{}", Clip(node), FieldMsg(error)),
            DecodeError::Item { at, name, error } => {
                write!(out, "{at}")?;
                if let Some(name) = name {
                    write!(out, " ({})", Clip(name))?;
                }
                let text = error.to_string();
                let (line, column) = (error.line(), error.column());
                let at_suffix = format!(" at line {line} column {column}");
                match text.strip_suffix(&at_suffix) {
                    Some(msg) if line == 1 => write!(out, ": {msg} at column {column} of the item"),
                    Some(msg) => write!(out, ": {msg} at line {line} column {column} of the item"),
                    None => write!(out, ": {text}"),
                }
            }
            DecodeError::NoNodes => out.write_str("request has neither Nodes nor NodeNames"),
            DecodeError::VictimElsewhere { node, index, pod, actual } => write!(
                out,
                "{FULL}[{}].Pods[{index}] ({}) is bound to node {:?}, not {}",
                Clip(node),
                Clip(pod),
                Clip(actual).to_string(),
                Clip(node)
            ),
            DecodeError::DuplicateNode { node, list } => write!(out, "node {} is listed more than once in {list}", Clip(node)),
            DecodeError::NegativePdbViolations { map, node, value } => {
                write!(out, "{map}[{}].NumPDBViolations is {value}: a count of PDB violations cannot be negative", Clip(node))
            }
            DecodeError::VictimWithoutUid { map, node, index } => {
                let field = if *map == META { "UID" } else { "metadata.uid" };
                write!(out, "{map}[{}].Pods[{index}] has no {field}: a victim must name the pod it evicts", Clip(node))
            }
            DecodeError::TooMany { what, cap, flag } => {
                write!(out, "{what} has more than {cap} entries, the most one request may carry ({flag})")
            }
            DecodeError::Cancelled => out.write_str("the answer is no longer wanted (request timed out or client gone)"),
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let mut s = String::new();
        self.write_unclipped(&mut s)?;
        f.write_str(&clip_message(&s, MESSAGE_LIMIT))
    }
}

/// A `FieldError` with its (input-derived) field name clipped.
struct FieldMsg<'a>(&'a k8s::FieldError);

impl fmt::Display for FieldMsg<'_> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}: {}", Clip(&self.0.field), self.0.message)
    }
}

/// A piece of input, at most [`QUOTE_LIMIT`] bytes of it.
struct Clip<'a>(&'a str);

impl fmt::Display for Clip<'_> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&clip(self.0, QUOTE_LIMIT))
    }
}

/// `s` itself if it has at most `limit` bytes, else its first `limit` bytes (on a char
/// boundary) and "… (N bytes)".
pub fn clip(s: &str, limit: usize) -> Cow<'_, str> {
    if s.len() <= limit {
        return Cow::Borrowed(s);
    }
    Cow::Owned(format!("{}… ({} bytes)", &s[..floor_char_boundary(s, limit)], s.len()))
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// An error message made safe to send and log: every `"quoted"` or `` `quoted` `` piece
/// longer than [`QUOTE_LIMIT`] bytes is clipped (serde quotes offending values this way),
/// then the whole message is clipped to `limit` bytes.
pub fn clip_message(msg: &str, limit: usize) -> Cow<'_, str> {
    let quoted = clip_quotes(msg);
    match quoted {
        Cow::Borrowed(m) => clip(m, limit),
        Cow::Owned(m) => Cow::Owned(clip(&m, limit).into_owned()),
    }
}

fn clip_quotes(msg: &str) -> Cow<'_, str> {
    if msg.len() <= QUOTE_LIMIT {
        return Cow::Borrowed(msg);
    }
    let bytes = msg.as_bytes();
    let mut out: Option<String> = None;
    let (mut copied, mut i) = (0, 0);
    while i < bytes.len() {
        let q = bytes[i];
        if q != b'"' && q != b'`' {
            i += 1;
            continue;
        }
        // Find the closing quote; `"` strings are Debug-escaped (`\"`, `\\`).
        let start = i + 1;
        let mut j = start;
        while j < bytes.len() && bytes[j] != q {
            j += if q == b'"' && bytes[j] == b'\\' { 2 } else { 1 };
        }
        let end = j.min(bytes.len());
        if end - start > QUOTE_LIMIT {
            let o = out.get_or_insert_with(|| String::with_capacity(msg.len().min(4 * QUOTE_LIMIT)));
            let mut cut = floor_char_boundary(msg, start + QUOTE_LIMIT);
            // Never end on half of an escape.
            let backslashes = msg[start..cut].bytes().rev().take_while(|&b| b == b'\\').count();
            if q == b'"' && backslashes % 2 == 1 {
                cut -= 1;
            }
            o.push_str(&msg[copied..cut]);
            let _ = write!(o, "…{}", q as char);
            let _ = write!(o, " ({} bytes)", end - start);
            copied = (end + 1).min(bytes.len());
        }
        i = end + 1;
    }
    match out {
        None => Cow::Borrowed(msg),
        Some(mut o) => {
            o.push_str(&msg[copied..]);
            Cow::Owned(o)
        }
    }
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
    /// UIDs of every proposed victim, decoded or not, in kube-scheduler's order; each
    /// once (a repeated victim is kept where it first appears).
    pub uids: Vec<String>,
    /// How many distinct victims the request proposed (0: a placeholder candidate).
    pub count: usize,
    pub num_pdb_violations: i64,
}

pub struct MetaVictims {
    /// Victim UIDs in kube-scheduler's order, each once.
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
                        let parsed: k8s::Node = strict::from_str(raw.get()).map_err(|error| DecodeError::Item {
                            at: ItemAt::Node { index },
                            name: name_of(raw, false),
                            error,
                        })?;
                        let name = parsed.metadata.name.clone();
                        let node = parsed
                            .into_model()
                            .map_err(|error| DecodeError::NodeField { index, name, error })?;
                        Ok(WireNode { raw, node })
                    })
                    .collect::<Result<_, DecodeError>>()?,
            ),
            "Nodes.items",
        ),
        (None, Some(names)) => (NodeSet::Names(names), "NodeNames"),
        (None, None) => return Err(DecodeError::NoNodes),
    };
    let mut seen = HashSet::with_capacity(nodes.len());
    if let Some(dup) = nodes.names().into_iter().find(|n| !seen.insert(*n)) {
        return Err(DecodeError::DuplicateNode { node: dup.to_string(), list });
    }
    Ok(ExtenderArgs { pod, nodes })
}

// ---- preempt --------------------------------------------------------------------------

/// A preempt map's entries as a map; a node listed twice is an error, as in filter.
fn into_map<P, T>(entries: Entries<P>, list: &'static str, mut f: impl FnMut(&str, seeds::Listed<P>) -> Result<T, DecodeError>) -> Result<BTreeMap<String, T>, DecodeError> {
    let mut out = BTreeMap::new();
    for (node, v) in entries {
        match out.entry(node) {
            std::collections::btree_map::Entry::Occupied(e) => return Err(DecodeError::DuplicateNode { node: e.key().clone(), list }),
            std::collections::btree_map::Entry::Vacant(e) => {
                let value = f(e.key(), v)?;
                e.insert(value);
            }
        }
    }
    Ok(out)
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
pub fn decode_preempt_args_for(body: &[u8], needs_pods: impl Fn(&str) -> bool, bounds: &Bounds) -> Result<PreemptArgs, DecodeError> {
    let raw = seeds::parse(body, PreemptArgsSeed(bounds), bounds)?;
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
            let victims = if !needs_pods(node) {
                let mut uids = Vec::with_capacity(v.pods.len());
                for (index, raw) in v.pods.into_iter().enumerate() {
                    let uid = strict::from_str::<UidOnly>(raw.get()).map_err(|e| item_error(index, raw, e))?.metadata.uid;
                    check_uid(FULL, node, index, &uid)?;
                    uids.push(uid);
                }
                keep_first(FULL, node, &mut uids, |u| u);
                Victims { pods: Vec::new(), count: uids.len(), uids, num_pdb_violations }
            } else {
                let mut pods = Vec::with_capacity(v.pods.len());
                for (index, raw) in v.pods.into_iter().enumerate() {
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
            Ok(MetaVictims { uids, num_pdb_violations })
        })?),
        // Both null: nothing to choose from; the answer is an empty map.
        (None, None) => Candidates::Meta(BTreeMap::new()),
    };
    Ok(PreemptArgs { pod, candidates })
}
