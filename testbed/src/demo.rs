//! coloc-demo: a scenario run on a local control plane (the release binaries in
//! KUBE_BIN_DIR), once per run asked for (`--runs`, all four by default, in this order):
//! - `stock`: kube-scheduler alone;
//! - `requeue-only`: behind coloc-extender in shadow mode (`serve --kube --requeue --events
//!   --wake --mode shadow`, names): its answers are kube-scheduler's own while its requeue
//!   controller still brings preempted bare pods back, which isolates what the decisions do;
//! - `names`, `objects`: behind coloc-extender (`serve --kube --requeue --events --wake`) in
//!   that `nodeCacheCapable` mode.
//!
//! Every extender run takes the `--policy` file (default: the shipped default policy) and
//! is registered with prioritize `--weight` (default: the shipped registrations' 5).
//! Prints side by side what each placed, evicted (of original pods, requeued copies and
//! pods their controller recreated), requeued, lost, the PDB violations, gangs broken,
//! Jobs failed, the work thrown away (evicted pods' run, broken gangs' survivors' run,
//! failed Jobs' other pods' run), the offline work executed, the copies still pending, and
//! the extender's Events. Online pods arrive in their waves, `--wave-interval` apart.
//!
//!   cargo build --release && cargo run --release -p coloc-testbed --bin coloc-demo -- --help
//!
//! Its flags (`Flags`) are described in docs/cli.md. `--modes X` is `--runs stock,X`.
//!
//! Termination is real: a pod being deleted runs until its stop time (the scenario's,
//! through the kubelet stand-in's test-bed annotation) or the end of its grace period,
//! whichever comes first. `--mixed-grace` draws offline workloads' grace periods and stop
//! times from `scenario::GRACE_MIX` (seeded from `--seed`); `--time-scale F` multiplies
//! every grace period and stop time by F in every run alike (printed with the figures);
//! `--grace-cap SECS` caps every grace as the test bed did before (for figures measured
//! so). `--trace FILE` replays a trace (docs/traces.md); `--write-trace FILE` writes the
//! scenario as one and stops.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::cluster::{self};
use crate::control_plane::Options;
use crate::scenario::{OnlinePod, Scenario};
use crate::{kubelet, prepared, wait, Binaries, ControlPlane, Extender, ExtenderEntry, Kubelet, Scheduler};
use anyhow::Context;
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Patch, PatchParams};
use kube::runtime::watcher;
use kube::Api;
use serde_json::json;

const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// What a run of coloc-demo was asked for (`Flags`, resolved).
pub struct Args {
    scenario: PathBuf,
    /// Nodes of a generated scenario (`Scenario::generate`) instead of a file.
    generate: Option<usize>,
    seed: u64,
    /// Generated bare pods declare no gangs (to see what keeping gangs whole costs).
    no_gangs: bool,
    wave_interval: Duration,
    /// Where to write each run's figures as JSON.
    json: Option<PathBuf>,
    /// The runs to make, in order (stock first when listed).
    runs: Vec<RunKind>,
    /// Policy file of every extender run, absolute (the extender runs in its own directory).
    policy: Option<String>,
    extender: PathBuf,
    hold: bool,
    /// Namespace `batch` without the requeue opt-in label: its bare pods cannot be copied.
    batch_not_opted_in: bool,
    /// The registration's prioritize weight (the shipped configurations' by default).
    weight: u32,
    /// A trace to replay instead of a scenario.
    trace: Option<PathBuf>,
    /// Draw offline grace periods and stop times from `GRACE_MIX`.
    mixed_grace: bool,
    /// Every grace period and stop time multiplied by this (all runs alike).
    time_scale: f64,
    /// How much of their grace deleted pods get from the kubelet stand-in.
    grace: kubelet::Grace,
    /// Write the scenario as a trace here, and stop.
    write_trace: Option<PathBuf>,
    /// Print nothing but errors (the figures are returned, and written with `--json`).
    quiet: bool,
    /// Each run's own scheduler places the offline pods there before (`Flags::own_placement`).
    own_placement: bool,
}

/// One run of the comparison.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RunKind {
    Stock,
    RequeueOnly,
    Names,
    Objects,
}

impl RunKind {
    const ALL: [RunKind; 4] = [RunKind::Stock, RunKind::RequeueOnly, RunKind::Names, RunKind::Objects];

    fn parse(s: &str) -> Option<RunKind> {
        RunKind::ALL.into_iter().find(|k| k.name() == s)
    }

    fn name(self) -> &'static str {
        match self {
            RunKind::Stock => "stock",
            RunKind::RequeueOnly => "requeue-only",
            RunKind::Names => "names",
            RunKind::Objects => "objects",
        }
    }

    fn label(self) -> &'static str {
        match self {
            RunKind::Stock => "kube-scheduler alone",
            RunKind::RequeueOnly => "requeue only (shadow)",
            RunKind::Names => "coloc-extender, names",
            RunKind::Objects => "coloc-extender, objects",
        }
    }

    /// The extender's nodeCacheCapable and whether it answers in shadow mode; none for stock.
    fn extender(self) -> Option<(bool, bool)> {
        match self {
            RunKind::Stock => None,
            RunKind::RequeueOnly => Some((true, true)),
            RunKind::Names => Some((true, false)),
            RunKind::Objects => Some((false, false)),
        }
    }
}

/// How an extender run starts it.
struct ExtenderSetup<'a> {
    binary: &'a Path,
    names: bool,
    shadow: bool,
    policy: Option<&'a str>,
    weight: u32,
}

