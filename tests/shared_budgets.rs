//! Budgets are shared over time: spending a PodDisruptionBudget's last allowed disruption
//! (or a Job's last allowed failure) costs more than a choice that spends neither, when
//! both place the pod, so that a later arrival is not forced into a violation an earlier
//! choice could have avoided. Each rule on the smallest cluster that shows it.

mod common;

use std::collections::BTreeMap;

use coloc_extender::model::Pod;
use coloc_extender::policy::Policy;
use common::*;

/// online preempts batch; batch's bare pods are requeued.
fn requeue_policy() -> Policy {
    Policy::from_yaml(
        r#"
defaultClass: unclassified
maxCandidates: 1
classes:
  - name: online
    match: [{priorityClassNames: [online]}]
    preempts: [batch]
  - name: batch
    match: [{priorityClassNames: [batch]}]
    victim: {allowed: true, pdb: prefer, bare: requeue}
  - name: unclassified
"#,
    )
    .unwrap()
}

fn online(cpu: i64) -> Pod {
    pod("preemptor", "online", None, cpu)
}

/// A GPU node: only pods that ask for a GPU need it, but they can go nowhere else.
fn gpu_node(name: &str) -> coloc_extender::model::Node {
    let mut n = node(name, 1000, 8);
    n.allocatable.scalar.insert("nvidia.com/gpu".into(), 1);
    n
}

#[test]
fn a_node_that_spends_a_pdbs_last_disruption_loses_to_one_that_spends_none() {
    // Two workers of two ReplicaSets, one per node. w's PDB allows one more disruption,
    // v's two. By run time alone w-1 (younger) is the cheaper victim.
    let s = Scenario::new(policy("prefer", ""))
        .node(node("n1", 1000, 8))
        .node(node("n2", 1000, 8))
        .pods([pod("w-1", "batch", Some("n1"), 1000).started(1800), pod("v-1", "batch", Some("n2"), 1000)])
        .pdb(pdb("w-pdb", "w", 1))
        .pdb(pdb("v-pdb", "v", 2));
    let out = s.preempt(online(1000), &["n1", "n2"]);
    assert_eq!(out.victims(), BTreeMap::from([("n2".into(), uids(&["v-1"]))]), "{}", out.explain());
    // n1's cost says why; only the returned node's victims get victim lines.
    assert!(
        out.explanations.iter().any(|e| e.code == "candidate"
            && e.node.as_deref() == Some("n1")
            && e.detail.contains("1 last budget(s) spent")),
        "{}",
        out.explain()
    );
    assert!(!out.explanations.iter().any(|e| e.code == "last_disruption" && e.node.as_deref() == Some("n1")));
}

#[test]
fn requeueing_a_bare_pod_is_cheaper_than_spending_a_pdbs_last_disruption() {
    let s = Scenario::new(requeue_policy())
        .node(node("n1", 1000, 8))
        .node(node("n2", 1000, 8))
        .pods([pod("w-1", "batch", Some("n1"), 1000), pod("free-1", "batch", Some("n2"), 1000).bare()])
        .pdb(pdb("w-pdb", "w", 1));
    let out = s.preempt(online(1000), &["n1", "n2"]);
    assert_eq!(out.victims(), BTreeMap::from([("n2".into(), uids(&["free-1"]))]), "{}", out.explain());
    assert_eq!(out.requeues.len(), 1);
}

#[test]
fn on_one_node_the_victim_that_spends_no_last_budget_goes_first() {
    // Either pod frees enough room; evicting w-1 would leave its PDB at zero.
    let s = Scenario::new(policy("prefer", ""))
        .node(node("n1", 2000, 8))
        .pods([pod("w-1", "batch", Some("n1"), 1000).started(1800), pod("v-1", "batch", Some("n1"), 1000)])
        .pdb(pdb("w-pdb", "w", 1))
        .pdb(pdb("v-pdb", "v", 2));
    let out = s.preempt(online(1000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["v-1"]))]), "{}", out.explain());
}

