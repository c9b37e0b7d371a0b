//! `coloc-extender uninstall`: takes out what the extender wrote, in a safe order, so that
//! removing it leaves the cluster as it was.
//!
//! 1. Refuse while it could still be needed: an extender pod still runs, or kube-scheduler
//!    reported a failing call to it within `--quiet-for` (it is still registered).
//! 2. Finish every guard an earlier release left (`requeue::leftovers`): a preempted pod
//!    is requeued first, any other let go.
//! 3. Settle every gated replacement (`settle`): released where its original was
//!    preempted or is gone, deleted where the original runs on or ended on its own.
//! 4. Delete leftover wake placeholders.
//!
//! Each step reports what it did; a second run finds nothing to do.

use std::time::Duration;

use anyhow::Context as _;
use kube::api::{DeleteParams, DynamicObject, ListParams};

use crate::model::Pod;
use crate::requeue::kube::Requeuer;
use crate::requeue::leftovers::decoded;
use crate::requeue::{FROM_POD, FROM_UID, GATE, LABEL};

#[derive(clap::Args, Debug)]
pub struct UninstallArgs {
    /// Namespace the extender runs in.
    #[arg(long, env = "POD_NAMESPACE", default_value = "kube-system")]
    pub namespace: String,
    /// Label selector of the extender's pods: none may still run.
    #[arg(long, default_value = "app.kubernetes.io/name=coloc-extender")]
    pub selector: String,
    /// What kube-scheduler's errors name when it cannot reach the extender (part of the
    /// registration's urlPrefix): a FailedScheduling Event naming it within --quiet-for
    /// means the extender is still registered.
    #[arg(long, default_value = "coloc-extender")]
    pub extender_host: String,
    /// How long kube-scheduler must have reported no failing call to the extender, e.g. 2m.
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    pub quiet_for: Duration,
    /// How long to wait for preempted originals to go before their replacements are
    /// released anyway, e.g. 60s.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub wait_for_originals: Duration,
    /// Skip the checks of step 1 (the extender may still be in use: pods it answered for
    /// may be preempted without a replacement).
    #[arg(long)]
    pub force: bool,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = n.parse().map_err(|_| format!("{s:?}: expected a number and a unit, e.g. 90s or 2m"))?;
    match unit {
        "s" | "" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        _ => Err(format!("{s:?}: the unit must be s or m")),
    }
}

/// What becomes of a gated replacement when the extender goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settle {
    /// Its original was preempted and is gone (or gone unseen): it runs instead.
    Release,
    /// Its original runs on, or ended or was deleted on its own: it would run twice.
    Delete(String),
    /// Its original was preempted and is still terminating.
    Wait,
}

/// `original`: the pod named by the replacement's annotations, if it still exists with
/// the UID the replacement names.
pub fn settle(original: Option<&Pod>) -> Settle {
    match original {
        None => Settle::Release,
        Some(o) if o.preempted && o.is_terminal() => Settle::Release,
        Some(o) if o.preempted => Settle::Wait,
        Some(o) if o.is_terminal() => Settle::Delete(format!("its original {} ended on its own", o.key())),
        Some(o) if o.deletion_time.is_some() => {
            Settle::Delete(format!("its original {} was deleted, not by preemption", o.key()))
        }
        Some(o) => Settle::Delete(format!("its original {} still runs", o.key())),
    }
}

pub fn run(args: UninstallArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(uninstall(args))
}

