//! Reasons on the pod: which Event a preempt answer deserves (pure), and how often one may
//! be written per pod (`Throttle`). `kube` writes them, off the request path.

pub mod kube;

use std::collections::{BTreeMap, HashMap};

use crate::explanation::{Code, Explanation, LostReason};
use crate::model::Timestamp;
use crate::wire::error::clip;

/// An Event on a pod (the preemptor, a victim of last resort, a replica) or a namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodEvent {
    pub regarding: Regarding,
    /// The pod's namespace; for a namespace, its name.
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub warning: bool,
    /// `PreemptionBlocked` (no candidate left, or the pod may not preempt),
    /// `PreemptionVictims` (who is evicted and why), `LastResortVictim` (a bare pod lost).
    pub reason: &'static str,
    /// What the extender was doing: `Preempt`, or `LoadPolicy`.
    pub action: &'static str,
    pub note: String,
}

/// The Warning a replica records on its own pod when it refuses its policy file (at start,
/// where it serves the built-in default in shadow mode, or on a reload, where the last good
/// policy stays): where `kubectl describe pod` and `kubectl get events` show it.
pub fn policy_invalid(namespace: &str, pod: &str, problem: &str) -> PodEvent {
    PodEvent {
        regarding: Regarding::Pod,
        namespace: namespace.into(),
        name: pod.into(),
        uid: String::new(),
        warning: true,
        reason: "PolicyInvalid",
        action: "LoadPolicy",
        note: clip(&format!("coloc-extender: {problem}"), NOTE_LIMIT).into_owned(),
    }
}

/// What an Event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Regarding {
    Pod,
    Namespace,
}

impl Regarding {
    pub fn kind(self) -> &'static str {
        match self {
            Regarding::Pod => "Pod",
            Regarding::Namespace => "Namespace",
        }
    }
}

/// The Events API limit for `note`.
const NOTE_LIMIT: usize = 1000;

/// The Event a preempt answer deserves, if any: a Warning when it vetoes every candidate
/// or the pod may not preempt, a Normal naming the victims when it has some.
pub fn for_preempt(pod: &str, pod_uid: &str, ex: &[Explanation]) -> Option<PodEvent> {
    let (namespace, name) = pod.split_once('/')?;
    let event = |warning, reason, note: String| PodEvent {
        regarding: Regarding::Pod,
        namespace: namespace.into(),
        name: name.into(),
        uid: pod_uid.to_string(),
        warning,
        reason,
        action: "Preempt",
        note: clip(&note, NOTE_LIMIT).into_owned(),
    };
    if let Some(refused) = ex.iter().find(|e| e.subject == "request" && e.verdict == "refused") {
        return Some(event(true, "PreemptionBlocked", format!("coloc-extender: no preemption: {}", refused.detail)));
    }
    let candidates_left =
        ex.iter().filter(|e| e.subject == "node" && e.verdict == "kept" && e.code == "selected").count();
    if candidates_left == 0 {
        let vetoes = vetoes(ex);
        if vetoes.is_empty() {
            return None;
        }
        return Some(event(
            true,
            "PreemptionBlocked",
            format!("coloc-extender: no node can make room under the policy: {vetoes}"),
        ));
    }
    // Victims of the returned nodes only (others were outranked); a victim may have
    // several lines (e.g. its PDB violation, then its fate): one entry, every phrase.
    let selected = selected_nodes(ex);
    let mut by_node: BTreeMap<&str, BTreeMap<&str, Vec<&str>>> = BTreeMap::new();
    for v in ex.iter().filter(|e| e.subject == "pod" && e.verdict == "victim") {
        let (Some(node), Some(pod)) = (v.node.as_deref(), v.pod.as_deref()) else { continue };
        if selected.contains(&node) {
            let phrases = by_node.entry(node).or_default().entry(pod).or_default();
            if !phrases.contains(&victim_phrase(v)) {
                phrases.push(victim_phrase(v));
            }
        }
    }
    if by_node.is_empty() {
        return None;
    }
    let nodes: Vec<String> = by_node
        .into_iter()
        .map(|(n, pods)| {
            format!(
                "{n}: {}",
                pods.into_iter().map(|(p, why)| format!("{p} ({})", why.join(", "))).collect::<Vec<_>>().join(", ")
            )
        })
        .collect();
    // The order of `Cost` (decide/preempt/plan.rs), in words.
    let why = "the cheapest choice under the policy (fewest victims of last resort, fewest PDB violations, then no lost work, the least valuable class, fewest budgets spent to the last, then the least on one figure: work thrown away, a broken gang's included, restarts, and the wait at the class's waitPrice)";
    // How soon, first: the line most likely to be read, never the one clipped.
    let wait = ex
        .iter()
        .find(|e| e.subject == "request" && e.code == Code::ExpectedWait)
        .map(|e| format!("{}; ", e.detail))
        .unwrap_or_default();
    Some(event(false, "PreemptionVictims", format!("coloc-extender: {wait}victims {}; {why}", nodes.join("; "))))
}

