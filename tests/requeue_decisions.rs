//! Requeue, nominated pods and kube's proposal in decisions: pure rules, each on the
//! smallest cluster that shows it.

mod common;

use std::collections::BTreeMap;

use coloc_extender::model::{OwnerRef, Pod};
use coloc_extender::policy::Policy;
use coloc_extender::wire::Candidates;
use coloc_extender::wire::VictimUids;
use common::*;

/// online preempts batch; batch's bare pods are handled as `bare` says.
fn requeue_policy(bare: &str) -> Policy {
    requeue_policy_with(bare, "{}")
}

/// ... and batch's requeued pods come back as `requeue` (RequeueRules) says; batch may
/// preempt free.
fn requeue_policy_with(bare: &str, requeue: &str) -> Policy {
    classes()
        .online_preempts("[batch]")
        .batch_victim(&format!("{{allowed: true, pdb: prefer, bare: {bare}}}"))
        .batch(&format!("requeue: {requeue}"))
        .build()
}

fn online(cpu: i64) -> Pod {
    pod("preemptor", "online", None, cpu)
}

#[test]
fn a_bare_victim_of_a_requeue_class_is_requeued_under_a_deterministic_name() {
    let s = Scenario::new(requeue_policy("requeue")).node(node("n1", 2000, 8)).pods([pod(
        "bare",
        "batch",
        Some("n1"),
        2000,
    )
    .bare()]);
    let out = s.preempt(online(2000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["bare"]))]), "{}", out.explain());
    assert_eq!(out.requeues.len(), 1);
    let r = &out.requeues[0];
    assert_eq!((r.name.as_str(), r.uid.as_str(), r.node.as_str(), r.attempt), ("bare", "uid-bare", "n1", 1));
    assert_eq!(r.preemptor, "default/preemptor");
    assert_eq!(r.replacement, s.preempt(online(2000), &["n1"]).requeues[0].replacement, "same name on a retry");
    assert!(out.has("victim", "requeued"));
}

#[test]
fn a_pod_with_an_owner_that_is_not_a_controller_is_left_to_its_owner_not_copied() {
    let mut tracked = pod("runner", "batch", Some("n1"), 2000).bare();
    tracked.owner = Some(OwnerRef { kind: "Workflow".into(), name: "nightly".into() });
    let s = Scenario::new(requeue_policy("requeue")).node(node("n1", 2000, 8)).pods([tracked]);
    let out = s.preempt(online(2000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["runner"]))]), "{}", out.explain());
    assert!(out.requeues.is_empty(), "no copy: its owner brings it back");
    assert!(out.has("victim", "left_to_owner"), "{}", out.explain());
}

#[test]
fn a_bare_pod_that_opted_out_of_requeue_is_not_copied() {
    let mut opted_out = pod("ci-job", "batch", Some("n1"), 2000).bare();
    opted_out.annotations.insert(coloc_extender::model::marks::OPT_OUT.into(), "never".into());
    let s = Scenario::new(requeue_policy("requeue")).node(node("n1", 2000, 8)).pods([opted_out]);
    let out = s.preempt(online(2000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["ci-job"]))]), "{}", out.explain());
    assert!(out.requeues.is_empty());
    assert!(out.has("victim", "left_to_owner"), "{}", out.explain());
}

#[test]
fn with_requeue_off_a_bare_victim_of_a_requeue_class_is_a_last_resort_lost_and_says_why() {
    let mut s = Scenario::new(requeue_policy("requeue")).node(node("n1", 2000, 8)).pods([pod(
        "bare",
        "batch",
        Some("n1"),
        2000,
    )
    .bare()]);
    s.requeue = false;
    let out = s.preempt(online(2000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["bare"]))]), "{}", out.explain());
    assert!(out.requeues.is_empty());
    assert!(out.has("victim", "last_resort"), "{}", out.explain());
}

