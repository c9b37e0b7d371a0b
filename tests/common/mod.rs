//! Small builders for scenario tests: the smallest cluster that shows a rule.
#![allow(dead_code)]

pub mod forged;

use std::collections::BTreeMap;

use coloc_extender::cluster::{Objects, View};
use coloc_extender::decide::{self, Context};
use coloc_extender::explanation::Explanation;
use coloc_extender::model::RequeueIntent;
use coloc_extender::model::{
    DisruptionMode, GangSource, HostPort, Labels, Node, OwnerRef, Pdb, Pod, PodGroup, Resources, Selector,
};
use coloc_extender::policy::Policy;
use coloc_extender::wire::{Candidates, PreemptArgs, PreemptionResult};
use coloc_extender::wire::{VictimUids, Victims};

pub const NOW: i64 = 1_800_000_000;

/// The policy scenarios start from: `online` preempts `batch` and `free`, `batch`
/// preempts `free`, both are victims with best-effort PDBs, one candidate returned. A
/// test changes only the part its rule is about.
#[derive(Clone)]
pub struct Classes {
    max_candidates: Option<u32>,
    extra: String,
    online_preempts: &'static str,
    online_more: String,
    batch_preempts: Option<&'static str>,
    batch_victim: String,
    batch_more: String,
    free_victim: String,
    free_more: String,
}

pub fn classes() -> Classes {
    Classes {
        max_candidates: Some(1),
        extra: String::new(),
        online_preempts: "[batch, free]",
        online_more: String::new(),
        batch_preempts: Some("[free]"),
        batch_victim: "{allowed: true, pdb: prefer}".into(),
        batch_more: String::new(),
        free_victim: "{allowed: true, pdb: prefer}".into(),
        free_more: String::new(),
    }
}

impl Classes {
    /// `None`: the policy's default.
    pub fn max_candidates(mut self, n: Option<u32>) -> Self {
        self.max_candidates = n;
        self
    }
    /// Top-level fields (a `maxCandidates` here wins).
    pub fn extra(mut self, yaml: &str) -> Self {
        self.extra = yaml.into();
        self
    }
    pub fn online_preempts(mut self, list: &'static str) -> Self {
        self.online_preempts = list;
        self
    }
    /// A field of class `online`, as `key: value`.
    pub fn online(mut self, field: &str) -> Self {
        self.online_more += &format!("    {field}\n");
        self
    }
    /// `None`: batch preempts nothing.
    pub fn batch_preempts(mut self, list: Option<&'static str>) -> Self {
        self.batch_preempts = list;
        self
    }
    pub fn batch_victim(mut self, flow: &str) -> Self {
        self.batch_victim = flow.into();
        self
    }
    pub fn batch(mut self, field: &str) -> Self {
        self.batch_more += &format!("    {field}\n");
        self
    }
    pub fn free_victim(mut self, flow: &str) -> Self {
        self.free_victim = flow.into();
        self
    }
    pub fn free(mut self, field: &str) -> Self {
        self.free_more += &format!("    {field}\n");
        self
    }
    /// Both offline classes' victim rules.
    pub fn victims(self, flow: &str) -> Self {
        self.batch_victim(flow).free_victim(flow)
    }

    pub fn yaml(&self) -> String {
        let max = match self.max_candidates {
            Some(n) if !self.extra.contains("maxCandidates") => format!("maxCandidates: {n}\n"),
            _ => String::new(),
        };
        let batch_preempts = self.batch_preempts.map(|l| format!("    preempts: {l}\n")).unwrap_or_default();
        format!(
            "defaultClass: unclassified\n{max}{extra}\nclasses:\n  - name: online\n    match: [{{priorityClassNames: [online]}}]\n    preempts: {online_preempts}\n{online_more}  - name: batch\n    match: [{{priorityClassNames: [batch]}}]\n{batch_preempts}    victim: {batch_victim}\n{batch_more}  - name: free\n    match: [{{priorityClassNames: [free]}}]\n    victim: {free_victim}\n{free_more}  - name: unclassified\n",
            extra = self.extra,
            online_preempts = self.online_preempts,
            online_more = self.online_more,
            batch_victim = self.batch_victim,
            batch_more = self.batch_more,
            free_victim = self.free_victim,
            free_more = self.free_more,
        )
    }

