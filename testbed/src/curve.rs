//! The price curve: online pods' p99 time to place against the offline work thrown away,
//! one point per wait price, kube-scheduler alone (`stock`) and `requeue-only` as points of
//! their own, one panel per cluster or trace window; drawn as SVG (coloc-curve) and written
//! as a markdown table docs can quote. Its input is a sweep's manifest (`coloc-sweep`):
//! which `coloc-demo --json` file holds which run.

use std::path::{Path, PathBuf};

use plotters::prelude::*;
use serde::{Deserialize, Serialize};

/// A sweep's record: where each run's figures are.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// What the runs' grace periods and stop times were multiplied by.
    pub time_scale: f64,
    pub entries: Vec<Entry>,
}

/// One `coloc-demo --json` file of a series.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The cluster or trace window.
    pub series: String,
    /// The wait price in real units (offline CPU-seconds per second of an online pod's
    /// wait); `None`: the file's stock and requeue-only runs.
    pub price: Option<f64>,
    /// The price the policy of the run said (the real one divided by the time scale).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_price: Option<f64>,
    /// Relative to the manifest's directory, or absolute.
    pub json: PathBuf,
}

/// One run's figures, as the curve and the table read them.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub series: String,
    /// `stock`, `requeue-only`, `names`, `objects`.
    pub kind: String,
    pub price: Option<f64>,
    pub p50_s: f64,
    pub p99_s: f64,
    pub max_s: f64,
    pub placed: u64,
    pub arrived: u64,
    pub work_cpu_s: f64,
    pub interrupted: u64,
    pub lost: u64,
    pub pdb_violations: i64,
    pub jobs_failed: u64,
}

/// The online class's figures of the demo's result (by class where the arrivals have
/// several; else every arrival's).
const ONLINE_CLASS: &str = "online-prod";

fn number(run: &serde_json::Value, key: &str, file: &Path) -> Result<f64, String> {
    run.get(key).and_then(serde_json::Value::as_f64).ok_or_else(|| format!("{}: a run without {key:?}", file.display()))
}

/// The runs of one `coloc-demo --json` file: its stock and requeue-only ones for an entry
/// with no price, its extender runs for one with a price.
pub fn points(entry: &Entry, json: &serde_json::Value, file: &Path) -> Result<Vec<Point>, String> {
    let runs = json.get("runs").and_then(|r| r.as_array()).ok_or(format!("{}: no \"runs\"", file.display()))?;
    let mut out = Vec::new();
    for run in runs {
        let kind = run.get("kind").and_then(|k| k.as_str()).ok_or(format!("{}: a run without kind", file.display()))?;
        let baseline = matches!(kind, "stock" | "requeue-only");
        if baseline != entry.price.is_none() {
            continue;
        }
        let online = run.get("time_to_place_by_class").and_then(|c| c.get(ONLINE_CLASS));
        let waits = online.unwrap_or(run);
        let (p50, p99, max, placed) = match online {
            Some(_) => ("p50_s", "p99_s", "max_s", "placed"),
            None => ("time_to_place_p50_s", "time_to_place_p99_s", "time_to_place_max_s", "online_placed"),
        };
        let arrived = match online {
            // Older results count arrivals of every class only: then its placed ones.
            Some(c) => c.get("arrived").and_then(|a| a.as_u64()).unwrap_or(number(waits, placed, file)? as u64),
            None => number(run, "online", file)? as u64,
        };
        out.push(Point {
            series: entry.series.clone(),
            kind: kind.to_string(),
            price: entry.price,
            p50_s: number(waits, p50, file)?,
            p99_s: number(waits, p99, file)?,
            max_s: number(waits, max, file)?,
            placed: number(waits, placed, file)? as u64,
            arrived,
            work_cpu_s: number(run, "work_thrown_away_cpu_s", file)?,
            interrupted: number(run, "pods_interrupted", file)? as u64,
            lost: number(run, "bare_lost", file)? as u64,
            pdb_violations: number(run, "pdb_violations", file)? as i64,
            jobs_failed: number(run, "jobs_failed", file)? as u64,
        });
    }
    Ok(out)
}

/// Every point a manifest names, its files read relative to `dir`.
pub fn read(manifest: &Manifest, dir: &Path) -> Result<Vec<Point>, String> {
    let mut all = Vec::new();
    for e in &manifest.entries {
        let file = dir.join(&e.json);
        let text = std::fs::read_to_string(&file).map_err(|err| format!("cannot read {}: {err}", file.display()))?;
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|err| format!("{}: not JSON: {err}", file.display()))?;
        all.extend(points(e, &json, &file)?);
    }
    Ok(all)
}

/// The series in order of first appearance.
fn series(points: &[Point]) -> Vec<&str> {
    let mut s: Vec<&str> = Vec::new();
    for p in points {
        if !s.contains(&p.series.as_str()) {
            s.push(&p.series);
        }
    }
    s
}