/// coloc-demo's flags as given; `resolve` checks what needs the file system.
#[derive(clap::Parser)]
#[command(
    name = "coloc-demo",
    about = "A scenario on a local control plane: kube-scheduler alone beside coloc-extender, figures side by side"
)]
pub struct Flags {
    /// The scenario to run (default: testbed/scenarios/colocated.json).
    #[arg(long, value_name = "FILE")]
    scenario: Option<PathBuf>,
    /// Run a generated cluster of this many nodes instead of a scenario file.
    #[arg(long, value_name = "NODES", value_parser = nodes, conflicts_with = "trace")]
    generate: Option<usize>,
    /// The generated cluster's seed (and the mixed grace periods').
    #[arg(long, value_name = "N", default_value_t = 1)]
    seed: u64,
    /// Generated bare pods declare no gangs (to see what keeping gangs whole costs).
    #[arg(long, conflicts_with = "trace")]
    no_gangs: bool,
    /// Replay a trace (docs/traces.md) instead of a scenario.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Draw offline workloads' grace periods and stop times from a mix (seeded from --seed).
    #[arg(long)]
    mixed_grace: bool,
    /// Multiply every grace period and stop time by F, in every run alike (above 0, at most 1).
    #[arg(long, value_name = "F", default_value_t = 1.0, value_parser = time_scale, allow_negative_numbers = true)]
    time_scale: f64,
    /// Cap every grace period at this many seconds, as the test bed did before.
    #[arg(long, value_name = "SECS", value_parser = secs, allow_negative_numbers = true)]
    grace_cap: Option<Duration>,
    /// Write the scenario as a trace to FILE, and stop.
    #[arg(long, value_name = "FILE")]
    write_trace: Option<PathBuf>,
    /// The runs to make, of stock, requeue-only, names, objects (stock is made first).
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = run_kind, conflicts_with = "modes")]
    runs: Option<Vec<RunKind>>,
    /// Stock, then these extender modes (names, objects): `--runs stock,LIST`.
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = mode)]
    modes: Option<Vec<RunKind>>,
    /// The policy of every extender run (default: the shipped default policy).
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Online pods arrive in waves this many seconds apart.
    #[arg(long, value_name = "SECS", default_value = "3", value_parser = secs, allow_negative_numbers = true)]
    wave_interval: Duration,
    /// Write each run's figures as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// The coloc-extender binary (default: target/release/coloc-extender).
    #[arg(long, value_name = "PATH")]
    extender: Option<PathBuf>,
    /// The registration's prioritize weight (default: the shipped registrations').
    #[arg(long, value_name = "N", value_parser = weight)]
    weight: Option<u32>,
    /// Keep the last run's control plane up for kubectl, until interrupted.
    #[arg(long)]
    hold: bool,
    /// Leave namespace batch without the requeue opt-in label: its bare pods cannot be
    /// copied (victims of last resort).
    #[arg(long)]
    batch_not_opted_in: bool,
    /// Print nothing but errors (the figures are still returned, and written with --json).
    #[arg(long)]
    quiet: bool,
    /// Each run's scheduler places the offline pods there before, an extender run's with
    /// the extender registered (its scores: what a cluster that has run it all along
    /// holds). Without it kube-scheduler alone places them in every run, so every run
    /// starts from the same cluster and the extender's placement is not measured.
    #[arg(long, conflicts_with = "trace")]
    own_placement: bool,
}

fn nodes(s: &str) -> Result<usize, String> {
    s.parse().ok().filter(|n| *n > 0).ok_or(format!("--generate needs a number of nodes, not {s:?}"))
}

fn secs(s: &str) -> Result<Duration, String> {
    let secs =
        s.parse().ok().filter(|s: &f64| s.is_finite() && *s >= 0.0).ok_or(format!("needs seconds, not {s:?}"))?;
    Ok(Duration::from_secs_f64(secs))
}

fn time_scale(s: &str) -> Result<f64, String> {
    s.parse()
        .ok()
        .filter(|f: &f64| f.is_finite() && *f > 0.0 && *f <= 1.0)
        .ok_or(format!("--time-scale needs a factor above 0 and at most 1, not {s:?}"))
}

fn weight(s: &str) -> Result<u32, String> {
    s.parse().ok().filter(|w| *w > 0).ok_or(format!("--weight needs a positive number, not {s:?}"))
}

fn run_kind(s: &str) -> Result<RunKind, String> {
    RunKind::parse(s).ok_or(format!("{s:?} is none of stock, requeue-only, names, objects"))
}

fn mode(s: &str) -> Result<RunKind, String> {
    match s {
        "names" => Ok(RunKind::Names),
        "objects" => Ok(RunKind::Objects),
        other => Err(format!("{other:?} is neither names nor objects")),
    }
}

/// The command line's words after the program's name.
pub fn parse_args(argv: impl IntoIterator<Item = String>) -> Result<Args, String> {
    use clap::Parser;
    let flags =
        Flags::try_parse_from(std::iter::once("coloc-demo".to_string()).chain(argv)).map_err(|e| e.to_string())?;
    resolve(flags)
}

/// What `flags` ask for, with the defaults filled in, the extender found and the policy checked.
pub fn resolve(flags: Flags) -> Result<Args, String> {
    let runs = match (flags.runs, flags.modes) {
        (Some(mut runs), _) => {
            // The others are read against kube-scheduler alone: it comes first.
            runs.sort_by_key(|k| *k != RunKind::Stock);
            runs
        }
        (None, Some(modes)) => [RunKind::Stock].into_iter().chain(modes).collect(),
        (None, None) => RunKind::ALL.to_vec(),
    };
    let mut a = Args {
        scenario: flags.scenario.unwrap_or_else(|| Path::new(REPO).join("testbed/scenarios/colocated.json")),
        generate: flags.generate,
        seed: flags.seed,
        no_gangs: flags.no_gangs,
        wave_interval: flags.wave_interval,
        json: flags.json,
        runs,
        policy: None,
        extender: flags.extender.unwrap_or_else(|| Path::new(REPO).join("target/release/coloc-extender")),
        hold: flags.hold,
        batch_not_opted_in: flags.batch_not_opted_in,
        weight: flags.weight.unwrap_or(crate::scheduler::SHIPPED_WEIGHT),
        trace: flags.trace,
        mixed_grace: flags.mixed_grace,
        time_scale: flags.time_scale,
        grace: flags.grace_cap.map_or(kubelet::Grace::Honour, kubelet::Grace::Cap),
        write_trace: flags.write_trace,
        quiet: flags.quiet,
        own_placement: flags.own_placement,
    };
    if !a.extender.is_file() && a.write_trace.is_none() {
        return Err(format!(
            "no extender binary at {} (build it: cargo build --release, or pass --extender)",
            a.extender.display()
        ));
    }
    if let Some(p) = flags.policy {
        let abs = std::fs::canonicalize(&p).map_err(|e| format!("--policy {}: {e}", p.display()))?;
        let text = abs.to_str().ok_or(format!("--policy {}: not a UTF-8 path", abs.display()))?.to_string();
        // An invalid file would be served as the default policy in shadow mode: every
        // extender run would silently be a requeue-only one.
        let check = std::process::Command::new(&a.extender)
            .args(["check-policy", &text])
            .output()
            .map_err(|e| format!("cannot run {} check-policy: {e}", a.extender.display()))?;
        if !check.status.success() {
            return Err(format!("--policy {text}: {}", String::from_utf8_lossy(&check.stderr).trim()));
        }
        a.policy = Some(text);
    }
    Ok(a)
}

