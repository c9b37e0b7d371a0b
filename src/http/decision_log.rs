//! Recent decisions per pod, for `GET /decisions?pod=NAMESPACE/NAME` and `explain`: a
//! ring bounded in entries and in bytes; the oldest decisions go first. No HTTP here:
//! `decisions` serves it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::explanation::Explanation;
use crate::model::Timestamp;
use crate::pipeline::{Answer, Verb};
use crate::shadow::Diffs;
use crate::wire::error::clip;

/// One answered request, as `/decisions` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Decision {
    pub pod: String,
    pub verb: String,
    /// Unix seconds.
    pub time: Timestamp,
    /// `enforce` or `shadow` (the answer sent was kube-scheduler's own).
    pub mode: String,
    /// The policy's answer in one line.
    pub summary: String,
    /// Shadow mode: what the policy's answer would have changed.
    #[serde(default, skip_serializing_if = "Diffs::is_empty")]
    pub diffs: Diffs,
    /// Every reason except the routine ones (nodes kept as asked, plain scores).
    pub reasons: Vec<Reason>,
    /// Routine lines left out, and reasons cut to keep one decision within its share.
    #[serde(default)]
    pub routine: usize,
    #[serde(default)]
    pub truncated: usize,
}

/// An `Explanation` as stored and served.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Reason {
    pub subject: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    pub verdict: String,
    pub code: String,
    pub detail: String,
}

impl From<&Explanation> for Reason {
    fn from(e: &Explanation) -> Self {
        Reason {
            subject: e.subject.into(),
            node: e.node.clone(),
            pod: e.pod.clone(),
            verdict: e.verdict.as_str().into(),
            code: e.code.as_str().into(),
            detail: e.detail.clone(),
        }
    }
}

impl Reason {
    fn bytes(&self) -> usize {
        64 + self.subject.len()
            + self.node.as_ref().map_or(0, String::len)
            + self.pod.as_ref().map_or(0, String::len)
            + self.verdict.len()
            + self.code.len()
            + self.detail.len()
    }
}

impl Decision {
    /// At most `budget` bytes of reasons are kept; the rest is counted in `truncated`.
    pub fn of(verb: Verb, answer: &Answer, time: Timestamp, budget: usize) -> Decision {
        let mut d = Decision {
            pod: answer.pod.clone(),
            verb: verb.as_str().into(),
            time,
            mode: answer.mode.as_str().into(),
            summary: clip(&answer.summary, 512).into_owned(),
            diffs: answer.diffs().clone(),
            reasons: Vec::new(),
            routine: 0,
            truncated: 0,
        };
        let mut used = d.bytes();
        for e in &answer.explanations {
            if e.is_routine() {
                d.routine += 1;
                continue;
            }
            let r = Reason::from(e);
            if used + r.bytes() > budget {
                d.truncated += 1;
                continue;
            }
            used += r.bytes();
            d.reasons.push(r);
        }
        d
    }

    /// Approximate memory held, for the ring's byte bound.
    pub fn bytes(&self) -> usize {
        128 + self.pod.len() + self.summary.len() + self.reasons.iter().map(Reason::bytes).sum::<usize>()
    }
}

/// Bounds of the ring (`serve --decisions-entries`, `--decisions-bytes`).
#[derive(Debug, Clone, Copy)]
pub struct RingLimits {
    pub entries: usize,
    pub bytes: usize,
}

impl Default for RingLimits {
    fn default() -> Self {
        RingLimits { entries: 10_000, bytes: 32 << 20 }
    }
}

#[derive(Default)]
struct Ring {
    entries: VecDeque<Arc<Decision>>,
    bytes: usize,
}

pub struct DecisionLog {
    limits: RingLimits,
    ring: Mutex<Ring>,
}

impl Default for DecisionLog {
    fn default() -> Self {
        DecisionLog::new(RingLimits::default())
    }
}

impl DecisionLog {
    pub fn new(limits: RingLimits) -> Self {
        DecisionLog { limits, ring: Mutex::new(Ring::default()) }
    }

    /// One decision may use at most a quarter of the byte bound, so one huge request
    /// cannot push out everything else.
    pub fn record(&self, verb: Verb, answer: &Answer, time: Timestamp) {
        if self.limits.entries == 0 {
            return;
        }
        let d = Arc::new(Decision::of(verb, answer, time, self.limits.bytes / 4));
        let size = d.bytes();
        let mut ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        ring.bytes += size;
        ring.entries.push_back(d);
        while ring.entries.len() > self.limits.entries || (ring.bytes > self.limits.bytes && ring.entries.len() > 1) {
            if let Some(old) = ring.entries.pop_front() {
                ring.bytes -= old.bytes();
            }
        }
    }

    /// The pod's decisions still in the ring, oldest first.
    pub fn for_pod(&self, pod: &str) -> Vec<Arc<Decision>> {
        let ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        ring.entries.iter().filter(|d| d.pod == pod).cloned().collect()
    }

    /// Entries and bytes held now.
    pub fn usage(&self) -> (usize, usize) {
        let ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        (ring.entries.len(), ring.bytes)
    }
}

/// `/decisions` answers this.
#[derive(Debug, Serialize, Deserialize)]
pub struct PodDecisions {
    pub pod: String,
    /// How far back the ring reaches now (entries held of its bound).
    pub held: usize,
    pub decisions: Vec<Decision>,
}

/// `NAMESPACE/NAME` as Kubernetes names them: a DNS label and a DNS subdomain.
pub fn parse_pod_key(s: &str) -> Result<(&str, &str), String> {
    let quoted = clip(s, 100);
    let (ns, name) = s.split_once('/').ok_or_else(|| format!("pod {quoted:?} is not NAMESPACE/NAME"))?;
    let label = |v: &str, max: usize, dots: bool| {
        !v.is_empty()
            && v.len() <= max
            && v.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || (dots && c == b'.'))
            && v.as_bytes()[0].is_ascii_alphanumeric()
            && v.as_bytes()[v.len() - 1].is_ascii_alphanumeric()
    };
    if !label(ns, 63, false) {
        return Err(format!(
            "pod {quoted:?}: namespace {:?} is not a valid namespace name (lowercase letters, digits, '-', at most 63)",
            clip(ns, 100)
        ));
    }
    if !label(name, 253, true) {
        return Err(format!(
            "pod {quoted:?}: name {:?} is not a valid pod name (lowercase letters, digits, '-', '.', at most 253)",
            clip(name, 100)
        ));
    }
    Ok((ns, name))
}
