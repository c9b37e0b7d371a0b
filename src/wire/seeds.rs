//! The first pass over a request body: its top-level shape, streamed under the request's
//! [`Bounds`]. Lists are counted as they are read and stop at their cap; node objects and
//! victim pods stay raw (`&RawValue`) until `request` decodes the ones decisions read.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::bounds::{Bounds, Stop};
use super::error::{clip, DecodeError, QUOTE_LIMIT};
use super::k8s;
use super::strict;

use super::error::{FULL, META};

/// Go matches JSON keys to field names case-insensitively, and so do we.
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

/// Decodes `body` with `seed`; a stop recorded in `bounds` (cap, cancel) replaces the
/// serde error it caused.
pub fn parse<'de, S: DeserializeSeed<'de>>(body: &'de [u8], seed: S, bounds: &Bounds) -> Result<S::Value, DecodeError> {
    let text = std::str::from_utf8(body)?;
    let mut de = serde_json::Deserializer::from_str(text);
    let value = seed.deserialize(&mut de).and_then(|v| de.end().map(|()| v));
    value.map_err(|e| match bounds.take_stop() {
        Some(stop) => DecodeError::from(stop),
        None => DecodeError::Json(e),
    })
}

/// Stops the decode: records why, and returns the error that unwinds serde.
fn stop<E: de::Error>(bounds: &Bounds, why: Stop) -> E {
    bounds.stop(why);
    E::custom("decoding stopped")
}

/// `null` (`None`), or what `S` reads.
struct Nullable<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Nullable<S> {
    type Value = Option<S::Value>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de, S: DeserializeSeed<'de>> Visitor<'de> for Nullable<S> {
    type Value = Option<S::Value>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a value or null")
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.0.deserialize(d).map(Some)
    }
}

// ---- capped lists -----------------------------------------------------------------------

/// Which list of the request a [`CappedSeq`] reads: its cap, and its name in errors.
#[derive(Clone, Copy)]
enum List<'n> {
    NodeItems,
    NodeNames,
    Victims { map: &'static str, node: &'n str },
}

impl List<'_> {
    fn cap(self, bounds: &Bounds) -> (usize, &'static str) {
        match self {
            List::NodeItems | List::NodeNames => (bounds.caps.max_nodes, "--max-nodes"),
            List::Victims { .. } => (bounds.caps.max_victims_per_node, "--max-victims-per-node"),
        }
    }

    fn name(self) -> String {
        match self {
            List::NodeItems => "Nodes.items".into(),
            List::NodeNames => "NodeNames".into(),
            List::Victims { map, node } => format!("{map}[{}].Pods", clip(node, QUOTE_LIMIT)),
        }
    }
}

/// A JSON array of at most its list's cap of what `E` reads (`PhantomData<T>`: a `T`).
struct CappedSeq<'b, 'c, 'n, E> {
    bounds: &'b Bounds<'c>,
    list: List<'n>,
    item: E,
}

impl<'b, 'c, 'n, T> CappedSeq<'b, 'c, 'n, PhantomData<T>> {
    fn new(bounds: &'b Bounds<'c>, list: List<'n>) -> Self {
        CappedSeq { bounds, list, item: PhantomData }
    }
}

impl<'de, E: DeserializeSeed<'de> + Copy> DeserializeSeed<'de> for CappedSeq<'_, '_, '_, E> {
    type Value = Vec<E::Value>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, E: DeserializeSeed<'de> + Copy> Visitor<'de> for CappedSeq<'_, '_, '_, E> {
    type Value = Vec<E::Value>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let (cap, flag) = self.list.cap(self.bounds);
        let victims = matches!(self.list, List::Victims { .. });
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(item) = seq.next_element_seed(self.item)? {
            if out.len() == cap {
                return Err(stop(self.bounds, Stop::TooMany { what: self.list.name(), cap, flag }));
            }
            let counted = if victims { self.bounds.add_victim() } else { Ok(()) };
            if let Err(why) = counted.and_then(|()| self.bounds.check()) {
                return Err(stop(self.bounds, why));
            }
            out.push(item);
        }
        Ok(out)
    }
}

// ---- filter and prioritize ----------------------------------------------------------------

pub struct RawExtenderArgs<'a> {
    pub pod: Option<k8s::Pod>,
    /// `Nodes.items`, each node still raw.
    pub node_items: Option<Vec<&'a RawValue>>,
    pub node_names: Option<Vec<Name<'a>>>,
}

/// A node name, borrowed from the body (a name with JSON escapes is the rare copy): a
/// filter or prioritize call carries hundreds of them.
pub struct Name<'a>(pub Cow<'a, str>);

