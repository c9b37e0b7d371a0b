//! The price of a second: how long victims take to stop weighs in the choice at the
//! preemptor class's `waitPrice` (CPU-seconds of offline work per second of its wait),
//! on one figure with the work thrown away and the restarts, after losses, PDB
//! violations, the victims' class and budgets. Each rule on the smallest cluster that
//! shows it.

mod common;

use std::collections::BTreeMap;

use coloc_extender::model::Pod;
use coloc_extender::policy::{BareVictims, Policy};
use common::*;

/// The common policy with one class changed.
trait Tweak: Sized {
    fn class(self, name: &str, change: impl FnOnce(&mut coloc_extender::policy::Class)) -> Self;
    fn with_wait_price(self, class: &str, price: f64) -> Self {
        self.class(class, |c| c.wait_price = price)
    }
    fn with_bare(self, class: &str, bare: BareVictims) -> Self {
        self.class(class, |c| (c.victim.bare, c.victim.recreatable_only) = (Some(bare), None))
    }
    fn with_checkpoints(self, class: &str) -> Self {
        self.class(class, |c| c.victim.checkpoints_on_term = true)
    }
}

impl Tweak for Policy {
    fn class(mut self, name: &str, change: impl FnOnce(&mut coloc_extender::policy::Class)) -> Self {
        change(self.classes.iter_mut().find(|c| c.name == name).expect("a class of the test policy"));
        self
    }
}

fn online(cpu: i64) -> Pod {
    pod("preemptor", "online", None, cpu)
}

/// The one node the answer returns.
fn chosen(out: &Outcome) -> String {
    let v = out.victims();
    assert_eq!(v.len(), 1, "one node: {}", out.explain());
    v.into_keys().next().unwrap()
}

#[test]
fn where_all_else_is_equal_the_victims_that_stop_sooner_win() {
    // Two nodes alike but for their victims' grace periods: n1 comes first by name.
    let s = Scenario::new(policy("strict", ""))
        .node(node("n1", 2000, 8))
        .node(node("n2", 2000, 8))
        .pods([pod("slow", "batch", Some("n1"), 2000).grace(600), pod("fast", "batch", Some("n2"), 2000).grace(5)]);
    let out = s.preempt(online(2000), &["n1", "n2"]);
    assert_eq!(out.victims(), BTreeMap::from([("n2".into(), uids(&["fast"]))]), "{}", out.explain());
}

/// n1's victim ran 10 minutes and takes 10 minutes to stop; n2's ran an hour and stops in
/// 5 s. Both 2 CPU: n2 throws away 2 × 3,000 = 6,000 CPU-s more, and frees the room 595 s
/// sooner. n2 is worth it exactly where 595 s cost more than 6,000 CPU-s: above
/// 6,000 / 595 = 10.08 CPU-s per second.
fn young_slow_and_old_fast(price: f64) -> Scenario {
    Scenario::new(policy("strict", "").with_wait_price("online", price))
        .node(node("n1", 2000, 8))
        .node(node("n2", 2000, 8))
        .pods([
            pod("young-slow", "batch", Some("n1"), 2000).started(600).grace(600),
            pod("old-fast", "batch", Some("n2"), 2000).started(3600).grace(5),
        ])
}

#[test]
fn a_sooner_plan_wins_exactly_where_its_seconds_are_worth_more_than_the_work_it_adds() {
    let worth = young_slow_and_old_fast(10.1).preempt(online(2000), &["n1", "n2"]);
    assert_eq!(chosen(&worth), "n2", "{}", worth.explain());
    assert!(worth.explain().contains("room free ~5.0 s"), "{}", worth.explain());
    let not_worth = young_slow_and_old_fast(10.0).preempt(online(2000), &["n1", "n2"]);
    assert_eq!(chosen(&not_worth), "n1", "{}", not_worth.explain());
}

