//! The cluster view under watch traffic: what one event costs to apply to a
//! 5,000-node / 150,000-pod view, what publishing the result costs, and `View::build`.
//!
//!     cargo bench --bench view                  # everything (~1-2 min on 2 cores)
//!     cargo bench --bench view -- event         # only benchmarks whose path matches
//!
//! The cluster is generated in code, deterministically: 5,000 nodes (32 cpu, 128 Gi, 2 in
//! 3 offline-allowed, 1 in 10 with GPUs), 30 running pods on each (6 online, 18 batch, 6
//! free; ReplicaSet-owned, 6 labels, 3 annotations, requests), 16 namespaces each with a
//! PDB, 5 PriorityClasses. Figures, targets and the end-to-end measurement
//! (`coloc-viewload`, through a fake API server and `cluster::watch`): docs/performance.md.
//!
//! Every event benchmark applies its event to an O(1) clone of the big view, i.e. to a
//! view whose maps are all shared with a published copy: exactly the state the watch's
//! master copy is in after each publish, so every touched path is copied. The modified
//! clone is dropped outside the timed region.

use std::sync::{Arc, OnceLock};

use coloc_extender::cluster::{Objects, View, ViewCell};
use coloc_extender::model::{Labels, Node, OwnerRef, Pdb, Pod, PodRef, PriorityClass, Resources, Selector};
use coloc_extender::policy::Policy;
use divan::{black_box, Bencher};

// Shared with coloc-viewload (bench/), which builds the same synthetic cluster.
use coloc_testbed::ids::{mix, uuid};

const NODES: usize = 5_000;
const PER_NODE: usize = 30;
const NAMESPACES: usize = 16;
const APPS: usize = 64;
/// Distinct events cycled through by the event benchmarks (spread over the cluster).
const POOL: usize = 4096;
const GI: i64 = 1 << 30;

fn main() {
    divan::main();
}

fn policy() -> &'static Policy {
    static P: OnceLock<Policy> = OnceLock::new();
    P.get_or_init(|| Policy::builtin_default().enforced())
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().copied().collect()
}

fn node(i: usize) -> Node {
    let name = format!("node-{i:05}");
    let zone = format!("zone-{}", i % 3 + 1);
    let mut l = labels(&[
        ("kubernetes.io/arch", "amd64"),
        ("kubernetes.io/hostname", &name),
        ("kubernetes.io/os", "linux"),
        ("topology.kubernetes.io/zone", &zone),
        ("node.example.com/pool", if i % 10 == 0 { "gpu" } else { "general" }),
    ]);
    if i % 3 != 0 {
        l.insert("colocation.example.com/offline-allowed".into(), "true".into());
    }
    let mut allocatable =
        Resources { milli_cpu: 32_000, memory: 128 * GI, ephemeral_storage: 500 * GI, ..Default::default() };
    if i % 10 == 0 {
        allocatable.scalar.insert("example.com/gpu".into(), 8);
    }
    Node { name, labels: l, allocatable, allocatable_pods: 110, ..Default::default() }
}

/// Pod `p` (on node `p / 30`); `generation` varies what a watch update would change.
fn pod(p: usize, generation: u64) -> Pod {
    let node = p / PER_NODE;
    let (class, pc, prio, cpu, mem) = match p % PER_NODE % 5 {
        0 => ("online", "online-prod", 10_000, 2_000, 4 * GI),
        4 => ("free", "free-tier", 3_000, 250, GI / 2),
        _ => ("batch", "offline-batch", 5_000, 1_000, 2 * GI),
    };
    let team = format!("team-{:02}", p % NAMESPACES);
    let app = format!("{class}-app-{:02}", (p / NAMESPACES) % APPS);
    let hash = format!("{:010x}", mix(((p % NAMESPACES) * 1000 + (p / NAMESPACES) % APPS) as u64) & 0xff_ffff_ffff);
    let rs = format!("{app}-{hash}");
    let generation_s = generation.to_string();
    Pod {
        name: format!("{rs}-{p:05x}"),
        namespace: team.clone(),
        uid: uuid(1, p as u64),
        labels: labels(&[
            ("app", &app),
            ("app.kubernetes.io/name", &app),
            ("app.kubernetes.io/part-of", &team),
            ("pod-template-hash", &hash),
            ("workload-class", class),
            ("team", &team),
        ]),
        annotations: labels(&[
            ("kubectl.kubernetes.io/restartedAt", "2026-01-05T10:00:00Z"),
            ("prometheus.io/scrape", "true"),
            ("viewload.example.com/seq", &generation_s),
        ]),
        controller: Some(OwnerRef { kind: "ReplicaSet".into(), name: rs }),
        creation_time: Some(1_767_607_200),
        start_time: Some(1_767_607_201),
        priority: Some(prio),
        priority_class_name: Some(pc.into()),
        node_name: Some(format!("node-{node:05}")),
        phase: Some("Running".into()),
        requests: Resources { milli_cpu: cpu, memory: mem, ..Default::default() },
        ..Default::default()
    }
}

