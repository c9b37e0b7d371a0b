//! Alibaba's openb trace (cluster-trace-gpu-v2023: `openb_node_list_*.csv`,
//! `openb_pod_list_*.csv`) as a window `coloc-demo --trace` replays (docs/traces.md,
//! "Converting a public co-location trace"):
//!
//! - the cluster: the node list's first `nodes` CPU-only nodes (`gpu` 0), as listed;
//! - pods: the CPU-only ones (`num_gpu` 0: the test bed's nodes offer no GPUs); `LS`
//!   (latency sensitive) is online (`online-prod`), every other QoS offline
//!   (`offline-batch`, the class the shipped policy evicts for online pods and requeues);
//! - time: the trace's creation times divided by `speed` (so many trace seconds a replay
//!   second), each pod running its own lifetime from the trace (deletion less its
//!   scheduling) unscaled: the window's arrivals come `speed` times as fast as they did,
//!   which is where the contention comes from (the trace's 1,523 nodes become a few);
//! - pods there before: created before the window and still running at its start on that
//!   clock (their age on it too, or the trace's own with `real_ages`), the newest first, each on the first kept node with room for it (pinned, the
//!   same in every run); those with no room, or ending within [`SETTLE_S`] (they would end
//!   while the test bed starts), are left out and counted;
//! - arrivals: every pod created within the window, at its time on that clock;
//! - offline pods' grace periods and stop times drawn from [`GRACE_MIX`] (one draw each,
//!   seeded); online pods keep the API server's default (they are never victims).

use std::collections::BTreeMap;
use std::fmt;

use crate::scenario::{BarePod, GraceMix, NodeSpec, OnlinePod, Scenario, Termination, GRACE_MIX};

/// Pods there before ending this soon after the replay starts are left out.
pub const SETTLE_S: f64 = 60.0;

/// The class `LS` pods get; every other QoS is [`OFFLINE`].
pub const ONLINE: &str = "online-prod";
pub const OFFLINE: &str = "offline-batch";

/// What to cut from the trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    /// Trace seconds (`creation_time`'s clock) where the window starts.
    pub start_s: i64,
    /// Trace seconds it lasts.
    pub length_s: i64,
    /// Trace seconds per replay second, for creation times (lifetimes run unscaled).
    pub speed: f64,
    /// How many of the node list's CPU-only nodes to keep.
    pub nodes: usize,
    /// Seeds the grace periods' and stop times' draws.
    pub seed: u64,
    /// Pods there before have run since their creation in the trace, unscaled (hours or
    /// days: the work an eviction throws away in production), not since their creation on
    /// the replay's clock (minutes: comparable with generated clusters).
    pub real_ages: bool,
}

/// A CSV of the trace that cannot be read: the file, where, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsvError {
    pub file: String,
    /// The file's line (1 is the header); 0 for the file as a whole.
    pub line: usize,
    pub column: Option<String>,
    pub message: String,
}

impl fmt::Display for CsvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, &self.column) {
            (0, _) => write!(f, "{}: {}", self.file, self.message),
            (line, Some(c)) => write!(f, "{}: line {line}, column {c}: {}", self.file, self.message),
            (line, None) => write!(f, "{}: line {line}: {}", self.file, self.message),
        }
    }
}

impl std::error::Error for CsvError {}

/// A CSV file given by its name (for errors) and its text.
#[derive(Clone, Copy)]
pub struct Csv<'a> {
    pub file: &'a str,
    pub text: &'a str,
}

/// One row of a CSV, its fields by column.
struct Row<'a> {
    file: &'a str,
    line: usize,
    fields: BTreeMap<&'a str, &'a str>,
}

impl<'a> Row<'a> {
    fn err(&self, column: &str, message: impl Into<String>) -> CsvError {
        CsvError { file: self.file.into(), line: self.line, column: Some(column.into()), message: message.into() }
    }

    /// The field, trimmed; `None` where empty.
    fn get(&self, column: &str) -> Option<&'a str> {
        self.fields.get(column).map(|s| s.trim()).filter(|s| !s.is_empty())
    }

    fn text(&self, column: &str) -> Result<&'a str, CsvError> {
        self.get(column).ok_or_else(|| self.err(column, "required"))
    }

    /// A whole number, at least 0; `None` where empty.
    fn count(&self, column: &str) -> Result<Option<i64>, CsvError> {
        let Some(s) = self.get(column) else { return Ok(None) };
        match s.parse::<i64>() {
            Ok(v) if v >= 0 => Ok(Some(v)),
            _ => Err(self.err(column, format!("{s:?} is not a whole number, 0 or more"))),
        }
    }

    fn required(&self, column: &str) -> Result<i64, CsvError> {
        self.count(column)?.ok_or_else(|| self.err(column, "required"))
    }
}

