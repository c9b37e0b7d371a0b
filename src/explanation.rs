//! Reasons for every decision, shared by logs, metrics, Events and `replay`. Below the
//! decisions that make them and the edges that read them.

use serde::Serialize;

/// One enum per catalogue: its variants, their wire names (metrics labels, `/decisions`,
/// Events, logs), and comparison with a name, so tests read like the rules.
macro_rules! catalogue {
    ($(#[$meta:meta])* $name:ident { $($variant:ident => $text:literal,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($variant,)*
        }

        impl $name {
            /// Every one, in catalogue order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }
    };
}

catalogue! {
    /// What happened to a node, a pod or the request.
    Verdict {
        Candidate => "candidate",
        Charged => "charged",
        Degraded => "degraded",
        Discards => "discards",
        Dropped => "dropped",
        Failed => "failed",
        Ignored => "ignored",
        Kept => "kept",
        Preemptor => "preemptor",
        Refused => "refused",
        Score => "score",
        Spared => "spared",
        Unresolvable => "unresolvable",
        Protected => "protected",
        Victim => "victim",
    }
}

catalogue! {
    /// Why, as a stable identifier: a metrics label, and what `/decisions`, Events and
    /// `replay` name.
    Code {
        Allowed => "allowed",
        Candidate => "candidate",
        ClassMayNotPreempt => "class_may_not_preempt",
        ClassNotPreemptible => "class_not_preemptible",
        ClassProtected => "class_protected",
        Classified => "classified",
        DiscardedWork => "discarded_work",
        DoesNotFit => "does_not_fit",
        ExceedsAllocatable => "exceeds_allocatable",
        FairShare => "fair_share",
        FollowOn => "follow_on",
        GangAllSplit => "gang_all_split",
        GangBroken => "gang_broken",
        GangPriority => "gang_priority",
        GangSurplus => "gang_surplus",
        GangUnknown => "gang_unknown",
        JobWouldFail => "job_would_fail",
        LastDisruption => "last_disruption",
        MinRuntime => "min_runtime",
        Neutral => "neutral",
        NoNodeData => "no_node_data",
        NoVictims => "no_victims",
        NoView => "no_view",
        NoViewUidsOnly => "no_view_uids_only",
        NodeNotInView => "node_not_in_view",
        NominatedRoom => "nominated_room",
        NotLowerPriority => "not_lower_priority",
        NotRecreatable => "not_recreatable",
        Outranked => "outranked",
        PdbStrict => "pdb_strict",
        PdbViolation => "pdb_violation",
        Placement => "placement",
        PreemptionNever => "preemption_never",
        ReplacementWaits => "replacement_waits",
        Reprieved => "reprieved",
        RequeueAttempts => "requeue_attempts",
        RequeueDisabled => "requeue_disabled",
        RequeueFailed => "requeue_failed",
        RoomOnItsWay => "room_on_its_way",
        Score => "score",
        Selected => "selected",
        Terminating => "terminating",
        UnknownNode => "unknown_node",
        UnknownUid => "unknown_uid",
        VictimElsewhere => "victim_elsewhere",
        ViewDisagrees => "view_disagrees",
        ViewNotReady => "view_not_ready",
        Chosen => "chosen",
        LeftToOwner => "left_to_owner",
        Lost => "lost",
        Requeued => "requeued",
    }
}

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
    pub verdict: Verdict,
    /// Why, as a stable identifier.
    pub code: Code,
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
        self.verdict == Verdict::Score || (self.verdict == Verdict::Kept && self.code == Code::Allowed)
    }

    pub fn request(verdict: Verdict, code: Code, detail: impl Into<String>) -> Self {
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

    pub fn node(node: &str, verdict: Verdict, code: Code, detail: impl Into<String>) -> Self {
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

    pub fn pod(node: &str, pod: &str, verdict: Verdict, code: Code, detail: impl Into<String>) -> Self {
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
        let key = (e.verdict.as_str(), e.code.as_str());
        match counts.iter_mut().find(|(k, _)| *k == key) {
            Some((_, n)) => *n += 1,
            None => counts.push((key, 1)),
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
