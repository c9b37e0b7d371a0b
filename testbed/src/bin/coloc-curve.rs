//! coloc-curve: the price curve (online p99 time to place against work thrown away, one
//! point per wait price, stock and requeue-only apart) of one or more sweeps' manifests,
//! as SVG and as a markdown table (`coloc_testbed::curve`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use coloc_testbed::curve::{self, Manifest};

#[derive(Parser)]
#[command(about = "The wait price's curve of coloc-sweep manifests, as SVG and a markdown table")]
struct Cli {
    /// Manifests coloc-sweep wrote (sweep.json); their entries' files are read relative to each.
    #[arg(required = true)]
    manifests: Vec<PathBuf>,
    /// The SVG to write.
    #[arg(long)]
    svg: PathBuf,
    /// The markdown table to write (else printed).
    #[arg(long)]
    table: Option<PathBuf>,
    #[arg(long, default_value = "online p99 time to place against offline work thrown away, per wait price")]
    title: String,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let run = || -> Result<(), String> {
        let mut points = Vec::new();
        let mut scale = None;
        for path in &cli.manifests {
            let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            let m: Manifest =
                serde_json::from_str(&text).map_err(|e| format!("{}: not a sweep's manifest: {e}", path.display()))?;
            if scale.is_some_and(|s| s != m.time_scale) {
                return Err(format!("{}: time scale {} differs from the others'", path.display(), m.time_scale));
            }
            scale = Some(m.time_scale);
            points.extend(curve::read(&m, path.parent().unwrap_or(std::path::Path::new(".")))?);
        }
        curve::draw(&points, &cli.title, &cli.svg)?;
        let table = curve::table(&points, scale.unwrap_or(1.0));
        match &cli.table {
            Some(t) => std::fs::write(t, &table).map_err(|e| format!("cannot write {}: {e}", t.display()))?,
            None => print!("{table}"),
        }
        Ok(())
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("coloc-curve: {e}");
            ExitCode::FAILURE
        }
    }
}
