//! Preemption rules, each shown on the smallest cluster that exhibits it, with the
//! right answer worked out by hand.

mod common;

use std::collections::BTreeMap;

use coloc_extender::model::Resources;
use common::*;

fn online(cpu: i64) -> coloc_extender::model::Pod {
    pod("preemptor", "online", None, cpu)
}

#[test]
fn evicts_only_what_the_preemptor_needs_newest_first() {
    // 4 CPU node full of 1-CPU batch pods; the preemptor needs 2 CPU. The two pods that
    // ran least are the cheapest to lose.
    let s = Scenario::new(policy("strict", "")).node(node("n1", 4000, 8)).pods([
        pod("b-1", "batch", Some("n1"), 1000).started(4000),
        pod("b-2", "batch", Some("n1"), 1000).started(3000),
        pod("b-3", "batch", Some("n1"), 1000).started(2000),
        pod("b-4", "batch", Some("n1"), 1000).started(1000),
    ]);
    let out = s.preempt(online(2000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["b-3", "b-4"]))]), "{}", out.explain());
    assert_eq!(out.violations("n1"), 0);
    assert!(out.has("spared", "reprieved"));
}

#[test]
fn a_bare_offline_pod_is_never_a_victim() {
    let s = Scenario::new(policy("strict", ""))
        .node(node("n1", 4000, 8))
        .pods([pod("bare", "batch", Some("n1"), 3000).bare(), pod("owned", "batch", Some("n1"), 1000)]);
    let out = s.preempt(online(2000), &["n1"]);
    assert!(out.victims().is_empty(), "{}", out.explain());
    assert!(out.has("spared", "not_recreatable"));
    assert!(out.has("dropped", "does_not_fit"));
}

#[test]
fn a_nodes_pods_are_explained_in_name_order_whatever_order_they_arrived_in() {
    // The view keeps a node's pods in arrival order; what an operator reads is sorted.
    let s = Scenario::new(policy("strict", ""))
        .node(node("n1", 3000, 8))
        .pods(["c", "a", "b"].map(|n| pod(n, "batch", Some("n1"), 1000).bare()));
    let out = s.preempt(online(2000), &["n1"]);
    let spared: Vec<&str> =
        out.explanations.iter().filter(|e| e.verdict == "spared").filter_map(|e| e.pod.as_deref()).collect();
    assert_eq!(spared, ["default/a", "default/b", "default/c"], "{}", out.explain());
}

#[test]
fn lower_classes_go_first_whatever_their_numbers() {
    // n1 can be freed by evicting a free pod, n2 only by evicting a batch pod.
    let s = Scenario::new(policy("strict", ""))
        .node(node("n1", 2000, 8))
        .node(node("n2", 2000, 8))
        .pods([pod("f", "free", Some("n1"), 2000), pod("b", "batch", Some("n2"), 2000)]);
    let out = s.preempt(online(2000), &["n1", "n2"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["f"]))]), "{}", out.explain());
    assert!(out.has("dropped", "outranked"));
}

#[test]
fn only_the_returned_nodes_victims_are_named_victims() {
    // kube-scheduler evicts on the node it is given: a pod on an outranked candidate is
    // not a victim, and no line (or requeue intent) says it is.
    let s = Scenario::new(policy("strict", ""))
        .node(node("n1", 2000, 8))
        .node(node("n2", 2000, 8))
        .pods([pod("f", "free", Some("n1"), 2000), pod("b", "batch", Some("n2"), 2000)]);
    let out = s.preempt(online(2000), &["n1", "n2"]);
    let named: Vec<&str> =
        out.explanations.iter().filter(|e| e.verdict == "victim").filter_map(|e| e.pod.as_deref()).collect();
    assert_eq!(named, ["default/f"], "{}", out.explain());
    assert!(out.has("dropped", "outranked"));
}

#[test]
fn max_candidates_returns_the_best_k() {
    let s = Scenario::new(policy("strict", "maxCandidates: 2"))
        .node(node("n1", 2000, 8))
        .node(node("n2", 2000, 8))
        .node(node("n3", 2000, 8))
        .pods([
            pod("f1", "free", Some("n1"), 2000),
            pod("b2", "batch", Some("n2"), 2000),
            pod("f3", "free", Some("n3"), 1000),
            pod("g3", "free", Some("n3"), 1000),
        ]);
    let out = s.preempt(online(2000), &["n1", "n2", "n3"]);
    // n1: one free victim; n3: two free victims; n2: a batch victim (most expensive).
    assert_eq!(out.victims().keys().cloned().collect::<Vec<_>>(), vec!["n1", "n3"], "{}", out.explain());
}