/// The rows of `csv`, each with the columns `needed` (checked against its header).
fn rows<'a>(csv: Csv<'a>, needed: &[&str]) -> Result<Vec<Row<'a>>, CsvError> {
    let whole = |message: String| CsvError { file: csv.file.into(), line: 0, column: None, message };
    let mut lines = csv.text.lines().enumerate().map(|(i, l)| (i + 1, l)).filter(|(_, l)| !l.trim().is_empty());
    let (header_line, header) = lines.next().ok_or_else(|| whole("the file is empty".into()))?;
    let columns: Vec<&str> = header.split(',').map(str::trim).collect();
    for c in needed {
        if !columns.contains(c) {
            return Err(CsvError {
                file: csv.file.into(),
                line: header_line,
                column: Some(c.to_string()),
                message: "missing from the header".into(),
            });
        }
    }
    lines
        .map(|(line, text)| {
            let values: Vec<&str> = text.split(',').collect();
            if values.len() != columns.len() {
                return Err(CsvError {
                    file: csv.file.into(),
                    line,
                    column: None,
                    message: format!("{} field(s), the header has {}", values.len(), columns.len()),
                });
            }
            Ok(Row { file: csv.file, line, fields: columns.iter().copied().zip(values).collect() })
        })
        .collect()
}

/// A name the trace format takes (lower-case letters, digits and `-`).
fn name(row: &Row<'_>, column: &str) -> Result<String, CsvError> {
    let n = row.text(column)?;
    match crate::trace::is_name(n) {
        true => Ok(n.to_string()),
        false => Err(row.err(column, format!("{n:?} is not a name (lower-case letters, digits and -, at most 63)"))),
    }
}

/// A pod of the trace, CPU-only, as read.
struct TracePod {
    name: String,
    cpu_m: i64,
    memory_mi: i64,
    online: bool,
    created_s: i64,
    /// Trace seconds from scheduled (else created) to deleted; `None`: never deleted.
    lifetime_s: Option<i64>,
    scheduled: bool,
}

/// What [`convert`] made, and what it left out.
pub struct Converted {
    pub scenario: Scenario,
    /// GPU pods dropped (the whole trace's).
    pub gpu_pods: usize,
    /// Pods running at the window's start with no room on the kept nodes.
    pub no_room: usize,
    /// Pods running at the window's start that end within [`SETTLE_S`].
    pub ending: usize,
}

