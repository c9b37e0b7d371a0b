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
use coloc_extender::requeue::{FROM_UID, GATE};
use fake_api::FakeApi;
use http_body_util::BodyExt;
use serde_json::Value;
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
    let req = Request::post("/preempt").header("content-type", "application/json").body(Body::from(fixture("0043-preempt.json"))).unwrap();
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
    assert_eq!(victims(&answer), [original.clone()], "{answer}");
    let stored = replacements_of(&api, &original);
    assert_eq!(stored.len(), 1, "the replacement exists when the answer arrives");
    let rep = &stored[0];
    assert!(gated(rep), "held back while the original runs: {rep}");
    assert!(rep["spec"].get("nodeName").is_none_or(Value::is_null));
    assert_eq!(rep["metadata"]["labels"]["app"], api.get("Pod", "batch", "hostport-batch").unwrap()["metadata"]["labels"]["app"]);
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
    api.remove("Pod", "batch", "hostport-batch");
    assert!(eventually(|| r.cell.load().unwrap().pod_by_uid(&original).is_none()).await);
    r.requeuer.reconcile_once(&r.cell, 60).await;
    let rep = &replacements_of(&api, &original)[0];
    assert!(!gated(rep), "released: {rep}");
    assert!(api.count("create", "Event") >= 2, "events on the original and the replacement");
    let notes: Vec<String> = api.list("Event").iter().map(|e| e["note"].as_str().unwrap_or_default().to_string()).collect();
    assert!(notes.iter().any(|n| n.starts_with("requeued as ") && n.contains("after preemption by online/online-hostport")), "{notes:?}");
    assert!(notes.iter().any(|n| n.starts_with(&format!("requeued from {original}")) && n.ends_with("attempt 1")), "{notes:?}");
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
    assert_eq!(victims(&va), [original.clone()]);
    assert_eq!(victims(&vb), [original.clone()], "the second finds the first one's replacement and answers too");
    assert_eq!(replacements_of(&api, &original).len(), 1);
    // Both release: one patch wins, the other is a no-op.
    api.remove("Pod", "batch", "hostport-batch");
    assert!(eventually(|| a.cell.load().unwrap().pod_by_uid(&original).is_none() && b.cell.load().unwrap().pod_by_uid(&original).is_none()).await);
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
            assert_eq!(replacements_of(&api, uid).len(), 1, "bare victim {uid} answered without a replacement (fault {status} x{times})");
            answered_bare += 1;
        }
    }
    assert!(answered_bare > 0, "without faults the bare victim is answered");
}
