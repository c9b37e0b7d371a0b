//! Reasons on the pod: the Event a preempt answer deserves, throttled per pod, written
//! through kube-rs's recorder to a loopback fake API server, never on the answer's path.

mod fake_api;

use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use coloc_extender::cluster::{snapshot, View, ViewCell};
use coloc_extender::decide::{Context, Requeue};
use coloc_extender::events::kube::{reporter, EventSink, REPORTER};
use coloc_extender::events::{for_preempt, PodEvent, Throttle};
use coloc_extender::http::{router, AppState, ViewSource};
use coloc_extender::pipeline::{answer_in, Answer, Verb};
use coloc_extender::policy::Policy;
use fake_api::FakeApi;
use serde_json::Value;
use tower::ServiceExt;

const ROUND: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/payloads/r1-nodecache-false");

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(Path::new(ROUND).join(name)).unwrap()
}

fn preempt_event(a: &Answer) -> Option<PodEvent> {
    for_preempt(&a.pod, &a.pod_uid, &a.explanations)
}

fn decided(step: &str, requeue: bool) -> Answer {
    let policy = Policy::builtin_default();
    let view = View::build(snapshot::parse(&fixture(&format!("{step}-preempt.snapshot.json"))).unwrap(), &policy);
    let ctx = Context {
        policy: &policy,
        view: Some(&view),
        view_expected: true,
        now: 1_795_000_000,
        requeue: if requeue { Requeue::enabled() } else { Requeue::disabled() },
        detail: Default::default(),
    };
    answer_in(Verb::Preempt, &fixture(&format!("{step}-preempt.json")), &ctx).unwrap()
}

#[test]
fn no_node_left_gives_one_warning_with_the_reason_per_node() {
    // online-gpu: the only candidate's room is held by bare batch pods, requeue is off.
    let e = preempt_event(&decided("0041", false)).unwrap();
    assert!(e.warning);
    assert_eq!((e.namespace.as_str(), e.name.as_str(), e.reason), ("online", "online-gpu", "PreemptionBlocked"));
    assert!(!e.uid.is_empty());
    assert_eq!(e.note, "coloc-extender: no node can make room under the policy: 1 node: only bare pods could make room (requeue disabled)");
}

#[test]
fn chosen_victims_give_a_normal_event_naming_them_and_why() {
    let e = preempt_event(&decided("0037", false)).unwrap();
    assert!(!e.warning);
    assert_eq!(e.reason, "PreemptionVictims");
    assert!(e.note.starts_with("coloc-extender: victims node-a2: batch/"), "{}", e.note);
    assert!(e.note.contains("recreated by its controller") || e.note.contains("violates its PDB"), "{}", e.note);
    assert!(!e.note.contains("node-c1"), "only the returned node's victims: {}", e.note);
}

#[test]
fn vetoes_are_grouped_by_reason_most_frequent_first() {
    use coloc_extender::decide::{Code, Explanation, Verdict};
    let ex = vec![
        Explanation::pod("a", "b/x", Verdict::Spared, Code::RequeueDisabled, ""),
        Explanation::node("a", Verdict::Dropped, Code::DoesNotFit, ""),
        Explanation::pod("b", "b/y", Verdict::Spared, Code::RequeueDisabled, ""),
        Explanation::node("b", Verdict::Dropped, Code::DoesNotFit, ""),
        Explanation::node(
            "c",
            Verdict::Dropped,
            Code::PdbStrict,
            "the preemptor needs batch/w-1 evicted, which exceeds PDB batch/offline-worker-pdb (disruptionsAllowed 2)",
        ),
    ];
    assert_eq!(
        coloc_extender::events::vetoes(&ex),
        "2 nodes: only bare pods could make room (requeue disabled); 1 node: strict PDB batch/offline-worker-pdb"
    );
}

#[test]
fn a_node_blocked_by_a_namespace_not_opted_in_says_what_to_label() {
    use coloc_extender::decide::{Code, Explanation, Verdict};
    let ex = vec![
        Explanation::pod("a", "team-a/x", Verdict::Spared, Code::RequeueNotOptedIn, ""),
        Explanation::node("a", Verdict::Dropped, Code::DoesNotFit, ""),
    ];
    let said = coloc_extender::events::vetoes(&ex);
    assert!(said.contains("has not opted in") && said.contains("coloc-extender.io/requeue=enabled"), "{said}");
}