#[test]
fn the_answer_says_the_trade_in_the_policys_units() {
    let out = young_slow_and_old_fast(10.0).preempt(online(2000), &["n1", "n2"]);
    assert!(
        out.explain().contains(
            "against the chosen candidate (n1): 9 min 55 s sooner for 6,000 CPU-s more, not worth it at 10 CPU-s per second"
        ),
        "{}",
        out.explain()
    );
    let out = young_slow_and_old_fast(1000.0).preempt(online(2000), &["n1", "n2"]);
    assert!(
        out.explain().contains(
            "against the chosen candidate (n2): 9 min 55 s later for 6,000 CPU-s less: the seconds are worth more at 1,000 CPU-s per second"
        ),
        "{}",
        out.explain()
    );
}

#[test]
fn a_cheaper_slightly_slower_plan_wins_where_its_seconds_are_worth_less() {
    // 8 s against 5 s: 3 s sooner for 6,000 CPU-s more, worth 3,000 at 1,000 a second.
    let s = Scenario::new(policy("strict", "").with_wait_price("online", 1000.0))
        .node(node("n1", 2000, 8))
        .node(node("n2", 2000, 8))
        .pods([
            pod("young", "batch", Some("n1"), 2000).started(600).grace(8),
            pod("old", "batch", Some("n2"), 2000).started(3600).grace(5),
        ]);
    let out = s.preempt(online(2000), &["n1", "n2"]);
    assert_eq!(chosen(&out), "n1", "{}", out.explain());
}

#[test]
fn a_slower_plan_that_is_also_dearer_is_never_chosen_at_any_price() {
    // n1 both throws away more and frees the room later.
    for price in [0.0, 1.0, 1000.0, 1e9] {
        let s = Scenario::new(policy("strict", "").with_wait_price("online", price))
            .node(node("n1", 2000, 8))
            .node(node("n2", 2000, 8))
            .pods([
                pod("old-slow", "batch", Some("n1"), 2000).started(3600).grace(600),
                pod("young-fast", "batch", Some("n2"), 2000).started(600).grace(5),
            ]);
        assert_eq!(chosen(&s.preempt(online(2000), &["n1", "n2"])), "n2", "at {price}");
    }
}

#[test]
fn at_a_price_of_0_the_wait_only_breaks_ties() {
    let out = young_slow_and_old_fast(0.0).preempt(online(2000), &["n1", "n2"]);
    assert_eq!(chosen(&out), "n1", "{}", out.explain());
}

#[test]
fn a_copy_just_released_is_no_cheap_victim() {
    // n1: a copy released 2 minutes ago (its original was preempted once already); n2: a
    // pod that ran 30 minutes. Both 1 CPU, both stop in 5 s, restartCost 2h. By run
    // alone the copy is the cheaper (120 against 1,800 CPU-s); but its owner restarted it
    // once already: 2 × 7,200 + 120 against 7,200 + 1,800.
    let copy = pod("train-rq", "batch", Some("n1"), 1000)
        .bare()
        .started(120)
        .grace(5)
        .annotate(coloc_extender::model::marks::FROM_UID, "uid-train")
        .annotate(coloc_extender::model::marks::ATTEMPT, "1");
    let mut s = Scenario::new(
        classes()
            .batch_victim("{allowed: true, pdb: prefer, bare: requeue, restartCost: 2h}")
            .online("waitPrice: 1000")
            .build(),
    )
    .node(node("n1", 1000, 8))
    .node(node("n2", 1000, 8))
    .pods([copy, pod("steady", "batch", Some("n2"), 1000).bare().started(1800).grace(5)]);
    s.requeue = true;
    let out = s.preempt(online(1000), &["n1", "n2"]);
    assert_eq!(chosen(&out), "n2", "{}", out.explain());
}

#[test]
fn the_wait_never_outranks_a_pdb_violation() {
    // n1's victim stops at once but its PDB allows no disruption; n2's takes 10 minutes.
    let s = Scenario::new(policy("prefer", ""))
        .node(node("n1", 2000, 8))
        .node(node("n2", 2000, 8))
        .pods([pod("guarded", "batch", Some("n1"), 2000).grace(1), pod("slow", "batch", Some("n2"), 2000).grace(600)])
        .pdb(pdb("guard", "guarded", 0));
    let out = s.preempt(online(2000), &["n1", "n2"]);
    assert_eq!(chosen(&out), "n2", "{}", out.explain());
    assert_eq!(out.violations("n2"), 0);
}

