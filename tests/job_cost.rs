//! Job-aware victim cost: a Job's pod is recreated by its Job, but its
//! preemption counts against the Job's `backoffLimit` (or the index's
//! `backoffLimitPerIndex`) unless the Job's `podFailurePolicy` ignores `DisruptionTarget`,
//! and a `FailJob` rule on that condition fails the whole Job. A victim whose preemption
//! fails its Job is lost work. Each rule on the smallest cluster that shows it.

mod common;
mod fake_api;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use coloc_extender::cluster::watch::{self, Freshness};
use coloc_extender::cluster::{snapshot, View, ViewCell};
use coloc_extender::model::{DisruptionAction, Job, OwnerRef, Pod, COMPLETION_INDEX, INDEX_FAILURE_COUNT};
use coloc_extender::policy::{JobVictims, Policy};
use coloc_extender::wire::job::JobJson;
use common::*;
use fake_api::wait_until;
use serde_json::{json, Value};

fn online(cpu: i64) -> Pod {
    pod("preemptor", "online", None, cpu)
}

/// A Job in `default` that has failed `failed` times out of `backoff_limit`.
fn job(name: &str, backoff_limit: i32, failed: i32) -> Job {
    Job {
        namespace: "default".into(),
        name: name.into(),
        uid: format!("job-{name}"),
        backoff_limit,
        failed,
        ..Default::default()
    }
}

fn on_disruption(mut j: Job, action: DisruptionAction) -> Job {
    j.on_disruption = Some(action);
    j
}

/// A running batch pod of Job `job`, started 10 minutes before NOW: cheaper to evict, by
/// run time, than `pod`'s ReplicaSet pods (an hour).
fn job_pod(name: &str, job: &str, node: &str, milli_cpu: i64) -> Pod {
    let mut p = pod(name, "batch", Some(node), milli_cpu).started(600);
    p.controller = Some(OwnerRef { kind: "Job".into(), name: job.into() });
    p
}

trait WithJobs {
    fn job(self, j: Job) -> Self;
}

impl WithJobs for Scenario {
    fn job(mut self, j: Job) -> Self {
        self.objects.jobs.push(j);
        self
    }
}

fn victim_detail<'a>(out: &'a Outcome, pod: &str) -> &'a str {
    let key = format!("default/{pod}");
    out.explanations
        .iter()
        .find(|e| e.verdict == "victim" && e.pod.as_ref() == Some(&key))
        .map_or("", |e| e.detail.as_str())
}

/// n1 holds the Job's pod and a ReplicaSet pod that has run longer: by run time alone the
/// Job's pod is the cheaper victim.
fn job_beside_a_worker(j: Job) -> Scenario {
    let p = job_pod("j", &j.name, "n1", 1000);
    beside_a_worker(j, p)
}

/// n1 holds `job_pod` of Job `j` and the ReplicaSet pod `r`.
fn beside_a_worker(j: Job, job_pod: Pod) -> Scenario {
    Scenario::new(policy("prefer", ""))
        .node(node("n1", 2000, 8))
        .pods([job_pod, pod("r", "batch", Some("n1"), 1000)])
        .job(j)
}

#[test]
fn a_job_at_its_last_allowed_failure_is_spared_for_another_victim_on_the_node() {
    // backoffLimit 2, 2 failures counted: one more fails the Job.
    let out = job_beside_a_worker(job("train", 2, 2)).preempt(online(1000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["r"]))]), "{}", out.explain());
    assert!(out.has("spared", "reprieved"));
}

#[test]
fn a_job_at_its_last_allowed_failure_loses_to_a_costlier_node() {
    // n1: only the Job's pod; n2: a worker that has run six times as long.
    let s = Scenario::new(policy("prefer", ""))
        .node(node("n1", 1000, 8))
        .node(node("n2", 1000, 8))
        .pods([job_pod("j", "train", "n1", 1000), pod("r", "batch", Some("n2"), 1000)])
        .job(job("train", 2, 2));
    let out = s.preempt(online(1000), &["n1", "n2"]);
    assert_eq!(out.victims(), BTreeMap::from([("n2".into(), uids(&["r"]))]), "{}", out.explain());
    assert!(out.has("dropped", "outranked"));
}