async fn uninstall(args: UninstallArgs) -> anyhow::Result<()> {
    let config = kube::Config::infer()
        .await
        .context("cannot find a Kubernetes client configuration (in-cluster config or KUBECONFIG)")?;
    let client = kube::Client::try_from(config).context("cannot build a Kubernetes client")?;
    let pods = kube::Api::<DynamicObject>::all_with(client.clone(), &crate::requeue::kube::pod_resource());

    println!("1. checks");
    if args.force {
        println!("   skipped (--force)");
    } else {
        still_in_use(&client, &args).await?;
        println!(
            "   no extender pod runs, and kube-scheduler reported no call to it in the last {}s",
            args.quiet_for.as_secs()
        );
    }

    println!("2. guards left by earlier releases");
    let requeuer = Requeuer::new(client.clone(), Some("uninstall".into()));
    let mut left = 0;
    for pass in 0..=crate::requeue::guard::MAX_TRIES {
        let report = requeuer.finish_all_guards().await.context("cannot list pods")?;
        if pass == 0 || report.found > 0 {
            println!("   {}", report.summary());
        }
        left = report.left;
        if report.found == 0 || report.left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }

    println!("3. gated replacements");
    let deadline = tokio::time::Instant::now() + args.wait_for_originals;
    let (mut released, mut deleted) = (0, 0);
    loop {
        let listed = pods
            .list(&ListParams::default().labels(&format!("{LABEL}=true")))
            .await
            .context("cannot list replacements")?;
        let mut waiting = Vec::new();
        for object in listed.items {
            let Some((_, replacement)) = decoded(&object) else { continue };
            if !replacement.scheduling_gates.iter().any(|g| g == GATE) || replacement.deletion_time.is_some() {
                continue;
            }
            let original = original_of(&client, &replacement).await?;
            let outcome = match settle(original.as_ref()) {
                Settle::Wait if tokio::time::Instant::now() < deadline => {
                    waiting.push(replacement.key());
                    continue;
                }
                Settle::Wait | Settle::Release => requeuer
                    .release_now(&replacement)
                    .await
                    .map(|()| ("released", "its original was preempted".to_string())),
                Settle::Delete(why) => requeuer.delete_now(&replacement).await.map(|()| ("deleted", why)),
            };
            match outcome {
                Ok((what, why)) => {
                    println!("   {what} {}: {why}", replacement.key());
                    if what == "released" {
                        released += 1
                    } else {
                        deleted += 1
                    }
                }
                Err(e) => {
                    println!("   could not settle {}: {e}", replacement.key());
                    left += 1;
                }
            }
        }
        if waiting.is_empty() {
            break;
        }
        println!("   waiting for the originals of {} to go", waiting.join(", "));
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    println!("   {released} released, {deleted} deleted");

    println!("4. wake placeholders");
    let placeholders =
        pods.list(&ListParams::default().labels(crate::wake::LABEL)).await.context("cannot list wake placeholders")?;
    let mut removed = 0;
    for p in placeholders.items {
        let (Some(ns), Some(name)) = (p.metadata.namespace.as_deref(), p.metadata.name.as_deref()) else { continue };
        match crate::requeue::kube::pod_api(&client, ns).delete(name, &DeleteParams::default()).await {
            Ok(_) => removed += 1,
            Err(e) if crate::requeue::kube::api_code(&e) == Some(404) => {}
            Err(e) => {
                println!("   could not delete {ns}/{name}: {e}");
                left += 1;
            }
        }
    }
    println!("   {removed} deleted");

    anyhow::ensure!(left == 0, "{left} object(s) could not be settled: run uninstall again");
    println!("done: no guard, no gated replacement and no placeholder of coloc-extender is left; delete its manifests now (kubectl delete -k ...)");
    Ok(())
}

/// Refuses while the extender could still be asked to decide.
async fn still_in_use(client: &kube::Client, args: &UninstallArgs) -> anyhow::Result<()> {
    let own = std::env::var("POD_NAME").ok();
    let pods = crate::requeue::kube::pod_api(client, &args.namespace);
    let running: Vec<String> = pods
        .list(&ListParams::default().labels(&args.selector))
        .await
        .with_context(|| format!("cannot list the extender's pods in {}", args.namespace))?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && p.metadata.name != own)
        .filter(|p| !matches!(p.data["status"]["phase"].as_str(), Some("Succeeded" | "Failed")))
        .filter_map(|p| p.metadata.name)
        .collect();
    anyhow::ensure!(
        running.is_empty(),
        "the extender still runs ({}): unregister it from kube-scheduler's configuration, scale it to 0 (kubectl -n {} scale deploy/coloc-extender --replicas=0), then run uninstall again",
        running.join(", "),
        args.namespace
    );
    let events = kube::Api::<k8s_openapi::api::core::v1::Event>::all(client.clone());
    let failed = events
        .list(&ListParams::default().fields("reason=FailedScheduling"))
        .await
        .context("cannot list FailedScheduling events")?;
    let now = jiff::Timestamp::now();
    for e in failed.items {
        let message = e.message.as_deref().unwrap_or_default();
        if !message.contains(&args.extender_host) {
            continue;
        }
        let last = [
            e.event_time.as_ref().map(|t| t.0),
            e.last_timestamp.as_ref().map(|t| t.0),
            e.series.as_ref().and_then(|s| s.last_observed_time.as_ref()).map(|t| t.0),
        ]
        .into_iter()
        .flatten()
        .max();
        let Some(last) = last else { continue };
        let age = now.as_second() - last.as_second();
        if age <= args.quiet_for.as_secs() as i64 {
            let pod = format!(
                "{}/{}",
                e.involved_object.namespace.unwrap_or_default(),
                e.involved_object.name.unwrap_or_default()
            );
            anyhow::bail!(
                "kube-scheduler still sends to the extender: {age}s ago it could not schedule {pod}: {:?}. Remove the extender from the KubeSchedulerConfiguration (or delete the scheduler of its own), then run uninstall again after --quiet-for ({}s)",
                crate::wire::request::clip(message, 200),
                args.quiet_for.as_secs()
            );
        }
    }
    Ok(())
}