/// The nodes a preempt answer returns.
fn selected_nodes(ex: &[Explanation]) -> Vec<&str> {
    ex.iter()
        .filter(|e| e.subject == "node" && e.verdict == "kept" && e.code == "selected")
        .filter_map(|e| e.node.as_deref())
        .collect()
}

/// The victims of last resort a preempt answer names on the nodes it returns (bare pods
/// requeue cannot bring back), each with why it is lost.
pub fn last_resort_victims(ex: &[Explanation]) -> Vec<(&Explanation, LostReason)> {
    let selected = selected_nodes(ex);
    ex.iter()
        .filter(|e| e.subject == "pod" && e.verdict == "victim" && e.code == Code::LastResort)
        .filter(|e| e.node.as_deref().is_some_and(|n| selected.contains(&n)))
        .filter_map(|e| Some((e, e.lost_reason?)))
        .collect()
}

/// Warnings for the victims of last resort a preempt answer for `preemptor` names: one
/// on each such pod (why it is lost) and one on each of their namespaces (which pods,
/// and what to change), so that a tenant sees it where it looks.
pub fn for_last_resort(preemptor: &str, ex: &[Explanation]) -> Vec<PodEvent> {
    let event = |regarding, namespace: &str, name: &str, note: String| PodEvent {
        regarding,
        namespace: namespace.into(),
        name: name.into(),
        uid: String::new(),
        warning: true,
        reason: "LastResortVictim",
        action: "Preempt",
        note: clip(&note, NOTE_LIMIT).into_owned(),
    };
    let mut events = Vec::new();
    let mut by_namespace: BTreeMap<&str, Vec<(&str, LostReason)>> = BTreeMap::new();
    for (e, reason) in last_resort_victims(ex) {
        let (Some(node), Some(key)) = (e.node.as_deref(), e.pod.as_deref()) else { continue };
        let Some((namespace, name)) = key.split_once('/') else { continue };
        let note =
            format!("coloc-extender: evicted on {node} to place {preemptor}, as a last resort, and lost: {}", e.detail);
        events.push(event(Regarding::Pod, namespace, name, note));
        by_namespace.entry(namespace).or_default().push((name, reason));
    }
    for (namespace, pods) in by_namespace {
        let mut reasons: Vec<LostReason> = pods.iter().map(|(_, r)| *r).collect();
        reasons.sort_unstable();
        reasons.dedup();
        let names: Vec<&str> = pods.iter().map(|(n, _)| *n).collect();
        let why: Vec<&str> = reasons.iter().map(|r| r.meaning()).collect();
        let note = format!(
            "coloc-extender: {} bare pod(s) here evicted to place {preemptor}, as a last resort, and lost: {}; {}",
            names.len(),
            names.join(", "),
            why.join("; ")
        );
        events.push(event(Regarding::Namespace, namespace, namespace, note));
    }
    events
}

/// Why one victim, in a few words.
fn victim_phrase(e: &Explanation) -> &'static str {
    match e.code.as_str() {
        "requeued" => "bare pod, requeued",
        "lost" => "bare pod, lost: its class allows it",
        "last_resort" => "bare pod that cannot be requeued, lost: a last resort",
        "pdb_violation" => "violates its PDB, best-effort class",
        "left_to_owner" => "left to its owner, not requeued",
        _ => "recreated by its controller",
    }
}

