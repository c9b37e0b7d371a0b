//! coloc-loop: kube-scheduler's throughput behind no extender, the echo extender and
//! coloc-extender, side by side on one real control plane (coloc-testbed, KUBE_BIN_DIR).
//!
//!     cargo build --release --locked --workspace
//!     target/release/coloc-loop --nodes 1000 --offline-pods 30000 --pods 3000 \
//!         [--runs stock,echo,coloc-names,coloc-objects] [--rounds 1]
//!
//! The cluster (N nodes, M bound offline pods) is built once. Each run deletes the
//! previous run's online pods, creates K pending ones, starts the extender (if any) and
//! then kube-scheduler (client QPS 5,000, burst 10,000: binding is not the limit), and
//! times first bind to last bind. Reports figures, asserts none; prints a table and writes
//! `results.json` plus one folder per run (`result.json`, `scheduler-config.yaml`).
//!
//! `--storm P` measures a preemption storm instead (`storm`): P online pods that each need
//! four evictions, the extender with `--requeue`, a fresh control plane per run:
//!
//!     target/release/coloc-loop --storm 300 --runs stock,echo,coloc-names,coloc-objects
//!
//! (`echo` there registers coloc-echo for every verb, preempt included: the protocol's
//! floor, with kube-scheduler's own victims and nothing requeued; `requeue-only` is
//! coloc-extender in shadow mode with requeue: stock's decisions with nothing lost.) With
//! `--rounds N` it ends with each run's median time to place over the rounds, its spread,
//! and its ratio to the echo floor of its mode (the median of the per-round ratios: each
//! round's runs share the machine's state).

mod binds;
mod kinds;
mod report;
mod run;
mod storm;
mod world;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use coloc_testbed::Binaries;

use kinds::{Kind, Programs};

#[derive(Parser, Debug)]
#[command(
    name = "coloc-loop",
    about = "Scheduling throughput behind a real kube-scheduler: stock, echo extender, coloc-extender"
)]
struct Args {
    #[arg(long, default_value_t = 1000)]
    nodes: usize,
    /// Offline pods bound to the nodes before any run (round-robin).
    #[arg(long, default_value_t = 30_000)]
    offline_pods: usize,
    /// Pending online pods each run schedules.
    #[arg(long, default_value_t = 3000)]
    pods: usize,
    /// Which runs, in this order within each round.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "stock,echo,coloc-names,coloc-objects")]
    runs: Vec<Kind>,
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// coloc-extender binary (default: next to this one, i.e. target/release/).
    #[arg(long)]
    extender: Option<PathBuf>,
    /// coloc-echo binary (default: next to this one).
    #[arg(long)]
    echo: Option<PathBuf>,
    /// kube-scheduler's client QPS (burst is twice that).
    #[arg(long, default_value_t = 5000)]
    qps: u32,
    /// API requests in flight while building the cluster.
    #[arg(long, default_value_t = 256)]
    create_concurrency: usize,
    /// Per run: give up waiting for binds after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout_s: u64,
    /// Results go to a new timestamped folder below this one.
    #[arg(long, default_value = "target/loop-results")]
    out: PathBuf,
    /// Measure a preemption storm of this many online pods (each needing four evictions)
    /// instead of throughput; `echo` then answers preempt with kube-scheduler's own victims
    /// (the floor; echo-objects in objects mode), and echo-per-pod-verbs is skipped.
    #[arg(long, default_value_t = 0)]
    storm: usize,
    /// In a storm, pin the API server and etcd to the last CPU and kube-scheduler and the
    /// extender to the others (`taskset`): what a cluster whose control plane runs on nodes
    /// of its own would see, where the API writes do not take kube-scheduler's CPU.
    #[arg(long)]
    pin_control_plane: bool,

    /// Build the cluster, print how to reach it (kubeconfig, API server's PID), and keep it
    /// until interrupted instead of running: for measuring by hand on the same cluster
    #[arg(long)]
    hold: bool,
}

