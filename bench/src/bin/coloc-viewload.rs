//! coloc-viewload: measures the watch-fed cluster view against an in-process fake
//! Kubernetes API server on loopback.
//!
//!     cargo run --release --locked --bin coloc-viewload -- \
//!         --nodes 5000 --pods-per-node 30 --rate 500 --seconds 10
//!
//! What it does, in order, all in one process and bounded in time (it stops by itself):
//!
//! 1. Starts a fake API server on 127.0.0.1 (axum, its own 1-thread runtime) that serves a
//!    synthetic cluster generated on the fly from the pod index (nothing is held in memory):
//!    `--nodes` Nodes, `--pods-per-node` Running Pods each (ReplicaSet-owned, labels,
//!    annotations, managedFields, requests; ~3 kB of JSON apiece), 16 Namespaces with a
//!    PDB each, 5 PriorityClasses, no Jobs. Lists honour `limit`/`continue` (kube-rs pages by 500), are streamed
//!    500 items per chunk (the extender lists pods unpaginated, decoding as they come), carry
//!    `metadata.resourceVersion`; the Pod watch streams newline-delimited
//!    `{"type":"MODIFIED","object":...}` events this tool feeds it; other watches stay open.
//!    Not `tests/fake_api`, which is for correctness (every object and its history kept,
//!    writes, resumed watches, faults): this one runs in the process it measures, so it
//!    holds nothing and spends little, and what is measured is the view's.
//! 2. Runs `cluster::watch::run` against it (`kube::Client` on `http://127.0.0.1:PORT`, in a
//!    2-worker runtime, like `serve`) and reports the initial sync time (spawn until
//!    `ViewCell::is_ready()`), peak RSS (VmHWM), steady-state RSS, and the view's share of
//!    memory: live heap bytes counted by a global allocator wrapper (before the watches
//!    start vs. once the view is ready) and the RSS growth after `malloc_trim(0)`.
//! 3. Burst: `--burst` pod MODIFIED events (pre-rendered) pushed as fast as the watch
//!    connection takes them; time from the first send until the last one is visible
//!    through `ViewCell::load()`.
//! 4. Event-to-visible latency: events at `--rate`/s for `--seconds`; each is stamped with
//!    its send `Instant` in a side table (pod key, sequence number carried in the
//!    label `viewload.example.com/seq`: the view keeps no annotation it does not read), and a dedicated thread polls `cell.load()`
//!    until that pod shows that sequence number (spinning for 50 µs, then napping 20 µs
//!    between looks, only while an event is outstanding: ~0.1 ms resolution).
//! 5. Decisions: `pipeline::replay` (= `pipeline::answer` with the `Context` it builds) for a
//!    filter with every node name and a preempt with `--candidates` nodes of UID victims,
//!    each call on a fresh `cell.load()`, `--calls` calls per verb idle and as many while
//!    pod events stream in at `--rate`/s; idle and loaded blocks are interleaved over
//!    `--rounds` rounds so machine noise hits both alike.
//!
//! `--metrics` installs `serve`'s Prometheus recorder first (the watch counts every event);
//! `--omit-current-healthy` serves PDBs without `status.currentHealthy`; `--heap-all` keeps
//! the heap count running to the end (a leak shows there, fragmentation does not). Figures
//! and method: docs/journal/performance.md, "Cluster view".

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use arc_swap::ArcSwap;
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::serve::ListenerExt;
use axum::Router;
use clap::Parser;
use coloc_extender::cluster::watch::{self, Freshness};
use coloc_extender::cluster::ViewCell;
use coloc_extender::pipeline::{self, Verb};
use coloc_extender::policy::Policy;
use tokio::sync::mpsc;

use coloc_bench::ids::{mix, uuid};
use coloc_bench::procstat::status_kib;

// ---- heap accounting --------------------------------------------------------------------

/// The system allocator, counting live bytes while `COUNTING` is on (sharded counters, so
/// threads do not fight over one cache line). Off during the timed phases.
struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);

#[repr(align(128))]
struct Shard(AtomicIsize);

static SHARDS: [Shard; 16] = [const { Shard(AtomicIsize::new(0)) }; 16];

