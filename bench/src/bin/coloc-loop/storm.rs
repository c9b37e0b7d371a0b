//! Storm: P online pods that each need four evictions, all pending when kube-scheduler
//! starts. Each run gets a control plane of its own (a storm destroys what it runs on):
//! P full nodes of 32 CPU, each holding four bare `offline-batch` pods of 7.9 CPU, a
//! kubelet stand-in that lets preempted pods go, and, behind kube-scheduler, the run's
//! extender with `--requeue`. The online pods are created at once once kube-scheduler
//! runs. Reports time to place (from the start of their creation to bind), the
//! evictions, the bare pods lost (gone with no replacement) and the extender's API writes
//! per victim (replacements stored, released and cleaned up, requeue's and the
//! preemptors' Events, wakes), with copies and Events apart, and the extender's `preempt`
//! quantiles. After the last bind it waits for every evicted bare pod's copy (stored
//! before the answer, or, since the requeue controller, once the victim is being deleted)
//! and for their release; what is left afterwards (pods still carrying a finalizer of
//! ours, replacements still gated) is counted as residue.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use coloc_bench::procstat;
use coloc_extender::model::marks::{FROM_UID, GUARD};
use coloc_testbed::cluster::{self, PodBuilder};
use coloc_testbed::{kubelet, prepared, wait, Binaries, ControlPlane, Extender, Kubelet, Scheduler};
use serde::Serialize;

use crate::binds::Binds;
use crate::kinds::{Hop, Kind, Programs};
use crate::report::round3;
use crate::world::{self, OFFLINE, ONLINE};

const NODE_MILLI_CPU: i64 = 32_000;
const VICTIM_MILLI_CPU: i64 = 7_900;
const VICTIMS_PER_NODE: usize = 4;
/// Needs all four victims of a node gone (4 × 7.9 leaves 0.4 CPU).
const ONLINE_MILLI_CPU: i64 = 31_000;

#[derive(Debug, Default, Serialize)]
pub struct StormResult {
    pub run: String,
    pub round: usize,
    pub pods: usize,
    pub placed: usize,
    pub place_p50_s: Option<f64>,
    pub place_p90_s: Option<f64>,
    pub place_p99_s: Option<f64>,
    pub place_max_s: Option<f64>,
    pub evictions: usize,
    pub replacements: usize,
    /// Copies (of evicted originals) no longer gated at the end.
    pub replacements_released: usize,
    pub lost: usize,
    /// Seconds from the storm's start until every evicted original had a copy (copies are
    /// stored once the original is being deleted, so they may trail the binds), or `None`
    /// if some never came within the wait.
    pub all_copied_s: Option<f64>,
    /// The extender's writes to the API server: replacements created, released, cleaned
    /// up, Events posted, wakes.
    pub extender_api_writes: Option<f64>,
    pub extender_api_writes_per_victim: Option<f64>,
    /// The extender's own counters: copies created (`coloc_requeue_replacements_total`
    /// outcome created), failed, released, cleaned up; Events written (requeue's and preemptors').
    pub copies_created: Option<f64>,
    pub copies_failed: Option<f64>,
    pub copies_released: Option<f64>,
    pub copies_cleaned: Option<f64>,
    pub extender_events: Option<f64>,
    /// (created + released + cleaned) per eviction, and Events per eviction.
    pub copy_writes_per_victim: Option<f64>,
    pub events_per_victim: Option<f64>,
    /// Seconds from the storm's start until every replacement whose original is gone was
    /// released (requeue's background writes yield to kube-scheduler's preemptions).
    pub all_released_s: Option<f64>,
    /// After that: pods carrying the extender's finalizer, and replacements whose original
    /// is gone but that are still gated. Both must be 0.
    pub residue_guarded: usize,
    pub residue_gated: usize,
    /// The extender's mean time to answer `preempt` (kube-scheduler's thread waits for it).
    pub extender_preempt_mean_ms: Option<f64>,
    /// `coloc_request_duration_seconds{verb="preempt"}` quantiles (bucket-interpolated) and count.
    pub extender_preempt_p50_ms: Option<f64>,
    pub extender_preempt_p99_ms: Option<f64>,
    pub extender_preempts: Option<f64>,
    pub extender_cpu_s: Option<f64>,
}

fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    Some(round3(sorted[((last as f64) * q).round() as usize]))
}

/// The cluster before the storm: `pods` full nodes, their victims running.
async fn build(bins: &Binaries, pods: usize) -> anyhow::Result<(ControlPlane, kube::Client, Kubelet)> {
    let (plane, client) =
        world::control_plane(bins, &[&prepared::BASE_RBAC[..], &prepared::REQUEUE_RBAC[..]].concat()).await?;
    let stand_in = Kubelet::start(client.clone(), kubelet::Options::default());
    let node = |i: usize| format!("storm-{i:05}");
    cluster::create_all(
        &client,
        (0..pods).map(|i| cluster::node(&node(i), NODE_MILLI_CPU, 256, &format!("zone-{}", i % 3))).collect(),
    )
    .await?;
    let victims = (0..pods * VICTIMS_PER_NODE)
        .map(|v| {
            PodBuilder::new(OFFLINE, &format!("victim-{v:06}"), "offline-batch", VICTIM_MILLI_CPU)
                .on(&node(v / VICTIMS_PER_NODE))
                .build()
        })
        .collect();
    cluster::create_all(&client, victims).await?;
    let want = pods * VICTIMS_PER_NODE;
    wait::until(Duration::from_secs(300), "the storm's victims running", || async {
        let running = cluster::pods(&client, Some(OFFLINE))
            .await
            .map_err(|e| e.to_string())?
            .iter()
            .filter(|p| cluster::phase(p) == "Running")
            .count();
        if running == want {
            Ok(())
        } else {
            Err(format!("{running} of {want} running"))
        }
    })
    .await?;
    Ok((plane, client, stand_in))
}

/// What every storm run of an invocation shares.
pub struct Settings<'a> {
    pub pods: usize,
    pub qps: u32,
    pub timeout: Duration,
    pub programs: Programs<'a>,
    /// API server and etcd on the last CPU, kube-scheduler and the extender on the others.
    pub pin_control_plane: bool,
}

/// Pins process `pid` (all its threads) to `cpus` (a `taskset` list), if there is one.
fn pin(pid: Option<u32>, cpus: &str) {
    if let Some(pid) = pid {
        let ok = std::process::Command::new("taskset")
            .args(["-a", "-p", "-c", cpus, &pid.to_string()])
            .stdout(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("coloc-loop: could not pin {pid} to CPUs {cpus} (taskset)");
        }
    }
}

/// The CPU list of the control plane (the last CPU) and of the rest (the others).
fn cpu_lists() -> (String, String) {
    let n = std::thread::available_parallelism().map_or(2, |n| n.get());
    let last = n.saturating_sub(1);
    let rest = if last == 0 { "0".to_string() } else { format!("0-{}", last.saturating_sub(1)) };
    (last.to_string(), rest)
}