#[test]
fn a_bare_pod_is_requeued_only_in_a_namespace_that_opts_in_and_never_in_kube_system() {
    // The same bare pod, in namespaces labelled one way or another: where admission would
    // refuse its copy, it is a victim of last resort and the online pod takes the
    // recreatable one.
    let cluster = |ns: &str, labels: &[(&str, &str)]| {
        Scenario::new(requeue_policy("requeue")).node(node("n1", 2000, 8)).namespace(ns, labels).pods([
            pod("bare", "batch", Some("n1"), 1000).bare().ns(ns),
            pod("owned", "batch", Some("n1"), 1000).ns(ns),
        ])
    };
    for (ns, labels) in [
        ("batch", &[("coloc-extender.io/requeue", "enabled")][..]),
        ("batch", &[("coloc-extender.io/scheduler", "coloc-scheduler")][..]),
    ] {
        let out = cluster(ns, labels).preempt(online(2000), &["n1"]);
        assert_eq!(out.requeues.len(), 1, "{labels:?}: {}", out.explain());
    }
    for (ns, labels) in [
        ("batch", &[][..]),
        ("batch", &[("coloc-extender.io/requeue", "yes")][..]),
        ("kube-system", &[("coloc-extender.io/requeue", "enabled")][..]),
    ] {
        let out = cluster(ns, labels).preempt(online(1000), &["n1"]);
        assert_eq!(
            out.victims(),
            BTreeMap::from([("n1".into(), uids(&["owned"]))]),
            "{ns} {labels:?}: {}",
            out.explain()
        );
        assert!(out.requeues.is_empty());
        assert!(out.has("spared", "reprieved"), "{}", out.explain());
    }
}

#[test]
fn a_requeue_costs_more_than_a_recreated_victim_and_less_than_a_pdb_violation() {
    let s = Scenario::new(requeue_policy("requeue"))
        .node(node("n1", 1000, 8))
        .node(node("n2", 1000, 8))
        .node(node("n3", 1000, 8))
        .pods([
            pod("guarded-1", "batch", Some("n1"), 1000).label("app", "guarded"),
            pod("bare", "batch", Some("n2"), 1000).bare(),
            pod("owned", "batch", Some("n3"), 1000),
        ])
        .pdb(pdb("guarded", "guarded", 0));
    let out = s.preempt(online(1000), &["n1", "n2", "n3"]);
    assert_eq!(out.victims(), BTreeMap::from([("n3".into(), uids(&["owned"]))]), "{}", out.explain());
    let out = s.preempt(online(1000), &["n1", "n2"]);
    assert_eq!(
        out.victims(),
        BTreeMap::from([("n2".into(), uids(&["bare"]))]),
        "requeue before a PDB violation: {}",
        out.explain()
    );
}

#[test]
fn a_lost_victim_only_where_the_class_says_lose() {
    let s =
        Scenario::new(requeue_policy("lose"))
            .node(node("n1", 2000, 8))
            .pods([pod("bare", "batch", Some("n1"), 2000).bare()]);
    let out = s.preempt(online(2000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["bare"]))]));
    assert!(out.requeues.is_empty(), "nothing is stored for a lost pod");
    assert!(out.has("victim", "lost"), "{}", out.explain());
}

#[test]
fn a_job_victim_is_told_to_count_against_the_jobs_backoff_limit() {
    let mut job_pod = pod("job-1", "batch", Some("n1"), 2000);
    job_pod.controller = Some(OwnerRef { kind: "Job".into(), name: "train".into() });
    let s = Scenario::new(requeue_policy("requeue")).node(node("n1", 2000, 8)).pods([job_pod]);
    let out = s.preempt(online(2000), &["n1"]);
    assert!(
        out.explanations
            .iter()
            .any(|e| e.code == "chosen" && e.detail.contains("Job train") && e.detail.contains("backoffLimit")),
        "{}",
        out.explain()
    );
}

