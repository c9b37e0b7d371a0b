//! The preempt flow without HTTP (`service`): the view catching up with kube-scheduler,
//! an answer that waits for nothing else, and which pods to wake. Decisions are stand-ins:
//! what is tested is how many decisions a request needs.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use coloc_extender::cluster::{Objects, View, ViewCell};
use coloc_extender::model::RequeueIntent;
use coloc_extender::pipeline::{Answer, PreemptPart};
use coloc_extender::policy::{Mode, Policy};
use coloc_extender::service::{self, VIEW_CATCH_UP};
use coloc_extender::wake::Reason;

fn intent(uid: &str) -> RequeueIntent {
    RequeueIntent {
        namespace: "batch".into(),
        name: format!("pod-{uid}"),
        uid: uid.into(),
        node: "n1".into(),
        replacement: format!("pod-{uid}-rq"),
        attempt: 1,
        preemptor: "online/web".into(),
    }
}

/// An answer evicting the bare pods `bare`.
fn answer(bare: &[&str], view_behind: bool) -> Answer {
    Answer {
        body: b"{}".to_vec(),
        pod: "online/web".into(),
        pod_uid: "w".into(),
        explanations: Vec::new(),
        mode: Mode::Enforce,
        summary: String::new(),
        decided_at: 0,
        retry_at: None,
        preempt: Some(PreemptPart {
            requeues: bare.iter().map(|u| intent(u)).collect(),
            view_behind,
            discarded: None,
            promised: Vec::new(),
            expected: None,
        }),
        shadow: None,
    }
}

#[tokio::test]
async fn a_preempt_decided_on_a_view_behind_kube_scheduler_is_decided_again_once_it_catches_up() {
    let view = Arc::new(ViewCell::default());
    let calls = AtomicUsize::new(0);
    let publisher = {
        let view = view.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            view.publish(View::build(Objects::default(), &Policy::builtin_default().enforced()));
        })
    };
    let decide = || {
        let n = calls.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<_, ()>(answer(&[], n == 0)) }
    };
    let out = service::decide_caught_up(decide, Some(&*view)).await.unwrap();
    publisher.await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 2, "decided again after the view was published");
    assert!(!out.view_behind());
}

#[tokio::test]
async fn a_view_that_never_catches_up_is_answered_as_decided_within_the_bound() {
    let view = ViewCell::default();
    let calls = AtomicUsize::new(0);
    let decide = || {
        calls.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, ()>(answer(&[], true)) }
    };
    let started = Instant::now();
    let out = service::decide_caught_up(decide, Some(&view)).await.unwrap();
    assert!(out.view_behind() && calls.load(Ordering::SeqCst) == 1);
    assert!(started.elapsed() >= VIEW_CATCH_UP && started.elapsed() < VIEW_CATCH_UP * 20, "{:?}", started.elapsed());
}

#[tokio::test]
async fn bare_victims_are_answered_from_the_decision_alone() {
    // Requeue copies evicted pods on its own: the answer waits for no write.
    let calls = AtomicUsize::new(0);
    let decide = || {
        calls.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, ()>(answer(&["a", "b"], false)) }
    };
    let out = service::decide_caught_up(decide, None).await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(out.requeues().len(), 2);
}

#[test]
fn a_preempt_answered_in_doubt_asks_for_a_wake() {
    let fine = answer(&[], false);
    assert_eq!(service::wake_reason(None, true), Some(Reason::PreemptFailed));
    assert_eq!(service::wake_reason(Some(&fine), false), Some(Reason::ViewNotReady));
    assert_eq!(service::wake_reason(Some(&fine), true), None);
}

/// An enforced answer from preemptor `uid` promising it `nodes` at `at`.
fn promising(uid: &str, nodes: &[&str], at: i64, mode: Mode) -> Answer {
    use coloc_extender::decide::promised::PromisedRoom;
    let pod = coloc_extender::model::Pod { uid: uid.into(), name: uid.into(), ..Default::default() };
    let mut a = answer(&[], false);
    a.pod_uid = uid.into();
    a.mode = mode;
    if mode == Mode::Enforce {
        a.preempt.as_mut().unwrap().promised =
            nodes.iter().map(|n| PromisedRoom { node: n.to_string(), pod: pod.clone(), victims: vec![], at }).collect();
    }
    a
}

#[test]
fn a_promise_holds_for_a_few_seconds_and_a_preemptor_holds_only_its_latest() {
    let promises = service::Promises::default();
    promises.record(&promising("web-1", &["n1"], 100, Mode::Enforce));
    promises.record(&promising("web-2", &["n2"], 101, Mode::Enforce));
    let nodes = |now| promises.current(now).iter().map(|p| (p.pod.uid.clone(), p.node.clone())).collect::<Vec<_>>();
    assert_eq!(nodes(101), [("web-1".into(), "n1".into()), ("web-2".into(), "n2".into())]);
    // web-1 asked again and was answered n3: n1 is no longer held for it.
    promises.record(&promising("web-1", &["n3"], 102, Mode::Enforce));
    assert_eq!(nodes(102), [("web-2".into(), "n2".into()), ("web-1".into(), "n3".into())]);
    // Past PROMISE_HOLDS, nothing is held.
    assert!(nodes(102 + service::PROMISE_HOLDS + 1).is_empty());
    // A shadow answer (kube-scheduler's own) promises nothing.
    promises.record(&promising("web-3", &["n4"], 200, Mode::Shadow));
    assert!(nodes(200).is_empty());
}

