//! The fake API server (tests/fake_api) driven through kube-rs only, so we know kube-rs
//! accepts what it serves: lists, watches, writes, conflicts, faults, selectors, and
//! broken and expired watches.

mod fake_api;

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fake_api::FakeApi;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions, WatchEvent, WatchParams,
};
use kube::runtime::watcher::{self, Event};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(5);

fn pod(name: &str, labels: Value, phase: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": phase},
    })
}

fn typed(v: Value) -> Pod {
    serde_json::from_value(v).unwrap()
}

fn code_of<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> u16 {
    match r {
        Err(kube::Error::Api(s)) => s.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Runs `f` with a deadline so no test can hang.
async fn within<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, f).await.expect("timed out")
}

async fn eventually(what: &str, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < WAIT, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// What a kube-rs watcher consumer sees: the live set of names, inits, errors, an event log.
#[derive(Default)]
struct Seen {
    names: Mutex<BTreeSet<String>>,
    relist: Mutex<Option<BTreeSet<String>>>,
    inits: AtomicUsize,
    log: Mutex<Vec<String>>,
}

impl Seen {
    fn names(&self) -> Vec<String> {
        self.names.lock().unwrap().iter().cloned().collect()
    }
    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
    fn logged(&self, entry: &str) -> usize {
        self.log.lock().unwrap().iter().filter(|e| *e == entry).count()
    }
}

/// Follows pods with `kube::runtime::watcher`, retrying errors after 20 ms.
fn follow(api: Api<Pod>, config: watcher::Config) -> (Arc<Seen>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Seen::default());
    let s = seen.clone();
    let task = tokio::spawn(async move {
        let mut stream = watcher::watcher(api, config).boxed();
        while let Some(ev) = stream.next().await {
            let name = |p: &Pod| p.metadata.name.clone().unwrap_or_default();
            let entry = match ev {
                Ok(Event::Init) => {
                    *s.relist.lock().unwrap() = Some(BTreeSet::new());
                    "init".to_string()
                }
                Ok(Event::InitApply(p)) => {
                    s.relist.lock().unwrap().get_or_insert_with(BTreeSet::new).insert(name(&p));
                    format!("initapply:{}", name(&p))
                }
                Ok(Event::InitDone) => {
                    *s.names.lock().unwrap() = s.relist.lock().unwrap().take().unwrap_or_default();
                    s.inits.fetch_add(1, Ordering::SeqCst);
                    "initdone".to_string()
                }
                Ok(Event::Apply(p)) => {
                    s.names.lock().unwrap().insert(name(&p));
                    format!("apply:{}", name(&p))
                }
                Ok(Event::Delete(p)) => {
                    s.names.lock().unwrap().remove(&name(&p));
                    format!("delete:{}", name(&p))
                }
                Err(e) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    format!("error:{e}")
                }
            };
            s.log.lock().unwrap().push(entry);
        }
    });
    (seen, task)
}

fn names(v: &[Pod]) -> Vec<String> {
    v.iter().map(|p| p.metadata.name.clone().unwrap()).collect()
}

