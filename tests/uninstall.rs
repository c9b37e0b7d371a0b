//! `coloc-extender uninstall` against a loopback fake API server. No replica runs, so
//! nothing recorded which gated copies the extender made: uninstall releases a copy only
//! where it checked it against its original while that was still there (the copy requeue
//! builds of it), then once the original is gone; every other gated "copy" is deleted,
//! never released, and named. Each test is the smallest story that shows one rule.

mod fake_api;

#[path = "common/forged.rs"]
mod forged;

use std::time::Duration;

use coloc_extender::model::marks::{FROM_UID, GATE};
use coloc_extender::model::RequeueIntent;
use coloc_extender::requeue::replacement;
use coloc_extender::uninstall::twin::{twin, twin_name};
use coloc_extender::uninstall::{uninstall, Outcome, Report, UninstallArgs};
use fake_api::FakeApi;
use serde_json::{json, Value};

/// A running bare pod of the `free` class (a requeue class) in batch.
fn running(name: &str, scheduler: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "batch", "labels": {"app": "free"}},
        "spec": {"nodeName": "node-1", "schedulerName": scheduler, "priorityClassName": "free", "priority": 100,
            "serviceAccountName": "runner",
            "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]},
        "status": {"phase": "Running"}})
}

/// Namespace batch, opted in, with `pods` running in it.
async fn cluster(pods: &[Value]) -> FakeApi {
    let api = FakeApi::start().await;
    api.seed(&[json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "batch", "labels": {"coloc-extender.io/requeue": "enabled"}}})]);
    api.seed(pods);
    api
}

/// kube-scheduler's mark, then a delete with a grace period: the pod stays, terminating
/// (a finalizer stands in for the kubelet stopping its containers).
fn preempt_gracefully(api: &FakeApi, name: &str) {
    let mut pod = api.get("Pod", "batch", name).unwrap();
    pod["status"]["conditions"] =
        json!([{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]);
    pod["metadata"]["finalizers"] = json!(["example.com/kubelet-stand-in"]);
    let at = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second() + 30).unwrap();
    pod["metadata"]["deletionTimestamp"] = json!(at.to_string());
    api.apply(pod);
}

fn model(pod: &Value) -> coloc_extender::model::Pod {
    serde_json::from_value::<coloc_extender::wire::k8s::Pod>(pod.clone()).unwrap().into_model().unwrap()
}

/// The gated copy requeue builds of `name` as it is now, stored; returns its name.
fn store_copy(api: &FakeApi, name: &str) -> String {
    stored(api, copy_of(api, name))
}

fn copy_of(api: &FakeApi, name: &str) -> Value {
    let original = api.get("Pod", "batch", name).unwrap();
    let intent = RequeueIntent::for_victim(&model(&original), "node-1", "");
    replacement::build(&original, &intent).unwrap()
}

fn stored(api: &FakeApi, copy: Value) -> String {
    api.apply(copy)["metadata"]["name"].as_str().unwrap().to_string()
}

/// A gated "copy" naming `from` (which need not exist), as whoever holds the requeue
/// identity could make one.
fn forged(name: &str, from: &str, scheduler: &str) -> Value {
    forged::forged_copy(running(name, scheduler), "u-of-no-pod", Some(&format!("batch/{from}")), "admin")
}

fn gated(pod: &Value) -> bool {
    pod["spec"]["schedulingGates"].as_array().is_some_and(|g| g.iter().any(|g| g["name"] == GATE))
}

fn args(wait_for_originals: Duration) -> UninstallArgs {
    UninstallArgs {
        namespace: "kube-system".into(),
        selector: "app.kubernetes.io/name=coloc-extender".into(),
        extender_host: "coloc-extender".into(),
        quiet_for: Duration::from_secs(120),
        wait_for_originals,
        requeue_selector: "app.kubernetes.io/name=coloc-requeue".into(),
        scheduler_selector: "app.kubernetes.io/name=coloc-scheduler".into(),
        scheduler_name: "coloc-scheduler".into(),
        scheduler_after: "default-scheduler".into(),
        // No extender or scheduler pod runs here, and no kube-scheduler reports.
        force: true,
        policy: None,
    }
}