/// The pod a replacement's annotations name, if it still exists with that UID.
async fn original_of(client: &kube::Client, replacement: &Pod) -> anyhow::Result<Option<Pod>> {
    let (Some(from), Some(uid)) = (replacement.annotations.get(FROM_POD), replacement.annotations.get(FROM_UID)) else {
        return Ok(None);
    };
    let Some((ns, name)) = from.split_once('/') else { return Ok(None) };
    match crate::requeue::kube::pod_api(client, ns)
        .get_opt(name)
        .await
        .with_context(|| format!("cannot read {from}"))?
    {
        Some(object) => Ok(decoded(&object).map(|(_, p)| p).filter(|p| p.uid == *uid)),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Phase;

    fn original() -> Pod {
        Pod {
            name: "free-1".into(),
            namespace: "batch".into(),
            uid: "u".into(),
            phase: Some(Phase::Running),
            ..Default::default()
        }
    }

    #[test]
    fn a_replacement_runs_instead_of_an_original_that_was_preempted() {
        assert_eq!(settle(None), Settle::Release);
        assert_eq!(settle(Some(&Pod { preempted: true, phase: Some(Phase::Failed), ..original() })), Settle::Release);
        assert_eq!(settle(Some(&Pod { preempted: true, deletion_time: Some(1), ..original() })), Settle::Wait);
    }

    #[test]
    fn a_replacement_whose_original_did_not_go_by_preemption_is_deleted() {
        assert!(matches!(settle(Some(&original())), Settle::Delete(why) if why.contains("still runs")));
        assert!(
            matches!(settle(Some(&Pod { phase: Some(Phase::Succeeded), ..original() })), Settle::Delete(why) if why.contains("on its own"))
        );
        assert!(
            matches!(settle(Some(&Pod { deletion_time: Some(1), ..original() })), Settle::Delete(why) if why.contains("not by preemption"))
        );
    }

    #[test]
    fn durations_are_read_with_their_unit_and_nonsense_is_refused() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("soon").unwrap_err().contains("\"soon\""));
        assert!(parse_duration("3h").unwrap_err().contains("unit"));
    }
}