#[test]
fn a_nominated_pod_of_equal_or_higher_priority_keeps_its_room() {
    // n1: 4 CPU, two 2-CPU batch pods. Another online pod is nominated to n1 for 2 CPU:
    // the preemptor needs both batch pods gone, as in kube-scheduler.
    let mut nominated = pod("waiting", "online", None, 2000);
    nominated.nominated_node_name = Some("n1".into());
    let s = Scenario::new(requeue_policy("requeue")).node(node("n1", 4000, 8)).pods([
        pod("b-1", "batch", Some("n1"), 2000),
        pod("b-2", "batch", Some("n1"), 2000),
        nominated,
    ]);
    let out = s.preempt(online(2000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["b-1", "b-2"]))]), "{}", out.explain());
    assert!(out.has("charged", "nominated_room"));
}

#[test]
fn a_nominated_pod_of_lower_priority_holds_no_room() {
    let mut nominated = pod("waiting", "batch", None, 2000);
    nominated.nominated_node_name = Some("n1".into());
    let s = Scenario::new(requeue_policy("requeue")).node(node("n1", 4000, 8)).pods([
        pod("b-1", "batch", Some("n1"), 2000),
        pod("b-2", "batch", Some("n1"), 2000),
        nominated,
    ]);
    let out = s.preempt(online(2000), &["n1"]);
    assert_eq!(out.victims()["n1"].len(), 1, "{}", out.explain());
    assert!(!out.has("charged", "nominated_room"));
}

#[test]
fn among_equally_good_victims_kubes_proposal_is_kept() {
    // Two identical pods; either frees enough. kube-scheduler proposed b-1.
    let s = Scenario::new(requeue_policy("requeue"))
        .node(node("n1", 2000, 8))
        .pods([pod("b-1", "batch", Some("n1"), 1000), pod("b-2", "batch", Some("n1"), 1000)]);
    for proposed in ["b-1", "b-2"] {
        let candidates = Candidates::Meta(BTreeMap::from([(
            "n1".to_string(),
            VictimUids { uids: uids(&[proposed]), num_pdb_violations: 0 },
        )]));
        let view = s.view();
        let out = s.preempt_with(online(1000), candidates, Some(&view));
        assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&[proposed]))]), "{}", out.explain());
    }
}

#[test]
fn a_proposed_victim_the_view_knows_is_terminating_is_judged_by_the_view() {
    // Full mode, node unknown to the view (so kube's victims are judged), but the view has
    // the victim itself: it started terminating since kube-scheduler looked.
    let going = pod("b-1", "batch", Some("n1"), 2000);
    let mut terminating = going.clone();
    terminating.deletion_time = Some(NOW - 1);
    let s = Scenario::new(requeue_policy("requeue")).pods([terminating]);
    let kube_saw = Scenario::new(requeue_policy("requeue")).node(node("n1", 2000, 8)).pods([going]);
    let candidates = kube_saw.full_candidates(&online(2000), &["n1"]);
    let view = s.view();
    let out = s.preempt_with(online(2000), candidates, Some(&view));
    assert!(out.victims().is_empty(), "{}", out.explain());
    assert!(out.has("protected", "terminating"), "{}", out.explain());
}

/// A released replacement of a batch pod, needing the room a free pod holds.
fn returning_replacement() -> Pod {
    pod("work-rq-0000000001", "batch", None, 2000)
        .bare()
        .annotate(coloc_extender::model::marks::FROM_UID, "uid-work")
        .annotate(coloc_extender::model::marks::BASE_NAME, "work")
        .annotate(coloc_extender::model::marks::ATTEMPT, "1")
}

#[test]
fn with_requeue_preemption_never_a_returning_replacement_waits_for_free_room() {
    let s = Scenario::new(requeue_policy_with("requeue", "{preemption: never}")).node(node("n1", 2000, 8)).pods([pod(
        "free-1",
        "free",
        Some("n1"),
        2000,
    )
    .bare()]);
    let out = s.preempt(returning_replacement(), &["n1"]);
    assert!(out.victims().is_empty(), "{}", out.explain());
    assert!(out.has("refused", "replacement_waits"), "{}", out.explain());
    // The original pod of the same class still preempts as its class allows.
    let out = s.preempt(pod("fresh", "batch", None, 2000).bare(), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["free-1"]))]), "{}", out.explain());
}

