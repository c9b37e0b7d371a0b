//! Requeue end to end against a loopback fake API server: the cluster of the recorded
//! scenario, the cluster view from its watches, preempt through the real router, and the
//! requeue controller's passes. Each test is the smallest story that shows one guarantee.

mod fake_api;

#[path = "common/forged.rs"]
mod forged;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use coloc_extender::cluster::watch::{self, Freshness};
use coloc_extender::cluster::{RequeueCell, ViewCell};
use coloc_extender::http::router;
use coloc_extender::http::state::{AppState, ViewSource};
use coloc_extender::model::marks::{FROM_UID, GATE, GUARD, PREEMPTED_ON};
use coloc_extender::policy::Policy;
use coloc_extender::requeue::controller::Settings;
use coloc_extender::requeue::kube::Requeuer;
use coloc_extender::requeue::remove_after_0_1::tries::Tries;
use fake_api::FakeApi;
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{json, Value};
use tower::ServiceExt;

const ROUND: &str = "tests/fixtures/payloads/r2-nodecache-true";

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join(ROUND).join(name)).unwrap()
}

/// The cluster at the moment kube-scheduler asked to preempt for `online-hostport` (0043):
/// the only room is held by the bare pod `batch/hostport-batch` on node-gpu1 (its host
/// port: requeue does not copy it). Beside it on node-gpu2, `VICTIM`, a bare batch pod
/// requeue copies.
async fn cluster() -> FakeApi {
    let api = FakeApi::start().await;
    let snap: Value = serde_json::from_slice(&fixture("0043-preempt.snapshot.json")).unwrap();
    api.seed(snap["items"].as_array().unwrap());
    api.seed(&[opted_in("batch"), opted_in("online")]);
    let mut plain = api.get("Pod", "batch", "hostport-batch").unwrap();
    plain["metadata"]["name"] = json!(VICTIM);
    plain["metadata"]["uid"] = Value::Null;
    plain["spec"]["nodeName"] = json!("node-gpu2");
    plain["spec"]["nodeSelector"] = Value::Null;
    plain["spec"]["containers"][0]["ports"] = Value::Null;
    api.apply(plain);
    api
}

/// A bare batch pod that reaches into its node in no way.
const VICTIM: &str = "free-batch";

/// A namespace labelled to take requeue copies.
fn opted_in(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": {"coloc-extender.io/requeue": "enabled"}}})
}

