//! Decode errors of extender requests, and clipping: an error message never quotes more
//! than about [`QUOTE_LIMIT`] bytes of the input. Below `request` and `seeds`, which both
//! report through it.

use std::borrow::Cow;
use std::fmt::{self, Write as _};

use super::bounds::Stop;
use super::k8s;

/// The preempt request's two victim maps: full pods, or UIDs only.
pub const FULL: &str = "NodeNameToVictims";
pub const META: &str = "NodeNameToMetaVictims";

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
    NodeField {
        index: usize,
        name: String,
        error: k8s::FieldError,
    },
    VictimField {
        node: String,
        index: usize,
        error: k8s::FieldError,
    },
    /// A `Nodes.items[i]` or `NodeNameToVictims[node].Pods[i]` that could not be decoded;
    /// `error`'s position is relative to the item.
    Item {
        at: ItemAt,
        name: Option<String>,
        error: serde_json::Error,
    },
    NoNodes,
    VictimElsewhere {
        node: String,
        index: usize,
        pod: String,
        actual: String,
    },
    /// `list` names where: `NodeNames`, `Nodes.items`, `NodeNameToVictims`, ...
    DuplicateNode {
        node: String,
        list: &'static str,
    },
    NegativePdbViolations {
        map: &'static str,
        node: String,
        value: i64,
    },
    VictimWithoutUid {
        map: &'static str,
        node: String,
        index: usize,
    },
    /// A list over its cap (`flag` raises it): refused before it is held in memory.
    TooMany {
        what: String,
        cap: usize,
        flag: &'static str,
    },
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
            DecodeError::PodField(e)
            | DecodeError::NodeField { error: e, .. }
            | DecodeError::VictimField { error: e, .. } => Some(e),
            _ => None,
        }
    }
}

impl DecodeError {
    /// The message before input quotes are clipped.
    fn write_unclipped(&self, out: &mut String) -> fmt::Result {
        match self {
            DecodeError::Json(e) => {
                let kind =
                    if e.is_data() { "request JSON has a value of the wrong type" } else { "malformed request JSON" };
                write!(out, "{kind}: {e}")
            }
            DecodeError::NotUtf8(e) => write!(out, "request body is not UTF-8 JSON: {e}"),
            DecodeError::MissingPod => out.write_str("request has no Pod (missing or null)"),
            DecodeError::PodField(e) => write!(out, "Pod.{}", FieldMsg(e)),
            DecodeError::NodeField { index, name, error } => {
                write!(out, "Nodes.items[{index}] ({}).{}", Clip(name), FieldMsg(error))
            }
            DecodeError::VictimField { node, index, error } => {
                write!(out, "{FULL}[{}].Pods[{index}].{}", Clip(node), FieldMsg(error))
            }
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
            DecodeError::DuplicateNode { node, list } => {
                write!(out, "node {} is listed more than once in {list}", Clip(node))
            }
            DecodeError::NegativePdbViolations { map, node, value } => {
                write!(
                    out,
                    "{map}[{}].NumPDBViolations is {value}: a count of PDB violations cannot be negative",
                    Clip(node)
                )
            }
            DecodeError::VictimWithoutUid { map, node, index } => {
                let field = if *map == META { "UID" } else { "metadata.uid" };
                write!(out, "{map}[{}].Pods[{index}] has no {field}: a victim must name the pod it evicts", Clip(node))
            }
            DecodeError::TooMany { what, cap, flag } => {
                write!(out, "{what} has more than {cap} entries, the most one request may carry ({flag})")
            }
            DecodeError::Cancelled => {
                out.write_str("the answer is no longer wanted (request timed out or client gone)")
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
pub(super) struct Clip<'a>(pub(super) &'a str);

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
