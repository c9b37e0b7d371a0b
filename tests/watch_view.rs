//! The cluster view from a Kubernetes API server: a fake one on loopback that serves
//! lists from a recorded snapshot and holds watches open, and one that is not there.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use coloc_extender::cluster::watch::{self, Freshness};
use coloc_extender::cluster::{snapshot, RequeueView, StoreCell, View, ViewCell};
use coloc_extender::model::{Pod, PodRef};
use coloc_extender::pipeline::{replay, Verb};
use coloc_extender::policy::Policy;
use serde_json::{json, Value};

const ROUND: &str = "tests/fixtures/payloads/r2-nodecache-true";

fn items_of(kind: &str) -> Vec<Value> {
    let snap: Value = serde_json::from_slice(
        &std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join(ROUND).join("0037-preempt.snapshot.json")).unwrap(),
    )
    .unwrap();
    let items = snap["items"].as_array().unwrap();
    if kind == "Namespace" {
        // The snapshot has none: its pods' namespaces, opted in to requeue as a snapshot
        // without namespaces takes every one to be.
        let names: std::collections::BTreeSet<&str> =
            items.iter().filter_map(|i| i["metadata"]["namespace"].as_str()).collect();
        return names
            .into_iter()
            .map(|n| json!({"kind": "Namespace", "metadata": {"name": n, "labels": {"coloc-extender.io/requeue": "enabled"}}}))
            .collect();
    }
    items.iter().filter(|i| i["kind"] == kind).cloned().collect()
}

async fn list_or_watch(
    State(kind): State<&'static str>,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> Response {
    if q.get("watch").map(String::as_str) == Some("true") {
        // A watch with no changes: the stream stays open.
        return Body::from_stream(futures::stream::pending::<Result<Vec<u8>, std::io::Error>>()).into_response();
    }
    axum::Json(json!({
        "apiVersion": "v1",
        "kind": format!("{kind}List"),
        "metadata": {"resourceVersion": "1000"},
        "items": items_of(kind),
    }))
    .into_response()
}

async fn fake_apiserver() -> SocketAddr {
    fake_apiserver_with_pods(get(list_or_watch).with_state("Pod")).await
}