#[test]
fn a_job_at_its_last_allowed_failure_is_taken_when_nothing_else_places_the_pod_and_called_lost() {
    let s = Scenario::new(policy("prefer", ""))
        .node(node("n1", 1000, 8))
        .pods([job_pod("j", "train", "n1", 1000)])
        .job(job("train", 2, 2));
    let out = s.preempt(online(1000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["j"]))]), "{}", out.explain());
    assert!(out.has("victim", "lost"));
    let detail = victim_detail(&out, "j");
    assert!(detail.contains("Job default/train: preemption would be failure 3 of backoffLimit 2"), "{detail}");
    assert!(detail.contains("preemption fails the Job"), "{detail}");
}

#[test]
fn a_node_whose_eviction_spends_a_jobs_last_failure_loses_to_one_that_spends_none() {
    // n1: train allows one more failure (backoffLimit 2, 1 counted); n2: a worker that has
    // run six times as long. Nothing is lost either way, but after n1 the next preemption
    // of train would fail it.
    let s = Scenario::new(policy("prefer", ""))
        .node(node("n1", 1000, 8))
        .node(node("n2", 1000, 8))
        .pods([job_pod("j", "train", "n1", 1000), pod("r", "batch", Some("n2"), 1000)])
        .job(job("train", 2, 1));
    let out = s.preempt(online(1000), &["n1", "n2"]);
    assert_eq!(out.victims(), BTreeMap::from([("n2".into(), uids(&["r"]))]), "{}", out.explain());
    // Alone, the Job's pod is taken, and the answer says it spends the last failure.
    let alone = Scenario::new(policy("prefer", ""))
        .node(node("n1", 1000, 8))
        .pods([job_pod("j", "train", "n1", 1000)])
        .job(job("train", 2, 1));
    let out = alone.preempt(online(1000), &["n1"]);
    let detail = victim_detail(&out, "j");
    assert!(
        detail.contains("preemption 2 of backoffLimit 2") && detail.contains("the last failure it allows"),
        "{detail}"
    );
}

#[test]
fn a_job_with_failures_left_is_recreated_and_the_failures_are_counted() {
    let out = job_beside_a_worker(job("train", 3, 1)).preempt(online(1000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["j"]))]), "{}", out.explain());
    assert!(out.has("victim", "chosen"));
    let detail = victim_detail(&out, "j");
    assert!(detail.contains("Job default/train: preemption 2 of backoffLimit 3"), "{detail}");
}

#[test]
fn the_default_backoff_limit_is_six() {
    let j: JobJson = serde_json::from_value(
        json!({"metadata": {"name": "etl", "namespace": "default"}, "spec": {}, "status": {"failed": 6}}),
    )
    .unwrap();
    let j = j.into_model().unwrap();
    assert_eq!(j.backoff_limit, 6);
    let out = job_beside_a_worker(j).preempt(online(1000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["r"]))]), "{}", out.explain());
}

#[test]
fn a_fail_job_rule_on_disruption_target_spares_the_pod_while_another_candidate_exists() {
    let etl = on_disruption(job("etl", 6, 0), DisruptionAction::FailJob);
    let out = job_beside_a_worker(etl.clone()).preempt(online(1000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["r"]))]), "{}", out.explain());

    // Alone on the node, it is taken as lost work, and said so.
    let alone =
        Scenario::new(policy("prefer", "")).node(node("n1", 1000, 8)).pods([job_pod("j", "etl", "n1", 1000)]).job(etl);
    let out = alone.preempt(online(1000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["j"]))]), "{}", out.explain());
    assert!(
        victim_detail(&out, "j")
            .contains("Job default/etl: podFailurePolicy FailJob on DisruptionTarget: preemption fails the Job"),
        "{}",
        out.explain()
    );
}