pub async fn one(
    bins: &Binaries,
    kind: Kind,
    round: usize,
    s: &Settings<'_>,
    dir: &Path,
) -> anyhow::Result<StormResult> {
    let (pods, qps, timeout) = (s.pods, s.qps, s.timeout);
    let name = format!("storm-{}-{round}", kind.label());
    let (plane, client, _stand_in) = build(bins, pods).await?;
    let before: Vec<(String, String)> = cluster::pods(&client, Some(OFFLINE))
        .await?
        .iter()
        .map(|p| (cluster::name(p).to_string(), p.metadata.uid.clone().unwrap_or_default()))
        .collect();

    let hop = Hop::for_kind(kind, dir)?;
    let extender = match kind.program(&s.programs) {
        Some((binary, args)) => {
            let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
            if !kind.is_echo() {
                all.push("--requeue".into());
            }
            all.extend(hop.extender_args());
            let all: Vec<&str> = all.iter().map(String::as_str).collect();
            Some(Extender::start(&plane, &name, binary, &all).await?)
        }
        None => None,
    };
    let ext_pid = extender.as_ref().and_then(|e| e.proc.pid());
    let cpu0 = ext_pid.and_then(|p| procstat::cpu_seconds(&p.to_string()));
    // The echo floor preempts too: it answers kube-scheduler's own victims, and writes
    // nothing; echo-objects is the floor of objects mode (full Nodes and victims).
    let entries: Vec<_> = match kind {
        Kind::Echo => extender.iter().map(|e| coloc_testbed::ExtenderEntry::all_verbs(&e.url(), true)).collect(),
        Kind::EchoObjects => {
            extender.iter().map(|e| coloc_testbed::ExtenderEntry::all_verbs(&e.url(), false)).collect()
        }
        _ => extender.iter().flat_map(|e| kind.entries(&e.url())).collect(),
    };
    let entries = hop.register(entries);
    let scheduler =
        Scheduler::start_with(&plane, &format!("kube-scheduler-{name}"), &entries, qps, kind.scheduler_flags()).await?;
    if s.pin_control_plane {
        let (control, rest) = cpu_lists();
        pin(plane.apiserver.pid(), &control);
        pin(plane.etcd.pid(), &control);
        pin(scheduler.proc.pid(), &rest);
        pin(ext_pid, &rest);
    }
    // The online pods arrive at once, at a running kube-scheduler: time to place counts
    // from the start of their creation.
    let binds = Binds::watch(client.clone(), ONLINE).await?;
    let start = Instant::now();
    cluster::create_all(
        &client,
        (0..pods)
            .map(|i| PodBuilder::new(ONLINE, &format!("{name}-{i:05}"), "online-prod", ONLINE_MILLI_CPU).build())
            .collect(),
    )
    .await?;
    let times = binds.wait(pods, timeout).await;
    let cpu1 = ext_pid.and_then(|p| procstat::cpu_seconds(&p.to_string()));
    std::fs::write(dir.join("scheduler-config.yaml"), &scheduler.config)?;
    let before_uids: Vec<&str> = before.iter().map(|(_, uid)| uid.as_str()).collect();
    let (all_copied_s, all_released_s) = match &extender {
        Some(_) if !kind.is_echo() => {
            let (copied, released) = settled(&client, &before_uids).await?;
            let secs = |t: Instant| round3(t.duration_since(start).as_secs_f64());
            (copied.map(secs), Some(secs(released)))
        }
        _ => (None, None),
    };

    let mut waits: Vec<f64> = times.iter().map(|t| t.duration_since(start).as_secs_f64()).collect();
    waits.sort_by(f64::total_cmp);
    let after = cluster::pods(&client, Some(OFFLINE)).await?;
    let live: BTreeSet<&str> = after
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.uid.as_deref())
        .collect();
    let replaced: BTreeSet<&str> =
        after.iter().filter_map(|p| p.metadata.annotations.as_ref()?.get(FROM_UID).map(String::as_str)).collect();
    let evicted: Vec<&str> = before.iter().map(|(_, uid)| uid.as_str()).filter(|uid| !live.contains(uid)).collect();
    let lost = evicted.iter().filter(|uid| !replaced.contains(*uid)).count();
    let replacements_released = after
        .iter()
        .filter(|p| p.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(FROM_UID)))
        .filter(|p| p.spec.as_ref().and_then(|s| s.scheduling_gates.as_ref()).is_none_or(|g| g.is_empty()))
        .count();
    let residue_guarded = after.iter().filter(|p| p.metadata.finalizers.iter().flatten().any(|f| f == GUARD)).count();
    let residue_gated = gated_of_gone(&after);
    std::fs::write(dir.join("scheduler-metrics.txt"), scheduler.metrics().await.unwrap_or_default())?;
    let mut preempt_mean_ms = None;
    let mut preempt_q = (None, None, None);
    let mut counts = [None; 5];
    let writes = match &extender {
        Some(e) => {
            let text = e.admin_get("/metrics").await.unwrap_or_default();
            std::fs::write(dir.join("extender-metrics.txt"), &text)?;
            let sum = |m: &str, f: &str| coloc_testbed::extender::metric_sum(&text, m, f);
            let preempt = "verb=\"preempt\"";
            let (seconds, count) = (
                sum("coloc_request_duration_seconds_sum", preempt),
                sum("coloc_request_duration_seconds_count", preempt),
            );
            preempt_mean_ms = (count > 0.0).then(|| round3(seconds / count * 1000.0));
            let q = crate::report::quantiles(&text, "coloc_request_duration_seconds", &[preempt]);
            preempt_q = (q.p50, q.p99, Some(q.count));
            counts = [
                sum("coloc_requeue_replacements_total", "outcome=\"created\""),
                sum("coloc_requeue_replacements_total", "outcome=\"failed\""),
                sum("coloc_requeue_released_total", ""),
                sum("coloc_requeue_cleaned_total", ""),
                sum("coloc_requeue_events_total", "") + sum("coloc_events_total", "result=\"written\""),
            ]
            .map(Some);
            Some(
                sum("coloc_requeue_guards_total", "")
                    + sum("coloc_requeue_replacements_total", "outcome=\"created\"")
                    + sum("coloc_requeue_released_total", "")
                    + sum("coloc_requeue_cleaned_total", "")
                    + sum("coloc_requeue_events_total", "")
                    + sum("coloc_events_total", "")
                    + sum("coloc_wakes_total", ""),
            )
        }
        None => None,
    };
    drop(scheduler);
    drop(extender);
    let per_victim = |x: Option<f64>| x.filter(|_| !evicted.is_empty()).map(|w| round3(w / evicted.len() as f64));
    let [created, failed, released, cleaned, events] = counts;
    let copy_writes = created.zip(released).zip(cleaned).map(|((c, r), d)| c + r + d);
    Ok(StormResult {
        run: kind.label().to_string(),
        round,
        pods,
        placed: times.len(),
        place_p50_s: quantile(&waits, 0.5),
        place_p90_s: quantile(&waits, 0.9),
        place_p99_s: quantile(&waits, 0.99),
        place_max_s: waits.last().copied().map(round3),
        evictions: evicted.len(),
        replacements: replaced.len(),
        replacements_released,
        lost,
        all_copied_s,
        extender_api_writes: writes,
        extender_api_writes_per_victim: writes
            .filter(|_| !evicted.is_empty())
            .map(|w| round3(w / evicted.len() as f64)),
        copies_created: created,
        copies_failed: failed,
        copies_released: released,
        copies_cleaned: cleaned,
        extender_events: events,
        copy_writes_per_victim: per_victim(copy_writes),
        events_per_victim: per_victim(events),
        all_released_s,
        residue_guarded,
        residue_gated,
        extender_preempt_mean_ms: preempt_mean_ms,
        extender_preempt_p50_ms: preempt_q.0,
        extender_preempt_p99_ms: preempt_q.1,
        extender_preempts: preempt_q.2,
        extender_cpu_s: cpu1.zip(cpu0).map(|(b, a)| round3(b - a)),
    })
}