#[tokio::test]
async fn a_watcher_sees_seeded_created_patched_and_deleted_pods() {
    let fake = FakeApi::start().await;
    fake.seed(&[
        pod("seeded", json!({}), "Running"),
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}),
    ]);
    let seeded = fake.get("Pod", "default", "seeded").unwrap();
    assert!(seeded["metadata"]["uid"].as_str().is_some_and(|u| u.len() == 36), "{seeded}");
    assert!(seeded["metadata"]["creationTimestamp"].as_str().is_some_and(|t| t.ends_with('Z')));
    let pods: Api<Pod> = Api::namespaced(fake.client(), "default");
    let (seen, task) = follow(Api::all(fake.client()), watcher::Config::default());
    eventually("the initial list", || seen.inits.load(Ordering::SeqCst) == 1).await;
    assert_eq!(seen.names(), ["seeded"]);

    let created = within(pods.create(&PostParams::default(), &typed(pod("new", json!({}), "Pending")))).await.unwrap();
    assert!(created.metadata.uid.is_some() && created.metadata.creation_timestamp.is_some());
    eventually("ADDED new", || seen.logged("apply:new") == 1).await;

    let patched =
        within(pods.patch("new", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}}))))
            .await
            .unwrap();
    assert!(
        patched.metadata.resource_version.as_ref().unwrap().parse::<u64>().unwrap()
            > created.metadata.resource_version.as_ref().unwrap().parse::<u64>().unwrap()
    );
    eventually("MODIFIED new", || seen.logged("apply:new") == 2).await;

    within(pods.delete("seeded", &DeleteParams::default())).await.unwrap();
    eventually("DELETED seeded", || seen.logged("delete:seeded") == 1).await;
    assert_eq!(seen.names(), ["new"]);
    assert!(fake.get("Pod", "default", "seeded").is_none());
    assert_eq!(fake.list("Pod").len(), 1);

    // The helpers write too, and watchers see it.
    fake.apply(pod("helper", json!({}), "Running"));
    eventually("ADDED helper", || seen.logged("apply:helper") == 1).await;
    assert!(fake.remove("Pod", "default", "helper"));
    assert!(!fake.remove("Pod", "default", "helper"));
    eventually("DELETED helper", || seen.logged("delete:helper") == 1).await;

    let nodes: Api<Node> = Api::all(fake.client());
    assert_eq!(within(nodes.get("n1")).await.unwrap().metadata.name.as_deref(), Some("n1"));
    assert_eq!(seen.inits.load(Ordering::SeqCst), 1, "no re-list: {:?}", seen.log());
    assert_eq!(
        (
            fake.count("list", "Pod"),
            fake.count("create", "Pod"),
            fake.count("patch", "Pod"),
            fake.count("delete", "Pod")
        ),
        (1, 1, 1, 1)
    );
    assert!(fake.count("watch", "Pod") >= 1);
    assert!(
        fake.requests().iter().any(|(m, p, q)| m == "GET" && p == "/api/v1/pods" && q.contains("watch=true")),
        "{:?}",
        fake.requests()
    );
    task.abort();
}

