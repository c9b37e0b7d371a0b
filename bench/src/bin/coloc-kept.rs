//! What requeue keeps of marked bare pods when a tenant marks many large pods of its own and
//! holds them: with `pods/status` (as readiness-gate operators have) it can give its running
//! bare pods kube-scheduler's preemption mark, and a finalizer keeps them for as long as it
//! likes. The view keeps the bytes of each marked bare pod of a requeue namespace, to copy it
//! from them however fast it goes, at most `kept::PER_POD` each and `kept::TOTAL` in all;
//! beyond, a copy is built from a read of the original.
//!
//! Real kube-apiserver (`KUBE_BIN_DIR`), no kube-scheduler; the extender as `serve --kube
//! --requeue`. Creates `--unmarked` pods of `--kib` KiB each that it never marks, then marks
//! `--pods` more, in waves of `--step`, and after each wave reports the kept bytes and states
//! the extender exports and its resident memory.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use coloc_bench::procstat;
use coloc_extender::cluster::kept;
use coloc_testbed::cluster::{self, PodBuilder};
use coloc_testbed::control_plane::Options;
use coloc_testbed::{prepared, Binaries, Extender};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use serde_json::json;

#[derive(Parser)]
struct Args {
    /// Pods the tenant marks in all.
    #[arg(long, default_value_t = 400)]
    pods: usize,
    /// Size of each pod's annotation, KiB (the pod's JSON is a little larger).
    #[arg(long, default_value_t = 240)]
    kib: usize,
    /// Pods marked between two readings.
    #[arg(long, default_value_t = 100)]
    step: usize,
    /// Pods of the same size the tenant creates first and never marks (what the view keeps
    /// of every pod, apart from requeue's bytes).
    #[arg(long, default_value_t = 0)]
    unmarked: usize,
    /// The extender binary (default: coloc-extender beside this executable).
    #[arg(long)]
    extender: Option<PathBuf>,
}

const HOLD: &str = "bench.coloc-extender.io/hold";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let bins = Binaries::find().map_err(anyhow::Error::msg)?;
    let binary = coloc_bench::sibling_program(args.extender, "coloc-extender")?;
    let rbac = [&prepared::BASE_RBAC[..], &prepared::REQUEUE_RBAC[..]].concat();
    let (plane, client) = prepared::start(&bins, Options::default(), &rbac).await?;
    cluster::create(&client, cluster::node("node-1", 1_000_000, 4096, "zone-a")).await?;
    let extender = Extender::start(&plane, "coloc-kept", &binary, &["--kube", "--requeue"]).await?;
    let pid = extender.proc.pid().context("the extender has no pid")?.to_string();
    let requeue = extender.requeue.as_ref().context("no requeue controller beside the extender")?;
    let pids = [pid, requeue.proc.pid().context("the requeue controller has no pid")?.to_string()];
    let pods: kube::Api<Pod> = kube::Api::namespaced(client.clone(), prepared::BATCH);

    println!(
        "{} pods of {} KiB marked by their tenant and held; bounds: {} KiB a pod, {} MiB in all",
        args.pods,
        args.kib,
        kept::PER_POD / 1024,
        kept::TOTAL / (1024 * 1024)
    );
    println!(
        "| pods unmarked | pods marked | marked bytes, MiB | kept states | kept bytes, MiB | extender RSS (peak), MiB | requeue controller RSS (peak), MiB |"
    );
    println!("|---|---|---|---|---|---|---|");
    let notes = "n".repeat(args.kib * 1024);
    let held = |name: &str| {
        let mut pod = PodBuilder::new(prepared::BATCH, name, "free", 10).on("node-1").annotate("notes", &notes).build();
        pod.metadata.finalizers = Some(vec![HOLD.into()]);
        pod
    };
    let mut unmarked = 0;
    report(&extender, &pids, unmarked, 0, 0).await?;
    while unmarked < args.unmarked {
        let wave = unmarked..(unmarked + args.step).min(args.unmarked);
        unmarked = wave.end;
        cluster::create_all_with(&client, wave.map(|i| held(&format!("plain-{i:05}"))).collect(), 8).await?;
        wait_for_view(&extender, unmarked).await?;
        report(&extender, &pids, unmarked, 0, 0).await?;
    }
    let mut marked = 0;
    while marked < args.pods {
        let wave: Vec<String> = (marked..(marked + args.step).min(args.pods)).map(|i| format!("held-{i:05}")).collect();
        cluster::create_all_with(&client, wave.iter().map(|name| held(name)).collect(), 8).await?;
        for name in &wave {
            // What kube-scheduler writes before it deletes a victim; the tenant writes it here.
            let mark = json!({"status": {"conditions": [{
                "type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                "message": "marked by its own tenant",
                // Without it the disruption controller takes the mark for stale at once.
                "lastTransitionTime": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()}]}});
            pods.patch_status(name, &PatchParams::default(), &Patch::Strategic(mark)).await?;
        }
        marked += wave.len();
        settle(&extender).await?;
        report(&extender, &pids, unmarked, marked, marked * args.kib).await?;
    }
    // The holds go with the control plane; nothing outlives this run.
    Ok(())
}

/// Waits until the kept states stop changing (the requeue controller publishes them each pass).
async fn settle(e: &Extender) -> anyhow::Result<()> {
    let mut last = -1.0;
    let mut same = 0;
    for _ in 0..120 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = e.metric_sum("coloc_requeue_kept_states", "").await?;
        same = if now == last { same + 1 } else { 0 };
        if same >= 3 {
            return Ok(());
        }
        last = now;
    }
    anyhow::bail!("the kept states did not settle within two minutes")
}

/// Waits until the extender's view holds `pods` pods.
async fn wait_for_view(e: &Extender, pods: usize) -> anyhow::Result<()> {
    for _ in 0..240 {
        if e.metric_sum("coloc_view_pods", "").await? >= pods as f64 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    anyhow::bail!("the view did not hold {pods} pods within two minutes")
}

async fn report(
    e: &Extender,
    pids: &[String; 2],
    unmarked: usize,
    marked: usize,
    marked_kib: usize,
) -> anyhow::Result<()> {
    let states = e.metric_sum("coloc_requeue_kept_states", "").await?;
    let bytes = e.metric_sum("coloc_requeue_kept_bytes", "").await?;
    let mib = |kib: Option<u64>| kib.map_or("-".into(), |k| format!("{:.1}", k as f64 / 1024.0));
    let rss = |pid: &str| {
        format!("{} ({})", mib(procstat::status_kib(pid, "VmRSS:")), mib(procstat::status_kib(pid, "VmHWM:")))
    };
    println!(
        "| {unmarked} | {marked} | {:.1} | {states} | {:.1} | {} | {} |",
        marked_kib as f64 / 1024.0,
        bytes / (1024.0 * 1024.0),
        rss(&pids[0]),
        rss(&pids[1]),
    );
    Ok(())
}