#[test]
fn with_jobs_protect_a_pod_whose_preemption_fails_its_job_is_never_a_victim() {
    let mut s = Scenario::new(policy("prefer", ""))
        .node(node("n1", 1000, 8))
        .pods([job_pod("j", "etl", "n1", 1000)])
        .job(on_disruption(job("etl", 6, 0), DisruptionAction::FailJob));
    let batch = s.policy.classes.iter().position(|c| c.name == "batch").unwrap();
    s.policy.classes[batch].victim.jobs = JobVictims::Protect;
    let out = s.preempt(online(1000), &["n1"]);
    assert!(out.victims().is_empty(), "{}", out.explain());
    assert!(out.has("spared", "job_would_fail"));
    assert!(out.has("dropped", "does_not_fit"));
}

#[test]
fn an_ignore_rule_on_disruption_target_is_costed_like_a_replica_set_pod() {
    // backoffLimit 0: any counted failure would fail the Job; Ignore counts none.
    let ignoring = on_disruption(job("serve", 0, 0), DisruptionAction::Ignore);
    let out = job_beside_a_worker(ignoring).preempt(online(1000), &["n1"]);
    let replica_set = Scenario::new(policy("prefer", ""))
        .node(node("n1", 2000, 8))
        .pods([pod("j", "batch", Some("n1"), 1000).started(600), pod("r", "batch", Some("n1"), 1000)])
        .preempt(online(1000), &["n1"]);
    assert_eq!(out.victims(), replica_set.victims(), "{}", out.explain());
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["j"]))]));
    assert!(victim_detail(&out, "j").contains("podFailurePolicy Ignore on DisruptionTarget"), "{}", out.explain());
}

#[test]
fn failures_recorded_but_not_counted_yet_are_counted() {
    // status.failed 0, but one failed pod waits in uncountedTerminatedPods: the Job's one
    // allowed failure is spent.
    let mut j = job("train", 1, 0);
    j.uncounted_failed = vec!["uid-gone".into()];
    let out = job_beside_a_worker(j).preempt(online(1000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["r"]))]), "{}", out.explain());
}

#[test]
fn failures_the_view_has_seen_but_the_job_has_not_recorded_are_counted() {
    // A sibling evicted a moment ago is still terminating with the Job's tracking
    // finalizer: the controller has not recorded it, the view counts it.
    let mut evicted = job_pod("j-old", "train", "n2", 1000);
    evicted.deletion_time = Some(NOW - 5);
    evicted.job_tracking = true;
    let s = job_beside_a_worker(job("train", 1, 0)).node(node("n2", 1000, 8)).pods([evicted.clone()]);
    let out = s.preempt(online(1000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["r"]))]), "{}", out.explain());

    // Once the controller has recorded it (finalizer removed, the pod in status.failed),
    // it is counted once, by the Job.
    let mut recorded = evicted;
    recorded.job_tracking = false;
    let s = job_beside_a_worker(job("train", 3, 1)).node(node("n2", 1000, 8)).pods([recorded]);
    let out = s.preempt(online(1000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["j"]))]), "{}", out.explain());
    assert!(
        victim_detail(&out, "j").contains("preemption 2 of backoffLimit 3 (1 counted, 0 seen but not counted yet)"),
        "{}",
        out.explain()
    );
}

#[test]
fn a_failed_pod_not_yet_recorded_counts_until_the_job_is_written_again() {
    let mut failed = job_pod("j-old", "train", "n1", 1000);
    failed.phase = Some("Failed".into());
    failed.job_tracking = true;
    let s = job_beside_a_worker(job("train", 1, 0)).pods([failed]);
    let mut view = s.view();
    let train = view.jobs().get("default", "train").unwrap().clone();
    assert_eq!(view.jobs().uncounted_failures(&train), 1, "the Failed pod is not in the view, its failure is");
    // The controller writes the Job: status.failed now counts it.
    view.apply_job(Job { failed: 1, ..train });
    let train = view.jobs().get("default", "train").unwrap().clone();
    assert_eq!(view.jobs().uncounted_failures(&train), 0);
}