#[test]
fn batch_may_only_preempt_free() {
    let s = Scenario::new(policy("strict", ""))
        .node(node("n1", 2000, 8))
        .pods([pod("b", "batch", Some("n1"), 1000), pod("f", "free", Some("n1"), 1000)]);
    let out = s.preempt(pod("preemptor", "batch", None, 1000).label("x", "y"), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["f"]))]), "{}", out.explain());
    // ... and free preempts nothing at all.
    let out = s.preempt(pod("preemptor", "free", None, 1000), &["n1"]);
    assert!(out.victims().is_empty());
    assert!(out.has("refused", "class_may_not_preempt"));
}

#[test]
fn preemption_policy_never_always_wins() {
    let s = Scenario::new(policy("strict", "")).node(node("n1", 1000, 8)).pods([pod("f", "free", Some("n1"), 1000)]);
    let out = s.preempt(online(1000).never(), &["n1"]);
    assert!(out.victims().is_empty());
    assert!(out.has("refused", "preemption_never"));
}

#[test]
fn minimum_runtime_protects_fresh_pods() {
    // batch has minRuntime 10m: a pod started 60 s ago is protected.
    let s = Scenario::new(policy("strict", "")).node(node("n1", 2000, 8)).pods([
        pod("fresh", "batch", Some("n1"), 1000).started(60),
        pod("old", "batch", Some("n1"), 1000).started(7200),
    ]);
    let out = s.preempt(online(1000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["old"]))]), "{}", out.explain());
    assert!(out.has("spared", "min_runtime"));
}

#[test]
fn strict_pdb_is_never_violated() {
    // Three pods under a PDB that allows one disruption; the preemptor needs two.
    let s = Scenario::new(policy("strict", ""))
        .node(node("n1", 3000, 8))
        .pods([
            pod("w-1", "batch", Some("n1"), 1000),
            pod("w-2", "batch", Some("n1"), 1000),
            pod("w-3", "batch", Some("n1"), 1000),
        ])
        .pdb(pdb("w-pdb", "w", 1));
    let out = s.preempt(online(2000), &["n1"]);
    assert!(out.victims().is_empty(), "{}", out.explain());
    assert!(out.has("dropped", "pdb_strict"));
}

#[test]
fn best_effort_pdb_is_violated_only_as_needed_and_counted() {
    let s = Scenario::new(policy("prefer", ""))
        .node(node("n1", 3000, 8))
        .pods([
            pod("w-1", "batch", Some("n1"), 1000),
            pod("w-2", "batch", Some("n1"), 1000),
            pod("w-3", "batch", Some("n1"), 1000),
        ])
        .pdb(pdb("w-pdb", "w", 1));
    let out = s.preempt(online(2000), &["n1"]);
    assert_eq!(out.victims()["n1"].len(), 2, "{}", out.explain());
    assert_eq!(out.violations("n1"), 1);
}

#[test]
fn pods_already_disrupted_do_not_count_again() {
    let mut budget = pdb("w-pdb", "w", 0);
    budget.disrupted_pods = vec!["w-1".into()];
    let s = Scenario::new(policy("strict", ""))
        .node(node("n1", 1000, 8))
        .pods([pod("w-1", "batch", Some("n1"), 1000)])
        .pdb(budget);
    let out = s.preempt(online(1000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["w-1"]))]), "{}", out.explain());
    assert_eq!(out.violations("n1"), 0);
}

#[test]
fn pdb_protected_pods_are_reprieved_before_others() {
    // Either pod frees enough; the one whose PDB has no budget left stays even though it
    // is worth less (lower priority class).
    let s = Scenario::new(policy("prefer", ""))
        .node(node("n1", 2000, 8))
        .pods([pod("guarded", "free", Some("n1"), 1000), pod("loose", "batch", Some("n1"), 1000)])
        .pdb(pdb("g", "guarded", 0));
    let out = s.preempt(online(1000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["loose"]))]), "{}", out.explain());
    assert_eq!(out.violations("n1"), 0);
}

#[test]
fn nodes_without_pdb_violations_win() {
    let s = Scenario::new(policy("prefer", ""))
        .node(node("n1", 1000, 8))
        .node(node("n2", 1000, 8))
        .pods([pod("guarded", "free", Some("n1"), 1000), pod("loose", "batch", Some("n2"), 1000)])
        .pdb(pdb("g", "guarded", 0));
    let out = s.preempt(online(1000), &["n1", "n2"]);
    assert_eq!(out.victims(), BTreeMap::from([("n2".into(), uids(&["loose"]))]), "{}", out.explain());
}

const GANG: &str = "pod-group.scheduling.sigs.k8s.io/name";
const MIN: &str = "pod-group.scheduling.sigs.k8s.io/min-available";

fn member(name: &str, node: &str, min: &str) -> coloc_extender::model::Pod {
    pod(name, "batch", Some(node), 1000).label(GANG, "g").annotate(MIN, min)
}