#[test]
fn the_wait_never_outranks_a_loss() {
    // n1's victim stops at once but is a bare pod nothing brings back (requeue is off: a
    // victim of last resort); n2's is recreated by its controller and takes 10 minutes.
    let mut s = Scenario::new(policy("prefer", "").with_bare("batch", BareVictims::Requeue))
        .node(node("n1", 2000, 8))
        .node(node("n2", 2000, 8))
        .pods([
            pod("bare", "batch", Some("n1"), 2000).bare().grace(1),
            pod("slow", "batch", Some("n2"), 2000).grace(600),
        ]);
    s.requeue = false;
    let out = s.preempt(online(2000), &["n1", "n2"]);
    assert_eq!(chosen(&out), "n2", "{}", out.explain());
}

#[test]
fn the_wait_never_outranks_the_victims_class() {
    // Evicting free before batch is the policy's order; the wait comes after it.
    let s = Scenario::new(policy("strict", "")).node(node("n1", 2000, 8)).node(node("n2", 2000, 8)).pods([
        pod("batch-fast", "batch", Some("n1"), 2000).grace(1),
        pod("free-slow", "free", Some("n2"), 2000).grace(600),
    ]);
    assert_eq!(chosen(&s.preempt(online(2000), &["n1", "n2"])), "n2");
}

#[test]
fn what_an_owners_pods_took_to_stop_overrides_their_declared_grace() {
    // n2's victim declares 30 s, but its Job's pods were seen stop in a second; n1's
    // declares 10 s and nothing was learned of it.
    let learned = pod("train-old", "batch", Some("n9"), 1000).owned_by("Job", "train");
    let s = Scenario::new(policy("strict", ""))
        .node(node("n1", 2000, 8))
        .node(node("n2", 2000, 8))
        .pods([
            pod("serve-1", "batch", Some("n1"), 2000).owned_by("ReplicaSet", "serve").grace(10),
            pod("train-1", "batch", Some("n2"), 2000).owned_by("Job", "train").grace(30),
        ])
        .stopped(learned, 1.0);
    let out = s.preempt(online(2000), &["n1", "n2"]);
    assert_eq!(chosen(&out), "n2", "{}", out.explain());
    assert!(out.explain().contains("learned from 1 stop(s) of its owner's pods"), "{}", out.explain());
}

#[test]
fn a_bare_pod_reads_what_its_class_took_with_its_grace() {
    // Bare pods have no owner: free pods declaring 120 s were seen stop in 2 s.
    let mut s = Scenario::new(policy("strict", "").with_bare("free", BareVictims::Requeue))
        .node(node("n1", 2000, 8))
        .node(node("n2", 2000, 8))
        .pods([
            pod("scratch", "free", Some("n1"), 2000).bare().grace(120),
            pod("sweep", "free", Some("n2"), 2000).grace(20),
        ])
        .stopped(pod("scratch-old", "free", Some("n9"), 500).bare().grace(120), 2.0);
    s.requeue = true;
    let out = s.preempt(online(2000), &["n1", "n2"]);
    assert_eq!(chosen(&out), "n1", "{}", out.explain());
}

#[test]
fn on_a_node_the_victims_are_those_that_stop_soonest() {
    // One of two must go. The younger is the cheaper to lose but checkpoints for 10
    // minutes; the older stops in 3 s.
    let s = Scenario::new(policy("strict", "")).node(node("n1", 2000, 8)).pods([
        pod("young-slow", "batch", Some("n1"), 1000).started(900).grace(600),
        pod("old-fast", "batch", Some("n1"), 1000).started(3600).grace(3),
    ]);
    let out = s.preempt(online(1000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["old-fast"]))]), "{}", out.explain());
}

