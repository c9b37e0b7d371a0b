//! Reasons for every decision, shared by logs, metrics, Events and `replay`. Below the
//! decisions that make them and the edges that read them.

use serde::Serialize;

/// One decision about a node or a pod, with a stable `code` (a metrics label) and a
/// sentence for people.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Explanation {
    /// `node` or `pod` or `request`.
    pub subject: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// What happened: kept, dropped, unresolvable, victim, spared, score, refused, degraded.
    pub verdict: &'static str,
    /// Why, as a stable identifier.
    pub code: &'static str,
    pub detail: String,
    /// For decisions about a gang: where the gang is declared (`GangSource::name`), a
    /// bounded metrics label.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gang_source: Option<&'static str>,
}

impl Explanation {
    /// Lines that restate the request (a node's score, nodes kept as expected): logged
    /// at debug and left out of the decision metrics.
    pub fn is_routine(&self) -> bool {
        self.verdict == "score" || (self.verdict == "kept" && self.code == "allowed")
    }

    pub fn request(verdict: &'static str, code: &'static str, detail: impl Into<String>) -> Self {
        Explanation {
            subject: "request",
            node: None,
            pod: None,
            verdict,
            code,
            detail: detail.into(),
            gang_source: None,
        }
    }

    pub fn node(node: &str, verdict: &'static str, code: &'static str, detail: impl Into<String>) -> Self {
        Explanation {
            subject: "node",
            node: Some(node.to_string()),
            pod: None,
            verdict,
            code,
            detail: detail.into(),
            gang_source: None,
        }
    }

    pub fn pod(node: &str, pod: &str, verdict: &'static str, code: &'static str, detail: impl Into<String>) -> Self {
        Explanation {
            subject: "pod",
            node: Some(node.to_string()),
            pod: Some(pod.to_string()),
            verdict,
            code,
            detail: detail.into(),
            gang_source: None,
        }
    }

    /// The decision is about a gang declared by `source`.
    pub fn for_gang(mut self, source: crate::model::GangSource) -> Self {
        self.gang_source = Some(source.name());
        self
    }
}

/// The non-routine decisions counted by (verdict, code), in order of first appearance: a
/// large answer has thousands of lines but only a handful of distinct reasons.
pub fn count_reasons(explanations: &[Explanation]) -> Vec<((&'static str, &'static str), u64)> {
    let mut counts: Vec<((&'static str, &'static str), u64)> = Vec::new();
    for e in explanations.iter().filter(|e| !e.is_routine()) {
        match counts.iter_mut().find(|(k, _)| *k == (e.verdict, e.code)) {
            Some((_, n)) => *n += 1,
            None => counts.push(((e.verdict, e.code), 1)),
        }
    }
    counts
}

impl std::fmt::Display for Explanation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.node, &self.pod) {
            (Some(n), Some(p)) => write!(f, "{:<12} node={n} pod={p} [{}] {}", self.verdict, self.code, self.detail),
            (Some(n), None) => write!(f, "{:<12} node={n} [{}] {}", self.verdict, self.code, self.detail),
            _ => write!(f, "{:<12} [{}] {}", self.verdict, self.code, self.detail),
        }
    }
}