#[test]
fn gang_surplus_members_may_go() {
    // 4 members, minimum 2: evicting two on n1 leaves the gang whole.
    let s = Scenario::new(policy("strict", "")).node(node("n1", 2000, 8)).node(node("n2", 2000, 8)).pods([
        member("m-1", "n1", "2"),
        member("m-2", "n1", "2"),
        member("m-3", "n2", "2"),
        member("m-4", "n2", "2"),
    ]);
    let out = s.preempt(online(2000), &["n1"]);
    assert_eq!(out.victims()["n1"].len(), 2, "{}", out.explain());
    assert!(out.has("charged", "gang_surplus"));
}

/// Gang of 3 needing all 3: n1 holds a member that ran 700 s, n3 the other two (an hour
/// each); n2 a plain batch pod that ran `plain_ran` seconds. All take 1 CPU.
fn gang_member_or_plain(plain_ran: i64) -> Outcome {
    let s = Scenario::new(policy("strict", ""))
        .node(node("n1", 1000, 8))
        .node(node("n2", 1000, 8))
        .node(node("n3", 2000, 8))
        .pods([
            member("m-1", "n1", "3").started(700),
            member("m-2", "n3", "3"),
            member("m-3", "n3", "3"),
            pod("plain", "batch", Some("n2"), 1000).started(plain_ran),
        ]);
    s.preempt(online(1000), &["n1", "n2"])
}

#[test]
fn a_gang_is_not_broken_where_that_throws_away_more_than_another_node() {
    // Breaking the gang throws away its survivors' two hours too (and restarts three
    // pods): more than the plain pod's 2.5 hours and one restart.
    let out = gang_member_or_plain(9_000);
    assert_eq!(out.victims(), BTreeMap::from([("n2".into(), uids(&["plain"]))]), "{}", out.explain());
    assert!(out.has("charged", "gang_broken"));
}

#[test]
fn a_gang_is_broken_where_keeping_it_whole_throws_away_more() {
    // The plain pod ran 28 hours: more than the whole gang has run.
    let out = gang_member_or_plain(99_999);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["m-1"]))]), "{}", out.explain());
    let charged = out.explanations.iter().find(|e| e.code == "gang_broken").expect("gang charged");
    assert!(charged.detail.contains("the 2 left elsewhere cannot progress: their 7200 CPU-s"), "{}", charged.detail);
    let chosen =
        out.explanations.iter().find(|e| e.code == "candidate" && e.node.as_deref() == Some("n1")).expect("n1 costed");
    assert!(chosen.detail.contains("3 pod(s) interrupted (1 evicted, 2 gang survivor(s))"), "{}", chosen.detail);
}

#[test]
fn a_gang_broken_for_lack_of_choice_is_charged_whole() {
    let s = Scenario::new(policy("strict", "")).node(node("n1", 1000, 8)).node(node("n3", 2000, 8)).pods([
        member("m-1", "n1", "3"),
        member("m-2", "n3", "3"),
        member("m-3", "n3", "3"),
    ]);
    let out = s.preempt(online(1000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["m-1"]))]), "{}", out.explain());
    let charged = out.explanations.iter().find(|e| e.code == "gang_broken").expect("gang charged");
    assert!(charged.detail.contains("1 of 3"), "{}", charged.detail);
}

#[test]
fn the_tenant_with_the_highest_share_gives_first() {
    // Tenant "big" holds 5 CPU elsewhere, "small" 1 CPU: on n1 each has one equal pod.
    let s = Scenario::new(policy("strict", "")).node(node("n1", 2000, 8)).node(node("n2", 8000, 8)).pods([
        pod("a", "batch", Some("n1"), 1000).ns("big"),
        pod("b", "batch", Some("n1"), 1000).ns("small"),
        pod("big-elsewhere", "batch", Some("n2"), 4000).ns("big"),
    ]);
    let out = s.preempt(online(1000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["a"]))]), "{}", out.explain());
}

#[test]
fn tenant_weights_scale_shares() {
    // Same usage as above, but "big" has weight 10: its weighted share is now smaller.
    let s = Scenario::new(policy("strict", "tenants: {weights: {big: 10}}"))
        .node(node("n1", 2000, 8))
        .node(node("n2", 8000, 8))
        .pods([
            pod("a", "batch", Some("n1"), 1000).ns("big"),
            pod("b", "batch", Some("n1"), 1000).ns("small"),
            pod("big-elsewhere", "batch", Some("n2"), 4000).ns("big"),
        ]);
    let out = s.preempt(online(1000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["b"]))]), "{}", out.explain());
}

