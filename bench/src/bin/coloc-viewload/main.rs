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

mod cluster;
mod feed;
mod heap;
mod percentiles;
mod server;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use arc_swap::ArcSwap;
use axum::body::Bytes;
use clap::Parser;
use coloc_extender::cluster::watch::{self, Freshness};
use coloc_extender::cluster::ViewCell;
use coloc_extender::pipeline::{self, Verb};
use coloc_extender::policy::Policy;
use tokio::sync::mpsc;

use crate::cluster::{filter_body, preempt_body, Spec, NOW};
use crate::feed::{feeder, wait_visible, Events};
use crate::heap::{heap_live, mem, mib_b, mib_kb, trim, COUNTING};
use crate::percentiles::{ms, stats};
use crate::server::{start_server, Server};

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