#[tokio::test]
async fn conflicts_preconditions_and_not_found() {
    let fake = FakeApi::start().await;
    let pods: Api<Pod> = Api::namespaced(fake.client(), "default");
    let p = typed(pod("twice", json!({}), "Pending"));
    within(pods.create(&PostParams::default(), &p)).await.unwrap();
    match within(pods.create(&PostParams::default(), &p)).await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (409, "AlreadyExists")),
        other => panic!("{other:?}"),
    }

    let wrong = DeleteParams {
        preconditions: Some(Preconditions { uid: Some("not-the-uid".into()), resource_version: None }),
        ..Default::default()
    };
    assert_eq!(code_of(within(pods.delete("twice", &wrong)).await), 409);
    assert!(fake.get("Pod", "default", "twice").is_some());
    let uid = fake.get("Pod", "default", "twice").unwrap()["metadata"]["uid"].as_str().unwrap().to_string();
    let right = DeleteParams {
        preconditions: Some(Preconditions { uid: Some(uid), resource_version: None }),
        ..Default::default()
    };
    within(pods.delete("twice", &right)).await.unwrap();

    match within(pods.get("twice")).await {
        Err(kube::Error::Api(s)) => assert!(s.is_not_found() && s.reason == "NotFound", "{s:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(code_of(within(pods.delete("twice", &DeleteParams::default())).await), 404);
    assert_eq!(code_of(within(pods.patch("twice", &PatchParams::default(), &Patch::Merge(json!({})))).await), 404);

    // generateName, and the namespace from the path wins.
    let mut g = pod("", json!({}), "Pending");
    g["metadata"] = json!({"generateName": "gen-", "namespace": "elsewhere"});
    let made = within(pods.create(&PostParams::default(), &typed(g))).await.unwrap();
    assert!(
        made.metadata.name.as_ref().unwrap().starts_with("gen-") && made.metadata.name.as_ref().unwrap().len() == 9,
        "{:?}",
        made.metadata.name
    );
    assert_eq!(made.metadata.namespace.as_deref(), Some("default"));

    // Replace with a stale resourceVersion: 409; with the current one: fine.
    let mut cur = within(pods.get(made.metadata.name.as_ref().unwrap())).await.unwrap();
    let name = cur.metadata.name.clone().unwrap();
    within(pods.replace(&name, &PostParams::default(), &cur)).await.unwrap();
    cur.spec.as_mut().unwrap().node_name = Some("n1".into());
    assert_eq!(code_of(within(pods.replace(&name, &PostParams::default(), &cur)).await), 409);
}

#[tokio::test]
async fn merge_json_strategic_apply_and_status_patches() {
    let fake = FakeApi::start().await;
    let mut p = pod("gated", json!({}), "Pending");
    p["spec"]["schedulingGates"] = json!([{"name": "a"}, {"name": "b"}]);
    fake.seed(&[p]);
    let pods: Api<Pod> = Api::namespaced(fake.client(), "default");
    let pp = PatchParams::default();

    let merged = within(pods.patch(
        "gated",
        &pp,
        &Patch::Merge(json!({"metadata": {"labels": {"k": "v"}}, "spec": {"priority": 7}})),
    ))
    .await
    .unwrap();
    assert_eq!(merged.metadata.labels.unwrap()["k"], "v");
    assert_eq!(merged.spec.as_ref().unwrap().priority, Some(7));
    assert_eq!(merged.spec.unwrap().scheduling_gates.unwrap().len(), 2);

    // `Patch::Json` holds a `json_patch::Patch`, which kube does not re-export: build it through
    // serde (its serde form is the plain array of operations).
    let ops = json!([
        {"op": "test", "path": "/spec/schedulingGates/0/name", "value": "a"},
        {"op": "remove", "path": "/spec/schedulingGates/0"},
    ]);
    let ungated = within(pods.patch("gated", &pp, &Patch::Json::<()>(serde_json::from_value(ops.clone()).unwrap())))
        .await
        .unwrap();
    let gates: Vec<String> = ungated.spec.unwrap().scheduling_gates.unwrap().into_iter().map(|g| g.name).collect();
    assert_eq!(gates, ["b"]);

    // The same patch again: the test op fails now.
    let failing = Patch::Json::<()>(serde_json::from_value(ops).unwrap());
    match within(pods.patch("gated", &pp, &failing)).await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (422, "Invalid")),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        fake.get("Pod", "default", "gated").unwrap()["spec"]["schedulingGates"],
        json!([{"name": "b"}]),
        "a failed JSON patch changes nothing"
    );

    // A stale resourceVersion in a patch conflicts; the current one does not.
    let stale = json!({"metadata": {"resourceVersion": "1"}, "spec": {"priority": 8}});
    assert_eq!(code_of(within(pods.patch("gated", &pp, &Patch::Merge(stale))).await), 409);
    let rv = fake.get("Pod", "default", "gated").unwrap()["metadata"]["resourceVersion"].clone();
    within(pods.patch(
        "gated",
        &pp,
        &Patch::Merge(json!({"metadata": {"resourceVersion": rv}, "spec": {"priority": 8}})),
    ))
    .await
    .unwrap();

    let strategic =
        within(pods.patch("gated", &pp, &Patch::Strategic(json!({"metadata": {"annotations": {"s": "1"}}}))))
            .await
            .unwrap();
    assert_eq!(strategic.metadata.annotations.unwrap()["s"], "1");

    let status =
        within(pods.patch_status("gated", &pp, &Patch::Merge(json!({"status": {"phase": "Running"}})))).await.unwrap();
    assert_eq!(status.status.unwrap().phase.as_deref(), Some("Running"));
    assert!(fake
        .requests()
        .iter()
        .any(|(m, p, _)| m == "PATCH" && p == "/api/v1/namespaces/default/pods/gated/status"));

    // Server-side apply creates when absent, merges when present.
    let ssa = PatchParams::apply("selftest").force();
    let applied =
        within(pods.patch("ssa", &ssa, &Patch::Apply(pod("ssa", json!({"app": "one"}), "Pending")))).await.unwrap();
    assert_eq!(applied.metadata.labels.unwrap()["app"], "one");
    let applied = within(pods.patch(
        "ssa",
        &ssa,
        &Patch::Apply(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ssa", "labels": {"app": "two"}}}),
        ),
    ))
    .await
    .unwrap();
    assert_eq!(applied.metadata.labels.unwrap()["app"], "two");
    assert_eq!(fake.count("patch", "Pod"), 9);
}