/// Fair sharing on with queues as tenants: the victims are "rich" (5 CPU) and "poor" (1 CPU),
/// each a queue of its own namespace; the preemptor's queue "mid" holds 1 CPU.
fn queued_cluster(preemptor_queue: &str, weights: &str) -> (Scenario, coloc_extender::model::Pod) {
    let q = "kueue.x-k8s.io/queue-name";
    let extra = format!("tenants: {{fairSharing: true, label: {q}{weights}}}");
    let s = Scenario::new(policy("strict", &extra)).node(node("n1", 1000, 8)).node(node("n2", 8000, 8)).pods([
        pod("rich-big", "batch", Some("n2"), 4000).ns("team-r").label(q, "rich"),
        pod("mid-1", "batch", Some("n2"), 1000).ns("team-m").label(q, "mid"),
        pod("poor-1", "free", Some("n1"), 1000).ns("team-p").label(q, "poor"),
    ]);
    (s, pod("preemptor", "batch", None, 1000).ns("team-m").label(q, preemptor_queue))
}

#[test]
fn a_queue_is_its_namespaces_own_so_a_tenant_cannot_claim_anothers() {
    // The poor tenant's share is below the preemptor's: its pod is spared.
    let (s, preemptor) = queued_cluster("mid", "");
    let out = s.preempt(preemptor, &["n1"]);
    assert!(out.victims().is_empty(), "{}", out.explain());
    assert!(out.has("spared", "fair_share"));
    // Labelling the preemptor with the victim's queue name does not make it that tenant:
    // team-m/poor is not team-p/poor, and fair share still spares the victim.
    let (s, preemptor) = queued_cluster("poor", "");
    let out = s.preempt(preemptor, &["n1"]);
    assert!(out.victims().is_empty(), "{}", out.explain());
    assert!(out.has("spared", "fair_share"));
}

#[test]
fn a_tenants_labels_and_annotations_on_its_own_pods_change_nothing_about_anothers() {
    // team-a's and team-b's pods are alike but that team-b's ran longer: team-a's is the
    // cheaper to lose. Whatever team-a writes on its own pod (team-b's queue name, a claim
    // of requeues, an opt-out of requeue, an annotation near the size limit), team-b's
    // pod is not taken instead. (The marks of a copy are refused by admission.)
    let q = "kueue.x-k8s.io/queue-name";
    let victim_with = |a: coloc_extender::model::Pod| {
        let s = Scenario::new(policy("strict", &format!("tenants: {{fairSharing: true, label: {q}}}")))
            .node(node("n1", 2000, 8))
            .pods([a, pod("b-1", "batch", Some("n1"), 1000).ns("team-b").label(q, "b").started(3000)]);
        s.preempt(online(1000), &["n1"])
    };
    let plain = || pod("a-1", "batch", Some("n1"), 1000).ns("team-a").label(q, "a").started(1000);
    let padded = "x".repeat(200 * 1024);
    let forged = [
        ("team-b's queue name", plain().label(q, "b")),
        ("a claim of 9 requeues", plain().annotate(coloc_extender::model::marks::ATTEMPT, "9")),
        ("an opt-out of requeue", plain().annotate(coloc_extender::model::marks::OPT_OUT, "never")),
        ("a 200 KiB annotation", plain().annotate("example.com/padding", &padded)),
    ];
    let out = victim_with(plain());
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["a-1"]))]), "{}", out.explain());
    for (what, a) in forged {
        let out = victim_with(a);
        assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["a-1"]))]), "{what}: {}", out.explain());
    }
}

#[test]
fn tenant_weights_are_keyed_by_tenant_a_namespace_or_a_queue_the_policy_names() {
    // Weighted 0.1, the poor tenant's share is 10× what it holds: above the preemptor's.
    for weights in [
        ", weights: {team-p: 0.1}",
        ", weights: {team-p/poor: 0.1}",
        ", queues: [team-p/poor], weights: {team-p/poor: 0.1}",
    ] {
        let (s, preemptor) = queued_cluster("mid", weights);
        let out = s.preempt(preemptor, &["n1"]);
        assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["poor-1"]))]), "{weights}: {}", out.explain());
    }
    // Another namespace's queue of the same name is another tenant; a queue's name alone
    // is no tenant.
    for weights in [", weights: {team-x/poor: 0.1}", ", weights: {poor: 0.1}"] {
        let (s, preemptor) = queued_cluster("mid", weights);
        assert!(s.preempt(preemptor, &["n1"]).victims().is_empty(), "{weights}");
    }
}