fn objects(nodes: usize) -> Objects {
    let pdbs = (0..NAMESPACES)
        .map(|t| Pdb {
            name: "batch-pdb".into(),
            namespace: format!("team-{t:02}"),
            selector: Some(Selector {
                match_labels: labels(&[("workload-class", "batch")]),
                match_expressions: Vec::new(),
            }),
            disruptions_allowed: 500,
            ..Default::default()
        })
        .collect();
    let priority_classes = [
        ("system-cluster-critical", 2_000_000_000),
        ("online-prod", 10_000),
        ("offline-batch", 5_000),
        ("free-tier", 3_000),
        ("koord-batch", 5_500),
    ]
    .into_iter()
    .map(|(n, v)| PriorityClass { name: n.into(), value: v })
    .collect();
    Objects {
        nodes: (0..nodes).map(node).collect(),
        pods: (0..nodes * PER_NODE).map(|p| pod(p, 0)).collect(),
        pdbs,
        priority_classes,
        namespaces: None,
        pod_groups: Vec::new(),
        jobs: Vec::new(),
    }
}

/// The 5,000-node / 150,000-pod view, built once.
fn big() -> &'static View {
    static V: OnceLock<View> = OnceLock::new();
    V.get_or_init(|| {
        let v = View::build(objects(NODES), policy());
        assert_eq!((v.node_count(), v.pod_count()), (NODES, NODES * PER_NODE));
        v
    })
}

/// Pods touched by successive events: a stride through the cluster.
fn target(i: usize) -> usize {
    i.wrapping_mul(7919) % (NODES * PER_NODE)
}

/// `POOL` pod updates (annotation changed, as a status or metadata update), ready to apply.
fn updates() -> &'static [Pod] {
    static U: OnceLock<Vec<Pod>> = OnceLock::new();
    U.get_or_init(|| (0..POOL).map(|i| pod(target(i), 1 + i as u64)).collect())
}

/// Update `i` as the watch hands it over: decoded into a pod of its own, which the view
/// takes without a copy (untimed where it is an input).
fn update(i: usize) -> PodRef {
    Arc::new(updates()[i % POOL].clone())
}

fn nodes_changed() -> &'static [Node] {
    static N: OnceLock<Vec<Node>> = OnceLock::new();
    N.get_or_init(|| {
        (0..POOL)
            .map(|i| {
                let mut n = node(i.wrapping_mul(769) % NODES);
                n.labels.insert("node.example.com/heartbeat".into(), i.to_string());
                n
            })
            .collect()
    })
}

mod event {
    use super::*;

    /// MODIFIED of a bound pod (same node): detach the old version, attach the new.
    #[divan::bench(sample_count = 200, sample_size = 20)]
    fn pod_update(bencher: Bencher) {
        let view = big();
        let mut i = 0;
        bencher
            .with_inputs(|| {
                i += 1;
                (view.clone(), update(i))
            })
            .bench_local_values(|(mut v, p)| {
                v.apply_pod(p, policy());
                v
            });
    }

    /// DELETED of a bound pod, then ADDED of its replacement (new name and UID, same node).
    #[divan::bench(sample_count = 200, sample_size = 20)]
    fn pod_delete_add(bencher: Bencher) {
        let view = big();
        let fresh: Vec<(String, Pod)> = (0..POOL)
            .map(|i| {
                let p = target(i);
                let old = pod(p, 0);
                let mut new = pod(p, 1);
                new.name = format!("{}-r", old.name);
                new.uid = uuid(9, p as u64);
                (old.key(), new)
            })
            .collect();
        let mut i = 0;
        bencher
            .with_inputs(|| {
                i += 1;
                let (k, p) = &fresh[i % POOL];
                (view.clone(), k.as_str(), Arc::new(p.clone()))
            })
            .bench_local_values(|(mut v, key, p)| {
                v.remove_pod(key, policy());
                v.apply_pod(p, policy());
                v
            });
    }