/// The fake API server, with `pods` answering for Pods.
async fn fake_apiserver_with_pods(pods: axum::routing::MethodRouter) -> SocketAddr {
    let app = Router::new()
        .route("/api/v1/nodes", get(list_or_watch).with_state("Node"))
        .route("/api/v1/pods", pods)
        .route("/apis/policy/v1/poddisruptionbudgets", get(list_or_watch).with_state("PodDisruptionBudget"))
        .route("/apis/scheduling.k8s.io/v1/priorityclasses", get(list_or_watch).with_state("PriorityClass"))
        .route("/apis/batch/v1/jobs", get(list_or_watch).with_state("Job"))
        .route("/api/v1/namespaces", get(list_or_watch).with_state("Namespace"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

fn client(url: &str) -> kube::Client {
    kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap()
}

async fn wait_until(mut ok: impl FnMut() -> bool) -> bool {
    for _ in 0..200 {
        if ok() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test]
async fn watches_build_the_same_view_as_the_snapshot() {
    let addr = fake_apiserver().await;
    let policy = Policy::builtin_default().enforced();
    let cell = Arc::new(ViewCell::default());
    let fresh = Arc::new(Freshness::default());
    assert!(!cell.is_ready(), "not ready before the first sync");
    tokio::spawn(watch::run(
        client(&format!("http://{addr}")),
        cell.clone(),
        Arc::new(ArcSwap::from_pointee(policy.clone())),
        fresh.clone(),
        Duration::from_millis(20),
    ));
    assert!(wait_until(|| cell.is_ready()).await, "view never synced");
    let live = cell.load().unwrap();
    let snap = View::build(
        snapshot::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join(ROUND).join("0037-preempt.snapshot.json")).unwrap(),
        &policy,
    );
    assert_eq!(live.node_count(), 5);
    assert_eq!(live.pod_count(), snap.pod_count());

    // The same decisions, whichever source built the view.
    let body = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join(ROUND).join("0037-preempt.json")).unwrap();
    let now = 1_800_000_000;
    let from_watch = replay(Verb::Preempt, &body, &policy, Some(&live), now).unwrap();
    let from_snapshot = replay(Verb::Preempt, &body, &policy, Some(&snap), now).unwrap();
    assert_eq!(from_watch.body, from_snapshot.body);
    assert_eq!(from_watch.explanations, from_snapshot.explanations);
    // A policy that lets online pods through finds the same victims on the live view.
    let custom =
        Policy::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("policy/custom-priority-classes.yaml")).unwrap();
    let with_custom = replay(Verb::Preempt, &body, &custom, Some(&live), now).unwrap();
    assert!(
        String::from_utf8_lossy(&with_custom.body).contains("node-a2"),
        "{}",
        String::from_utf8_lossy(&with_custom.body)
    );
}

#[tokio::test]
async fn an_unreachable_api_server_leaves_the_view_unready_and_retries() {
    // Port 9 on loopback: nothing listens, connections are refused.
    let cell = Arc::new(ViewCell::default());
    let fresh = Arc::new(Freshness::default());
    tokio::spawn(watch::run(
        client("http://127.0.0.1:9"),
        cell.clone(),
        Arc::new(ArcSwap::from_pointee(Policy::builtin_default().enforced())),
        fresh.clone(),
        Duration::from_millis(20),
    ));
    assert!(wait_until(|| fresh.failing_since("Pod") != 0).await, "watch errors not noticed");
    assert!(!cell.is_ready());
    assert!(cell.load().is_none(), "decisions see no view: they degrade per class");
    let since = fresh.failing_since("Pod");
    assert!(!fresh.is_stale(since + 10, watch::STALE_AFTER_SECS));
    assert!(fresh.is_stale(since + watch::STALE_AFTER_SECS + 1, watch::STALE_AFTER_SECS));
}

#[test]
fn a_stale_view_is_withheld_and_not_ready() {
    let cell = ViewCell::default();
    cell.publish(View::default());
    assert!(cell.is_ready() && cell.load().is_some());
    cell.set_stale(true);
    assert!(!cell.is_ready() && cell.load().is_none());
    cell.set_stale(false);
    assert!(cell.is_ready());
}

// ---- against the full fake API server: live changes --------------------------------

mod fake_api;

fn snapshot_items(seq: &str) -> Vec<Value> {
    let snap: Value = serde_json::from_slice(
        &std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join(ROUND).join(format!("{seq}-preempt.snapshot.json")))
            .unwrap(),
    )
    .unwrap();
    snap["items"].as_array().unwrap().clone()
}

async fn watched(
    api: &fake_api::FakeApi,
    policy: &Policy,
) -> (Arc<ViewCell>, Arc<Freshness>, tokio::task::JoinHandle<()>) {
    let cell = Arc::new(ViewCell::default());
    let fresh = Arc::new(Freshness::default());
    let task = tokio::spawn(watch::run(
        api.client(),
        cell.clone(),
        Arc::new(ArcSwap::from_pointee(policy.clone())),
        fresh.clone(),
        Duration::from_millis(20),
    ));
    assert!(wait_until(|| cell.is_ready()).await, "view never synced");
    (cell, fresh, task)
}

/// A fake API server holding snapshot `seq`, and the view watched from it (default policy).
async fn watched_snapshot(
    seq: &str,
) -> (fake_api::FakeApi, Arc<ViewCell>, Arc<Freshness>, tokio::task::JoinHandle<()>) {
    let api = fake_api::FakeApi::start().await;
    api.seed(&snapshot_items(seq));
    let (cell, fresh, task) = watched(&api, &Policy::builtin_default().enforced()).await;
    (api, cell, fresh, task)
}

fn victim_uids(body: &[u8]) -> Vec<String> {
    let v: Value = serde_json::from_slice(body).unwrap();
    v["NodeNameToMetaVictims"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|n| n["Pods"].as_array().unwrap().iter().map(|p| p["UID"].as_str().unwrap().to_string()))
        .collect()
}