/// team-r holds five 1-CPU free pods, each labelled with a queue name of its own; team-m
/// (the preemptor's) one batch pod. n1 holds one of team-r's pods.
fn one_queue_per_pod(queues: &str) -> (Scenario, coloc_extender::model::Pod) {
    let q = "kueue.x-k8s.io/queue-name";
    let extra = format!("tenants: {{fairSharing: true, label: {q}{queues}}}");
    let own_queue = |i: usize, node: &str| {
        pod(&format!("r-{i}"), "free", Some(node), 1000).ns("team-r").label(q, &format!("r-{i}"))
    };
    let s = Scenario::new(policy("strict", &extra))
        .node(node("n1", 1000, 8))
        .node(node("n2", 8000, 8))
        .pods((2..=5).map(|i| own_queue(i, "n2")))
        .pods([own_queue(1, "n1"), pod("m-1", "batch", Some("n2"), 1000).ns("team-m").label(q, "m")]);
    (s, pod("preemptor", "batch", None, 1000).ns("team-m").label(q, "m"))
}

#[test]
fn a_tenant_that_gives_each_pod_a_queue_of_its_own_is_still_one_tenant() {
    // Queues the policy does not name are their namespace's: team-r holds 5 CPU, far more
    // than team-m's 2 after admission, so its pod on n1 is no "tenant holding the least".
    let (s, preemptor) = one_queue_per_pod("");
    let out = s.preempt(preemptor, &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["r-1"]))]), "{}", out.explain());
    assert!(!out.has("spared", "fair_share"), "{}", out.explain());
    // A queue the policy names is a tenant of its own, holding 1 CPU: spared.
    let (s, preemptor) = one_queue_per_pod(", queues: [team-r/r-1]");
    let out = s.preempt(preemptor, &["n1"]);
    assert!(out.victims().is_empty(), "{}", out.explain());
    assert!(out.has("spared", "fair_share"), "{}", out.explain());
}

#[test]
fn host_port_conflicts_are_resolved_by_evicting_the_holder() {
    let s = Scenario::new(policy("strict", ""))
        .node(node("n1", 4000, 8))
        .pods([pod("port-holder", "batch", Some("n1"), 100).host_port(9100), pod("big", "batch", Some("n1"), 1000)]);
    let out = s.preempt(online(100).host_port(9100), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["port-holder"]))]), "{}", out.explain());
}

#[test]
fn extended_resources_count() {
    let mut n = node("gpu", 8000, 8);
    n.allocatable.scalar.insert("example.com/gpu".into(), 2);
    let s = Scenario::new(policy("strict", "")).node(n).pods([
        pod("cpu-only", "batch", Some("gpu"), 1000),
        pod("gpu-user", "batch", Some("gpu"), 500).scalar("example.com/gpu", 2),
    ]);
    let out = s.preempt(online(500).scalar("example.com/gpu", 1), &["gpu"]);
    assert_eq!(out.victims(), BTreeMap::from([("gpu".into(), uids(&["gpu-user"]))]), "{}", out.explain());
}

#[test]
fn init_containers_and_overhead_are_counted() {
    // The preemptor's effective request comes from the wire decoder:
    // max(init 3 CPU, app 1 CPU) + 250m overhead = 3.25 CPU.
    let raw = serde_json::json!({
        "metadata": {"name": "p", "namespace": "default", "uid": "uid-p"},
        "spec": {
            "priorityClassName": "online", "priority": 10000,
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "3"}}}],
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
            "overhead": {"cpu": "250m"}
        }
    });
    let k8s: coloc_extender::wire::k8s::Pod = serde_json::from_value(raw).unwrap();
    let preemptor = k8s.into_model().unwrap();
    assert_eq!(preemptor.requests, Resources { milli_cpu: 3250, ..Default::default() });
    let s = Scenario::new(policy("strict", "")).node(node("n1", 4000, 8)).pods([
        pod("b-1", "batch", Some("n1"), 1000),
        pod("b-2", "batch", Some("n1"), 1000),
        pod("b-3", "batch", Some("n1"), 1000),
        pod("b-4", "batch", Some("n1"), 1000),
    ]);
    let out = s.preempt(preemptor, &["n1"]);
    assert_eq!(out.victims()["n1"].len(), 4, "3.25 CPU needs all four: {}", out.explain());
}

#[test]
fn sidecar_init_containers_add_to_the_app() {
    let raw = serde_json::json!({
        "metadata": {"name": "p"},
        "spec": {
            "initContainers": [
                {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
                {"name": "setup", "resources": {"requests": {"cpu": "2"}}}
            ],
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]
        }
    });
    let p = serde_json::from_value::<coloc_extender::wire::k8s::Pod>(raw).unwrap().into_model().unwrap();
    // running: app 1 + sidecar 0.5 = 1.5; init peak: setup 2 + sidecar 0.5 = 2.5.
    assert_eq!(p.requests.milli_cpu, 2500);
    assert_eq!(p.requests.memory, 1 << 30);
}