/// `git describe` of the working directory, to say which build was measured.
fn commit() -> Option<String> {
    let out = std::process::Command::new("git").args(["describe", "--always", "--dirty"]).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn write_json(path: &Path, value: &impl serde::Serialize) -> anyhow::Result<()> {
    std::fs::write(path, serde_json::to_string_pretty(value)? + "\n").with_context(|| path.display().to_string())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let bins = Binaries::find().map_err(anyhow::Error::msg)?;
    let needs = |k: &[Kind]| args.runs.iter().any(|r| k.contains(r));
    let extender = if needs(&[
        Kind::ColocNames,
        Kind::ColocNamesTls,
        Kind::ColocObjects,
        Kind::ColocPerPodVerbs,
        Kind::RequeueOnly,
    ]) {
        coloc_bench::sibling_program(args.extender.clone(), "coloc-extender")?
    } else {
        PathBuf::new()
    };
    let echo = if needs(&[Kind::Echo, Kind::EchoObjects, Kind::EchoPerPodVerbs]) {
        coloc_bench::sibling_program(args.echo.clone(), "coloc-echo")?
    } else {
        PathBuf::new()
    };
    let out = args.out.join(jiff::Timestamp::now().strftime("%Y%m%dT%H%M%SZ").to_string());
    std::fs::create_dir_all(&out)?;
    let commit = commit();
    eprintln!(
        "coloc-loop: {} nodes, {} offline pods, {} online pods per run; kube-scheduler client QPS {}, burst {}; commit {}; results in {}",
        args.nodes,
        args.offline_pods,
        args.pods,
        args.qps,
        args.qps * 2,
        commit.as_deref().unwrap_or("unknown"),
        out.display()
    );

    if args.storm > 0 {
        let settings = storm::Settings {
            pods: args.storm,
            qps: args.qps,
            timeout: Duration::from_secs(args.timeout_s),
            programs: Programs { extender: &extender, echo: &echo },
            pin_control_plane: args.pin_control_plane,
        };
        let mut results = Vec::new();
        for round in 1..=args.rounds {
            for &kind in args.runs.iter().filter(|k| !matches!(k, Kind::EchoPerPodVerbs)) {
                let dir = out.join(format!("storm-{}-{round}", kind.label()));
                std::fs::create_dir_all(&dir)?;
                let r = storm::one(&bins, kind, round, &settings, &dir).await?;
                eprintln!(
                    "coloc-loop: storm {}-{round}: {}/{} placed, p50 {:?} s, {} evictions, {} lost",
                    r.run, r.placed, r.pods, r.place_p50_s, r.evictions, r.lost
                );
                write_json(&dir.join("result.json"), &r)?;
                results.push(r);
            }
        }
        println!("{}", storm::table(&results));
        let medians = storm::medians(&results);
        println!("{}", storm::medians_table(&medians));
        write_json(
            &out.join("results.json"),
            &serde_json::json!({"commit": commit, "storm_pods": args.storm, "scheduler_qps": args.qps, "control_plane_pinned": args.pin_control_plane, "storm": results, "medians": medians}),
        )?;
        eprintln!("coloc-loop: wrote {}", out.join("results.json").display());
        return Ok(());
    }
    let world = world::World::build(&bins, args.nodes, args.offline_pods, args.create_concurrency).await?;
    if args.hold {
        eprintln!(
            "coloc-loop: holding the cluster: KUBECONFIG={} (admin), {} (the extender's user); kube-apiserver PID {:?}, etcd PID {:?}; Ctrl-C ends it",
            world.plane.admin_kubeconfig.display(),
            world.plane.extender_kubeconfig.display(),
            world.plane.apiserver.pid(),
            world.plane.etcd.pid(),
        );
        tokio::signal::ctrl_c().await?;
        return Ok(());
    }
    let settings = run::Settings {
        pods: args.pods,
        offline_pods: args.offline_pods,
        qps: args.qps,
        timeout: Duration::from_secs(args.timeout_s),
        programs: Programs { extender: &extender, echo: &echo },
    };
    let mut results = Vec::new();
    for round in 1..=args.rounds {
        let mut stock = None;
        for &kind in &args.runs {
            let dir = out.join(format!("{}-{round}", kind.label()));
            std::fs::create_dir_all(&dir)?;
            let mut r = run::one(&world, kind, round, &settings, &dir).await?;
            if kind == Kind::Stock {
                stock = Some(r.pods_per_s);
            }
            r.vs_stock = stock.map(|s| report::round3(r.pods_per_s / s));
            eprintln!(
                "coloc-loop: {}-{round}: {} bound, {:.1} pods/s, algorithm p50 {:?} ms",
                r.run, r.bound, r.pods_per_s, r.algorithm_p50_ms
            );
            write_json(&dir.join("result.json"), &r)?;
            results.push(r);
        }
    }

    let summary = report::summarize(&results);
    println!("{}", report::table(&results));
    println!("{}", report::summary_table(&summary));
    write_json(
        &out.join("results.json"),
        &serde_json::json!({
            "commit": commit,
            "nodes": args.nodes,
            "offline_pods": args.offline_pods,
            "pods": args.pods,
            "scheduler_qps": args.qps,
            "scheduler_burst": args.qps * 2,
            "runs": results,
            "summary": summary,
        }),
    )?;
    eprintln!("coloc-loop: wrote {}", out.join("results.json").display());
    Ok(())
}