#[test]
fn several_pods_of_one_job_in_one_answer_are_counted_together() {
    // One failure left: n1 would take two pods of the Job (the second fails it), n2 two
    // workers that ran longer.
    let s = Scenario::new(policy("prefer", ""))
        .node(node("n1", 2000, 8))
        .node(node("n2", 2000, 8))
        .pods([
            job_pod("j-1", "train", "n1", 1000),
            job_pod("j-2", "train", "n1", 1000),
            pod("r-1", "batch", Some("n2"), 1000),
            pod("r-2", "batch", Some("n2"), 1000),
        ])
        .job(job("train", 3, 2));
    let out = s.preempt(online(2000), &["n1", "n2"]);
    assert_eq!(out.victims(), BTreeMap::from([("n2".into(), uids(&["r-1", "r-2"]))]), "{}", out.explain());
}

#[test]
fn two_preemptors_of_a_wave_do_not_together_fail_a_job() {
    // train allows one more failure (backoffLimit 3, 2 counted); j-1 on n1 and j-2 on n2
    // are the cheapest victims, r on n3 has run six times as long, and its PDB allows one
    // more disruption: each spends a last budget.
    let s = Scenario::new(policy("prefer", ""))
        .node(node("n1", 1000, 8))
        .node(node("n2", 1000, 8))
        .node(node("n3", 1000, 8))
        .pods([
            job_pod("j-1", "train", "n1", 1000),
            job_pod("j-2", "train", "n2", 1000),
            pod("r", "batch", Some("n3"), 1000),
            pod("web-1", "online", None, 1000),
            pod("web-2", "online", None, 1000),
        ])
        .job(job("train", 3, 2))
        .pdb(pdb("r-pdb", "r", 1));
    let first = s.preempt(pod("web-1", "online", None, 1000), &["n1", "n2", "n3"]);
    let (node, victims) = first.victims().into_iter().next().expect("web-1 is answered");
    assert!(victims[0].starts_with("uid-j-"), "{}", first.explain());
    assert!(victim_detail(&first, &victims[0][4..]).contains("preemption 3 of backoffLimit 3"), "{}", first.explain());

    // web-2 is decided before kube-scheduler has deleted that pod: the Job has not counted
    // its failure yet, and the other Job pod would be failure 4.
    let mut s = s;
    s.promised = first.promised;
    let second = s.preempt(pod("web-2", "online", None, 1000), &["n1", "n2", "n3"]);
    assert_eq!(second.victims(), BTreeMap::from([("n3".into(), uids(&["r"]))]), "{}", second.explain());
    let other = if node == "n1" { "n2" } else { "n1" };
    assert!(
        second
            .explanations
            .iter()
            .any(|e| e.node.as_deref() == Some(other)
                && e.detail.contains("1 victim(s) nobody agreed to lose against 0")),
        "{}",
        second.explain()
    );
}

fn indexed(name: &str, per_index: i32, failed_indexes: &[(u32, u32)]) -> Job {
    Job {
        indexed: true,
        backoff_limit: i32::MAX,
        backoff_limit_per_index: Some(per_index),
        failed_indexes: failed_indexes.to_vec(),
        ..job(name, 0, 0)
    }
}

fn index_pod(name: &str, job: &str, index: u32, failures: u32) -> Pod {
    job_pod(name, job, "n1", 1000)
        .annotate(COMPLETION_INDEX, &index.to_string())
        .annotate(INDEX_FAILURE_COUNT, &failures.to_string())
}