#[tokio::test]
async fn finalizers_hold_a_deleted_object_and_merge_as_a_set() {
    let fake = FakeApi::start().await;
    let mut p = pod("held", json!({}), "Running");
    p["metadata"]["finalizers"] = json!(["theirs"]);
    fake.seed(&[p]);
    let pods: Api<Pod> = Api::namespaced(fake.client(), "default");
    let pp = PatchParams::default();
    let uid = fake.get("Pod", "default", "held").unwrap()["metadata"]["uid"].as_str().unwrap().to_string();

    // A strategic merge adds to the set; a UID in the patch is a precondition.
    let add = json!({"metadata": {"uid": uid, "finalizers": ["ours", "theirs"]}});
    within(pods.patch("held", &pp, &Patch::Strategic(add))).await.unwrap();
    assert_eq!(fake.get("Pod", "default", "held").unwrap()["metadata"]["finalizers"], json!(["theirs", "ours"]));
    let stranger = json!({"metadata": {"uid": "another-uid", "finalizers": ["x"]}});
    assert_eq!(code_of(within(pods.patch("held", &pp, &Patch::Strategic(stranger))).await), 422);

    // Deleted: it stays, terminating, until the last finalizer goes.
    within(pods.delete("held", &DeleteParams::default())).await.unwrap();
    let held = fake.get("Pod", "default", "held").expect("held by its finalizers");
    assert!(held["metadata"]["deletionTimestamp"].is_string(), "{held}");
    let remove =
        |f: &str| Patch::Strategic(json!({"metadata": {"uid": uid, "$deleteFromPrimitiveList/finalizers": [f]}}));
    within(pods.patch("held", &pp, &remove("ours"))).await.unwrap();
    assert_eq!(fake.get("Pod", "default", "held").unwrap()["metadata"]["finalizers"], json!(["theirs"]));
    within(pods.patch("held", &pp, &remove("theirs"))).await.unwrap();
    assert!(fake.get("Pod", "default", "held").is_none(), "gone with its last finalizer");
}

#[tokio::test]
async fn an_injected_fault_fails_exactly_that_many_requests() {
    let fake = FakeApi::start().await;
    let pods: Api<Pod> = Api::namespaced(fake.client(), "default");
    fake.fail("create", "Pod", 403, 1);
    match within(pods.create(&PostParams::default(), &typed(pod("f", json!({}), "Pending")))).await {
        Err(kube::Error::Api(s)) => assert!(s.code == 403 && s.is_forbidden() && s.reason == "Forbidden", "{s:?}"),
        other => panic!("{other:?}"),
    }
    assert!(fake.get("Pod", "default", "f").is_none());
    within(pods.create(&PostParams::default(), &typed(pod("f", json!({}), "Pending")))).await.unwrap();
    assert_eq!(fake.count("create", "Pod"), 2, "faulted requests are recorded too");

    fake.fail("get", "Pod", 500, u32::MAX);
    for _ in 0..3 {
        assert_eq!(code_of(within(pods.get("f")).await), 500);
    }
    fake.clear_faults();
    within(pods.get("f")).await.unwrap();

    fake.fail("list", "*", 422, 1);
    match within(pods.list(&ListParams::default())).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.reason, "Invalid"),
        other => panic!("{other:?}"),
    }

    fake.delay("get", "Pod", Duration::from_millis(300));
    let t = Instant::now();
    within(pods.get("f")).await.unwrap();
    assert!(t.elapsed() >= Duration::from_millis(300));
    fake.clear_faults();
    let t = Instant::now();
    within(pods.get("f")).await.unwrap();
    assert!(t.elapsed() < Duration::from_millis(300));
}

