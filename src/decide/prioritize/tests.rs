//! The view's per-class aggregates against the per-pod rules they stand in for.

use std::path::Path;

use super::super::eligibility::{self, Preemptor};
use super::super::Context;
use crate::cluster::usage::NodeUsage;
use crate::cluster::{snapshot, View};
use crate::policy::Policy;

fn recorded(round: &str) -> (Policy, View) {
    let policy = Policy::builtin_default().enforced();
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/payloads")
        .join(round)
        .join("0037-preempt.snapshot.json");
    let view = View::build(snapshot::load(&path).unwrap(), &policy);
    (policy, view)
}

/// For every node and every preemptor class: what eligibility lets a preemptor evict, pod
/// by pod, against what the aggregates say its class may free.
fn compare(round: &str, priority: i32, now: i64, requeue: bool, exact: bool) {
    let (policy, view) = recorded(round);
    let ctx = Context::new(&policy, Some(&view), now).with_requeue(requeue);
    let mut nodes = 0;
    for name in view.node_names() {
        let usage = view.node_info(name).unwrap().usage();
        for class in 0..policy.classes.len() {
            let preemptor = Preemptor { priority, class, key: "x/preemptor" };
            let eligible = NodeUsage::of(
                view.pods_on(name).iter().map(|p| &**p).filter(|p| eligibility::check(&ctx, preemptor, p).is_ok()),
            );
            let mut freed = usage.all.clone();
            freed.remove_all(&usage.after_evicting(&policy, class, super::bare_evictable(&ctx, class)));
            let what = format!("{round} {name} class {}", policy.class(class).name);
            if exact {
                assert_eq!(
                    (freed.pods, freed.requested.milli_cpu, freed.requested.memory),
                    (eligible.pods, eligible.requested.milli_cpu, eligible.requested.memory),
                    "{what}"
                );
            } else {
                assert!(
                    freed.pods >= eligible.pods && freed.requested.milli_cpu >= eligible.requested.milli_cpu,
                    "{what}: frees less than eligibility allows"
                );
            }
        }
        nodes += 1;
    }
    assert!(nodes > 3);
}

#[test]
fn class_aggregates_free_exactly_what_eligibility_allows_when_priority_and_runtime_do_not_bite() {
    for round in ["r1-nodecache-false", "r2-nodecache-true"] {
        for requeue in [false, true] {
            compare(round, i32::MAX, i64::MAX / 2, requeue, true);
        }
    }
}

#[test]
fn class_aggregates_never_free_less_than_eligibility_allows() {
    for round in ["r1-nodecache-false", "r2-nodecache-true"] {
        for priority in [0, 100, 6000, 10_000] {
            compare(round, priority, 1_795_000_000, true, false);
        }
    }
}
