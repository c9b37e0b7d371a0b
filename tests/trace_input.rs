//! The trace `coloc-demo --trace` replays (docs/traces.md), and the grace periods and stop
//! times generated clusters draw (`coloc-demo --mixed-grace`).

use coloc_testbed::scenario::{Scenario, Termination, GRACE_MIX};
use coloc_testbed::trace::{self, TraceError};

const HEADER: &str = "name,arrival,namespace,class,cpu,memory,duration,grace,stop,owner_kind,gang,node";

/// A small valid trace, `rows` appended.
fn with(rows: &[&str]) -> String {
    let mut t = format!(
        "{HEADER}\nnode-1,,,,8,32Gi,,,,Node,,\nold-1,-600,batch,free,1,512Mi,,300,250,bare,,node-1\nweb-1,2.5,online,online-prod,2,1Gi,,,,bare,,\n"
    );
    for r in rows {
        t.push_str(r);
        t.push('\n');
    }
    t
}

fn refused(text: &str) -> TraceError {
    trace::parse(text).expect_err("must be refused")
}

#[test]
fn the_example_trace_is_the_one_this_repository_generates() {
    let shipped = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/testbed/traces/example.csv")).unwrap();
    let mut sc = Scenario::generate(16, 11);
    sc.mix_grace(11);
    assert_eq!(
        shipped,
        trace::write(&sc, 3.0),
        "regenerate: coloc-demo --generate 16 --seed 11 --mixed-grace --write-trace testbed/traces/example.csv"
    );
    let read = trace::parse(&shipped).unwrap();
    assert_eq!((read.nodes.len(), read.online.len(), read.offline_pod_count()), (16, 17, sc.offline_pod_count()));
}

#[test]
fn a_trace_reads_as_written() {
    let sc = trace::parse(&with(&[
        "w,-60,batch,offline-batch,500m,,,600,420,ReplicaSet,,",
        "w,-60,batch,offline-batch,500m,,,600,420,ReplicaSet,,",
        "etl,-30,batch,offline-batch-low,1,2Gi,120,,,Job,,",
        "g-1,-90,batch,free,250m,,,,,bare,gang-a,node-1",
        "g-2,-90,batch,free,250m,,,,,bare,gang-a,",
        "late,10,batch,free,1,,,5,1,bare,,",
    ]))
    .unwrap();
    assert_eq!(sc.nodes[0].cpu_m, 8000);
    assert_eq!(sc.nodes[0].memory_gi, Some(32));
    let old = &sc.bare[0];
    assert_eq!((old.age_s, old.memory_mi, old.node.as_deref()), (Some(600), Some(512), Some("node-1")));
    assert_eq!(old.stop, Termination { grace_s: Some(300), stop_s: Some(250.0) });
    let w = &sc.replica_sets[0];
    assert_eq!((w.replicas, w.cpu_m, w.stop.grace_s), (2, 500, Some(600)));
    assert_eq!((sc.jobs[0].pods, sc.jobs[0].run_s, sc.jobs[0].memory_mi), (1, Some(120), Some(2048)));
    assert_eq!(sc.gangs()["gang-a"], ["g-1", "g-2"]);
    assert!(sc.bare.iter().filter(|b| b.gang.is_some()).all(|b| b.gang_min == Some(2)));
    let arrivals: Vec<(&str, &str, Option<f64>)> =
        sc.online.iter().map(|o| (o.name.as_str(), o.class.as_str(), o.at_s)).collect();
    assert_eq!(arrivals, [("web-1", "online-prod", Some(2.5)), ("late", "free", Some(10.0))]);
    // Written out and read back: the same.
    let again = trace::parse(&trace::write(&sc, 3.0)).unwrap();
    assert_eq!(format!("{:?}{:?}", again.bare, again.online), format!("{:?}{:?}", sc.bare, sc.online));
}