#[derive(Default)]
struct Outcome {
    /// online pod → (node, seconds from arrival to bound)
    placed: BTreeMap<String, (String, f64)>,
    evicted: BTreeSet<String>,
    /// Every eviction kube-scheduler made (its `Preempted` Events), of original pods,
    /// recreated ones and requeued ones alike.
    evictions: usize,
    /// Of those, made for an offline preemptor (a recreated or requeued pod).
    evictions_for_offline: usize,
    /// Of those, whose victim was a requeued copy.
    evictions_of_copies: usize,
    /// Of those, whose victim a ReplicaSet or Job created during the run (a replacement).
    evictions_of_recreated: usize,
    /// Covered pods disrupted while their PDB was at its floor (rises in
    /// desiredHealthy - currentHealthy, as the disruption controller reports them).
    pdb_violations: i64,
    /// The same, by PDB: which workload's budget was exceeded.
    pdb_violations_by_pdb: BTreeMap<String, i64>,
    /// Run time of every evicted pod × its CPU request.
    discarded_cpu_s: f64,
    /// Every evicted pod (originals, recreated and requeued ones) → CPU-seconds discarded.
    discarded_by_pod: BTreeMap<String, f64>,
    requeued: BTreeSet<String>,
    /// Requeued copies bound to a node by the end: they took room again.
    copies_bound: usize,
    lost: BTreeSet<String>,
    /// Bare victims whose run ended within their grace period: done, so not requeued.
    completed_in_grace: BTreeSet<String>,
    gangs_broken: BTreeSet<String>,
    /// Run time × CPU of the members a broken gang still has running: a gang runs as one,
    /// so their progress is lost with the evicted member's.
    broken_gang_survivors_cpu_s: f64,
    /// How many members broken gangs still have running.
    gang_survivors: usize,
    jobs_failed: BTreeSet<String>,
    /// Run time × CPU of a failed Job's pods not evicted themselves: the Job's progress is gone.
    failed_jobs_cpu_s: f64,
    /// CPU-seconds of offline work run from the start of the online phase to the end.
    offline_cpu_s_executed: f64,
    /// Seconds from the start of the online phase to the end: a run ends once its last
    /// online pod is placed and its victims have stopped, so runs differ in length.
    online_phase_s: f64,
    /// Seconds from creation to the end, per requeued copy no node took by the end.
    copies_pending_s: Vec<f64>,
    events: String,
}

impl Outcome {
    /// The three parts as shown, whole CPU-seconds, so that they add up to it.
    fn work_thrown_away_cpu_s(&self) -> f64 {
        self.discarded_cpu_s.round() + self.broken_gang_survivors_cpu_s.round() + self.failed_jobs_cpu_s.round()
    }

    /// Pods whose progress was lost: the evicted ones, and the survivors of broken gangs.
    fn pods_interrupted(&self) -> usize {
        self.evictions + self.gang_survivors
    }

    fn evictions_of_originals(&self) -> usize {
        self.evictions.saturating_sub(self.evictions_of_copies + self.evictions_of_recreated)
    }

    fn copies_pending_s_max(&self) -> Option<f64> {
        self.copies_pending_s.iter().copied().reduce(f64::max)
    }
}