#[test]
fn with_backoff_limit_per_index_an_index_at_its_limit_is_spared() {
    // Index 3 has failed once (its limit); index 2 never. Index 1 has failed for good.
    let s = Scenario::new(policy("prefer", ""))
        .node(node("n1", 2000, 8))
        .pods([index_pod("i-3", "sweep", 3, 1), index_pod("i-2", "sweep", 2, 0).started(3600)])
        .job(indexed("sweep", 1, &[(1, 1)]));
    let out = s.preempt(online(1000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["i-2"]))]), "{}", out.explain());
    let detail = victim_detail(&out, "i-2");
    assert!(detail.contains("Job default/sweep: index 2: preemption 1 of backoffLimitPerIndex 1: recreated, the last failure the index allows; 1 index(es) failed already"), "{detail}");

    // Alone, the index at its limit is taken as lost work: the index fails.
    let alone = Scenario::new(policy("prefer", ""))
        .node(node("n1", 1000, 8))
        .pods([index_pod("i-3", "sweep", 3, 1)])
        .job(indexed("sweep", 1, &[]));
    let out = alone.preempt(online(1000), &["n1"]);
    assert!(out.has("victim", "lost"), "{}", out.explain());
    assert!(victim_detail(&out, "i-3").contains("preemption fails the index"), "{}", out.explain());
}

#[test]
fn an_explicit_backoff_limit_holds_for_an_indexed_job_too() {
    // Index 0 has retries left, but the Job as a whole has used up its backoffLimit.
    let j = Job { backoff_limit: 2, failed: 2, ..indexed("sweep", 3, &[]) };
    let out = beside_a_worker(j, index_pod("i-0", "sweep", 0, 0)).preempt(online(1000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["r"]))]), "{}", out.explain());
}

#[test]
fn a_fail_index_rule_fails_the_index_at_once() {
    let j = on_disruption(indexed("sweep", 3, &[]), DisruptionAction::FailIndex);
    let out = beside_a_worker(j, index_pod("i-0", "sweep", 0, 0)).preempt(online(1000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["r"]))]), "{}", out.explain());
}

#[test]
fn without_the_job_in_the_view_a_job_pod_is_costed_as_recreated_and_said_so() {
    let s = Scenario::new(policy("prefer", ""))
        .node(node("n1", 2000, 8))
        .pods([job_pod("j", "train", "n1", 1000), pod("r", "batch", Some("n1"), 1000)]);
    let out = s.preempt(online(1000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["j"]))]), "{}", out.explain());
    assert!(victim_detail(&out, "j").contains("not in the cluster view"), "{}", out.explain());
}

/// A Job as `kubectl get job -o json` prints it (v1.35), trimmed of nothing it reads.
fn real_job_json() -> Value {
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "creationTimestamp": "2026-11-01T10:00:00Z",
            "generation": 1,
            "labels": {"batch.kubernetes.io/job-name": "etl", "controller-uid": "0b1f3c"},
            "name": "etl",
            "namespace": "batch",
            "resourceVersion": "48211",
            "uid": "0b1f3c4e-7d0a-4f7e-9a57-2c1d5e0c9a11"
        },
        "spec": {
            "backoffLimit": 3,
            "completionMode": "NonIndexed",
            "completions": 4,
            "manualSelector": false,
            "parallelism": 2,
            "podFailurePolicy": {
                "rules": [
                    {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
                    {"action": "Ignore", "onPodConditions": [{"status": "False", "type": "DisruptionTarget"}]},
                    {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]},
                    {"action": "Ignore", "onPodConditions": [{"status": "True", "type": "DisruptionTarget"}]}
                ]
            },
            "podReplacementPolicy": "Failed",
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "0b1f3c"}},
            "suspend": false,
            "template": {"metadata": {"labels": {"app": "etl"}}, "spec": {"containers": [{"name": "main", "image": "busybox"}], "restartPolicy": "Never"}}
        },
        "status": {
            "active": 2,
            "failed": 1,
            "ready": 2,
            "startTime": "2026-11-01T10:00:01Z",
            "terminating": 0,
            "uncountedTerminatedPods": {"failed": ["7c2e"]}
        }
    })
}