/// The window `w` of the openb trace as a scenario: see the module's comment.
pub fn convert(node_list: Csv<'_>, pod_list: Csv<'_>, w: &Window) -> Result<Converted, CsvError> {
    let whole = |file: &str, message: String| CsvError { file: file.into(), line: 0, column: None, message };
    let mut nodes = Vec::new();
    for row in rows(node_list, &["sn", "cpu_milli", "memory_mib", "gpu"])? {
        let gpu = row.required("gpu")?;
        let cpu_m = row.required("cpu_milli")?;
        let memory_mib = row.required("memory_mib")?;
        let node = name(&row, "sn")?;
        if cpu_m == 0 {
            return Err(row.err("cpu_milli", "a node with no CPU"));
        }
        if gpu == 0 && nodes.len() < w.nodes {
            nodes.push(NodeSpec {
                name: node,
                cpu_m,
                zone: "zone-a".into(),
                memory_gi: Some((memory_mib + 1023) / 1024),
            });
        }
    }
    if nodes.len() < w.nodes {
        return Err(whole(node_list.file, format!("{} CPU-only nodes (gpu 0), {} asked", nodes.len(), w.nodes)));
    }
    let mut pods = Vec::new();
    let mut gpu_pods = 0;
    let needed =
        ["name", "cpu_milli", "memory_mib", "num_gpu", "qos", "creation_time", "deletion_time", "scheduled_time"];
    for row in rows(pod_list, &needed)? {
        if row.required("num_gpu")? > 0 {
            gpu_pods += 1;
            continue;
        }
        let cpu_m = row.required("cpu_milli")?;
        if cpu_m == 0 {
            return Err(row.err("cpu_milli", "a pod requesting no CPU"));
        }
        let created_s = row.required("creation_time")?;
        let scheduled = row.count("scheduled_time")?;
        let lifetime_s = match row.count("deletion_time")? {
            Some(d) => {
                let from = scheduled.unwrap_or(created_s);
                if d < from {
                    return Err(row.err("deletion_time", format!("{d} is before its scheduling or creation ({from})")));
                }
                Some(d - from)
            }
            None => None,
        };
        pods.push(TracePod {
            name: name(&row, "name")?,
            cpu_m,
            memory_mi: row.required("memory_mib")?.max(1),
            online: row.text("qos")? == "LS",
            created_s,
            lifetime_s,
            scheduled: scheduled.is_some(),
        });
    }
    // The replay's clock: trace seconds from the window's start, divided by the speed.
    let at = |p: &TracePod| (p.created_s - w.start_s) as f64 / w.speed;
    let end = |p: &TracePod| p.lifetime_s.map(|l| at(p) + l as f64);
    let mut running: Vec<&TracePod> =
        pods.iter().filter(|p| p.created_s < w.start_s && p.scheduled && end(p).is_none_or(|e| e > 0.0)).collect();
    running.sort_by(|a, b| b.created_s.cmp(&a.created_s).then(a.name.cmp(&b.name)));
    let ending = running.iter().filter(|p| end(p).is_some_and(|e| e <= SETTLE_S)).count();
    running.retain(|p| end(p).is_none_or(|e| e > SETTLE_S));
    let mut room: Vec<(i64, i64)> = nodes.iter().map(|n| (n.cpu_m, n.memory_gi.unwrap_or(64) * 1024)).collect();
    let mut mix = GraceMix::seeded(w.seed);
    let mut draw = |online: bool| if online { Termination::default() } else { mix.draw() };
    let mut sc = Scenario { nodes, ..Scenario::default() };
    let mut no_room = 0;
    for p in running {
        let Some(i) = room.iter().position(|(cpu, mem)| *cpu >= p.cpu_m && *mem >= p.memory_mi) else {
            no_room += 1;
            continue;
        };
        room[i] = (room[i].0 - p.cpu_m, room[i].1 - p.memory_mi);
        sc.bare.push(BarePod {
            name: p.name.clone(),
            class: class(p).into(),
            cpu_m: p.cpu_m,
            node: Some(sc.nodes[i].name.clone()),
            gang: None,
            gang_min: None,
            stop: draw(p.online),
            memory_mi: Some(p.memory_mi),
            age_s: Some(match w.real_ages {
                true => w.start_s - p.created_s,
                false => (-at(p)).round() as i64,
            }),
            run_s: end(p).map(|e| e.ceil() as u64),
            namespace: crate::prepared::BATCH.into(),
        });
    }
    let window_end = w.start_s + w.length_s;
    for p in pods.iter().filter(|p| (w.start_s..window_end).contains(&p.created_s)) {
        sc.online.push(OnlinePod {
            name: p.name.clone(),
            cpu_m: p.cpu_m,
            wave: 0,
            at_s: Some(at(p)),
            namespace: if p.online { crate::prepared::ONLINE } else { crate::prepared::BATCH }.into(),
            class: class(p).into(),
            memory_mi: Some(p.memory_mi),
            stop: draw(p.online),
            run_s: p.lifetime_s.map(|l| l.max(1) as u64),
        });
    }
    if sc.online.is_empty() {
        return Err(whole(pod_list.file, format!("no CPU-only pod is created in {}..{window_end} s", w.start_s)));
    }
    let online = sc.online.iter().filter(|o| o.class == ONLINE).count();
    sc.about = format!(
        "openb window {}..{window_end} s at {} trace s per s, {} nodes (the node list's first CPU-only), {} pods there before ({} left out: {no_room} no room, {ending} ending within {SETTLE_S} s), {} arriving ({online} {ONLINE}), {gpu_pods} GPU pods dropped; LS {ONLINE}, other QoS {OFFLINE}; offline grace: {GRACE_MIX}, seed {}",
        w.start_s,
        w.speed,
        sc.nodes.len(),
        sc.bare.len(),
        no_room + ending,
        sc.online.len(),
        w.seed,
    );
    Ok(Converted { scenario: sc, gpu_pods, no_room, ending })
}

fn class(p: &TracePod) -> &'static str {
    if p.online {
        ONLINE
    } else {
        OFFLINE
    }
}

/// How full the window's cluster is: what the pods there before and the arrivals ask of
/// the nodes, per class (to pick windows and node counts where online pods need room).
pub fn fill(sc: &Scenario) -> String {
    let cores = |m: i64| m as f64 / 1000.0;
    let total = cores(sc.nodes.iter().map(|n| n.cpu_m).sum());
    let before = |online: bool| cores(sc.bare.iter().filter(|b| (b.class == ONLINE) == online).map(|b| b.cpu_m).sum());
    let arriving =
        |online: bool| cores(sc.online.iter().filter(|o| (o.class == ONLINE) == online).map(|o| o.cpu_m).sum());
    format!(
        "nodes: {total:.0} CPUs; there before: {:.0} CPUs ({:.0} {ONLINE}, {:.0} {OFFLINE}, {:.0} % of the nodes); arriving: {:.0} CPUs {ONLINE}, {:.0} CPUs {OFFLINE}",
        before(true) + before(false),
        before(true),
        before(false),
        100.0 * (before(true) + before(false)) / total,
        arriving(true),
        arriving(false),
    )
}