    /// MODIFIED of a Node (a label changed).
    #[divan::bench(sample_count = 200, sample_size = 20)]
    fn node_update(bencher: Bencher) {
        let (view, nodes) = (big(), nodes_changed());
        let mut i = 0;
        bencher
            .with_inputs(|| {
                i += 1;
                (view.clone(), nodes[i % POOL].clone())
            })
            .bench_local_values(|(mut v, n)| {
                v.apply_node(n);
                v
            });
    }

    /// What the watch does per pod event, in steady state: apply to the master copy, then
    /// publish a clone to a `ViewCell` (dropping the previously published one, whose
    /// now-unshared paths are freed here too).
    #[divan::bench(sample_count = 200, sample_size = 20)]
    fn pod_update_and_publish(bencher: Bencher) {
        let mut master = big().clone();
        let cell = ViewCell::default();
        cell.publish(master.clone());
        let mut i = 0;
        bencher
            .with_inputs(|| {
                i += 1;
                update(i)
            })
            .bench_local_values(|p| {
                master.apply_pod(p, policy());
                cell.publish(master.clone());
            });
    }

    /// What the watch does per pod event now: change the cell's staged view in place,
    /// with no reader in between (a burst of bindings no decision reads).
    #[divan::bench(sample_count = 200, sample_size = 20)]
    fn pod_update_staged(bencher: Bencher) {
        staged(bencher, Read::None);
    }

    /// The same, with a decision reading the view after every event and done with it
    /// before the next (names mode: a bind between two pods' calls). The cell lets go of
    /// the unread clone before the change, which then copies nothing.
    #[divan::bench(sample_count = 200, sample_size = 20)]
    fn pod_update_staged_read_each(bencher: Bencher) {
        staged(bencher, Read::EachDropped);
    }

    /// The same, with every read still held at the next event (a decision in flight as
    /// the bind arrives): the change copies the paths it touches.
    #[divan::bench(sample_count = 200, sample_size = 20)]
    fn pod_update_staged_read_held(bencher: Bencher) {
        staged(bencher, Read::EachHeld);
    }

    enum Read {
        None,
        EachDropped,
        EachHeld,
    }

    fn staged(bencher: Bencher, read: Read) {
        let cell = ViewCell::default();
        cell.change(|v| *v = big().clone());
        cell.open();
        let mut i = 0;
        let mut held = None;
        bencher
            .with_inputs(|| {
                i += 1;
                update(i)
            })
            .bench_local_values(|p| {
                cell.change(|v| v.apply_pod(p, policy()));
                match read {
                    Read::None => {}
                    Read::EachDropped => drop(black_box(cell.load())),
                    Read::EachHeld => held = black_box(cell.load()),
                }
            });
        drop(held);
    }
}

mod publish {
    use super::*;

    /// `view.clone()` of the big view (persistent maps: O(1)).
    #[divan::bench(sample_count = 200, sample_size = 100)]
    fn clone(bencher: Bencher) {
        let view = big();
        bencher.bench_local(|| black_box(view).clone());
    }

    /// `ViewCell::publish(view.clone())`: clone, `Arc::new`, swap, drop the old `Arc`.
    #[divan::bench(sample_count = 200, sample_size = 100)]
    fn clone_arc_swap(bencher: Bencher) {
        let view = big();
        let cell = ViewCell::default();
        cell.publish(view.clone());
        bencher.bench_local(|| cell.publish(black_box(view).clone()));
    }
}

mod build {
    use super::*;

    /// `View::build` from already-decoded objects (nodes × 30 pods).
    #[divan::bench(args = [500, 5_000], sample_count = 5, sample_size = 1)]
    fn view(bencher: Bencher, nodes: usize) {
        let objs = objects(nodes);
        bencher.with_inputs(|| objs.clone()).bench_local_values(|o| View::build(o, policy()));
    }
}