/// "0", "10", "1,000", "1e+12": a price as a label.
pub fn price_label(p: f64) -> String {
    if p >= 1e7 {
        return format!("{p:.0e}");
    }
    let digits = format!("{p:.0}");
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// What a point is called on the curve and in the table.
pub fn label(p: &Point) -> String {
    match p.price {
        Some(price) => format!("{} {}", p.kind, price_label(price)),
        None => p.kind.clone(),
    }
}

/// The table, one section per series: every run's figures, the baselines first, then the
/// prices in order.
pub fn table(points: &[Point], time_scale: f64) -> String {
    let mut out = String::new();
    for s in series(points) {
        let mut rows: Vec<&Point> = points.iter().filter(|p| p.series == s).collect();
        rows.sort_by(|a, b| {
            a.price.is_some().cmp(&b.price.is_some()).then(a.price.unwrap_or(0.0).total_cmp(&b.price.unwrap_or(0.0)))
        });
        out += &format!(
            "**{s}** (time ×{time_scale}; a price in offline CPU-s per second of an online pod's wait, real units: the policy said it ÷ {time_scale})\n\n"
        );
        out += "| run | wait price | online placed | online p50 / p99 / max, s | work thrown away, CPU-s | pods interrupted | lost | PDB violations | Jobs failed |\n";
        out += "|---|---|---|---|---|---|---|---|---|\n";
        for p in rows {
            out += &format!(
                "| {} | {} | {}/{} | {:.2} / {:.2} / {:.2} | {} | {} | {} | {} | {} |\n",
                p.kind,
                p.price.map_or("-".into(), price_label),
                p.placed,
                p.arrived,
                p.p50_s,
                p.p99_s,
                p.max_s,
                price_label(p.work_cpu_s),
                p.interrupted,
                p.lost,
                p.pdb_violations,
                p.jobs_failed,
            );
        }
        out.push('\n');
    }
    out
}

/// Draws the curve into `out` (SVG): one panel per series, side by side.
pub fn draw(points: &[Point], title: &str, out: &Path) -> Result<(), String> {
    let names = series(points);
    if names.is_empty() {
        return Err("no run to draw".into());
    }
    let cols = names.len().min(2);
    let rows = names.len().div_ceil(cols);
    let (w, h) = (620 * cols as u32, 460 * rows as u32 + 40);
    let root = SVGBackend::new(out, (w, h)).into_drawing_area();
    let e = |err: DrawingAreaErrorKind<std::io::Error>| format!("drawing {}: {err}", out.display());
    root.fill(&WHITE).map_err(e)?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(e)?;
    for (area, name) in root.split_evenly((rows, cols)).iter().zip(names) {
        panel(area, name, points).map_err(e)?;
    }
    root.present().map_err(e)
}

/// The colour of an extender mode's points and line.
fn kind_colour(kind: &str) -> RGBColor {
    match kind {
        "objects" => RGBColor(214, 120, 20),
        _ => RGBColor(31, 94, 173),
    }
}

fn panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    name: &str,
    points: &[Point],
) -> Result<(), DrawingAreaErrorKind<std::io::Error>> {
    let mine: Vec<&Point> = points.iter().filter(|p| p.series == name).collect();
    let x_max = mine.iter().map(|p| p.work_cpu_s).fold(1.0, f64::max) * 1.3;
    let y_max = mine.iter().map(|p| p.p99_s).fold(0.5, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(area)
        .margin(14)
        .caption(name, ("sans-serif", 17))
        .x_label_area_size(40)
        .y_label_area_size(52)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc("offline work thrown away, CPU-s")
        .y_desc("online p99 time to place, s")
        .x_label_formatter(&|v| price_label(*v))
        .x_labels(6)
        .y_labels(6)
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    let text = ("sans-serif", 12).into_font();
    let mut kinds: Vec<&str> = mine.iter().filter(|p| p.price.is_some()).map(|p| p.kind.as_str()).collect();
    kinds.sort_unstable();
    kinds.dedup();
    // Both nodeCacheCapable modes in one panel: each its colour, and its name on its points.
    let several = kinds.len() > 1;
    for kind in kinds {
        let colour = kind_colour(kind);
        let mut priced: Vec<&Point> = mine.iter().copied().filter(|p| p.price.is_some() && p.kind == kind).collect();
        priced.sort_by(|a, b| a.price.unwrap_or(0.0).total_cmp(&b.price.unwrap_or(0.0)));
        chart.draw_series(LineSeries::new(priced.iter().map(|p| (p.work_cpu_s, p.p99_s)), colour.stroke_width(1)))?;
        chart.draw_series(priced.iter().map(|p| {
            let name = if several { label(p) } else { price_label(p.price.unwrap_or(0.0)) };
            EmptyElement::at((p.work_cpu_s, p.p99_s))
                + Circle::new((0, 0), 4, colour.filled())
                + Text::new(name, (6, -14), text.clone())
        }))?;
    }
    let at = |p: &Point| (p.work_cpu_s, p.p99_s);
    let red = RGBColor(200, 50, 40);
    chart.draw_series(mine.iter().filter(|p| p.kind == "stock" && p.price.is_none()).map(|p| {
        EmptyElement::at(at(p))
            + TriangleMarker::new((0, 0), 7, red.filled())
            + Text::new("stock", (8, 2), text.clone())
    }))?;
    let green = RGBColor(40, 140, 60);
    chart.draw_series(mine.iter().filter(|p| p.kind == "requeue-only" && p.price.is_none()).map(|p| {
        EmptyElement::at(at(p))
            + Cross::new((0, 0), 6, green.stroke_width(2))
            + Text::new("requeue-only", (8, 2), text.clone())
    }))?;
    Ok(())
}