/// Replacements still gated although their original is gone.
fn gated_of_gone(pods: &[k8s_openapi::api::core::v1::Pod]) -> usize {
    let live: BTreeSet<&str> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.uid.as_deref())
        .collect();
    pods.iter()
        .filter(|p| {
            p.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(FROM_UID))
                .is_some_and(|from| !live.contains(from.as_str()))
        })
        .filter(|p| p.spec.as_ref().and_then(|s| s.scheduling_gates.as_ref()).is_some_and(|g| !g.is_empty()))
        .count()
}

/// Waits (polling every 200 ms) until every evicted original of `before` has a copy and
/// no copy whose original is gone is still gated. Copies are stored once an original is
/// being deleted and released once it is gone, so both may trail the last bind. Returns
/// when every evicted original had a copy (`None` if some still had none after 60 s) and
/// when the last gated copy of a gone original was released (up to 5 minutes).
async fn settled(client: &kube::Client, before: &[&str]) -> anyhow::Result<(Option<Instant>, Instant)> {
    let begin = Instant::now();
    let mut copied = None;
    loop {
        let pods = cluster::pods(client, Some(OFFLINE)).await?;
        let live: BTreeSet<&str> = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.metadata.uid.as_deref())
            .collect();
        let replaced: BTreeSet<&str> =
            pods.iter().filter_map(|p| p.metadata.annotations.as_ref()?.get(FROM_UID).map(String::as_str)).collect();
        let uncopied = before.iter().filter(|uid| !live.contains(*uid) && !replaced.contains(*uid)).count();
        if uncopied == 0 && copied.is_none() {
            copied = Some(Instant::now());
        }
        let waiting = gated_of_gone(&pods);
        let copies_done = copied.is_some() || begin.elapsed() > Duration::from_secs(60);
        if waiting == 0 && copies_done {
            return Ok((copied, Instant::now()));
        }
        anyhow::ensure!(
            begin.elapsed() < Duration::from_secs(300),
            "after 300 s: {waiting} copies of gone originals still gated, {uncopied} evicted originals without a copy"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub fn table(results: &[StormResult]) -> String {
    let mut s = String::from("| run | round | placed | time to place p50 / p90 / p99 / max s | evictions | replacements (released) | bare pods lost | all copied / released after s | residue: guarded, gated | extender API writes per victim (copies, Events) | extender preempt mean / p50 / p99 ms | extender CPU s |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    let opt = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v}"));
    for r in results {
        s += &format!(
            "| {} | {} | {}/{} | {} / {} / {} / {} | {} | {} ({}) | {} | {} / {} | {}, {} | {} ({}, {}) | {} / {} / {} | {} |\n",
            r.run,
            r.round,
            r.placed,
            r.pods,
            opt(r.place_p50_s),
            opt(r.place_p90_s),
            opt(r.place_p99_s),
            opt(r.place_max_s),
            r.evictions,
            r.replacements,
            r.replacements_released,
            r.lost,
            opt(r.all_copied_s),
            opt(r.all_released_s),
            r.residue_guarded,
            r.residue_gated,
            opt(r.extender_api_writes_per_victim),
            opt(r.copy_writes_per_victim),
            opt(r.events_per_victim),
            opt(r.extender_preempt_mean_ms),
            opt(r.extender_preempt_p50_ms),
            opt(r.extender_preempt_p99_ms),
            opt(r.extender_cpu_s)
        );
    }
    s
}

/// One run kind over the rounds: medians and spreads.
#[derive(Debug, serde::Serialize)]
pub struct StormMedian {
    pub run: String,
    pub rounds: usize,
    pub place_p50_s: Option<f64>,
    /// Lowest and highest p50 over the rounds.
    pub place_p50_spread_s: Option<(f64, f64)>,
    pub place_max_s: Option<f64>,
    /// The floor it is measured against (echo in its mode), and the median over the rounds
    /// of its p50 divided by the floor's p50 in the same round.
    pub floor: Option<String>,
    pub vs_floor: Option<f64>,
    pub vs_floor_spread: Option<(f64, f64)>,
    pub preempt_p50_ms: Option<f64>,
    pub preempt_p99_ms: Option<f64>,
    pub lost: usize,
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(round3(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }))
}