#[test]
fn room_already_terminating_counts_by_when_it_will_be_free() {
    // 4 CPU, full: a pod deleted 25 s ago with 30 s of grace (5.5 s left), and three
    // batch pods that stop in 5 s. The preemptor needs 2 CPU: one victim and the room
    // on its way, or two victims. As soon either way: one victim.
    let s = Scenario::new(policy("strict", "").with_wait_price("online", 1000.0)).node(node("n1", 4000, 8)).pods([
        pod("leaving", "batch", Some("n1"), 1000).grace(30).deleted(25),
        pod("b-1", "batch", Some("n1"), 1000).grace(5),
        pod("b-2", "batch", Some("n1"), 1000).grace(5),
        pod("b-3", "batch", Some("n1"), 1000).grace(5),
    ]);
    let out = s.preempt(online(2000), &["n1"]);
    assert_eq!(out.victims()["n1"].len(), 1, "{}", out.explain());
    assert!(out.explain().contains("counting the room of 1 pod(s) already terminating"), "{}", out.explain());
}

#[test]
fn room_already_terminating_is_not_waited_for_when_evicting_is_much_sooner() {
    // The same, but the terminating pod checkpoints for 10 more minutes.
    let s = Scenario::new(policy("strict", "").with_wait_price("online", 1000.0)).node(node("n1", 4000, 8)).pods([
        pod("leaving", "batch", Some("n1"), 1000).grace(630).deleted(30),
        pod("b-1", "batch", Some("n1"), 1000).grace(5),
        pod("b-2", "batch", Some("n1"), 1000).grace(5),
        pod("b-3", "batch", Some("n1"), 1000).grace(5),
    ]);
    let out = s.preempt(online(2000), &["n1"]);
    assert_eq!(out.victims()["n1"].len(), 2, "{}", out.explain());
}

#[test]
fn room_on_its_way_is_waited_for_unless_elsewhere_is_much_sooner() {
    // The preemptor's earlier victim on n1 is still terminating: it fits there once it is
    // gone. A moment's wait is waited; ten minutes are not, where n2 frees room in 3 s.
    let nominated = |grace: i32| {
        let mut p = pod("gone-for", "batch", Some("n1"), 2000).grace(grace).deleted(1);
        p.preempted = true;
        Scenario::new(policy("strict", "").with_wait_price("online", 1000.0))
            .node(node("n1", 2000, 8))
            .node(node("n2", 2000, 8))
            .pods([p, pod("fast", "batch", Some("n2"), 2000).grace(3)])
    };
    let mut preemptor = online(2000);
    preemptor.nominated_node_name = Some("n1".into());
    let soon = nominated(5).preempt(preemptor.clone(), &["n2"]);
    assert!(soon.victims().is_empty() && soon.has("refused", "room_on_its_way"), "{}", soon.explain());
    assert!(soon.explain().contains(" s sooner for "), "the trade refused is said: {}", soon.explain());
    assert!(soon.explain().contains("not worth it at 1,000 CPU-s per second"), "{}", soon.explain());
    let late = nominated(600).preempt(preemptor, &["n2"]);
    assert_eq!(chosen(&late), "n2", "{}", late.explain());
    assert!(late.has("preemptor", "room_on_its_way"), "{}", late.explain());
}

#[test]
fn a_class_that_checkpoints_on_sigterm_throws_none_of_its_run_away() {
    // n1: one 2-CPU pod that ran 6 hours; n2: two 1-CPU pods that ran 15 minutes. Counting
    // run, n2 throws away less (2 × 900 s × 1 CPU against 21,600 s × 2 CPU, and a restart
    // each: 73,800 CPU-s against 86,400); a class that checkpoints loses no run: the same
    // restarts, fewer pods (43,200).
    let cluster = |p| {
        Scenario::new(p).node(node("n1", 2000, 8)).node(node("n2", 2000, 8)).pods([
            pod("long", "batch", Some("n1"), 2000).started(21_600),
            pod("short-1", "batch", Some("n2"), 1000).started(900),
            pod("short-2", "batch", Some("n2"), 1000).started(900),
        ])
    };
    let plain = cluster(policy("strict", "")).preempt(online(2000), &["n1", "n2"]);
    assert_eq!(chosen(&plain), "n2", "{}", plain.explain());
    let saved = cluster(policy("strict", "").with_checkpoints("batch")).preempt(online(2000), &["n1", "n2"]);
    assert_eq!(chosen(&saved), "n1", "{}", saved.explain());
    assert!(saved.explain().contains("0 run thrown away"), "{}", saved.explain());
}

