//! A trace anyone can replay (`coloc-demo --trace FILE`): CSV, one object per row, the
//! schema in docs/traces.md. Rows with a negative `arrival` are the cluster before (that
//! many seconds old when the run starts, in namespace `batch`); rows at 0 or later arrive
//! then, in any namespace, and their time to place is measured, per class. A bad row is
//! refused with its line and column.

use std::collections::BTreeMap;
use std::fmt;

use crate::scenario::{BarePod, JobSpec, NodeSpec, OnlinePod, ReplicaSetSpec, Scenario, Termination};

/// The columns, in the order `write` gives them (a trace may order them as it likes).
pub const COLUMNS: [&str; 12] = [
    "name",
    "arrival",
    "namespace",
    "class",
    "cpu",
    "memory",
    "duration",
    "grace",
    "stop",
    "owner_kind",
    "gang",
    "node",
];

/// The PriorityClasses the test bed creates (`cluster::default_priority_classes`).
pub fn classes() -> Vec<String> {
    crate::cluster::default_priority_classes().into_iter().filter_map(|c| c.metadata.name).collect()
}

/// A trace that cannot be read: where, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceError {
    /// The line of the file (1 is the header); 0 for the trace as a whole.
    pub line: usize,
    pub column: Option<String>,
    pub message: String,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, &self.column) {
            (0, _) => write!(f, "{}", self.message),
            (line, Some(c)) => write!(f, "line {line}, column {c}: {}", self.message),
            (line, None) => write!(f, "line {line}: {}", self.message),
        }
    }
}

impl std::error::Error for TraceError {}

/// One row, its fields by column name.
struct Row<'a> {
    line: usize,
    fields: BTreeMap<&'static str, &'a str>,
}

impl Row<'_> {
    fn err(&self, column: &str, message: impl Into<String>) -> TraceError {
        TraceError { line: self.line, column: Some(column.into()), message: message.into() }
    }

    /// The field, trimmed; `None` where empty.
    fn get(&self, column: &'static str) -> Option<&str> {
        self.fields.get(column).map(|s| s.trim()).filter(|s| !s.is_empty())
    }

    fn required(&self, column: &'static str) -> Result<&str, TraceError> {
        self.get(column).ok_or_else(|| self.err(column, "required"))
    }

    fn name(&self, column: &'static str) -> Result<String, TraceError> {
        let n = self.required(column)?;
        match is_name(n) {
            true => Ok(n.to_string()),
            false => {
                Err(self.err(column, format!("{n:?} is not a name (lower-case letters, digits and -, at most 63)")))
            }
        }
    }

    fn seconds(&self, column: &'static str) -> Result<Option<f64>, TraceError> {
        let Some(s) = self.get(column) else { return Ok(None) };
        match s.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(Some(v)),
            _ => Err(self.err(column, format!("{s:?} is not a number of seconds"))),
        }
    }

    fn not_negative(&self, column: &'static str) -> Result<Option<f64>, TraceError> {
        match self.seconds(column)? {
            Some(v) if v < 0.0 => Err(self.err(column, format!("{v} is negative"))),
            v => Ok(v),
        }
    }

    fn empty(&self, column: &'static str, why: &str) -> Result<(), TraceError> {
        match self.get(column) {
            None => Ok(()),
            Some(v) => Err(self.err(column, format!("{v:?}: {why}"))),
        }
    }
}

/// A name the format takes: lower-case letters, digits and `-` (not first or last), at most 63.
pub fn is_name(n: &str) -> bool {
    n.len() <= 63
        && n.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !n.starts_with('-')
        && !n.ends_with('-')
}

/// "500m", "0.5", "2": millicores, more than 0.
fn cpu(s: &str) -> Option<i64> {
    let m = match s.strip_suffix('m') {
        Some(m) => m.parse::<f64>().ok()?,
        None => s.parse::<f64>().ok()? * 1000.0,
    };
    (m.is_finite() && m > 0.0 && m < 1e12).then(|| m.ceil() as i64)
}

/// "512Mi", "2Gi", "1G", "1048576": MiB, rounded up, at least 1.
fn memory_mi(s: &str) -> Option<i64> {
    let units: [(&str, f64); 8] = [
        ("Ki", 1024.0),
        ("Mi", 1024.0 * 1024.0),
        ("Gi", 1024.0 * 1024.0 * 1024.0),
        ("Ti", 1024.0 * 1024.0 * 1024.0 * 1024.0),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
    ];
    let (number, scale) = units.iter().find_map(|(u, f)| Some((s.strip_suffix(u)?, *f))).unwrap_or((s, 1.0));
    let bytes = number.parse::<f64>().ok()? * scale;
    (bytes.is_finite() && bytes > 0.0 && bytes < 1e18).then(|| ((bytes / (1024.0 * 1024.0)).ceil() as i64).max(1))
}

