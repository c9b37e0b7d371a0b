//! The generated scenarios `coloc-demo --generate` compares stock and the extender on.

use coloc_testbed::scenario::Scenario;

#[test]
fn a_generated_cluster_is_the_same_for_the_same_seed_and_differs_across_seeds() {
    let (a, b, c) = (Scenario::generate(30, 1), Scenario::generate(30, 1), Scenario::generate(30, 2));
    assert_eq!(format!("{:?}{:?}{:?}", a.nodes, a.bare, a.online), format!("{:?}{:?}{:?}", b.nodes, b.bare, b.online));
    assert_ne!(format!("{:?}", a.bare), format!("{:?}", c.bare));
    assert_eq!(a.nodes.len(), 30);
}

#[test]
fn controllers_pods_are_not_pinned_and_fill_exactly_the_room_bare_pods_leave() {
    for seed in 1..=5 {
        let s = Scenario::generate(40, seed);
        assert!(s.replica_sets.iter().all(|r| r.node.is_none()) && s.jobs.iter().all(|j| j.node.is_none()));
        assert!(s.replica_sets.iter().all(|r| r.cpu_m == 1000) && s.jobs.iter().all(|j| j.cpu_m == 1000));
        let mut room: std::collections::BTreeMap<&str, i64> =
            s.nodes.iter().map(|n| (n.name.as_str(), n.cpu_m)).collect();
        for b in &s.bare {
            *room.get_mut(b.node.as_deref().unwrap()).unwrap() -= b.cpu_m;
        }
        // Whole CPUs for controllers' pods, at most half a CPU more left free.
        assert!(room.values().all(|r| *r >= 1000 && r % 1000 <= 500), "{room:?}");
        let slots: i64 = room.values().map(|r| r / 1000).sum();
        let pods: i64 = s.replica_sets.iter().map(|r| r.replicas as i64).sum::<i64>()
            + s.jobs.iter().map(|j| j.pods as i64).sum::<i64>();
        assert_eq!(slots, pods, "seed {seed}: every controller pod finds a CPU, wherever it goes");
    }
}

#[test]
fn a_generated_cluster_has_what_real_ones_have() {
    let s = Scenario::generate(40, 1);
    let classes: std::collections::BTreeSet<&str> = s
        .bare
        .iter()
        .map(|b| b.class.as_str())
        .chain(s.replica_sets.iter().map(|r| r.class.as_str()))
        .chain(s.jobs.iter().map(|j| j.class.as_str()))
        .collect();
    assert!(classes.len() >= 4, "several offline priorities: {classes:?}");
    assert!(
        s.replica_sets.iter().any(|r| r.pdb_max_unavailable.is_some())
            && s.replica_sets.iter().any(|r| r.pdb_max_unavailable.is_none())
    );
    let policies: std::collections::BTreeSet<Option<&str>> =
        s.jobs.iter().map(|j| j.on_disruption.as_deref()).collect();
    assert_eq!(policies.len(), 3, "Jobs of every failure policy: {policies:?}");
    for (gang, members) in s.gangs() {
        let min = s.bare.iter().find(|b| b.gang.as_deref() == Some(gang)).and_then(|b| b.gang_min);
        assert_eq!(min, Some(members.len() as u32), "{gang}");
    }
    assert_eq!(s.online.len(), 44);
    let waves = s.waves();
    assert!(
        waves.len() > 10 && waves.iter().all(|w| (1..=3).contains(&w.len())),
        "online pods arrive in waves of one to three"
    );
}

#[test]
fn offline_pods_have_run_between_five_minutes_and_three_hours() {
    let s = Scenario::generate(12, 1);
    let ages: Vec<i64> = s.bare.iter().map(|p| Scenario::age_seconds(&p.name)).collect();
    assert!(ages.iter().all(|a| (300..3 * 3600).contains(a)), "{ages:?}");
    assert!(ages.windows(2).any(|w| w[0] != w[1]), "ages differ: {ages:?}");
}