fn spread(v: &[f64]) -> Option<(f64, f64)> {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo.is_finite() && hi.is_finite()).then(|| (round3(lo), round3(hi)))
}

/// Each run's medians over the rounds, in the order the runs first appear.
pub fn medians(results: &[StormResult]) -> Vec<StormMedian> {
    let mut runs: Vec<&str> = Vec::new();
    for r in results {
        if !runs.contains(&r.run.as_str()) {
            runs.push(&r.run);
        }
    }
    let kind_of =
        |label: &str| <Kind as clap::ValueEnum>::value_variants().iter().copied().find(|k| k.label() == label);
    runs.into_iter()
        .map(|run| {
            let mine: Vec<&StormResult> = results.iter().filter(|r| r.run == run).collect();
            let p50s: Vec<f64> = mine.iter().filter_map(|r| r.place_p50_s).collect();
            let floor = kind_of(run).and_then(Kind::storm_floor);
            let ratios: Vec<f64> = floor
                .map(|f| {
                    mine.iter()
                        .filter_map(|r| {
                            let base = results.iter().find(|b| b.run == f.label() && b.round == r.round)?;
                            Some(r.place_p50_s? / base.place_p50_s?)
                        })
                        .collect()
                })
                .unwrap_or_default();
            StormMedian {
                run: run.to_string(),
                rounds: mine.len(),
                place_p50_s: median(p50s.clone()),
                place_p50_spread_s: spread(&p50s),
                place_max_s: median(mine.iter().filter_map(|r| r.place_max_s).collect()),
                floor: floor.map(|f| f.label().to_string()),
                vs_floor: median(ratios.clone()),
                vs_floor_spread: spread(&ratios),
                preempt_p50_ms: median(mine.iter().filter_map(|r| r.extender_preempt_p50_ms).collect()),
                preempt_p99_ms: median(mine.iter().filter_map(|r| r.extender_preempt_p99_ms).collect()),
                lost: mine.iter().map(|r| r.lost).max().unwrap_or(0),
            }
        })
        .collect()
}

