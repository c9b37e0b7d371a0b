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
use coloc_extender::decide::Context;
use coloc_extender::events::kube::{reporter, EventSink, REPORTER};
use coloc_extender::events::{for_last_resort, for_preempt, PodEvent, Regarding, Throttle};
use coloc_extender::http::router;
use coloc_extender::http::state::{AppState, ViewSource};
use coloc_extender::pipeline::{answer, Answer, Verb};
use coloc_extender::policy::Policy;
use coloc_extender::wire::Bounds;
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
    decided_under(&Policy::builtin_default().enforced(), step, requeue)
}

/// The default policy, but class batch protects its bare pods.
fn batch_protects_bare_pods() -> Policy {
    let text = include_str!("../policy/default.yaml");
    let protect = text.replacen("bare: requeue          # bare pods", "bare: protect          # bare pods", 1);
    assert_ne!(protect, text);
    Policy::from_yaml(&protect).unwrap().enforced()
}

fn decided_under(policy: &Policy, step: &str, requeue: bool) -> Answer {
    let view = View::build(snapshot::parse(&fixture(&format!("{step}-preempt.snapshot.json"))).unwrap(), policy);
    let ctx = Context::new(policy, Some(&view), 1_795_000_000).with_requeue(requeue);
    answer(Verb::Preempt, &fixture(&format!("{step}-preempt.json")), &ctx, &Bounds::default()).unwrap()
}

#[test]
fn no_node_left_gives_one_warning_with_the_reason_per_node() {
    // online-gpu: the only candidate's room is held by bare batch pods, and batch protects
    // them.
    let e = preempt_event(&decided_under(&batch_protects_bare_pods(), "0041", true)).unwrap();
    assert!(e.warning);
    assert_eq!((e.namespace.as_str(), e.name.as_str(), e.reason), ("online", "online-gpu", "PreemptionBlocked"));
    assert!(!e.uid.is_empty());
    assert_eq!(e.note, "coloc-extender: no node can make room under the policy: 1 node: only bare pods could make room (their class protects them)");
}

#[test]
fn a_victim_of_last_resort_gives_a_warning_on_the_pod_and_on_its_namespace() {
    // online-gpu: the only candidate's room is held by a bare batch pod, and requeue is
    // off: the pod is placed, the bare one lost.
    let a = decided("0041", false);
    let victims = preempt_event(&a).unwrap();
    assert_eq!((victims.warning, victims.reason), (false, "PreemptionVictims"));
    assert!(
        victims.note.contains("batch/gpu-batch-2 (bare pod that cannot be requeued, lost: a last resort)"),
        "{}",
        victims.note
    );
    let lost = for_last_resort(&a.pod, &a.explanations);
    let on: Vec<(Regarding, &str, &str, bool, &str)> =
        lost.iter().map(|e| (e.regarding, e.namespace.as_str(), e.name.as_str(), e.warning, e.reason)).collect();
    assert_eq!(
        on,
        [
            (Regarding::Pod, "batch", "gpu-batch-2", true, "LastResortVictim"),
            (Regarding::Namespace, "batch", "batch", true, "LastResortVictim"),
        ]
    );
    assert!(lost[0].note.contains("to place online/online-gpu, as a last resort, and lost"), "{}", lost[0].note);
    assert!(lost[0].note.contains("requeue is off or cannot store copies"), "{}", lost[0].note);
    assert!(lost[1].note.contains("1 bare pod(s) here") && lost[1].note.contains("gpu-batch-2"), "{}", lost[1].note);
    // With requeue on, the same pod is requeued: nothing is lost, nothing to warn of.
    assert!(for_last_resort(&a.pod, &decided("0041", true).explanations).is_empty());
}

#[test]
fn an_offline_pod_blocked_by_bare_pods_requeue_cannot_bring_back_is_told_so() {
    use coloc_extender::explanation::{Code, Explanation, Verdict};
    let ex = vec![
        Explanation::pod("a", "plain/x", Verdict::Spared, Code::CannotRequeue, ""),
        Explanation::node("a", Verdict::Dropped, Code::DoesNotFit, ""),
    ];
    assert_eq!(
        coloc_extender::events::vetoes(&ex),
        "1 node: only bare pods requeue cannot bring back could make room (only an online pod takes them)"
    );
}

#[test]
fn a_namespace_not_opted_in_is_told_what_to_label() {
    use coloc_extender::explanation::{Code, Explanation, LostReason, Verdict};
    let ex = vec![
        Explanation::node("n1", Verdict::Kept, Code::Selected, "rank 1 of the candidates"),
        Explanation::pod("n1", "plain/a", Verdict::Victim, Code::LastResort, "…")
            .lost_for(LostReason::NamespaceNotOptedIn),
        Explanation::pod("n1", "plain/b", Verdict::Victim, Code::LastResort, "…")
            .lost_for(LostReason::NamespaceNotOptedIn),
        // On a node not returned: no victim, no Event.
        Explanation::pod("n2", "other/c", Verdict::Victim, Code::LastResort, "…")
            .lost_for(LostReason::NamespaceNotOptedIn),
    ];
    let events = for_last_resort("online/web", &ex);
    let names: Vec<(Regarding, &str)> = events.iter().map(|e| (e.regarding, e.name.as_str())).collect();
    assert_eq!(names, [(Regarding::Pod, "a"), (Regarding::Pod, "b"), (Regarding::Namespace, "plain")]);
    let said = &events[2].note;
    assert!(said.contains("2 bare pod(s) here") && said.contains("a, b"), "{said}");
    assert!(said.contains("has not opted in") && said.contains("coloc-extender.io/requeue=enabled"), "{said}");
}