    pub fn build(&self) -> Policy {
        Policy::from_yaml(&self.yaml()).unwrap_or_else(|e| panic!("test policy is invalid: {e}\n{}", self.yaml()))
    }
}

/// The scenarios' usual policy: batch's PDBs as `batch_pdb` says, only recreatable pods
/// and batch pods past 10 minutes of run are victims.
pub fn policy(batch_pdb: &str, extra: &str) -> Policy {
    classes()
        .batch_victim(&format!("{{allowed: true, pdb: {batch_pdb}, recreatableOnly: true, minRuntime: 10m}}"))
        .free_victim("{allowed: true, pdb: prefer, recreatableOnly: true}")
        .extra(extra)
        .build()
}

pub fn node(name: &str, milli_cpu: i64, mem_gi: i64) -> Node {
    Node {
        name: name.into(),
        allocatable: Resources { milli_cpu, memory: mem_gi << 30, ephemeral_storage: 100 << 30, ..Default::default() },
        allocatable_pods: 110,
        ..Default::default()
    }
}

/// A running pod owned by a ReplicaSet, started an hour before NOW.
pub fn pod(name: &str, class: &str, node: Option<&str>, milli_cpu: i64) -> Pod {
    let priority = match class {
        "online" => 10_000,
        "batch" => 100,
        "free" => 10,
        _ => 0,
    };
    Pod {
        name: name.into(),
        namespace: "default".into(),
        uid: format!("uid-{name}"),
        labels: Labels::from([(
            "app".to_string(),
            name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '-').to_string(),
        )]),
        controller: Some(OwnerRef { kind: "ReplicaSet".into(), name: "rs".into() }),
        creation_time: Some(NOW - 3600),
        start_time: Some(NOW - 3600),
        priority: Some(priority),
        priority_class_name: Some(class.into()),
        node_name: node.map(Into::into),
        phase: Some("Running".into()),
        requests: Resources { milli_cpu, memory: 1 << 20, ..Default::default() },
        ..Default::default()
    }
}

pub trait PodExt {
    fn bare(self) -> Self;
    fn ns(self, ns: &str) -> Self;
    fn label(self, k: &str, v: &str) -> Self;
    fn annotate(self, k: &str, v: &str) -> Self;
    fn started(self, secs_before_now: i64) -> Self;
    fn host_port(self, port: i32) -> Self;
    fn scalar(self, name: &str, n: i64) -> Self;
    fn never(self) -> Self;
    /// `spec.schedulingGroup.podGroupName`: a member of a native PodGroup.
    fn in_pod_group(self, name: &str) -> Self;
    /// `spec.terminationGracePeriodSeconds`.
    fn grace(self, secs: i32) -> Self;
    /// Being deleted since `secs_ago` with its own grace period (as a user's delete).
    fn deleted(self, secs_ago: i64) -> Self;
    /// Owned by the `kind` named `name` (its controller).
    fn owned_by(self, kind: &str, name: &str) -> Self;
}

impl PodExt for Pod {
    fn bare(mut self) -> Self {
        self.controller = None;
        self
    }
    fn ns(mut self, ns: &str) -> Self {
        self.namespace = ns.into();
        self
    }
    fn label(mut self, k: &str, v: &str) -> Self {
        self.labels.insert(k.into(), v.into());
        self
    }
    fn annotate(mut self, k: &str, v: &str) -> Self {
        self.annotations.insert(k.into(), v.into());
        self
    }
    fn started(mut self, secs_before_now: i64) -> Self {
        self.start_time = Some(NOW - secs_before_now);
        self.creation_time = Some(NOW - secs_before_now);
        self
    }
    fn host_port(mut self, port: i32) -> Self {
        self.host_ports.push(HostPort { port, protocol: "TCP".into(), ip: "0.0.0.0".into() });
        self
    }
    fn scalar(mut self, name: &str, n: i64) -> Self {
        self.requests.scalar.insert(name.into(), n);
        self
    }
    fn never(mut self) -> Self {
        self.preemption_never = true;
        self
    }
    fn in_pod_group(mut self, name: &str) -> Self {
        self.scheduling_group = Some(name.into());
        self
    }
    fn grace(mut self, secs: i32) -> Self {
        self.grace_period = Some(secs);
        self
    }
    fn deleted(mut self, secs_ago: i64) -> Self {
        let grace = self.grace_period.unwrap_or(30);
        self.deletion_grace_period = Some(grace);
        self.deletion_time = Some(NOW - secs_ago + i64::from(grace));
        self
    }
    fn owned_by(mut self, kind: &str, name: &str) -> Self {
        self.controller = Some(OwnerRef { kind: kind.into(), name: name.into() });
        self
    }
}

