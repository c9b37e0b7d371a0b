//! The whole data path per verb — parse + decide + encode, exactly what `serve` and
//! `replay` run — via `coloc_extender::pipeline::answer`, on synthetic payloads shaped like
//! real kube-scheduler requests.
//!
//!     cargo bench --bench verbs                 # everything (~5-8 min on 2 cores)
//!     cargo bench --bench verbs -- filter       # only benchmarks whose name matches
//!
//! Inputs are generated on first use by `python3 tools/gen-payloads ...` into
//! `target/bench-payloads/` and reused afterwards (cached by file name; delete the
//! directory to regenerate). Figures and targets: docs/performance.md.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use coloc_extender::cluster::{snapshot, View};
use coloc_extender::model::{Pod, Resources};
use coloc_extender::pipeline::{self, Verb};
use coloc_extender::policy::Policy;
use divan::{black_box, Bencher};

/// A fixed decision time, so runs compare (pods in the payloads start in 2026).
const NOW: i64 = 1_800_000_000;
const VICTIMS: usize = 30;

fn main() {
    divan::main();
}

fn policy() -> &'static Policy {
    static P: OnceLock<Policy> = OnceLock::new();
    P.get_or_init(|| Policy::builtin_default().enforced())
}

/// The shipped policy with the `keepOffOnlineRoom` its comment shows turned on, and batch
/// allowed on every node (the generated nodes carry no labels): each node is judged.
fn keeping_off_policy() -> &'static Policy {
    static P: OnceLock<Policy> = OnceLock::new();
    P.get_or_init(|| {
        let shipped = include_str!("../policy/default.yaml");
        let labels = "requireNodeLabels: {colocation.example.com/offline-allowed: \"true\"}";
        let on = shipped.replacen("# keepOffOnlineRoom: 60s", "keepOffOnlineRoom: 60s", 1).replacen(
            labels,
            "requireNodeLabels: {}",
            1,
        );
        assert_ne!(on, shipped, "the shipped policy no longer shows keepOffOnlineRoom");
        Policy::from_yaml(&on).expect("the shipped policy with keepOffOnlineRoom on").enforced()
    })
}

fn payload_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("bench-payloads")
}

/// `gen-payloads <args>` output, generated once into target/bench-payloads/ and kept in
/// memory for the rest of the run.
fn payload(args: &[&str]) -> &'static [u8] {
    static CACHE: OnceLock<Mutex<HashMap<String, &'static [u8]>>> = OnceLock::new();
    let name = format!("{}.json", args.join("").replace("--", "-").trim_start_matches('-'));
    let mut cache = CACHE.get_or_init(Default::default).lock().unwrap();
    if let Some(bytes) = cache.get(&name) {
        return bytes;
    }
    let dir = payload_dir();
    let path = dir.join(&name);
    if !path.exists() {
        std::fs::create_dir_all(&dir).expect("create target/bench-payloads");
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tools/gen-payloads");
        let out = Command::new("python3").arg(&script).args(args).output().expect("run python3 tools/gen-payloads");
        assert!(out.status.success(), "gen-payloads {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        // Write then rename, so an interrupted run never leaves a truncated cache file.
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, &out.stdout).expect("write payload");
        std::fs::rename(&tmp, &path).expect("rename payload");
    }
    let bytes: &'static [u8] = Vec::leak(std::fs::read(&path).expect("read payload"));
    cache.insert(name, bytes);
    bytes
}

fn filter_body(nodes: usize, mode: &str) -> &'static [u8] {
    payload(&["filter", "--nodes", &nodes.to_string(), "--mode", mode])
}

fn preempt_body(nodes: usize, mode: &str) -> &'static [u8] {
    payload(&["preempt", "--nodes", &nodes.to_string(), "--victims", &VICTIMS.to_string(), "--mode", mode])
}

/// The cluster view matching `preempt --nodes N --victims 30` (same seed).
fn view(nodes: usize) -> &'static View {
    static VIEWS: Views = OnceLock::new();
    built_once(&VIEWS, nodes, || {
        let bytes = payload(&["snapshot", "--nodes", &nodes.to_string(), "--victims", &VICTIMS.to_string()]);
        let objects = snapshot::parse(bytes).expect("generated snapshot parses");
        View::build(objects, policy())
    })
}

/// Views by node count, each built once and kept for the benchmark's life.
type Views = OnceLock<Mutex<HashMap<usize, &'static View>>>;