#[test]
fn a_pdb_with_budget_to_spare_costs_nothing_more() {
    // Both PDBs keep a disruption in hand whichever node is taken: run time decides.
    let s = Scenario::new(policy("prefer", ""))
        .node(node("n1", 1000, 8))
        .node(node("n2", 1000, 8))
        .pods([pod("w-1", "batch", Some("n1"), 1000).started(1800), pod("v-1", "batch", Some("n2"), 1000)])
        .pdb(pdb("w-pdb", "w", 2))
        .pdb(pdb("v-pdb", "v", 2));
    let out = s.preempt(online(1000), &["n1", "n2"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["w-1"]))]), "{}", out.explain());
    assert!(!out.has("victim", "last_disruption"));
}

/// Two arrivals. w's PDB allows one disruption and covers w-1 (on the only GPU node) and
/// w-2; n2 holds a bare pod that can be requeued. The first arrival fits on n1 or n2;
/// the second needs the GPU node.
fn two_arrivals(after_first: &[Pod], pdb_allowed: i32) -> Scenario {
    Scenario::new(requeue_policy())
        .node(gpu_node("gpu"))
        .node(node("n1", 1000, 8))
        .node(node("n2", 1000, 8))
        .pods([pod("w-1", "batch", Some("gpu"), 1000)])
        .pods(after_first.iter().cloned())
        .pdb(pdb("w-pdb", "w", pdb_allowed))
}

#[test]
fn an_early_arrival_leaves_the_last_disruption_to_a_later_one_that_has_no_other_choice() {
    let before =
        two_arrivals(&[pod("w-2", "batch", Some("n1"), 1000), pod("free-1", "batch", Some("n2"), 1000).bare()], 1);
    let first = before.preempt(online(1000), &["n1", "n2"]);
    assert_eq!(first.victims(), BTreeMap::from([("n2".into(), uids(&["free-1"]))]), "{}", first.explain());

    // The first arrival took n2 (free-1 requeued): the GPU pod spends the budget.
    let then = two_arrivals(&[pod("w-2", "batch", Some("n1"), 1000), pod("web", "online", Some("n2"), 1000)], 1);
    let gpu_pod = online(1000).scalar("nvidia.com/gpu", 1);
    let second = then.preempt(gpu_pod.clone(), &["gpu"]);
    assert_eq!(second.victims(), BTreeMap::from([("gpu".into(), uids(&["w-1"]))]), "{}", second.explain());
    assert_eq!(second.violations("gpu"), 0);

    // Had it taken n1, the budget would be gone and the GPU pod would violate it.
    let otherwise =
        two_arrivals(&[pod("web", "online", Some("n1"), 1000), pod("free-1", "batch", Some("n2"), 1000).bare()], 0);
    assert_eq!(otherwise.preempt(gpu_pod, &["gpu"]).violations("gpu"), 1);
}

/// w's PDB allows one disruption and covers w-1 (n1) and w-2 (n2); v's allows one and
/// covers v-1 (n3), which has run longer. web-1 was answered n1 (`victims`) a moment ago
/// and kube-scheduler has not deleted them yet: the view still counts w-1 healthy. n1 has
/// `n1_cpu` millicores and, beyond 1000, a pod x-1 filling the rest.
fn w_1_promised_a_moment_ago(victims: &[&str], n1_cpu: i64) -> Scenario {
    promised_with(policy("prefer", ""), victims, n1_cpu)
}

fn promised_with(policy: Policy, victims: &[&str], n1_cpu: i64) -> Scenario {
    let mut s = Scenario::new(policy)
        .node(node("n1", n1_cpu, 8))
        .node(node("n2", 1000, 8))
        .node(node("n3", 1000, 8))
        .pods([
            pod("web-1", "online", None, 1000),
            pod("w-1", "batch", Some("n1"), 1000).started(600),
            pod("w-2", "batch", Some("n2"), 1000).started(600),
            pod("v-1", "batch", Some("n3"), 1000).started(7200),
        ])
        .pods((n1_cpu > 1000).then(|| pod("x-1", "batch", Some("n1"), n1_cpu - 1000)))
        .pdb(pdb("w-pdb", "w", 1))
        .pdb(pdb("v-pdb", "v", 1));
    s.promised = vec![coloc_extender::decide::promised::PromisedRoom {
        node: "n1".into(),
        pod: pod("web-1", "online", None, 1000),
        victims: victims.iter().map(|v| format!("uid-{v}")).collect(),
        at: NOW,
    }];
    s
}