#[test]
fn bad_input_names_its_line_and_column() {
    let cases: &[(&str, usize, &str, &str)] = &[
        ("x,-1,batch,free,1abc,,,,,bare,,", 7, "cpu", "\"1abc\" is not a CPU quantity"),
        ("x,-1,batch,free,0,,,,,bare,,", 7, "cpu", "\"0\" is not a CPU quantity"),
        ("x,-1,batch,free,1,lots,,,,bare,,", 7, "memory", "\"lots\" is not a memory quantity"),
        ("x,-1,batch,free,1,,,-5,,bare,,", 7, "grace", "\"-5\" is not a whole number of seconds"),
        ("x,-1,batch,free,1,,,2.5,,bare,,", 7, "grace", "\"2.5\" is not a whole number"),
        ("x,-1,batch,free,1,,,,-1,bare,,", 7, "stop", "-1 is negative"),
        ("x,-1,batch,free,1,,soon,,,bare,,", 7, "duration", "\"soon\" is not a number of seconds"),
        ("x,later,batch,free,1,,,,,bare,,", 7, "arrival", "\"later\" is not a number of seconds"),
        ("x,,batch,free,1,,,,,bare,,", 7, "arrival", "required"),
        ("x,-1,batch,gold,1,,,,,bare,,", 7, "class", "\"gold\" is not a class of the test bed"),
        ("x,-1,batch,free,1,,,,,Deployment,,", 7, "owner_kind", "none of bare, ReplicaSet, Job, Node"),
        ("X_1,-1,batch,free,1,,,,,bare,,", 7, "name", "is not a name"),
        ("x,-1,prod,free,1,,,,,bare,,", 7, "namespace", "are in namespace batch"),
        ("x,-1,batch,free,1,,,,,bare,,node-9", 7, "node", "node node-9 is not declared"),
        ("old-1,-1,batch,free,1,,,,,bare,,", 7, "name", "batch/old-1 is given twice (line 3)"),
        ("x,3,batch,free,1,,,,,bare,g,", 7, "gang", "only pods there before"),
        ("x,3,batch,free,1,,,,,bare,,node-1", 7, "node", "placed by the scheduler"),
        ("rs,4,batch,free,1,,,,,ReplicaSet,,", 7, "arrival", "only bare pods arrive"),
        ("rs,-4,batch,free,1,,60,,,ReplicaSet,,", 7, "duration", "run until they are evicted"),
        ("rs,-4,batch,free,1,,,,,ReplicaSet,g,", 7, "gang", "only bare pods are in gangs"),
        ("node-2,5,,,4,,,,,Node,,", 7, "arrival", "a Node row takes name, cpu and memory only"),
        ("node-1,,,,4,,,,,Node,,", 7, "name", "node node-1 is declared twice"),
    ];
    for (row, line, column, message) in cases {
        // Comments and blank lines are skipped, and counted: the row is line 7.
        let e = refused(&with(&["# a comment, then a blank line", "", row]));
        assert_eq!((e.line, e.column.as_deref()), (*line, Some(*column)), "{row}: {e}");
        assert!(e.message.contains(message), "{row}: {e}");
    }
}

#[test]
fn a_workloads_rows_must_agree_and_the_whole_must_make_sense() {
    let e = refused(&with(&["rs,-4,batch,free,1,,,,,ReplicaSet,,", "rs,-4,batch,free,2,,,,,ReplicaSet,,"]));
    assert_eq!((e.line, e.column.as_deref()), (6, Some("name")));
    assert!(e.message.contains("must agree on class, cpu") && e.message.contains("(line 5)"), "{e}");
    let e = refused(&format!("{HEADER}\nx,-1,batch,free,1,,,,,bare,,\nweb,1,online,online-prod,1,,,,,bare,,\n"));
    assert_eq!(e.to_string(), "the trace declares no node (rows with owner_kind Node)");
    let e = refused(&format!("{HEADER}\nnode-1,,,,8,,,,,Node,,\nx,-1,batch,free,1,,,,,bare,,\n"));
    assert!(e.to_string().contains("nothing arrives"), "{e}");
    assert_eq!(refused("").to_string(), "the trace is empty");
    let e = refused("name,arrival,colour\n");
    assert_eq!(
        e.to_string(),
        format!("line 1, column colour: unknown column (the columns: {})", trace::COLUMNS.join(", "))
    );
    let e = refused("name,arrival,namespace,class,owner_kind\n");
    assert_eq!(e.to_string(), "line 1, column cpu: missing from the header");
    let e = refused(&format!("{HEADER}\nnode-1,,,,8,,,,,Node\n"));
    assert_eq!(e.to_string(), "line 2: 10 field(s), the header has 12");
}