fn built_once(views: &'static Views, nodes: usize, build: impl FnOnce() -> View) -> &'static View {
    let mut views = views.get_or_init(Default::default).lock().unwrap();
    views.entry(nodes).or_insert_with(|| Box::leak(Box::new(build())))
}

/// `view(nodes)` with 64 online pods waiting for room (kube-scheduler found none for
/// them), each small enough to fit in any plan's room left over: every plan looks at as
/// many of them as preempt ever does (`room_left_over`).
fn view_with_waiting(nodes: usize) -> &'static View {
    static VIEWS: Views = OnceLock::new();
    built_once(&VIEWS, nodes, || {
        let mut view = view(nodes).clone();
        for i in 0..64 {
            let waiting = Pod {
                name: format!("waiting-{i}"),
                namespace: "online".into(),
                uid: format!("uid-waiting-{i}"),
                creation_time: Some(NOW - 60 + i),
                priority: Some(10_000),
                priority_class_name: Some("online-prod".into()),
                unschedulable: true,
                requests: Resources { milli_cpu: 1, memory: 1, ..Default::default() },
                ..Default::default()
            };
            view.apply_pod(std::sync::Arc::new(waiting), policy());
        }
        assert_eq!(view.waiting_online().count(), 64, "the waiting pods are online pods");
        view
    })
}

/// `view(nodes)` with 2 CPUs more on every node: the room its 2-CPU online pod fits in
/// as is, which a 1-CPU offline pod would take.
fn view_with_online_room(nodes: usize) -> &'static View {
    static VIEWS: Views = OnceLock::new();
    built_once(&VIEWS, nodes, || {
        let mut view = view(nodes).clone();
        let grown: Vec<_> = view
            .nodes()
            .map(|(n, _)| {
                let mut n = n.clone();
                n.allocatable.milli_cpu += 2000;
                n
            })
            .collect();
        for n in grown {
            view.apply_node(n);
        }
        view
    })
}

fn run(bencher: Bencher, verb: Verb, body: &'static [u8], view: Option<&'static View>) {
    // Fail loudly (once, untimed) if the payload is rejected: a benchmark of an error
    // path would look wonderfully fast.
    let first = pipeline::replay(verb, body, policy(), view, NOW)
        .unwrap_or_else(|e| panic!("{verb:?} rejected its payload: {e}"));
    assert!(!first.body.is_empty());
    bencher
        .counter(divan::counter::BytesCount::new(body.len()))
        .bench(|| pipeline::replay(verb, black_box(body), policy(), view, NOW).map(|a| a.body.len()).unwrap());
}

// Heavy cases (40 MB bodies) take ~0.1-0.5 s per call: a handful of samples each, and a
// time cap per benchmark keeps the whole run under ~10 minutes on 2 cores.
const SIZES: [usize; 3] = [100, 1_000, 5_000];
/// Candidate names with a view of as many nodes (1,000 nodes × 30 pods). One
/// call per sample, so `slowest` bounds the p99 from above.
const VIEW_SIZES: [usize; 1] = [1_000];

mod filter {
    use super::*;

    /// `nodeCacheCapable: false`: full Node objects in, kept raw Node objects out.
    #[divan::bench(args = SIZES, sample_count = 30, max_time = 8)]
    fn full(bencher: Bencher, nodes: usize) {
        run(bencher, Verb::Filter, filter_body(nodes, "full"), None);
    }

    /// `nodeCacheCapable: true`: node names in and out.
    #[divan::bench(args = SIZES, sample_count = 100, max_time = 3)]
    fn names(bencher: Bencher, nodes: usize) {
        run(bencher, Verb::Filter, filter_body(nodes, "names"), None);
    }

    /// Node names judged by the cluster view (nodes × 31 pods): what `serve --kube` does
    /// with `nodeCacheCapable: true`.
    #[divan::bench(args = VIEW_SIZES, sample_count = 1000, sample_size = 1, max_time = 10)]
    fn names_view(bencher: Bencher, nodes: usize) {
        run(bencher, Verb::Filter, filter_body(nodes, "names"), Some(view(nodes)));
    }

    /// The same nodes for an offline pod created a second ago (class batch, 1 cpu): the
    /// class's label rules and, node by node, whether it would take room an online pod of
    /// a size bound now fits in (`keepOffOnlineRoom`).
    #[divan::bench(args = VIEW_SIZES, sample_count = 1000, sample_size = 1, max_time = 10)]
    fn names_view_offline_young(bencher: Bencher, nodes: usize) {
        let body = young(offline_body(filter_body(nodes, "names")));
        let policy = keeping_off_policy();
        let view = view_with_online_room(nodes);
        let first = pipeline::replay(Verb::Filter, body, policy, Some(view), NOW).expect("answered");
        assert!(
            first.explanations.iter().any(|e| e.code == "online_room_kept"),
            "no node kept off: the benchmark would not measure the rule: {:?}",
            first.explanations.iter().map(|e| (e.code, e.detail.as_str())).take(5).collect::<Vec<_>>()
        );
        bencher.counter(divan::counter::BytesCount::new(body.len())).bench(|| {
            pipeline::replay(Verb::Filter, black_box(body), policy, Some(view), NOW).map(|a| a.body.len()).unwrap()
        });
    }
}

