//! coloc-sweep: one `coloc-demo` run per wait price on one cluster or trace, and (asked
//! for) stock and requeue-only on the same; each run's JSON kept, and recorded in
//! OUT/sweep.json for coloc-curve. Prices are real; the policies say them divided by the
//! time scale (`coloc_testbed::sweep`). Needs KUBE_BIN_DIR, like coloc-demo.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::Parser;
use coloc_testbed::curve::{Entry, Manifest};
use coloc_testbed::sweep;

const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

#[derive(Parser)]
#[command(about = "coloc-demo once per wait price (real units), and stock and requeue-only, on one cluster or trace")]
struct Cli {
    /// What the cluster or window is called in the manifest, the curve and the table.
    #[arg(long)]
    series: String,
    /// Where the runs' files and sweep.json go.
    #[arg(long)]
    out: PathBuf,
    /// A trace to replay (coloc-demo --trace).
    #[arg(long, conflicts_with = "generate")]
    trace: Option<PathBuf>,
    /// A generated cluster of this many nodes (coloc-demo --generate), with --seed and --mixed-grace.
    #[arg(long)]
    generate: Option<u32>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long)]
    mixed_grace: bool,
    /// Grace periods and stop times multiplied by this (coloc-demo --time-scale).
    #[arg(long, default_value_t = 0.1)]
    time_scale: f64,
    /// Wait prices, real units: offline CPU-seconds per second of an online pod's wait.
    #[arg(long, value_delimiter = ',')]
    prices: Vec<f64>,
    /// The extender's nodeCacheCapable mode of the priced runs.
    #[arg(long, default_value = "names", value_parser = ["names", "objects"])]
    mode: String,
    /// Also run stock and requeue-only (once; independent of the price).
    #[arg(long)]
    baselines: bool,
    /// The policy whose class gets the price (default: the shipped default policy).
    #[arg(long)]
    policy: Option<PathBuf>,
    /// The class whose waitPrice is set.
    #[arg(long, default_value = "online")]
    class: String,
    /// coloc-demo (default: this repository's release build).
    #[arg(long)]
    demo: Option<PathBuf>,
    /// The coloc-extender binary coloc-demo runs (its --extender; default: the release build).
    #[arg(long)]
    extender: Option<PathBuf>,
}

impl Cli {
    fn source(&self) -> Result<Vec<String>, String> {
        let mut args = match (&self.trace, self.generate) {
            (Some(t), _) => vec!["--trace".into(), t.display().to_string()],
            (None, Some(n)) => vec!["--generate".into(), n.to_string(), "--seed".into(), self.seed.to_string()],
            (None, None) => return Err("give --trace FILE or --generate NODES".into()),
        };
        if self.mixed_grace {
            args.push("--mixed-grace".into());
        }
        args.extend(["--time-scale".into(), self.time_scale.to_string(), "--quiet".into()]);
        if let Some(e) = &self.extender {
            args.extend(["--extender".into(), e.display().to_string()]);
        }
        Ok(args)
    }
}

/// Runs coloc-demo with `args`, its output kept beside the JSON.
fn demo(bin: &Path, args: &[String], log: &Path) -> Result<(), String> {
    let out = Command::new(bin).args(args).output().map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
    let mut text = out.stdout;
    text.extend(out.stderr);
    std::fs::write(log, &text).map_err(|e| format!("cannot write {}: {e}", log.display()))?;
    match out.status.success() {
        true => Ok(()),
        false => Err(format!("{} failed ({}); its output: {}", bin.display(), out.status, log.display())),
    }
}

/// Adds `entry` to OUT/sweep.json (replacing one of the same series and price).
fn record(out: &Path, time_scale: f64, entry: Entry) -> Result<(), String> {
    let path = out.join("sweep.json");
    let mut m = match std::fs::read_to_string(&path) {
        Ok(t) => serde_json::from_str(&t).map_err(|e| format!("{}: not a sweep's manifest: {e}", path.display()))?,
        Err(_) => Manifest { time_scale, entries: Vec::new() },
    };
    if m.time_scale != time_scale {
        return Err(format!("{} was swept at time scale {}, not {time_scale}", path.display(), m.time_scale));
    }
    m.entries.retain(|e| (&e.series, e.price) != (&entry.series, entry.price));
    m.entries.push(entry);
    std::fs::write(&path, serde_json::to_string_pretty(&m).expect("a manifest is JSON"))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let run = || -> Result<(), String> {
        if !(cli.time_scale > 0.0 && cli.time_scale <= 1.0) {
            return Err(format!("--time-scale {}: above 0 and at most 1", cli.time_scale));
        }
        if let Some(p) = cli.prices.iter().find(|p| !(p.is_finite() && **p >= 0.0)) {
            return Err(format!("--prices: {p} is not a price (0 or more)"));
        }
        let source = cli.source()?;
        let bin = cli.demo.clone().unwrap_or_else(|| Path::new(REPO).join("target/release/coloc-demo"));
        let policy_file = cli.policy.clone().unwrap_or_else(|| Path::new(REPO).join("policy/default.yaml"));
        let base =
            std::fs::read_to_string(&policy_file).map_err(|e| format!("cannot read {}: {e}", policy_file.display()))?;
        let dir = cli.out.join(&cli.series);
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let rel = |name: String| PathBuf::from(&cli.series).join(name);
        if cli.baselines {
            let json = dir.join("baselines.json");
            println!("{}: stock, requeue-only ...", cli.series);
            let args = [
                &source[..],
                &["--runs".into(), "stock,requeue-only".into(), "--json".into(), json.display().to_string()],
            ]
            .concat();
            demo(&bin, &args, &dir.join("baselines.log"))?;
            record(
                &cli.out,
                cli.time_scale,
                Entry {
                    series: cli.series.clone(),
                    price: None,
                    policy_price: None,
                    json: rel("baselines.json".into()),
                },
            )?;
        }
        for &price in &cli.prices {
            let said = sweep::policy_price(price, cli.time_scale);
            let stem = sweep::file_stem(price);
            let policy = dir.join(format!("{stem}.yaml"));
            let text = sweep::with_wait_price(&base, &cli.class, said).ok_or(format!(
                "{}: no class {:?}",
                policy_file.display(),
                cli.class
            ))?;
            std::fs::write(&policy, text).map_err(|e| format!("cannot write {}: {e}", policy.display()))?;
            let json = dir.join(format!("{stem}.json"));
            println!(
                "{}: price {price} CPU-s per s of wait (real; the policy says waitPrice {said}: waits at time ×{} are that much shorter) ...",
                cli.series, cli.time_scale
            );
            let args = [
                &source[..],
                &[
                    "--runs".into(),
                    cli.mode.clone(),
                    "--policy".into(),
                    policy.display().to_string(),
                    "--json".into(),
                    json.display().to_string(),
                ],
            ]
            .concat();
            demo(&bin, &args, &dir.join(format!("{stem}.log")))?;
            record(
                &cli.out,
                cli.time_scale,
                Entry {
                    series: cli.series.clone(),
                    price: Some(price),
                    policy_price: Some(said),
                    json: rel(format!("{stem}.json")),
                },
            )?;
        }
        Ok(())
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("coloc-sweep: {e}");
            ExitCode::FAILURE
        }
    }
}
