//! coloc-trace: a public co-location trace as a trace `coloc-demo --trace` replays
//! (docs/traces.md). `coloc-trace openb`: Alibaba's cluster-trace-gpu-v2023
//! (`coloc_testbed::openb` says how each column is read). `coloc-trace bound`: how long a
//! trace's online pods wait whatever is evicted (`coloc_testbed::bound`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use coloc_testbed::bound;
use coloc_testbed::openb::{self, Csv, Window};

#[derive(Parser)]
#[command(about = "A public co-location trace as a trace coloc-demo --trace replays")]
struct Cli {
    #[command(subcommand)]
    trace: Trace,
}

#[derive(Subcommand)]
enum Trace {
    /// Alibaba cluster-trace-gpu-v2023 (openb): a window of its CPU-only pods on some of its own nodes.
    Openb {
        /// openb_node_list_*.csv (sn, cpu_milli, memory_mib, gpu).
        #[arg(long)]
        node_list: PathBuf,
        /// openb_pod_list_*.csv (name, cpu_milli, memory_mib, num_gpu, qos, creation_time, deletion_time, scheduled_time).
        #[arg(long)]
        pod_list: PathBuf,
        /// Where the window starts, trace seconds.
        #[arg(long)]
        start: i64,
        /// How long it lasts, trace seconds.
        #[arg(long)]
        length: i64,
        /// Trace seconds per replay second, for creation times (lifetimes run unscaled).
        #[arg(long, value_parser = positive)]
        speed: f64,
        /// How many of the node list's CPU-only nodes to keep.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=500))]
        nodes: u32,
        /// Seeds offline pods' grace periods and stop times (drawn from the mix generated clusters draw).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Pods there before have run since their creation in the trace (hours, days: what an
        /// eviction throws away in production), not since on the replay's clock (minutes).
        #[arg(long)]
        real_ages: bool,
        /// The trace to write.
        #[arg(long)]
        out: PathBuf,
    },
    /// How long a trace's online pods wait whatever is evicted: every offline pod gone the
    /// instant an online pod arrives, online pods placed in arrival order where they fit tightest.
    Bound {
        /// A trace coloc-demo --trace replays.
        #[arg(long)]
        trace: PathBuf,
        /// The class of the online pods.
        #[arg(long, default_value = openb::ONLINE)]
        online_class: String,
    },
}

fn positive(s: &str) -> Result<f64, String> {
    s.parse::<f64>().ok().filter(|v| v.is_finite() && *v > 0.0).ok_or(format!("{s:?} is not a number above 0"))
}

fn main() -> ExitCode {
    let said = match Cli::parse().trace {
        Trace::Openb { node_list, pod_list, start, length, speed, nodes, seed, real_ages, out } => {
            let window = Window { start_s: start, length_s: length, speed, nodes: nodes as usize, seed, real_ages };
            convert(&node_list, &pod_list, &window, &out)
        }
        Trace::Bound { trace, online_class } => bound(&trace, &online_class),
    };
    match said {
        Ok(said) => {
            println!("{said}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("coloc-trace: {e}");
            ExitCode::FAILURE
        }
    }
}

fn read(p: &Path) -> Result<String, String> {
    std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
}

fn convert(node_list: &Path, pod_list: &Path, window: &Window, out: &Path) -> Result<String, String> {
    if window.length_s <= 0 {
        return Err(format!("--length {}: the window must last at least a second", window.length_s));
    }
    let (nodes_text, pods_text) = (read(node_list)?, read(pod_list)?);
    let (nodes_file, pods_file) = (node_list.display().to_string(), pod_list.display().to_string());
    let c = openb::convert(
        Csv { file: &nodes_file, text: &nodes_text },
        Csv { file: &pods_file, text: &pods_text },
        window,
    )
    .map_err(|e| e.to_string())?;
    let sc = &c.scenario;
    std::fs::write(out, coloc_testbed::trace::write(sc, 0.0))
        .map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    Ok(format!("wrote {}\n{}\n{}", out.display(), sc.about, openb::fill(sc)))
}

fn bound(trace: &Path, online_class: &str) -> Result<String, String> {
    let sc = coloc_testbed::trace::parse(&read(trace)?).map_err(|e| format!("{}: {e}", trace.display()))?;
    Ok(bound::describe(&bound::online_waits(&sc, online_class)))
}
