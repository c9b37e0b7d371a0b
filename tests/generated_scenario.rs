//! The generated scenarios `coloc-demo --generate` compares stock and the extender on.

use coloc_testbed::scenario::Scenario;

#[test]
fn a_generated_scenario_is_the_same_every_time_and_fills_every_node() {
    let (a, b) = (Scenario::generate(30), Scenario::generate(30));
    assert_eq!(format!("{:?}", a.nodes), format!("{:?}", b.nodes));
    assert_eq!(a.nodes.len(), 30);
    assert_eq!(a.online.len(), 20, "online pods for two thirds of the nodes");
    // Every node holds 3.8 CPU of its 4: two pods of 1.9.
    let mut held = std::collections::BTreeMap::<&str, i64>::new();
    for p in &a.bare {
        *held.entry(&p.node).or_default() += p.cpu_m;
    }
    for j in &a.jobs {
        *held.entry(&j.node).or_default() += j.cpu_m * j.pods as i64;
    }
    for r in &a.replica_sets {
        *held.entry(&r.node).or_default() += r.cpu_m * r.replicas as i64;
    }
    assert_eq!(held.len(), 30);
    assert!(held.values().all(|&m| m == 3800), "{held:?}");
    assert_eq!(a.offline_pod_count(), 60);
    assert_eq!(a.pdb_objects().len(), a.replica_sets.iter().filter(|r| r.pdb_max_unavailable.is_some()).count());
}

#[test]
fn enough_nodes_fail_no_job_and_violate_no_pdb_for_every_arrival() {
    let s = Scenario::generate(30);
    // A node whose eviction fails a Job (backoffLimit 0 or FailJob) or empties a PDB of two.
    let risky = s.jobs.iter().filter(|j| j.on_disruption.as_deref() != Some("Ignore")).count() + s.replica_sets.iter().filter(|r| r.pdb_max_unavailable.is_some()).count();
    let whole_nodes: usize = s.online.iter().map(|o| if o.cpu_m > 2000 { 2 } else { 1 }).sum::<usize>().div_ceil(2);
    assert!(s.nodes.len() - risky >= whole_nodes, "{} nodes, {risky} risky, {whole_nodes} needed", s.nodes.len());
}

#[test]
fn offline_pods_have_run_between_five_minutes_and_three_hours() {
    let s = Scenario::generate(12);
    let ages: Vec<i64> = s.bare.iter().map(|p| Scenario::age_seconds(&p.name)).collect();
    assert!(ages.iter().all(|a| (300..3 * 3600).contains(a)), "{ages:?}");
    assert!(ages.windows(2).any(|w| w[0] != w[1]), "ages differ: {ages:?}");
}