#[tokio::test]
async fn selectors_filter_lists_and_watches() {
    let fake = FakeApi::start().await;
    fake.seed(&[
        pod("running", json!({"a": "b"}), "Running"),
        pod("pending", json!({"a": "c"}), "Pending"),
        pod("done", json!({"a": "b"}), "Succeeded"),
        pod("failed", json!({}), "Failed"),
    ]);
    let pods: Api<Pod> = Api::all(fake.client());
    let live = "status.phase!=Succeeded,status.phase!=Failed";
    assert_eq!(
        names(&within(pods.list(&ListParams::default().fields(live))).await.unwrap().items),
        ["pending", "running"]
    );
    assert_eq!(
        names(&within(pods.list(&ListParams::default().labels("a=b"))).await.unwrap().items),
        ["done", "running"]
    );
    assert_eq!(
        names(&within(pods.list(&ListParams::default().labels("a in (b,c),a!=c"))).await.unwrap().items),
        ["done", "running"]
    );
    assert_eq!(names(&within(pods.list(&ListParams::default().labels("!a"))).await.unwrap().items), ["failed"]);
    assert_eq!(
        names(&within(pods.list(&ListParams::default().fields("metadata.name=pending"))).await.unwrap().items),
        ["pending"]
    );
    assert!(fake
        .requests()
        .iter()
        .any(|(_, _, q)| q.contains("fieldSelector=status.phase!=Succeeded,status.phase!=Failed")));

    let (by_field, t1) = follow(pods.clone(), watcher::Config::default().fields(live));
    let (by_label, t2) = follow(pods.clone(), watcher::Config::default().labels("a=b"));
    eventually("both synced", || {
        by_field.inits.load(Ordering::SeqCst) == 1 && by_label.inits.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(by_field.names(), ["pending", "running"]);
    assert_eq!(by_label.names(), ["done", "running"]);

    // Raw watch events, to see the types the server sends for selector transitions.
    let rv = within(pods.list(&ListParams::default())).await.unwrap().metadata.resource_version.unwrap();
    let mut raw = within(pods.watch(&WatchParams::default().labels("a=b"), &rv)).await.unwrap().boxed();

    let ns: Api<Pod> = Api::namespaced(fake.client(), "default");
    let pp = PatchParams::default();
    within(ns.patch_status("running", &pp, &Patch::Merge(json!({"status": {"phase": "Succeeded"}})))).await.unwrap();
    within(ns.patch("pending", &pp, &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})))).await.unwrap();
    within(ns.patch("done", &pp, &Patch::Merge(json!({"metadata": {"labels": {"a": null}}})))).await.unwrap();
    eventually("running gone from the live-phase watch", || by_field.names() == ["pending"]).await;
    eventually("pending in and done out of the label watch", || by_label.names() == ["pending", "running"]).await;
    assert_eq!(by_field.logged("delete:running"), 1);
    assert_eq!(by_label.logged("apply:pending"), 1);
    assert_eq!(by_label.logged("delete:done"), 1);

    let mut types = Vec::new();
    for _ in 0..3 {
        let ev = within(raw.try_next()).await.unwrap().unwrap();
        types.push(match ev {
            WatchEvent::Added(p) => format!("ADDED {}", p.metadata.name.unwrap()),
            WatchEvent::Modified(p) => format!("MODIFIED {}", p.metadata.name.unwrap()),
            WatchEvent::Deleted(p) => format!("DELETED {}", p.metadata.name.unwrap()),
            other => format!("{other:?}"),
        });
    }
    assert_eq!(types, ["MODIFIED running", "ADDED pending", "DELETED done"]);
    t1.abort();
    t2.abort();
}

