//! The preempt flow without HTTP (`service`): the view catching up with kube-scheduler, the
//! rounds of "decide, store the replacements", giving requeue up, and which pods to wake.
//! Decisions and the store are stand-ins: what is tested is how many decisions a request
//! needs and with what.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use coloc_extender::cluster::{Objects, View, ViewCell};
use coloc_extender::pipeline::{Answer, PreemptPart};
use coloc_extender::policy::{Mode, Policy};
use coloc_extender::requeue::RequeueIntent;
use coloc_extender::service::{self, Failed, ReplacementStore, REQUEUE_ROUNDS, VIEW_CATCH_UP};
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

/// An answer evicting the bare pods `bare` (each needing its replacement stored).
fn answer(bare: &[&str], view_behind: bool) -> Answer {
    Answer {
        body: b"{}".to_vec(),
        pod: "online/web".into(),
        pod_uid: "w".into(),
        explanations: Vec::new(),
        mode: Mode::Enforce,
        summary: String::new(),
        decided_at: 0,
        preempt: Some(PreemptPart {
            requeues: bare.iter().map(|u| intent(u)).collect(),
            requeue_gave_up: false,
            view_behind,
            discarded: None,
        }),
        shadow: None,
    }
}

/// Stores every replacement but those it is told to fail.
#[derive(Default)]
struct Store {
    failing: Vec<&'static str>,
    stored: Mutex<Vec<String>>,
}

impl ReplacementStore for Store {
    fn preempt_seen(&self) {}

    async fn store_all(&self, intents: &[RequeueIntent], _budget: Duration) -> BTreeMap<String, String> {
        let mut failed = BTreeMap::new();
        for i in intents {
            if self.failing.contains(&i.uid.as_str()) {
                failed.insert(i.uid.clone(), "refused".to_string());
            } else {
                self.stored.lock().unwrap().push(i.uid.clone());
            }
        }
        failed
    }
}

const NO_STORE: Option<(&Store, Duration)> = None;

#[tokio::test]
async fn a_preempt_decided_on_a_view_behind_kube_scheduler_is_decided_again_once_it_catches_up() {
    let view = Arc::new(ViewCell::default());
    let calls = AtomicUsize::new(0);
    let publisher = {
        let view = view.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            view.publish(View::build(Objects::default(), &Policy::builtin_default()));
        })
    };
    let decide = |_: Option<Failed>| {
        let n = calls.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<_, ()>(answer(&[], n == 0)) }
    };
    let out = service::preempt(decide, Some(&*view), NO_STORE).await.unwrap();
    publisher.await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 2, "decided again after the view was published");
    assert!(!out.view_behind());
}

#[tokio::test]
async fn a_view_that_never_catches_up_is_answered_as_decided_within_the_bound() {
    let view = ViewCell::default();
    let calls = AtomicUsize::new(0);
    let decide = |_: Option<Failed>| {
        calls.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, ()>(answer(&[], true)) }
    };
    let started = Instant::now();
    let out = service::preempt(decide, Some(&view), NO_STORE).await.unwrap();
    assert!(out.view_behind() && calls.load(Ordering::SeqCst) == 1);
    assert!(started.elapsed() >= VIEW_CATCH_UP && started.elapsed() < VIEW_CATCH_UP * 20, "{:?}", started.elapsed());
}

#[tokio::test]
async fn bare_victims_are_answered_once_their_replacements_are_stored() {
    let store = Store::default();
    let seen: Mutex<Vec<Option<Failed>>> = Mutex::new(Vec::new());
    let decide = |requeue: Option<Failed>| {
        seen.lock().unwrap().push(requeue);
        async { Ok::<_, ()>(answer(&["a", "b"], false)) }
    };
    let out = service::preempt(decide, None, Some((&store, Duration::from_secs(1)))).await.unwrap();
    assert_eq!(*store.stored.lock().unwrap(), ["a", "b"]);
    assert_eq!(out.requeues().len(), 2);
    assert!(!out.requeue_gave_up());
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].as_ref().is_some_and(|f| f.is_empty()), "decided with requeue on, nothing failed yet");
}

#[tokio::test]
async fn a_victim_whose_replacement_fails_is_spared_in_the_next_round() {
    let store = Store { failing: vec!["a"], ..Default::default() };
    let seen: Mutex<Vec<Option<Failed>>> = Mutex::new(Vec::new());
    let decide = |requeue: Option<Failed>| {
        // Spares a failed pod, as the decision does: then only b is a victim.
        let spared_a = requeue.as_ref().is_some_and(|f| f.contains_key("a"));
        seen.lock().unwrap().push(requeue);
        async move { Ok::<_, ()>(answer(if spared_a { &["b"] } else { &["a", "b"] }, false)) }
    };
    let out = service::preempt(decide, None, Some((&store, Duration::from_secs(1)))).await.unwrap();
    assert_eq!(seen.lock().unwrap().len(), 2);
    assert_eq!(out.requeues().iter().map(|i| i.uid.as_str()).collect::<Vec<_>>(), ["b"]);
    assert!(!out.requeue_gave_up());
}

#[tokio::test]
async fn replacements_that_keep_failing_give_requeue_up_for_this_preempt() {
    let store = Store { failing: vec!["a", "b", "c", "d"], ..Default::default() };
    let round = AtomicUsize::new(0);
    let seen: Mutex<Vec<Option<Failed>>> = Mutex::new(Vec::new());
    let decide = |requeue: Option<Failed>| {
        let n = round.fetch_add(1, Ordering::SeqCst);
        let off = requeue.is_none();
        seen.lock().unwrap().push(requeue);
        // Each round finds another bare victim, whose store fails too; requeue off, none.
        let victim = ["a", "b", "c", "d"][n.min(3)];
        async move { Ok::<_, ()>(answer(if off { &[] } else { std::slice::from_ref(&victim) }, false)) }
    };
    let out = service::preempt(decide, None, Some((&store, Duration::from_secs(1)))).await.unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), REQUEUE_ROUNDS + 1, "the rounds, then once with requeue off");
    assert!(seen.last().unwrap().is_none());
    assert!(out.requeue_gave_up() && out.requeues().is_empty());
}

#[tokio::test]
async fn no_time_left_in_the_budget_counts_as_a_failed_store() {
    let store = Store::default();
    let decide = |requeue: Option<Failed>| {
        let spared = requeue.as_ref().is_some_and(|f| f.get("a").is_some_and(|why| why.contains("no time left")));
        async move { Ok::<_, ()>(answer(if spared { &[] } else { &["a"] }, false)) }
    };
    let out = service::preempt(decide, None, Some((&store, Duration::ZERO))).await.unwrap();
    assert!(store.stored.lock().unwrap().is_empty(), "nothing stored without time");
    assert!(out.requeues().is_empty() && !out.requeue_gave_up());
}

#[test]
fn a_preempt_answered_in_doubt_asks_for_a_wake() {
    let fine = answer(&[], false);
    let mut gave_up = answer(&[], false);
    gave_up.preempt.get_or_insert_with(Default::default).requeue_gave_up = true;
    assert_eq!(service::wake_reason(None, true), Some(Reason::PreemptFailed));
    assert_eq!(service::wake_reason(Some(&fine), false), Some(Reason::ViewNotReady));
    assert_eq!(service::wake_reason(Some(&gave_up), true), Some(Reason::RequeueUnavailable));
    assert_eq!(service::wake_reason(Some(&fine), true), None);
}
