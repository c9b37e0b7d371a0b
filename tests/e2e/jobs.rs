//! Jobs with the real Job controller: a preemption counts against a Job's backoffLimit
//! unless its podFailurePolicy ignores DisruptionTarget.

use std::collections::BTreeMap;

use coloc_testbed::cluster;
use coloc_testbed::Binaries;
use k8s_openapi::api::batch::v1::Job;
use kube::Api;

use crate::scenarios::{online, online_placed};
use crate::{Bed, Case, Mode};

pub fn cases() -> Vec<Case> {
    vec![Case {
        name: "a_job_is_never_failed_by_preemption_while_another_choice_exists",
        run: |b, m| Box::pin(jobs_not_failed(b, m)),
    }]
}

/// A Job of two pods pinned to `node`.
fn pinned_job(name: &str, backoff_limit: i32, on_disruption: Option<&str>, node: &str) -> Job {
    let mut job = cluster::job("batch", name, 2, backoff_limit, on_disruption, "offline-batch", 1900);
    let template = job.spec.as_mut().and_then(|s| s.template.spec.as_mut()).expect("a Job has a pod template");
    template.node_selector = Some(BTreeMap::from([("kubernetes.io/hostname".to_string(), node.to_string())]));
    job
}

fn failed(job: &Job) -> Option<String> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Failed" && c.status == "True")
        .map(|c| format!("{}: {}", c.reason.clone().unwrap_or_default(), c.message.clone().unwrap_or_default()))
}

/// Three nodes, each full with one Job's two pods: `last` has no failure left
/// (backoffLimit 0), `failjob` fails on DisruptionTarget, `ignore` ignores it. An online
/// pod needs a whole node: only `ignore`'s node leaves every Job intact.
async fn jobs_not_failed(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let mut bed = Bed::up(bins, mode).await?;
    bed.nodes(&["node-1", "node-2", "node-3"], 4000).await?;
    let e = bed.extender(&["--requeue"]).await?;
    bed.schedule_with(&[bed.entry(e)]).await?;
    cluster::create_all(
        &bed.client,
        vec![
            pinned_job("last", 0, None, "node-1"),
            pinned_job("failjob", 6, Some("FailJob"), "node-2"),
            pinned_job("ignore", 0, Some("Ignore"), "node-3"),
        ],
    )
    .await?;
    bed.until_running("batch", 6).await?;

    online(&bed, "web", 3000).await?;
    let node = online_placed(&bed, "web").await?;
    anyhow::ensure!(
        node == "node-3",
        "web placed on {node}; only node-3's Job (Ignore on DisruptionTarget) survives a preemption\n{}",
        bed.logs()
    );
    // Give the Job controller time to count what happened.
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    let jobs: Api<Job> = Api::namespaced(bed.client.clone(), "batch");
    for name in ["last", "failjob", "ignore"] {
        let job = jobs.get(name).await?;
        if let Some(why) = failed(&job) {
            anyhow::bail!("Job {name} failed: {why}");
        }
    }
    bed.finish()
}