#[test]
fn with_requeue_preemption_keep_a_returning_replacement_preempts_as_its_original_could() {
    let s = Scenario::new(requeue_policy_with("requeue", "{preemption: keep}")).node(node("n1", 2000, 8)).pods([pod(
        "free-1",
        "free",
        Some("n1"),
        2000,
    )
    .bare()]);
    let out = s.preempt(returning_replacement(), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["free-1"]))]), "{}", out.explain());
}

#[test]
fn after_max_attempts_requeues_a_pod_is_not_copied_again_and_is_only_a_last_resort() {
    use coloc_extender::model::marks::{ATTEMPT, FROM_UID};
    let twice =
        pod("work-rq-2", "batch", Some("n1"), 2000).bare().annotate(FROM_UID, "uid-work-1").annotate(ATTEMPT, "2");
    let s = Scenario::new(requeue_policy_with("requeue", "{maxAttempts: 2}")).node(node("n1", 2000, 8)).pods([twice]);
    let out = s.preempt(online(2000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["work-rq-2"]))]), "{}", out.explain());
    assert!(out.requeues.is_empty(), "not copied a third time");
    assert!(out.has("victim", "last_resort"), "{}", out.explain());
    let once = pod("work-rq-1", "batch", Some("n1"), 2000).bare().annotate(FROM_UID, "uid-work").annotate(ATTEMPT, "1");
    let s = Scenario::new(requeue_policy_with("requeue", "{maxAttempts: 2}")).node(node("n1", 2000, 8)).pods([once]);
    let out = s.preempt(online(2000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["work-rq-1"]))]));
    assert_eq!(out.requeues.len(), 1, "{}", out.explain());
    // An original claiming requeues it never had is an original: only copies, which the
    // extender alone writes, count them.
    let claims = pod("work", "batch", Some("n1"), 2000).bare().annotate(ATTEMPT, "9");
    let s = Scenario::new(requeue_policy_with("requeue", "{maxAttempts: 2}")).node(node("n1", 2000, 8)).pods([claims]);
    let out = s.preempt(online(2000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["work"]))]));
    assert_eq!(out.requeues.len(), 1, "requeued as an original: {}", out.explain());
}