#[test]
fn chosen_victims_give_a_normal_event_naming_them_and_why() {
    let e = preempt_event(&decided("0037", false)).unwrap();
    assert!(!e.warning);
    assert_eq!(e.reason, "PreemptionVictims");
    // How soon first (the recorded pods declare a grace of 0: they go at once), then who.
    assert!(e.note.starts_with("coloc-extender: room free on node-a2 in ~0.0 s"), "{}", e.note);
    assert!(e.note.contains("kube-scheduler's own choice: node-gpu1 in"), "{}", e.note);
    assert!(e.note.contains("; victims node-a2: batch/"), "{}", e.note);
    assert!(e.note.contains("recreated by its controller") || e.note.contains("violates its PDB"), "{}", e.note);
    assert!(!e.note.contains("node-c1"), "only the returned node's victims: {}", e.note);
}

#[test]
fn vetoes_are_grouped_by_reason_most_frequent_first() {
    use coloc_extender::explanation::{Code, Explanation, Verdict};
    let ex = vec![
        Explanation::pod("a", "b/x", Verdict::Spared, Code::NotRecreatable, ""),
        Explanation::node("a", Verdict::Dropped, Code::DoesNotFit, ""),
        Explanation::pod("b", "b/y", Verdict::Spared, Code::NotRecreatable, ""),
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
        "2 nodes: only bare pods could make room (their class protects them); 1 node: strict PDB batch/offline-worker-pdb"
    );
}

fn event(note: &str) -> PodEvent {
    PodEvent {
        regarding: Regarding::Pod,
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
    for _ in 0..500 {
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

/// A router answering with `policy` over the 0041 snapshot (requeue off), its Events
/// written by `sink`.
fn router_with(policy: Policy, sink: &Arc<EventSink>) -> axum::Router {
    let view = Arc::new(ViewCell::default());
    view.publish(View::build(snapshot::parse(&fixture("0041-preempt.snapshot.json")).unwrap(), &policy));
    let mut state = AppState::new(policy, view, ViewSource::Snapshot);
    state.events = Some(sink.clone());
    router(state, "", decision_workers())
}

async fn preempt_0041(app: axum::Router) {
    let req = Request::post("/preempt")
        .header("content-type", "application/json")
        .body(Body::from(fixture("0041-preempt.json")))
        .unwrap();
    assert_eq!(app.oneshot(req).await.unwrap().status(), StatusCode::OK);
}

#[tokio::test]
async fn a_preempt_through_the_router_leaves_a_warning_on_the_pod_without_waiting_for_it() {
    let api = FakeApi::start().await;
    // Every event write takes 3 s: the answer must not wait for it.
    api.delay("create", "*", Duration::from_secs(3));
    let policy = Policy::builtin_default().enforced();
    let clock = AppState::new(policy.clone(), Arc::new(ViewCell::default()), ViewSource::None).clock;
    let sink = Arc::new(EventSink::start(api.client(), reporter(None), Throttle::new(30, 600, 100), clock));
    let started = std::time::Instant::now();
    preempt_0041(router_with(batch_protects_bare_pods(), &sink)).await;
    assert!(started.elapsed() < Duration::from_secs(2), "the answer waited for the event write");
    api.clear_faults();
    let found = eventually(&api, 1).await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["regarding"]["name"], "online-gpu");
    assert!(
        found[0]["note"].as_str().unwrap().contains("only bare pods could make room (their class protects them)"),
        "{}",
        found[0]["note"]
    );
}

#[tokio::test]
async fn an_enforced_answer_naming_a_victim_of_last_resort_warns_on_it_and_its_namespace_and_shadow_writes_nothing() {
    let api = FakeApi::start().await;
    let policy = Policy::builtin_default().enforced();
    let clock = AppState::new(policy.clone(), Arc::new(ViewCell::default()), ViewSource::None).clock;
    // Nothing throttled: an Event offered twice is written twice.
    let sink = Arc::new(EventSink::start(api.client(), reporter(None), Throttle::new(0, 0, 100), clock));
    let shadow =
        Policy::from_yaml(&include_str!("../policy/default.yaml").replacen("mode: enforce", "mode: shadow", 1))
            .unwrap();
    preempt_0041(router_with(shadow, &sink)).await;
    preempt_0041(router_with(policy, &sink)).await;
    // One writer, in order: once an Event offered last is written, every earlier one is.
    sink.offer(event("sentinel"));
    let mut found = eventually(&api, 4).await;
    for _ in 0..500 {
        if found.iter().any(|e| e["note"] == "sentinel") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        found = events_in(&api);
    }
    found.retain(|e| e["note"] != "sentinel");
    let mut said: Vec<(&str, &str, &str, &str)> = found
        .iter()
        .map(|e| {
            let r = &e["regarding"];
            (
                e["type"].as_str().unwrap(),
                e["reason"].as_str().unwrap(),
                r["kind"].as_str().unwrap(),
                r["name"].as_str().unwrap(),
            )
        })
        .collect();
    said.sort();
    assert_eq!(
        said,
        [
            ("Normal", "PreemptionVictims", "Pod", "online-gpu"),
            ("Warning", "LastResortVictim", "Namespace", "batch"),
            ("Warning", "LastResortVictim", "Pod", "gpu-batch-2"),
        ],
        "{found:?}"
    );
}

/// The decision workers `serve` starts beside the router.
fn decision_workers() -> std::sync::Arc<coloc_extender::workers::Workers> {
    std::sync::Arc::new(coloc_extender::workers::Workers::new(1).unwrap())
}