/// What a ReplicaSet's or Job's rows share (their pods' template), as first read.
#[derive(PartialEq)]
struct Template {
    class: String,
    cpu_m: i64,
    memory_mi: Option<i64>,
    run_s: Option<u64>,
    stop: Termination,
}

/// Reads a trace. `text` is the whole file.
pub fn parse(text: &str) -> Result<Scenario, TraceError> {
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l)).filter(|(_, l)| {
        let t = l.trim();
        !t.is_empty() && !t.starts_with('#')
    });
    let (header_line, header) =
        lines.next().ok_or(TraceError { line: 0, column: None, message: "the trace is empty".into() })?;
    let mut columns: Vec<&'static str> = Vec::new();
    for h in header.split(',').map(str::trim) {
        let known = COLUMNS.iter().find(|c| **c == h).ok_or_else(|| TraceError {
            line: header_line,
            column: Some(h.into()),
            message: format!("unknown column (the columns: {})", COLUMNS.join(", ")),
        })?;
        if columns.contains(known) {
            return Err(TraceError { line: header_line, column: Some(h.into()), message: "given twice".into() });
        }
        columns.push(known);
    }
    for c in ["name", "arrival", "namespace", "class", "cpu", "owner_kind"] {
        if !columns.contains(&c) {
            return Err(TraceError {
                line: header_line,
                column: Some(c.into()),
                message: "missing from the header".into(),
            });
        }
    }
    let known_classes = classes();
    let mut sc = Scenario::default();
    // Workloads by namespace/name: the line that declared it, its template.
    let mut workloads: BTreeMap<(String, String), (usize, Template)> = BTreeMap::new();
    let mut names: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut pinned: Vec<(usize, String)> = Vec::new();
    for (line, text) in lines {
        let values: Vec<&str> = text.split(',').collect();
        if values.len() != columns.len() {
            return Err(TraceError {
                line,
                column: None,
                message: format!("{} field(s), the header has {}", values.len(), columns.len()),
            });
        }
        let row = Row { line, fields: columns.iter().copied().zip(values).collect() };
        let kind = row.required("owner_kind")?;
        let name = row.name("name")?;
        if kind == "Node" {
            for c in ["arrival", "namespace", "class", "duration", "grace", "stop", "gang", "node"] {
                row.empty(c, "a Node row takes name, cpu and memory only")?;
            }
            let cpu_m = cpu(row.required("cpu")?).ok_or_else(|| row.err("cpu", "not a CPU quantity (e.g. 8, 500m)"))?;
            let memory_gi = match row.get("memory") {
                None => None,
                Some(m) => {
                    let mi = memory_mi(m)
                        .ok_or_else(|| row.err("memory", format!("{m:?} is not a memory quantity (e.g. 64Gi)")))?;
                    Some((mi + 1023) / 1024)
                }
            };
            if sc.nodes.iter().any(|n| n.name == name) {
                return Err(row.err("name", format!("node {name} is declared twice")));
            }
            sc.nodes.push(NodeSpec { name, cpu_m, zone: "zone-a".into(), memory_gi });
            continue;
        }
        let arrival = row.seconds("arrival")?.ok_or_else(|| row.err("arrival", "required"))?;
        let namespace = row.name("namespace")?;
        let class = row.required("class")?.to_string();
        if !known_classes.contains(&class) {
            return Err(
                row.err("class", format!("{class:?} is not a class of the test bed ({})", known_classes.join(", ")))
            );
        }
        let c = row.required("cpu")?;
        let cpu_m = cpu(c).ok_or_else(|| row.err("cpu", format!("{c:?} is not a CPU quantity (e.g. 2, 500m)")))?;
        let memory_mi = match row.get("memory") {
            None => None,
            Some(m) => Some(
                memory_mi(m)
                    .ok_or_else(|| row.err("memory", format!("{m:?} is not a memory quantity (e.g. 512Mi, 2Gi)")))?,
            ),
        };
        let run_s = row.not_negative("duration")?.map(|d| d.ceil().max(1.0) as u64);
        let grace_s =
            match row.get("grace") {
                None => None,
                Some(g) => Some(g.parse::<i64>().ok().filter(|g| (0..=86_400).contains(g)).ok_or_else(|| {
                    row.err("grace", format!("{g:?} is not a whole number of seconds from 0 to 86400"))
                })?),
            };
        let stop = Termination { grace_s, stop_s: row.not_negative("stop")? };
        let age_s = (arrival < 0.0).then(|| (-arrival).round() as i64);
        if arrival < 0.0 && namespace != crate::prepared::BATCH {
            return Err(row.err(
                "namespace",
                format!("{namespace:?}: pods there before (a negative arrival) are in namespace batch, the test bed's offline namespace"),
            ));
        }
        match kind {
            "bare" => {
                if let Some(first) = names.insert((namespace.clone(), name.clone()), line) {
                    return Err(row.err("name", format!("{namespace}/{name} is given twice (line {first})")));
                }
                let gang = row.get("gang").map(|_| row.name("gang")).transpose()?;
                let node = row.get("node").map(|_| row.name("node")).transpose()?;
                if arrival >= 0.0 {
                    row.empty("gang", "only pods there before (a negative arrival) are in gangs")?;
                    row.empty("node", "a pod that arrives is placed by the scheduler")?;
                    sc.online.push(OnlinePod {
                        name,
                        cpu_m,
                        wave: 0,
                        at_s: Some(arrival),
                        namespace,
                        class,
                        memory_mi,
                        stop,
                        run_s,
                    });
                } else {
                    if let Some(n) = &node {
                        pinned.push((line, n.clone()));
                    }
                    sc.bare.push(BarePod {
                        name,
                        class,
                        cpu_m,
                        node,
                        gang,
                        gang_min: None,
                        stop,
                        memory_mi,
                        age_s,
                        run_s,
                        namespace,
                    });
                }
            }
            "ReplicaSet" | "Job" => {
                for (c, why) in [
                    ("gang", "only bare pods are in gangs"),
                    ("node", "a controller's pods are placed by the scheduler"),
                ] {
                    row.empty(c, why)?;
                }
                if arrival >= 0.0 {
                    return Err(row.err(
                        "arrival",
                        format!(
                            "{arrival}: a {kind}'s pods are there before (a negative arrival); only bare pods arrive"
                        ),
                    ));
                }
                if kind == "ReplicaSet" && run_s.is_some() {
                    return Err(row.err("duration", "a ReplicaSet's pods run until they are evicted"));
                }
                let t = Template { class, cpu_m, memory_mi, run_s, stop };
                let key = (namespace.clone(), name.clone());
                match workloads.get(&key) {
                    Some((first, seen)) if *seen != t => {
                        return Err(row.err("name", format!("{kind} {namespace}/{name}: its rows must agree on class, cpu, memory, duration, grace and stop (line {first})")));
                    }
                    Some(_) => {}
                    None => {
                        if let Some(first) = names.insert(key.clone(), line) {
                            return Err(row.err("name", format!("{namespace}/{name} is given twice (line {first})")));
                        }
                        workloads.insert(key.clone(), (line, t));
                    }
                }
                match kind {
                    "ReplicaSet" => {
                        match sc.replica_sets.iter_mut().find(|r| (&r.namespace, &r.name) == (&key.0, &key.1)) {
                            Some(r) => r.replicas += 1,
                            None => sc.replica_sets.push(ReplicaSetSpec {
                                name,
                                class: workloads[&key].1.class.clone(),
                                cpu_m,
                                node: None,
                                replicas: 1,
                                pdb_max_unavailable: None,
                                stop,
                                memory_mi,
                                age_s,
                                namespace,
                            }),
                        }
                    }
                    _ => match sc.jobs.iter_mut().find(|j| (&j.namespace, &j.name) == (&key.0, &key.1)) {
                        Some(j) => j.pods += 1,
                        None => sc.jobs.push(JobSpec {
                            name,
                            class: workloads[&key].1.class.clone(),
                            cpu_m,
                            node: None,
                            pods: 1,
                            // Kubernetes' default.
                            backoff_limit: 6,
                            on_disruption: None,
                            stop,
                            memory_mi,
                            age_s,
                            run_s,
                            namespace,
                        }),
                    },
                }
            }
            other => {
                return Err(row.err("owner_kind", format!("{other:?} is none of bare, ReplicaSet, Job, Node")));
            }
        }
    }
    for (line, node) in pinned {
        if !sc.nodes.iter().any(|n| n.name == node) {
            return Err(TraceError {
                line,
                column: Some("node".into()),
                message: format!("node {node} is not declared (a row with owner_kind Node)"),
            });
        }
    }
    let whole = |message: &str| TraceError { line: 0, column: None, message: message.into() };
    if sc.nodes.is_empty() {
        return Err(whole("the trace declares no node (rows with owner_kind Node)"));
    }
    if sc.online.is_empty() {
        return Err(whole("nothing arrives (no bare pod with an arrival of 0 or later)"));
    }
    // A gang needs all of its members, as the generated ones do.
    let sizes: BTreeMap<String, u32> = sc.gangs().into_iter().map(|(g, m)| (g.to_string(), m.len() as u32)).collect();
    for b in &mut sc.bare {
        if let Some(g) = &b.gang {
            b.gang_min = Some(sizes[g]);
        }
    }
    sc.online.sort_by(|a, b| a.at_s.unwrap_or(0.0).total_cmp(&b.at_s.unwrap_or(0.0)));
    sc.about = format!(
        "{} nodes, {} pods there before ({} bare, {} ReplicaSets, {} Jobs), {} arriving over {:.0} s",
        sc.nodes.len(),
        sc.offline_pod_count(),
        sc.bare.len(),
        sc.replica_sets.len(),
        sc.jobs.len(),
        sc.online.len(),
        sc.online.iter().filter_map(|o| o.at_s).fold(0.0, f64::max)
    );
    Ok(sc)
}