#[tokio::test]
async fn a_pod_deleted_on_the_watch_is_never_returned_by_the_next_preempt() {
    // kube-scheduler deletes the victims it was given, and asks again for the next online
    // pod at once. Every victim deleted on the watch must be gone from the next answer.
    let api = fake_api::FakeApi::start().await;
    api.seed(&snapshot_items("0037"));
    let policy = Policy::builtin_default().enforced();
    let (cell, _, task) = watched(&api, &policy).await;
    // The same request, with kube's proposal made of every lower-priority pod on every node.
    let body = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join(ROUND).join("0037-preempt.json")).unwrap();
    let now = 1_900_000_000;
    let mut deleted: Vec<String> = Vec::new();
    for round in 0..12 {
        let view = cell.load().unwrap();
        let a = replay(Verb::Preempt, &body, &policy, Some(&view), now).unwrap();
        let uids = victim_uids(&a.body);
        for uid in &uids {
            assert!(!deleted.contains(uid), "round {round}: deleted pod {uid} offered again");
        }
        let Some(uid) = uids.first() else { break };
        let pod = api.list("Pod").into_iter().find(|p| p["metadata"]["uid"] == uid.as_str()).unwrap();
        let (ns, name) = (
            pod["metadata"]["namespace"].as_str().unwrap().to_string(),
            pod["metadata"]["name"].as_str().unwrap().to_string(),
        );
        let generation = view.generation();
        if round % 2 == 0 {
            api.remove("Pod", &ns, &name);
        } else {
            // Terminating, not yet gone: never offered either.
            let mut going = pod.clone();
            going["metadata"]["deletionTimestamp"] = Value::from("2026-11-22T02:12:04Z");
            api.apply(going);
        }
        deleted.push(uid.clone());
        // The very next view (no debounce) already has the change.
        assert!(wait_until(|| cell.load().unwrap().generation() > generation).await);
    }
    assert!(deleted.len() >= 3, "several rounds ran: {deleted:?}");
    task.abort();
}

#[tokio::test]
async fn a_failing_pod_watch_alone_makes_the_view_stale() {
    let (api, cell, fresh, task) = watched_snapshot("0037").await;
    api.fail("watch", "Pod", 500, u32::MAX);
    api.fail("list", "Pod", 500, u32::MAX);
    api.break_watches();
    assert!(wait_until(|| fresh.failing_since("Pod") != 0).await, "the Pod watch failure is noticed");
    // Nodes keep streaming fine: a change to a node is applied.
    let mut node = api.get("Node", "", "node-a1").unwrap();
    node["metadata"]["labels"]["touched"] = Value::from("yes");
    api.apply(node);
    assert!(
        wait_until(|| cell.load().is_some_and(|v| v.node("node-a1").unwrap().labels.contains_key("touched"))).await
    );
    assert_eq!(fresh.failing_since("Node"), 0);
    let since = fresh.failing_since("Pod");
    assert_eq!(fresh.stale_kinds(since + watch::STALE_AFTER_SECS + 1, watch::STALE_AFTER_SECS), ["Pod"]);
    api.clear_faults();
    assert!(wait_until(|| fresh.failing_since("Pod") == 0).await, "recovers once the API server answers again");
    task.abort();
}

#[tokio::test]
async fn a_relist_that_keeps_failing_counts_as_failing_from_its_first_error() {
    let (api, _, fresh, task) = watched_snapshot("0037").await;
    api.fail("list", "Pod", 500, u32::MAX);
    api.expire_watches();
    assert!(wait_until(|| fresh.failing_since("Pod") != 0).await, "the failing re-list is noticed");
    let since = fresh.failing_since("Pod");
    // kube-rs starts each retry with `Init`, before asking the API server anything: that
    // is no answer, and the failure still dates from the first error a second later.
    let watches = api.count("watch", "Pod");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let lists = api.count("list", "Pod");
    assert!(wait_until(|| api.count("list", "Pod") > lists).await, "the list is retried");
    assert_eq!(fresh.failing_since("Pod"), since);
    assert_eq!(api.count("watch", "Pod"), watches, "no watch without a list");
    task.abort();
}

#[tokio::test]
async fn a_relist_after_an_expired_watch_drops_what_was_deleted_meanwhile() {
    let (api, cell, _, task) = watched_snapshot("0037").await;
    let before = cell.load().unwrap().pod_count();
    api.expire_watches();
    api.remove("Pod", "batch", "worker-1");
    assert!(wait_until(|| cell.load().unwrap().pod_count() == before - 1).await);
    assert!(cell.load().unwrap().pod("batch/worker-1").is_none());
    task.abort();
}

