//! Gangs as the cluster declares them: one smallest cluster per source, disruptionMode
//! All and Single, PodGroup priority, a missing PodGroup and conflicting declarations.

mod common;

use std::collections::BTreeMap;

use coloc_extender::model::{DisruptionMode, GangSource, Pod};
use common::*;

fn online(cpu: i64) -> Pod {
    pod("preemptor", "online", None, cpu)
}

fn batch(name: &str, node: &str) -> Pod {
    pod(name, "batch", Some(node), 1000)
}

const COSCHEDULING: &str = "scheduling.x-k8s.io/pod-group";
const VOLCANO: &str = "scheduling.k8s.io/group-name";
const KUEUE: &str = "kueue.x-k8s.io/pod-group-name";
const KUEUE_TOTAL: &str = "kueue.x-k8s.io/pod-group-total-count";

/// n1 holds one member of a 4-member gang (the other three on n3), n2 a plain batch pod
/// that costs more than the member alone (it ran longer) and less than the gang whole
/// (the survivors' run and restarts are charged too). Whether n1 is chosen depends only
/// on the gang's minimum.
fn one_member_on_n1(members: [Pod; 4], extra: impl FnOnce(Scenario) -> Scenario) -> Outcome {
    one_member_on_n1_under("", members, extra)
}

/// The same, with `gangs` policy settings.
fn one_member_on_n1_under(gangs: &str, members: [Pod; 4], extra: impl FnOnce(Scenario) -> Scenario) -> Outcome {
    let s = Scenario::new(policy("strict", gangs))
        .node(node("n1", 1000, 8))
        .node(node("n2", 1000, 8))
        .node(node("n3", 3000, 8))
        .pods(members)
        .pods([batch("plain", "n2").started(9_000)]);
    extra(s).preempt(online(1000), &["n1", "n2"])
}

fn four(declare: impl Fn(Pod) -> Pod) -> [Pod; 4] {
    [
        declare(batch("m-1", "n1").started(700)),
        declare(batch("m-2", "n3")),
        declare(batch("m-3", "n3")),
        declare(batch("m-4", "n3")),
    ]
}

fn detail<'a>(out: &'a Outcome, code: &str) -> &'a str {
    out.explanations
        .iter()
        .find(|e| e.code == code)
        .map(|e| e.detail.as_str())
        .unwrap_or_else(|| panic!("no {code}:\n{}", out.explain()))
}

/// The source a gang decision carries (the `source` label of `coloc_gang_decisions_total`).
fn gang_source(out: &Outcome, code: &str) -> Option<&'static str> {
    out.explanations.iter().find(|e| e.code == code).and_then(|e| e.gang_source)
}

#[test]
fn native_podgroup_below_min_count_is_not_broken_when_another_node_avoids_it() {
    let out = one_member_on_n1(four(|p| p.in_pod_group("train-7")), |s| {
        s.pod_group(pod_group(GangSource::Native, "train-7", 4))
    });
    assert_eq!(out.victims(), BTreeMap::from([("n2".into(), uids(&["plain"]))]), "{}", out.explain());
    assert!(
        detail(&out, "gang_broken").contains("breaks PodGroup default/train-7 (native, minCount 4, 3 would remain)"),
        "{}",
        out.explain()
    );
    assert_eq!(gang_source(&out, "gang_broken"), Some("native"));
}

#[test]
fn native_podgroup_members_above_min_count_are_cheap() {
    let out = one_member_on_n1(four(|p| p.in_pod_group("train-7")), |s| {
        s.pod_group(pod_group(GangSource::Native, "train-7", 3))
    });
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["m-1"]))]), "{}", out.explain());
    assert!(detail(&out, "gang_surplus").contains("PodGroup default/train-7 (native, minCount 3, 3 would remain)"));
}