#[test]
fn a_real_job_decodes_to_what_decisions_read() {
    let j: JobJson = serde_json::from_value(real_job_json()).unwrap();
    let j = j.into_model().unwrap();
    assert_eq!((j.namespace.as_str(), j.name.as_str(), j.backoff_limit, j.failed), ("batch", "etl", 3, 1));
    assert_eq!(j.uncounted_failed, vec!["7c2e".to_string()]);
    assert!(!j.indexed && j.backoff_limit_per_index.is_none() && !j.finished);
    // Exit-code rules and rules on DisruptionTarget=False never match a preemption; the
    // first rule on DisruptionTarget (status True by default) decides.
    assert_eq!(j.on_disruption, Some(DisruptionAction::FailJob));

    let indexed: JobJson = serde_json::from_value(json!({
        "metadata": {"name": "sweep", "namespace": "ml"},
        "spec": {"completionMode": "Indexed", "backoffLimitPerIndex": 2, "maxFailedIndexes": 5, "podFailurePolicy": null},
        "status": {"failedIndexes": "1,3-5", "conditions": [{"type": "Complete", "status": "False"}]}
    }))
    .unwrap();
    let indexed = indexed.into_model().unwrap();
    assert!(indexed.indexed);
    assert_eq!(
        (indexed.backoff_limit, indexed.backoff_limit_per_index, indexed.max_failed_indexes),
        (i32::MAX, Some(2), Some(5))
    );
    assert_eq!(indexed.failed_indexes, vec![(1, 1), (3, 5)]);
    assert_eq!(indexed.on_disruption, None);

    let bad: JobJson =
        serde_json::from_value(json!({"metadata": {"name": "x"}, "status": {"failedIndexes": "2-1"}})).unwrap();
    assert!(bad.into_model().unwrap_err().to_string().contains("status.failedIndexes"));
}

fn node_json(name: &str) -> Value {
    json!({"kind": "Node", "apiVersion": "v1", "metadata": {"name": name}, "status": {"allocatable": {"cpu": "2", "memory": "8Gi", "pods": "110"}}})
}

/// A running batch pod on n1; `job` makes it the Job's (ownerReference, tracking finalizer).
fn pod_json(name: &str, job: Option<&str>, started: &str) -> Value {
    let mut p = json!({
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": name, "namespace": "batch", "uid": format!("uid-{name}")},
        "spec": {"nodeName": "n1", "priority": 100, "priorityClassName": "batch", "containers": [{"resources": {"requests": {"cpu": "1"}}}]},
        "status": {"phase": "Running", "startTime": started},
    });
    if let Some(job) = job {
        p["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": "0b1f3c", "controller": true}]);
        p["metadata"]["finalizers"] = json!(["batch.kubernetes.io/job-tracking"]);
    } else {
        p["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "1", "controller": true}]);
    }
    p
}

/// n1: a pod of Job batch/etl (FailJob on DisruptionTarget) that ran 10 minutes, and a
/// worker that ran an hour.
fn cluster_json() -> Vec<Value> {
    let mut etl = real_job_json();
    etl["status"]["uncountedTerminatedPods"] = json!(null);
    vec![
        node_json("n1"),
        etl,
        pod_json("etl-1", Some("etl"), "2027-01-15T07:50:00Z"),
        pod_json("worker", None, "2027-01-15T07:00:00Z"),
    ]
}

