//! How long a trace's online pods wait whatever is evicted (`coloc-trace bound`): every
//! offline pod gone the instant an online pod arrives, online pods placed in arrival order
//! where their CPU fits tightest. Each case on one or two 4-CPU nodes.

use coloc_testbed::bound::{self, OnlineWaits};
use coloc_testbed::trace;

const HEADER: &str = "name,arrival,namespace,class,cpu,memory,duration,grace,stop,owner_kind,gang,node";

/// The online pods' waits on `nodes` 4-CPU nodes with `rows` (pods there before and
/// arrivals).
fn waits(nodes: usize, rows: &[&str]) -> OnlineWaits {
    let mut t = format!("{HEADER}\n");
    for n in 1..=nodes {
        t.push_str(&format!("node-{n},,,,4,16Gi,,,,Node,,\n"));
    }
    for r in rows {
        t.push_str(r);
        t.push('\n');
    }
    bound::online_waits(&trace::parse(&t).expect("a valid trace"), "online-prod")
}

#[test]
fn offline_pods_in_the_way_cost_no_wait() {
    let w =
        waits(1, &["batch-1,-600,batch,offline-batch,4,,,600,,bare,,node-1", "web,2,online,online-prod,3,,,,,bare,,"]);
    assert_eq!(w.placed, [("web".to_string(), 0.0)]);
    assert_eq!(w.waiting(), 0);
}

#[test]
fn an_online_pod_waits_for_the_online_pod_in_its_way_to_end() {
    // api runs 10 s more from the start; web arrives at 4 s and needs 2 of the 1 CPU left.
    let w = waits(1, &["api,-60,batch,online-prod,3,,10,,,bare,,node-1", "web,4,online,online-prod,2,,,,,bare,,"]);
    assert_eq!(w.placed, [("web".to_string(), 6.0)]);
    assert_eq!((w.waiting(), w.longest_s(), w.quantile_s(0.99)), (1, 6.0, 6.0));
}

#[test]
fn the_tightest_fit_keeps_whole_the_room_the_next_online_pod_needs() {
    // node-1 holds 2 CPUs of online pods for good: web-1 (2 CPUs) goes there, leaving
    // node-2's 4 CPUs whole for web-2. Spread to the emptier node-2, it would leave no
    // node with 4 CPUs, and web-2 would never be placed.
    let w = waits(
        2,
        &[
            "api,-60,batch,online-prod,2,,,,,bare,,node-1",
            "web-1,0,online,online-prod,2,,,,,bare,,",
            "web-2,1,online,online-prod,4,,,,,bare,,",
        ],
    );
    assert_eq!(w.placed, [("web-1".to_string(), 0.0), ("web-2".to_string(), 0.0)]);
    assert!(w.never.is_empty());
}

#[test]
fn an_online_pod_no_node_holds_is_never_placed_and_said_so() {
    let w = waits(1, &["huge,0,online,online-prod,8,,,,,bare,,", "web,1,online,online-prod,1,,,,,bare,,"]);
    assert_eq!((w.placed.len(), w.never.as_slice()), (1, ["huge".to_string()].as_slice()));
    assert_eq!(w.waiting(), 1);
    assert!(bound::describe(&w).contains("1 never placed (no node ever has room for them)"), "{}", bound::describe(&w));
}

#[test]
fn offline_arrivals_are_not_counted() {
    let w = waits(1, &["api,-60,batch,online-prod,4,,,,,bare,,node-1", "late,3,batch,offline-batch,2,,,,,bare,,"]);
    assert_eq!(w, OnlineWaits::default());
    assert_eq!(bound::describe(&w), "online pods that wait whatever is evicted: 0 of 0, the longest 0.0 s, p99 0.0 s");
}