fn shard() -> &'static AtomicIsize {
    thread_local! { static TAG: u8 = const { 0 }; }
    let addr = TAG.with(|t| t as *const u8 as usize);
    &SHARDS[((addr >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) & 15].0
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() && COUNTING.load(Ordering::Relaxed) {
            shard().fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() && COUNTING.load(Ordering::Relaxed) {
            shard().fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        if COUNTING.load(Ordering::Relaxed) {
            shard().fetch_sub(layout.size() as isize, Ordering::Relaxed);
        }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() && COUNTING.load(Ordering::Relaxed) {
            shard().fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn heap_live() -> isize {
    SHARDS.iter().map(|s| s.0.load(Ordering::Relaxed)).sum()
}

/// Returns freed heap pages to the OS (glibc), so RSS shows what is live.
fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> i32;
        }
        unsafe { malloc_trim(0) };
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Mem {
    rss_kb: u64,
    hwm_kb: u64,
}

fn mem() -> Mem {
    let field = |name: &str| status_kib("self", name).unwrap_or(0);
    Mem { rss_kb: field("VmRSS:"), hwm_kb: field("VmHWM:") }
}

fn mib_kb(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

fn mib_b(b: isize) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

// ---- the synthetic cluster ----------------------------------------------------------------

const NAMESPACES: usize = 16;
const APPS: usize = 64;
const SEQ_LABEL: &str = "viewload.example.com/seq";
/// Decision time: pods started in January 2026, long past every minRuntime.
const NOW: i64 = 1_800_000_000;
const TS: &str = "2026-01-05T10:00:00Z";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Online,
    Batch,
    Free,
}

impl Class {
    fn of_slot(slot: usize) -> Class {
        match slot % 5 {
            0 => Class::Online,
            4 => Class::Free,
            _ => Class::Batch,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Class::Online => "online",
            Class::Batch => "batch",
            Class::Free => "free",
        }
    }
    fn priority_class(self) -> (&'static str, i32) {
        match self {
            Class::Online => ("online-prod", 10000),
            Class::Batch => ("offline-batch", 5000),
            Class::Free => ("free-tier", 3000),
        }
    }
    /// 6 online × 2 cpu + 18 batch × 1 cpu + 6 free × 250m = 31.5 of a node's 32 cpu.
    fn requests(self) -> (&'static str, &'static str) {
        match self {
            Class::Online => ("2", "4Gi"),
            Class::Batch => ("1", "2Gi"),
            Class::Free => ("250m", "512Mi"),
        }
    }
}

#[derive(Clone, Copy)]
struct Spec {
    nodes: usize,
    per_node: usize,
}

impl Spec {
    fn pods(&self) -> usize {
        self.nodes * self.per_node
    }
}

fn node_name(i: usize) -> String {
    format!("node-{i:05}")
}

struct PodId {
    node: usize,
    class: Class,
    namespace: String,
    app: String,
    rs: String,
    hash: String,
    name: String,
}

fn pod_id(spec: Spec, p: usize) -> PodId {
    let node = p / spec.per_node;
    let class = Class::of_slot(p % spec.per_node);
    let team = p % NAMESPACES;
    let app = format!("{}-app-{:02}", class.name(), (p / NAMESPACES) % APPS);
    let hash =
        format!("{:010x}", mix((team * 1000 + (p / NAMESPACES) % APPS) as u64 * 3 + class as u64) & 0xff_ffff_ffff);
    let rs = format!("{app}-{hash}");
    let name = format!("{rs}-{p:05x}");
    PodId { node, class, namespace: format!("team-{team:02}"), app, rs, hash, name }
}

fn pod_key(spec: Spec, p: usize) -> String {
    let id = pod_id(spec, p);
    format!("{}/{}", id.namespace, id.name)
}

fn pod_uid(p: usize) -> String {
    uuid(1, p as u64)
}

/// One Pod as the API server writes it (~3 kB).
fn write_pod(out: &mut String, spec: Spec, p: usize, rv: u64, seq: Option<u64>) {
    let id = pod_id(spec, p);
    let (pc, prio) = id.class.priority_class();
    let (cpu, memory) = id.class.requests();
    let node = node_name(id.node);
    let uid = pod_uid(p);
    let rs_uid = uuid(2, mix(p as u64 % (NAMESPACES * APPS) as u64));
    let h = mix(p as u64 ^ 0x5eed);
    let seq_label = seq.map(|s| format!(r#","{SEQ_LABEL}":"{s}""#)).unwrap_or_default();
    let _ = write!(
        out,
        concat!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","generateName":"{rs}-","namespace":"{ns}","uid":"{uid}","resourceVersion":"{rv}","creationTimestamp":"{ts}","#,
            r#""labels":{{"app":"{app}","app.kubernetes.io/name":"{app}","app.kubernetes.io/part-of":"{ns}","pod-template-hash":"{hash}","workload-class":"{class}","team":"{ns}"{seq_label}}},"#,
            r#""annotations":{{"kubectl.kubernetes.io/restartedAt":"{ts}","prometheus.io/scrape":"true","prometheus.io/port":"9090"}},"#,
            r#""ownerReferences":[{{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"{rs}","uid":"{rs_uid}","controller":true,"blockOwnerDeletion":true}}],"#,
            r#""managedFields":[{{"manager":"kube-controller-manager","operation":"Update","apiVersion":"v1","time":"{ts}","fieldsType":"FieldsV1","fieldsV1":{{"f:metadata":{{"f:generateName":{{}},"f:labels":{{".":{{}},"f:app":{{}},"f:pod-template-hash":{{}}}},"f:ownerReferences":{{".":{{}},"k:{{\"uid\":\"{rs_uid}\"}}":{{}}}}}},"f:spec":{{"f:containers":{{"k:{{\"name\":\"main\"}}":{{".":{{}},"f:image":{{}},"f:name":{{}},"f:resources":{{".":{{}},"f:requests":{{".":{{}},"f:cpu":{{}},"f:memory":{{}}}}}}}}}}}}}}}},"#,
            r#"{{"manager":"kubelet","operation":"Update","apiVersion":"v1","time":"{ts}","fieldsType":"FieldsV1","fieldsV1":{{"f:status":{{"f:conditions":{{}},"f:containerStatuses":{{}},"f:hostIP":{{}},"f:phase":{{}},"f:podIP":{{}},"f:startTime":{{}}}}}},"subresource":"status"}}]}},"#,
            r#""spec":{{"containers":[{{"name":"main","image":"registry.example.com/{ns}/{app}:v1.4.2","ports":[{{"name":"http","containerPort":8080,"protocol":"TCP"}}],"env":[{{"name":"LOG_LEVEL","value":"info"}}],"#,
            r#""resources":{{"requests":{{"cpu":"{cpu}","memory":"{memory}"}},"limits":{{"memory":"{memory}"}}}},"volumeMounts":[{{"name":"kube-api-access","mountPath":"/var/run/secrets/kubernetes.io/serviceaccount","readOnly":true}}],"#,
            r#""terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}}],"restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","#,
            r#""serviceAccountName":"default","nodeName":"{node}","schedulerName":"default-scheduler","priorityClassName":"{pc}","priority":{prio},"preemptionPolicy":"PreemptLowerPriority","enableServiceLinks":true,"#,
            r#""tolerations":[{{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}},{{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}}],"#,
            r#""volumes":[{{"name":"kube-api-access","projected":{{"sources":[{{"serviceAccountToken":{{"expirationSeconds":3607,"path":"token"}}}}],"defaultMode":420}}}}]}},"#,
            r#""status":{{"phase":"Running","conditions":[{{"type":"Initialized","status":"True","lastTransitionTime":"{ts}"}},{{"type":"Ready","status":"True","lastTransitionTime":"{ts}"}},{{"type":"ContainersReady","status":"True","lastTransitionTime":"{ts}"}},{{"type":"PodScheduled","status":"True","lastTransitionTime":"{ts}"}}],"#,
            r#""hostIP":"10.0.{n1}.{n2}","podIP":"10.{p1}.{p2}.{p3}","podIPs":[{{"ip":"10.{p1}.{p2}.{p3}"}}],"startTime":"{ts}","#,
            r#""containerStatuses":[{{"name":"main","state":{{"running":{{"startedAt":"{ts}"}}}},"lastState":{{}},"ready":true,"restartCount":0,"image":"registry.example.com/{ns}/{app}:v1.4.2","imageID":"registry.example.com/{ns}/{app}@sha256:{h:016x}{h:016x}{h:016x}{h:016x}","containerID":"containerd://{h:016x}{h:016x}{h:016x}{h:016x}","started":true}}],"qosClass":"Burstable"}}}}"#,
        ),
        name = id.name,
        rs = id.rs,
        ns = id.namespace,
        uid = uid,
        rv = rv,
        ts = TS,
        app = id.app,
        hash = id.hash,
        class = id.class.name(),
        seq_label = seq_label,
        rs_uid = rs_uid,
        cpu = cpu,
        memory = memory,
        node = node,
        pc = pc,
        prio = prio,
        n1 = id.node / 256 % 256,
        n2 = id.node % 256,
        p1 = 64 + (p >> 16) % 64,
        p2 = (p >> 8) % 256,
        p3 = p % 256,
        h = h,
    );
}

fn write_node(out: &mut String, i: usize, rv: u64) {
    let name = node_name(i);
    let offline = if i % 3 != 0 { r#","colocation.example.com/offline-allowed":"true""# } else { "" };
    let gpu = if i % 10 == 0 { r#","example.com/gpu":"8""# } else { "" };
    let res = format!(r#"{{"cpu":"32","memory":"128Gi","ephemeral-storage":"500Gi","pods":"110"{gpu}}}"#);
    let _ = write!(
        out,
        concat!(
            r#"{{"apiVersion":"v1","kind":"Node","metadata":{{"name":"{name}","uid":"{uid}","resourceVersion":"{rv}","creationTimestamp":"{ts}","#,
            r#""labels":{{"kubernetes.io/arch":"amd64","kubernetes.io/hostname":"{name}","kubernetes.io/os":"linux","topology.kubernetes.io/zone":"zone-{zone}","node.example.com/pool":"{pool}"{offline}}},"#,
            r#""annotations":{{"node.alpha.kubernetes.io/ttl":"0","volumes.kubernetes.io/controller-managed-attach-detach":"true"}}}},"#,
            r#""spec":{{"podCIDR":"10.{a}.{b}.0/24","podCIDRs":["10.{a}.{b}.0/24"],"providerID":"example://{name}"}},"#,
            r#""status":{{"capacity":{res},"allocatable":{res},"conditions":["#,
            r#"{{"type":"MemoryPressure","status":"False","lastHeartbeatTime":"{ts}","lastTransitionTime":"{ts}","reason":"KubeletHasSufficientMemory","message":"kubelet has sufficient memory available"}},"#,
            r#"{{"type":"DiskPressure","status":"False","lastHeartbeatTime":"{ts}","lastTransitionTime":"{ts}","reason":"KubeletHasNoDiskPressure","message":"kubelet has no disk pressure"}},"#,
            r#"{{"type":"PIDPressure","status":"False","lastHeartbeatTime":"{ts}","lastTransitionTime":"{ts}","reason":"KubeletHasSufficientPID","message":"kubelet has sufficient PID available"}},"#,
            r#"{{"type":"Ready","status":"True","lastHeartbeatTime":"{ts}","lastTransitionTime":"{ts}","reason":"KubeletReady","message":"kubelet is posting ready status"}}],"#,
            r#""addresses":[{{"type":"InternalIP","address":"10.0.{a}.{b}"}},{{"type":"Hostname","address":"{name}"}}],"daemonEndpoints":{{"kubeletEndpoint":{{"Port":10250}}}},"#,
            r#""nodeInfo":{{"machineID":"m{i}","systemUUID":"u{i}","bootID":"b{i}","kernelVersion":"6.1.0-13-amd64","osImage":"Debian GNU/Linux 12","containerRuntimeVersion":"containerd://1.7.13","kubeletVersion":"v1.35.0","kubeProxyVersion":"","operatingSystem":"linux","architecture":"amd64"}}}}}}"#,
        ),
        name = name,
        uid = uuid(3, i as u64),
        rv = rv,
        ts = TS,
        zone = i % 3 + 1,
        pool = if i % 10 == 0 { "gpu" } else { "general" },
        offline = offline,
        a = i / 256 % 256,
        b = i % 256,
        res = res,
        i = i,
    );
}

/// PDB `i` covers the batch pods of namespace `team-i` (`healthy` of them, as the
/// disruption controller last counted).
fn write_pdb(out: &mut String, i: usize, healthy: Option<usize>) {
    let current = healthy.map(|h| format!(r#""currentHealthy":{h},"#)).unwrap_or_default();
    let _ = write!(
        out,
        concat!(
            r#"{{"apiVersion":"policy/v1","kind":"PodDisruptionBudget","metadata":{{"name":"batch-pdb","namespace":"team-{i:02}","uid":"{uid}","resourceVersion":"900"}},"#,
            r#""spec":{{"maxUnavailable":"10%","selector":{{"matchLabels":{{"workload-class":"batch"}}}}}},"#,
            r#""status":{{{current}"desiredHealthy":0,"disruptionsAllowed":500,"expectedPods":0,"observedGeneration":1}}}}"#,
        ),
        i = i,
        uid = uuid(4, i as u64),
        current = current,
    );
}

/// Namespace `team-i`, where the pods of every `NAMESPACES`th index run.
fn write_namespace(out: &mut String, i: usize) {
    let _ = write!(
        out,
        r#"{{"apiVersion":"v1","kind":"Namespace","metadata":{{"name":"team-{i:02}","uid":"{uid}","resourceVersion":"700","labels":{{"kubernetes.io/metadata.name":"team-{i:02}"}}}},"spec":{{"finalizers":["kubernetes"]}},"status":{{"phase":"Active"}}}}"#,
        uid = uuid(6, i as u64),
    );
}

/// Batch pods in namespace `team-i`: what the disruption controller would count.
fn batch_pods_in(spec: Spec, i: usize) -> usize {
    (0..spec.pods()).filter(|p| p % NAMESPACES == i && Class::of_slot(p % spec.per_node) == Class::Batch).count()
}

const PRIORITY_CLASSES: [(&str, i32); 5] = [
    ("system-cluster-critical", 2_000_000_000),
    ("online-prod", 10000),
    ("offline-batch", 5000),
    ("free-tier", 3000),
    ("koord-batch", 5500),
];

fn write_priority_class(out: &mut String, i: usize) {
    let (name, value) = PRIORITY_CLASSES[i];
    let _ = write!(
        out,
        r#"{{"apiVersion":"scheduling.k8s.io/v1","kind":"PriorityClass","metadata":{{"name":"{name}","uid":"{uid}","resourceVersion":"800"}},"value":{value},"preemptionPolicy":"PreemptLowerPriority"}}"#,
        uid = uuid(5, i as u64),
    );
}

/// The preemptor: an online pod (class online preempts batch and free) that fits nowhere.
fn write_preemptor(out: &mut String) {
    out.push_str(concat!(
        r#"{"metadata":{"name":"online-api-0","namespace":"online","uid":"11111111-2222-4333-8444-555555555555","resourceVersion":"1","creationTimestamp":"2026-01-05T10:00:00Z","#,
        r#""labels":{"app":"online-api","workload-class":"online"},"ownerReferences":[{"apiVersion":"apps/v1","kind":"StatefulSet","name":"online-api","uid":"21111111-2222-4333-8444-555555555555","controller":true}]},"#,
        r#""spec":{"containers":[{"name":"main","image":"registry.example.com/online/api:v1","resources":{"requests":{"cpu":"8","memory":"16Gi"}}}],"#,
        r#""priorityClassName":"online-prod","priority":10000,"preemptionPolicy":"PreemptLowerPriority","schedulerName":"default-scheduler"},"#,
        r#""status":{"phase":"Pending"}}"#,
    ));
}

/// Filter with every node by name (`nodeCacheCapable: true`).
fn filter_body(spec: Spec) -> Vec<u8> {
    let mut s = String::from(r#"{"Pod":"#);
    write_preemptor(&mut s);
    s.push_str(r#","Nodes":null,"NodeNames":["#);
    for i in 0..spec.nodes {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, r#""{}""#, node_name(i));
    }
    s.push_str("]}");
    s.into_bytes()
}

/// Preempt with `candidates` nodes spread over the cluster, each with its batch and free
/// pods as UID-only victims (what kube-scheduler sends with `nodeCacheCapable: true`).
fn preempt_body(spec: Spec, candidates: usize) -> Vec<u8> {
    let mut s = String::from(r#"{"Pod":"#);
    write_preemptor(&mut s);
    s.push_str(r#","NodeNameToVictims":null,"NodeNameToMetaVictims":{"#);
    let candidates = candidates.min(spec.nodes).max(1);
    for c in 0..candidates {
        let node = c * spec.nodes / candidates;
        if c > 0 {
            s.push(',');
        }
        let _ = write!(s, r#""{}":{{"Pods":["#, node_name(node));
        let mut first = true;
        for p in node * spec.per_node..(node + 1) * spec.per_node {
            if Class::of_slot(p % spec.per_node) == Class::Online {
                continue;
            }
            if !first {
                s.push(',');
            }
            first = false;
            let _ = write!(s, r#"{{"UID":"{}"}}"#, pod_uid(p));
        }
        s.push_str(r#"],"NumPDBViolations":0}"#);
    }
    s.push_str("}}");
    s.into_bytes()
}

// ---- the fake API server -----------------------------------------------------------------
// Lists and watches only, rendered from the pod index: nothing stored (see the top).

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Pod,
    Node,
    Pdb,
    PriorityClass,
    /// Served empty: the synthetic cluster has no Jobs (the view requires the kind).
    Job,
    /// The pods' namespaces (the view requires the kind).
    Namespace,
}

struct Server {
    spec: Spec,
    current_healthy: bool,
    /// The Pod watch's event feed: taken by the first Pod watch request.
    pod_feed: Mutex<Option<mpsc::Receiver<Bytes>>>,
    pod_watch_open: AtomicBool,
    /// Watch requests beyond the first per kind: reconnects (there should be none).
    rewatches: AtomicUsize,
    watches: Mutex<HashMap<&'static str, usize>>,
    list_requests: AtomicUsize,
    list_bytes: AtomicU64,
    pod_list_bytes: AtomicU64,
    /// Time spent rendering list pages (server side of the initial sync).
    render_ns: AtomicU64,
}

impl Server {
    fn count(&self, kind: Kind) -> usize {
        match kind {
            Kind::Pod => self.spec.pods(),
            Kind::Node => self.spec.nodes,
            Kind::Pdb => NAMESPACES,
            Kind::PriorityClass => PRIORITY_CLASSES.len(),
            Kind::Job => 0,
            Kind::Namespace => NAMESPACES,
        }
    }
}

const LIST_RV: u64 = 1000;

async fn list_or_watch(
    State((server, kind)): State<(Arc<Server>, Kind)>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if matches!(q.get("watch").map(String::as_str), Some("true" | "1")) {
        {
            let name = match kind {
                Kind::Pod => "Pod",
                Kind::Node => "Node",
                Kind::Pdb => "PodDisruptionBudget",
                Kind::PriorityClass => "PriorityClass",
                Kind::Job => "Job",
                Kind::Namespace => "Namespace",
            };
            let mut w = server.watches.lock().unwrap();
            let n = w.entry(name).or_default();
            *n += 1;
            if *n > 1 {
                server.rewatches.fetch_add(1, Ordering::Relaxed);
            }
        }
        let feed = if kind == Kind::Pod { server.pod_feed.lock().unwrap().take() } else { None };
        return match feed {
            Some(rx) => {
                server.pod_watch_open.store(true, Ordering::SeqCst);
                let stream = futures::stream::unfold(rx, |mut rx| async move {
                    rx.recv().await.map(|b| (Ok::<_, std::io::Error>(b), rx))
                });
                Body::from_stream(stream).into_response()
            }
            // Nothing changes: the stream stays open.
            None => Body::from_stream(futures::stream::pending::<Result<Bytes, std::io::Error>>()).into_response(),
        };
    }
    let total = server.count(kind);
    let from: usize = q.get("continue").and_then(|c| c.parse().ok()).unwrap_or(0).min(total);
    let limit: usize = q.get("limit").and_then(|l| l.parse().ok()).filter(|l| *l > 0).unwrap_or(usize::MAX);
    let to = from.saturating_add(limit).min(total);
    let (api_version, list_kind) = match kind {
        Kind::Pod => ("v1", "PodList"),
        Kind::Node => ("v1", "NodeList"),
        Kind::Pdb => ("policy/v1", "PodDisruptionBudgetList"),
        Kind::PriorityClass => ("scheduling.k8s.io/v1", "PriorityClassList"),
        Kind::Job => ("batch/v1", "JobList"),
        Kind::Namespace => ("v1", "NamespaceList"),
    };
    let cont = if to < total { format!(r#","continue":"{to}""#) } else { String::new() };
    let header = format!(
        r#"{{"apiVersion":"{api_version}","kind":"{list_kind}","metadata":{{"resourceVersion":"{LIST_RV}"{cont}}},"items":["#
    );
    server.list_requests.fetch_add(1, Ordering::Relaxed);
    // Streamed a chunk at a time, as the API server streams a list it serves from its
    // watch cache: an unpaginated list of 150,000 pods is never one string here either.
    let chunks = futures::stream::unfold(Some(from), move |next| {
        let (server, header) = (server.clone(), header.clone());
        async move {
            let start = next?;
            let started = Instant::now();
            let end = (start + ITEMS_PER_CHUNK).min(to);
            let mut out = String::with_capacity((end - start) * 3300 + 256);
            if start == from {
                out.push_str(&header);
            }
            for i in start..end {
                if i > from {
                    out.push(',');
                }
                match kind {
                    Kind::Pod => write_pod(&mut out, server.spec, i, 100 + i as u64 % 800, None),
                    Kind::Node => write_node(&mut out, i, 100 + i as u64 % 800),
                    Kind::Pdb => write_pdb(&mut out, i, server.current_healthy.then(|| batch_pods_in(server.spec, i))),
                    Kind::PriorityClass => write_priority_class(&mut out, i),
                    Kind::Job => unreachable!("no Jobs are served"),
                    Kind::Namespace => write_namespace(&mut out, i),
                }
            }
            let next = if end < to {
                Some(end)
            } else {
                out.push_str("]}");
                None
            };
            server.list_bytes.fetch_add(out.len() as u64, Ordering::Relaxed);
            if kind == Kind::Pod {
                server.pod_list_bytes.fetch_add(out.len() as u64, Ordering::Relaxed);
            }
            server.render_ns.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
            Some((Ok::<_, std::io::Error>(Bytes::from(out)), next))
        }
    });
    ([("content-type", "application/json")], Body::from_stream(chunks)).into_response()
}

/// Items rendered per chunk of a streamed list body.
const ITEMS_PER_CHUNK: usize = 500;

async fn start_server(server: Arc<Server>) -> anyhow::Result<SocketAddr> {
    let app = Router::new()
        .route("/api/v1/pods", get(list_or_watch).with_state((server.clone(), Kind::Pod)))
        .route("/api/v1/nodes", get(list_or_watch).with_state((server.clone(), Kind::Node)))
        .route("/apis/policy/v1/poddisruptionbudgets", get(list_or_watch).with_state((server.clone(), Kind::Pdb)))
        .route(
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            get(list_or_watch).with_state((server.clone(), Kind::PriorityClass)),
        )
        .route("/apis/batch/v1/jobs", get(list_or_watch).with_state((server.clone(), Kind::Job)))
        .route("/api/v1/namespaces", get(list_or_watch).with_state((server, Kind::Namespace)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    // Like the real API server (Go sets TCP_NODELAY by default): without it, Nagle's
    // algorithm and the client's delayed ACKs hold small watch events back for up to 40 ms.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(addr)
}

// ---- events --------------------------------------------------------------------------------

/// Pods touched by successive events: a stride through every pod, so consecutive events
/// land on different nodes and namespaces.
struct Events {
    spec: Spec,
    stride: usize,
    next: usize,
    seq: u64,
}

impl Events {
    fn new(spec: Spec) -> Events {
        let total = spec.pods();
        let stride = [7919, 7907, 7901, 7883, 1].into_iter().find(|s| total % s != 0).unwrap_or(1);
        Events { spec, stride, next: 0, seq: 0 }
    }

    /// The next MODIFIED event: (pod key, sequence number, the event line).
    fn next(&mut self) -> (String, u64, Bytes) {
        self.seq += 1;
        let p = self.next;
        self.next = (self.next + self.stride) % self.spec.pods();
        let mut s = String::with_capacity(3400);
        s.push_str(r#"{"type":"MODIFIED","object":"#);
        write_pod(&mut s, self.spec, p, 1_000_000 + self.seq, Some(self.seq));
        s.push_str("}\n");
        (pod_key(self.spec, p), self.seq, Bytes::from(s))
    }
}

/// The sequence number the view shows for `key` (0 if none).
fn visible_seq(cell: &ViewCell, key: &str) -> u64 {
    cell.load().and_then(|v| v.pod(key).and_then(|p| p.labels.get(SEQ_LABEL)).and_then(|s| s.parse().ok())).unwrap_or(0)
}

/// Polls `cell.load()` until `key` shows `seq` or later; the instant it was seen. Spins
/// (yielding) for the first `spin`, then sleeps `nap` between looks, so that on 2 cores the
/// poller does not take the CPU the watch needs to apply the event.
fn wait_visible(
    cell: &ViewCell,
    key: &str,
    seq: u64,
    spin: Duration,
    nap: Duration,
    limit: Duration,
) -> Option<Instant> {
    let start = Instant::now();
    loop {
        if visible_seq(cell, key) >= seq {
            return Some(Instant::now());
        }
        let waited = start.elapsed();
        if waited > limit {
            return None;
        }
        if waited < spin {
            std::hint::spin_loop();
            std::thread::yield_now();
        } else {
            std::thread::sleep(nap);
        }
    }
}

/// Sends events at `rate`/s while `on` (until `stop`), stamping each in `side` if given.
fn feeder(
    mut events: Events,
    tx: mpsc::Sender<Bytes>,
    rate: f64,
    on: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    side: Option<std_mpsc::Sender<(String, u64, Instant)>>,
) -> (Events, u64) {
    let period = Duration::from_secs_f64(1.0 / rate);
    let mut sent = 0u64;
    let mut next_at = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if !on.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(1));
            next_at = Instant::now();
            continue;
        }
        let now = Instant::now();
        if next_at > now {
            std::thread::sleep(next_at - now);
        }
        next_at += period;
        let (key, seq, line) = events.next();
        let at = Instant::now();
        if let Some(side) = &side {
            let _ = side.send((key, seq, at));
        }
        if tx.blocking_send(line).is_err() {
            break;
        }
        sent += 1;
    }
    (events, sent)
}

// ---- statistics ----------------------------------------------------------------------------

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

struct Stats {
    n: usize,
    p50: Duration,
    p90: Duration,
    p99: Duration,
    max: Duration,
}

fn stats(mut v: Vec<Duration>) -> Stats {
    v.sort_unstable();
    Stats {
        n: v.len(),
        p50: percentile(&v, 0.50),
        p90: percentile(&v, 0.90),
        p99: percentile(&v, 0.99),
        max: v.last().copied().unwrap_or_default(),
    }
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "n={} p50={:.3} ms p90={:.3} ms p99={:.3} ms max={:.3} ms",
            self.n,
            ms(self.p50),
            ms(self.p90),
            ms(self.p99),
            ms(self.max)
        )
    }
}

// ---- main ------------------------------------------------------------------------------------

#[derive(Parser, Debug)]
#[command(
    name = "coloc-viewload",
    about = "Measure the watch-fed cluster view against an in-process fake API server (loopback)"
)]
struct Args {
    /// Nodes in the synthetic cluster.
    #[arg(long, default_value_t = 5000)]
    nodes: usize,
    /// Running pods per node (150,000 pods at the defaults).
    #[arg(long, default_value_t = 30)]
    pods_per_node: usize,
    /// Pod events per second for the latency phases.
    #[arg(long, default_value_t = 500.0)]
    rate: f64,
    /// Length of the event-to-visible latency phase, in seconds.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Pod MODIFIED events in the throughput burst (0: skip).
    #[arg(long, default_value_t = 50_000)]
    burst: usize,
    /// Decision calls per verb, idle and again under load (0: skip the decision phase).
    #[arg(long, default_value_t = 2000)]
    calls: usize,
    /// Preempt candidate nodes (each with its 24 batch and free pods as victims).
    #[arg(long, default_value_t = 100)]
    candidates: usize,
    /// Idle/loaded blocks of the decision phase are interleaved over this many rounds.
    #[arg(long, default_value_t = 4)]
    rounds: usize,
    /// Upper bound on each idle or loaded block of decision calls, in seconds (fewer calls
    /// are made if they are slow).
    #[arg(long, default_value_t = 20)]
    block_seconds: u64,
    /// Serve PDBs without `status.currentHealthy` (the view then takes
    /// `disruptionsAllowed` as is instead of recounting covered pods).
    #[arg(long)]
    omit_current_healthy: bool,
    /// Hard bound on the whole run, in seconds: past it the tool exits with status 3.
    #[arg(long, default_value_t = 900)]
    limit: u64,
    /// Install `serve`'s Prometheus recorder first, so the watch's per-event counters cost
    /// what they cost in `serve` (without it the `metrics` macros are no-ops).
    #[arg(long)]
    metrics: bool,
    /// Keep counting live heap bytes through every phase (costs a few ns per allocation)
    /// and report it at the end: tells a leak from allocator fragmentation.
    #[arg(long)]
    heap_all: bool,
    /// Print the summary as one JSON object on the last line.
    #[arg(long)]
    json: bool,
}

fn main() -> std::process::ExitCode {
    COUNTING.store(true, Ordering::SeqCst);
    let args = Args::parse();
    let limit = args.limit;
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(limit));
        eprintln!("coloc-viewload: --limit {limit}s reached, giving up");
        std::process::exit(3);
    });
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    match run(args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> anyhow::Result<()> {
    if args.nodes == 0 || args.pods_per_node == 0 || !args.rate.is_finite() || args.rate <= 0.0 {
        bail!("--nodes, --pods-per-node and --rate must be positive");
    }
    let spec = Spec { nodes: args.nodes, per_node: args.pods_per_node };
    let mut summary = serde_json::Map::new();
    let mut put = |k: &str, v: serde_json::Value| {
        summary.insert(k.to_string(), v);
    };
    println!(
        "coloc-viewload: {} nodes, {} pods, {} cores",
        spec.nodes,
        spec.pods(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    // The API server gets its own runtime and thread, as if it were another process.
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("fake-apiserver")
        .enable_all()
        .build()?;
    let client_rt = tokio::runtime::Builder::new_multi_thread().thread_name("watch").enable_all().build()?;
    let (feed_tx, feed_rx) = mpsc::channel::<Bytes>(1024);
    let server = Arc::new(Server {
        spec,
        current_healthy: !args.omit_current_healthy,
        pod_feed: Mutex::new(Some(feed_rx)),
        pod_watch_open: AtomicBool::new(false),
        rewatches: AtomicUsize::new(0),
        watches: Mutex::new(HashMap::new()),
        list_requests: AtomicUsize::new(0),
        list_bytes: AtomicU64::new(0),
        pod_list_bytes: AtomicU64::new(0),
        render_ns: AtomicU64::new(0),
    });
    let addr = server_rt.block_on(start_server(server.clone()))?;
    let policy = Policy::builtin_default().enforced();
    if args.metrics {
        let _ = coloc_extender::http::prometheus::handle();
    }

    // ---- initial sync ----
    trim();
    let before = mem();
    let heap_before = heap_live();
    let cell = Arc::new(ViewCell::default());
    let fresh = Arc::new(Freshness::default());
    let started = Instant::now();
    {
        let _guard = client_rt.enter();
        let client = kube::Client::try_from(kube::Config::new(format!("http://{addr}").parse()?))?;
        client_rt.spawn(watch::run(
            client,
            cell.clone(),
            Arc::new(ArcSwap::from_pointee(policy.clone())),
            fresh,
            Duration::from_millis(500),
        ));
    }
    let sync_bound = Duration::from_secs(args.limit);
    while !cell.is_ready() {
        if started.elapsed() > sync_bound {
            bail!("the view never became ready");
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    let sync = started.elapsed();
    let view = cell.load().context("ready but no view")?;
    if view.node_count() != spec.nodes || view.pod_count() != spec.pods() {
        bail!(
            "view has {} nodes / {} pods, expected {} / {}",
            view.node_count(),
            view.pod_count(),
            spec.nodes,
            spec.pods()
        );
    }
    drop(view);
    let render = Duration::from_nanos(server.render_ns.load(Ordering::Relaxed));
    let pod_bytes = server.pod_list_bytes.load(Ordering::Relaxed);
    println!(
        "initial sync: {:.2} s until ready ({} list requests, {:.1} MiB of JSON, {:.0} B per pod; the fake server spent {:.2} s rendering pages)",
        sync.as_secs_f64(),
        server.list_requests.load(Ordering::Relaxed),
        server.list_bytes.load(Ordering::Relaxed) as f64 / 1048576.0,
        pod_bytes as f64 / spec.pods() as f64,
        render.as_secs_f64()
    );
    put("sync_s", sync.as_secs_f64().into());
    put("sync_render_s", render.as_secs_f64().into());
    put("pod_json_bytes", (pod_bytes / spec.pods() as u64).into());

    // Let the watch tasks settle (the pod watch connects right after the last page).
    let settle = Instant::now();
    while !server.pod_watch_open.load(Ordering::SeqCst) && settle.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(5));
    }
    if !server.pod_watch_open.load(Ordering::SeqCst) {
        bail!("the Pod watch never connected");
    }
    std::thread::sleep(Duration::from_millis(500));
    let synced = mem();
    let heap_after = heap_live();
    trim();
    let trimmed = mem();
    COUNTING.store(args.heap_all, Ordering::SeqCst);
    println!(
        "memory: RSS {:.1} MiB before the watches started; after sync VmHWM {:.1} MiB, VmRSS {:.1} MiB, {:.1} MiB after malloc_trim",
        mib_kb(before.rss_kb),
        mib_kb(synced.hwm_kb),
        mib_kb(synced.rss_kb),
        mib_kb(trimmed.rss_kb)
    );
    println!(
        "view share: live heap +{:.1} MiB (allocator count), RSS +{:.1} MiB (trimmed RSS after sync - RSS before)",
        mib_b(heap_after - heap_before),
        mib_kb(trimmed.rss_kb.saturating_sub(before.rss_kb))
    );
    put("rss_before_mib", mib_kb(before.rss_kb).into());
    put("hwm_sync_mib", mib_kb(synced.hwm_kb).into());
    put("rss_sync_mib", mib_kb(synced.rss_kb).into());
    put("rss_trimmed_mib", mib_kb(trimmed.rss_kb).into());
    put("view_heap_mib", mib_b(heap_after - heap_before).into());
    put("view_rss_mib", mib_kb(trimmed.rss_kb.saturating_sub(before.rss_kb)).into());

    let mut events = Events::new(spec);

    // ---- burst ----
    if args.burst > 0 {
        let lines: Vec<(String, u64, Bytes)> = (0..args.burst).map(|_| events.next()).collect();
        let (last_key, last_seq) = (lines.last().unwrap().0.clone(), lines.last().unwrap().1);
        let gen_before = cell.load().map_or(0, |v| v.generation());
        let tx = feed_tx.clone();
        let started = Instant::now();
        let sender = std::thread::spawn(move || {
            for (_, _, line) in lines {
                if tx.blocking_send(line).is_err() {
                    break;
                }
            }
            Instant::now()
        });
        let seen = wait_visible(
            &cell,
            &last_key,
            last_seq,
            Duration::ZERO,
            Duration::from_millis(1),
            Duration::from_secs(120),
        );
        let sent_all = sender.join().expect("burst sender");
        let Some(seen) = seen else { bail!("the burst's last event never became visible") };
        let took = seen - started;
        let gen_after = cell.load().map_or(0, |v| v.generation());
        let rate = args.burst as f64 / took.as_secs_f64();
        println!(
            "burst: {} pod MODIFIED events visible after {:.3} s = {:.0} events/s end to end (all sent after {:.3} s; view generation +{})",
            args.burst,
            took.as_secs_f64(),
            rate,
            (sent_all - started).as_secs_f64(),
            gen_after - gen_before
        );
        put("burst_events", args.burst.into());
        put("burst_s", took.as_secs_f64().into());
        put("burst_events_per_s", rate.into());
        std::thread::sleep(Duration::from_millis(500));
    }

    // ---- event to visible at --rate ----
    if args.seconds > 0 {
        let (side_tx, side_rx) = std_mpsc::channel::<(String, u64, Instant)>();
        let on = Arc::new(AtomicBool::new(true));
        let stop = Arc::new(AtomicBool::new(false));
        let detector = {
            let cell = cell.clone();
            std::thread::spawn(move || {
                let mut lat = Vec::new();
                let mut lost = 0usize;
                for (key, seq, at) in side_rx {
                    match wait_visible(
                        &cell,
                        &key,
                        seq,
                        Duration::from_micros(50),
                        Duration::from_micros(20),
                        Duration::from_secs(10),
                    ) {
                        Some(seen) => lat.push(seen - at),
                        None => lost += 1,
                    }
                }
                (lat, lost)
            })
        };
        let feed = {
            let (tx, on, stop) = (feed_tx.clone(), on.clone(), stop.clone());
            let rate = args.rate;
            std::thread::spawn(move || feeder(events, tx, rate, on, stop, Some(side_tx)))
        };
        std::thread::sleep(Duration::from_secs(args.seconds));
        stop.store(true, Ordering::SeqCst);
        let (ev, sent) = feed.join().expect("feeder");
        events = ev;
        let (lat, lost) = detector.join().expect("detector");
        let s = stats(lat);
        println!(
            "event to visible at {}/s for {} s: {} sent, {} never seen; {}",
            args.rate, args.seconds, sent, lost, s
        );
        put("visible_p50_ms", ms(s.p50).into());
        put("visible_p99_ms", ms(s.p99).into());
        put("visible_max_ms", ms(s.max).into());
        put("visible_lost", lost.into());
    }

    // ---- decisions, idle vs. while events stream in ----
    if args.calls > 0 {
        let filter = filter_body(spec);
        let preempt = preempt_body(spec, args.candidates);
        // Fail loudly on a rejected payload: an error path would look wonderfully fast.
        let v = cell.load().context("no view")?;
        let t = Instant::now();
        let f = pipeline::replay(Verb::Filter, &filter, &policy, Some(&v), NOW)
            .map_err(|e| anyhow::anyhow!("filter rejected: {e}"))?;
        let tf = t.elapsed();
        let t = Instant::now();
        let p = pipeline::replay(Verb::Preempt, &preempt, &policy, Some(&v), NOW)
            .map_err(|e| anyhow::anyhow!("preempt rejected: {e}"))?;
        let tp = t.elapsed();
        drop(v);
        let preview = |b: &[u8]| String::from_utf8_lossy(&b[..b.len().min(120)]).into_owned();
        println!(
            "filter, {} node names ({} B): first call {:.3} ms, answer {} B: {}…",
            spec.nodes,
            filter.len(),
            ms(tf),
            f.body.len(),
            preview(&f.body)
        );
        println!(
            "preempt, {} candidates with UID victims ({} B): first call {:.3} ms, answer {} B: {}…",
            args.candidates.min(spec.nodes),
            preempt.len(),
            ms(tp),
            p.body.len(),
            preview(&p.body)
        );

        let on = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let feed = {
            let (tx, on, stop) = (feed_tx.clone(), on.clone(), stop.clone());
            let rate = args.rate;
            std::thread::spawn(move || feeder(events, tx, rate, on, stop, None))
        };
        let mut samples: HashMap<(&str, bool), Vec<Duration>> = HashMap::new();
        let rounds = args.rounds.max(1);
        let per_round = args.calls.div_ceil(rounds);
        let mut loaded_events = 0u64;
        let mut loaded_time = Duration::ZERO;
        for _ in 0..rounds {
            for loaded in [false, true] {
                on.store(loaded, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(200));
                let gen0 = cell.load().map_or(0, |v| v.generation());
                let t0 = Instant::now();
                for _ in 0..per_round {
                    if t0.elapsed() > Duration::from_secs(args.block_seconds) {
                        break;
                    }
                    for (verb, name, body) in [(Verb::Filter, "filter", &filter), (Verb::Preempt, "preempt", &preempt)]
                    {
                        let t = Instant::now();
                        let view = cell.load();
                        let a = pipeline::replay(verb, body, &policy, view.as_deref(), NOW).map(|a| a.body.len());
                        drop(view);
                        let d = t.elapsed();
                        if a.is_err() {
                            bail!("{name} failed under load");
                        }
                        samples.entry((name, loaded)).or_default().push(d);
                    }
                }
                if loaded {
                    loaded_events += cell.load().map_or(0, |v| v.generation()) - gen0;
                    loaded_time += t0.elapsed();
                }
            }
        }
        on.store(false, Ordering::SeqCst);
        stop.store(true, Ordering::SeqCst);
        let _ = feed.join();
        println!(
            "decisions: up to {} calls per verb and condition in {} interleaved rounds (at most {} s per block); while loaded the view advanced {} generations in {:.1} s ({:.0}/s; a pod update is 2)",
            per_round * rounds,
            rounds,
            args.block_seconds,
            loaded_events,
            loaded_time.as_secs_f64(),
            loaded_events as f64 / loaded_time.as_secs_f64().max(1e-9)
        );
        for name in ["filter", "preempt"] {
            let idle = stats(samples.remove(&(name, false)).unwrap_or_default());
            let busy = stats(samples.remove(&(name, true)).unwrap_or_default());
            let change = |a: Duration, b: Duration| (b.as_secs_f64() / a.as_secs_f64().max(1e-12) - 1.0) * 100.0;
            println!("  {name:7} idle:   {idle}");
            println!("  {name:7} loaded: {busy}");
            println!(
                "  {name:7} loaded vs idle: p50 {:+.1} %, p99 {:+.1} %",
                change(idle.p50, busy.p50),
                change(idle.p99, busy.p99)
            );
            put(&format!("{name}_idle_p50_ms"), ms(idle.p50).into());
            put(&format!("{name}_idle_p99_ms"), ms(idle.p99).into());
            put(&format!("{name}_loaded_p50_ms"), ms(busy.p50).into());
            put(&format!("{name}_loaded_p99_ms"), ms(busy.p99).into());
        }
    }

    let end = mem();
    trim();
    let end_trimmed = mem();
    println!(
        "memory at the end: VmHWM {:.1} MiB, VmRSS {:.1} MiB, {:.1} MiB after malloc_trim",
        mib_kb(end.hwm_kb),
        mib_kb(end.rss_kb),
        mib_kb(end_trimmed.rss_kb)
    );
    if args.heap_all {
        println!("live heap at the end: +{:.1} MiB since before the watches started", mib_b(heap_live() - heap_before));
        put("heap_end_mib", mib_b(heap_live() - heap_before).into());
    }
    put("hwm_end_mib", mib_kb(end.hwm_kb).into());
    put("rss_end_mib", mib_kb(end.rss_kb).into());
    put("rss_end_trimmed_mib", mib_kb(end_trimmed.rss_kb).into());
    let rewatches = server.rewatches.load(Ordering::Relaxed);
    put("rewatches", rewatches.into());
    if rewatches > 0 {
        println!("warning: {rewatches} watch reconnect(s) during the run");
    }
    if args.json {
        println!("{}", serde_json::Value::Object(summary));
    }
    drop(feed_tx);
    client_rt.shutdown_background();
    server_rt.shutdown_background();
    Ok(())
}
