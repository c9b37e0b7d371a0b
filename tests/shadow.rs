//! Shadow mode never changes a scheduling outcome: for any request, in both
//! nodeCacheCapable modes, with and without a cluster view, the answer is what
//! kube-scheduler does without an extender (every node kept, score 0 everywhere, its own
//! preemption candidates unchanged), while the policy's decision is still made and its
//! differences counted.

use coloc_extender::cluster::{snapshot, View};
use coloc_extender::decide::Context;
use coloc_extender::pipeline::{answer, Verb};
use coloc_extender::policy::{Mode, PdbMode, Policy};
use coloc_extender::shadow::DiffKind;
use coloc_extender::wire::Bounds;
use proptest::prelude::*;
use serde_json::{json, Value};

const NOW: i64 = 1_800_000_000;

#[derive(Debug, Clone)]
struct GenPod {
    priority: i32,
    cpu: i64,
    bare: bool,
    gang: Option<u8>,
    node: usize,
}

fn gen_pod() -> impl Strategy<Value = GenPod> {
    (
        prop::sample::select(vec![0, 3500, 6000, 7500, 9500]),
        100i64..3000,
        any::<bool>(),
        prop::option::of(0u8..2),
        0usize..4,
    )
        .prop_map(|(priority, cpu, bare, gang, node)| GenPod { priority, cpu, bare, gang, node })
}

fn node_json(i: usize, offline: bool) -> Value {
    let labels = if offline { json!({"colocation.example.com/offline-allowed": "true"}) } else { json!({}) };
    json!({"metadata": {"name": format!("node-{i}"), "labels": labels},
           "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}}})
}

fn pod_json(name: &str, p: &GenPod, with_node: bool) -> Value {
    let mut labels = json!({});
    if let Some(g) = p.gang {
        labels["scheduling.x-k8s.io/pod-group"] = json!(format!("gang-{g}"));
    }
    let mut meta = json!({"name": name, "namespace": "batch", "uid": format!("uid-{name}"), "labels": labels,
        "annotations": {"scheduling.x-k8s.io/min-member": "2"}});
    if !p.bare {
        meta["ownerReferences"] =
            json!([{"apiVersion": "batch/v1", "kind": "Job", "name": "job", "uid": "job-uid", "controller": true}]);
    }
    let mut spec = json!({"priority": p.priority, "containers": [{"name": "c", "resources": {"requests": {"cpu": format!("{}m", p.cpu), "memory": "1Gi"}}}]});
    if with_node {
        spec["nodeName"] = json!(format!("node-{}", p.node));
    }
    json!({"kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": "Running", "startTime": "2026-11-01T00:00:00Z"}})
}

#[derive(Debug, Clone)]
struct Case {
    nodes: Vec<Value>,
    pods: Vec<(String, GenPod)>,
    preemptor: Value,
}

fn gen_case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(any::<bool>(), 1..5),
        prop::collection::vec(gen_pod(), 0..10),
        prop::sample::select(vec![0, 3500, 6000, 9500]),
        500i64..4000,
    )
        .prop_map(|(offline, mut pods, priority, cpu)| {
            let nodes: Vec<Value> = offline.iter().enumerate().map(|(i, o)| node_json(i, *o)).collect();
            for p in &mut pods {
                p.node %= nodes.len();
            }
            let pods = pods.into_iter().enumerate().map(|(i, p)| (format!("p{i}"), p)).collect();
            let preemptor = pod_json("preemptor", &GenPod { priority, cpu, bare: false, gang: None, node: 0 }, false);
            Case { nodes, pods, preemptor }
        })
}

impl Case {
    fn view(&self, policy: &Policy) -> View {
        let mut items: Vec<Value> = self
            .nodes
            .iter()
            .map(|n| {
                let mut n = n.clone();
                n["kind"] = json!("Node");
                n
            })
            .collect();
        items.extend(self.pods.iter().map(|(name, p)| pod_json(name, p, true)));
        View::build(snapshot::parse(json!({"items": items}).to_string().as_bytes()).unwrap(), policy)
    }

    fn filter_body(&self, names: bool) -> Vec<u8> {
        let body = if names {
            json!({"Pod": self.preemptor, "NodeNames": self.nodes.iter().map(|n| n["metadata"]["name"].clone()).collect::<Vec<_>>()})
        } else {
            json!({"Pod": self.preemptor, "Nodes": {"items": self.nodes}})
        };
        body.to_string().into_bytes()
    }