#[rstest::rstest]
#[case::coscheduling(GangSource::Coscheduling, |p: Pod| p.label(COSCHEDULING, "pg"), "PodGroup default/pg (coscheduling, minMember 3")]
#[case::volcano(GangSource::Volcano, |p: Pod| p.annotate(VOLCANO, "pg"), "PodGroup default/pg (volcano, minMember 3")]
fn a_crd_podgroup_min_member_decides(
    #[case] source: GangSource,
    #[case] declare: fn(Pod) -> Pod,
    #[case] surplus: &str,
) {
    let out = one_member_on_n1(four(declare), |s| s.pod_group(pod_group(source, "pg", 3)));
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["m-1"]))]), "{}", out.explain());
    assert!(detail(&out, "gang_surplus").contains(surplus), "{}", out.explain());
    assert_eq!(gang_source(&out, "gang_surplus"), Some(source.name()), "the metrics label names the source");
    let out = one_member_on_n1(four(declare), |s| s.pod_group(pod_group(source, "pg", 4)));
    assert_eq!(out.victims(), BTreeMap::from([("n2".into(), uids(&["plain"]))]), "{}", out.explain());
}

#[test]
fn kueue_pod_group_needs_its_total_count() {
    let out = one_member_on_n1(four(|p| p.label(KUEUE, "kq").annotate(KUEUE_TOTAL, "4")), |s| s);
    assert_eq!(out.victims(), BTreeMap::from([("n2".into(), uids(&["plain"]))]), "{}", out.explain());
    assert!(
        detail(&out, "gang_broken").contains("gang default/kq (kueue, pod-group-total-count 4, 3 would remain)"),
        "{}",
        out.explain()
    );
    // A total count below the members running leaves room for surplus.
    let out = one_member_on_n1(four(|p| p.label(KUEUE, "kq").annotate(KUEUE_TOTAL, "3")), |s| s);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["m-1"]))]), "{}", out.explain());
}

#[test]
fn a_member_whose_podgroup_does_not_exist_yet_counts_its_gang_as_needing_every_member() {
    // No PodGroup object: nothing says a member may go, so each one is needed.
    let out = one_member_on_n1(four(|p| p.in_pod_group("later")), |s| s);
    assert_eq!(out.victims(), BTreeMap::from([("n2".into(), uids(&["plain"]))]), "{}", out.explain());
    let d = detail(&out, "gang_broken");
    assert!(d.contains("all 4 members") && d.contains("PodGroup not in the view"), "{d}");
    // ... unless the members declare a minimum themselves.
    let out = one_member_on_n1(
        four(|p| p.in_pod_group("later").annotate("pod-group.scheduling.sigs.k8s.io/min-available", "3")),
        |s| s,
    );
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["m-1"]))]), "{}", out.explain());
}

#[test]
fn a_native_reference_wins_over_a_coscheduling_label() {
    // Each member is labelled for a coscheduling group "loose" (minMember 1) and refers to
    // native PodGroup "tight" (minCount 4): native wins, so evicting one breaks "tight".
    let out = one_member_on_n1(four(|p| p.in_pod_group("tight").label(COSCHEDULING, "loose")), |s| {
        s.pod_group(pod_group(GangSource::Native, "tight", 4)).pod_group(pod_group(
            GangSource::Coscheduling,
            "loose",
            1,
        ))
    });
    assert_eq!(out.victims(), BTreeMap::from([("n2".into(), uids(&["plain"]))]), "{}", out.explain());
    assert!(detail(&out, "gang_broken").contains("PodGroup default/tight (native"));
    // With the native source off, the label is what is left.
    let out = one_member_on_n1_under(
        "gangs: {sources: {native: false}}",
        four(|p| p.in_pod_group("tight").label(COSCHEDULING, "loose")),
        |s| {
            s.pod_group(pod_group(GangSource::Native, "tight", 4)).pod_group(pod_group(
                GangSource::Coscheduling,
                "loose",
                1,
            ))
        },
    );
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["m-1"]))]), "{}", out.explain());
    assert!(detail(&out, "gang_surplus").contains("PodGroup default/loose (coscheduling"));
}

#[test]
fn a_disabled_source_makes_no_gang() {
    let out = one_member_on_n1_under("gangs: {sources: {volcano: false}}", four(|p| p.annotate(VOLCANO, "vj")), |s| {
        s.pod_group(pod_group(GangSource::Volcano, "vj", 4))
    });
    // No gang: m-1 ran for less time than "plain", so it is the cheaper victim.
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["m-1"]))]), "{}", out.explain());
    assert!(!out.has("charged", "gang_broken") && !out.has("charged", "gang_surplus"));
}