#[test]
fn the_answer_says_how_soon_beside_kube_schedulers_own_choice() {
    use coloc_extender::pipeline::{replay, Verb};
    // kube-scheduler picks n1 (fewer victims by priority sum: one); the policy n2.
    let s = Scenario::new(policy("strict", ""))
        .node(node("n1", 2000, 8))
        .node(node("n2", 2000, 8))
        .pods([pod("slow", "batch", Some("n1"), 2000).grace(600), pod("fast", "batch", Some("n2"), 2000).grace(5)]);
    let body = serde_json::json!({
        "Pod": {"metadata": {"name": "preemptor", "namespace": "default", "uid": "uid-preemptor"},
                "spec": {"priorityClassName": "online", "priority": 10000,
                         "containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]}},
        "NodeNameToMetaVictims": {
            "n1": {"Pods": [{"UID": "uid-slow"}], "NumPDBViolations": 0},
            "n2": {"Pods": [{"UID": "uid-fast"}], "NumPDBViolations": 0}}
    });
    let view = s.view();
    let a = replay(Verb::Preempt, body.to_string().as_bytes(), &s.policy, Some(&view), NOW).unwrap();
    let line = a.explanations.iter().find(|e| e.code == "expected_wait").expect("an expected_wait line");
    assert_eq!(line.verdict, "waits");
    assert_eq!(
        line.detail,
        "room free on n2 in ~5.0 s (default/fast: its declared grace period); kube-scheduler's own choice: n1 in ~10 min 0 s (default/slow: its declared grace period)"
    );
    let expected = a.preempt.as_ref().and_then(|p| p.expected.as_ref()).expect("the sent answer's wait");
    assert_eq!((expected.node.as_str(), expected.wait.ms, &expected.victims[..]), ("n2", 5_000, &uids(&["fast"])[..]));
}

#[test]
fn the_expected_wait_is_checked_against_the_one_observed() {
    use coloc_extender::http::waits::{Seen, Waits, FOLLOWED_FOR};
    use coloc_extender::pipeline::{replay, Verb};
    use std::time::{Duration, Instant};
    let s =
        Scenario::new(policy("strict", ""))
            .node(node("n1", 2000, 8))
            .pods([pod("fast", "batch", Some("n1"), 2000).grace(5)]);
    let body = serde_json::json!({
        "Pod": {"metadata": {"name": "preemptor", "namespace": "default", "uid": "uid-preemptor"},
                "spec": {"priorityClassName": "online", "priority": 10000,
                         "containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]}},
        "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "uid-fast"}], "NumPDBViolations": 0}}
    });
    let view = s.view();
    let a = replay(Verb::Preempt, body.to_string().as_bytes(), &s.policy, Some(&view), NOW).unwrap();
    let waits = Waits::default();
    let t0 = Instant::now();
    waits.record(&a, t0);
    assert!(waits.check(&view, t0 + Duration::from_secs(1)).is_empty(), "its victim is still there");
    let mut gone = s.view();
    gone.remove_pod("default/fast", &s.policy);
    assert_eq!(
        waits.check(&gone, t0 + Duration::from_secs(9)),
        [Seen::Gone { expected: Duration::from_secs(5), observed: Duration::from_secs(9), basis: "declared" }]
    );
    assert!(waits.check(&gone, t0 + Duration::from_secs(10)).is_empty(), "said once");
    // An answer whose victims never go is given up, and said so.
    waits.record(&a, t0);
    assert!(waits.check(&view, t0 + FOLLOWED_FOR).is_empty());
    assert_eq!(waits.check(&view, t0 + FOLLOWED_FOR + Duration::from_secs(1)), [Seen::Unobserved]);
}