#[test]
fn victims_are_returned_highest_priority_first() {
    let s = Scenario::new(policy("strict", ""))
        .node(node("n1", 2000, 8))
        .pods([pod("f", "free", Some("n1"), 1000), pod("b", "batch", Some("n1"), 1000)]);
    let out = s.preempt(online(2000), &["n1"]);
    assert_eq!(out.victims()["n1"], uids(&["b", "f"]), "{}", out.explain());
}

#[test]
fn uid_and_full_modes_agree() {
    let s = Scenario::new(policy("prefer", ""))
        .node(node("n1", 3000, 8))
        .node(node("n2", 3000, 8))
        .pods([
            pod("w-1", "batch", Some("n1"), 1000),
            pod("w-2", "batch", Some("n1"), 2000),
            pod("f-1", "free", Some("n2"), 1500),
            pod("w-3", "batch", Some("n2"), 1500),
        ])
        .pdb(pdb("w", "w", 0));
    let view = s.view();
    let p = online(2000);
    let meta = s.preempt_with(p.clone(), s.meta_candidates(&p, &["n1", "n2"]), Some(&view));
    let full = s.preempt_with(p.clone(), s.full_candidates(&p, &["n1", "n2"]), Some(&view));
    assert_eq!(meta.result, full.result);
    assert!(!meta.result.node_name_to_meta_victims.is_empty());
}

#[test]
fn a_candidate_without_victims_is_returned_as_is() {
    let s = Scenario::new(policy("strict", "")).node(node("n1", 1000, 8));
    let p = online(1000);
    let candidates = s.meta_candidates(&p, &["n1"]);
    let out = s.preempt_with(p, candidates, Some(&s.view()));
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), vec![])]));
    assert!(out.has("kept", "no_victims"));
}

#[test]
fn without_a_view_uids_cannot_be_judged() {
    let s = Scenario::new(policy("strict", "")).node(node("n1", 1000, 8)).pods([pod("f", "free", Some("n1"), 1000)]);
    let p = online(1000);
    let out = s.preempt_with(p.clone(), s.meta_candidates(&p, &["n1"]), None);
    assert!(out.victims().is_empty());
    assert!(out.has("dropped", "no_view_uids_only"));
}

#[test]
fn without_a_view_kube_victims_are_kept_only_if_all_allowed() {
    let s = Scenario::new(policy("strict", "")).node(node("n1", 2000, 8)).node(node("n2", 2000, 8)).pods([
        pod("ok-1", "free", Some("n1"), 1000),
        pod("ok-2", "batch", Some("n1"), 1000),
        pod("ok-3", "batch", Some("n2"), 1000),
        pod("bare", "free", Some("n2"), 1000).bare(),
    ]);
    let p = online(2000);
    let out = s.preempt_with(p.clone(), s.full_candidates(&p, &["n1", "n2"]), None);
    // n1 kept with kube's own victims, re-sorted by descending priority; n2 vetoed.
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["ok-2", "ok-1"]))]), "{}", out.explain());
    assert!(out.has("dropped", "not_recreatable"));
    assert!(out.has("degraded", "no_view"));
}

#[test]
fn without_a_view_a_strict_class_with_kube_reported_violations_is_vetoed() {
    let s = Scenario::new(policy("strict", "")).node(node("n1", 1000, 8)).pods([pod("w", "batch", Some("n1"), 1000)]);
    let p = online(1000);
    let mut candidates = s.full_candidates(&p, &["n1"]);
    if let coloc_extender::wire::Candidates::Full(m) = &mut candidates {
        m.get_mut("n1").unwrap().num_pdb_violations = 1;
    }
    let out = s.preempt_with(p, candidates, None);
    assert!(out.victims().is_empty());
    assert!(out.has("dropped", "pdb_strict"));
}

#[test]
fn a_node_unknown_to_the_view_falls_back_to_kube_victims() {
    let s = Scenario::new(policy("strict", "")).node(node("n1", 1000, 8)).pods([pod("f", "free", Some("ghost"), 1000)]);
    let p = online(1000);
    let out = s.preempt_with(p.clone(), s.full_candidates(&p, &["ghost"]), Some(&s.view()));
    assert_eq!(out.victims(), BTreeMap::from([("ghost".into(), uids(&["f"]))]));
    assert!(out.has("degraded", "node_not_in_view"));
    // In UID form there is nothing to judge: the node is dropped.
    let out = s.preempt_with(p.clone(), s.meta_candidates(&p, &["ghost"]), Some(&s.view()));
    assert!(out.victims().is_empty());
    assert!(out.has("dropped", "node_not_in_view"));
}