fn all_mode(name: &str, min: usize) -> coloc_extender::model::PodGroup {
    let mut g = pod_group(GangSource::Native, name, min);
    g.disruption = DisruptionMode::All;
    g
}

#[test]
fn a_disruption_mode_all_group_split_across_nodes_is_protected() {
    // minCount 1 would make one member surplus, but the group may only go whole: with a
    // member on n1 and one on n3, n1 cannot place the pod and n2's plain pod goes.
    let s = Scenario::new(policy("strict", ""))
        .node(node("n1", 1000, 8))
        .node(node("n2", 1000, 8))
        .node(node("n3", 1000, 8))
        .pods([batch("a-1", "n1"), batch("a-2", "n3"), batch("plain", "n2").started(99_999)].map(|p| {
            if p.name == "plain" {
                p
            } else {
                p.in_pod_group("all")
            }
        }))
        .pod_group(all_mode("all", 1));
    let out = s.preempt(online(1000), &["n1", "n2"]);
    assert_eq!(out.victims(), BTreeMap::from([("n2".into(), uids(&["plain"]))]), "{}", out.explain());
    let d = detail(&out, "gang_all_split");
    assert!(d.contains("PodGroup default/all (native, disruptionMode All): only 1 of its 2 members"), "{d}");
    // Only n1 offered: nothing else places the pod, and still the group is not split.
    let out = s.preempt(online(1000), &["n1"]);
    assert!(out.victims().is_empty(), "{}", out.explain());
    assert!(out.has("dropped", "does_not_fit"));
}

#[test]
fn a_disruption_mode_all_group_whose_other_member_is_being_deleted_goes_from_the_node_of_the_rest() {
    // As above, but a-2 on n3 is being deleted: it goes by itself, so a-1 is all of the
    // group there is to evict, and n1 places the pod before n2's plain pod is touched.
    let s = Scenario::new(policy("strict", ""))
        .node(node("n1", 1000, 8))
        .node(node("n2", 1000, 8))
        .node(node("n3", 1000, 8))
        .pods([
            batch("a-1", "n1").in_pod_group("all"),
            batch("a-2", "n3").in_pod_group("all").deleted(5),
            batch("plain", "n2").started(99_999),
        ])
        .pod_group(all_mode("all", 1));
    let out = s.preempt(online(1000), &["n1", "n2"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["a-1"]))]), "{}", out.explain());
    assert!(!out.has("spared", "gang_all_split"), "{}", out.explain());
}

#[test]
fn a_disruption_mode_all_group_on_one_node_goes_whole() {
    // Both members on n1; the preemptor needs one member's room. Single mode evicts one
    // (a surplus member); All mode evicts both together.
    let members = || [batch("a-1", "n1").in_pod_group("g"), batch("a-2", "n1").in_pod_group("g")];
    let cluster = |g| Scenario::new(policy("strict", "")).node(node("n1", 2000, 8)).pods(members()).pod_group(g);
    let single = cluster(pod_group(GangSource::Native, "g", 1)).preempt(online(1000), &["n1"]);
    assert_eq!(single.victims()["n1"].len(), 1, "{}", single.explain());
    assert!(single.has("charged", "gang_surplus"));
    let all = cluster(all_mode("g", 1)).preempt(online(1000), &["n1"]);
    let mut victims = all.victims()["n1"].clone();
    victims.sort();
    assert_eq!(victims, uids(&["a-1", "a-2"]), "{}", all.explain());
    assert!(detail(&all, "gang_broken").contains("whole (disruptionMode All)"));
}

