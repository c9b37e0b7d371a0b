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
        Waits => "waits",
    }
}

catalogue! {
    /// Why, as a stable identifier: a metrics label, and what `/decisions`, Events and
    /// `replay` name.
    Code {
        Allowed => "allowed",
        Candidate => "candidate",
        CannotRequeue => "cannot_requeue",
        ClassMayNotPreempt => "class_may_not_preempt",
        ClassNotPreemptible => "class_not_preemptible",
        ClassProtected => "class_protected",
        Classified => "classified",
        DiscardedWork => "discarded_work",
        DoesNotFit => "does_not_fit",
        ExpectedWait => "expected_wait",
        ExceedsAllocatable => "exceeds_allocatable",
        FairShare => "fair_share",
        FollowOn => "follow_on",
        GangAllSplit => "gang_all_split",
        GangBroken => "gang_broken",
        GangBrokenAlready => "gang_broken_already",
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
        OnlineRoomKept => "online_room_kept",
        Outranked => "outranked",
        PdbStrict => "pdb_strict",
        PdbViolation => "pdb_violation",
        Placement => "placement",
        PreemptionNever => "preemption_never",
        ReplacementWaits => "replacement_waits",
        Reprieved => "reprieved",
        RoomLeftOver => "room_left_over",
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
        LastResort => "last_resort",
        Requeued => "requeued",
    }
}

catalogue! {
    /// Why a bare pod of a `requeue` class cannot be requeued, so that evicting it loses it:
    /// the `reason` label of `coloc_bare_lost_total`.
    LostReason {
        NamespaceNotOptedIn => "namespace_not_opted_in",
        MaxAttempts => "max_attempts",
        RequeueUnavailable => "requeue_unavailable",
        BeyondBaseline => "beyond_baseline",
    }
}

impl From<crate::policy::CannotRequeue> for LostReason {
    fn from(c: crate::policy::CannotRequeue) -> LostReason {
        use crate::policy::CannotRequeue as C;
        match c {
            C::Unavailable => LostReason::RequeueUnavailable,
            C::BeyondBaseline(_) => LostReason::BeyondBaseline,
            C::MaxAttempts { .. } => LostReason::MaxAttempts,
            C::NamespaceNotOptedIn => LostReason::NamespaceNotOptedIn,
        }
    }
}

impl LostReason {
    /// Why such a pod cannot be requeued, and what would change it.
    pub fn meaning(self) -> &'static str {
        match self {
            LostReason::NamespaceNotOptedIn => {
                "the namespace has not opted in to requeue copies (label it coloc-extender.io/requeue=enabled for its bare pods to be requeued)"
            }
            LostReason::MaxAttempts => "requeued as often as its class allows (requeue.maxAttempts)",
            LostReason::RequeueUnavailable => {
                "requeue is off or cannot store copies (serve --kube --requeue and the requeue component)"
            }
            LostReason::BeyondBaseline => {
                "its spec exceeds Pod Security baseline, which a copy carries only where its namespace opted in (label coloc-extender.io/requeue-beyond-baseline=enabled)"
            }
        }
    }
}

