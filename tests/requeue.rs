//! Requeue end to end against a loopback fake API server: the cluster of the recorded
//! scenario, the cluster view from its watches, preempt through the real router, and the
//! reconcile loop. Each test is the smallest story that shows one guarantee.

mod fake_api;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use coloc_extender::cluster::watch::{self, Freshness};
use coloc_extender::cluster::ViewCell;
use coloc_extender::http::{router, AppState, ViewSource};
use coloc_extender::policy::Policy;
use coloc_extender::requeue::kube::Requeuer;
use coloc_extender::requeue::{FROM_UID, GATE, GUARD, PREEMPTED_BY};
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
/// the only room is held by the bare pod `batch/hostport-batch` on node-gpu1.
async fn cluster() -> FakeApi {
    let api = FakeApi::start().await;
    let snap: Value = serde_json::from_slice(&fixture("0043-preempt.snapshot.json")).unwrap();
    api.seed(snap["items"].as_array().unwrap());
    api
}

/// One extender replica: its own view from the fake API server's watches, and requeue on.
struct Replica {
    cell: Arc<ViewCell>,
    state: AppState,
    requeuer: Arc<Requeuer>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Replica {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

async fn replica(api: &FakeApi) -> Replica {
    let policy = Policy::builtin_default();
    let cell = Arc::new(ViewCell::default());
    let mut state = AppState::new(policy.clone(), cell.clone(), ViewSource::Kubernetes);
    let watches = tokio::spawn(watch::run(
        api.client(),
        cell.clone(),
        Arc::new(ArcSwap::from_pointee(policy)),
        Arc::new(Freshness::default()),
        Duration::from_millis(20),
    ));
    let requeuer = Arc::new(Requeuer::new(api.client(), Some("test".into())));
    state.requeuer = Some(requeuer.clone());
    assert!(eventually(|| cell.is_ready()).await, "the view never synced");
    Replica { cell, state, requeuer, tasks: vec![watches] }
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
    let resp = router(r.state.clone(), "").oneshot(req).await.unwrap();
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

#[tokio::test]
async fn a_bare_victim_is_answered_only_after_its_gated_replacement_is_stored() {
    let api = cluster().await;
    let r = replica(&api).await;
    let original = uid_of(&api, "hostport-batch");
    let (status, answer) = preempt(&r).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(victims(&answer), std::slice::from_ref(&original), "{answer}");
    let stored = replacements_of(&api, &original);
    assert_eq!(stored.len(), 1, "the replacement exists when the answer arrives");
    let rep = &stored[0];
    assert!(gated(rep), "held back while the original runs: {rep}");
    assert!(rep["spec"].get("nodeName").is_none_or(Value::is_null));
    assert_eq!(
        rep["metadata"]["labels"]["app"],
        api.get("Pod", "batch", "hostport-batch").unwrap()["metadata"]["labels"]["app"]
    );
}

#[tokio::test]
async fn the_gate_is_removed_once_the_original_is_deleted() {
    let api = cluster().await;
    let r = replica(&api).await;
    let original = uid_of(&api, "hostport-batch");
    preempt(&r).await;
    // Not yet: the original still runs.
    r.requeuer.reconcile_once(&r.cell, 60).await;
    assert!(gated(&replacements_of(&api, &original)[0]));
    // kube-scheduler evicts it.
    evict(&api, "hostport-batch").await;
    assert!(eventually(|| r.cell.load().unwrap().pod_by_uid(&original).is_none()).await);
    r.requeuer.reconcile_once(&r.cell, 60).await;
    let rep = &replacements_of(&api, &original)[0];
    assert!(!gated(rep), "released: {rep}");
    assert_eq!(api.count("create", "Event"), 1, "one Event, on the replacement");
    let notes: Vec<String> =
        api.list("Event").iter().map(|e| e["note"].as_str().unwrap_or_default().to_string()).collect();
    let want = format!(
        "requeued from batch/hostport-batch ({original}) after preemption by online/online-hostport, attempt 1"
    );
    assert_eq!(notes, [want]);
}

#[tokio::test]
async fn a_victim_whose_replacement_cannot_be_stored_is_spared() {
    let api = cluster().await;
    let r = replica(&api).await;
    api.fail("create", "Pod", 403, u32::MAX);
    let (status, answer) = preempt(&r).await;
    assert_eq!(status, StatusCode::OK);
    assert!(victims(&answer).is_empty(), "nothing else can make room, so no candidate: {answer}");
    assert!(replacements_of(&api, &uid_of(&api, "hostport-batch")).is_empty());
}

#[tokio::test]
async fn a_slow_api_server_spares_the_victim_within_the_request_budget() {
    let api = cluster().await;
    let mut r = replica(&api).await;
    r.state.limits.requeue_budget = Duration::from_millis(300);
    api.delay("create", "Pod", Duration::from_secs(3));
    let started = std::time::Instant::now();
    let (status, answer) = preempt(&r).await;
    assert_eq!(status, StatusCode::OK);
    assert!(victims(&answer).is_empty(), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(2), "answered within the budget, not after the API server");
}

#[tokio::test]
async fn a_restart_between_eviction_and_release_still_releases() {
    let api = cluster().await;
    let original = uid_of(&api, "hostport-batch");
    {
        let first = replica(&api).await;
        preempt(&first).await;
    } // the replica goes away before the eviction
    api.remove("Pod", "batch", "hostport-batch");
    let second = replica(&api).await;
    second.requeuer.reconcile_once(&second.cell, 60).await;
    assert!(!gated(&replacements_of(&api, &original)[0]), "the new replica reconciles from the view");
}

#[tokio::test]
async fn a_replacement_kube_never_acted_on_is_cleaned_up() {
    let api = cluster().await;
    let r = replica(&api).await;
    let original = uid_of(&api, "hostport-batch");
    preempt(&r).await;
    assert_eq!(replacements_of(&api, &original).len(), 1);
    assert!(eventually(|| r.cell.load().unwrap().replacements().count() == 1).await);
    // kube-scheduler chose otherwise: the original keeps running past the deadline.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    r.requeuer.reconcile_once(&r.cell, 0).await;
    assert!(replacements_of(&api, &original).is_empty(), "the orphan is deleted");
    assert!(api.get("Pod", "batch", "hostport-batch").is_some(), "the original is untouched");
}

#[tokio::test]
async fn two_replicas_racing_store_one_replacement() {
    let api = cluster().await;
    let (a, b) = (replica(&api).await, replica(&api).await);
    let original = uid_of(&api, "hostport-batch");
    let ((sa, va), (sb, vb)) = tokio::join!(preempt(&a), preempt(&b));
    assert_eq!((sa, sb), (StatusCode::OK, StatusCode::OK));
    assert_eq!(victims(&va), std::slice::from_ref(&original));
    assert_eq!(
        victims(&vb),
        std::slice::from_ref(&original),
        "the second finds the first one's replacement and answers too"
    );
    assert_eq!(replacements_of(&api, &original).len(), 1);
    // Both release: one patch wins, the other is a no-op.
    evict(&api, "hostport-batch").await;
    assert!(
        eventually(|| a.cell.load().unwrap().pod_by_uid(&original).is_none()
            && b.cell.load().unwrap().pod_by_uid(&original).is_none())
        .await
    );
    tokio::join!(a.requeuer.reconcile_once(&a.cell, 60), b.requeuer.reconcile_once(&b.cell, 60));
    assert!(!gated(&replacements_of(&api, &original)[0]));
}

#[tokio::test]
async fn a_pod_of_the_same_name_that_is_not_our_replacement_is_never_taken_for_one() {
    let api = cluster().await;
    let r = replica(&api).await;
    let original = uid_of(&api, "hostport-batch");
    // Learn the name, then plant a stranger under it.
    preempt(&r).await;
    let mut stranger = replacements_of(&api, &original).remove(0);
    let name = stranger["metadata"]["name"].as_str().unwrap().to_string();
    api.remove("Pod", "batch", &name);
    stranger["metadata"]["annotations"][FROM_UID] = Value::from("someone-else");
    stranger["metadata"]["uid"] = Value::Null;
    api.apply(stranger);
    let (_, answer) = preempt(&r).await;
    assert!(victims(&answer).is_empty(), "{answer}");
}

#[tokio::test]
async fn no_bare_victim_is_ever_answered_without_a_stored_replacement() {
    // Whatever the API server does to creates (refuse, fail, succeed), every bare victim in
    // an answer has a stored replacement.
    let api = cluster().await;
    let r = replica(&api).await;
    let bare: Vec<String> = api
        .list("Pod")
        .iter()
        .filter(|p| p["metadata"]["ownerReferences"].as_array().is_none_or(|o| o.is_empty()))
        .map(|p| p["metadata"]["uid"].as_str().unwrap().to_string())
        .collect();
    let faults = [(403, 1), (500, 2), (409, 1), (422, 1), (500, u32::MAX), (0, 0)];
    let mut answered_bare = 0;
    for (status, times) in faults {
        for p in api.list("Pod") {
            if p["metadata"]["annotations"].get(FROM_UID).is_some() {
                api.remove("Pod", "batch", p["metadata"]["name"].as_str().unwrap());
            }
        }
        api.clear_faults();
        if status != 0 {
            api.fail("create", "Pod", status, times);
        }
        let (code, answer) = preempt(&r).await;
        assert_eq!(code, StatusCode::OK);
        for uid in victims(&answer).iter().filter(|u| bare.contains(u)) {
            assert_eq!(
                replacements_of(&api, uid).len(),
                1,
                "bare victim {uid} answered without a replacement (fault {status} x{times})"
            );
            answered_bare += 1;
        }
    }
    assert!(answered_bare > 0, "without faults the bare victim is answered");
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

/// What kube-scheduler does to a victim: the DisruptionTarget condition, then a delete.
async fn evict(api: &FakeApi, name: &str) {
    let pods: Api<Pod> = Api::namespaced(api.client(), "batch");
    let condition = json!({"status": {"conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(condition)).await.unwrap();
    pods.delete(name, &DeleteParams::default()).await.unwrap();
}

/// Index in the fake's request log of the last request `method path`.
fn last_request(api: &FakeApi, method: &str, path: &str) -> Option<usize> {
    api.requests().iter().rposition(|(m, p, _)| m == method && p == path)
}

#[tokio::test]
async fn no_guard_is_ever_added() {
    let api = cluster().await;
    let r = replica(&api).await;
    r.requeuer.finish_guards_once().await.unwrap();
    let (status, answer) = preempt(&r).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!victims(&answer).is_empty(), "{answer}");
    assert_eq!(guards_left(&api), 0);
    assert_eq!(api.count("patch", "Pod"), 0, "nothing patched on a running pod");
}

#[tokio::test]
async fn a_guard_left_on_a_running_pod_is_taken_off_and_the_pod_left_running() {
    let api = cluster().await;
    guard_as_an_earlier_release_did(&api, "hostport-batch");
    let r = replica(&api).await;
    let report = r.requeuer.finish_guards_once().await.unwrap();
    assert_eq!((report.found, report.unguarded), (1, 1), "{report:?}");
    assert_eq!(guards_left(&api), 0);
    assert!(api.get("Pod", "batch", "hostport-batch").is_some());
}

#[tokio::test]
async fn a_preempted_pod_guarded_by_an_earlier_release_is_requeued_before_its_guard_goes() {
    let api = cluster().await;
    guard_as_an_earlier_release_did(&api, "hostport-batch");
    let original = uid_of(&api, "hostport-batch");
    evict(&api, "hostport-batch").await;
    assert!(guarded(&api, "hostport-batch"), "held, terminating, by the old guard");
    let r = replica(&api).await;
    let report = r.requeuer.finish_guards_once().await.unwrap();
    assert_eq!(report.requeued, 1, "{report:?}");
    assert!(api.get("Pod", "batch", "hostport-batch").is_none(), "let go once its replacement is stored");
    let stored = replacements_of(&api, &original);
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0]["metadata"]["annotations"][PREEMPTED_BY], "unknown (preempted by kube-scheduler)");
    assert!(
        stored[0]["metadata"]["labels"].get(GUARD).is_none()
            && stored[0]["metadata"].get("finalizers").is_none_or(Value::is_null),
        "the copy is not born guarded"
    );
    let created = last_request(&api, "POST", "/api/v1/namespaces/batch/pods").unwrap();
    let unguarded = last_request(&api, "PATCH", "/api/v1/namespaces/batch/pods/hostport-batch").unwrap();
    assert!(created < unguarded, "the replacement is stored before the guard comes off");
    assert!(eventually(|| r.cell.load().unwrap().pod_by_uid(&original).is_none()).await);
    r.requeuer.reconcile_once(&r.cell, 60).await;
    assert!(!gated(&replacements_of(&api, &original)[0]), "released: its original was preempted");
}

#[tokio::test]
async fn a_guard_is_not_removed_from_a_pod_that_changed_since_it_was_read() {
    let api = cluster().await;
    guard_as_an_earlier_release_did(&api, "hostport-batch");
    let r = replica(&api).await;
    // Read, then kube-scheduler marks it preempted before the patch lands.
    let pods: Api<Pod> = Api::namespaced(api.client(), "batch");
    let read = serde_json::to_value(pods.get("hostport-batch").await.unwrap()).unwrap();
    let stale = serde_json::from_value::<coloc_extender::wire::k8s::Pod>(read.clone()).unwrap().into_model().unwrap();
    evict(&api, "hostport-batch").await;
    assert!(!r.requeuer.remove_guard(&stale, &read, "test").await, "refused: the pod changed");
    assert!(guarded(&api, "hostport-batch"), "still held: its copy is not stored yet");
    r.requeuer.finish_guards_once().await.unwrap();
    assert_eq!(replacements_of(&api, &stale.uid).len(), 1, "looked at again: requeued");
}

#[tokio::test]
async fn a_copy_refused_for_good_is_given_up_visibly_and_holds_nothing() {
    let api = cluster().await;
    guard_as_an_earlier_release_did(&api, "hostport-batch");
    evict(&api, "hostport-batch").await;
    api.fail("create", "Pod", 403, u32::MAX);
    let r = replica(&api).await;
    for _ in 1..coloc_extender::requeue::guard::MAX_TRIES {
        r.requeuer.finish_guards_once().await.unwrap();
    }
    let report = r.requeuer.finish_guards_once().await.unwrap();
    assert_eq!(report.given_up, 1, "{report:?}");
    assert!(api.get("Pod", "batch", "hostport-batch").is_none(), "the guard is gone, and with it the pod");
    let warnings: Vec<Value> = api.list("Event").into_iter().filter(|e| e["reason"] == "RequeueGivenUp").collect();
    assert_eq!(warnings.len(), 1, "{:?}", api.list("Event"));
    assert_eq!(warnings[0]["type"], "Warning");
}

#[tokio::test]
async fn a_copy_that_keeps_failing_is_given_up_after_a_bound() {
    let api = cluster().await;
    guard_as_an_earlier_release_did(&api, "hostport-batch");
    evict(&api, "hostport-batch").await;
    api.fail("create", "Pod", 500, u32::MAX);
    let r = replica(&api).await;
    for _ in 1..coloc_extender::requeue::guard::MAX_TRIES {
        assert_eq!(r.requeuer.finish_guards_once().await.unwrap().left, 1, "a passing error: retried");
        assert!(guarded(&api, "hostport-batch"));
    }
    assert_eq!(r.requeuer.finish_guards_once().await.unwrap().given_up, 1);
    assert_eq!(guards_left(&api), 0);
}

#[tokio::test]
async fn a_guarded_pod_deleted_by_its_owner_is_let_go_without_a_replacement() {
    let api = cluster().await;
    guard_as_an_earlier_release_did(&api, "hostport-batch");
    let original = uid_of(&api, "hostport-batch");
    let pods: Api<Pod> = Api::namespaced(api.client(), "batch");
    pods.delete("hostport-batch", &DeleteParams::default()).await.unwrap();
    let r = replica(&api).await;
    r.requeuer.finish_guards_once().await.unwrap();
    assert!(api.get("Pod", "batch", "hostport-batch").is_none());
    assert!(replacements_of(&api, &original).is_empty());
}

#[tokio::test]
async fn two_replicas_finishing_the_same_guard_store_one_replacement() {
    let api = cluster().await;
    guard_as_an_earlier_release_did(&api, "hostport-batch");
    let original = uid_of(&api, "hostport-batch");
    evict(&api, "hostport-batch").await;
    let (a, b) = (replica(&api).await, replica(&api).await);
    let (ra, rb) = tokio::join!(a.requeuer.finish_guards_once(), b.requeuer.finish_guards_once());
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert!(ra.given_up + rb.given_up == 0, "{ra:?} {rb:?}");
    a.requeuer.finish_guards_once().await.unwrap();
    assert!(api.get("Pod", "batch", "hostport-batch").is_none());
    assert_eq!(replacements_of(&api, &original).len(), 1);
}

// ---- only what was preempted comes back ----------------------------------------------------

#[tokio::test]
async fn a_bare_pod_that_succeeds_while_its_copy_waits_is_not_run_again() {
    let api = cluster().await;
    let r = replica(&api).await;
    let original = uid_of(&api, "hostport-batch");
    preempt(&r).await;
    assert_eq!(replacements_of(&api, &original).len(), 1);
    // kube-scheduler chose otherwise, and the pod finished its work.
    let pods: Api<Pod> = Api::namespaced(api.client(), "batch");
    pods.patch_status(
        "hostport-batch",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
    )
    .await
    .unwrap();
    assert!(eventually(|| r.cell.load().unwrap().pod_by_uid(&original).is_none()).await);
    r.requeuer.reconcile_once(&r.cell, 60).await;
    assert!(replacements_of(&api, &original).is_empty(), "the copy is deleted, never released");
}

#[tokio::test]
async fn a_bare_pod_deleted_by_someone_else_while_its_copy_waits_is_not_run_again() {
    let api = cluster().await;
    let r = replica(&api).await;
    let original = uid_of(&api, "hostport-batch");
    preempt(&r).await;
    api.remove("Pod", "batch", "hostport-batch");
    assert!(eventually(|| r.cell.load().unwrap().pod_by_uid(&original).is_none()).await);
    r.requeuer.reconcile_once(&r.cell, 60).await;
    assert!(replacements_of(&api, &original).is_empty());
}