#[test]
fn max_attempts_of_zero_is_refused_at_load_naming_the_field() {
    let err = Policy::from_yaml("defaultClass: a\nclasses:\n  - name: a\n    requeue: {maxAttempts: 0}\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("classes[0].requeue.maxAttempts"), "{err}");
}

#[test]
fn a_preemptor_nominated_where_pods_still_leave_evicts_nobody_else() {
    // kube-scheduler nominated the preemptor to n1 and its victims there are terminating,
    // their mark not yet seen: the room on n1 is on its way (kube-scheduler's own rule).
    let leaving = |name: &str| {
        let mut p = pod(name, "batch", Some("n1"), 1000).bare();
        p.deletion_time = Some(NOW - 1);
        p
    };
    let s = Scenario::new(requeue_policy("requeue")).node(node("n1", 2000, 8)).node(node("n2", 2000, 8)).pods([
        leaving("b-1"),
        leaving("b-2"),
        pod("w-1", "batch", Some("n2"), 2000),
    ]);
    let mut nominated = online(2000);
    nominated.nominated_node_name = Some("n1".into());
    let out = s.preempt(nominated, &["n2"]);
    assert!(out.victims().is_empty(), "{}", out.explain());
    assert!(out.has("refused", "room_on_its_way"), "{}", out.explain());
    // Not nominated there, and the pods not marked by kube-scheduler: a rollout, say.
    let out = s.preempt(online(2000), &["n2"]);
    assert_eq!(out.victims(), BTreeMap::from([("n2".into(), uids(&["w-1"]))]), "{}", out.explain());
}

#[test]
fn room_already_free_in_the_view_is_not_freed_twice() {
    // The first victims on n1 are gone from the view; kube-scheduler's cache still holds
    // them and asks again, proposing them and n2's pod: nothing more is evicted.
    let s = Scenario::new(requeue_policy("requeue")).node(node("n1", 2000, 8)).node(node("n2", 2000, 8)).pods([
        pod("b-1", "batch", Some("n1"), 1000).bare(),
        pod("b-2", "batch", Some("n1"), 1000).bare(),
        pod("v-1", "batch", Some("n2"), 2000),
    ]);
    let preemptor = online(2000);
    let candidates = s.meta_candidates(&preemptor, &["n1", "n2"]);
    let mut view = s.view();
    let p = s.policy.clone();
    view.remove_pod("default/b-1", &p);
    view.remove_pod("default/b-2", &p);
    let out = s.preempt_with(preemptor.clone(), candidates, Some(&view));
    assert!(out.victims().is_empty(), "{}", out.explain());
    assert!(out.has("refused", "room_on_its_way"), "{}", out.explain());
    // The proposed victim still in the view, and the pod fitting there all the same:
    // kube-scheduler has a reason the view does not model (an anti-affinity, say); nothing
    // is refused, and re-selection decides as before.
    let roomy = Scenario::new(requeue_policy("requeue"))
        .node(node("n1", 4000, 8))
        .node(node("n2", 2000, 8))
        .pods([pod("b-1", "batch", Some("n1"), 1000).bare(), pod("v-1", "batch", Some("n2"), 2000)]);
    let out =
        roomy.preempt_with(preemptor.clone(), roomy.meta_candidates(&preemptor, &["n1", "n2"]), Some(&roomy.view()));
    assert!(!out.has("refused", "room_on_its_way"), "{}", out.explain());
    // Proposed victims the view never saw: the view is behind, and re-selects as before.
    let fresh = Scenario::new(requeue_policy("requeue"))
        .node(node("n1", 2000, 8))
        .node(node("n2", 2000, 8))
        .pods([pod("v-1", "batch", Some("n2"), 2000)]);
    let candidates = s.meta_candidates(&preemptor, &["n1", "n2"]);
    let out = fresh.preempt_with(preemptor, candidates, Some(&fresh.view()));
    assert!(!out.has("refused", "room_on_its_way"), "{}", out.explain());
    assert!(out.view_behind, "{}", out.explain());
}

#[test]
fn room_kube_scheduler_preempted_is_waited_for_not_freed_twice() {
    // n1's workers were preempted a moment ago (DisruptionTarget) and are terminating; the
    // preemptor fits there once they go. kube-scheduler asks again, proposing n2.
    let leaving = |name: &str| {
        let mut p = pod(name, "batch", Some("n1"), 1000);
        p.deletion_time = Some(NOW - 1);
        p.preempted = true;
        p
    };
    let s = Scenario::new(requeue_policy("requeue")).node(node("n1", 2000, 8)).node(node("n2", 2000, 8)).pods([
        leaving("w-1"),
        leaving("w-2"),
        pod("v-1", "batch", Some("n2"), 2000),
    ]);
    let out = s.preempt(online(2000), &["n1", "n2"]);
    assert!(out.victims().is_empty(), "{}", out.explain());
    assert!(out.has("refused", "room_on_its_way"), "{}", out.explain());
    // Pods terminating for another reason (a rollout, a scale-down) are not waited for.
    let mut s = s;
    for p in &mut s.objects.pods {
        p.preempted = false;
    }
    let out = s.preempt(online(2000), &["n1", "n2"]);
    assert_eq!(out.victims(), BTreeMap::from([("n2".into(), uids(&["v-1"]))]), "{}", out.explain());
}