/// One extender replica beside one requeue controller replica, each with its own view from
/// the fake API server's watches: decisions read the extender's, requeue `cell`.
struct Replica {
    cell: Arc<RequeueCell>,
    state: AppState,
    policy: Policy,
    requeuer: Arc<Requeuer>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Replica {
    /// One pass of the requeue controller, leading (back-offs of a millisecond).
    async fn reconcile(&self) -> usize {
        self.pass(true).await
    }

    /// One pass, leading or standing by.
    async fn pass(&self, leading: bool) -> usize {
        let settings = Settings { backoff: Duration::from_millis(1), ..Settings::copying() };
        self.requeuer.reconcile_once(&self.cell, &self.policy, settings, leading).await
    }

    /// Passes until nothing is left to do (at most a few).
    async fn settle(&self) {
        for _ in 0..10 {
            if self.reconcile().await == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

async fn replica(api: &FakeApi) -> Replica {
    let policy = Policy::builtin_default().enforced();
    let view = Arc::new(ViewCell::default());
    let mut state = AppState::new(policy.clone(), view.clone(), ViewSource::Kubernetes);
    let policy = Arc::new(ArcSwap::from_pointee(policy));
    let every = Duration::from_millis(20);
    let decisions =
        tokio::spawn(watch::run(api.client(), view.clone(), policy.clone(), Arc::new(Freshness::default()), every));
    let cell = Arc::new(RequeueCell::default());
    let requeues =
        tokio::spawn(watch::run_requeue(api.client(), cell.clone(), policy, Arc::new(Freshness::default()), every));
    let requeuer = Arc::new(Requeuer::new(api.client(), Some("test".into()), true));
    state.requeue = requeuer.availability.clone();
    assert!(eventually(|| view.is_ready() && cell.is_ready()).await, "the views never synced");
    Replica { cell, state, policy: Policy::builtin_default().enforced(), requeuer, tasks: vec![decisions, requeues] }
}

async fn eventually(mut ok: impl FnMut() -> bool) -> bool {
    for _ in 0..250 {
        if ok() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// The preempt kube-scheduler sent for online-hostport; returns (status, victims' UIDs by node).
async fn preempt(r: &Replica) -> (StatusCode, Value) {
    let req = Request::post("/preempt")
        .header("content-type", "application/json")
        .body(Body::from(fixture("0043-preempt.json")))
        .unwrap();
    let resp = router(r.state.clone(), "", decision_workers()).oneshot(req).await.unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&body).unwrap())
}

fn victims(answer: &Value) -> Vec<String> {
    answer["NodeNameToMetaVictims"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|v| v["Pods"].as_array().unwrap().iter().map(|p| p["UID"].as_str().unwrap().to_string()))
        .collect()
}

fn uid_of(api: &FakeApi, name: &str) -> String {
    api.get("Pod", "batch", name).unwrap()["metadata"]["uid"].as_str().unwrap().to_string()
}

/// Replacements stored for `original_uid`.
fn replacements_of(api: &FakeApi, original_uid: &str) -> Vec<Value> {
    api.list("Pod").into_iter().filter(|p| p["metadata"]["annotations"][FROM_UID] == original_uid).collect()
}

fn gated(pod: &Value) -> bool {
    pod["spec"]["schedulingGates"].as_array().is_some_and(|g| g.iter().any(|g| g["name"] == GATE))
}

/// What kube-scheduler does to a victim: the DisruptionTarget condition, then a delete
/// (which the fake API server carries out at once, as for a grace period of 0).
async fn evict(api: &FakeApi, name: &str) {
    mark(api, name).await;
    let pods: Api<Pod> = Api::namespaced(api.client(), "batch");
    pods.delete(name, &DeleteParams::default()).await.unwrap();
}

/// kube-scheduler's mark alone.
async fn mark(api: &FakeApi, name: &str) {
    let pods: Api<Pod> = Api::namespaced(api.client(), "batch");
    let condition = json!({"status": {"conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(condition)).await.unwrap();
}

/// The mark, then a delete with a grace period: the pod stays, terminating (held by a
/// finalizer here, where a kubelet would hold it until its containers stop).
async fn evict_gracefully(api: &FakeApi, name: &str) {
    mark(api, name).await;
    let mut pod = api.get("Pod", "batch", name).unwrap();
    pod["metadata"]["finalizers"] = json!(["example.com/kubelet-stand-in"]);
    let at = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second() + 30).unwrap();
    pod["metadata"]["deletionTimestamp"] = json!(at.to_string());
    pod["metadata"]["deletionGracePeriodSeconds"] = json!(30);
    api.apply(pod);
}

#[tokio::test]
async fn a_bare_victim_is_answered_without_any_write() {
    let api = cluster().await;
    let r = replica(&api).await;
    let original = uid_of(&api, "hostport-batch");
    let (status, answer) = preempt(&r).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(victims(&answer), std::slice::from_ref(&original), "{answer}");
    assert_eq!(api.count("create", "Pod") + api.count("patch", "Pod"), 0, "no write while kube-scheduler waits");
    // Nor after: kube-scheduler has not evicted it.
    r.settle().await;
    assert!(replacements_of(&api, &original).is_empty(), "no copy of a pod that runs");
}

#[tokio::test]
async fn a_pod_kube_scheduler_preempted_on_its_own_comes_back_released() {
    // No preempt call at all: the extender was skipped (ignorable), or another scheduler.
    let api = cluster().await;
    let r = replica(&api).await;
    let original = uid_of(&api, VICTIM);
    let labels = api.get("Pod", "batch", VICTIM).unwrap()["metadata"]["labels"].clone();
    evict(&api, VICTIM).await;
    assert!(eventually(|| r.cell.load().unwrap().pod_by_uid(&original).is_none()).await);
    r.settle().await;
    let stored = replacements_of(&api, &original);
    assert_eq!(stored.len(), 1, "one copy");
    let copy = &stored[0];
    assert!(!gated(copy), "released: its original is gone: {copy}");
    assert!(copy["spec"].get("nodeName").is_none_or(Value::is_null));
    assert_eq!(copy["metadata"]["labels"]["app"], labels["app"]);
    assert_eq!(copy["metadata"]["annotations"][PREEMPTED_ON], "node-gpu2");
    assert_eq!(api.count("create", "Pod"), 1, "one create");
    let notes: Vec<String> =
        api.list("Event").iter().map(|e| e["note"].as_str().unwrap_or_default().to_string()).collect();
    assert_eq!(notes, [format!("requeued from batch/free-batch ({original}) after its eviction, attempt 1")]);
}

#[tokio::test]
async fn a_copy_is_gated_while_its_original_terminates_and_released_once_it_is_gone() {
    let api = cluster().await;
    let r = replica(&api).await;
    let original = uid_of(&api, VICTIM);
    evict_gracefully(&api, VICTIM).await;
    assert!(eventually(|| r.cell.load().unwrap().evictions().len() == 1).await);
    r.settle().await;
    assert!(gated(&replacements_of(&api, &original)[0]), "held back while the original terminates");
    api.remove("Pod", "batch", VICTIM);
    assert!(eventually(|| r.cell.load().unwrap().pod_by_uid(&original).is_none()).await);
    r.settle().await;
    assert!(!gated(&replacements_of(&api, &original)[0]), "released");
}

#[tokio::test]
async fn a_replica_started_after_the_eviction_adopts_the_preempted_pod() {
    let api = cluster().await;
    let original = uid_of(&api, VICTIM);
    evict_gracefully(&api, VICTIM).await; // no replica runs
    let r = replica(&api).await;
    r.settle().await;
    assert_eq!(replacements_of(&api, &original).len(), 1, "adopted at start-up");
}

#[tokio::test]
async fn a_pod_deleted_by_a_user_is_not_copied() {
    let api = cluster().await;
    let r = replica(&api).await;
    let original = uid_of(&api, VICTIM);
    let pods: Api<Pod> = Api::namespaced(api.client(), "batch");
    pods.delete(VICTIM, &DeleteParams::default()).await.unwrap();
    assert!(eventually(|| r.cell.load().unwrap().pod_by_uid(&original).is_none()).await);
    r.settle().await;
    assert!(replacements_of(&api, &original).is_empty());
}

#[tokio::test]
async fn a_marked_pod_that_then_succeeds_is_not_copied() {
    // kube-scheduler's delete never came; the pod finished and left the watch (terminal).
    let api = cluster().await;
    let r = replica(&api).await;
    let original = uid_of(&api, VICTIM);
    mark(&api, VICTIM).await;
    let pods: Api<Pod> = Api::namespaced(api.client(), "batch");
    let done = json!({"status": {"phase": "Succeeded"}});
    pods.patch_status(VICTIM, &PatchParams::default(), &Patch::Merge(done)).await.unwrap();
    assert!(eventually(|| r.cell.load().unwrap().pod_by_uid(&original).is_none()).await);
    r.settle().await;
    assert!(replacements_of(&api, &original).is_empty(), "the API server says it ended on its own");
}

#[tokio::test]
async fn a_pod_that_succeeds_while_its_copy_waits_is_not_run_again() {
    let api = cluster().await;
    let r = replica(&api).await;
    let original = uid_of(&api, VICTIM);
    evict_gracefully(&api, VICTIM).await;
    assert!(eventually(|| r.cell.load().unwrap().evictions().len() == 1).await);
    r.settle().await;
    assert_eq!(replacements_of(&api, &original).len(), 1);
    // It finishes its work within its grace period.
    let pods: Api<Pod> = Api::namespaced(api.client(), "batch");
    let done = json!({"status": {"phase": "Succeeded"}});
    pods.patch_status(VICTIM, &PatchParams::default(), &Patch::Merge(done)).await.unwrap();
    assert!(eventually(|| r.cell.load().unwrap().pod_by_uid(&original).is_none()).await);
    r.settle().await;
    assert!(replacements_of(&api, &original).is_empty(), "the copy is deleted, never released");
}

#[tokio::test]
async fn two_replicas_store_one_copy_and_release_it_once() {
    let api = cluster().await;
    let (a, b) = (replica(&api).await, replica(&api).await);
    let original = uid_of(&api, VICTIM);
    evict(&api, VICTIM).await;
    assert!(
        eventually(|| a.cell.load().unwrap().pod_by_uid(&original).is_none()
            && b.cell.load().unwrap().pod_by_uid(&original).is_none())
        .await
    );
    tokio::join!(a.reconcile(), b.reconcile());
    assert_eq!(replacements_of(&api, &original).len(), 1);
    tokio::join!(a.settle(), b.settle());
    assert_eq!(replacements_of(&api, &original).len(), 1);
    assert!(!gated(&replacements_of(&api, &original)[0]));
    let requeued = api.list("Event").iter().filter(|e| e["reason"] == "Requeued").count();
    assert_eq!(requeued, 1, "one release: the other replica's patch found it done");
}

#[tokio::test]
async fn a_replica_standing_by_steps_in_only_for_what_the_leader_has_left_undone() {
    use coloc_extender::requeue::controller::STANDBY_AFTER;
    let api = cluster().await;
    let standby = replica(&api).await;
    let original = uid_of(&api, VICTIM);
    evict(&api, VICTIM).await;
    assert!(eventually(|| standby.cell.load().unwrap().pod_by_uid(&original).is_none()).await);
    // The leader is down (restarting, or it lost touch): at first the standby only notes
    // what the plan asks for.
    assert_eq!(standby.pass(false).await, 0, "no write while the leader may still act");
    assert!(replacements_of(&api, &original).is_empty());
    tokio::time::sleep(STANDBY_AFTER).await;
    assert_eq!(standby.pass(false).await, 1, "the copy, once it is overdue");
    assert!(eventually(|| standby.cell.load().unwrap().replacements().count() == 1).await);
    assert_eq!(standby.pass(false).await, 0, "its release is newly asked for");
    tokio::time::sleep(STANDBY_AFTER).await;
    assert_eq!(standby.pass(false).await, 1);
    let stored = replacements_of(&api, &original);
    assert_eq!(stored.len(), 1);
    assert!(!gated(&stored[0]), "and its release, overdue in turn");
    // Being said is the leader's alone: the standby wrote the Requeued Event of its release
    // only (no Warning of its own).
    let reasons: Vec<String> = api.list("Event").iter().map(|e| e["reason"].as_str().unwrap().to_string()).collect();
    assert_eq!(reasons, ["Requeued"]);
}

#[tokio::test]
async fn a_pod_of_the_same_name_that_is_not_our_copy_is_never_taken_for_one() {
    let api = cluster().await;
    let r = replica(&api).await;
    let original = uid_of(&api, VICTIM);
    let name = {
        let pod = api.get("Pod", "batch", VICTIM).unwrap();
        let model = serde_json::from_value::<coloc_extender::wire::k8s::Pod>(pod).unwrap().into_model().unwrap();
        coloc_extender::model::marks::replacement_name(&model)
    };
    let mut stranger = api.get("Pod", "batch", VICTIM).unwrap();
    stranger["metadata"]["name"] = json!(name);
    stranger["metadata"]["uid"] = Value::Null;
    stranger["metadata"]["annotations"] = json!({FROM_UID: "someone-else"});
    stranger["spec"]["nodeName"] = Value::Null;
    api.apply(stranger);
    api.fail("create", "Pod", 409, u32::MAX);
    evict(&api, VICTIM).await;
    assert!(eventually(|| r.cell.load().unwrap().pod_by_uid(&original).is_none()).await);
    r.settle().await;
    assert!(replacements_of(&api, &original).is_empty(), "the stranger is not counted as the copy");
}

#[tokio::test]
async fn a_copy_refused_for_good_is_given_up_visibly() {
    let api = cluster().await;
    let r = replica(&api).await;
    let original = uid_of(&api, VICTIM);
    api.fail("create", "Pod", 403, u32::MAX);
    evict(&api, VICTIM).await;
    assert!(eventually(|| r.cell.load().unwrap().pod_by_uid(&original).is_none()).await);
    r.settle().await;
    let warnings: Vec<Value> = api.list("Event").into_iter().filter(|e| e["reason"] == "RequeueGivenUp").collect();
    assert_eq!(warnings.len(), 1, "{:?}", api.list("Event"));
    assert_eq!(warnings[0]["type"], "Warning");
    let creates = api.count("create", "Pod");
    r.settle().await;
    assert_eq!(api.count("create", "Pod"), creates, "given up: never tried again");
}

#[tokio::test]
async fn while_copies_are_forbidden_a_bare_victim_is_only_a_last_resort_and_says_so() {
    let api = cluster().await;
    let r = replica(&api).await;
    let original = uid_of(&api, "hostport-batch");
    let (_, answer) = preempt(&r).await;
    assert_eq!(victims(&answer), std::slice::from_ref(&original), "{answer}");
    // Another bare pod's copy is refused as forbidden (RBAC taken away, say).
    api.fail("create", "Pod", 403, u32::MAX);
    let mut other = api.get("Pod", "batch", VICTIM).unwrap();
    other["metadata"]["name"] = json!("other-batch");
    other["metadata"]["uid"] = Value::Null;
    other["spec"]["nodeName"] = json!("node-gpu2");
    api.apply(other);
    assert!(eventually(|| r.cell.load().unwrap().pod("batch/other-batch").is_some()).await);
    evict(&api, "other-batch").await;
    assert!(eventually(|| r.cell.load().unwrap().evictions().len() == 1).await);
    r.reconcile().await;
    assert!(!r.requeuer.availability.copies_possible());
    // online-hostport's only way is the bare pod holding its port: taken, as a last
    // resort, and the line says copies cannot be stored now.
    let (status, answer) = preempt(&r).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(victims(&answer), std::slice::from_ref(&original), "{answer}");
    let decided = r.state.decisions.for_pod("online/online-hostport");
    let line = decided.last().unwrap().reasons.iter().find(|l| l.code == "last_resort").cloned();
    assert!(line.is_some_and(|l| l.detail.contains("requeue is off or cannot store copies")), "{decided:?}");
}

#[tokio::test]
async fn a_copy_stored_ahead_of_an_eviction_that_never_came_is_deleted() {
    // An earlier release stored copies before answering; kube-scheduler chose otherwise.
    let api = cluster().await;
    let original = uid_of(&api, VICTIM);
    let mut early = api.get("Pod", "batch", VICTIM).unwrap();
    early["metadata"]["name"] = json!("free-batch-rq-0000000001");
    early["metadata"]["uid"] = Value::Null;
    early["metadata"]["annotations"] = json!({FROM_UID: original});
    early["spec"]["nodeName"] = Value::Null;
    early["spec"]["schedulingGates"] = json!([{"name": GATE}]);
    api.apply(early);
    let r = replica(&api).await;
    r.settle().await;
    assert!(replacements_of(&api, &original).is_empty(), "deleted");
    assert!(api.get("Pod", "batch", VICTIM).is_some(), "the original is untouched");
}

// ---- only what it recorded, bounded, never silently -----------------------------------------

/// kube-scheduler's mark, as a pod's status carries it.
fn marked_status() -> Value {
    json!({"conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]})
}

/// Warning Events of `reason`, with their notes.
fn warnings(api: &FakeApi, reason: &str) -> Vec<String> {
    api.list("Event")
        .into_iter()
        .filter(|e| e["reason"] == reason && e["type"] == "Warning")
        .map(|e| {
            format!(
                "{} {}",
                e["regarding"]["name"].as_str().unwrap_or_default(),
                e["note"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

/// A gated "copy" of no original, as whoever holds the requeue identity could make one.
fn forged(api: &FakeApi, name: &str, created: jiff::Timestamp) -> Value {
    let mut p = api.get("Pod", "batch", VICTIM).unwrap();
    p["metadata"]["name"] = json!(name);
    p["metadata"]["uid"] = Value::Null;
    p["metadata"]["creationTimestamp"] = json!(created.to_string());
    forged::forged_copy(p, "no-such-pod", None, "admin")
}

#[tokio::test]
async fn a_gated_copy_of_no_recorded_eviction_is_never_released_said_and_deleted_after_the_bound() {
    let api = cluster().await;
    let r = replica(&api).await;
    let now = jiff::Timestamp::now();
    let old =
        jiff::Timestamp::from_second(now.as_second() - coloc_extender::requeue::plan::UNRECORDED_AFTER - 1).unwrap();
    api.apply(forged(&api, "fresh-rq-0000000001", now));
    api.apply(forged(&api, "old-rq-0000000002", old));
    assert!(eventually(|| r.cell.load().unwrap().replacements().count() == 2).await);
    r.settle().await;
    let fresh = api.get("Pod", "batch", "fresh-rq-0000000001").expect("not deleted before the bound");
    assert!(gated(&fresh), "never released: {fresh}");
    assert!(api.get("Pod", "batch", "old-rq-0000000002").is_none(), "deleted once the bound has passed");
    let said = warnings(&api, "RequeueCopyNotRecorded");
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(said.iter().all(|n| n.contains("no replica of this extender recorded")), "{said:?}");
    assert!(api.list("Event").iter().all(|e| e["reason"] != "Requeued"));
    r.settle().await;
    assert!(gated(&api.get("Pod", "batch", "fresh-rq-0000000001").unwrap()));
    assert_eq!(warnings(&api, "RequeueCopyNotRecorded").len(), 2, "said once");
}

#[tokio::test]
async fn a_bare_pod_beyond_baseline_is_not_copied_and_its_loss_is_said() {
    let api = cluster().await;
    let r = replica(&api).await;
    let original = uid_of(&api, "hostport-batch");
    evict(&api, "hostport-batch").await;
    assert!(eventually(|| r.cell.load().unwrap().pod_by_uid(&original).is_none()).await);
    r.settle().await;
    assert!(replacements_of(&api, &original).is_empty());
    let said = warnings(&api, "RequeueGivenUp");
    assert!(matches!(&said[..], [n] if n.contains("a hostPort")), "{said:?}");
}

/// A pod under `name` that is not a copy of anything.
fn stranger(api: &FakeApi, name: &str) -> Value {
    let mut p = api.get("Pod", "batch", VICTIM).unwrap();
    p["metadata"]["name"] = json!(name);
    p["metadata"]["uid"] = Value::Null;
    p["spec"]["nodeName"] = Value::Null;
    p
}

fn names_of(api: &FakeApi, name: &str) -> Vec<String> {
    let pod = api.get("Pod", "batch", name).unwrap();
    let model = serde_json::from_value::<coloc_extender::wire::k8s::Pod>(pod).unwrap().into_model().unwrap();
    coloc_extender::model::marks::replacement_names(&model)
}

#[tokio::test]
async fn a_pod_holding_the_copys_name_does_not_stop_the_copy_and_all_its_names_taken_is_said() {
    let api = cluster().await;
    let r = replica(&api).await;
    let original = uid_of(&api, VICTIM);
    let names = names_of(&api, VICTIM);
    api.apply(stranger(&api, &names[0]));
    evict(&api, VICTIM).await;
    assert!(eventually(|| r.cell.load().unwrap().pod_by_uid(&original).is_none()).await);
    r.settle().await;
    let stored = replacements_of(&api, &original);
    assert_eq!(stored.iter().map(|c| c["metadata"]["name"].clone()).collect::<Vec<_>>(), [json!(names[1])]);
    assert!(!gated(&stored[0]), "released under its next name");

    // Every name held: the loss is said.
    let api = cluster().await;
    let r = replica(&api).await;
    let original = uid_of(&api, VICTIM);
    for name in names_of(&api, VICTIM) {
        api.apply(stranger(&api, &name));
    }
    evict(&api, VICTIM).await;
    assert!(eventually(|| r.cell.load().unwrap().pod_by_uid(&original).is_none()).await);
    r.settle().await;
    assert!(replacements_of(&api, &original).is_empty());
    let said = warnings(&api, "RequeueGivenUp");
    assert!(matches!(&said[..], [n] if n.contains("is held by a pod that is not its copy")), "{said:?}");
}

#[tokio::test]
async fn a_create_that_finds_its_name_taken_by_a_stranger_takes_the_next() {
    // The view has not seen the stranger yet: the API server's 409 says it.
    let api = cluster().await;
    let r = replica(&api).await;
    let json = api.get("Pod", "batch", VICTIM).unwrap();
    let model = serde_json::from_value::<coloc_extender::wire::k8s::Pod>(json.clone()).unwrap().into_model().unwrap();
    let names = coloc_extender::model::marks::replacement_names(&model);
    api.apply(stranger(&api, &names[0]));
    let intent = coloc_extender::model::RequeueIntent::for_victim(&model, "node-gpu2", "");
    r.requeuer.store_copy(&json, &intent).await.unwrap();
    assert_eq!(replacements_of(&api, &model.uid)[0]["metadata"]["name"], json!(names[1]));
    r.requeuer.store_copy(&json, &intent).await.unwrap();
    assert_eq!(replacements_of(&api, &model.uid).len(), 1, "found again under its next name");
}

#[tokio::test]
async fn a_pod_preempted_for_its_own_namespaces_pod_keeps_its_requeue_count() {
    let api = cluster().await;
    let r = replica(&api).await;
    let original = uid_of(&api, VICTIM);
    // Its tenant's own online pod, nominated to its node by kube-scheduler.
    let mut mine = stranger(&api, "mine");
    mine["spec"]["priorityClassName"] = json!("online-prod");
    mine["status"] = json!({"phase": "Pending", "nominatedNodeName": "node-gpu2"});
    api.apply(mine);
    assert!(eventually(|| !r.cell.load().unwrap().nominated_on("node-gpu2").is_empty()).await);
    evict(&api, VICTIM).await;
    assert!(eventually(|| r.cell.load().unwrap().pod_by_uid(&original).is_none()).await);
    r.settle().await;
    let stored = replacements_of(&api, &original);
    assert_eq!(stored[0]["metadata"]["annotations"][coloc_extender::model::marks::ATTEMPT], "0", "not counted");
}

/// `VICTIM` with an annotation of `size` bytes.
fn large(api: &FakeApi, name: &str, size: usize) -> Value {
    let mut p = api.get("Pod", "batch", VICTIM).unwrap();
    p["metadata"]["name"] = json!(name);
    p["metadata"]["uid"] = Value::Null;
    p["metadata"]["annotations"] = json!({"example.com/blob": "x".repeat(size)});
    p
}

/// GETs of the pod `name` (the originals a copy is read from where its bytes were not kept).
fn reads_of(api: &FakeApi, name: &str) -> usize {
    let path = format!("/api/v1/namespaces/batch/pods/{name}");
    api.requests().iter().filter(|(m, p, _)| m == "GET" && *p == path).count()
}

#[tokio::test]
async fn a_pod_too_large_to_keep_is_copied_from_the_api_server_or_its_loss_is_said() {
    let per_pod = coloc_extender::cluster::kept::PER_POD;
    let api = cluster().await;
    let r = replica(&api).await;
    // Held terminating: read from the API server at copy time.
    api.apply(large(&api, "held", per_pod + 1));
    let held = uid_of(&api, "held");
    evict_gracefully(&api, "held").await;
    assert!(eventually(|| r.cell.load().unwrap().evictions().get(&held).is_some()).await);
    assert!(r.cell.load().unwrap().last_state(&held).is_none(), "not kept");
    r.settle().await;
    assert_eq!(replacements_of(&api, &held).len(), 1);
    assert_eq!(reads_of(&api, "held"), 1, "copied from a GET");
    // Gone at the delete (grace 0): nothing left to copy from.
    api.apply(large(&api, "gone", per_pod + 1));
    let gone = uid_of(&api, "gone");
    assert!(eventually(|| r.cell.load().unwrap().pod_by_uid(&gone).is_some()).await);
    evict(&api, "gone").await;
    assert!(eventually(|| r.cell.load().unwrap().evictions().get(&gone).is_some()).await);
    r.settle().await;
    assert!(replacements_of(&api, &gone).is_empty());
    let said = warnings(&api, "RequeueGivenUp");
    assert!(matches!(&said[..], [n] if n.starts_with("gone ") && n.contains("state_not_kept")), "{said:?}");
}

/// The view keeps of a pod only the annotations decisions read; a copy is built from the
/// pod's whole JSON (its kept bytes, or a read of it), so it carries every annotation.
#[tokio::test]
async fn a_copy_carries_every_annotation_its_original_had_though_the_view_keeps_none_of_them() {
    let per_pod = coloc_extender::cluster::kept::PER_POD;
    let api = cluster().await;
    let r = replica(&api).await;
    let in_view = |uid: &str| r.cell.load().unwrap().pod_by_uid(uid).cloned();
    let mut originals = Vec::new();
    // Gone at the delete (grace 0), copied from the bytes the view kept; held terminating
    // and too large to keep, copied from a read of it.
    for (name, size) in [("kept", 200 * 1024), ("read", per_pod + 1)] {
        let mut p = large(&api, name, size);
        p["metadata"]["annotations"]["team"] = json!("ml");
        api.apply(p);
        let uid = uid_of(&api, name);
        assert!(eventually(|| in_view(&uid).is_some()).await);
        assert!(in_view(&uid).unwrap().annotations.is_empty(), "the view keeps none of {name}'s");
        originals.push((name, size, uid));
    }
    evict(&api, "kept").await;
    evict_gracefully(&api, "read").await;
    assert!(eventually(|| r.cell.load().unwrap().evictions().len() == 2).await);
    let kept = |uid: &str| r.cell.load().unwrap().last_state(uid).is_some();
    assert!(kept(&originals[0].2) && !kept(&originals[1].2), "kept's bytes, the only copy of it left");
    r.settle().await;
    for (name, size, uid) in originals {
        let stored = replacements_of(&api, &uid);
        assert_eq!(stored.len(), 1, "{name} copied");
        let annotations = &stored[0]["metadata"]["annotations"];
        assert_eq!(annotations["team"], "ml", "{name}");
        assert_eq!(annotations["example.com/blob"].as_str().map(str::len), Some(size), "{name}");
        // Released once its original is gone: its spec's digest is the one the view took
        // of the original's whole JSON.
        assert_eq!(gated(&stored[0]), name == "read", "{name}");
    }
    assert_eq!(reads_of(&api, "read"), 1, "copied from a read");
}

#[tokio::test]
async fn a_tenants_many_large_pods_marked_and_held_keep_the_kept_bytes_under_their_bound() {
    use coloc_extender::cluster::kept::{PER_POD, TOTAL};
    let api = cluster().await;
    let r = replica(&api).await;
    let size = PER_POD - 8 * 1024;
    let n = TOTAL / size + 16;
    let at = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second() + 30).unwrap();
    for i in 0..n {
        let mut p = large(&api, &format!("hostile-{i}"), size);
        p["metadata"]["finalizers"] = json!(["example.com/hold"]);
        p["metadata"]["deletionTimestamp"] = json!(at.to_string());
        p["status"] = marked_status();
        api.apply(p);
    }
    let recorded = |k: usize| r.cell.read_latest(|v| v.evictions().len() == k).unwrap_or(false);
    let mut synced = false;
    for _ in 0..600 {
        if recorded(n) {
            synced = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(synced, "the view never recorded the {n} evictions");
    let (bytes, kept) = r.cell.read_latest(|v| (v.kept_states().bytes(), v.kept_states().len())).unwrap();
    assert!(bytes <= TOTAL && kept < n, "{bytes} bytes kept for {kept} of {n} pods");
    // An ordinary victim now: kept (the largest go first), and copied like every other.
    evict_gracefully(&api, VICTIM).await;
    let victim = uid_of(&api, VICTIM);
    assert!(eventually(|| recorded(n + 1)).await);
    assert!(r.cell.read_latest(|v| v.last_state(&victim).is_some()).unwrap());
    r.reconcile().await;
    assert!(eventually(|| r.cell.load().unwrap().replacements().count() == n + 1).await);
    r.settle().await;
    let copies = api.list("Pod").iter().filter(|p| gated(p)).count();
    let from_get: usize = (0..n).map(|i| reads_of(&api, &format!("hostile-{i}"))).sum();
    assert_eq!(copies, n + 1, "every eviction copied");
    assert_eq!(from_get, n - kept, "each pod whose bytes were not kept is copied from one GET");
    assert_eq!(reads_of(&api, VICTIM), 0);
    let after = r.cell.read_latest(|v| v.kept_states().bytes()).unwrap();
    println!(
        "{n} pods of {} KiB marked and held: {bytes} bytes kept ({kept} pods, bound {TOTAL}); {n} + 1 copies, {from_get} from a GET; {after} bytes kept once copied",
        (size + 2048) / 1024
    );
    assert_eq!(after, 0, "copied: nothing left to keep");
}

// ---- guards an earlier release left: finished, never added ---------------------------------

/// Puts an earlier release's guard (finalizer and label) on `name`.
fn guard_as_an_earlier_release_did(api: &FakeApi, name: &str) {
    let mut pod = api.get("Pod", "batch", name).unwrap();
    pod["metadata"]["finalizers"] = json!([GUARD]);
    pod["metadata"]["labels"][GUARD] = json!("true");
    api.apply(pod);
}

fn guarded(api: &FakeApi, name: &str) -> bool {
    api.get("Pod", "batch", name).is_some_and(|p| {
        p["metadata"]["finalizers"].as_array().is_some_and(|f| f.iter().any(|f| f == GUARD))
            || p["metadata"]["labels"].get(GUARD).is_some()
    })
}

fn guards_left(api: &FakeApi) -> usize {
    api.list("Pod")
        .iter()
        .filter(|p| {
            p["metadata"]["labels"].get(GUARD).is_some()
                || p["metadata"]["finalizers"].as_array().is_some_and(|f| f.iter().any(|f| f == GUARD))
        })
        .count()
}

/// Index in the fake's request log of the last request `method path`.
fn last_request(api: &FakeApi, method: &str, path: &str) -> Option<usize> {
    api.requests().iter().rposition(|(m, p, _)| m == method && p == path)
}

#[tokio::test]
async fn no_guard_is_ever_added() {
    let tries = Tries::default();
    let api = cluster().await;
    let r = replica(&api).await;
    r.requeuer.finish_guards_once(&tries).await.unwrap();
    let (status, answer) = preempt(&r).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!victims(&answer).is_empty(), "{answer}");
    assert_eq!(guards_left(&api), 0);
    assert_eq!(api.count("patch", "Pod"), 0, "nothing patched on a running pod");
}

#[tokio::test]
async fn a_guard_left_on_a_running_pod_is_taken_off_and_the_pod_left_running() {
    let tries = Tries::default();
    let api = cluster().await;
    guard_as_an_earlier_release_did(&api, "hostport-batch");
    let r = replica(&api).await;
    let report = r.requeuer.finish_guards_once(&tries).await.unwrap();
    assert_eq!((report.found, report.unguarded), (1, 1), "{report:?}");
    assert_eq!(guards_left(&api), 0);
    assert!(api.get("Pod", "batch", "hostport-batch").is_some());
}

#[tokio::test]
async fn a_preempted_pod_guarded_by_an_earlier_release_is_requeued_before_its_guard_goes() {
    let tries = Tries::default();
    let api = cluster().await;
    guard_as_an_earlier_release_did(&api, VICTIM);
    let original = uid_of(&api, VICTIM);
    evict(&api, VICTIM).await;
    assert!(guarded(&api, VICTIM), "held, terminating, by the old guard");
    let r = replica(&api).await;
    let report = r.requeuer.finish_guards_once(&tries).await.unwrap();
    assert_eq!(report.requeued, 1, "{report:?}");
    assert!(api.get("Pod", "batch", VICTIM).is_none(), "let go once its replacement is stored");
    let stored = replacements_of(&api, &original);
    assert_eq!(stored.len(), 1);
    assert!(
        stored[0]["metadata"]["labels"].get(GUARD).is_none()
            && stored[0]["metadata"].get("finalizers").is_none_or(Value::is_null),
        "the copy is not born guarded"
    );
    let created = last_request(&api, "POST", "/api/v1/namespaces/batch/pods").unwrap();
    let unguarded = last_request(&api, "PATCH", &format!("/api/v1/namespaces/batch/pods/{VICTIM}")).unwrap();
    assert!(created < unguarded, "the replacement is stored before the guard comes off");
    assert!(eventually(|| r.cell.load().unwrap().pod_by_uid(&original).is_none()).await);
    r.settle().await;
    assert!(!gated(&replacements_of(&api, &original)[0]), "released: its original was preempted");
}

#[tokio::test]
async fn a_preempted_pod_beyond_baseline_guarded_by_an_earlier_release_is_given_up_at_once() {
    let tries = Tries::default();
    let api = cluster().await;
    guard_as_an_earlier_release_did(&api, "hostport-batch");
    let original = uid_of(&api, "hostport-batch");
    evict(&api, "hostport-batch").await;
    let r = replica(&api).await;
    let report = r.requeuer.finish_guards_once(&tries).await.unwrap();
    assert_eq!((report.given_up, report.left), (1, 0), "{report:?}");
    assert_eq!(api.count("create", "Pod"), 0, "no copy tried: admission refuses one with a hostPort");
    assert!(replacements_of(&api, &original).is_empty());
    assert!(api.get("Pod", "batch", "hostport-batch").is_none(), "the guard is gone, and with it the pod");
    let said = warnings(&api, "RequeueGivenUp");
    assert!(matches!(&said[..], [n] if n.contains("a hostPort") && n.contains("lost")), "{said:?}");
}

#[tokio::test]
async fn a_guard_is_not_removed_from_a_pod_that_changed_since_it_was_read() {
    let tries = Tries::default();
    let api = cluster().await;
    guard_as_an_earlier_release_did(&api, VICTIM);
    let r = replica(&api).await;
    // Read, then kube-scheduler marks it preempted before the patch lands.
    let pods: Api<Pod> = Api::namespaced(api.client(), "batch");
    let read = serde_json::to_value(pods.get(VICTIM).await.unwrap()).unwrap();
    let stale = serde_json::from_value::<coloc_extender::wire::k8s::Pod>(read.clone()).unwrap().into_model().unwrap();
    evict(&api, VICTIM).await;
    assert!(!r.requeuer.remove_guard(&stale, &read, "test").await, "refused: the pod changed");
    assert!(guarded(&api, VICTIM), "still held: its copy is not stored yet");
    r.requeuer.finish_guards_once(&tries).await.unwrap();
    assert_eq!(replacements_of(&api, &stale.uid).len(), 1, "looked at again: requeued");
}

#[tokio::test]
async fn a_copy_refused_for_good_is_given_up_visibly_and_holds_nothing() {
    let tries = Tries::default();
    let api = cluster().await;
    guard_as_an_earlier_release_did(&api, VICTIM);
    evict(&api, VICTIM).await;
    api.fail("create", "Pod", 403, u32::MAX);
    let r = replica(&api).await;
    for _ in 1..coloc_extender::requeue::give_up::MAX_TRIES {
        r.requeuer.finish_guards_once(&tries).await.unwrap();
    }
    let report = r.requeuer.finish_guards_once(&tries).await.unwrap();
    assert_eq!(report.given_up, 1, "{report:?}");
    assert!(api.get("Pod", "batch", VICTIM).is_none(), "the guard is gone, and with it the pod");
    let warnings: Vec<Value> = api.list("Event").into_iter().filter(|e| e["reason"] == "RequeueGivenUp").collect();
    assert_eq!(warnings.len(), 1, "{:?}", api.list("Event"));
    assert_eq!(warnings[0]["type"], "Warning");
}

#[tokio::test]
async fn a_copy_that_keeps_failing_is_given_up_after_a_bound() {
    let tries = Tries::default();
    let api = cluster().await;
    guard_as_an_earlier_release_did(&api, VICTIM);
    evict(&api, VICTIM).await;
    api.fail("create", "Pod", 500, u32::MAX);
    let r = replica(&api).await;
    for _ in 1..coloc_extender::requeue::give_up::MAX_TRIES {
        assert_eq!(r.requeuer.finish_guards_once(&tries).await.unwrap().left, 1, "a passing error: retried");
        assert!(guarded(&api, VICTIM));
    }
    assert_eq!(r.requeuer.finish_guards_once(&tries).await.unwrap().given_up, 1);
    assert_eq!(guards_left(&api), 0);
}

#[tokio::test]
async fn a_guarded_pod_deleted_by_its_owner_is_let_go_without_a_replacement() {
    let tries = Tries::default();
    let api = cluster().await;
    guard_as_an_earlier_release_did(&api, "hostport-batch");
    let original = uid_of(&api, "hostport-batch");
    let pods: Api<Pod> = Api::namespaced(api.client(), "batch");
    pods.delete("hostport-batch", &DeleteParams::default()).await.unwrap();
    let r = replica(&api).await;
    r.requeuer.finish_guards_once(&tries).await.unwrap();
    assert!(api.get("Pod", "batch", "hostport-batch").is_none());
    assert!(replacements_of(&api, &original).is_empty());
}

#[tokio::test]
async fn two_replicas_finishing_the_same_guard_store_one_replacement() {
    let tries = Tries::default();
    let tries_b = Tries::default();
    let api = cluster().await;
    guard_as_an_earlier_release_did(&api, VICTIM);
    let original = uid_of(&api, VICTIM);
    evict(&api, VICTIM).await;
    let (a, b) = (replica(&api).await, replica(&api).await);
    let (ra, rb) = tokio::join!(a.requeuer.finish_guards_once(&tries), b.requeuer.finish_guards_once(&tries_b));
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert!(ra.given_up + rb.given_up == 0, "{ra:?} {rb:?}");
    a.requeuer.finish_guards_once(&tries).await.unwrap();
    assert!(api.get("Pod", "batch", VICTIM).is_none());
    assert_eq!(replacements_of(&api, &original).len(), 1);
}

/// The decision workers `serve` starts beside the router.
fn decision_workers() -> std::sync::Arc<coloc_extender::workers::Workers> {
    std::sync::Arc::new(coloc_extender::workers::Workers::new(1).unwrap())
}