/// `body` with its pod created a second before NOW.
fn young(body: &[u8]) -> &'static [u8] {
    let mut v: serde_json::Value = serde_json::from_slice(body).expect("generated payload parses");
    let created = jiff::Timestamp::from_second(NOW - 1).expect("a valid time").to_string();
    v["Pod"]["metadata"]["creationTimestamp"] = created.into();
    Box::leak(serde_json::to_vec(&v).expect("serializes").into_boxed_slice())
}

mod prioritize {
    use super::*;

    #[divan::bench(args = SIZES, sample_count = 30, max_time = 8)]
    fn full(bencher: Bencher, nodes: usize) {
        run(bencher, Verb::Prioritize, filter_body(nodes, "full"), None);
    }

    #[divan::bench(args = SIZES, sample_count = 100, max_time = 3)]
    fn names(bencher: Bencher, nodes: usize) {
        run(bencher, Verb::Prioritize, filter_body(nodes, "names"), None);
    }

    /// Scores from the cluster view (nodes × 31 pods). The preemptor (24 cpu) fits on no
    /// node as is, so every node also asks "would it fit after preemption?".
    #[divan::bench(args = VIEW_SIZES, sample_count = 1000, sample_size = 1, max_time = 10)]
    fn names_view(bencher: Bencher, nodes: usize) {
        run(bencher, Verb::Prioritize, filter_body(nodes, "names"), Some(view(nodes)));
    }

    /// The same nodes for an offline pod (class batch, 1 cpu): the scores the policy
    /// gives offline pods (placement, packing, headroom), an online pod being left to
    /// kube-scheduler's own.
    #[divan::bench(args = VIEW_SIZES, sample_count = 1000, sample_size = 1, max_time = 10)]
    fn names_view_offline(bencher: Bencher, nodes: usize) {
        run(bencher, Verb::Prioritize, offline_body(filter_body(nodes, "names")), Some(view(nodes)));
    }
}

/// `body` with its pod made an offline one (offline-batch, 1 cpu).
fn offline_body(body: &[u8]) -> &'static [u8] {
    let mut v: serde_json::Value = serde_json::from_slice(body).expect("generated payload parses");
    let spec = &mut v["Pod"]["spec"];
    spec["priorityClassName"] = "offline-batch".into();
    spec["priority"] = 6000.into();
    spec["containers"][0]["resources"]["requests"]["cpu"] = "1".into();
    Box::leak(serde_json::to_vec(&v).expect("serializes").into_boxed_slice())
}

/// Candidate nodes × 30 victims each.
mod preempt {
    use super::*;

    const CANDIDATES: [usize; 2] = [10, 100];

    /// Full victim Pods, no cluster view: judge kube-scheduler's victims only.
    #[divan::bench(args = CANDIDATES, sample_count = 50, max_time = 5)]
    fn full(bencher: Bencher, nodes: usize) {
        run(bencher, Verb::Preempt, preempt_body(nodes, "full"), None);
    }

    /// Victim UIDs only, no cluster view.
    #[divan::bench(args = CANDIDATES, sample_count = 50, max_time = 5)]
    fn meta(bencher: Bencher, nodes: usize) {
        run(bencher, Verb::Preempt, preempt_body(nodes, "meta"), None);
    }

    /// Full victim Pods with the matching cluster view: full re-selection.
    #[divan::bench(args = CANDIDATES, sample_count = 50, max_time = 5)]
    fn full_view(bencher: Bencher, nodes: usize) {
        let view = view(nodes);
        run(bencher, Verb::Preempt, preempt_body(nodes, "full"), Some(view));
    }

    /// Victim UIDs with the matching cluster view.
    #[divan::bench(args = CANDIDATES, sample_count = 50, max_time = 5)]
    fn meta_view(bencher: Bencher, nodes: usize) {
        let view = view(nodes);
        run(bencher, Verb::Preempt, preempt_body(nodes, "meta"), Some(view));
    }

    /// As `meta_view`, with online pods waiting that every plan's room left over places.
    #[divan::bench(args = CANDIDATES, sample_count = 50, max_time = 5)]
    fn meta_view_waiting(bencher: Bencher, nodes: usize) {
        let view = view_with_waiting(nodes);
        run(bencher, Verb::Preempt, preempt_body(nodes, "meta"), Some(view));
    }
}