/// A PodGroup in `default` with minimum `min` that members may leave one at a time.
pub fn pod_group(source: GangSource, name: &str, min: usize) -> PodGroup {
    PodGroup {
        source,
        namespace: "default".into(),
        name: name.into(),
        min_count: Some(min),
        disruption: DisruptionMode::Single,
        priority: None,
        priority_class_name: None,
    }
}

pub fn pdb(name: &str, app: &str, allowed: i32) -> Pdb {
    Pdb {
        name: name.into(),
        namespace: "default".into(),
        selector: Some(Selector { match_labels: Labels::from([("app", app)]), ..Default::default() }),
        disruptions_allowed: allowed,
        disrupted_pods: vec![],
        current_healthy: None,
    }
}

pub struct Scenario {
    pub policy: Policy,
    pub objects: Objects,
    /// A view is configured but may be missing (not synced, stale).
    pub view_expected: bool,
    /// The requeue controller runs (`serve --kube --requeue`); on by default, as in replay.
    pub requeue: bool,
    /// Room earlier answers promised (the edge's `service::Promises`).
    pub promised: Vec<coloc_extender::decide::promised::PromisedRoom>,
    /// Pods the view saw stop before, each in so many milliseconds from its delete.
    pub stopped: Vec<(Pod, i64)>,
}

pub struct Outcome {
    pub result: PreemptionResult,
    pub explanations: Vec<Explanation>,
    pub requeues: Vec<RequeueIntent>,
    pub view_behind: bool,
    /// How soon the room is free on each returned node, milliseconds.
    pub waits: BTreeMap<String, i64>,
    /// What the answer promised (room and victims), for the next decisions.
    pub promised: Vec<coloc_extender::decide::promised::PromisedRoom>,
}

impl Outcome {
    /// node → victim UIDs in answer order.
    pub fn victims(&self) -> BTreeMap<String, Vec<String>> {
        self.result
            .node_name_to_meta_victims
            .iter()
            .map(|(n, v)| (n.clone(), v.pods.iter().map(|p| p.uid.clone()).collect()))
            .collect()
    }

    pub fn violations(&self, node: &str) -> i64 {
        self.result.node_name_to_meta_victims[node].num_pdb_violations
    }

    pub fn has(&self, verdict: &str, code: &str) -> bool {
        self.explanations.iter().any(|e| e.verdict == verdict && e.code == code)
    }

    pub fn explain(&self) -> String {
        self.explanations.iter().map(|e| format!("{e}\n")).collect()
    }
}

pub fn uids(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| format!("uid-{n}")).collect()
}

impl Scenario {
    pub fn new(policy: Policy) -> Self {
        Scenario {
            policy,
            objects: Objects::default(),
            view_expected: false,
            requeue: true,
            promised: Vec::new(),
            stopped: Vec::new(),
        }
    }

    pub fn node(mut self, n: Node) -> Self {
        self.objects.nodes.push(n);
        self
    }

    pub fn pods(mut self, pods: impl IntoIterator<Item = Pod>) -> Self {
        self.objects.pods.extend(pods);
        self
    }

