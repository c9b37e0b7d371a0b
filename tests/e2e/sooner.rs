//! Online placed sooner than stock where victims take time to stop: the extender weighs
//! how soon the room a preemption frees is free, at the policy's price of a second;
//! kube-scheduler alone does not. Much sooner wins; a few seconds sooner for much more
//! work thrown away does not.

use std::time::{Duration, Instant};

use coloc_testbed::cluster::{self, PodBuilder};
use coloc_testbed::kubelet::{self, EXITS_AFTER_SECONDS};
use coloc_testbed::Binaries;
use k8s_openapi::api::core::v1::Node;

use crate::invariants::uid;
use crate::{Bed, Case, Mode};

pub fn cases() -> Vec<Case> {
    vec![Case {
        name: "an_online_pod_goes_where_victims_stop_in_seconds_while_stock_waits_for_a_checkpoint_but_not_a_few_seconds_sooner_for_much_more_work",
        run: |b, m| Box::pin(sooner_than_stock(b, m)),
    }]
}

/// How long the checkpointing victims take (their grace, run out) and how soon the quick
/// ones exit.
const CHECKPOINT: i64 = 60;
const QUICK: &str = "3";

/// A 4-CPU node labelled `pair: pair`.
fn node(name: &str, pair: &str) -> Node {
    let mut n = cluster::node(name, 4000, 64, "zone-1");
    n.metadata.labels.get_or_insert_with(Default::default).insert("pair".into(), pair.into());
    n
}

/// On the pair's first node, a `free` pod of 3.8 CPU that checkpoints for all of its
/// 60 s of grace; on the second, a `free-high` pod that exits 3 s after its delete.
/// kube-scheduler alone picks the first (the lowest-priority victim); both are class
/// `free` to the default policy.
fn victims(pair: &str, slow_node: &str, quick_node: &str) -> Vec<PodBuilder> {
    vec![
        PodBuilder::new("batch", &format!("checkpoint-{pair}"), "free", 3800)
            .on(slow_node)
            .edit(|p| p["spec"]["terminationGracePeriodSeconds"] = serde_json::json!(CHECKPOINT)),
        PodBuilder::new("batch", &format!("quick-{pair}"), "free-high", 3800)
            .on(quick_node)
            .annotate(EXITS_AFTER_SECONDS, QUICK),
    ]
}

/// Pair c: on c-1 a pod of no class (never a victim) of 0.9 CPU and a `free` pod of 2.5
/// CPU that runs out its 12 s of grace; on c-2 a `free` pod of 3.8 CPU that runs out 8 s.
/// c-2 frees the room 4 s sooner, but its restart alone costs 1.3 CPU × 2 h = 9,360 CPU-s
/// more: at 1,000 CPU-s per second, 4 s are worth 4,000.
fn cheaper_or_sooner() -> Vec<PodBuilder> {
    let grace = |secs: i64| {
        move |p: &mut serde_json::Value| p["spec"]["terminationGracePeriodSeconds"] = serde_json::json!(secs)
    };
    vec![
        PodBuilder::new("batch", "pin-c", "free", 900)
            .on("c-1")
            .edit(|p| p["spec"]["priorityClassName"] = serde_json::Value::Null),
        PodBuilder::new("batch", "cheap-c", "free", 2500).on("c-1").edit(grace(12)),
        PodBuilder::new("batch", "dear-c", "free", 3800).on("c-2").edit(grace(8)),
    ]
}

/// The shipped policy with `online`'s `waitPrice` set to `price`.
fn policy_priced(bed: &Bed, price: u32) -> anyhow::Result<String> {
    let shipped = std::fs::read_to_string(crate::bed::repo("policy/default.yaml"))?;
    let at = shipped.find("    waitPrice: ").ok_or_else(|| anyhow::anyhow!("no waitPrice in the shipped policy"))?;
    let end = at + shipped[at..].find('\n').unwrap_or(shipped.len() - at);
    let path = bed.plane.dir().join("policy.yaml");
    std::fs::write(&path, format!("{}    waitPrice: {price}{}", &shipped[..at], &shipped[end..]))?;
    Ok(path.display().to_string())
}

/// Creates online pod `name` of 3 CPU for the pair, and waits for it to be bound: its
/// node and how long that took.
async fn place(bed: &Bed, name: &str, pair: &str, within: Duration) -> anyhow::Result<(String, Duration)> {
    let created = Instant::now();
    cluster::create(&bed.client, PodBuilder::new("online", name, "online-prod", 3000).select("pair", pair).build())
        .await?;
    let node = bed
        .until_pods("online", within, &format!("online/{name} placed"), |pods| {
            let p = pods.iter().find(|p| cluster::name(p) == name).ok_or("not there")?;
            cluster::node_of(p).map(str::to_string).ok_or_else(|| "pending".to_string())
        })
        .await?;
    Ok((node, created.elapsed()))
}