#[test]
fn uids_proposed_on_another_node_are_never_returned_there() {
    let s = Scenario::new(policy("strict", ""))
        .node(node("n1", 1000, 8))
        .node(node("n2", 1000, 8))
        .pods([pod("here", "free", Some("n1"), 1000), pod("there", "free", Some("n2"), 1000)]);
    let p = online(1000);
    let candidates = coloc_extender::wire::Candidates::Meta(BTreeMap::from([(
        "n1".to_string(),
        coloc_extender::wire::VictimUids { uids: uids(&["there", "nobody"]), num_pdb_violations: 0 },
    )]));
    let out = s.preempt_with(p, candidates, Some(&s.view()));
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["here"]))]), "{}", out.explain());
    assert!(out.has("ignored", "victim_elsewhere"));
    assert!(out.has("ignored", "unknown_uid"));
}

/// A pod bound a moment ago: kube-scheduler proposes it on n1, the view still has it
/// pending. The view is behind (the edge waits for it), which a pod on another node is not.
#[test]
fn a_proposed_victim_the_view_has_unbound_marks_the_view_behind() {
    let just_bound = || pod("just-bound", "free", Some("n1"), 1000);
    let mut pending = just_bound();
    pending.node_name = None;
    let behind = Scenario::new(policy("strict", "")).node(node("n1", 1000, 8)).pods([pending]);
    let caught_up = Scenario::new(policy("strict", "")).node(node("n1", 1000, 8)).pods([just_bound()]);
    let candidates = || caught_up.meta_candidates(&online(1000), &["n1"]);

    let out = behind.preempt_with(online(1000), candidates(), Some(&behind.view()));
    assert!(out.view_behind && out.victims().is_empty(), "{}", out.explain());
    let out = caught_up.preempt_with(online(1000), candidates(), Some(&caught_up.view()));
    assert!(!out.view_behind, "{}", out.explain());
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["just-bound"]))]));

    let elsewhere = Scenario::new(policy("strict", ""))
        .node(node("n1", 1000, 8))
        .node(node("n2", 1000, 8))
        .pods([pod("just-bound", "free", Some("n2"), 1000)]);
    assert!(!elsewhere.preempt_with(online(1000), candidates(), Some(&elsewhere.view())).view_behind);
}

#[test]
fn an_unusable_view_degrades_or_refuses_per_class() {
    let yaml = |mode: &str| {
        coloc_extender::policy::Policy::from_yaml(&format!(
            "defaultClass: online\nclasses:\n  - name: online\n    preempts: [free]\n    withoutView: {mode}\n  - name: free\n    match: [{{priorityClassNames: [free]}}]\n    victim: {{allowed: true}}\n"
        ))
        .unwrap()
    };
    for (mode, expect_victims) in [("degrade", true), ("refuse", false)] {
        let mut s = Scenario::new(yaml(mode)).node(node("n1", 1000, 8)).pods([pod("f", "free", Some("n1"), 1000)]);
        s.view_expected = true;
        let p = online(1000);
        let out = s.preempt_with(p.clone(), s.full_candidates(&p, &["n1"]), None);
        assert_eq!(!out.victims().is_empty(), expect_victims, "{mode}: {}", out.explain());
        if !expect_victims {
            assert!(out.has("refused", "view_not_ready"));
        }
    }
}

#[test]
fn between_offline_tenants_fair_share_decides_who_may_be_preempted() {
    // Cluster: 10 CPUs. Tenant "rich" holds 5 (share 0.5), "poor" 1 (0.1), the
    // preemptor's tenant "mid" 1 (0.1, 0.2 after admission).
    let cluster = |poor_only: bool| {
        let mut s = Scenario::new(policy("strict", "tenants: {fairSharing: true}"))
            .node(node("n1", 2000, 8))
            .node(node("n2", 8000, 8))
            .pods([
                pod("rich-big", "batch", Some("n2"), 4000).ns("rich"),
                pod("mid-1", "batch", Some("n2"), 1000).ns("mid"),
                pod("poor-1", "free", Some("n1"), 1000).ns("poor"),
            ]);
        s = if poor_only {
            s.pods([
                pod("rich-1", "free", Some("n2"), 1000).ns("rich"),
                pod("mid-2", "batch", Some("n1"), 1000).ns("mid").started(60),
            ])
        } else {
            s.pods([pod("rich-1", "free", Some("n1"), 1000).ns("rich")])
        };
        s
    };
    let preemptor = || pod("preemptor", "batch", None, 1000).ns("mid");

    // Both tenants have a pod on n1: the one whose share stays above ours pays.
    let out = cluster(false).preempt(preemptor(), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["rich-1"]))]), "{}", out.explain());

    // Only the poor tenant could make room: its share is below ours, so it is spared
    // and the node does not work out.
    let out = cluster(true).preempt(preemptor(), &["n1"]);
    assert!(out.victims().is_empty(), "{}", out.explain());
    assert!(out.has("spared", "fair_share"));
    assert!(out.has("dropped", "does_not_fit"));
}