impl<'de> Deserialize<'de> for Name<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct NameVisitor;
        impl<'de> Visitor<'de> for NameVisitor {
            type Value = Name<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Name(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Name(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(NameVisitor)
    }
}

pub struct ExtenderArgsSeed<'b, 'c>(pub &'b Bounds<'c>);

impl<'de, 'b, 'c> DeserializeSeed<'de> for ExtenderArgsSeed<'b, 'c> {
    type Value = RawExtenderArgs<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ExtenderArgsSeed<'_, '_> {
    type Value = RawExtenderArgs<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an ExtenderArgs object {Pod, Nodes, NodeNames}")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = RawExtenderArgs { pod: None, node_items: None, node_names: None };
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            if is(&key, "Pod") {
                out.pod = next_pod(&mut map)?;
            } else if is(&key, "Nodes") {
                out.node_items = map.next_value_seed(Nullable(NodeListSeed(self.0)))?.flatten();
            } else if is(&key, "NodeNames") {
                out.node_names = map.next_value_seed(Nullable(CappedSeq::new(self.0, List::NodeNames)))?;
            } else {
                skip(&mut map)?;
            }
        }
        Ok(out)
    }
}

/// `{items: [Node…]}` (an object only); the items stay raw.
struct NodeListSeed<'b, 'c>(&'b Bounds<'c>);

impl<'de> DeserializeSeed<'de> for NodeListSeed<'_, '_> {
    type Value = Option<Vec<&'de RawValue>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for NodeListSeed<'_, '_> {
    type Value = Option<Vec<&'de RawValue>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a NodeList object {items}")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut items = None;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            if is(&key, "items") {
                items = map.next_value_seed(Nullable(CappedSeq::new(self.0, List::NodeItems)))?;
            } else {
                skip(&mut map)?;
            }
        }
        Ok(items)
    }
}

// ---- preempt --------------------------------------------------------------------------

/// One candidate node's victims as sent: `P` is `FullPods` or a list of `MetaPod`s.
pub struct Listed<P> {
    pub pods: P,
    pub num_pdb_violations: i64,
}

/// A preempt map's entries in their order, repeated keys included (a map type would keep
/// the last silently): node → victims.
pub type Entries<P> = Vec<(String, Listed<P>)>;

pub struct RawPreemptArgs<'a> {
    pub pod: Option<k8s::Pod>,
    pub full: Option<Entries<FullPods<'a>>>,
    pub meta: Option<Entries<Vec<MetaPod>>>,
}

/// A full-mode candidate's victims after the first pass: raw pods where decisions read
/// them, or only their UIDs, read in the same pass (a preempt body is mostly victims, and
/// the view holds the pods of every node it knows).
pub enum FullPods<'a> {
    Raw(Vec<&'a RawValue>),
    Uids(Vec<String>),
}

/// The first pass over a preempt body. `needs_pods(node)`: whether decisions read that
/// candidate's full victims; where not, only their UIDs are read (`uids_in_place`), or
/// they stay raw too (to name an item that fails, see `request::decode_preempt_args_for`).
pub struct PreemptArgsSeed<'b, 'c, 'f> {
    pub bounds: &'b Bounds<'c>,
    pub needs_pods: &'f dyn Fn(&str) -> bool,
    pub uids_in_place: bool,
}

impl<'de> DeserializeSeed<'de> for PreemptArgsSeed<'_, '_, '_> {
    type Value = RawPreemptArgs<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for PreemptArgsSeed<'_, '_, '_> {
    type Value = RawPreemptArgs<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an ExtenderPreemptionArgs object {Pod, NodeNameToVictims, NodeNameToMetaVictims}")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = RawPreemptArgs { pod: None, full: None, meta: None };
        let full = Full { needs_pods: self.needs_pods, uids_in_place: self.uids_in_place };
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            if is(&key, "Pod") {
                out.pod = next_pod(&mut map)?;
            } else if is(&key, FULL) {
                out.full =
                    map.next_value_seed(Nullable(CandidateMap { bounds: self.bounds, map: FULL, form: &full }))?;
            } else if is(&key, META) {
                out.meta =
                    map.next_value_seed(Nullable(CandidateMap { bounds: self.bounds, map: META, form: &Meta }))?;
            } else {
                skip(&mut map)?;
            }
        }
        Ok(out)
    }
}

/// How one candidate's `Pods` list is read.
trait VictimForm<'de> {
    type Pods;
    fn pods<A: MapAccess<'de>>(&self, map: &mut A, bounds: &Bounds, list: List) -> Result<Self::Pods, A::Error>;
    /// No `Pods` key at all.
    fn none(&self) -> Self::Pods;
}

