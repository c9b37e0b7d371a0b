//! One run: fresh pending online pods, the extender (if any), a watch on binds, then
//! kube-scheduler; timed from the first bind to the last.

use std::path::Path;
use std::time::{Duration, Instant};

use coloc_bench::procstat;
use coloc_testbed::{Extender, Scheduler};

use crate::binds::Binds;
use crate::kinds::{self, Hop, Kind, Programs};
use crate::report::{self, round3, RunResult};
use crate::world::{World, ONLINE};

pub struct Settings<'a> {
    pub pods: usize,
    pub offline_pods: usize,
    pub qps: u32,
    pub timeout: Duration,
    pub programs: Programs<'a>,
}

fn cpu(pid: Option<u32>) -> Option<f64> {
    procstat::cpu_seconds(&pid?.to_string())
}

/// Runs `kind` once; writes kube-scheduler's config and the result into `dir`.
pub async fn one(world: &World, kind: Kind, round: usize, s: &Settings<'_>, dir: &Path) -> anyhow::Result<RunResult> {
    let name = format!("{}-{round}", kind.label());
    let created_s = world.online(&name, s.pods).await?;

    let mut extender = None;
    let mut ready_s = None;
    let hop = Hop::for_kind(kind, dir)?;
    if let Some((binary, args)) = kind.program(&s.programs) {
        let t = Instant::now();
        let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        all.extend(hop.extender_args());
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        extender = Some(Extender::start(&world.plane, &name, binary, &all).await?);
        ready_s = Some(t.elapsed().as_secs_f64());
    }
    let ext_pid = extender.as_ref().and_then(|e| e.proc.pid());
    let entries = hop.register(extender.iter().flat_map(|e| kind.entries(&e.url())).collect());

    let binds = Binds::watch(world.client.clone(), ONLINE).await?;
    let ext_cpu0 = cpu(ext_pid);
    let api_cpu0 = cpu(world.plane.apiserver.pid());
    let start = Instant::now();
    let scheduler =
        Scheduler::start_with(&world.plane, &format!("kube-scheduler-{name}"), &entries, s.qps, kind.scheduler_flags())
            .await?;
    let times = binds.wait(s.pods, s.timeout).await;
    let end = times.last().copied().unwrap_or_else(Instant::now);
    let (ext_cpu1, api_cpu1) = (cpu(ext_pid), cpu(world.plane.apiserver.pid()));
    let sched_cpu = cpu(scheduler.proc.pid());
    let load_avg_1m = procstat::load_avg_1m();
    let peak_kib = ext_pid.and_then(|p| procstat::status_kib(&p.to_string(), "VmHWM:"));
    // kube-scheduler records a bind's metrics after the API call returns: let it finish.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let metrics = scheduler.metrics().await.unwrap_or_default();
    std::fs::write(dir.join("scheduler-config.yaml"), &scheduler.config)?;
    drop(scheduler);
    drop(extender);

    let bound = times.len();
    if bound < s.pods {
        eprintln!("coloc-loop: {name}: only {bound} of {} pods bound within {:?}", s.pods, s.timeout);
    }
    let first_to_all = match (times.first(), times.last()) {
        (Some(a), Some(b)) => b.duration_since(*a).as_secs_f64(),
        _ => 0.0,
    };
    let ext_cpu = ext_cpu1.zip(ext_cpu0).map(|(b, a)| b - a);
    let algorithm = report::quantiles(&metrics, "scheduler_scheduling_algorithm_duration_seconds", &[]);
    let attempt =
        report::quantiles(&metrics, "scheduler_scheduling_attempt_duration_seconds", &["result=\"scheduled\""]);
    Ok(RunResult {
        run: kind.label().to_string(),
        round,
        nodes: world.nodes(),
        offline_pods: s.offline_pods,
        pods: s.pods,
        extender: entries.first().map_or("none".into(), |e| e.url_prefix.clone()),
        node_cache_capable: entries.first().map(|e| e.node_cache_capable),
        verbs: (!entries.is_empty()).then(|| entries.iter().map(kinds::verbs).collect::<Vec<_>>().join(" + ")),
        scheduler_qps: s.qps,
        scheduler_burst: s.qps * 2,
        created_s: round3(created_s),
        extender_ready_s: ready_s.map(round3),
        bound,
        seconds_first_to_all: round3(first_to_all),
        seconds_start_to_all: round3(end.saturating_duration_since(start).as_secs_f64()),
        pods_per_s: round3(bound as f64 / first_to_all.max(1e-9)),
        vs_stock: None,
        algorithm_p50_ms: algorithm.p50,
        algorithm_p99_ms: algorithm.p99,
        attempt_p50_ms: attempt.p50,
        attempt_p99_ms: attempt.p99,
        extension_points_ms: report::extension_points(&metrics),
        extender_cpu_s: ext_cpu.map(round3),
        extender_cpu_ms_per_pod: ext_cpu.map(|c| round3(c * 1e3 / bound.max(1) as f64)),
        extender_startup_cpu_s: ext_cpu0.map(round3),
        extender_peak_rss_mb: peak_kib.map(|k| round3(k as f64 / 1024.0)),
        scheduler_cpu_s: sched_cpu.map(round3),
        apiserver_cpu_s: api_cpu1.zip(api_cpu0).map(|(b, a)| round3(b - a)),
        load_avg_1m,
    })
}