#[tokio::test]
async fn pods_are_listed_from_the_watch_cache_in_one_streamed_body() {
    // The snapshot's nodes, and 4,500 copies of one of its bound pods.
    let api = fake_api::FakeApi::start().await;
    let (pods, mut items): (Vec<Value>, Vec<Value>) =
        snapshot_items("0037").into_iter().partition(|i| i["kind"] == "Pod");
    let pod = pods.into_iter().find(|p| p["metadata"]["name"] == "train-1").unwrap();
    for i in 0..4_500 {
        let mut p = pod.clone();
        p["metadata"]["namespace"] = Value::from("bulk");
        p["metadata"]["name"] = Value::from(format!("p{i:05}"));
        p["metadata"]["uid"] = Value::from(format!("bulk-{i}"));
        items.push(p);
    }
    api.seed(&items);
    let (cell, _, task) = watched(&api, &Policy::builtin_default().enforced()).await;
    assert_eq!(cell.load().unwrap().pod_count(), 4_500);
    let lists: Vec<String> = api
        .requests()
        .into_iter()
        .filter(|(_, p, q)| p == "/api/v1/pods" && !q.contains("watch=true"))
        .map(|(_, _, q)| q)
        .collect();
    // From the watch cache (`resourceVersion=0`, which a limit would turn into a read from
    // etcd), in one request.
    assert_eq!(lists.len(), 1, "{lists:?}");
    assert!(lists[0].contains("resourceVersion=0") && !lists[0].contains("limit="), "{}", lists[0]);
    // The watch starts where the list ended: a pod added now is seen.
    let mut p = pod.clone();
    p["metadata"]["name"] = Value::from("late");
    p["metadata"]["uid"] = Value::from("late-uid");
    api.apply(p);
    assert!(wait_until(|| cell.load().unwrap().pod_count() == 4_501).await);
    task.abort();
}

/// Serves the snapshot's pods, the first list cut off half way through its body.
async fn pods_cut_off_once(
    State(lists): State<Arc<std::sync::atomic::AtomicUsize>>,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> Response {
    if q.get("watch").map(String::as_str) == Some("true") {
        return Body::from_stream(futures::stream::pending::<Result<Vec<u8>, std::io::Error>>()).into_response();
    }
    let body = serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "1000"}, "items": items_of("Pod")})).unwrap();
    // A probe of a failing watch (`limit=1`) is not a list of the view.
    if q.contains_key("limit") {
        return body.into_response();
    }
    if lists.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
        return body[..body.len() / 2].to_vec().into_response();
    }
    body.into_response()
}

#[tokio::test]
async fn a_pod_list_cut_off_is_not_taken_for_the_cluster_and_is_listed_again() {
    let lists = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let addr = fake_apiserver_with_pods(get(pods_cut_off_once).with_state(lists.clone())).await;
    let cell = Arc::new(ViewCell::default());
    let fresh = Arc::new(Freshness::default());
    let policy = Policy::builtin_default().enforced();
    tokio::spawn(watch::run(
        client(&format!("http://{addr}")),
        cell.clone(),
        Arc::new(ArcSwap::from_pointee(policy.clone())),
        fresh.clone(),
        Duration::from_millis(20),
    ));
    assert!(wait_until(|| lists.load(std::sync::atomic::Ordering::SeqCst) == 1).await);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!cell.is_ready(), "half a list is not a view");
    assert!(wait_until(|| cell.is_ready()).await, "listed again after the back-off");
    assert_eq!(lists.load(std::sync::atomic::Ordering::SeqCst), 2);
    let snap = View::build(
        snapshot::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join(ROUND).join("0037-preempt.snapshot.json")).unwrap(),
        &policy,
    );
    assert_eq!(cell.load().unwrap().pod_count(), snap.pod_count());
}