/// "2 nodes: only bare pods could make room (requeue disabled); 1 node: strict PDB ns/name":
/// one phrase per vetoed node, grouped, most frequent first.
pub fn vetoes(ex: &[Explanation]) -> String {
    let mut per_node: BTreeMap<&str, String> = BTreeMap::new();
    for e in ex.iter().filter(|e| e.subject == "node" && e.verdict == "dropped") {
        let node = e.node.as_deref().unwrap_or("-");
        per_node.entry(node).or_insert_with(|| veto_phrase(e, ex));
    }
    let mut groups: BTreeMap<&str, usize> = BTreeMap::new();
    for phrase in per_node.values() {
        *groups.entry(phrase).or_insert(0) += 1;
    }
    let mut groups: Vec<(&str, usize)> = groups.into_iter().collect();
    groups.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    groups
        .iter()
        .map(|(p, n)| format!("{n} node{}: {p}", if *n == 1 { "" } else { "s" }))
        .collect::<Vec<_>>()
        .join("; ")
}

fn veto_phrase(dropped: &Explanation, ex: &[Explanation]) -> String {
    match dropped.code.as_str() {
        "does_not_fit" => {
            // What kept the room: the pods spared on that node, most telling reason first.
            let spared: Vec<&str> = ex
                .iter()
                .filter(|e| {
                    e.subject == "pod" && e.node == dropped.node && matches!(e.verdict.as_str(), "spared" | "protected")
                })
                .map(|e| e.code.as_str())
                .collect();
            match PROTECTION_ORDER.iter().find(|c| spared.contains(c)) {
                Some(code) => phrase(code).to_string(),
                None => "does not fit even after evicting every pod the policy allows".into(),
            }
        }
        "pdb_strict" => match dropped.detail.split_once("PDB ").and_then(|(_, rest)| rest.split_whitespace().next()) {
            Some(pdb) => format!("strict PDB {pdb}"),
            None => "strict PDB".into(),
        },
        code => phrase(code).to_string(),
    }
}

/// Protection codes, the one an operator can act on first.
const PROTECTION_ORDER: [&str; 7] = [
    "cannot_requeue",
    "not_recreatable",
    "min_runtime",
    "class_protected",
    "class_not_preemptible",
    "not_lower_priority",
    "terminating",
];

fn phrase(code: &str) -> &str {
    match code {
        "cannot_requeue" => "only bare pods requeue cannot bring back could make room (only an online pod takes them)",
        "not_recreatable" => "only bare pods could make room (their class protects them)",
        "min_runtime" => "only pods younger than their class's minRuntime could make room",
        "class_protected" => "only pods of never-evicted classes could make room",
        "class_not_preemptible" => "only pods of classes this pod may not preempt could make room",
        "not_lower_priority" => "only pods of equal or higher priority could make room",
        "terminating" => "only terminating pods could make room",
        "gang_broken" => "would break a gang while another node does not",
        "gang_unknown" => "a victim belongs to a gang and there is no cluster view to check it",
        "no_view_uids_only" | "node_not_in_view" => "its victims cannot be checked (no cluster view of the node)",
        "view_disagrees" => "the cluster view and kube-scheduler disagree (one is stale)",
        "victim_elsewhere" => "a proposed victim is on another node",
        "outranked" => "a cheaper node was chosen",
        other => other,
    }
}

/// Per pod, how often an Event may be written: the same reason and note at most once per
/// `repeat_after`, a changed note at most once per `min_interval`. A pod retrying every
/// 10 s with the same story writes once.
pub struct Throttle {
    pub min_interval: i64,
    pub repeat_after: i64,
    pub capacity: usize,
    last: HashMap<(String, &'static str), (String, Timestamp)>,
}

impl Throttle {
    pub fn new(min_interval: i64, repeat_after: i64, capacity: usize) -> Self {
        Throttle { min_interval, repeat_after, capacity, last: HashMap::new() }
    }

    /// May `e` be written at `now`? If so it is remembered as written.
    pub fn admit(&mut self, e: &PodEvent, now: Timestamp) -> bool {
        let key = (format!("{}/{}/{}/{}", e.regarding.kind(), e.namespace, e.name, e.uid), e.reason);
        if let Some((note, at)) = self.last.get(&key) {
            let wait = if *note == e.note { self.repeat_after } else { self.min_interval };
            if now - at < wait {
                return false;
            }
        }
        if self.last.len() >= self.capacity && !self.last.contains_key(&key) {
            let horizon = self.repeat_after;
            self.last.retain(|_, (_, at)| now - *at < horizon);
            if self.last.len() >= self.capacity {
                return false;
            }
        }
        self.last.insert(key, (e.note.clone(), now));
        true
    }
}
