//! coloc-trace: a public co-location trace as a trace `coloc-demo --trace` replays
//! (docs/traces.md). `coloc-trace openb`: Alibaba's cluster-trace-gpu-v2023
//! (`coloc_testbed::openb` says how each column is read).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
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
}

fn positive(s: &str) -> Result<f64, String> {
    s.parse::<f64>().ok().filter(|v| v.is_finite() && *v > 0.0).ok_or(format!("{s:?} is not a number above 0"))
}

fn main() -> ExitCode {
    let Trace::Openb { node_list, pod_list, start, length, speed, nodes, seed, real_ages, out } = Cli::parse().trace;
    let read = |p: &PathBuf| std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()));
    let run = || -> Result<String, String> {
        if length <= 0 {
            return Err(format!("--length {length}: the window must last at least a second"));
        }
        let (nodes_text, pods_text) = (read(&node_list)?, read(&pod_list)?);
        let (nodes_file, pods_file) = (node_list.display().to_string(), pod_list.display().to_string());
        let window = Window { start_s: start, length_s: length, speed, nodes: nodes as usize, seed, real_ages };
        let c = openb::convert(
            Csv { file: &nodes_file, text: &nodes_text },
            Csv { file: &pods_file, text: &pods_text },
            &window,
        )
        .map_err(|e| e.to_string())?;
        let sc = &c.scenario;
        std::fs::write(&out, coloc_testbed::trace::write(sc, 0.0))
            .map_err(|e| format!("cannot write {}: {e}", out.display()))?;
        Ok(format!("wrote {}\n{}\n{}", out.display(), sc.about, openb::fill(sc)))
    };
    match run() {
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
