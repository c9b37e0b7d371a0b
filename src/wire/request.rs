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

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::k8s;
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

const FULL: &str = "NodeNameToVictims";
const META: &str = "NodeNameToMetaVictims";

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

fn is(key: &str, name: &str) -> bool {
    key.eq_ignore_ascii_case(name)
}

/// Skips anything, including `null`.
fn skip<'de, A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
    map.next_value::<IgnoredAny>().map(|_| ())
}

/// The request's `Pod`, strictly (never from an array, at any depth).
fn next_pod<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Option<k8s::Pod>, A::Error> {
    map.next_value_seed(strict::Of::<Option<k8s::Pod>>::new())
}

// ---- top level -------------------------------------------------------------------------

struct RawExtenderArgs<'a> {
    pod: Option<k8s::Pod>,
    nodes: Option<RawNodeList<'a>>,
    node_names: Option<Vec<String>>,
}

/// `{items: [Node…]}`, an object only; the items stay raw until decoded one by one.
struct RawNodeList<'a> {
    items: Option<Vec<&'a RawValue>>,
}

impl<'de: 'a, 'a> Deserialize<'de> for RawNodeList<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = RawNodeList<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a NodeList object {items}")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut items = None;
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    if is(&key, "items") {
                        items = map.next_value()?;
                    } else {
                        skip(&mut map)?;
                    }
                }
                Ok(RawNodeList { items })
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
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
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    if is(&key, "Pod") {
                        out.pod = next_pod(&mut map)?;
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
    // One UTF-8 check for the whole body instead of one per string.
    let raw: RawExtenderArgs = serde_json::from_str(std::str::from_utf8(body)?)?;
    let pod = raw.pod.ok_or(DecodeError::MissingPod)?.into_model().map_err(DecodeError::PodField)?;
    // Objects win when both are present: they carry everything names do.
    let (nodes, list) = match (raw.nodes.and_then(|n| n.items), raw.node_names) {
        (Some(items), _) => (
            NodeSet::Objects(
                items
                    .into_iter()
                    .enumerate()
                    .map(|(index, raw)| {
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

struct RawPreemptArgs<'a> {
    pod: Option<k8s::Pod>,
    full: Option<Entries<RawVictims<'a>>>,
    meta: Option<Entries<RawMetaVictims>>,
}

/// A JSON object's entries in their order, repeated keys included (a `BTreeMap` would
/// keep the last silently): node → victims.
struct Entries<V>(Vec<(String, V)>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Entries<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Vis<V>(std::marker::PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for Vis<V> {
            type Value = Entries<V>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of node name to victims")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(0).min(4096));
                while let Some(key) = map.next_key::<String>()? {
                    out.push((key, map.next_value()?));
                }
                Ok(Entries(out))
            }
        }
        d.deserialize_map(Vis(std::marker::PhantomData))
    }
}

impl<V> Entries<V> {
    /// The entries as a map; a node listed twice is an error, as in filter.
    fn into_map<T>(self, list: &'static str, mut f: impl FnMut(&str, V) -> Result<T, DecodeError>) -> Result<BTreeMap<String, T>, DecodeError> {
        let mut out = BTreeMap::new();
        for (node, v) in self.0 {
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
}

/// Victim pods kept as raw JSON until someone needs them.
struct RawVictims<'a> {
    pods: Vec<&'a RawValue>,
    num_pdb_violations: i64,
}

struct RawMetaVictims {
    /// `None` or `""`: a MetaPod without a UID (rejected with its node and index).
    uids: Vec<Option<String>>,
    num_pdb_violations: i64,
}

struct MetaPod(Option<String>);

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
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    if is(&key, "Pod") {
                        out.pod = next_pod(&mut map)?;
                    } else if is(&key, FULL) {
                        out.full = map.next_value()?;
                    } else if is(&key, META) {
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
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
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
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    if is(&key, "UID") {
                        uid = map.next_value::<Option<String>>()?;
                    } else {
                        skip(&mut map)?;
                    }
                }
                Ok(MetaPod(uid))
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
    decode_preempt_args_for(body, |_| true)
}

/// Like `decode_preempt_args`, but full victim pods are decoded only for nodes where
/// `needs_pods(node)` (the cluster view re-selects the others from its own pods).
pub fn decode_preempt_args_for(body: &[u8], needs_pods: impl Fn(&str) -> bool) -> Result<PreemptArgs, DecodeError> {
    let raw: RawPreemptArgs = serde_json::from_str(std::str::from_utf8(body)?)?;
    let pod = raw.pod.ok_or(DecodeError::MissingPod)?.into_model().map_err(DecodeError::PodField)?;
    // Full victims win when both are present: they carry everything UIDs do.
    let candidates = match (raw.full, raw.meta) {
        (Some(full), _) => Candidates::Full(full.into_map(FULL, |node, v| {
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
        (None, Some(meta)) => Candidates::Meta(meta.into_map(META, |node, v| {
            let num_pdb_violations = check_violations(META, node, v.num_pdb_violations)?;
            if let Some(index) = v.uids.iter().position(|u| u.as_deref().is_none_or(str::is_empty)) {
                check_uid(META, node, index, "")?;
            }
            let mut uids: Vec<String> = v.uids.into_iter().map(Option::unwrap_or_default).collect();
            keep_first(META, node, &mut uids, |u| u);
            Ok(MetaVictims { uids, num_pdb_violations })
        })?),
        // Both null: nothing to choose from; the answer is an empty map.
        (None, None) => Candidates::Meta(BTreeMap::new()),
    };
    Ok(PreemptArgs { pod, candidates })
}

// ---- objects only -------------------------------------------------------------------------

/// A `Deserializer` adapter under which a struct is read only from a JSON object.
/// serde's derive asks for `deserialize_struct`, which serde_json also answers from an
/// array (fields by position): `"Pod": [{..}, {..}]` would be read as a Pod whose
/// metadata is the first element. Under `Strict`, `deserialize_struct` is
/// `deserialize_map`, at every depth (nested deserializers, seqs and maps are wrapped
/// too), so an array where an object belongs is "invalid type: sequence, expected struct
/// X". Everything else is forwarded unchanged, borrowed strings included.
mod strict {
    use serde::de::{self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor};
    use std::fmt;
    use std::marker::PhantomData;

    pub struct Strict<D>(pub D);
    pub struct Seed<S>(pub S);
    struct V<W>(W);
    struct Access<A>(A);

    /// `T` decoded strictly, as a seed.
    pub struct Of<T>(PhantomData<T>);

    impl<T> Of<T> {
        pub fn new() -> Self {
            Of(PhantomData)
        }
    }

    impl<'de, T: de::Deserialize<'de>> DeserializeSeed<'de> for Of<T> {
        type Value = T;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
            T::deserialize(Strict(d))
        }
    }

    /// `serde_json::from_str`, strictly.
    pub fn from_str<'a, T: de::Deserialize<'a>>(s: &'a str) -> serde_json::Result<T> {
        let mut de = serde_json::Deserializer::from_str(s);
        let value = T::deserialize(Strict(&mut de))?;
        de.end()?;
        Ok(value)
    }

    impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Seed<S> {
        type Value = S::Value;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
            self.0.deserialize(Strict(d))
        }
    }

    macro_rules! forward_deserialize {
        ($($m:ident)*) => {$(
            fn $m<W: Visitor<'de>>(self, v: W) -> Result<W::Value, Self::Error> {
                self.0.$m(V(v))
            }
        )*};
    }

    impl<'de, D: Deserializer<'de>> Deserializer<'de> for Strict<D> {
        type Error = D::Error;

        forward_deserialize!(
            deserialize_any deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
            deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_u128
            deserialize_f32 deserialize_f64 deserialize_char deserialize_str deserialize_string deserialize_bytes
            deserialize_byte_buf deserialize_option deserialize_unit deserialize_seq deserialize_map
            deserialize_identifier
        );

        fn deserialize_ignored_any<W: Visitor<'de>>(self, v: W) -> Result<W::Value, Self::Error> {
            // Skipped values are not built: nothing to be strict about.
            self.0.deserialize_ignored_any(v)
        }
        fn deserialize_unit_struct<W: Visitor<'de>>(self, name: &'static str, v: W) -> Result<W::Value, Self::Error> {
            self.0.deserialize_unit_struct(name, V(v))
        }
        fn deserialize_newtype_struct<W: Visitor<'de>>(self, name: &'static str, v: W) -> Result<W::Value, Self::Error> {
            self.0.deserialize_newtype_struct(name, V(v))
        }
        fn deserialize_tuple<W: Visitor<'de>>(self, len: usize, v: W) -> Result<W::Value, Self::Error> {
            self.0.deserialize_tuple(len, V(v))
        }
        fn deserialize_tuple_struct<W: Visitor<'de>>(self, name: &'static str, len: usize, v: W) -> Result<W::Value, Self::Error> {
            self.0.deserialize_tuple_struct(name, len, V(v))
        }
        fn deserialize_struct<W: Visitor<'de>>(self, _: &'static str, _: &'static [&'static str], v: W) -> Result<W::Value, Self::Error> {
            // The point of `Strict`: a struct comes from an object, never from an array.
            self.0.deserialize_map(V(v))
        }
        fn deserialize_enum<W: Visitor<'de>>(self, name: &'static str, variants: &'static [&'static str], v: W) -> Result<W::Value, Self::Error> {
            self.0.deserialize_enum(name, variants, V(v))
        }
        fn is_human_readable(&self) -> bool {
            self.0.is_human_readable()
        }
    }

    macro_rules! forward_visit {
        ($($m:ident: $t:ty),*) => {$(
            fn $m<E: de::Error>(self, v: $t) -> Result<Self::Value, E> {
                self.0.$m(v)
            }
        )*};
    }

    impl<'de, W: Visitor<'de>> Visitor<'de> for V<W> {
        type Value = W::Value;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            self.0.expecting(f)
        }

        forward_visit!(
            visit_bool: bool, visit_i8: i8, visit_i16: i16, visit_i32: i32, visit_i64: i64, visit_i128: i128,
            visit_u8: u8, visit_u16: u16, visit_u32: u32, visit_u64: u64, visit_u128: u128,
            visit_f32: f32, visit_f64: f64, visit_char: char,
            visit_str: &str, visit_borrowed_str: &'de str, visit_string: String,
            visit_bytes: &[u8], visit_borrowed_bytes: &'de [u8], visit_byte_buf: Vec<u8>
        );

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            self.0.visit_none()
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            self.0.visit_unit()
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            self.0.visit_some(Strict(d))
        }
        fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            self.0.visit_newtype_struct(Strict(d))
        }
        fn visit_seq<A: SeqAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
            self.0.visit_seq(Access(a))
        }
        fn visit_map<A: MapAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
            self.0.visit_map(Access(a))
        }
        fn visit_enum<A: EnumAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
            self.0.visit_enum(Access(a))
        }
    }

    impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Access<A> {
        type Error = A::Error;
        fn next_element_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<Option<S::Value>, A::Error> {
            self.0.next_element_seed(Seed(seed))
        }
        fn size_hint(&self) -> Option<usize> {
            self.0.size_hint()
        }
    }

    impl<'de, A: MapAccess<'de>> MapAccess<'de> for Access<A> {
        type Error = A::Error;
        fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, A::Error> {
            // Keys are strings: nothing to wrap.
            self.0.next_key_seed(seed)
        }
        fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
            self.0.next_value_seed(Seed(seed))
        }
        fn size_hint(&self) -> Option<usize> {
            self.0.size_hint()
        }
    }

    impl<'de, A: EnumAccess<'de>> EnumAccess<'de> for Access<A> {
        type Error = A::Error;
        type Variant = Access<A::Variant>;
        fn variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<(S::Value, Self::Variant), A::Error> {
            self.0.variant_seed(seed).map(|(v, a)| (v, Access(a)))
        }
    }

    impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for Access<A> {
        type Error = A::Error;
        fn unit_variant(self) -> Result<(), A::Error> {
            self.0.unit_variant()
        }
        fn newtype_variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<S::Value, A::Error> {
            self.0.newtype_variant_seed(Seed(seed))
        }
        fn tuple_variant<W: Visitor<'de>>(self, len: usize, v: W) -> Result<W::Value, A::Error> {
            self.0.tuple_variant(len, V(v))
        }
        fn struct_variant<W: Visitor<'de>>(self, fields: &'static [&'static str], v: W) -> Result<W::Value, A::Error> {
            // No request type has enums; a struct variant would still accept an array here.
            self.0.struct_variant(fields, V(v))
        }
    }
}