#[tokio::test]
async fn expired_watches_relist_and_broken_watches_resume() {
    let fake = FakeApi::start().await;
    fake.seed(&[pod("p0", json!({}), "Running")]);
    let pods: Api<Pod> = Api::namespaced(fake.client(), "default");
    let (seen, task) = follow(Api::all(fake.client()), watcher::Config::default());
    eventually("synced", || seen.inits.load(Ordering::SeqCst) == 1).await;
    eventually("watching", || fake.count("watch", "Pod") == 1).await;

    // Expired: the open watch gets an ERROR 410, and the watcher lists again.
    fake.expire_watches();
    within(pods.create(&PostParams::default(), &typed(pod("p1", json!({}), "Running")))).await.unwrap();
    fake.remove("Pod", "default", "p0");
    eventually("re-listed", || seen.inits.load(Ordering::SeqCst) == 2).await;
    eventually("the right set", || seen.names() == ["p1"]).await;
    assert!(
        seen.log().iter().any(|e| e.starts_with("error:") && e.contains("too old resource version")),
        "{:?}",
        seen.log()
    );
    assert_eq!(fake.count("list", "Pod"), 2);

    // A watch resuming from an old resourceVersion after expiry is told 410 too, until a list.
    fake.expire_watches();
    let mut stale = within(pods.watch(&WatchParams::default(), "1")).await.unwrap().boxed();
    match within(stale.try_next()).await {
        Ok(Some(WatchEvent::Error(e))) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
        other => panic!("{other:?}"),
    }
    assert!(within(stale.try_next()).await.unwrap().is_none(), "the stream ends after the 410");
    eventually("re-listed again", || seen.inits.load(Ordering::SeqCst) == 3).await;

    // Broken: the watcher re-watches from its last resourceVersion without listing.
    // Watches so far: the first, one after each re-list, and the stale one above.
    eventually("watching again", || fake.count("watch", "Pod") == 4).await;
    let (lists, watches) = (fake.count("list", "Pod"), fake.count("watch", "Pod"));
    assert_eq!(lists, 3);
    fake.break_watches();
    eventually("re-watched", || fake.count("watch", "Pod") > watches).await;
    within(pods.create(&PostParams::default(), &typed(pod("p2", json!({}), "Running")))).await.unwrap();
    eventually("p2 seen", || seen.names() == ["p1", "p2"]).await;
    assert_eq!(fake.count("list", "Pod"), lists, "no re-list after a broken watch");
    let last_watch =
        fake.requests().into_iter().rev().find(|(_, p, q)| p == "/api/v1/pods" && q.contains("watch=true")).unwrap();
    assert!(
        !last_watch.2.contains("resourceVersion=0&") && last_watch.2.contains("resourceVersion="),
        "{last_watch:?}"
    );

    // A watch from a resourceVersion replays everything after it.
    let mut replay = within(pods.watch(&WatchParams::default(), "1")).await.unwrap().boxed();
    let mut replayed = Vec::new();
    while replayed.len() < 3 {
        replayed.push(match within(replay.try_next()).await.unwrap().unwrap() {
            WatchEvent::Added(p) => format!("ADDED {}", p.metadata.name.unwrap()),
            WatchEvent::Deleted(p) => format!("DELETED {}", p.metadata.name.unwrap()),
            other => panic!("{other:?}"),
        });
    }
    assert_eq!(replayed, ["ADDED p1", "DELETED p0", "ADDED p2"]);
    task.abort();
}

#[tokio::test]
async fn both_event_apis_accept_create_and_patch() {
    use k8s_openapi::api::core::v1::{Event as CoreEvent, ObjectReference};
    use k8s_openapi::api::events::v1::Event as NewEvent;
    use kube::runtime::events::{Event as RtEvent, EventType, Recorder, Reporter};

    let fake = FakeApi::start().await;
    let core: Api<CoreEvent> = Api::namespaced(fake.client(), "default");
    let ev: CoreEvent = serde_json::from_value(
        json!({"metadata": {"name": "e1"}, "involvedObject": {"kind": "Pod", "name": "p"}, "reason": "R", "count": 1}),
    )
    .unwrap();
    within(core.create(&PostParams::default(), &ev)).await.unwrap();
    let patched = within(core.patch("e1", &PatchParams::default(), &Patch::Merge(json!({"count": 2})))).await.unwrap();
    assert_eq!(patched.count, Some(2));
    assert_eq!(fake.get("Event", "default", "e1").unwrap()["apiVersion"], "v1");

    // kube-rs's event recorder writes events.k8s.io/v1: a create, then a patch for the series.
    let recorder = Recorder::new(fake.client(), Reporter { controller: "selftest".into(), instance: None });
    let pod_ref = ObjectReference {
        kind: Some("Pod".into()),
        api_version: Some("v1".into()),
        namespace: Some("default".into()),
        name: Some("p".into()),
        ..Default::default()
    };
    let rt = RtEvent {
        type_: EventType::Normal,
        reason: "Preempted".into(),
        note: Some("n".into()),
        action: "Preempt".into(),
        secondary: None,
    };
    within(recorder.publish(&rt, &pod_ref)).await.unwrap();
    within(recorder.publish(&rt, &pod_ref)).await.unwrap();
    assert_eq!((fake.count("create", "Event"), fake.count("patch", "Event")), (2, 2));
    let new: Api<NewEvent> = Api::namespaced(fake.client(), "default");
    let listed = within(new.list(&ListParams::default())).await.unwrap().items;
    assert_eq!(listed.len(), 1, "the core event lives in its own store");
    assert_eq!(listed[0].series.as_ref().map(|s| s.count), Some(2));
    assert_eq!(fake.list("Event").len(), 2, "kind-based helpers see both");
    assert_eq!(within(core.list(&ListParams::default())).await.unwrap().items.len(), 1);
}

