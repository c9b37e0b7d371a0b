//! Online first wins over protection: a bare pod of a `requeue` class that requeue cannot
//! bring back (namespace not opted in, `maxAttempts` reached, requeue unavailable, host
//! access a copy may not carry) is a victim of last resort. It is chosen only where no
//! other victims place the online pod, and then it is lost and said to be. Each rule on
//! the smallest cluster that shows it, for every reason.

mod common;

use std::collections::BTreeMap;

use coloc_extender::explanation::LostReason;
use coloc_extender::model::marks::{ATTEMPT, FROM_UID};
use coloc_extender::model::{BaselineControl, Pod};
use coloc_extender::policy::Policy;
use common::*;
use rstest::rstest;

/// online preempts batch, batch preempts free; their bare pods are handled as `bare`
/// says, requeued at most twice.
fn policy_with(bare: &str, extra: &str) -> Policy {
    classes()
        .max_candidates(None)
        .extra(extra)
        .victims(&format!("{{allowed: true, pdb: prefer, bare: {bare}}}"))
        .batch("requeue: {maxAttempts: 2}")
        .free("requeue: {maxAttempts: 2}")
        .build()
}

fn requeue_policy() -> Policy {
    policy_with("requeue", "maxCandidates: 1")
}

fn online(cpu: i64) -> Pod {
    pod("preemptor", "online", None, cpu)
}

/// A bare batch pod in namespace `plain` that requeue cannot bring back for `reason`,
/// started a minute ago: younger, so cheaper than any other victim here but for that.
fn stuck(reason: LostReason, node: &str, cpu: i64) -> Pod {
    stuck_of("batch", reason, node, cpu)
}

fn stuck_of(class: &str, reason: LostReason, node: &str, cpu: i64) -> Pod {
    let p = pod("stuck", class, Some(node), cpu).bare().ns("plain").started(60);
    match reason {
        LostReason::MaxAttempts => p.annotate(FROM_UID, "uid-stuck-0").annotate(ATTEMPT, "2"),
        LostReason::BeyondBaseline => Pod { beyond_baseline: Some(BaselineControl::HostPathVolumes), ..p },
        LostReason::NamespaceNotOptedIn | LostReason::RequeueUnavailable => p,
    }
}

/// The cluster `stuck(reason, ..)` needs: namespace `plain` not opted in (`default` opted
/// in), or requeue off; otherwise every namespace takes copies.
fn cluster(reason: LostReason, policy: Policy) -> Scenario {
    let s = Scenario::new(policy);
    match reason {
        LostReason::NamespaceNotOptedIn => {
            s.namespace("plain", &[]).namespace("default", &[("coloc-extender.io/requeue", "enabled")])
        }
        LostReason::RequeueUnavailable => Scenario { requeue: false, ..s },
        LostReason::MaxAttempts | LostReason::BeyondBaseline => s,
    }
}

#[rstest]
#[case::namespace_not_opted_in(LostReason::NamespaceNotOptedIn)]
#[case::max_attempts(LostReason::MaxAttempts)]
#[case::requeue_unavailable(LostReason::RequeueUnavailable)]
#[case::beyond_baseline(LostReason::BeyondBaseline)]
fn it_is_spared_where_another_victim_on_its_node_places_the_pod(#[case] reason: LostReason) {
    // Either pod frees the room; the recreated one ran for an hour, the stuck one a
    // minute: by value alone the stuck one would go.
    let s = cluster(reason, requeue_policy())
        .node(node("n1", 2000, 8))
        .pods([stuck(reason, "n1", 1000), pod("owned", "batch", Some("n1"), 1000)]);
    let out = s.preempt(online(1000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["owned"]))]), "{}", out.explain());
    assert!(!out.has("victim", "last_resort"), "{}", out.explain());
}

#[rstest]
#[case::namespace_not_opted_in(LostReason::NamespaceNotOptedIn)]
#[case::max_attempts(LostReason::MaxAttempts)]
#[case::requeue_unavailable(LostReason::RequeueUnavailable)]
#[case::beyond_baseline(LostReason::BeyondBaseline)]
fn it_is_spared_where_another_candidate_node_places_the_pod_even_past_a_pdb(#[case] reason: LostReason) {
    // n1: only the stuck pod. n2: a recreated pod whose PDB allows no disruption (a
    // best-effort class): a violation, but its pod comes back; the stuck one would not.
    let s = cluster(reason, requeue_policy())
        .node(node("n1", 1000, 8))
        .node(node("n2", 1000, 8))
        .pods([stuck(reason, "n1", 1000), pod("guarded", "batch", Some("n2"), 1000)])
        .pdb(pdb("guarded", "guarded", 0));
    let out = s.preempt(online(1000), &["n1", "n2"]);
    assert_eq!(out.victims(), BTreeMap::from([("n2".into(), uids(&["guarded"]))]), "{}", out.explain());
    assert_eq!(out.violations("n2"), 1);
    assert!(out.has("dropped", "outranked"), "{}", out.explain());
}