#[test]
fn on_one_node_breaking_a_gang_is_preferred_to_a_pdb_violation() {
    // n1 (3 CPU): two workers whose PDB allows one disruption, and one member of a
    // two-member gang (the other runs on n2). The preemptor needs 2 CPU: either both
    // workers (one PDB violation) or a worker and the gang member (gang broken). A PDB
    // is ahead of any cost; the broken gang is charged its survivor.
    let gang = |p: coloc_extender::model::Pod| {
        p.label("scheduling.x-k8s.io/pod-group", "g").annotate("pod-group.scheduling.sigs.k8s.io/min-available", "2")
    };
    let s = Scenario::new(policy("prefer", ""))
        .node(node("n1", 3000, 8))
        .node(node("n2", 1000, 8))
        .pods([
            pod("w-1", "batch", Some("n1"), 1000).label("app", "w"),
            pod("w-2", "batch", Some("n1"), 1000).label("app", "w"),
            gang(pod("g-1", "batch", Some("n1"), 1000)),
            gang(pod("g-2", "batch", Some("n2"), 1000)),
        ])
        .pdb(pdb("w", "w", 1));
    let out = s.preempt(online(2000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["g-1", "w-1"]))]), "{}", out.explain());
    assert_eq!(out.violations("n1"), 0);
    assert!(out.has("charged", "gang_broken"));
}

/// n1: one free pod of 1 CPU that ran 30 minutes; n2: two of half a CPU that ran 20
/// minutes each. The preemptor needs the whole of either node.
fn one_older_or_two_younger(restart_cost: &str) -> Outcome {
    let policy = coloc_extender::policy::Policy::from_yaml(&format!(
        r#"
defaultClass: unclassified
classes:
  - name: online
    match: [{{priorityClassNames: [online]}}]
    preempts: [free]
  - name: free
    match: [{{priorityClassNames: [free]}}]
    victim: {{allowed: true, pdb: prefer, recreatableOnly: true{restart_cost}}}
  - name: unclassified
"#
    ))
    .expect("test policy is valid");
    let s = Scenario::new(policy).node(node("n1", 1000, 8)).node(node("n2", 1000, 8)).pods([
        pod("older", "free", Some("n1"), 1000).started(1800),
        pod("young-1", "free", Some("n2"), 500).started(1200),
        pod("young-2", "free", Some("n2"), 500).started(1200),
    ]);
    s.preempt(online(1000), &["n1", "n2"])
}

#[test]
fn each_pod_interrupted_costs_a_restart_so_fewer_older_pods_go_before_more_younger_ones() {
    // 1,800 CPU-s + one 20-minute restart (3,000) against 1,200 + two (3,600): a restart
    // is priced at the pod's CPU, but at least one CPU's.
    let out = one_older_or_two_younger(", restartCost: 20m, interruptionCost: 0");
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["older"]))]), "{}", out.explain());
    let n1 = out.explanations.iter().find(|e| e.code == "candidate" && e.node.as_deref() == Some("n1")).unwrap();
    assert!(
        n1.detail.contains("owners lose 3000 CPU-s: 1800 run thrown away + 1200 for 1 pod(s) interrupted"),
        "{}",
        n1.detail
    );
    // A restart the policy prices at nothing leaves run time alone to decide.
    let out = one_older_or_two_younger(", restartCost: 0, interruptionCost: 0");
    assert_eq!(out.victims(), BTreeMap::from([("n2".into(), uids(&["young-1", "young-2"]))]), "{}", out.explain());
}

#[test]
fn each_interruption_costs_the_same_whatever_the_pods_size_so_one_pod_goes_before_two() {
    // Run alone: 1,800 CPU-s on n1 against 1,200 on n2. An interruption priced at 700
    // CPU-s each, whatever the pod's CPU: 2,500 against 2,600, so the one pod goes; at
    // 500: 2,300 against 2,200, so the two do.
    let out = one_older_or_two_younger(", restartCost: 0, interruptionCost: 700");
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["older"]))]), "{}", out.explain());
    let n2 = out.explanations.iter().find(|e| e.code == "candidate" && e.node.as_deref() == Some("n2")).unwrap();
    assert!(
        n2.detail.contains("owners lose 2600 CPU-s: 1200 run thrown away + 1400 for 2 pod(s) interrupted"),
        "{}",
        n2.detail
    );
    let out = one_older_or_two_younger(", restartCost: 0, interruptionCost: 500");
    assert_eq!(out.victims(), BTreeMap::from([("n2".into(), uids(&["young-1", "young-2"]))]), "{}", out.explain());
}