#[tokio::test]
async fn table_kinds_work_untyped_and_cluster_scoped() {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};

    let fake = FakeApi::start().await;
    let gvk = GroupVersionKind::gvk("scheduling.x-k8s.io", "v1alpha1", "PodGroup");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "podgroups");
    let groups: Api<DynamicObject> = Api::namespaced_with(fake.client(), "team", &ar);
    let pg: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": "pg"}, "spec": {"minMember": 3}}))
            .unwrap();
    within(groups.create(&PostParams::default(), &pg)).await.unwrap();
    let got = within(groups.get("pg")).await.unwrap();
    assert_eq!(got.data["spec"]["minMember"], 3);
    assert_eq!(fake.get("PodGroup", "team", "pg").unwrap()["metadata"]["namespace"], "team");
    assert!(fake
        .requests()
        .iter()
        .any(|(m, p, _)| m == "POST" && p == "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/team/podgroups"));

    let nodes: Api<Node> = Api::all(fake.client());
    let n: Node =
        serde_json::from_value(json!({"metadata": {"name": "n1", "namespace": "ignored", "labels": {"zone": "a"}}}))
            .unwrap();
    within(nodes.create(&PostParams::default(), &n)).await.unwrap();
    let stored = fake.get("Node", "", "n1").unwrap();
    assert!(stored["metadata"].get("namespace").is_none() && stored["kind"] == "Node");
    within(nodes.patch("n1", &PatchParams::default(), &Patch::Merge(json!({"spec": {"unschedulable": true}}))))
        .await
        .unwrap();
    assert_eq!(within(nodes.list(&ListParams::default().labels("zone in (a, b)"))).await.unwrap().items.len(), 1);
    assert_eq!(within(nodes.list(&ListParams::default().labels("zone notin (a)"))).await.unwrap().items.len(), 0);
    let deleted = within(nodes.delete("n1", &DeleteParams::default())).await.unwrap();
    assert!(deleted.left().is_some_and(|n| n.metadata.name.as_deref() == Some("n1")));
    assert!(fake.list("Node").is_empty());
}

#[tokio::test]
async fn streaming_lists_eviction_binding_and_delete_collection() {
    let fake = FakeApi::start().await;
    fake.seed(&[
        pod("a", json!({"x": "1"}), "Pending"),
        pod("b", json!({"x": "1"}), "Running"),
        pod("c", json!({}), "Running"),
    ]);
    let (seen, task) = follow(Api::all(fake.client()), watcher::Config::default().streaming_lists());
    eventually("synced from a streaming list", || seen.inits.load(Ordering::SeqCst) == 1).await;
    assert_eq!(seen.names(), ["a", "b", "c"]);
    assert_eq!(fake.count("list", "Pod"), 0);

    let pods: Api<Pod> = Api::namespaced(fake.client(), "default");
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "a"}, "target": {"kind": "Node", "name": "n1"}});
    let _: kube::core::Status =
        within(pods.create_subresource("binding", "a", &PostParams::default(), &binding)).await.unwrap();
    assert_eq!(fake.get("Pod", "default", "a").unwrap()["spec"]["nodeName"], "n1");

    within(pods.evict("c", &Default::default())).await.unwrap();
    eventually("c evicted", || seen.names() == ["a", "b"]).await;
    assert_eq!(fake.count("evict", "Pod"), 1);

    let gone =
        within(pods.delete_collection(&DeleteParams::default(), &ListParams::default().labels("x=1"))).await.unwrap();
    assert_eq!(gone.left().map(|l| names(&l.items)), Some(vec!["a".to_string(), "b".to_string()]));
    eventually("all gone", || seen.names().is_empty()).await;
    task.abort();
}