fn preempt_on(view: &View, policy: &Policy) -> BTreeMap<String, Vec<String>> {
    let ctx = coloc_extender::decide::Context::new(policy, Some(view), NOW);
    let mut online = pod("preemptor", "online", None, 1000).ns("batch");
    online.priority_class_name = Some("online".into());
    let candidates = coloc_extender::wire::Candidates::Meta(BTreeMap::from([(
        "n1".to_string(),
        coloc_extender::wire::VictimUids { uids: uids(&["etl-1", "worker"]), num_pdb_violations: 0 },
    )]));
    let out = coloc_extender::decide::preempt(&coloc_extender::wire::PreemptArgs { pod: online, candidates }, &ctx);
    out.result
        .node_name_to_meta_victims
        .into_iter()
        .map(|(n, v)| (n, v.pods.into_iter().map(|p| p.uid).collect()))
        .collect()
}

#[test]
fn a_snapshot_with_jobs_costs_job_victims() {
    let policy = policy("prefer", "");
    let objects = snapshot::parse(json!({"kind": "List", "items": cluster_json()}).to_string().as_bytes()).unwrap();
    assert_eq!(objects.jobs.len(), 1);
    assert!(objects.pods.iter().find(|p| p.name == "etl-1").unwrap().job_tracking);
    let view = View::build(objects, &policy);
    assert_eq!(preempt_on(&view, &policy), BTreeMap::from([("n1".into(), uids(&["worker"]))]));
}