/// `sc` as a trace: its nodes, the pods there before (their age as a negative arrival),
/// and the arrivals (a wave at `wave_interval` × its number). What the schema does not
/// hold is left out: zones, PDBs, a Job's backoffLimit and podFailurePolicy.
pub fn write(sc: &Scenario, wave_interval: f64) -> String {
    let mut out = format!("# {}\n{}\n", sc.about, COLUMNS.join(","));
    let mut row = |fields: [String; 12]| {
        out.push_str(&fields.join(","));
        out.push('\n');
    };
    let opt = |v: Option<String>| v.unwrap_or_default();
    let stop = |t: &Termination| (opt(t.grace_s.map(|g| g.to_string())), opt(t.stop_s.map(|s| format!("{s:.1}"))));
    let mem = |m: Option<i64>| opt(m.map(|m| format!("{m}Mi")));
    for n in &sc.nodes {
        let memory = format!("{}Gi", n.memory_gi.unwrap_or(64));
        row([
            n.name.clone(),
            "".into(),
            "".into(),
            "".into(),
            format!("{}m", n.cpu_m),
            memory,
            "".into(),
            "".into(),
            "".into(),
            "Node".into(),
            "".into(),
            "".into(),
        ]);
    }
    for b in &sc.bare {
        let (grace, stop) = stop(&b.stop);
        let age = b.age_s.unwrap_or_else(|| Scenario::age_seconds(&b.name));
        row([
            b.name.clone(),
            format!("-{age}"),
            b.namespace.clone(),
            b.class.clone(),
            format!("{}m", b.cpu_m),
            mem(b.memory_mi),
            opt(b.run_s.map(|r| r.to_string())),
            grace,
            stop,
            "bare".into(),
            opt(b.gang.clone()),
            opt(b.node.clone()),
        ]);
    }
    for r in &sc.replica_sets {
        let (grace, stop) = stop(&r.stop);
        let age = r.age_s.unwrap_or_else(|| Scenario::age_seconds(&r.name));
        for _ in 0..r.replicas {
            row([
                r.name.clone(),
                format!("-{age}"),
                r.namespace.clone(),
                r.class.clone(),
                format!("{}m", r.cpu_m),
                mem(r.memory_mi),
                "".into(),
                grace.clone(),
                stop.clone(),
                "ReplicaSet".into(),
                "".into(),
                "".into(),
            ]);
        }
    }
    for j in &sc.jobs {
        let (grace, stop) = stop(&j.stop);
        let age = j.age_s.unwrap_or_else(|| Scenario::age_seconds(&j.name));
        for _ in 0..j.pods {
            row([
                j.name.clone(),
                format!("-{age}"),
                j.namespace.clone(),
                j.class.clone(),
                format!("{}m", j.cpu_m),
                mem(j.memory_mi),
                opt(j.run_s.map(|r| r.to_string())),
                grace.clone(),
                stop.clone(),
                "Job".into(),
                "".into(),
                "".into(),
            ]);
        }
    }
    for o in &sc.online {
        let (grace, stop) = stop(&o.stop);
        let at = o.at_s.unwrap_or(o.wave as f64 * wave_interval);
        row([
            o.name.clone(),
            format!("{at:.1}"),
            o.namespace.clone(),
            o.class.clone(),
            format!("{}m", o.cpu_m),
            mem(o.memory_mi),
            opt(o.run_s.map(|r| r.to_string())),
            grace,
            stop,
            "bare".into(),
            "".into(),
            "".into(),
        ]);
    }
    out
}