/// coloc-demo's `main`: the figures printed, and written where `--json` says.
pub async fn main() -> ExitCode {
    // Help and usage errors print as clap prints them (help exits 0, an error 2).
    let flags = <Flags as clap::Parser>::parse();
    let args = match resolve(flags) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("coloc-demo: {e}");
            return ExitCode::from(2);
        }
    };
    let bins = match Binaries::find() {
        Ok(b) => b,
        Err(why) => {
            eprintln!("coloc-demo: {why}");
            return ExitCode::from(2);
        }
    };
    match demo(&bins, &args).await {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("coloc-demo: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs what `args` asks for and returns each run's figures (as `--json` writes them).
pub async fn demo(bins: &Binaries, args: &Args) -> anyhow::Result<serde_json::Value> {
    let mut scenario = match (&args.trace, args.generate) {
        (Some(path), _) => {
            let text =
                std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
            crate::trace::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
        }
        (None, Some(n)) => Scenario::generate(n, args.seed),
        (None, None) => Scenario::load(&args.scenario)?,
    };
    if args.no_gangs {
        scenario.bare.iter_mut().for_each(|b| (b.gang, b.gang_min) = (None, None));
        scenario.about += " (no gangs)";
    }
    if args.mixed_grace {
        scenario.mix_grace(args.seed);
    }
    if let Some(path) = &args.write_trace {
        std::fs::write(path, crate::trace::write(&scenario, args.wave_interval.as_secs_f64()))?;
        println!("wrote {} ({})", path.display(), scenario.about);
        return Ok(serde_json::json!({"scenario": scenario.about, "trace": path}));
    }
    if args.time_scale != 1.0 {
        scenario.scale_time(args.time_scale);
    }
    let termination = termination(args);
    if !args.quiet {
        match (&args.trace, args.generate) {
            (Some(path), _) => println!("trace {}: {}", path.display(), scenario.about),
            (None, Some(_)) => println!("scenario generated: {}", scenario.about),
            (None, None) => println!("scenario {}: {}", args.scenario.display(), scenario.about),
        }
        println!("termination: {termination}");
        println!(
            "control plane: {} (kube-scheduler, kube-apiserver, kube-controller-manager; a kubelet stand-in)\n",
            bins.dir.display()
        );
        if let Some(p) = &args.policy {
            println!("policy of every extender run: {p}\n");
        }
        if args.own_placement {
            println!("offline pods there before: placed by each run's scheduler, an extender run's with its scores\n");
        }
    }
    let mut runs = Vec::new();
    let mut held = None;
    for (i, &kind) in args.runs.iter().enumerate() {
        match kind {
            _ if args.quiet => {}
            RunKind::Stock => println!("run {}: {} ...", i + 1, kind.label()),
            _ => println!("run {}: kube-scheduler + {} ...", i + 1, kind.label()),
        }
        let setup = kind.extender().map(|(names, shadow)| ExtenderSetup {
            binary: &args.extender,
            names,
            shadow,
            policy: args.policy.as_deref(),
            weight: args.weight,
        });
        let last = i + 1 == args.runs.len();
        let (outcome, plane) = run(bins, &scenario, setup.as_ref(), args, args.hold && last).await?;
        held = plane;
        runs.push((kind, outcome));
    }
    let report = serde_json::json!({
        "scenario": scenario.about,
        "policy": args.policy,
        "termination": termination,
        "time_scale": args.time_scale,
        "own_placement": args.own_placement,
        "runs": runs.iter().map(|(kind, o)| figures(*kind, o, &scenario)).collect::<Vec<_>>(),
    });
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    if args.quiet {
        return Ok(report);
    }
    let classes: Vec<String> =
        by_class(&Outcome::default(), &scenario).into_iter().map(|(c, _)| c.to_string()).collect();
    let labels: Vec<String> = classes.iter().map(|c| format!("  {c}")).collect();
    let mut rows: Vec<Row> = vec![
        ("arrivals placed", Box::new(|o| format!("{}/{}", o.placed.len(), scenario.online.len()))),
        (
            "time to place, p50 / p99 / max",
            Box::new(|o| spread(&o.placed.values().map(|(_, s)| *s).collect::<Vec<_>>())),
        ),
    ];
    if classes.len() > 1 {
        for (class, label) in classes.iter().zip(&labels) {
            let scenario = &scenario;
            rows.push((
                label.as_str(),
                Box::new(move |o| {
                    let all = by_class(o, scenario);
                    spread(all.iter().find(|(c, _)| c == class).map_or(&[][..], |(_, w)| w))
                }),
            ));
        }
    }
    rows.extend::<Vec<Row>>(vec![
        ("evictions", Box::new(|o| o.evictions.to_string())),
        ("  made for offline pods", Box::new(|o| o.evictions_for_offline.to_string())),
        (
            "  of originals/copies/recreated",
            Box::new(|o| {
                format!("{}/{}/{}", o.evictions_of_originals(), o.evictions_of_copies, o.evictions_of_recreated)
            }),
        ),
        ("original pods evicted", Box::new(|o| list(&o.evicted))),
        ("requeued (back in the queue)", Box::new(|o| list(&o.requeued))),
        ("  copies bound by the end", Box::new(|o| o.copies_bound.to_string())),
        ("lost (bare pods gone for good)", Box::new(|o| list(&o.lost))),
        ("completed within their grace period (done, not requeued)", Box::new(|o| list(&o.completed_in_grace))),
        ("PDB violations", Box::new(|o| o.pdb_violations.to_string())),
        ("gangs broken", Box::new(|o| list(&o.gangs_broken))),
        ("Jobs failed", Box::new(|o| list(&o.jobs_failed))),
        ("work thrown away, CPU-s", Box::new(|o| format!("{:.0}", o.work_thrown_away_cpu_s()))),
        ("  evicted pods' run", Box::new(|o| format!("{:.0}", o.discarded_cpu_s))),
        ("  broken gangs' survivors' run", Box::new(|o| format!("{:.0}", o.broken_gang_survivors_cpu_s))),
        ("  failed Jobs' other pods' run", Box::new(|o| format!("{:.0}", o.failed_jobs_cpu_s))),
        // Survivors of broken gangs are original bare pods: counted with the originals.
        (
            "pods interrupted (orig/copy/recr)",
            Box::new(|o| {
                format!(
                    "{} ({}/{}/{})",
                    o.pods_interrupted(),
                    o.evictions_of_originals() + o.gang_survivors,
                    o.evictions_of_copies,
                    o.evictions_of_recreated
                )
            }),
        ),
        ("offline work executed, CPU-s", Box::new(|o| format!("{:.0}", o.offline_cpu_s_executed))),
        ("  over the online phase, s", Box::new(|o| format!("{:.0}", o.online_phase_s))),
        (
            "copies pending at end (max)",
            Box::new(|o| match o.copies_pending_s_max() {
                None => "none".into(),
                Some(max) => format!("{} (max {max:.0} s)", o.copies_pending_s.len()),
            }),
        ),
    ]);
    print!("\n{:<34}", "");
    for (kind, _) in &runs {
        print!(" {:<28}", kind.label());
    }
    println!();
    for (label, f) in &rows {
        print!("{label:<34}");
        for (_, o) in &runs {
            print!(" {:<28}", f(o));
        }
        println!();
    }
    println!("\nwhere each arrival went:");
    for o in &scenario.online {
        let key = format!("{}/{}", o.namespace, o.name);
        print!("  {key:<32}");
        for (_, x) in &runs {
            print!(" {:<28}", x.placed.get(&key).map_or("pending".to_string(), |(n, _)| n.clone()));
        }
        println!();
    }
    // In shadow mode the extender writes no Events: those of the last run that enforced.
    if let Some((kind, last)) = runs.iter().rev().find(|(k, _)| k.extender().is_some_and(|(_, shadow)| !shadow)) {
        println!(
            "\nthe extender's Events, run {} (what `kubectl describe pod -n online <name>` shows):\n{}",
            kind.label(),
            last.events
        );
    }
    if let Some(plane) = held {
        println!(
            "\nthe last run's control plane is still up (--hold): kubectl --kubeconfig {} describe pod -n online web-1\npress Ctrl-C to stop it",
            plane.admin_kubeconfig.display()
        );
        let _ = tokio::signal::ctrl_c().await;
    } else {
        println!("(run with --hold to keep the last run's control plane up for kubectl)");
    }
    Ok(report)
}

/// `call`, again after a failure (a busy API server closing a connection), up to 10 times
/// a second apart: a long run is not lost to one dropped request.
async fn persist<T, F, Fut>(what: &str, mut call: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let mut tries = 0;
    loop {
        match call().await {
            Ok(t) => return Ok(t),
            Err(e) if tries < 10 => {
                tries += 1;
                eprintln!("coloc-demo: {what}: {e:#}; trying again");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => return Err(e.context(format!("{what}, 10 times"))),
        }
    }
}

/// How deleted pods stop in every run, as the figures say it.
fn termination(args: &Args) -> String {
    let scale = match args.time_scale {
        1.0 => String::new(),
        f => format!("; every grace period and stop time ×{f} (all runs alike)"),
    };
    let mix = if args.mixed_grace {
        format!("; offline grace drawn from: {}", crate::scenario::GRACE_MIX)
    } else {
        String::new()
    };
    match args.grace {
        kubelet::Grace::Honour => {
            format!("real: a deleted pod runs until its stop time or the end of its grace period{scale}{mix}")
        }
        kubelet::Grace::Cap(cap) => format!(
            "every grace capped at {:.1} s (the test bed before real termination){scale}{mix}",
            cap.as_secs_f64()
        ),
    }
}

/// The arrivals' times to place, by class (in the scenario's order of first arrival).
fn by_class<'o>(o: &'o Outcome, sc: &'o Scenario) -> Vec<(&'o str, Vec<f64>)> {
    let mut classes: Vec<(&str, Vec<f64>)> = Vec::new();
    for a in &sc.online {
        let i = match classes.iter().position(|(c, _)| *c == a.class) {
            Some(i) => i,
            None => {
                classes.push((&a.class, Vec::new()));
                classes.len() - 1
            }
        };
        if let Some((_, secs)) = o.placed.get(&format!("{}/{}", a.namespace, a.name)) {
            classes[i].1.push(*secs);
        }
    }
    classes
}

/// "1.2 / 3.4 / 5.6 s": p50 / p99 / max, or "-" for none.
fn spread(waits: &[f64]) -> String {
    if waits.is_empty() {
        return "-".into();
    }
    let max = waits.iter().copied().fold(0.0, f64::max);
    format!("{:.1} / {:.1} / {max:.1} s", median(waits.to_vec()), quantile(waits.to_vec(), 0.99))
}

/// One run's figures, as `--json` writes them.
fn figures(kind: RunKind, o: &Outcome, sc: &Scenario) -> serde_json::Value {
    serde_json::json!({
        "run": kind.label(),
        "kind": kind.name(),
        "online_placed": o.placed.len(),
        "time_to_place_max_s": o.placed.values().map(|(_, s)| *s).fold(0.0, f64::max),
        "time_to_place_p50_s": median(o.placed.values().map(|(_, s)| *s).collect()),
        "time_to_place_p99_s": quantile(o.placed.values().map(|(_, s)| *s).collect(), 0.99),
        "time_to_place_by_pod_s": o.placed.iter().map(|(p, (_, s))| (p.clone(), *s)).collect::<BTreeMap<_, _>>(),
        "time_to_place_by_class": by_class(o, sc).into_iter().map(|(c, w)| (c.to_string(), serde_json::json!({
            "arrived": sc.online.iter().filter(|a| a.class == c).count(),
            "placed": w.len(),
            "p50_s": median(w.clone()),
            "p99_s": quantile(w.clone(), 0.99),
            "max_s": w.iter().copied().fold(0.0, f64::max),
        }))).collect::<BTreeMap<_, _>>(),
        "online": sc.online.len(),
        "evictions": o.evictions,
        "evictions_by_online_pods": o.evictions - o.evictions_for_offline,
        "evictions_by_offline_pods": o.evictions_for_offline,
        "pdb_violations": o.pdb_violations,
        "pdb_violations_by_pdb": o.pdb_violations_by_pdb,
        "jobs_failed": o.jobs_failed.len(),
        "gangs_broken": o.gangs_broken.len(),
        "broken_gang_survivors_cpu_seconds": o.broken_gang_survivors_cpu_s.round(),
        "bare_lost": o.lost.len(),
        "bare_completed_in_grace": o.completed_in_grace.len(),
        "requeued": o.requeued.len(),
        "requeued_copies_bound": o.copies_bound,
        "discarded_by_pod": o.discarded_by_pod,
        "work_evicted_cpu_s": o.discarded_cpu_s.round(),
        "work_gang_survivors_cpu_s": o.broken_gang_survivors_cpu_s.round(),
        "work_failed_jobs_cpu_s": o.failed_jobs_cpu_s.round(),
        "work_thrown_away_cpu_s": o.work_thrown_away_cpu_s(),
        "pods_interrupted": o.pods_interrupted(),
        "gang_survivors_interrupted": o.gang_survivors,
        "evictions_of_originals": o.evictions_of_originals(),
        "evictions_of_copies": o.evictions_of_copies,
        "evictions_of_recreated": o.evictions_of_recreated,
        "offline_cpu_s_executed": o.offline_cpu_s_executed.round(),
        "online_phase_s": (o.online_phase_s * 10.0).round() / 10.0,
        "copies_pending_at_end": o.copies_pending_s.len(),
        "copies_pending_seconds_total": total(o.copies_pending_s.iter().copied()).round(),
        "copies_pending_seconds_max": o.copies_pending_s_max().unwrap_or(0.0).round(),
    })
}

/// The middle value (the mean of the two middle ones for an even count); 0 for none.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The `q` quantile of `v` (nearest rank), 0 for none.
pub(crate) fn quantile(mut v: Vec<f64>, q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n => v[((n as f64 * q).ceil() as usize).clamp(1, n) - 1],
    }
}

/// A line of the comparison: its label, and what it shows of one run.
type Row<'a> = (&'a str, Box<dyn Fn(&Outcome) -> String + Send + Sync + 'a>);

/// The names, or only how many when they would not fit a column.
fn list(s: &BTreeSet<String>) -> String {
    let all = s.iter().cloned().collect::<Vec<_>>().join(" ");
    match s.len() {
        0 => "none".into(),
        _ if all.len() <= 28 => all,
        n => format!("{n}"),
    }
}

/// What a run leaves behind that a final list cannot show: the last state of every
/// offline pod (evicted ones are gone by the end) and the PDBs' deficits as they rise.
#[derive(Default)]
struct Record {
    pods: BTreeMap<String, Pod>,
    deficit: BTreeMap<String, i32>,
    pdb_violations: BTreeMap<String, i64>,
}

fn record(client: kube::Client) -> (std::sync::Arc<std::sync::Mutex<Record>>, Vec<tokio::task::JoinHandle<()>>) {
    let rec = std::sync::Arc::new(std::sync::Mutex::new(Record::default()));
    let pods = {
        let rec = rec.clone();
        let api: Api<Pod> = Api::namespaced(client.clone(), "batch");
        tokio::spawn(async move {
            let mut s = watcher(api, watcher::Config::default()).boxed();
            while let Some(Ok(e)) = s.next().await {
                if let watcher::Event::Apply(p) | watcher::Event::InitApply(p) | watcher::Event::Delete(p) = e {
                    rec.lock().unwrap().pods.insert(p.metadata.uid.clone().unwrap_or_default(), p);
                }
            }
        })
    };
    let pdbs = {
        let rec = rec.clone();
        let api: Api<PodDisruptionBudget> = Api::namespaced(client, "batch");
        tokio::spawn(async move {
            let mut s = watcher(api, watcher::Config::default()).boxed();
            while let Some(Ok(e)) = s.next().await {
                let (watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = e else { continue };
                let Some(st) = p.status.as_ref() else { continue };
                let deficit = (st.desired_healthy.unwrap_or(0) - st.current_healthy.unwrap_or(0)).max(0);
                let mut r = rec.lock().unwrap();
                let name = p.metadata.name.clone().unwrap_or_default();
                let before = r.deficit.insert(name.clone(), deficit).unwrap_or(deficit);
                if deficit > before {
                    *r.pdb_violations.entry(name).or_default() += i64::from(deficit - before);
                }
            }
        })
    };
    (rec, vec![pods, pdbs])
}

fn cpu_cores(p: &Pod) -> f64 {
    let q = p
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("cpu"));
    q.map_or(0.0, |q| {
        q.0.strip_suffix('m')
            .and_then(|m| m.parse::<f64>().ok())
            .map_or_else(|| q.0.parse().unwrap_or(0.0), |m| m / 1000.0)
    })
}

/// Seconds a preempted pod had run: from its start to kube-scheduler's DisruptionTarget.
fn run_seconds_discarded(p: &Pod) -> Option<f64> {
    let started = p.status.as_ref()?.start_time.as_ref()?.0;
    Some(seconds(started, condition_since(p, "DisruptionTarget", "True")?))
}

/// A sum that is 0, not -0 (which prints as "-0"), when there is nothing to add.
fn total(xs: impl Iterator<Item = f64>) -> f64 {
    xs.fold(0.0, |a, b| a + b)
}

fn seconds(from: Timestamp, to: Timestamp) -> f64 {
    to.duration_since(from).as_secs_f64().max(0.0)
}

/// When the pod's condition `type_` last became `status`.
fn condition_since(p: &Pod, type_: &str, status: &str) -> Option<Timestamp> {
    let c = p.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_ && c.status == status)?;
    Some(c.last_transition_time.as_ref()?.0)
}

