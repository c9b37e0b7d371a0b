//! Properties of every preempt answer, over generated clusters.

mod common;

use std::collections::HashMap;

use coloc_extender::decide::fit::{fits, NodeUsage};
use coloc_extender::model::Pod;
use common::*;
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct GenPod {
    class: &'static str,
    cpu: i64,
    bare: bool,
    age: i64,
    port: bool,
    app: u8,
    /// terminationGracePeriodSeconds: exits at once, the default, checkpointing.
    grace: i32,
}

fn gen_pod() -> impl Strategy<Value = GenPod> {
    (
        prop_oneof![Just("batch"), Just("free"), Just("online")],
        1i64..=30,
        prop::bool::weighted(0.2),
        prop_oneof![Just(60i64), Just(7200i64)],
        prop::bool::weighted(0.1),
        0u8..3,
        prop_oneof![Just(1i32), Just(30i32), Just(600i32)],
    )
        .prop_map(|(class, cpu, bare, age, port, app, grace)| GenPod {
            class,
            cpu: cpu * 100,
            bare,
            age,
            port,
            app,
            grace,
        })
}

fn gen_cluster() -> impl Strategy<Value = (Cluster, Vec<i32>, i64, bool, &'static str)> {
    (
        prop::collection::vec((10i64..=80, prop::collection::vec(gen_pod(), 0..10)), 1..5),
        prop::collection::vec(0i32..3, 3),
        1i64..=40,
        prop::bool::weighted(0.2),
        prop_oneof![Just("strict"), Just("prefer")],
    )
}

type Cluster = Vec<(i64, Vec<GenPod>)>;

/// Adds the generated nodes to `s`, and the pods that fit on them (kube-scheduler never
/// overcommits a node), each finished by `finish`. Returns the node names.
fn lay_out(
    mut s: Scenario,
    nodes: &Cluster,
    mut finish: impl FnMut(&mut Scenario, Pod, &GenPod) -> Pod,
) -> (Scenario, Vec<String>) {
    let mut names = Vec::new();
    for (i, (cpu, pods)) in nodes.iter().enumerate() {
        let name = format!("n{i}");
        s = s.node(node(&name, cpu * 100, 64));
        let mut used = 0;
        for (j, g) in pods.iter().enumerate() {
            if used + g.cpu > cpu * 100 {
                continue;
            }
            used += g.cpu;
            let mut p = pod(&format!("p{i}x{j}"), g.class, Some(&name), g.cpu).started(g.age).grace(g.grace);
            if g.bare {
                p = p.bare();
            }
            let p = finish(&mut s, p, g);
            s = s.pods([p]);
        }
        names.push(name);
    }
    (s, names)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn every_answer_is_sound_and_minimal((nodes, budgets, want, want_port, pdb_mode) in gen_cluster()) {
        let (mut s, names) = lay_out(Scenario::new(policy(pdb_mode, "maxCandidates: 100")), &nodes, |_, p, g| {
            let p = p.label("app", &format!("app{}", g.app));
            if g.port { p.host_port(9100) } else { p }
        });
        for (app, allowed) in budgets.iter().enumerate() {
            s = s.pdb(pdb(&format!("pdb{app}"), &format!("app{app}"), *allowed));
        }
        let mut preemptor = pod("preemptor", "online", None, want * 100);
        if want_port {
            preemptor = preemptor.host_port(9100);
        }
        // kube-scheduler proposes only nodes with lower-priority pods (an empty victim list
        // is a placeholder returned as is, tested elsewhere).
        let node_refs: Vec<&str> = names
            .iter()
            .map(String::as_str)
            .filter(|n| s.objects.pods.iter().any(|p| p.node_name.as_deref() == Some(*n) && p.priority_class_name.as_deref() != Some("online")))
            .collect();
        prop_assume!(!node_refs.is_empty());
        let out = s.preempt(preemptor.clone(), &node_refs);

        let by_uid: HashMap<&str, &Pod> = s.objects.pods.iter().map(|p| (p.uid.as_str(), p)).collect();
        for (node_name, victims) in out.victims() {
            let node = s.objects.nodes.iter().find(|n| n.name == node_name).unwrap();
            let on_node: Vec<&Pod> = s.objects.pods.iter().filter(|p| p.node_name.as_deref() == Some(&node_name)).collect();
            let victims: Vec<&Pod> = victims.iter().map(|u| by_uid[u.as_str()]).collect();
            for v in &victims {
                // Only pods on that node, never protected ones.
                prop_assert_eq!(v.node_name.as_deref(), Some(node_name.as_str()));
                prop_assert!(v.class_name() != "online", "online pod {} returned", v.name);
                prop_assert!(v.controller.is_some(), "bare pod {} returned", v.name);
                prop_assert!(!(v.class_name() == "batch" && v.start_time == Some(NOW - 60)), "fresh batch pod {} returned", v.name);
            }
            // The preemptor fits once they are gone...
            let remaining = on_node.iter().copied().filter(|p| !victims.iter().any(|v| v.uid == p.uid));
            let usage = NodeUsage::of(remaining);
            prop_assert!(fits(&preemptor, node, &usage).is_ok(), "does not fit on {} after evicting {:?}", node_name, victims.iter().map(|v| &v.name).collect::<Vec<_>>());
            // ...and no single victim could have been spared.
            for v in &victims {
                let mut with_v = usage.clone();
                with_v.add(v);
                prop_assert!(fits(&preemptor, node, &with_v).is_err(), "{} could be spared on {}", v.name, node_name);
            }
            // Highest priority first.
            let prios: Vec<i32> = victims.iter().map(|v| v.priority.unwrap()).collect();
            prop_assert!(prios.windows(2).all(|w| w[0] >= w[1]), "order {:?}", prios);
            // NumPDBViolations is exact; strict classes never violate.
            let mut counted: HashMap<String, i32> = HashMap::new();
            let mut violations = 0;
            for v in &victims {
                let mut violated = false;
                for p in s.objects.pdbs.iter().filter(|p| p.covers(v)) {
                    let left = counted.entry(p.name.clone()).or_insert(p.disruptions_allowed);
                    *left -= 1;
                    violated |= *left < 0;
                }
                if violated {
                    violations += 1;
                }
            }
            prop_assert_eq!(out.violations(&node_name), violations as i64);
            if pdb_mode == "strict" {
                // A budget that only strict (batch) victims draw on is never exceeded.
                for p in &s.objects.pdbs {
                    let covered: Vec<&&Pod> = victims.iter().filter(|v| p.covers(v)).collect();
                    if covered.iter().all(|v| v.class_name() == "batch") {
                        prop_assert!(covered.len() as i32 <= p.disruptions_allowed.max(0),
                            "strict batch pods pushed past {} on {}", p.name, node_name);
                    }
                }
            }
        }
    }
}