#[tokio::test]
async fn a_pod_seen_deleted_then_gone_teaches_how_long_its_owners_pods_take_to_stop() {
    let api = fake_api::FakeApi::start().await;
    api.seed(&snapshot_items("0037"));
    let policy = Policy::builtin_default().enforced();
    let (cell, _, task) = watched(&api, &policy).await;
    let pod = api
        .list("Pod")
        .into_iter()
        .find(|p| p["spec"]["nodeName"].is_string() && p["metadata"]["ownerReferences"].is_array())
        .expect("a bound pod with an owner");
    let (ns, name) = (
        pod["metadata"]["namespace"].as_str().unwrap().to_string(),
        pod["metadata"]["name"].as_str().unwrap().to_string(),
    );
    // Deleted now with 30 s of grace (the API server writes the grace's end, to the second).
    let now = jiff::Timestamp::now();
    let mut going = pod.clone();
    // Held by a finalizer, as a kubelet holds it while its containers stop.
    going["metadata"]["finalizers"] = json!(["test.coloc-extender.io/hold"]);
    going["status"]["phase"] = Value::from("Running");
    going["status"]["startTime"] = Value::from("2026-01-01T00:00:00Z");
    going["metadata"]["deletionGracePeriodSeconds"] = Value::from(30);
    going["metadata"]["deletionTimestamp"] =
        Value::from(jiff::Timestamp::from_second(now.as_second() + 30).unwrap().to_string());
    api.apply(going);
    let key = format!("{ns}/{name}");
    assert!(wait_until(|| cell.load().unwrap().pod(&key).is_some_and(|p| p.deletion_time.is_some())).await);
    assert!(cell.load().unwrap().stop_times().is_empty(), "nothing learned while it runs");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    api.remove("Pod", &ns, &name);
    assert!(wait_until(|| !cell.load().unwrap().stop_times().is_empty()).await, "nothing learned");
    let owner = &pod["metadata"]["ownerReferences"][0];
    let owner = format!("{ns}/{}/{}", owner["kind"].as_str().unwrap(), owner["name"].as_str().unwrap());
    let learned = cell.load().unwrap().stop_times().get(&owner).expect("learned for its owner");
    // Gone about 1.5 s after a delete in the second the deletionTimestamp names.
    assert!((1_000..=3_000).contains(&learned.ms), "{learned:?}");
    task.abort();
}

/// Pods as listed, `batch/free-1` marked preempted by kube-scheduler.
async fn pods_one_marked(Query(q): Query<std::collections::HashMap<String, String>>) -> Response {
    if q.get("watch").map(String::as_str) == Some("true") {
        return Body::from_stream(futures::stream::pending::<Result<Vec<u8>, std::io::Error>>()).into_response();
    }
    let mut items = items_of("Pod");
    for p in items.iter_mut().filter(|p| p["metadata"]["name"] == "free-1") {
        p["status"]["conditions"] =
            json!([{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]);
    }
    axum::Json(json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "1000"}, "items": items}))
        .into_response()
}

/// The marked pod `batch/free-1` as a view kept by `watches` holds it, and whether that
/// view kept the bytes requeue copies it from.
async fn marked_pod_as_kept<S: Send + Sync + Clone + Default + 'static, F>(
    watches: impl FnOnce(kube::Client, Arc<StoreCell<S>>) -> F,
    read: impl Fn(&S) -> Option<(Pod, bool)>,
) -> (Pod, bool)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let addr = fake_apiserver_with_pods(get(pods_one_marked)).await;
    let cell = Arc::new(StoreCell::<S>::default());
    let task = tokio::spawn(watches(client(&format!("http://{addr}")), cell.clone()));
    assert!(wait_until(|| cell.is_ready()).await, "view never synced");
    let found = cell.read_latest(read).flatten().expect("the marked pod is in the view");
    task.abort();
    found
}

/// `batch/free-1` among `pods`.
fn free_1<'a>(mut pods: impl Iterator<Item = &'a PodRef>) -> Option<Pod> {
    pods.find(|p| p.name == "free-1").map(|p| (**p).clone())
}

#[tokio::test]
async fn the_extenders_view_keeps_nothing_requeue_copies_from_and_the_requeue_controllers_does() {
    let policy = Arc::new(ArcSwap::from_pointee(Policy::builtin_default().enforced()));
    let every = Duration::from_millis(20);
    let watching = policy.clone();
    let (pod, _) = marked_pod_as_kept(
        move |client, cell| watch::run(client, cell, watching, Arc::new(Freshness::default()), every),
        |v: &View| free_1(v.all_pods()).map(|p| (p, false)),
    )
    .await;
    assert!(pod.preempted, "decisions see the mark");
    assert!(pod.last_state.is_none() && pod.spec_digest.is_none(), "the extender keeps no bytes of it: {pod:?}");

    let (pod, kept) = marked_pod_as_kept(
        move |client, cell| watch::run_requeue(client, cell, policy, Arc::new(Freshness::default()), every),
        |v: &RequeueView| {
            let pod = free_1(v.all_pods())?;
            let kept = v.last_state(&pod.uid).is_some();
            Some((pod, kept))
        },
    )
    .await;
    assert!(kept, "requeue copies from its bytes");
    assert!(pod.spec_digest.is_some(), "and checks its copy's spec against them");
    assert!(pod.last_state.is_none(), "kept apart from the pod");
}