/// Stock first, on nodes a-1 (checkpointing victim) and a-2 (quick victim): kube-scheduler
/// alone evicts on a-1 and its pod waits out the checkpoint. Then, on b-1 and b-2 alike,
/// behind the extender: b-2, placed within seconds, while b-1's pod runs on untouched.
async fn sooner_than_stock(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let kubelet = kubelet::Options { grace: kubelet::Grace::Honour, ..Default::default() };
    let mut bed = Bed::up_with_kubelet(bins, mode, Default::default(), kubelet).await?;
    let nodes = ["a-1", "a-2", "b-1", "b-2", "c-1", "c-2"].map(|n| node(n, &n[..1]));
    cluster::create_all(&bed.client, nodes.to_vec()).await?;
    let all =
        [victims("a", "a-1", "a-2"), victims("b", "b-1", "b-2"), cheaper_or_sooner()].into_iter().flatten().collect();
    bed.bound(all).await?;
    bed.until_running("batch", 7).await?;
    let uids = crate::invariants::bare_pods(&bed, "batch").await?;
    let uid_of = |name: &str| uids.iter().find(|(n, _)| n == name).map(|(_, u)| u.clone()).unwrap_or_default();

    // kube-scheduler alone.
    bed.schedule_with(&[]).await?;
    let patience = Duration::from_secs(CHECKPOINT as u64 + 60);
    let (stock_node, stock_took) = place(&bed, "web-stock", "a", patience).await?;
    anyhow::ensure!(
        stock_node == "a-1",
        "kube-scheduler alone placed web-stock on {stock_node}, not a-1 (its lowest-priority victim)"
    );
    anyhow::ensure!(
        stock_took >= Duration::from_secs(CHECKPOINT as u64 - 10),
        "web-stock was placed after {stock_took:?}, before its victim's {CHECKPOINT} s checkpoint could end"
    );
    bed.scheduler = None;

    // Behind the extender, a second of an online pod's wait worth 1,000 CPU-s.
    let policy = policy_priced(&bed, 1000)?;
    let e = bed.extender(&["--requeue", "--events", "--policy", &policy]).await?;
    bed.schedule_with(&[bed.entry(e)]).await?;
    let (node, took) = place(&bed, "web-1", "b", Duration::from_secs(CHECKPOINT as u64 / 2)).await?;
    anyhow::ensure!(
        node == "b-2",
        "web-1 placed on {node}: b-2's victim stops in {QUICK} s, b-1's in {CHECKPOINT} s\n{}",
        bed.logs()
    );
    let batch = cluster::pods(&bed.client, Some("batch")).await?;
    let slow = batch
        .iter()
        .find(|p| uid(p) == uid_of("checkpoint-b"))
        .ok_or_else(|| anyhow::anyhow!("checkpoint-b is gone"))?;
    anyhow::ensure!(slow.metadata.deletion_timestamp.is_none(), "checkpoint-b was evicted too");
    println!(
        "{}: stock placed web-stock on a-1 in {stock_took:.1?}; the extender web-1 on b-2 in {took:.1?}",
        mode.label()
    );

    // A few seconds sooner for much more work: the cheaper node, and the trade said.
    let (node, _) = place(&bed, "web-2", "c", Duration::from_secs(60)).await?;
    anyhow::ensure!(
        node == "c-1",
        "web-2 placed on {node}: c-2 frees the room 4 s sooner for 9,360 CPU-s more, not worth it at 1,000 a second\n{}",
        bed.logs()
    );
    let decisions = bed.extenders[e].admin_get("/decisions?pod=online/web-2").await?;
    anyhow::ensure!(
        decisions.contains("against the chosen candidate (c-1): 4.0 s sooner for")
            && decisions.contains("not worth it at 1,000 CPU-s per second"),
        "the trade is not said in /decisions: {decisions}"
    );

    // Said where people look: the preemptor's Event names both waits...
    let events = coloc_testbed::wait::until(Duration::from_secs(30), "web-1's PreemptionVictims Event", || async {
        let out = bed.plane.kubectl(&["get", "events", "-n", "online", "-o", "wide"]).map_err(|e| e.to_string())?;
        match out.lines().find(|l| l.contains("PreemptionVictims") && l.contains("web-1")) {
            Some(l) => Ok(l.to_string()),
            None => Err(out),
        }
    })
    .await?;
    anyhow::ensure!(
        events.contains("room free on b-2 in ~30.0 s")
            && events.contains("kube-scheduler's own choice: b-1 in ~1 min 0 s"),
        "web-1's Event does not say both waits: {events}"
    );
    // ...and the wait observed is counted beside the one expected.
    let extender = &bed.extenders[e];
    coloc_testbed::wait::until(Duration::from_secs(30), "the observed wait counted", || async {
        let n = extender
            .metric_sum("coloc_preempt_wait_seconds_count", "estimate=\"observed\"")
            .await
            .map_err(|e| e.to_string())?;
        if n >= 1.0 {
            Ok(())
        } else {
            Err(format!("{n} observed"))
        }
    })
    .await?;
    bed.finish()
}