#[test]
fn a_podgroup_priority_ranks_its_members() {
    // Two equal batch pods on n1, members of two groups, one pod needed. By name "a-1" is
    // kept and "z-1" goes; z's PodGroup priority 200 (above the pods' 100) keeps z-1 instead.
    let cluster = |priority| {
        let mut z = pod_group(GangSource::Native, "z", 0);
        z.priority = priority;
        Scenario::new(policy("strict", ""))
            .node(node("n1", 2000, 8))
            .pods([batch("a-1", "n1").in_pod_group("a"), batch("z-1", "n1").in_pod_group("z")])
            .pod_group(pod_group(GangSource::Native, "a", 0))
            .pod_group(z)
            .preempt(online(1000), &["n1"])
    };
    assert_eq!(cluster(None).victims()["n1"], uids(&["z-1"]));
    let out = cluster(Some(200));
    assert_eq!(out.victims()["n1"], uids(&["a-1"]), "{}", out.explain());
    // A group at least as important as the preemptor is not its victim.
    let out = cluster(Some(20_000));
    assert!(
        out.explanations.iter().any(|e| e.code == "gang_priority" && e.detail.contains("priority 20000")),
        "{}",
        out.explain()
    );
    assert_eq!(out.victims()["n1"], uids(&["a-1"]));
}

#[test]
fn a_podgroup_deleted_while_its_pods_run_leaves_a_gang_needing_every_member() {
    let s = Scenario::new(policy("strict", ""))
        .node(node("n1", 1000, 8))
        .pods(four(|p| p.in_pod_group("g")))
        .pod_group(all_mode("g", 1));
    let mut view = s.view();
    let m1 = view.pod("default/m-1").unwrap().clone();
    let gang = view.gang_of(&m1).unwrap();
    assert_eq!((view.gang(&gang, &m1).min, view.gang(&gang, &m1).disruption), (1, DisruptionMode::All));
    assert!(view.remove_pod_group(GangSource::Native, "default", "g"));
    let info = view.gang(&gang, &m1);
    assert_eq!((info.size, info.min, info.disruption, info.priority), (4, 4, DisruptionMode::Single, None));
    assert!(info.min_from.contains("PodGroup not in the view"), "{}", info.min_from);
}

// ---- snapshots -----------------------------------------------------------------------

fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gangs").join(name)
}

#[test]
fn a_snapshot_carries_the_podgroups_of_every_source_and_skips_unknown_ones() {
    use coloc_extender::cluster::snapshot;
    let objects = snapshot::load(&fixture("snapshot.json")).unwrap();
    let mut groups: Vec<(GangSource, String, Option<usize>, DisruptionMode)> =
        objects.pod_groups.iter().map(|g| (g.source, g.name.clone(), g.min_count, g.disruption)).collect();
    groups.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    assert_eq!(
        groups,
        vec![
            (GangSource::Native, "train-7".into(), Some(1), DisruptionMode::All),
            (GangSource::Coscheduling, "cos".into(), Some(1), DisruptionMode::Single),
            (GangSource::Volcano, "vc".into(), Some(0), DisruptionMode::Single),
        ]
    );
    // The same objects, listed again as the API server would (one List per kind, in any
    // order), build the same gangs: what a snapshot holds is what the view reads.
    let text: serde_json::Value = serde_json::from_slice(&std::fs::read(fixture("snapshot.json")).unwrap()).unwrap();
    let mut items = text["items"].as_array().unwrap().clone();
    items.reverse();
    let again = snapshot::parse(serde_json::json!({"kind": "List", "items": items}).to_string().as_bytes()).unwrap();
    let policy = policy("strict", "");
    let (a, b) =
        (coloc_extender::cluster::View::build(objects, &policy), coloc_extender::cluster::View::build(again, &policy));
    for name in ["ml/train-1", "ml/train-2", "ml/cos-1", "ml/vc-1"] {
        let (pa, pb) = (a.pod(name).unwrap().clone(), b.pod(name).unwrap().clone());
        assert_eq!(a.gang(&a.gang_of(&pa).unwrap(), &pa), b.gang(&b.gang_of(&pb).unwrap(), &pb), "{name}");
    }
}

#[test]
fn a_podgroup_with_an_unknown_disruption_mode_is_a_snapshot_error_naming_it() {
    let bad = serde_json::json!({"kind": "List", "items": [
        {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": {"name": "g", "namespace": "ml"},
         "spec": {"disruptionMode": "Sometimes"}}
    ]});
    let err = coloc_extender::cluster::snapshot::parse(bad.to_string().as_bytes()).unwrap_err().to_string();
    assert!(err.contains("PodGroup ml/g") && err.contains("spec.disruptionMode") && err.contains("Sometimes"), "{err}");
}