#[rstest]
#[case::namespace_not_opted_in(
    LostReason::NamespaceNotOptedIn,
    "namespace plain has not opted in to copies (label coloc-extender.io/requeue=enabled"
)]
#[case::max_attempts(LostReason::MaxAttempts, "requeued 2 time(s) already; class batch allows requeue.maxAttempts 2")]
#[case::requeue_unavailable(LostReason::RequeueUnavailable, "requeue is off or cannot store copies")]
#[case::beyond_baseline(
    LostReason::BeyondBaseline,
    "it asks for a hostPath volume (hostPathVolumes), beyond Pod Security baseline"
)]
fn where_it_is_the_only_way_it_is_chosen_lost_and_said_to_be(#[case] reason: LostReason, #[case] why: &str) {
    let s = cluster(reason, requeue_policy()).node(node("n1", 1000, 8)).pods([stuck(reason, "n1", 1000)]);
    let out = s.preempt(online(1000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["stuck"]))]), "{}", out.explain());
    assert!(out.requeues.is_empty(), "nothing will copy it");
    let line = out.explanations.iter().find(|e| e.code == "last_resort").expect("a last_resort line");
    assert_eq!((line.verdict.as_str(), line.pod.as_deref()), ("victim", Some("plain/stuck")));
    assert_eq!(line.lost_reason, Some(reason));
    assert!(line.detail.contains(&format!("bare pod: {why}")), "{}", line.detail);
    assert!(line.detail.contains("; chosen as a last resort: no other victims place the pod; lost"), "{}", line.detail);
    let candidate = out.explanations.iter().find(|e| e.code == "candidate").unwrap();
    assert!(candidate.detail.contains("1 lost (1 a last resort"), "{}", candidate.detail);
}

#[test]
fn a_class_that_says_bare_protect_still_never_gives_one_up() {
    for reason in LostReason::ALL.iter().copied() {
        let s = cluster(reason, policy_with("protect", "")).node(node("n1", 1000, 8)).pods([stuck(reason, "n1", 1000)]);
        let out = s.preempt(online(1000), &["n1"]);
        assert!(out.victims().is_empty(), "{reason}: {}", out.explain());
        assert!(out.has("spared", "not_recreatable"), "{reason}: {}", out.explain());
    }
}

#[test]
fn an_offline_preemptor_never_takes_one() {
    // Online first, not offline: batch may preempt free, but losing a free pod to place a
    // batch pod is no last resort worth taking.
    for reason in LostReason::ALL.iter().copied() {
        let s =
            cluster(reason, requeue_policy()).node(node("n1", 1000, 8)).pods([stuck_of("free", reason, "n1", 1000)]);
        let out = s.preempt(pod("preemptor", "batch", None, 1000), &["n1"]);
        assert!(out.victims().is_empty(), "{reason}: {}", out.explain());
        let line = out.explanations.iter().find(|e| e.code == "cannot_requeue").expect("a cannot_requeue line");
        assert_eq!(line.verdict, "spared");
        assert!(line.detail.ends_with("only an online pod takes it, as a last resort"), "{}", line.detail);
        // The same pod is an online pod's last resort.
        let out = s.preempt(online(1000), &["n1"]);
        assert!(out.has("victim", "last_resort"), "{reason}: {}", out.explain());
    }
}

#[test]
fn a_plan_with_fewer_victims_of_last_resort_is_the_only_one_offered() {
    // kube-scheduler picks among the nodes returned by its own rules: with maxCandidates
    // 2, n2 (a recreated victim) is returned alone, and n1 is not offered beside it.
    let reason = LostReason::NamespaceNotOptedIn;
    let s = cluster(reason, policy_with("requeue", "maxCandidates: 2"))
        .node(node("n1", 1000, 8))
        .node(node("n2", 1000, 8))
        .pods([stuck(reason, "n1", 1000), pod("owned", "batch", Some("n2"), 1000)]);
    let out = s.preempt(online(1000), &["n1", "n2"]);
    assert_eq!(out.victims(), BTreeMap::from([("n2".into(), uids(&["owned"]))]), "{}", out.explain());
    let dropped = out.explanations.iter().find(|e| e.code == "outranked").expect("n1 outranked");
    assert!(dropped.detail.contains("1 of last resort"), "{}", dropped.detail);
}

#[test]
fn without_a_view_kubes_last_resort_victim_ranks_its_node_last_rather_than_dropping_it() {
    // No view: kube-scheduler's victims are judged as they are. n1's is a bare pod that
    // cannot be requeued (requeue off), n2's a recreated pod kube says violates a PDB.
    let reason = LostReason::RequeueUnavailable;
    let s = cluster(reason, requeue_policy())
        .node(node("n1", 1000, 8))
        .node(node("n2", 1000, 8))
        .pods([stuck(reason, "n1", 1000), pod("guarded", "batch", Some("n2"), 1000)]);
    let preemptor = online(1000);
    let mut both = s.full_candidates(&preemptor, &["n1", "n2"]);
    if let coloc_extender::wire::Candidates::Full(map) = &mut both {
        map.get_mut("n2").unwrap().num_pdb_violations = 1;
    }
    let out = s.preempt_with(preemptor.clone(), both, None);
    assert_eq!(out.victims(), BTreeMap::from([("n2".into(), uids(&["guarded"]))]), "{}", out.explain());
    // Where n1 is the only candidate, it is kept, its victim lost as a last resort.
    let only = s.full_candidates(&preemptor, &["n1"]);
    let out = s.preempt_with(preemptor, only, None);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["stuck"]))]), "{}", out.explain());
    assert!(out.has("victim", "last_resort"), "{}", out.explain());
}