/// online preempts batch and free; bare victims of both are handled as `bare` says.
fn requeue_policy(bare: &str) -> coloc_extender::policy::Policy {
    classes()
        .max_candidates(Some(100))
        .batch_preempts(None)
        .victims(&format!("{{allowed: true, pdb: prefer, bare: {bare}}}"))
        .build()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Nothing lost silently: a bare victim is answered with its requeue intent where
    /// requeue is on; where it is off, as a victim of last resort, and only where no
    /// answer without one exists (the same cluster with bare pods protected has none).
    #[test]
    fn a_bare_victim_is_requeued_or_a_last_resort_taken_only_where_nothing_else_places_the_pod(
        (nodes, _, want, _, _) in gen_cluster(),
        enabled in any::<bool>(),
    ) {
        let (mut s, names) = lay_out(Scenario::new(requeue_policy("requeue")), &nodes, |_, p, _| p);
        s.requeue = enabled;
        let node_refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let preemptor = pod("preemptor", "online", None, want * 100);
        let out = s.preempt(preemptor.clone(), &node_refs);
        let by_uid: HashMap<&str, &Pod> = s.objects.pods.iter().map(|p| (p.uid.as_str(), p)).collect();
        let mut answered = 0;
        let mut last_resort = 0;
        for (node_name, victims) in out.victims() {
            for uid in &victims {
                let v = by_uid[uid.as_str()];
                if v.controller.is_some() {
                    continue;
                }
                let intents: Vec<_> = out.requeues.iter().filter(|r| &r.uid == uid).collect();
                let lost = out.explanations.iter().any(|e| e.code == "last_resort" && e.pod.as_deref() == Some(v.key().as_str()));
                if enabled {
                    prop_assert_eq!(intents.len(), 1, "bare {} answered without exactly one requeue", &v.name);
                    prop_assert_eq!(&intents[0].node, &node_name);
                    answered += 1;
                } else {
                    prop_assert!(intents.is_empty() && lost, "bare {} answered with requeue off, not as a last resort", &v.name);
                    last_resort += 1;
                }
            }
        }
        prop_assert_eq!(answered, out.requeues.len(), "every requeue is for a bare victim in the answer");
        if !enabled {
            let mut protecting = Scenario::new(requeue_policy("protect"));
            protecting.objects = s.objects.clone();
            let without = protecting.preempt(preemptor, &node_refs);
            if !without.victims().is_empty() {
                prop_assert_eq!(last_resort, 0, "a last resort taken where another answer exists:\n{}", out.explain());
                prop_assert!(!out.victims().is_empty());
            }
        }
    }
}

trait ClassName {
    fn class_name(&self) -> &str;
}

impl ClassName for Pod {
    fn class_name(&self) -> &str {
        self.priority_class_name.as_deref().unwrap_or("")
    }
}

/// online preempts batch and free, best-effort PDBs; bare pods of both are requeued
/// (victims of last resort while requeue is off); a second of the wait worth `price`.
fn wait_policy(price: f64) -> coloc_extender::policy::Policy {
    classes().max_candidates(None).batch_preempts(None).online(&format!("waitPrice: {price}")).build()
}

/// The victims' least valuable class taken: the answer's victims' classes, most valuable.
fn top_class(out: &Outcome, s: &Scenario) -> Option<usize> {
    let order = ["online", "batch", "free"];
    let uids: Vec<String> = out.victims().into_values().flatten().collect();
    s.objects
        .pods
        .iter()
        .filter(|p| uids.contains(&p.uid))
        .filter_map(|p| order.iter().position(|c| Some(*c) == p.priority_class_name.as_deref()))
        .min()
}