/// What the report says became of `copy`.
fn outcome(report: &Report, copy: &str) -> Option<Outcome> {
    report.copies.iter().find(|s| s.copy == format!("batch/{copy}")).map(|s| s.outcome)
}

fn why(report: &Report, copy: &str) -> String {
    report.copies.iter().find(|s| s.copy == format!("batch/{copy}")).map(|s| s.why.clone()).unwrap_or_default()
}

/// Runs uninstall in the background; `then` runs once it has deleted `deleted` (so it has
/// read every original of its first look), before it looks again.
async fn uninstall_while(api: &FakeApi, deleted: &str, then: impl FnOnce()) -> Report {
    let client = api.client();
    let run = tokio::spawn(async move { uninstall(&client, &args(Duration::from_secs(60))).await.unwrap() });
    let path = format!("/api/v1/namespaces/batch/pods/{deleted}");
    assert!(
        fake_api::wait_until(|| api.requests().iter().any(|(m, p, _)| m == "DELETE" && *p == path)).await,
        "{deleted} never deleted"
    );
    then();
    run.await.unwrap()
}

#[tokio::test]
async fn a_gated_copy_of_no_original_is_deleted_never_released() {
    let api = cluster(&[]).await;
    api.apply(forged("ghost-rq-0000000001", "ghost", "default-scheduler"));
    let report = uninstall(&api.client(), &args(Duration::ZERO)).await.unwrap();
    assert!(api.get("Pod", "batch", "ghost-rq-0000000001").is_none(), "deleted");
    assert_eq!(outcome(&report, "ghost-rq-0000000001"), Some(Outcome::NotVerified("no_original")));
    assert!(why(&report, "ghost-rq-0000000001").contains("if it was the copy of batch/ghost"), "{report:?}");
    assert_eq!(api.count("patch", "Pod"), 0, "never released");
    assert_eq!(report.left, 0);
}

#[tokio::test]
async fn a_copy_is_released_once_its_original_is_gone_only_if_checked_while_it_was_there() {
    let api = cluster(&[running("free-1", "default-scheduler"), running("free-2", "default-scheduler")]).await;
    preempt_gracefully(&api, "free-1");
    let checked = store_copy(&api, "free-1");
    // free-2's copy, its original gone before uninstall looks: nothing left to check it against.
    let unchecked = store_copy(&api, "free-2");
    api.remove("Pod", "batch", "free-2");
    let report = uninstall_while(&api, &unchecked, || {
        assert!(gated(&api.get("Pod", "batch", &checked).unwrap()), "never released beside its original");
        api.remove("Pod", "batch", "free-1");
    })
    .await;
    assert!(!gated(&api.get("Pod", "batch", &checked).unwrap()), "released once free-1 is gone: {report:?}");
    assert_eq!(outcome(&report, &checked), Some(Outcome::Released));
    assert!(api.get("Pod", "batch", &unchecked).is_none());
    assert_eq!(outcome(&report, &unchecked), Some(Outcome::NotVerified("no_original")));
    assert_eq!(report.left, 0);
}

#[tokio::test]
async fn a_copy_whose_spec_was_changed_is_deleted_never_released() {
    let api = cluster(&[running("free-1", "default-scheduler")]).await;
    preempt_gracefully(&api, "free-1");
    let mut changed = copy_of(&api, "free-1");
    changed["spec"]["securityContext"] = json!({"runAsUser": 0});
    let changed = stored(&api, changed);
    let report = uninstall(&api.client(), &args(Duration::ZERO)).await.unwrap();
    assert!(api.get("Pod", "batch", &changed).is_none(), "deleted, its original still terminating: {report:?}");
    assert_eq!(outcome(&report, &changed), Some(Outcome::NotVerified("spec_differs")));
    assert!(why(&report, &changed).contains("batch/free-1"), "names the pod lost: {report:?}");
    assert_eq!(api.count("patch", "Pod"), 0, "never released");
}