fn event(note: &str) -> PodEvent {
    PodEvent {
        namespace: "online".into(),
        name: "web".into(),
        uid: "u1".into(),
        warning: true,
        reason: "PreemptionBlocked",
        action: "Preempt",
        note: note.into(),
    }
}

#[test]
fn a_pod_retrying_every_10s_writes_once_and_a_change_waits_for_the_interval() {
    let mut t = Throttle::new(30, 600, 100);
    assert!(t.admit(&event("a"), 0));
    for now in (10..600).step_by(10) {
        assert!(!t.admit(&event("a"), now), "repeat at {now}s");
    }
    assert!(t.admit(&event("a"), 600), "an unchanged story is told again after repeat_after");
    assert!(!t.admit(&event("b"), 610), "a change waits min_interval");
    assert!(t.admit(&event("b"), 630));
    // Bounded: a full table admits new pods only once old entries expire.
    let mut t = Throttle::new(30, 600, 2);
    let other = |n: &str| PodEvent { name: n.into(), ..event("a") };
    assert!(t.admit(&other("p1"), 0) && t.admit(&other("p2"), 0));
    assert!(!t.admit(&other("p3"), 1));
    assert!(t.admit(&other("p3"), 601));
}

fn events_in(api: &FakeApi) -> Vec<Value> {
    api.list("Event").into_iter().filter(|e| e["reportingController"] == REPORTER).collect()
}

async fn eventually(api: &FakeApi, n: usize) -> Vec<Value> {
    for _ in 0..100 {
        let found = events_in(api);
        if found.len() >= n {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    events_in(api)
}

#[tokio::test]
async fn events_reach_the_api_server_deduplicated_and_a_failed_write_is_only_counted() {
    let api = FakeApi::start().await;
    let now = Arc::new(AtomicI64::new(1_000));
    let clock = {
        let now = now.clone();
        Arc::new(move || now.load(Ordering::SeqCst))
    };
    let sink = EventSink::start(api.client(), reporter(Some("replica-1".into())), Throttle::new(30, 600, 100), clock);
    for _ in 0..5 {
        sink.offer(event("coloc-extender: no node can make room"));
    }
    let found = eventually(&api, 1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(events_in(&api).len(), 1, "{found:?}");
    let e = &found[0];
    assert_eq!(e["type"], "Warning");
    assert_eq!(e["reason"], "PreemptionBlocked");
    assert_eq!(e["note"], "coloc-extender: no node can make room");
    assert_eq!(e["regarding"]["uid"], "u1");
    assert_eq!(e["regarding"]["name"], "web");
    assert_eq!(e["reportingInstance"], "replica-1");

    // The API server refuses once: logged and counted, the next change is written.
    api.fail("create", "*", 500, 1);
    now.fetch_add(31, Ordering::SeqCst);
    sink.offer(event("changed"));
    now.fetch_add(31, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(200)).await;
    sink.offer(event("changed again"));
    let found = eventually(&api, 2).await;
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found.iter().any(|e| e["note"] == "changed again"));
}

#[tokio::test]
async fn a_preempt_through_the_router_leaves_a_warning_on_the_pod_without_waiting_for_it() {
    let api = FakeApi::start().await;
    // Every event write takes 3 s: the answer must not wait for it.
    api.delay("create", "*", Duration::from_secs(3));
    let policy = Policy::builtin_default();
    let view = Arc::new(ViewCell::default());
    view.publish(View::build(snapshot::parse(&fixture("0041-preempt.snapshot.json")).unwrap(), &policy));
    let mut state = AppState::new(policy, view, ViewSource::Snapshot);
    state.events = Some(Arc::new(EventSink::start(
        api.client(),
        reporter(None),
        Throttle::new(30, 600, 100),
        state.clock.clone(),
    )));
    let app = router(state, "");
    let started = std::time::Instant::now();
    let req = Request::post("/preempt")
        .header("content-type", "application/json")
        .body(Body::from(fixture("0041-preempt.json")))
        .unwrap();
    let resp = app.oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(started.elapsed() < Duration::from_secs(2), "the answer waited for the event write");
    api.clear_faults();
    let mut found = Vec::new();
    for _ in 0..100 {
        found = events_in(&api);
        if !found.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["regarding"]["name"], "online-gpu");
    assert!(
        found[0]["note"].as_str().unwrap().contains("only bare pods could make room (requeue disabled)"),
        "{}",
        found[0]["note"]
    );
}