#[tokio::test]
async fn jobs_are_watched_and_their_pods_failures_followed() {
    let api = fake_api::FakeApi::start().await;
    api.seed(&cluster_json());
    let cell = Arc::new(ViewCell::default());
    let fresh = Arc::new(Freshness::default());
    let policy = policy("prefer", "");
    let run = watch::run(
        api.client(),
        cell.clone(),
        Arc::new(ArcSwap::from_pointee(policy.clone())),
        fresh.clone(),
        Duration::from_millis(20),
    );
    let task = tokio::spawn(run);
    assert!(wait_until(|| cell.is_ready()).await, "view never synced: {:?}", fresh.unsynced_kinds());

    // The watched view decides as the snapshot of the same objects does.
    let snap = View::build(
        snapshot::parse(json!({"kind": "List", "items": cluster_json()}).to_string().as_bytes()).unwrap(),
        &policy,
    );
    let live = cell.load().unwrap();
    assert_eq!(live.jobs().get("batch", "etl"), snap.jobs().get("batch", "etl"));
    assert_eq!(preempt_on(&live, &policy), preempt_on(&snap, &policy));

    // The Job changes its mind (Ignore on DisruptionTarget) and has room for failures.
    let mut etl = real_job_json();
    etl["spec"]["podFailurePolicy"] =
        json!({"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]});
    api.apply(etl.clone());
    assert!(
        wait_until(|| cell
            .load()
            .unwrap()
            .jobs()
            .get("batch", "etl")
            .is_some_and(|j| j.on_disruption == Some(DisruptionAction::Ignore)))
        .await
    );
    assert_eq!(preempt_on(&cell.load().unwrap(), &policy), BTreeMap::from([("n1".into(), uids(&["etl-1"]))]));

    // No rule, backoffLimit 4, 1 failed, 1 recorded but not counted: a third failure
    // still leaves one.
    etl["spec"]["podFailurePolicy"] = json!(null);
    etl["spec"]["backoffLimit"] = json!(4);
    api.apply(etl.clone());
    let mut sibling = pod_json("etl-0", Some("etl"), "2027-01-15T07:40:00Z");
    sibling["spec"]["nodeName"] = json!("n2");
    api.apply(sibling.clone());
    assert!(wait_until(|| cell.load().unwrap().pod("batch/etl-0").is_some()).await);
    assert!(
        wait_until(|| cell.load().unwrap().jobs().get("batch", "etl").is_some_and(|j| j.on_disruption.is_none())).await
    );
    assert_eq!(
        preempt_on(&cell.load().unwrap(), &policy),
        BTreeMap::from([("n1".into(), uids(&["etl-1"]))]),
        "2 failures, a third of 4 is allowed"
    );

    // The sibling is evicted (terminating, the Job's finalizer still on it): the view
    // counts the failure before the controller does...
    sibling["metadata"]["deletionTimestamp"] = json!("2027-01-15T07:59:50Z");
    api.apply(sibling.clone());
    assert!(wait_until(|| cell.load().unwrap().pod("batch/etl-0").is_some_and(|p| p.deletion_time.is_some())).await);
    assert_eq!(
        preempt_on(&cell.load().unwrap(), &policy),
        BTreeMap::from([("n1".into(), uids(&["worker"]))]),
        "with the unrecorded failure, etl-1's would be the last one: the worker goes instead"
    );
    // ... and still once it has failed and left the view (the pod watch skips terminal
    // pods), until the Job is written again.
    sibling["status"]["phase"] = json!("Failed");
    api.apply(sibling);
    assert!(wait_until(|| cell.load().unwrap().pod("batch/etl-0").is_none()).await);
    assert_eq!(preempt_on(&cell.load().unwrap(), &policy), BTreeMap::from([("n1".into(), uids(&["worker"]))]));
    // The controller records it: counted once, by the Job.
    etl["status"]["uncountedTerminatedPods"] = json!({"failed": ["7c2e", "uid-etl-0"]});
    api.apply(etl);
    assert!(
        wait_until(|| cell.load().unwrap().jobs().get("batch", "etl").is_some_and(|j| j.uncounted_failed.len() == 2))
            .await
    );
    let live = cell.load().unwrap();
    let etl = live.jobs().get("batch", "etl").unwrap();
    assert_eq!(live.jobs().uncounted_failures(etl), 2);

    // The Job is deleted: its pods are costed as recreated again.
    api.remove("Job", "batch", "etl");
    assert!(wait_until(|| cell.load().unwrap().jobs().get("batch", "etl").is_none()).await);
    task.abort();
}

#[test]
fn a_pdb_is_violated_before_a_job_is_failed() {
    // n1: only the Job's pod at its last allowed failure; n2: a worker whose PDB allows no
    // disruption. Both bring nothing back the owner agreed to lose but the Job's pod: a
    // violated PDB's pod is recreated, a failed Job's work is lost.
    let worker = pod("r", "batch", Some("n2"), 1000).label("app", "web");
    let s = Scenario::new(policy("prefer", ""))
        .node(node("n1", 1000, 8))
        .node(node("n2", 1000, 8))
        .pods([job_pod("j", "train", "n1", 1000), worker])
        .pdb(pdb("web", "web", 0))
        .job(job("train", 2, 2));
    let out = s.preempt(online(1000), &["n1", "n2"]);
    assert_eq!(out.victims(), BTreeMap::from([("n2".into(), uids(&["r"]))]), "{}", out.explain());
    assert_eq!(out.violations("n2"), 1);
}

#[test]
fn a_job_pod_an_earlier_answer_chose_is_one_failure_however_often_it_is_chosen() {
    // train allows one more failure; web-1 was answered n1 (j-1) a moment ago. web-2 is
    // offered n1 too and needs all of it: j-1 again, and r.
    let mut s = Scenario::new(policy("prefer", ""))
        .node(node("n1", 2000, 8))
        .pods([job_pod("j-1", "train", "n1", 1000), pod("r", "batch", Some("n1"), 1000)])
        .job(job("train", 3, 2));
    s.promised = vec![coloc_extender::decide::promised::PromisedRoom {
        node: "n1".into(),
        pod: pod("web-1", "online", None, 1000),
        victims: uids(&["j-1"]),
        at: NOW,
    }];
    let out = s.preempt(pod("web-2", "online", None, 1000), &["n1"]);
    assert_eq!(out.victims(), BTreeMap::from([("n1".into(), uids(&["r", "j-1"]))]), "{}", out.explain());
    assert!(!out.has("victim", "lost"), "{}", out.explain());
    assert!(victim_detail(&out, "j-1").contains("preemption 3 of backoffLimit 3"), "{}", out.explain());
}
