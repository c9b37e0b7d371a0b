//! Alibaba's openb trace as a window `coloc-demo --trace` replays (`coloc-trace openb`,
//! docs/traces.md): tiny CSVs in the openb schema, written here.

use coloc_testbed::openb::{self, Csv, CsvError, Window};
use coloc_testbed::scenario::{GraceMix, Termination};
use coloc_testbed::trace;

const NODES: &str = "sn,cpu_milli,memory_mib,gpu,model
openb-node-0000,32000,262144,0,
openb-node-0001,96000,786432,8,V100M32
openb-node-0002,32000,262144,0,
openb-node-0003,32000,262144,0,
";

const POD_HEADER: &str =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time";

/// A pod list of `rows` (after the header).
fn pods(rows: &[&str]) -> String {
    let mut t = format!("{POD_HEADER}\n");
    for r in rows {
        t.push_str(r);
        t.push('\n');
    }
    t
}

/// The window used below: trace seconds 10,000 to 11,000, ten trace seconds a replay second.
fn window(nodes: usize) -> Window {
    Window { start_s: 10_000, length_s: 1_000, speed: 10.0, nodes, seed: 7, real_ages: false }
}

fn convert(nodes: &str, pods: &str, w: &Window) -> Result<openb::Converted, CsvError> {
    openb::convert(Csv { file: "nodes.csv", text: nodes }, Csv { file: "pods.csv", text: pods }, w)
}

fn refused(nodes: &str, pods: &str) -> String {
    match convert(nodes, pods, &window(2)) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("must be refused"),
    }
}

#[test]
fn pods_running_at_the_start_are_there_before_and_pods_created_in_the_window_arrive() {
    let list = pods(&[
        // Running at the start on the window's clock: created 2,000 trace s before (200 s
        // replayed), 500 s to run from its scheduling: 300 s left.
        "old-be,8000,16384,0,0,,BE,Running,8000,8510,8010",
        // Ended before: created 9,000 trace s before (900 s replayed), ran 100 s.
        "gone,8000,16384,0,0,,BE,Running,1000,1100,1000",
        // Created in the window, 500 trace s in: arrives at 50 s, runs 400 s.
        "web,4000,8192,0,0,,LS,Running,10500,10900,10500",
        "batch-new,2000,4096,0,0,,BE,Running,10800,20800,10800",
        // A GPU pod: dropped.
        "gpu,4000,8192,1,500,,LS,Running,10100,10200,10100",
        // After the window.
        "later,4000,8192,0,0,,LS,Running,11000,11500,11000",
    ]);
    let c = convert(NODES, &list, &window(2)).unwrap();
    let sc = &c.scenario;
    assert_eq!(sc.nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), ["openb-node-0000", "openb-node-0002"]);
    assert_eq!(sc.nodes[0].memory_gi, Some(256));
    assert_eq!(sc.bare.len(), 1);
    let old = &sc.bare[0];
    assert_eq!((old.name.as_str(), old.class.as_str(), old.namespace.as_str()), ("old-be", "offline-batch", "batch"));
    assert_eq!((old.age_s, old.run_s, old.node.as_deref()), (Some(200), Some(300), Some("openb-node-0000")));
    let arrivals: Vec<_> =
        sc.online.iter().map(|o| (o.name.as_str(), o.class.as_str(), o.namespace.as_str(), o.at_s, o.run_s)).collect();
    assert_eq!(
        arrivals,
        [
            ("web", "online-prod", "online", Some(50.0), Some(400)),
            ("batch-new", "offline-batch", "batch", Some(80.0), Some(10_000)),
        ]
    );
    assert_eq!(c.gpu_pods, 1);

    // With the trace's own ages, old-be has run 2,000 s: the same pods, the same lifetimes.
    let real = convert(NODES, &list, &Window { real_ages: true, ..window(2) }).unwrap().scenario;
    let old = &real.bare[0];
    assert_eq!((old.name.as_str(), old.age_s, old.run_s), ("old-be", Some(2000), Some(300)));
    assert_eq!(real.online.len(), sc.online.len());
}

#[test]
fn offline_pods_draw_their_grace_from_the_stated_mix_and_online_pods_keep_the_default() {
    let list = pods(&[
        "old-be,8000,16384,0,0,,BE,Running,8000,,8000",
        "old-ls,8000,16384,0,0,,LS,Running,8000,,8000",
        "web,4000,8192,0,0,,LS,Running,10500,,10500",
        "batch-new,2000,4096,0,0,,Burstable,Running,10800,,10800",
    ]);
    let sc = convert(NODES, &list, &window(2)).unwrap().scenario;
    let mut mix = GraceMix::seeded(7);
    let (first, second) = (mix.draw(), mix.draw());
    let stops: Vec<(&str, Termination)> = sc
        .bare
        .iter()
        .map(|b| (b.name.as_str(), b.stop))
        .chain(sc.online.iter().map(|o| (o.name.as_str(), o.stop)))
        .collect();
    // There before newest first (same age: by name); then the arrivals, in order.
    assert_eq!(
        stops,
        [("old-be", first), ("old-ls", Termination::default()), ("web", Termination::default()), ("batch-new", second)]
    );
    // LS there before keeps its class (never a victim), in the format's namespace.
    assert_eq!(sc.bare[1].class, "online-prod");
}