#[tokio::test]
async fn a_watch_ends_at_its_timeout_and_on_a_fault() {
    let fake = FakeApi::start().await;
    let pods: Api<Pod> = Api::all(fake.client());
    let t = Instant::now();
    let mut w = within(pods.watch(&WatchParams::default().timeout(1), "0")).await.unwrap().boxed();
    assert!(within(w.try_next()).await.unwrap().is_none());
    assert!(t.elapsed() >= Duration::from_millis(900));

    fake.fail("watch", "Pod", 500, 1);
    assert_eq!(code_of(within(pods.watch(&WatchParams::default(), "0")).await.map(|_| ())), 500);
}

#[test]
fn selector_and_patch_helpers() {
    use fake_api::patch::{json_patch, merge};
    use fake_api::selectors::{FieldSelector, LabelSelector};

    let o = json!({"metadata": {"name": "p", "labels": {"a": "b", "tier": "web"}}, "spec": {"nodeName": "n1", "priority": 5}, "status": {"phase": "Running"}});
    let l = |s: &str| LabelSelector::parse(s).unwrap().matches(&o);
    assert!(l("") && l("a=b") && l("a==b") && l("a") && l("!c") && l("c!=x") && l("a!=c"));
    assert!(l("tier in (web, db)") && l("tier notin (db)") && l("c notin (x)") && l("a=b,tier in (web),!c"));
    assert!(!l("a=c") && !l("c") && !l("!a") && !l("tier in (db)") && !l("tier notin (web,db)") && !l("a=b,c"));
    assert!(LabelSelector::parse("a b").is_err());
    let f = |s: &str| FieldSelector::parse(s).unwrap().matches(&o);
    assert!(
        f("status.phase!=Succeeded,status.phase!=Failed")
            && f("metadata.name=p")
            && f("spec.nodeName==n1")
            && f("spec.priority=5")
    );
    assert!(f("spec.missing=") && !f("spec.missing!=") && !f("status.phase=Pending"));
    assert!(FieldSelector::parse("nonsense").is_err());

    let mut d = json!({"a": {"b": 1, "c": 2}, "l": [1, 2]});
    merge(&mut d, &json!({"a": {"b": null, "d": 3}, "l": [9], "n": {"m": 1}}), false);
    assert_eq!(d, json!({"a": {"c": 2, "d": 3}, "l": [9], "n": {"m": 1}}));
    merge(&mut d, &json!({"$retainKeys": ["x"], "a": {"$patch": "replace"}}), true);
    assert_eq!(d["a"], json!({"c": 2, "d": 3}));

    let mut d = json!({"l": [1, 2, 3], "o": {"k~/": 1}});
    json_patch(&mut d, &json!([{"op": "add", "path": "/l/-", "value": 4}, {"op": "add", "path": "/l/0", "value": 0}, {"op": "replace", "path": "/l/4", "value": 5}, {"op": "remove", "path": "/o/k~0~1"}, {"op": "copy", "from": "/l/0", "path": "/o/z"}, {"op": "move", "from": "/o/z", "path": "/m"}])).unwrap();
    assert_eq!(d, json!({"l": [0, 1, 2, 3, 5], "o": {}, "m": 0}));
    let before = d.clone();
    assert!(json_patch(&mut d, &json!([{"op": "remove", "path": "/l/0"}, {"op": "remove", "path": "/nope"}])).is_err());
    assert_eq!(d, before, "all or nothing");
}