mod shadow {
    //! In shadow mode kube-scheduler waits for its own answer only: the policy's decision,
    //! which explains and counts, is made after it is sent, a bounded number at a time.

    use super::*;
    use arc_swap::ArcSwap;
    use coloc_extender::cluster::snapshot;
    use coloc_extender::pipeline::Verb;
    use coloc_extender::service::{Request, Service, Sources, SHADOW_DECISIONS};
    use coloc_extender::wire::Caps;
    use coloc_extender::workers::{Cancel, Workers};

    const PAYLOADS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/payloads/r2-nodecache-true");

    fn shadow() -> Policy {
        let mut p = Policy::builtin_default();
        p.mode = Mode::Shadow;
        p
    }

    fn request(workers: &Arc<Workers>, view: &Arc<ViewCell>) -> Request {
        request_of(Verb::Preempt, "0037-preempt.json", workers, view)
    }

    fn request_of(verb: Verb, payload: &str, workers: &Arc<Workers>, view: &Arc<ViewCell>) -> Request {
        let body = std::fs::read(format!("{PAYLOADS}/{payload}")).unwrap();
        Request {
            verb,
            body: body.into(),
            sources: Sources {
                policy: Arc::new(ArcSwap::from_pointee(shadow())),
                view: view.clone(),
                view_expected: true,
                clock: Arc::new(|| 1_700_000_000),
                requeue: false,
                caps: Caps::default(),
                workers: workers.clone(),
            },
            on_workers: false,
            hold: Arc::new(()),
            cancel: Cancel::default(),
            ready: true,
        }
    }

    fn watched_view() -> Arc<ViewCell> {
        let view = Arc::new(ViewCell::default());
        let objects = snapshot::parse(&std::fs::read(format!("{PAYLOADS}/0037-preempt.snapshot.json")).unwrap());
        view.publish(View::build(objects.unwrap(), &shadow()));
        view
    }

    fn json(bytes: &[u8]) -> serde_json::Value {
        serde_json::from_slice(bytes).unwrap()
    }

    #[tokio::test]
    async fn kube_schedulers_own_answer_is_sent_before_the_policy_decides() {
        let (workers, view) = (Arc::new(Workers::new(1).unwrap()), watched_view());
        let service = Service::new(Some(view.clone()), None);
        let answered = service.respond(request(&workers, &view)).await.unwrap();
        let sent = json(&answered.sent.body);
        let asked = json(&std::fs::read(format!("{PAYLOADS}/0037-preempt.json")).unwrap());
        for (node, victims) in asked["NodeNameToMetaVictims"].as_object().unwrap() {
            let uids = |v: &serde_json::Value| -> Vec<String> {
                v["Pods"].as_array().unwrap().iter().map(|p| p["UID"].as_str().unwrap().to_string()).collect()
            };
            assert_eq!(
                uids(&sent["NodeNameToMetaVictims"][node]),
                uids(victims),
                "{node}: kube-scheduler's own victims"
            );
        }
        assert!(
            answered.sent.explanations.is_empty(),
            "nothing decided before the answer: {:?}",
            answered.sent.explanations
        );
        let later = answered.later.expect("the policy's decision follows");
        let decided = later.decision.await.unwrap();
        assert_eq!(decided.mode, Mode::Shadow);
        assert!(!decided.explanations.is_empty(), "the policy's decision is explained");
        assert_eq!(decided.body, answered.sent.body, "and would have sent the same");
    }

    #[tokio::test]
    async fn kube_schedulers_own_answer_is_refused_where_the_decision_would_refuse_the_body() {
        // A full victim on a node the view does not know is read whole, by the decision and
        // by the answer sent before it: a malformed spec is an error, not an echo.
        let (workers, view) = (Arc::new(Workers::new(1).unwrap()), watched_view());
        let service = Service::new(Some(view.clone()), None);
        let asked = json(&std::fs::read(format!("{PAYLOADS}/0037-preempt.json")).unwrap());
        let victim = serde_json::json!({"metadata": {"name": "v", "namespace": "batch", "uid": "u-v"},
            "spec": {"nodeName": "node-unknown", "containers": "not a list"}});
        let body = serde_json::json!({"Pod": asked["Pod"],
            "NodeNameToVictims": {"node-unknown": {"Pods": [victim], "NumPDBViolations": 0}}});
        let mut request = request(&workers, &view);
        request.body = serde_json::to_vec(&body).unwrap().into();
        let refused = service.respond(request).await;
        assert!(refused.is_err(), "a body the decision refuses is refused in shadow mode too");
    }

    #[tokio::test]
    async fn a_request_arriving_while_every_background_decision_of_its_verb_is_busy_goes_unexplained() {
        let (workers, view) = (Arc::new(Workers::new(1).unwrap()), watched_view());
        let service = Service::new(Some(view.clone()), None);
        let mut busy = Vec::new();
        for _ in 0..SHADOW_DECISIONS {
            busy.push(service.respond(request(&workers, &view)).await.unwrap().later.expect("a slot is free"));
        }
        let answered = service.respond(request(&workers, &view)).await.unwrap();
        assert!(answered.later.is_none(), "no slot: answered, not decided");
        let filter = service.respond(request_of(Verb::Filter, "0001-filter.json", &workers, &view)).await.unwrap();
        assert!(filter.later.is_some(), "a filter does not wait for the preempts' slots");
        drop(busy);
        let answered = service.respond(request(&workers, &view)).await.unwrap();
        assert!(answered.later.is_some(), "the slots are back once the decisions end");
    }
}