/// When a pod in a terminal phase finished: the kubelet stand-in's stop sets its
/// containers' finishedAt, its completion only the Ready condition.
fn finished(p: &Pod) -> Option<Timestamp> {
    let st = p.status.as_ref()?;
    if !matches!(st.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return None;
    }
    st.container_statuses
        .iter()
        .flatten()
        .filter_map(|c| Some(c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref()?.0))
        .max()
        .or_else(|| condition_since(p, "Ready", "False"))
}

/// When a pod stopped making progress: the first of its DisruptionTarget, its
/// deletionTimestamp (the end of its grace) and its finish, else `end`.
fn run_end(p: &Pod, end: Timestamp) -> Timestamp {
    let deleted = p.metadata.deletion_timestamp.as_ref().map(|t| t.0);
    [condition_since(p, "DisruptionTarget", "True"), deleted, finished(p)]
        .into_iter()
        .flatten()
        .fold(end, Timestamp::min)
}

/// The Job a pod belongs to: its `job-name` label, else its owner of kind Job.
fn job_of(p: &Pod) -> Option<&str> {
    let label = p.metadata.labels.as_ref().and_then(|l| l.get("job-name")).map(String::as_str);
    label.or_else(|| owner_of_kind(p, &["Job"]))
}

/// Starts the extender of an extender run, enforcing unless it is the requeue-only one.
async fn start_extender(plane: &ControlPlane, e: &ExtenderSetup<'_>) -> anyhow::Result<Extender> {
    let mut flags = vec!["--kube", "--requeue", "--events", "--wake"];
    // The shipped default is in shadow: an extender run enforces unless it is the
    // "requeue only" one.
    flags.extend(["--mode", if e.shadow { "shadow" } else { "enforce" }]);
    if let Some(policy) = e.policy {
        flags.extend(["--policy", policy]);
    }
    Extender::start(plane, "coloc-extender", e.binary, &flags).await.context("start the extender")
}

