//! Step 3 of `uninstall`, against the API server: copies that name coloc-scheduler are
//! moved to the default scheduler, and every gated copy is settled (`settle`): released
//! only where it was checked against its original, deleted where it was not.

use std::collections::HashSet;
use std::time::Duration;

use anyhow::Context as _;
use kube::api::{DynamicObject, ListParams};
use serde_json::Value;

use super::settle::{settle, verify, Settle, Unverified};
use super::twin::twin;
use super::UninstallArgs;
use crate::model::marks::{FROM_POD, FROM_UID, GATE, LABEL};
use crate::model::Pod;
use crate::requeue::kube::decoded;
use crate::requeue::kube::Requeuer;

/// What became of one gated copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    /// `namespace/name`.
    pub copy: String,
    pub outcome: Outcome,
    /// Why, as the report says it.
    pub why: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Its gate removed (or its twin's, where it named coloc-scheduler).
    Released,
    /// It would have run twice.
    Deleted,
    /// It could not be checked against its original: never released, deleted
    /// (`Unverified::reason`).
    NotVerified(&'static str),
    /// Checked, its original still terminating at `--wait-for-originals`: left gated.
    LeftGated,
    /// A write failed: run uninstall again.
    Failed,
}

fn is_gated(p: &Pod) -> bool {
    p.scheduling_gates.iter().any(|g| g == GATE) && p.deletion_time.is_none()
}

/// The pod `copy` claims to copy, for the report: `namespace/name (uid)`.
fn claimed(copy: &Pod) -> String {
    let from = copy.annotations.get(FROM_POD).unwrap_or("a pod");
    format!("{from} ({})", copy.annotations.get(FROM_UID).unwrap_or_default())
}

/// Settles every gated copy: each is checked against its original while that is still
/// there (`verify`), released once it is gone or stopped, and waited for until
/// `--wait-for-originals`; deleted where it would run twice or could not be checked.
pub async fn settle_gated(
    client: &kube::Client,
    requeuer: &Requeuer,
    args: &UninstallArgs,
) -> anyhow::Result<Vec<Settled>> {
    let pods = kube::Api::<DynamicObject>::all_with(client.clone(), &crate::requeue::kube::pod_resource());
    let deadline = tokio::time::Instant::now() + args.wait_for_originals;
    // Copies checked against their original on an earlier look: released once it is gone.
    let mut verified: HashSet<String> = HashSet::new();
    let mut report = Vec::new();
    loop {
        let listed = pods
            .list(&ListParams::default().labels(&format!("{LABEL}=true")))
            .await
            .context("cannot list replacements")?;
        let all: Vec<(Value, Pod)> = listed.items.iter().filter_map(decoded).collect();
        let mut plans = Vec::new();
        for (json, copy) in all.iter().filter(|(_, p)| is_gated(p)) {
            let original = original_of(client, copy).await?;
            let checked = match &original {
                Some((original_json, o)) => verify((json, copy), (original_json, o), |name| {
                    all.iter().map(|(_, p)| p).find(|p| p.namespace == o.namespace && p.name == name)
                }),
                None if verified.contains(&copy.uid) => Ok(()),
                None => Err(Unverified::NoOriginal),
            };
            match checked {
                Ok(()) => verified.insert(copy.uid.clone()),
                Err(_) => verified.remove(&copy.uid),
            };
            let plan = settle(original.as_ref().map(|(_, o)| o), checked, crate::clock::system_now());
            plans.push((json, copy, plan));
        }
        // Deletes first: a twin an interrupted run left is gone before its copy's is stored.
        plans.sort_by_key(|(.., plan)| matches!(plan, Settle::Release(_) | Settle::Wait));
        let mut waiting = Vec::new();
        for (json, copy, plan) in plans {
            let settled = match plan {
                Settle::Wait => {
                    waiting.push(copy.key());
                    continue;
                }
                Settle::Release(why) => match release(requeuer, json, copy, args).await {
                    Ok(moved) => Settled { copy: copy.key(), outcome: Outcome::Released, why: format!("{moved}{why}") },
                    Err(e) => Settled { copy: copy.key(), outcome: Outcome::Failed, why: e },
                },
                Settle::Delete(why) => deleted(requeuer, copy, Outcome::Deleted, why).await,
                Settle::NotVerified(u) => {
                    let from = claimed(copy);
                    let why = format!("never released: {}; lost: {}", u.describe(&from), u.lost(&from));
                    deleted(requeuer, copy, Outcome::NotVerified(u.reason()), why).await
                }
            };
            println!("   {}", said(&settled));
            report.push(settled);
        }
        if waiting.is_empty() {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            // Released beside a running original, the work would run twice: left gated.
            println!(
                "   left gated, their originals still terminating: {}. A copy is checked only while its original is there: run uninstall again before they go (a copy whose original is gone by then is deleted), or with a longer --wait-for-originals",
                waiting.join(", ")
            );
            report.extend(waiting.into_iter().map(|copy| Settled {
                copy,
                outcome: Outcome::LeftGated,
                why: "its original still terminates".into(),
            }));
            break;
        }
        println!("   waiting for the originals of {} to go", waiting.join(", "));
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    Ok(report)
}

/// One report line.
fn said(s: &Settled) -> String {
    match s.outcome {
        Outcome::Released => format!("released {}{}", s.copy, s.why),
        Outcome::Deleted => format!("deleted {}: {}", s.copy, s.why),
        Outcome::NotVerified(reason) => format!("deleted {} ({reason}), {}", s.copy, s.why),
        Outcome::LeftGated => format!("left gated {}: {}", s.copy, s.why),
        Outcome::Failed => format!("could not settle {}: {}", s.copy, s.why),
    }
}

async fn deleted(requeuer: &Requeuer, copy: &Pod, outcome: Outcome, why: String) -> Settled {
    match requeuer.delete_now(copy).await {
        Ok(()) => Settled { copy: copy.key(), outcome, why },
        Err(e) => Settled { copy: copy.key(), outcome: Outcome::Failed, why: e },
    }
}

/// Releases a checked copy: where it names coloc-scheduler, as its twin under
/// `--scheduler-after` (stored, released, then the copy deleted). Returns what to say
/// before the reason.
async fn release(requeuer: &Requeuer, json: &Value, copy: &Pod, args: &UninstallArgs) -> Result<String, String> {
    if json["spec"]["schedulerName"].as_str() != Some(args.scheduler_name.as_str()) {
        return requeuer.release_now(copy).await.map(|()| ": ".into());
    }
    let name = requeuer.store_twin(copy, twin(json, &args.scheduler_after), true).await?;
    Ok(format!(" as {}/{name} ({}): ", copy.namespace, args.scheduler_after))
}

/// Moves every released, unbound copy naming `--scheduler-name` to `--scheduler-after`:
/// its twin is stored and released, then the copy deleted. A second run finds the twin
/// (409) and finishes. A gated one is moved only once checked, as it is released
/// (`settle_gated`). Returns (moved, failed).
pub async fn move_released(
    client: &kube::Client,
    requeuer: &Requeuer,
    args: &UninstallArgs,
) -> anyhow::Result<(usize, usize)> {
    let pods = kube::Api::<DynamicObject>::all_with(client.clone(), &crate::requeue::kube::pod_resource());
    let listed =
        pods.list(&ListParams::default().labels(&format!("{LABEL}=true"))).await.context("cannot list replacements")?;
    let (mut moved, mut failed) = (0, 0);
    for object in listed.items {
        let Some((json, copy)) = decoded(&object) else { continue };
        if copy.node_name.is_some() || copy.deletion_time.is_some() || copy.is_terminal() {
            continue;
        }
        if json["spec"]["schedulerName"].as_str() != Some(args.scheduler_name.as_str()) {
            continue;
        }
        if copy.scheduling_gates.iter().any(|g| g == GATE) {
            continue;
        }
        match requeuer.store_twin(&copy, twin(&json, &args.scheduler_after), true).await {
            Ok(name) => {
                println!("   moved {} to {}/{name} ({})", copy.key(), copy.namespace, args.scheduler_after);
                moved += 1;
            }
            Err(e) => {
                println!("   could not move {}: {e}", copy.key());
                failed += 1;
            }
        }
    }
    Ok((moved, failed))
}

/// The pod a copy's annotations name, as JSON and decoded, if it still exists with that UID.
async fn original_of(client: &kube::Client, copy: &Pod) -> anyhow::Result<Option<(Value, Pod)>> {
    let (Some(from), Some(uid)) = (copy.annotations.get(FROM_POD), copy.annotations.get(FROM_UID)) else {
        return Ok(None);
    };
    let Some((ns, name)) = from.split_once('/') else { return Ok(None) };
    match crate::requeue::kube::pod_api(client, ns)
        .get_opt(name)
        .await
        .with_context(|| format!("cannot read {from}"))?
    {
        Some(object) => Ok(decoded(&object).filter(|(_, p)| p.uid == *uid)),
        None => Ok(None),
    }
}