/// What the returned node's victims lose or violate: victims of last resort, PDB
/// violations.
fn losses(out: &Outcome) -> (usize, i64) {
    let Some(node) = out.victims().into_keys().next() else { return (0, 0) };
    let last_resort =
        out.explanations.iter().filter(|e| e.code == "last_resort" && e.node.as_deref() == Some(node.as_str())).count();
    (last_resort, out.violations(&node))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// However long victims take to stop, and whatever a second costs, the answer loses,
    /// violates and takes from the classes no more than the one that only breaks ties with
    /// the wait: the price ranks after losses, PDBs and the victims' class.
    #[test]
    fn the_price_never_outranks_a_loss_a_pdb_violation_or_the_victims_class(
        (nodes, budgets, want, _, _) in gen_cluster(),
        price in prop_oneof![Just(1.0), Just(1000.0), Just(1e9)],
    ) {
        let build = |price| {
            let (mut s, names) = lay_out(Scenario::new(wait_policy(price)), &nodes, |_, p, g| {
                p.label("app", &format!("app{}", g.app))
            });
            for (app, allowed) in budgets.iter().enumerate() {
                s = s.pdb(pdb(&format!("pdb{app}"), &format!("app{app}"), *allowed));
            }
            s.requeue = false;
            (s, names)
        };
        let (weighed, names) = build(price);
        let (tie_only, _) = build(0.0);
        let node_refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let preemptor = pod("preemptor", "online", None, want * 100);
        let out = weighed.preempt(preemptor.clone(), &node_refs);
        let base = tie_only.preempt(preemptor, &node_refs);
        prop_assert_eq!(out.victims().is_empty(), base.victims().is_empty());
        prop_assert_eq!(losses(&out), losses(&base), "weighing the wait lost or violated more:\n{}", out.explain());
        prop_assert_eq!(top_class(&out, &weighed), top_class(&base, &tie_only), "weighing the wait took from a more valuable class:\n{}", out.explain());
    }

    /// The dearer a second, the sooner the room: raising the price never chooses a plan
    /// whose room is free later.
    #[test]
    fn the_choice_is_monotone_in_the_price(
        (nodes, budgets, want, _, _) in gen_cluster(),
        cheap in 0u32..=50,
        more in 1u32..=100_000,
    ) {
        let answer = |price: f64| {
            let (mut s, names) = lay_out(Scenario::new(wait_policy(price)), &nodes, |_, p, g| {
                p.label("app", &format!("app{}", g.app))
            });
            for (app, allowed) in budgets.iter().enumerate() {
                s = s.pdb(pdb(&format!("pdb{app}"), &format!("app{app}"), *allowed));
            }
            s.requeue = false;
            let node_refs: Vec<&str> = names.iter().map(String::as_str).collect();
            s.preempt(pod("preemptor", "online", None, want * 100), &node_refs)
        };
        let low = answer(f64::from(cheap));
        let high = answer(f64::from(cheap) + f64::from(more));
        let wait = |o: &Outcome| o.waits.values().next().copied();
        match (wait(&low), wait(&high)) {
            (Some(l), Some(h)) => prop_assert!(h <= l, "at {} the room is free in {} ms, at {} in {} ms:\n{}", cheap, l, cheap + more, h, high.explain()),
            (l, h) => prop_assert_eq!(l.is_some(), h.is_some()),
        }
    }

    /// Two nodes alike but for how long their pods take to stop: the answer is the node
    /// whose victims stop sooner, though it comes second by name.
    #[test]
    fn where_all_else_is_equal_the_victims_that_stop_sooner_win(
        (nodes, _, want, _, _) in gen_cluster(),
        fast in 1i32..=20,
    ) {
        let (cpu, pods) = &nodes[0];
        let mut s = Scenario::new(policy("prefer", ""));
        for (name, grace) in [("a-slow", fast * 4 + 10), ("b-fast", fast)] {
            s = s.node(node(name, cpu * 100, 64));
            let mut used = 0;
            for (j, g) in pods.iter().enumerate() {
                if used + g.cpu > cpu * 100 {
                    continue;
                }
                used += g.cpu;
                let mut p = pod(&format!("{name}-{j}"), g.class, Some(name), g.cpu).started(g.age).grace(grace);
                if g.bare {
                    p = p.bare();
                }
                s = s.pods([p.label("app", "same")]);
            }
        }
        // kube-scheduler proposes nodes with lower-priority pods (an empty victim list is a
        // placeholder returned as is, tested elsewhere).
        prop_assume!(s.objects.pods.iter().any(|p| p.priority_class_name.as_deref() != Some("online")));
        let out = s.preempt(pod("preemptor", "online", None, want * 100), &["a-slow", "b-fast"]);
        let chosen: Vec<String> = out.victims().into_keys().collect();
        prop_assert!(chosen.is_empty() || chosen == ["b-fast"], "{:?}:\n{}", chosen, out.explain());
    }
}