    /// kube-scheduler's candidates: every node with pods, all of them lower-priority ones
    /// as victims (sorted by descending priority), a PDB count from the mask.
    fn preempt_body(&self, meta: bool, pdb_mask: u8) -> (Vec<u8>, Value) {
        let prio = self.preemptor["spec"]["priority"].as_i64().unwrap() as i32;
        let mut full = serde_json::Map::new();
        let mut expected = serde_json::Map::new();
        for (i, n) in self.nodes.iter().enumerate() {
            let mut victims: Vec<&(String, GenPod)> =
                self.pods.iter().filter(|(_, p)| p.node == i && p.priority < prio).collect();
            if victims.is_empty() {
                continue;
            }
            victims.sort_by_key(|(_, p)| -p.priority);
            let pdb = i64::from((pdb_mask >> i) & 1);
            let name = n["metadata"]["name"].as_str().unwrap().to_string();
            let pods: Vec<Value> = if meta {
                victims.iter().map(|(v, _)| json!({"UID": format!("uid-{v}")})).collect()
            } else {
                victims.iter().map(|(v, p)| pod_json(v, p, true)).collect()
            };
            full.insert(name.clone(), json!({"Pods": pods, "NumPDBViolations": pdb}));
            expected.insert(name, json!({"Pods": victims.iter().map(|(v, _)| json!({"UID": format!("uid-{v}")})).collect::<Vec<_>>(), "NumPDBViolations": pdb}));
        }
        let key = if meta { "NodeNameToMetaVictims" } else { "NodeNameToVictims" };
        (json!({"Pod": self.preemptor, key: full}).to_string().into_bytes(), json!({"NodeNameToMetaVictims": expected}))
    }
}

fn policy(mode: Mode) -> Policy {
    let mut p = Policy::builtin_default().enforced();
    p.mode = mode;
    p
}

fn json_of(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn a_shadow_answer_is_the_answer_without_an_extender(case in gen_case(), names in any::<bool>(), meta in any::<bool>(),
        with_view in any::<bool>(), requeue in any::<bool>(), pdb_mask in any::<u8>()) {
        let shadow = policy(Mode::Shadow);
        let enforce = policy(Mode::Enforce);
        let view = with_view.then(|| case.view(&shadow));
        let ctx = |p| Context::new(p, view.as_ref(), NOW).with_requeue(requeue).with_view_expected(with_view);

        // filter: every node, as it came; nothing failed.
        let body = case.filter_body(names);
        let a = answer(Verb::Filter, &body, &ctx(&shadow), &Bounds::default()).unwrap();
        let got = json_of(&a.body);
        let sent = json_of(&body);
        if names {
            prop_assert_eq!(&got["NodeNames"], &sent["NodeNames"]);
        } else {
            prop_assert_eq!(&got["Nodes"]["items"], &sent["Nodes"]["items"]);
        }
        prop_assert_eq!(&got["FailedNodes"], &json!({}));
        prop_assert_eq!(&got["FailedAndUnresolvableNodes"], &json!({}));
        // The policy's decision is still made: it is the enforced answer.
        let enforced = answer(Verb::Filter, &body, &ctx(&enforce), &Bounds::default()).unwrap();
        prop_assert_eq!(a.would_answer(), Some(enforced.body.as_slice()));

        // prioritize: score 0 for every node, in order.
        let a = answer(Verb::Prioritize, &body, &ctx(&shadow), &Bounds::default()).unwrap();
        let hosts: Vec<Value> = case.nodes.iter().map(|n| json!({"Host": n["metadata"]["name"], "Score": 0})).collect();
        prop_assert_eq!(json_of(&a.body), Value::Array(hosts));

        // preempt: kube's candidates and victims unchanged, nothing requeued.
        let (body, expected) = case.preempt_body(meta, pdb_mask);
        let a = answer(Verb::Preempt, &body, &ctx(&shadow), &Bounds::default()).unwrap();
        prop_assert_eq!(json_of(&a.body), expected);
        prop_assert!(a.requeues().is_empty());
        let enforced = answer(Verb::Preempt, &body, &ctx(&enforce), &Bounds::default()).unwrap();
        prop_assert_eq!(a.would_answer(), Some(enforced.body.as_slice()));
        prop_assert!(enforced.diffs().is_empty() && enforced.would_answer().is_none());
    }
}

fn one_node_case(victim_bare: bool) -> Case {
    Case {
        nodes: vec![node_json(0, true)],
        pods: vec![("batch-1".into(), GenPod { priority: 6000, cpu: 3000, bare: victim_bare, gang: None, node: 0 })],
        preemptor: pod_json(
            "preemptor",
            &GenPod { priority: 9500, cpu: 2000, bare: false, gang: None, node: 0 },
            false,
        ),
    }
}