impl Code {
    /// What the code means, in the words docs/decisions.md lists them with.
    pub fn meaning(self) -> &'static str {
        match self {
            Code::Allowed => "filter: the node passes the pod's placement rules",
            Code::Candidate => "preempt: a node's plan and its cost, before ranking",
            Code::CannotRequeue => {
                "a bare pod of a requeue class that cannot be requeued: only an online pod takes it, as a last resort"
            }
            Code::ClassMayNotPreempt => "the preemptor's class may preempt no class",
            Code::ClassNotPreemptible => "the preemptor's class may not preempt this pod's class",
            Code::ClassProtected => "the pod's class is never a victim",
            Code::Classified => "the preemptor's class and priority",
            Code::DiscardedWork => "the run time the sent answer discards (and in shadow mode the policy's)",
            Code::DoesNotFit => "the preemptor does not fit even with every evictable pod gone",
            Code::ExpectedWait => {
                "how soon the room of the answer is expected free, and of kube-scheduler's own choice"
            }
            Code::ExceedsAllocatable => "the pod asks for more than the node can ever offer",
            Code::FairShare => "spared by fair sharing: its tenant holds no more than the preemptor's",
            Code::FollowOn => "evicting it is expected to set off further evictions when it comes back",
            Code::GangAllSplit => "a disruptionMode All gang could only be partly evicted here: kept whole",
            Code::GangBroken => "the plan leaves a gang below its minimum",
            Code::GangBrokenAlready => "a gang below its minimum already: its members cost nothing more",
            Code::GangPriority => "the gang's priority is not below the preemptor's",
            Code::GangSurplus => "gang members above the gang's minimum: evicting them breaks nothing",
            Code::GangUnknown => "without a view it cannot be told whether evicting a gang member breaks the gang",
            Code::JobWouldFail => "evicting it would fail its Job, and the class protects such Job pods",
            Code::LastDisruption => "it spends the last disruption its PDB allows",
            Code::MinRuntime => "it has not run the class's minimum run time yet",
            Code::Neutral => "prioritize: the class prefers nothing, kube-scheduler's own scores rank the nodes",
            Code::NoNodeData => "filter: node names only and no view, every node kept",
            Code::NoVictims => "a candidate where the pod fits without victims, returned as is",
            Code::NoView => "no cluster view: kube-scheduler's victims are judged, not re-selected",
            Code::NoViewUidsOnly => "victims as UIDs only and no view: none can be checked, the node is dropped",
            Code::NodeNotInView => "a candidate node the view does not know",
            Code::RoomLeftOver => {
                "the room a plan leaves over places online pods already waiting: they share its cost"
            }
            Code::NominatedRoom => {
                "pending pods nominated to the node with at least the preemptor's priority hold their room"
            }
            Code::NotLowerPriority => "its priority is not below the preemptor's",
            Code::NotRecreatable => "a bare pod nothing would bring back, and the class protects bare pods",
            Code::OnlineRoomKept => {
                "filter: a young pod of a class that keeps off online room would take room an online pod of a size bound now fits in"
            }
            Code::Outranked => "a cheaper candidate was chosen (maxCandidates)",
            Code::PdbStrict => "the plan would exceed a PDB of a strict class: the node is dropped",
            Code::PdbViolation => "it violates its PDB (a best-effort class)",
            Code::Placement => "filter: the node breaks the class's placement rules",
            Code::PreemptionNever => "the pod's preemptionPolicy is Never",
            Code::ReplacementWaits => "a requeued pod whose class says requeue.preemption: never waits for free room",
            Code::Reprieved => "spared: the preemptor fits with it in place",
            Code::RoomOnItsWay => {
                "room freed by earlier evictions is on its way (or already free) where the pod fits: no new evictions, unless they free room sooner by seconds worth more (waitPrice) than the work they throw away"
            }
            Code::Score => "prioritize: a node's score and why",
            Code::Selected => "the candidate returned, and its rank",
            Code::Terminating => "already terminating",
            Code::UnknownNode => "filter: a node the view does not know, kept unjudged",
            Code::UnknownUid => "kube-scheduler proposed a pod the view does not know",
            Code::VictimElsewhere => "kube-scheduler proposed a pod the view has on another node",
            Code::ViewDisagrees => "the view says the pod fits without evictions, kube-scheduler says not",
            Code::ViewNotReady => "no usable view and the class says withoutView: refuse",
            Code::Requeued => "a bare victim, requeued: the requeue controller copies it once it is evicted",
            Code::Lost => "a victim whose class allows losing it (bare: lose, or a Job that would fail)",
            Code::LastResort => {
                "a bare victim of a requeue class that cannot be requeued, chosen as a last resort (no other victims place the pod): lost"
            }
            Code::LeftToOwner => "a bare victim left to its non-controller owner, or opted out of requeue",
            Code::Chosen => "a victim its controller recreates",
        }
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
    /// For a victim of last resort: why it cannot be requeued (a bounded metrics label).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lost_reason: Option<LostReason>,
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
            lost_reason: None,
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
            lost_reason: None,
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
            lost_reason: None,
        }
    }

    /// The decision is about a gang declared by `source`.
    pub fn for_gang(mut self, source: crate::model::GangSource) -> Self {
        self.gang_source = Some(source.name());
        self
    }

    /// The decision names a victim of last resort, lost for `reason`.
    pub fn lost_for(mut self, reason: LostReason) -> Self {
        self.lost_reason = Some(reason);
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

#[cfg(test)]
mod tests {
    use super::LostReason;
    use crate::model::BaselineControl;
    use crate::policy::CannotRequeue;

    /// A loss is named alike on the decisions' metric and the controller's.
    #[test]
    fn each_reason_requeue_cannot_has_its_lost_reason_of_the_same_name() {
        let all = [
            CannotRequeue::Unavailable,
            CannotRequeue::BeyondBaseline(BaselineControl::HostPorts),
            CannotRequeue::MaxAttempts { done: 1, max: 1 },
            CannotRequeue::NamespaceNotOptedIn,
        ];
        for c in all {
            assert_eq!(LostReason::from(c).as_str(), c.code());
        }
        assert_eq!(all.len(), LostReason::ALL.len());
    }
}