#[tokio::test]
async fn a_gated_copy_naming_coloc_scheduler_is_moved_only_once_checked() {
    let api = cluster(&[running("free-1", "coloc-scheduler")]).await;
    api.apply(forged("ghost-rq-0000000001", "ghost", "coloc-scheduler"));
    preempt_gracefully(&api, "free-1");
    let copy = store_copy(&api, "free-1");
    let report = uninstall_while(&api, "ghost-rq-0000000001", || {
        assert!(api.get("Pod", "batch", &twin_name(&copy)).is_none(), "not moved beside its original");
        api.remove("Pod", "batch", "free-1");
    })
    .await;
    assert!(api.get("Pod", "batch", &twin_name("ghost-rq-0000000001")).is_none(), "the forged one is not moved");
    assert_eq!(outcome(&report, "ghost-rq-0000000001"), Some(Outcome::NotVerified("no_original")));
    let twin = api.get("Pod", "batch", &twin_name(&copy)).expect("the checked one is moved");
    assert_eq!(twin["spec"]["schedulerName"], "default-scheduler");
    assert!(!gated(&twin), "and released there: {report:?}");
    assert!(api.get("Pod", "batch", &copy).is_none());
}

#[tokio::test]
async fn a_pod_under_a_copys_twin_name_is_never_released_for_it() {
    let api = cluster(&[running("free-1", "coloc-scheduler")]).await;
    preempt_gracefully(&api, "free-1");
    let copy = store_copy(&api, "free-1");
    let original_uid = api.get("Pod", "batch", "free-1").unwrap()["metadata"]["uid"].clone();
    let mut squatter = forged(&twin_name(&copy), "free-1", "default-scheduler");
    squatter["metadata"]["annotations"][FROM_UID] = original_uid;
    api.apply(squatter);
    let report = uninstall_while(&api, &twin_name(&copy), || assert!(api.remove("Pod", "batch", "free-1"))).await;
    assert_eq!(outcome(&report, &twin_name(&copy)), Some(Outcome::NotVerified("other_name")));
    let twin = api.get("Pod", "batch", &twin_name(&copy)).expect("the copy's own twin");
    assert!(twin["spec"].get("securityContext").is_none_or(|s| s.get("runAsUser").is_none()), "{twin}");
    assert!(!gated(&twin), "{report:?}");
    assert_eq!(outcome(&report, &copy), Some(Outcome::Released));
}

#[tokio::test]
async fn a_pod_under_the_twins_name_is_taken_for_the_twin_only_if_it_is_the_copys_own() {
    let api = cluster(&[running("free-1", "coloc-scheduler")]).await;
    preempt_gracefully(&api, "free-1");
    let copy = api.get("Pod", "batch", &store_copy(&api, "free-1")).unwrap();
    let mut squatter = forged(&twin_name(&model(&copy).name), "free-1", "default-scheduler");
    squatter["metadata"]["annotations"][FROM_UID] =
        api.get("Pod", "batch", "free-1").unwrap()["metadata"]["uid"].clone();
    let squatter = stored(&api, squatter);
    let requeuer = coloc_extender::requeue::kube::Requeuer::new(api.client(), None, false);
    let moved = requeuer.store_twin(&model(&copy), twin(&copy, "default-scheduler"), true).await;
    assert!(moved.as_ref().is_err_and(|e| e.contains("is not this copy's twin")), "{moved:?}");
    assert!(gated(&api.get("Pod", "batch", &squatter).unwrap()), "never released");
    assert!(api.get("Pod", "batch", &model(&copy).name).is_some(), "the copy stays");
    // Its own twin, stored by an interrupted run, is taken as stored.
    api.remove("Pod", "batch", &squatter);
    api.apply(twin(&copy, "default-scheduler"));
    let moved = requeuer.store_twin(&model(&copy), twin(&copy, "default-scheduler"), true).await;
    assert_eq!(moved, Ok(squatter.clone()));
    assert!(!gated(&api.get("Pod", "batch", &squatter).unwrap()));
}