#[test]
fn a_victim_an_earlier_answer_chose_has_spent_its_pdbs_budget_before_it_is_deleted() {
    let s = w_1_promised_a_moment_ago(&["w-1"], 1000);
    let out = s.preempt(online(1000), &["n2", "n3"]);
    // w-2 has run less than v-1, but w-1 is on its way out: taking w-2 too exceeds w-pdb.
    assert_eq!(out.victims(), BTreeMap::from([("n3".into(), uids(&["v-1"]))]), "{}", out.explain());
    assert!(
        out.explanations.iter().any(|e| e.node.as_deref() == Some("n2")
            && e.code == "outranked"
            && e.detail.contains("1 PDB violation(s) against 0")),
        "{}",
        out.explain()
    );
    // A strict class says what spent the budget its status still shows.
    let strict = promised_with(policy("strict", ""), &["w-1"], 1000).preempt(online(1000), &["n2"]);
    assert!(
        strict.explanations.iter().any(|e| e.code == "pdb_strict"
            && e.detail
                .contains("disruptionsAllowed 1 in status, 0 now: 1 chosen by an earlier answer, not yet deleted")),
        "{}",
        strict.explain()
    );

    // Without that victim in the promise, w-2 is the cheaper choice.
    let out = w_1_promised_a_moment_ago(&[], 1000).preempt(online(1000), &["n2", "n3"]);
    assert_eq!(out.victims(), BTreeMap::from([("n2".into(), uids(&["w-2"]))]), "{}", out.explain());
}

#[test]
fn a_promised_victim_chosen_again_is_charged_to_its_pdb_once() {
    // n1 holds w-1 and x-1; web-1 was promised w-1's room. The next preemptor is offered
    // n1 itself (kube-scheduler still sees w-1 there) and needs both: taking w-1 again
    // disrupts nothing more.
    let s = w_1_promised_a_moment_ago(&["w-1"], 2000);
    let out = s.preempt(online(1000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["x-1", "w-1"]))]), "{}", out.explain());
    assert_eq!(out.violations("n1"), 0, "{}", out.explain());
}

#[test]
fn two_preemptors_of_a_wave_do_not_together_push_a_pdb_past_its_budget() {
    // Nothing promised yet: web-1 takes a w pod (younger than v-1, and w-pdb allows one).
    let mut s = w_1_promised_a_moment_ago(&[], 1000);
    s.promised.clear();
    let first = s.preempt(pod("web-1", "online", None, 1000), &["n1", "n2", "n3"]);
    let (node, victims) = first.victims().into_iter().next().expect("web-1 is answered");
    assert!(victims[0].starts_with("uid-w-"), "{}", first.explain());
    assert!(first.promised.iter().any(|p| p.node == node && p.victims == victims), "{:?}", first.promised);

    // web-2 comes before kube-scheduler has deleted it: the other w pod is spared.
    s.promised = first.promised;
    let second = s.preempt(pod("web-2", "online", None, 1000), &["n1", "n2", "n3"]);
    assert_eq!(second.victims(), BTreeMap::from([("n3".into(), uids(&["v-1"]))]), "{}", second.explain());
}

#[test]
fn a_promised_victim_its_pdb_counts_disrupted_already_is_not_counted_again() {
    // w-1 was evicted through the Eviction API: w-pdb lists it in disruptedPods and its
    // disruptionsAllowed (1) already leaves it out, so w-2 may still go.
    let mut s = w_1_promised_a_moment_ago(&["w-1"], 1000);
    s.objects.pdbs[0].disrupted_pods = vec!["w-1".into()];
    let out = s.preempt(online(1000), &["n2", "n3"]);
    assert_eq!(out.victims(), BTreeMap::from([("n2".into(), uids(&["w-2"]))]), "{}", out.explain());
    assert_eq!(out.violations("n2"), 0, "{}", out.explain());
}