#[test]
fn the_columns_may_come_in_any_order_and_the_optional_ones_may_be_left_out() {
    let sc = trace::parse(
        "owner_kind,cpu,name,class,namespace,arrival\nNode,4,n1,,,\nbare,1,a,free,batch,-5\nbare,1,web,online-prod,online,0\n",
    )
    .unwrap();
    assert_eq!((sc.nodes.len(), sc.bare.len(), sc.online.len()), (1, 1, 1));
    assert_eq!(sc.bare[0].stop, Termination::default(), "the API server's 30 s, run to its end");
}

#[test]
fn mixed_grace_is_drawn_per_workload_from_the_stated_mix_and_keeps_the_cluster() {
    let plain = Scenario::generate(40, 3);
    let mut mixed = Scenario::generate(40, 3);
    mixed.mix_grace(3);
    // The same cluster: only termination differs.
    assert_eq!(
        format!("{:?}", plain.bare.iter().map(|b| (&b.name, &b.node, b.cpu_m)).collect::<Vec<_>>()),
        format!("{:?}", mixed.bare.iter().map(|b| (&b.name, &b.node, b.cpu_m)).collect::<Vec<_>>())
    );
    let mut again = Scenario::generate(40, 3);
    again.mix_grace(3);
    assert_eq!(format!("{:?}", mixed.bare), format!("{:?}", again.bare), "fixed by the seed");
    // A gang stops alike.
    for members in mixed.gangs().values() {
        let stops: Vec<Termination> =
            members.iter().map(|m| mixed.bare.iter().find(|b| &b.name == m).unwrap().stop).collect();
        assert!(stops.windows(2).all(|w| w[0] == w[1]));
    }
    // Every draw is one of the mix's three kinds, and each kind is there.
    let all: Vec<Termination> = mixed
        .bare
        .iter()
        .map(|b| b.stop)
        .chain(mixed.replica_sets.iter().map(|r| r.stop))
        .chain(mixed.jobs.iter().map(|j| j.stop))
        .collect();
    let (mut at_once, mut default, mut checkpoint) = (0, 0, 0);
    for t in &all {
        match (t.grace_s.unwrap(), t.stop_s) {
            (1..=5, Some(s)) if s <= 1.0 => at_once += 1,
            (30, None) => default += 1,
            (30, Some(s)) if (1.0..=3.0).contains(&s) => default += 1,
            (g @ 120..=600, Some(s)) if s >= 0.6 * g as f64 && s <= 0.95 * g as f64 => checkpoint += 1,
            other => panic!("{other:?} is not in the mix: {GRACE_MIX}"),
        }
    }
    assert!(at_once > 0 && default > 0 && checkpoint > 0, "{at_once} {default} {checkpoint}");
}

#[test]
fn time_is_scaled_alike_for_every_pod() {
    let mut sc = Scenario::generate(20, 2);
    sc.mix_grace(2);
    let before = sc.longest_stop_s();
    sc.scale_time(0.1);
    assert!((sc.longest_stop_s() - before * 0.1).abs() <= 1.0, "{before} -> {}", sc.longest_stop_s());
    let t = Termination { grace_s: Some(600), stop_s: Some(450.0) }.scaled(0.1);
    assert_eq!(t, Termination { grace_s: Some(60), stop_s: Some(45.0) });
    assert_eq!(
        Termination { grace_s: Some(3), stop_s: None }.scaled(0.1).grace_s,
        Some(1),
        "a grace is never rounded to 0"
    );
    assert_eq!(Termination { grace_s: Some(0), stop_s: None }.scaled(0.1).grace_s, Some(0));
}