pub fn medians_table(medians: &[StormMedian]) -> String {
    let mut s = String::from("| run | rounds | time to place p50, median (spread) s | max s, median | vs its echo floor, median (spread) | preempt p50 / p99 ms, median | lost (most in a round) |\n| --- | --- | --- | --- | --- | --- | --- |\n");
    let opt = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v}"));
    let pair = |x: Option<(f64, f64)>| x.map_or(String::new(), |(a, b)| format!(" ({a}-{b})"));
    for m in medians {
        s += &format!(
            "| {} | {} | {}{} | {} | {}{} | {} / {} | {} |\n",
            m.run,
            m.rounds,
            opt(m.place_p50_s),
            pair(m.place_p50_spread_s),
            opt(m.place_max_s),
            m.vs_floor.map_or("-".into(), |v| format!("{v}× {}", m.floor.as_deref().unwrap_or(""))),
            pair(m.vs_floor_spread),
            opt(m.preempt_p50_ms),
            opt(m.preempt_p99_ms),
            m.lost
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(run: &str, round: usize, p50: f64) -> StormResult {
        StormResult { run: run.into(), round, place_p50_s: Some(p50), ..Default::default() }
    }

    #[test]
    fn a_run_is_judged_by_the_median_of_its_ratios_to_the_floor_of_the_same_round() {
        // Round 2 is slow for everyone: the ratio of each round holds, the raw p50 does not.
        let results = [
            run("echo", 1, 10.0),
            run("coloc-names", 1, 10.5),
            run("echo", 2, 20.0),
            run("coloc-names", 2, 20.0),
            run("echo", 3, 11.0),
            run("coloc-names", 3, 12.1),
        ];
        let m = medians(&results);
        let names = m.iter().find(|m| m.run == "coloc-names").unwrap();
        assert_eq!(names.rounds, 3);
        assert_eq!(names.place_p50_s, Some(12.1));
        assert_eq!(names.place_p50_spread_s, Some((10.5, 20.0)));
        assert_eq!(names.floor.as_deref(), Some("echo"));
        assert_eq!(names.vs_floor, Some(1.05));
        assert_eq!(names.vs_floor_spread, Some((1.0, 1.1)));
        assert_eq!(m.iter().find(|m| m.run == "echo").unwrap().vs_floor, None);
    }
}