/// `NodeNameToMetaVictims`: UIDs.
struct Meta;

impl<'de> VictimForm<'de> for Meta {
    type Pods = Vec<MetaPod>;
    fn pods<A: MapAccess<'de>>(&self, map: &mut A, bounds: &Bounds, list: List) -> Result<Self::Pods, A::Error> {
        Ok(map.next_value_seed(Nullable(CappedSeq::new(bounds, list)))?.unwrap_or_default())
    }
    fn none(&self) -> Self::Pods {
        Vec::new()
    }
}

/// `NodeNameToVictims`: full pods, raw or read for their UIDs only.
struct Full<'f> {
    needs_pods: &'f dyn Fn(&str) -> bool,
    uids_in_place: bool,
}

impl<'de> VictimForm<'de> for Full<'_> {
    type Pods = FullPods<'de>;
    fn pods<A: MapAccess<'de>>(&self, map: &mut A, bounds: &Bounds, list: List) -> Result<Self::Pods, A::Error> {
        let in_place = match list {
            List::Victims { node, .. } => self.uids_in_place && !(self.needs_pods)(node),
            _ => false,
        };
        if in_place {
            let seq = CappedSeq { bounds, list, item: strict::Of::<UidOnly>::new() };
            let pods = map.next_value_seed(Nullable(seq))?.unwrap_or_default();
            return Ok(FullPods::Uids(pods.into_iter().map(|p| p.metadata.uid).collect()));
        }
        Ok(FullPods::Raw(map.next_value_seed(Nullable(CappedSeq::new(bounds, list)))?.unwrap_or_default()))
    }
    fn none(&self) -> Self::Pods {
        FullPods::Raw(Vec::new())
    }
}

/// A victim pod of which only the UID is read.
#[derive(Deserialize)]
pub struct UidOnly {
    #[serde(default, deserialize_with = "k8s::nullable")]
    pub metadata: UidMeta,
}

#[derive(Deserialize, Default)]
pub struct UidMeta {
    #[serde(default, deserialize_with = "k8s::nullable")]
    pub uid: String,
}

/// `{node: {Pods, NumPDBViolations}, …}`, at most `--max-nodes` nodes.
struct CandidateMap<'b, 'c, 'f, F> {
    bounds: &'b Bounds<'c>,
    map: &'static str,
    form: &'f F,
}

impl<'de, F: VictimForm<'de>> DeserializeSeed<'de> for CandidateMap<'_, '_, '_, F> {
    type Value = Entries<F::Pods>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, F: VictimForm<'de>> Visitor<'de> for CandidateMap<'_, '_, '_, F> {
    type Value = Entries<F::Pods>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map of node name to victims")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let cap = self.bounds.caps.max_nodes;
        let mut out = Vec::with_capacity(map.size_hint().unwrap_or(0).min(1024));
        while let Some(node) = map.next_key::<String>()? {
            if out.len() == cap {
                return Err(stop(
                    self.bounds,
                    Stop::TooMany { what: format!("{} (candidate nodes)", self.map), cap, flag: "--max-nodes" },
                ));
            }
            if let Err(why) = self.bounds.check() {
                return Err(stop(self.bounds, why));
            }
            let victims = map.next_value_seed(VictimsSeed {
                bounds: self.bounds,
                list: List::Victims { map: self.map, node: &node },
                form: self.form,
            })?;
            out.push((node, victims));
        }
        Ok(out)
    }
}

/// `{Pods, NumPDBViolations}` with pods read as `F` says, keys in any case.
struct VictimsSeed<'b, 'c, 'n, 'f, F> {
    bounds: &'b Bounds<'c>,
    list: List<'n>,
    form: &'f F,
}

impl<'de, F: VictimForm<'de>> DeserializeSeed<'de> for VictimsSeed<'_, '_, '_, '_, F> {
    type Value = Listed<F::Pods>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, F: VictimForm<'de>> Visitor<'de> for VictimsSeed<'_, '_, '_, '_, F> {
    type Value = Listed<F::Pods>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a victims object {Pods, NumPDBViolations}")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut pods = None;
        let mut num_pdb_violations = 0;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            if is(&key, "Pods") {
                pods = Some(self.form.pods(&mut map, self.bounds, self.list)?);
            } else if is(&key, "NumPDBViolations") {
                num_pdb_violations = map.next_value::<Option<i64>>()?.unwrap_or(0);
            } else {
                skip(&mut map)?;
            }
        }
        Ok(Listed { pods: pods.unwrap_or_else(|| self.form.none()), num_pdb_violations })
    }
}

/// A `MetaPod`'s UID; `None` or `""` when it has none (rejected with its node and index).
pub struct MetaPod(pub Option<String>);

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