#[test]
fn a_vetoed_node_and_a_bare_pod_kube_would_lose_are_counted() {
    // Class batch protects its bare pods, so the policy vetoes kube's only candidate.
    let case = one_node_case(true);
    let mut shadow = policy(Mode::Shadow);
    let batch = shadow.classes.iter_mut().find(|c| c.name == "batch").unwrap();
    batch.victim.bare = Some(coloc_extender::policy::BareVictims::Protect);
    let view = case.view(&shadow);
    let ctx = Context::new(&shadow, Some(&view), NOW);
    let (body, expected) = case.preempt_body(false, 0);
    let a = answer(Verb::Preempt, &body, &ctx, &Bounds::default()).unwrap();
    assert_eq!(json_of(&a.body), expected);
    assert_eq!(json_of(a.would_answer().unwrap()), json!({"NodeNameToMetaVictims": {}}));
    assert_eq!(a.diffs().0.get(&DiffKind::NodeVetoed), Some(&1), "{:?}", a.diffs());
    assert_eq!(a.diffs().0.get(&DiffKind::BarePodLost), Some(&1), "{:?}", a.diffs());
    assert_eq!(a.summary, "no candidates: the pod stays pending");
}

#[test]
fn a_bare_pod_both_would_lose_is_no_difference() {
    // Requeue off, the default policy: the bare batch pod cannot be requeued, and it is
    // the only way to place the pod, so the policy takes it too, as a last resort.
    let case = one_node_case(true);
    let shadow = policy(Mode::Shadow);
    let view = case.view(&shadow);
    let ctx = Context::new(&shadow, Some(&view), NOW);
    let (body, expected) = case.preempt_body(false, 0);
    let a = answer(Verb::Preempt, &body, &ctx, &Bounds::default()).unwrap();
    assert_eq!(json_of(&a.body), expected);
    assert_eq!(json_of(a.would_answer().unwrap()), expected);
    assert!(a.diffs().is_empty(), "{:?}", a.diffs());
    assert!(a.explanations.iter().any(|e| e.code == "last_resort"), "{:?}", a.explanations);
}

#[test]
fn a_requeued_bare_pod_is_not_lost_and_owned_pods_change_nothing() {
    let shadow = policy(Mode::Shadow);
    // Requeue on: the policy takes the same victim and requeues it: the same victims, but
    // the pod kube-scheduler would lose goes back to the queue.
    let case = one_node_case(true);
    let view = case.view(&shadow);
    let ctx = Context::new(&shadow, Some(&view), NOW).with_requeue(true);
    let (body, _) = case.preempt_body(true, 0);
    let a = answer(Verb::Preempt, &body, &ctx, &Bounds::default()).unwrap();
    assert_eq!(
        a.diffs().0.clone().into_iter().collect::<Vec<_>>(),
        vec![(DiffKind::BarePodLost, 1)],
        "{:?}",
        a.explanations
    );
    assert!(a.requeues().is_empty(), "shadow mode stores no replacement");

    // A Job's pod, the same victim as kube's: no difference at all.
    let case = one_node_case(false);
    let view = case.view(&shadow);
    let ctx = Context::new(&shadow, Some(&view), NOW);
    let (body, _) = case.preempt_body(true, 0);
    assert!(answer(Verb::Preempt, &body, &ctx, &Bounds::default()).unwrap().diffs().is_empty());
}

#[test]
fn a_pdb_violation_the_policy_avoids_is_counted() {
    // kube proposes a victim it counts as violating a PDB; with a strict batch class and
    // no PDB data the policy vetoes the node.
    let case = one_node_case(false);
    let mut shadow = policy(Mode::Shadow);
    shadow.classes.iter_mut().filter(|c| c.name == "batch").for_each(|c| c.victim.pdb = PdbMode::Strict);
    let ctx = Context::new(&shadow, None, NOW);
    let (body, _) = case.preempt_body(false, 1);
    let a = answer(Verb::Preempt, &body, &ctx, &Bounds::default()).unwrap();
    assert_eq!(a.diffs().0.get(&DiffKind::PdbViolationAvoided), Some(&1), "{:?}", a.diffs());
    assert_eq!(a.diffs().0.get(&DiffKind::NodeVetoed), Some(&1), "{:?}", a.diffs());
}

#[test]
fn filter_counts_vetoed_nodes_and_keeps_them_all() {
    // A batch pod on one node without the offline label: the policy would drop it.
    let case = Case {
        nodes: vec![node_json(0, true), node_json(1, false)],
        pods: vec![],
        preemptor: pod_json("preemptor", &GenPod { priority: 6000, cpu: 500, bare: false, gang: None, node: 0 }, false),
    };
    let shadow = policy(Mode::Shadow);
    let ctx = Context::new(&shadow, None, NOW);
    let a = answer(Verb::Filter, &case.filter_body(false), &ctx, &Bounds::default()).unwrap();
    assert_eq!(json_of(&a.body)["Nodes"]["items"].as_array().unwrap().len(), 2);
    assert_eq!(a.diffs().0.get(&DiffKind::NodeVetoed), Some(&1));
    assert_eq!(a.summary, "kept 1 of 2 node(s)");
    let a = answer(Verb::Prioritize, &case.filter_body(false), &ctx, &Bounds::default()).unwrap();
    assert_eq!(
        a.diffs().0.get(&DiffKind::ScoresChanged),
        Some(&1),
        "{}",
        String::from_utf8_lossy(a.would_answer().unwrap())
    );
}
