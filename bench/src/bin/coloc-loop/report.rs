//! One run's figures (the fields of the CEO's `result.json`, and a few more), the table
//! printed at the end and the summary over rounds.

use std::collections::BTreeMap;

use coloc_bench::prom;
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    pub run: String,
    pub round: usize,
    pub nodes: usize,
    pub offline_pods: usize,
    pub pods: usize,
    pub extender: String,
    pub node_cache_capable: Option<bool>,
    pub verbs: Option<String>,
    pub scheduler_qps: u32,
    pub scheduler_burst: u32,
    /// Seconds to create this run's pending online pods.
    pub created_s: f64,
    /// From starting the extender process to `/readyz` 200 (for coloc: its view synced).
    pub extender_ready_s: Option<f64>,
    pub bound: usize,
    pub seconds_first_to_all: f64,
    /// From starting kube-scheduler to the last bind.
    pub seconds_start_to_all: f64,
    pub pods_per_s: f64,
    /// pods_per_s over the stock run's of the same round.
    pub vs_stock: Option<f64>,
    pub algorithm_p50_ms: Option<f64>,
    pub algorithm_p99_ms: Option<f64>,
    /// scheduler_scheduling_attempt_duration_seconds{result="scheduled"}.
    pub attempt_p50_ms: Option<f64>,
    pub attempt_p99_ms: Option<f64>,
    /// scheduler_framework_extension_point_duration_seconds by extension point (the
    /// extender calls are not among them: they run inside the algorithm, after Filter and
    /// around Score).
    pub extension_points_ms: BTreeMap<String, Quantiles>,
    /// The extender's utime+stime from kube-scheduler's start to the last bind.
    pub extender_cpu_s: Option<f64>,
    pub extender_cpu_ms_per_pod: Option<f64>,
    /// Its CPU before kube-scheduler started (start-up, the initial lists).
    pub extender_startup_cpu_s: Option<f64>,
    /// VmHWM at the end of the run.
    pub extender_peak_rss_mb: Option<f64>,
    /// kube-scheduler's whole life (start-up, informers, scheduling) up to the last bind.
    pub scheduler_cpu_s: Option<f64>,
    /// kube-apiserver from kube-scheduler's start to the last bind.
    pub apiserver_cpu_s: Option<f64>,
    /// The machine's 1-minute load average at the last bind (other work on shared cores
    /// shows here).
    pub load_avg_1m: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Quantiles {
    pub count: f64,
    pub p50: Option<f64>,
    pub p99: Option<f64>,
}

/// p50/p99 in milliseconds of a kube-scheduler histogram.
pub fn quantiles(metrics: &str, name: &str, labels: &[&str]) -> Quantiles {
    let b = prom::buckets(metrics, name, labels);
    let ms = |q| prom::quantile(&b, q).map(|s| round3(s * 1e3));
    Quantiles { count: prom::count(&b), p50: ms(0.5), p99: ms(0.99) }
}

/// Every `extension_point` label value of the framework histogram, with its quantiles.
pub fn extension_points(metrics: &str) -> BTreeMap<String, Quantiles> {
    const NAME: &str = "scheduler_framework_extension_point_duration_seconds_bucket{";
    let mut points: Vec<String> = metrics
        .lines()
        .filter(|l| l.starts_with(NAME))
        .filter_map(|l| l.split("extension_point=\"").nth(1)?.split('"').next().map(str::to_string))
        .collect();
    points.sort();
    points.dedup();
    points
        .into_iter()
        .map(|p| {
            let label = format!("extension_point=\"{p}\"");
            let q = quantiles(metrics, "scheduler_framework_extension_point_duration_seconds", &[&label]);
            (p, q)
        })
        .collect()
}

pub fn round3(x: f64) -> f64 {
    (x * 1e3).round() / 1e3
}

fn opt(x: Option<f64>, decimals: usize) -> String {
    x.map_or("-".into(), |v| format!("{v:.decimals$}"))
}

/// A Markdown table (printed, and pasted into docs/journal/performance.md as it is).
fn markdown(head: &[&str], rows: impl Iterator<Item = Vec<String>>) -> String {
    let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
    let mut s = line(&head.iter().map(|h| h.to_string()).collect::<Vec<_>>());
    s += &line(&vec!["---".to_string(); head.len()]);
    for row in rows {
        s += &line(&row);
    }
    s
}

pub fn table(runs: &[RunResult]) -> String {
    let head = [
        "run",
        "round",
        "pods/s",
        "× stock",
        "first→last s",
        "algorithm p50 / p99 ms",
        "extender CPU ms/pod",
        "extender peak RSS MiB",
        "extender ready s",
        "kube-scheduler CPU s",
        "load 1m",
    ];
    markdown(
        &head,
        runs.iter().map(|r| {
            vec![
                r.run.clone(),
                r.round.to_string(),
                format!("{:.1}", r.pods_per_s),
                opt(r.vs_stock, 2),
                format!("{:.2}", r.seconds_first_to_all),
                format!("{} / {}", opt(r.algorithm_p50_ms, 2), opt(r.algorithm_p99_ms, 2)),
                opt(r.extender_cpu_ms_per_pod, 3),
                opt(r.extender_peak_rss_mb, 0),
                opt(r.extender_ready_s, 1),
                opt(r.scheduler_cpu_s, 1),
                opt(r.load_avg_1m, 1),
            ]
        }),
    )
}

/// Per kind over all rounds: pods/s of the summed pods and seconds, × stock, CPU per pod.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub run: String,
    pub rounds: usize,
    pub pods_per_s: f64,
    pub vs_stock: Option<f64>,
    pub extender_cpu_ms_per_pod: Option<f64>,
}

pub fn summarize(runs: &[RunResult]) -> Vec<Summary> {
    let mut kinds: Vec<&str> = Vec::new();
    for r in runs {
        if !kinds.contains(&r.run.as_str()) {
            kinds.push(&r.run);
        }
    }
    let rate = |kind: &str| {
        let of: Vec<_> = runs.iter().filter(|r| r.run == kind).collect();
        let pods: usize = of.iter().map(|r| r.bound).sum();
        let secs: f64 = of.iter().map(|r| r.seconds_first_to_all).sum();
        let cpu: Option<f64> = of.iter().map(|r| r.extender_cpu_s).sum();
        (of.len(), pods as f64 / secs.max(1e-9), cpu.map(|c| c * 1e3 / pods.max(1) as f64))
    };
    let stock = kinds.contains(&"stock").then(|| rate("stock").1);
    kinds
        .into_iter()
        .map(|k| {
            let (rounds, pods_per_s, cpu) = rate(k);
            Summary {
                run: k.to_string(),
                rounds,
                pods_per_s: round3(pods_per_s),
                vs_stock: stock.map(|s| round3(pods_per_s / s)),
                extender_cpu_ms_per_pod: cpu.map(round3),
            }
        })
        .collect()
}

pub fn summary_table(summary: &[Summary]) -> String {
    let head = ["run", "rounds", "pods/s (summed)", "× stock", "extender CPU ms/pod"];
    markdown(
        &head,
        summary.iter().map(|r| {
            vec![
                r.run.clone(),
                r.rounds.to_string(),
                format!("{:.1}", r.pods_per_s),
                opt(r.vs_stock, 2),
                opt(r.extender_cpu_ms_per_pod, 3),
            ]
        }),
    )
}