    /// A namespace of the cluster; once one is given, only those labelled to opt in take
    /// requeue copies (as a watched cluster's).
    pub fn namespace(mut self, name: &str, labels: &[(&str, &str)]) -> Self {
        let labels: Labels = labels.iter().copied().collect();
        let opt_in = coloc_extender::model::marks::namespace_opt_in(name, &labels);
        self.objects
            .namespaces
            .get_or_insert_with(Vec::new)
            .push(coloc_extender::model::Namespace { name: name.into(), opt_in });
        self
    }

    pub fn pdb(mut self, p: Pdb) -> Self {
        self.objects.pdbs.push(p);
        self
    }

    pub fn pod_group(mut self, g: PodGroup) -> Self {
        self.objects.pod_groups.push(g);
        self
    }

    /// The view saw `pod` (bound, started) deleted an hour ago, and gone `secs` later: how
    /// long its owner's pods, and its class's with its grace period, take to stop.
    pub fn stopped(mut self, pod: Pod, secs: f64) -> Self {
        self.stopped.push((pod, (secs * 1000.0) as i64));
        self
    }

    pub fn view(&self) -> View {
        let mut view = View::build(self.objects.clone(), &self.policy);
        for (pod, ms) in &self.stopped {
            let pod = pod.clone().deleted(3600);
            let deleted_ms = (NOW - 3600) * 1000 + 500;
            view.set_clock_ms(deleted_ms);
            view.apply_pod(std::sync::Arc::new(pod.clone()), &self.policy);
            view.set_clock_ms(deleted_ms + ms);
            view.remove_deleted_pod(&pod.key(), &pod, &self.policy);
        }
        view
    }

    /// Pods kube-scheduler would propose as victims on `node`: every lower-priority pod.
    fn lower_priority_on<'a>(&'a self, preemptor: &Pod, node: &'a str) -> impl Iterator<Item = &'a Pod> + 'a {
        let prio = preemptor.priority.unwrap_or(0);
        self.objects.pods.iter().filter(move |p| p.node_name.as_deref() == Some(node) && p.priority.unwrap_or(0) < prio)
    }

    /// Candidates as kube-scheduler would send them with nodeCacheCapable: true.
    pub fn meta_candidates(&self, preemptor: &Pod, nodes: &[&str]) -> Candidates {
        Candidates::Meta(
            nodes
                .iter()
                .map(|n| {
                    let uids = self.lower_priority_on(preemptor, n).map(|p| p.uid.clone()).collect();
                    (n.to_string(), VictimUids { uids, num_pdb_violations: 0 })
                })
                .collect(),
        )
    }

    /// The same in nodeCacheCapable: false form (full pods).
    pub fn full_candidates(&self, preemptor: &Pod, nodes: &[&str]) -> Candidates {
        Candidates::Full(
            nodes
                .iter()
                .map(|n| {
                    let pods: Vec<Pod> = self.lower_priority_on(preemptor, n).cloned().collect();
                    (
                        n.to_string(),
                        Victims {
                            count: pods.len(),
                            uids: pods.iter().map(|p| p.uid.clone()).collect(),
                            pods,
                            num_pdb_violations: 0,
                        },
                    )
                })
                .collect(),
        )
    }

    pub fn preempt_with(&self, preemptor: Pod, candidates: Candidates, view: Option<&View>) -> Outcome {
        let ctx = Context {
            promised: &self.promised,
            ..Context::new(&self.policy, view, NOW).with_requeue(self.requeue).with_view_expected(self.view_expected)
        };
        let out = decide::preempt(&PreemptArgs { pod: preemptor, candidates }, &ctx);
        Outcome {
            result: out.result,
            explanations: out.explanations,
            requeues: out.requeues,
            view_behind: out.view_behind,
            waits: out.waits.into_iter().map(|(n, w)| (n, w.ms)).collect(),
            promised: out.promised,
        }
    }

    /// Preempt with the cluster view, candidates in UID form for `nodes`.
    pub fn preempt(&self, preemptor: Pod, nodes: &[&str]) -> Outcome {
        let view = self.view();
        let candidates = self.meta_candidates(&preemptor, nodes);
        self.preempt_with(preemptor, candidates, Some(&view))
    }
}