#[test]
fn pods_there_before_fill_the_kept_nodes_newest_first_and_the_rest_are_left_out() {
    let list = pods(&[
        "a,20000,1024,0,0,,BE,Running,9000,,9000",
        "b,20000,1024,0,0,,BE,Running,9100,,9100",
        "c,20000,1024,0,0,,BE,Running,9200,,9200",
        "d,10000,1024,0,0,,BE,Running,8000,,8000",
        // Ends 50 s into the replay: it would be gone while the bed starts.
        "e,1000,1024,0,0,,BE,Running,9900,9960,9900",
        "web,4000,8192,0,0,,LS,Running,10500,,10500",
    ]);
    let c = convert(NODES, &list, &window(2)).unwrap();
    let placed: Vec<_> = c.scenario.bare.iter().map(|b| (b.name.as_str(), b.node.as_deref().unwrap())).collect();
    // Newest first: c, b (no room beside c: 20 + 20 > 32), a (none left), d beside c.
    assert_eq!(placed, [("c", "openb-node-0000"), ("b", "openb-node-0002"), ("d", "openb-node-0000")]);
    assert_eq!((c.no_room, c.ending), (1, 1));
    assert!(openb::fill(&c.scenario).contains("there before: 50 CPUs"), "{}", openb::fill(&c.scenario));
}

#[test]
fn the_window_written_is_a_trace_coloc_demo_reads() {
    let list = pods(&[
        "old-be,8000,16384,0,0,,BE,Running,8000,8510,8010",
        "web,4000,8192,0,0,,LS,Running,10500,10900,10500",
        "batch-new,2000,4096,0,0,,BE,Running,10800,,10800",
    ]);
    let sc = convert(NODES, &list, &window(2)).unwrap().scenario;
    let read = trace::parse(&trace::write(&sc, 0.0)).unwrap();
    assert_eq!((read.nodes.len(), read.bare.len(), read.online.len()), (2, 1, 2));
    assert_eq!(read.bare[0].node.as_deref(), Some("openb-node-0000"));
    assert_eq!(read.bare[0].stop.grace_s, sc.bare[0].stop.grace_s);
    assert_eq!(read.online[0].run_s, Some(400));
}

#[test]
fn a_missing_column_is_refused_with_the_file_and_the_column() {
    let nodes = NODES.replace("memory_mib", "mem");
    assert_eq!(refused(&nodes, &pods(&[])), "nodes.csv: line 1, column memory_mib: missing from the header");
    let list = pods(&[]).replace("qos", "class");
    assert_eq!(refused(NODES, &list), "pods.csv: line 1, column qos: missing from the header");
}

#[test]
fn a_bad_number_is_refused_with_the_file_line_and_column() {
    let list = pods(&["web,4000,8192,0,0,,LS,Running,105x0,10900,10500"]);
    assert_eq!(
        refused(NODES, &list),
        "pods.csv: line 2, column creation_time: \"105x0\" is not a whole number, 0 or more"
    );
    let nodes = NODES.replace("openb-node-0002,32000", "openb-node-0002,-1");
    assert_eq!(
        refused(&nodes, &pods(&[])),
        "nodes.csv: line 4, column cpu_milli: \"-1\" is not a whole number, 0 or more"
    );
    let list = pods(&["web,4000,8192,0,0,,LS,Running,10500,10400,10500"]);
    assert_eq!(
        refused(NODES, &list),
        "pods.csv: line 2, column deletion_time: 10400 is before its scheduling or creation (10500)"
    );
}

#[test]
fn a_short_row_a_bad_name_and_too_few_nodes_are_refused() {
    let list = pods(&["web,4000,8192,0,0,,LS,Running,10500,10900"]);
    assert_eq!(refused(NODES, &list), "pods.csv: line 2: 10 field(s), the header has 11");
    let list = pods(&["Web_1,4000,8192,0,0,,LS,Running,10500,10900,10500"]);
    assert_eq!(
        refused(NODES, &list),
        "pods.csv: line 2, column name: \"Web_1\" is not a name (lower-case letters, digits and -, at most 63)"
    );
    match convert(NODES, &pods(&["web,4000,8192,0,0,,LS,Running,10500,10900,10500"]), &window(4)) {
        Err(e) => assert_eq!(e.to_string(), "nodes.csv: 3 CPU-only nodes (gpu 0), 4 asked"),
        Ok(_) => panic!("must be refused"),
    }
    match convert(NODES, &pods(&["web,4000,8192,0,0,,LS,Running,20500,20900,20500"]), &window(2)) {
        Err(e) => assert_eq!(e.to_string(), "pods.csv: no CPU-only pod is created in 10000..11000 s"),
        Ok(_) => panic!("must be refused"),
    }
}