/// kube-scheduler's registration of the run's extender, if it is running, in the run's
/// mode and weight.
fn registrations(ext: Option<&Extender>, setup: Option<&ExtenderSetup<'_>>) -> Vec<ExtenderEntry> {
    ext.into_iter()
        .zip(setup)
        .map(|(x, e)| ExtenderEntry { weight: e.weight, ..ExtenderEntry::all_verbs(&x.url(), e.names) })
        .collect()
}

fn owner_of_kind<'p>(p: &'p Pod, kinds: &[&str]) -> Option<&'p str> {
    let owners = p.metadata.owner_references.as_ref()?;
    owners.iter().find(|o| kinds.contains(&o.kind.as_str())).map(|o| o.name.as_str())
}

async fn run(
    bins: &Binaries,
    sc: &Scenario,
    extender: Option<&ExtenderSetup<'_>>,
    args: &Args,
    hold: bool,
) -> anyhow::Result<(Outcome, Option<ControlPlane>)> {
    let (wave_interval, batch_not_opted_in) = (args.wave_interval, args.batch_not_opted_in);
    // The test bed's world: namespaces `online` and `batch` (opted in to requeue), the
    // classes, and the extender's RBAC in the install namespace.
    let rbac = [&prepared::BASE_RBAC[..], &prepared::REQUEUE_RBAC[..], &prepared::WAKE_RBAC[..]].concat();
    let (plane, client) = prepared::start(bins, Options::default(), &rbac).await.context("start the control plane")?;
    if batch_not_opted_in {
        // Taken off before any extender lists namespaces.
        let label = json!({"metadata": {"labels": {cluster::REQUEUE_OPT_IN: null}}});
        let namespaces: Api<Namespace> = Api::all(client.clone());
        namespaces.patch(prepared::BATCH, &PatchParams::default(), &Patch::Merge(label)).await?;
    }
    // Every class the scenario's pods name, beyond those the bed waits for.
    let names: Vec<String> =
        cluster::default_priority_classes().iter().filter_map(|c| c.metadata.name.clone()).collect();
    cluster::until_admitted(&client, prepared::BATCH, &names.iter().map(String::as_str).collect::<Vec<_>>())
        .await
        .context("wait for the PriorityClasses")?;
    // Namespaces arrivals name beyond the bed's two (without the requeue opt-in label).
    let arrival_namespaces: BTreeSet<&str> = sc.online.iter().map(|o| o.namespace.as_str()).collect();
    let others: Vec<Namespace> = arrival_namespaces
        .iter()
        .filter(|n| ![prepared::ONLINE, prepared::BATCH].contains(n))
        .map(|n| cluster::namespace(n))
        .collect();
    cluster::create_all(&client, others).await?;
    let _kubelet = Kubelet::start(client.clone(), kubelet::Options { grace: args.grace, ..Default::default() });
    cluster::create_each(&client, sc.node_objects()).await.context("create the nodes")?;
    cluster::create_each(&client, sc.bare_pods()).await.context("create the bare pods")?;
    cluster::create_each(&client, sc.job_objects()).await.context("create the Jobs")?;
    cluster::create_each(&client, sc.replica_set_objects()).await.context("create the ReplicaSets")?;
    cluster::create_each(&client, sc.pdb_objects()).await.context("create the PDBs")?;
    let want = sc.offline_pod_count();
    // The offline pods are placed by a kube-scheduler started for them, then stopped. With
    // --own-placement an extender run's extender is up and registered by then.
    let mut ext = match extender {
        Some(e) if args.own_placement => Some(start_extender(&plane, e).await?),
        _ => None,
    };
    let warmup = Scheduler::start(&plane, "kube-scheduler-warmup", &registrations(ext.as_ref(), extender), 1000)
        .await
        .context("start kube-scheduler")?;
    let before = wait::until(Duration::from_secs(90), "the offline pods running", || async {
        let pods = cluster::pods(&client, Some("batch")).await.map_err(|e| e.to_string())?;
        let running: Vec<_> = pods.iter().filter(|p| cluster::phase(p) == "Running").collect();
        if running.len() == want {
            Ok(running
                .iter()
                .map(|p| {
                    let app = p.metadata.labels.as_ref().and_then(|l| l.get("app")).cloned();
                    (cluster::name(p).to_string(), p.metadata.uid.clone().unwrap_or_default(), app)
                })
                .collect::<Vec<_>>())
        } else {
            Err(format!("{} of {want} running", running.len()))
        }
    })
    .await?;
    drop(warmup);
    // Offline pods have run for a while when online pods arrive (kube-scheduler and the
    // extender both prefer victims that ran least): the kubelet stand-in started them just
    // now, so their start times are moved back.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "batch");
    let now = jiff::Timestamp::now().as_second();
    for (name, _, app) in &before {
        let started = jiff::Timestamp::from_second(now - sc.age_of(name, app.as_deref()))?;
        let patch = serde_json::json!({"status": {"startTime": started.to_string()}});
        let params = kube::api::PatchParams::default();
        persist("move a start time back", || async {
            Ok(pods.patch_status(name, &params, &kube::api::Patch::Merge(&patch)).await?)
        })
        .await?;
    }

    let (record, recording) = record(client.clone());
    if let (None, Some(e)) = (&ext, extender) {
        ext = Some(start_extender(&plane, e).await?);
    }
    let entries = registrations(ext.as_ref(), extender);
    // The online phase: the offline work executed is counted from here (the offline pods'
    // start times were moved back, before it).
    let t0 = Timestamp::now();
    let _scheduler =
        Scheduler::start(&plane, "kube-scheduler", &entries, 1000).await.context("start kube-scheduler")?;
    let mut out = Outcome::default();
    let mut arrived: BTreeMap<String, Instant> = BTreeMap::new();
    // Arrivals at their time (a wave's: its number × the interval), in order.
    let mut due: Vec<(Duration, &OnlinePod)> =
        sc.online.iter().map(|o| (o.at_s.map_or(wave_interval * o.wave, Duration::from_secs_f64), o)).collect();
    due.sort_by_key(|(at, _)| *at);
    let mut due = due.into_iter().peekable();
    let start = Instant::now();
    // Victims stop as late as the scenario's longest stop: wait that long for the last.
    let patience = Duration::from_secs(60) + Duration::from_secs_f64(sc.longest_stop_s());
    let mut deadline = start + patience;
    while out.placed.len() < sc.online.len() && Instant::now() < deadline {
        let mut now_due = Vec::new();
        while let Some((_, o)) = due.next_if(|(at, _)| start + *at <= Instant::now()) {
            now_due.push(o);
        }
        if !now_due.is_empty() {
            cluster::create_each(&client, now_due.iter().map(|o| o.pod()).collect())
                .await
                .context("create the arrivals")?;
            arrived.extend(now_due.iter().map(|o| (format!("{}/{}", o.namespace, o.name), Instant::now())));
            deadline = Instant::now() + patience;
        }
        for ns in &arrival_namespaces {
            // A poll that fails (the API server busy) is only skipped.
            for p in cluster::pods(&client, Some(ns)).await.unwrap_or_default() {
                let key = format!("{ns}/{}", cluster::name(&p));
                if let (Some(node), Some(at)) = (cluster::node_of(&p), arrived.get(&key)) {
                    out.placed.entry(key).or_insert((node.to_string(), at.elapsed().as_secs_f64()));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Let victims finish (as late as the longest stop), recreated and requeued pods find
    // their place (or preempt for it), and the Job and disruption controllers count.
    let _ = wait::until(patience, "every victim stopped", || async {
        let pods = cluster::pods(&client, Some(prepared::BATCH)).await.map_err(|e| e.to_string())?;
        match pods.iter().filter(|p| p.metadata.deletion_timestamp.is_some()).count() {
            0 => Ok(()),
            n => Err(format!("{n} still terminating")),
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(15)).await;

    let end = Timestamp::now();
    let after = persist("list the offline pods", || cluster::pods(&client, Some("batch"))).await?;
    let alive = |uid: &str| {
        after.iter().any(|p| p.metadata.uid.as_deref() == Some(uid) && p.metadata.deletion_timestamp.is_none())
    };
    // A requeued copy names its original in this annotation.
    let base_name =
        |p: &Pod| p.metadata.annotations.as_ref().and_then(|a| a.get("coloc-extender.io/base-name")).cloned();
    let stands_in = |name: &str| after.iter().any(|p| base_name(p).is_some_and(|b| b == name));
    let bare: BTreeSet<&str> = sc.bare.iter().map(|b| b.name.as_str()).collect();
    out.copies_bound = after.iter().filter(|p| base_name(p).is_some() && cluster::node_of(p).is_some()).count();
    // Creation, not the gate's removal (not visible): the original is gone within seconds.
    out.copies_pending_s = after
        .iter()
        .filter(|p| base_name(p).is_some() && cluster::node_of(p).is_none() && p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| Some(seconds(p.metadata.creation_timestamp.as_ref()?.0, end)))
        .collect();
    // A victim whose run ended within its grace period completed: its work is done, and
    // requeue rightly deletes its copy. Not lost.
    let completed: BTreeSet<String> = record
        .lock()
        .unwrap()
        .pods
        .values()
        .filter(|p| cluster::phase(p) == "Succeeded")
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    for (name, uid, _) in &before {
        if alive(uid) {
            continue;
        }
        out.evicted.insert(name.clone());
        if bare.contains(name.as_str()) {
            if stands_in(name) {
                out.requeued.insert(name.clone());
            } else if completed.contains(uid) {
                out.completed_in_grace.insert(name.clone());
            } else {
                out.lost.insert(name.clone());
            }
        }
    }
    for (gang, members) in sc.gangs() {
        let gone = members.iter().filter(|m| out.evicted.contains(**m)).count();
        if gone > 0 && gone < members.len() {
            out.gangs_broken.insert(gang.to_string());
            for p in after.iter().filter(|p| {
                let name = cluster::name(p);
                members.contains(&name) && !out.evicted.contains(name) && p.metadata.deletion_timestamp.is_none()
            }) {
                let started = p.status.as_ref().and_then(|s| s.start_time.as_ref()).map(|t| t.0);
                out.broken_gang_survivors_cpu_s += started.map_or(0.0, |t| seconds(t, end)) * cpu_cores(p);
                out.gang_survivors += 1;
            }
        }
    }
    let jobs: Api<Job> = Api::namespaced(client.clone(), "batch");
    for j in &sc.jobs {
        let job = persist("read a Job", || async { Ok(jobs.get(&j.name).await?) }).await?;
        let failed = job
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Failed" && c.status == "True"));
        if failed {
            out.jobs_failed.insert(j.name.clone());
        }
    }
    let events = persist("list the Events", || async {
        Ok(Api::<Event>::namespaced(client.clone(), "batch").list(&Default::default()).await?)
    })
    .await?;
    for task in recording {
        task.abort();
    }
    {
        let r = record.lock().unwrap();
        out.pdb_violations = r.pdb_violations.values().sum();
        out.pdb_violations_by_pdb = r.pdb_violations.clone();
        out.discarded_by_pod = r
            .pods
            .values()
            .filter_map(|p| Some((cluster::name(p).to_string(), (run_seconds_discarded(p)? * cpu_cores(p)).round())))
            .collect();
        out.discarded_cpu_s = total(out.discarded_by_pod.values().copied());
        // The evicted ones are counted above: their run once, as evicted pods'.
        out.failed_jobs_cpu_s = total(
            r.pods
                .values()
                .filter(|p| {
                    job_of(p).is_some_and(|j| out.jobs_failed.contains(j)) && run_seconds_discarded(p).is_none()
                })
                .filter_map(|p| {
                    Some(seconds(p.status.as_ref()?.start_time.as_ref()?.0, run_end(p, end)) * cpu_cores(p))
                }),
        );
        out.online_phase_s = seconds(t0, end);
        out.offline_cpu_s_executed = total(r.pods.values().filter_map(|p| {
            let started = p.status.as_ref()?.start_time.as_ref()?.0;
            Some(seconds(started.max(t0), run_end(p, end)) * cpu_cores(p))
        }));
        let initial: BTreeSet<&str> = before.iter().map(|(_, uid, _)| uid.as_str()).collect();
        let by_name: BTreeMap<&str, &Pod> = r.pods.values().map(|p| (cluster::name(p), p)).collect();
        for e in events.items.iter().filter(|e| e.reason.as_deref() == Some("Preempted")) {
            out.evictions += 1;
            if e.related.as_ref().and_then(|r| r.namespace.as_deref()) == Some("batch") {
                out.evictions_for_offline += 1;
            }
            let victim = e.regarding.as_ref();
            let name = victim.and_then(|v| v.name.as_deref()).unwrap_or_default();
            let pod = victim
                .and_then(|v| r.pods.get(v.uid.as_deref().unwrap_or_default()))
                .or_else(|| by_name.get(name).copied());
            if name.contains("-rq-") || pod.is_some_and(|p| base_name(p).is_some()) {
                out.evictions_of_copies += 1;
            } else if pod.is_some_and(|p| {
                // Not one of the pods the run started with: its controller made it since.
                owner_of_kind(p, &["ReplicaSet", "Job"]).is_some()
                    && !initial.contains(p.metadata.uid.as_deref().unwrap_or_default())
            }) {
                out.evictions_of_recreated += 1;
            }
        }
    }
    if extender.is_some_and(|e| !e.shadow) {
        out.events = plane
            .kubectl(&[
                "get",
                "events",
                "-n",
                "online",
                "--sort-by=.metadata.creationTimestamp",
                "-o",
                "custom-columns=POD:.involvedObject.name,TYPE:.type,REASON:.reason,MESSAGE:.message",
            ])
            .unwrap_or_else(|e| format!("(cannot list events: {e})"));
    }
    drop(_scheduler);
    drop(ext);
    Ok((out, hold.then_some(plane)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `flags` after an extender binary that exists (any file will do until a run starts).
    fn parse(flags: &[&str]) -> Result<Args, String> {
        let extender = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
        parse_args(["--extender", extender].iter().chain(flags).map(|s| s.to_string()))
    }

    #[test]
    fn the_defaults_run_all_four_on_the_shipped_scenario() {
        let a = parse(&[]).unwrap();
        assert!(a.runs == RunKind::ALL, "stock, requeue-only, names, objects");
        assert!(a.scenario.ends_with("testbed/scenarios/colocated.json"));
        assert_eq!((a.seed, a.wave_interval, a.time_scale), (1, Duration::from_secs(3), 1.0));
        assert_eq!(a.weight, crate::scheduler::SHIPPED_WEIGHT);
        assert!(matches!(a.grace, kubelet::Grace::Honour));
    }

    #[test]
    fn runs_are_made_stock_first_and_modes_are_stock_and_those() {
        let names = |a: Args| a.runs.iter().map(|k| k.name()).collect::<Vec<_>>();
        assert_eq!(names(parse(&["--runs", "names,stock"]).unwrap()), ["stock", "names"]);
        assert_eq!(names(parse(&["--modes", "objects"]).unwrap()), ["stock", "objects"]);
        let both = parse(&["--runs", "stock", "--modes", "names"]).err().unwrap();
        assert!(both.contains("--runs") && both.contains("--modes"), "{both}");
        let unknown = parse(&["--runs", "stock,echo"]).err().unwrap();
        assert!(unknown.contains("\"echo\" is none of stock, requeue-only, names, objects"), "{unknown}");
        let unknown = parse(&["--modes", "stock"]).err().unwrap();
        assert!(unknown.contains("\"stock\" is neither names nor objects"), "{unknown}");
    }

    #[test]
    fn numbers_out_of_range_are_refused_with_what_is_expected() {
        for (flags, expected) in [
            (["--generate", "0"], "--generate needs a number of nodes, not \"0\""),
            (["--time-scale", "0"], "--time-scale needs a factor above 0 and at most 1, not \"0\""),
            (["--time-scale", "2"], "--time-scale needs a factor above 0 and at most 1, not \"2\""),
            (["--time-scale", "-0.5"], "--time-scale needs a factor above 0 and at most 1, not \"-0.5\""),
            (["--weight", "0"], "--weight needs a positive number, not \"0\""),
            (["--wave-interval", "-1"], "needs seconds, not \"-1\""),
            (["--grace-cap", "soon"], "needs seconds, not \"soon\""),
        ] {
            let refused = parse(&flags).err().unwrap_or_else(|| panic!("{flags:?} accepted"));
            assert!(refused.contains(expected), "{flags:?}: {refused}");
        }
        let cap = parse(&["--grace-cap", "2.5"]).unwrap();
        assert!(matches!(cap.grace, kubelet::Grace::Cap(d) if d == Duration::from_millis(2500)));
    }

    #[test]
    fn every_run_starts_from_kube_schedulers_placement_unless_each_places_its_own() {
        assert!(!parse(&[]).unwrap().own_placement);
        assert!(parse(&["--generate", "3", "--own-placement"]).unwrap().own_placement);
    }

    #[test]
    fn a_trace_is_not_run_with_a_generated_cluster() {
        // A trace pins the pods there before: no run places them.
        for flags in [
            ["--trace", "t.csv", "--generate", "3"],
            ["--trace", "t.csv", "--no-gangs", "--quiet"],
            ["--trace", "t.csv", "--own-placement", "--quiet"],
        ] {
            let refused = parse(&flags).err().unwrap_or_else(|| panic!("{flags:?} accepted"));
            assert!(refused.contains("--trace"), "{flags:?}: {refused}");
        }
    }

    #[test]
    fn without_an_extender_binary_only_writing_a_trace_goes_on() {
        let argv = |flags: &[&str]| flags.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let missing = parse_args(argv(&["--extender", "/nonexistent/coloc-extender"])).err().unwrap();
        assert!(missing.contains("no extender binary at /nonexistent/coloc-extender"), "{missing}");
        assert!(parse_args(argv(&["--extender", "/nonexistent/coloc-extender", "--write-trace", "t.csv"])).is_ok());
    }
}
