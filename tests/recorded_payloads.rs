//! The payloads a real kube-scheduler v1.35 sent (tests/fixtures/payloads, both
//! nodeCacheCapable modes), answered through the same data path `serve` and `replay`
//! use, against answers worked out by hand for each policy.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use coloc_extender::cluster::{snapshot, View};
use coloc_extender::explanation::{Explanation, LostReason};
use coloc_extender::pipeline::{replay, Verb};
use coloc_extender::policy::Policy;
use coloc_extender::wire::Bounds;
use rstest::rstest;
use serde_json::Value;

/// Shortly after the recording.
const NOW: &str = "2026-11-21T19:00:00Z";

fn now() -> i64 {
    NOW.parse::<jiff::Timestamp>().unwrap().as_second()
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/payloads")
}

fn policy(name: &str) -> Policy {
    match name {
        "default" => Policy::builtin_default().enforced(),
        other => Policy::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join(other)).unwrap(),
    }
}

struct Recorded {
    request: Vec<u8>,
    snapshot: PathBuf,
}

fn preempt_request(round: &str, seq: &str) -> Recorded {
    let dir = fixtures().join(round);
    Recorded {
        request: std::fs::read(dir.join(format!("{seq}-preempt.json"))).unwrap(),
        snapshot: dir.join(format!("{seq}-preempt.snapshot.json")),
    }
}

/// Pod names by UID, from the snapshot taken with the request.
fn names(snapshot_path: &Path) -> HashMap<String, String> {
    let v: Value = serde_json::from_slice(&std::fs::read(snapshot_path).unwrap()).unwrap();
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["kind"] == "Pod")
        .map(|p| {
            (p["metadata"]["uid"].as_str().unwrap().to_string(), p["metadata"]["name"].as_str().unwrap().to_string())
        })
        .collect()
}

type Victims = BTreeMap<String, (Vec<String>, i64)>;

/// Runs preempt and returns node → (victim names in answer order, NumPDBViolations),
/// plus the (verdict, node, code) triples of the explanation.
fn run_preempt(rec: &Recorded, policy: &Policy, with_view: bool) -> (Victims, Vec<(String, String, String)>) {
    let view = with_view.then(|| View::build(snapshot::load(&rec.snapshot).unwrap(), policy));
    run_preempt_in(rec, policy, view.as_ref())
}

fn run_preempt_in(rec: &Recorded, policy: &Policy, view: Option<&View>) -> (Victims, Vec<(String, String, String)>) {
    let a = replay(Verb::Preempt, &rec.request, policy, view, now()).unwrap();
    let body: Value = serde_json::from_slice(&a.body).unwrap();
    let names = names(&rec.snapshot);
    let victims = body["NodeNameToMetaVictims"]
        .as_object()
        .expect("preempt always answers NodeNameToMetaVictims")
        .iter()
        .map(|(node, v)| {
            let pods =
                v["Pods"].as_array().unwrap().iter().map(|p| names[p["UID"].as_str().unwrap()].clone()).collect();
            (node.clone(), (pods, v["NumPDBViolations"].as_i64().unwrap()))
        })
        .collect();
    let reasons = a
        .explanations
        .iter()
        .map(|e| (e.verdict.to_string(), e.node.clone().unwrap_or_default(), e.code.to_string()))
        .collect();
    (victims, reasons)
}

fn dropped(reasons: &[(String, String, String)]) -> BTreeMap<String, String> {
    reasons.iter().filter(|(v, _, _)| v == "dropped").map(|(_, n, c)| (n.clone(), c.clone())).collect()
}

fn map(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
    entries.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

// ---- default policy (online first; bare offline pods requeued) ----------------------

/// node → (victim names, sorted; NumPDBViolations).
fn sorted(victims: Victims) -> BTreeMap<String, (Vec<String>, i64)> {
    victims
        .into_iter()
        .map(|(n, (mut pods, v))| {
            pods.sort();
            (n, (pods, v))
        })
        .collect()
}

fn expect(node: &str, pods: &[&str], violations: i64) -> BTreeMap<String, (Vec<String>, i64)> {
    BTreeMap::from([(node.to_string(), (pods.iter().map(|p| p.to_string()).collect(), violations))])
}

/// What the default policy answers with full knowledge: every online pod that stock
/// kube-scheduler placed is placed, on the node stock chose, and every bare victim is
/// requeued instead of lost. For online-3 (0039) the worker PDB has one disruption left
/// (its status still says 2, but worker-3 was evicted for online-2 since the disruption
/// controller counted): three workers on node-c1 would be two violations. node-a1 without
/// a violation (stock took one) breaks gang-a: a PDB ranks ahead of any cost, and the
/// gang's survivor is charged; free-1, free-2 and gang-a-2 are requeued.
fn default_with_view(seq: &str) -> BTreeMap<String, (Vec<String>, i64)> {
    match seq {
        "0037" => expect("node-gpu1", &["free-3", "gpu-batch-1", "worker-3"], 0),
        "0039" => expect("node-a1", &["free-1", "free-2", "gang-a-2", "worker-7"], 0),
        "0041" => expect("node-gpu1", &["gpu-batch-2"], 0),
        _ => expect("node-gpu1", &["hostport-batch"], 0),
    }
}

#[rstest]
fn default_policy_with_view_places_every_online_pod_and_requeues_bare_victims(
    #[values("r1-nodecache-false", "r2-nodecache-true")] round: &str,
    #[values("0037", "0039", "0041", "0043")] seq: &str,
) {
    let rec = preempt_request(round, seq);
    let policy = policy("default");
    let (victims, reasons) = run_preempt(&rec, &policy, true);
    assert_eq!(sorted(victims.clone()), default_with_view(seq), "{reasons:?}");
    // Every bare victim in the answer is requeued, under the name replay reports.
    let view = View::build(snapshot::load(&rec.snapshot).unwrap(), &policy);
    let a = replay(Verb::Preempt, &rec.request, &policy, Some(&view), now()).unwrap();
    let requeued: Vec<&str> = a.requeues().iter().map(|r| r.name.as_str()).collect();
    let snap: Value = serde_json::from_slice(&std::fs::read(&rec.snapshot).unwrap()).unwrap();
    let owned: Vec<&str> = snap["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["kind"] == "Pod" && i["metadata"]["ownerReferences"].as_array().is_some_and(|o| !o.is_empty()))
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    // ... but for online-hostport's (0043): it holds a hostPort, which a copy may not
    // carry, and is the only way to place the online pod: a victim of last resort, lost.
    let last_resort: Vec<&str> = a
        .explanations
        .iter()
        .filter(|e| e.code == "last_resort" && e.lost_reason == Some(LostReason::BeyondBaseline))
        .filter_map(|e| e.pod.as_deref()?.split_once('/').map(|(_, name)| name))
        .collect();
    assert_eq!(last_resort, if seq == "0043" { vec!["hostport-batch"] } else { vec![] }, "{reasons:?}");
    let bare: Vec<&str> = victims
        .values()
        .flat_map(|(pods, _)| pods)
        .map(String::as_str)
        .filter(|n| !owned.contains(n) && !last_resort.contains(n))
        .collect();
    assert_eq!(requeued.len(), bare.len(), "{requeued:?} vs {bare:?}");
    for r in a.requeues() {
        assert!(bare.contains(&r.name.as_str()));
        assert!(r.replacement.starts_with(&format!("{}-rq-", r.name)));
        assert_eq!(r.attempt, 1);
        assert!(a
            .explanations
            .iter()
            .any(|e| e.code == "requeued" && e.detail.contains(&format!("requeued as {}", r.replacement))));
    }
}

#[rstest]
fn default_policy_without_view_keeps_kubes_victims_where_every_one_is_allowed(
    #[values("0037", "0039", "0041", "0043")] seq: &str,
) {
    // r1 carries kube's own victims. Gang members cannot be judged without a view (node-a1,
    // node-a2 dropped); elsewhere kube's victims are allowed, bare ones requeued, and the
    // cheapest node wins.
    let rec = preempt_request("r1-nodecache-false", seq);
    let (victims, reasons) = run_preempt(&rec, &policy("default"), false);
    let expected = match seq {
        "0037" => expect("node-gpu1", &["free-3", "gpu-batch-1", "worker-3"], 0),
        "0039" => expect("node-c1", &["worker-2", "worker-6", "worker-8"], 1),
        "0041" => expect("node-gpu1", &["gpu-batch-2"], 0),
        _ => expect("node-gpu1", &["hostport-batch"], 0),
    };
    assert_eq!(sorted(victims), expected);
    if seq == "0037" || seq == "0039" {
        let d = dropped(&reasons);
        assert_eq!(d.get("node-a1").map(String::as_str), Some("gang_unknown"));
        assert_eq!(d.get("node-a2").map(String::as_str), Some("gang_unknown"));
    }
}

#[rstest]
fn default_policy_with_requeue_off_takes_bare_pods_only_as_a_last_resort_and_says_so(
    #[values("r1-nodecache-false", "r2-nodecache-true")] round: &str,
    #[values("0037", "0039", "0041", "0043")] seq: &str,
) {
    // serve without --requeue: bare pods cannot be requeued, so they are taken only where
    // nothing else places the online pod. online-1 and online-3 take three workers (one
    // past their PDB) rather than a bare pod; online-gpu and online-hostport, whose only
    // room is held by bare pods, are placed, and the bare pods lost, as the lines say.
    let rec = preempt_request(round, seq);
    let policy = policy("default");
    let view = View::build(snapshot::load(&rec.snapshot).unwrap(), &policy);
    let ctx = coloc_extender::decide::Context::new(&policy, Some(&view), now());
    let a = coloc_extender::pipeline::answer(Verb::Preempt, &rec.request, &ctx, &Bounds::default()).unwrap();
    assert!(a.requeues().is_empty());
    let body: Value = serde_json::from_slice(&a.body).unwrap();
    let nodes: Vec<&String> = body["NodeNameToMetaVictims"].as_object().unwrap().keys().collect();
    let lost: Vec<&Explanation> = a.explanations.iter().filter(|e| e.code == "last_resort").collect();
    match seq {
        "0037" | "0039" => {
            assert_eq!(nodes, ["node-a2"], "three workers, one past their PDB");
            assert!(lost.is_empty(), "{lost:?}");
        }
        _ => {
            assert_eq!(nodes, ["node-gpu1"]);
            assert!(!lost.is_empty());
            for e in lost {
                assert_eq!(e.lost_reason, Some(LostReason::RequeueUnavailable));
                assert!(e.detail.contains("requeue is off") && e.detail.ends_with("lost"), "{}", e.detail);
            }
        }
    }
}

#[rstest]
fn uids_without_a_view_are_never_passed_through(#[values("0037", "0039", "0041", "0043")] seq: &str) {
    let rec = preempt_request("r2-nodecache-true", seq);
    let (victims, reasons) = run_preempt(&rec, &policy("default"), false);
    assert!(victims.is_empty());
    assert!(dropped(&reasons).values().all(|c| c == "no_view_uids_only"), "{reasons:?}");
}

#[rstest]
fn custom_policy_with_view_takes_recreatable_workers_not_bare_pods(
    #[values("r1-nodecache-false", "r2-nodecache-true")] round: &str,
) {
    // Where kube-scheduler took gpu-batch-1 + free-3 (lost forever) or broke gang-a,
    // the policy takes three ReplicaSet workers on node-a2: they come back, the gang
    // stays whole, one PDB violation is the least any candidate needs (best-effort).
    let rec = preempt_request(round, "0037");
    let (victims, reasons) = run_preempt(&rec, &policy("policy/custom-priority-classes.yaml"), true);
    let expected: Victims = BTreeMap::from([(
        "node-a2".to_string(),
        (vec!["worker-1".to_string(), "worker-4".to_string(), "worker-5".to_string()], 1),
    )]);
    assert_eq!(victims, expected);
    let d = dropped(&reasons);
    assert_eq!(d.get("node-c1").map(String::as_str), Some("outranked"));
    assert_eq!(d.get("node-a1").map(String::as_str), Some("outranked"));
    assert_eq!(d.get("node-gpu1").map(String::as_str), Some("does_not_fit"));
}

#[rstest]
fn custom_policy_counts_workers_evicted_since_the_pdb_status_was_written(
    #[values("r1-nodecache-false", "r2-nodecache-true")] round: &str,
) {
    // For online-3, worker-3 is gone (evicted for online-2) though the worker PDB's status
    // still allows 2: one more worker is all the budget left. Three workers would be two
    // violations; node-a1 costs one (train-1, maxUnavailable 0) and the free pod the custom
    // policy lets go (free: recreatableOnly false).
    let rec = preempt_request(round, "0039");
    let (victims, reasons) = run_preempt(&rec, &policy("policy/custom-priority-classes.yaml"), true);
    let expected: Victims = BTreeMap::from([(
        "node-a1".to_string(),
        (vec!["train-1".to_string(), "worker-7".to_string(), "free-2".to_string()], 1),
    )]);
    assert_eq!(victims, expected, "{reasons:?}");
    assert_eq!(dropped(&reasons).get("node-a2").map(String::as_str), Some("outranked"));
}

#[rstest]
fn custom_policy_never_evicts_bare_gpu_or_hostport_pods(
    #[values("r1-nodecache-false", "r2-nodecache-true")] round: &str,
    #[values("0041", "0043")] seq: &str,
) {
    let rec = preempt_request(round, seq);
    let (victims, reasons) = run_preempt(&rec, &policy("policy/custom-priority-classes.yaml"), true);
    assert!(victims.is_empty());
    assert_eq!(dropped(&reasons), map(&[("node-gpu1", "does_not_fit")]));
    let spared: Vec<_> = reasons.iter().filter(|(v, _, c)| v == "spared" && c == "not_recreatable").collect();
    assert!(!spared.is_empty());
}

// ---- differential: a plain-priority policy agrees with kube-scheduler ------------------

/// kube-scheduler compares candidate victim sets by PDB violations, highest priority,
/// priority sum and count. Among equal-priority pods that never started its order is
/// arbitrary (GetPodStartTime returns time.Now() for each call), so identical sets are
/// only required where the choice is forced.
#[rstest]
fn plain_priority_policy_matches_kube_schedulers_choices(
    #[values("r1-nodecache-false", "r2-nodecache-true")] round: &str,
    #[values("0037", "0039", "0041", "0043")] seq: &str,
) {
    let rec = preempt_request(round, seq);
    let policy = Policy::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/plain-priority.yaml")).unwrap();
    // kube-scheduler trusts the PDB status as written; so does this comparison (the
    // extender also counts covered pods evicted since: see the custom policy's 0039).
    let mut objects = snapshot::load(&rec.snapshot).unwrap();
    for pdb in &mut objects.pdbs {
        pdb.current_healthy = None;
    }
    let view = View::build(objects, &policy);
    let (ours, _) = run_preempt_in(&rec, &policy, Some(&view));
    let names = names(&rec.snapshot);
    let request: Value = serde_json::from_slice(&rec.request).unwrap();
    let prio: HashMap<String, i64> = {
        let v: Value = serde_json::from_slice(&std::fs::read(&rec.snapshot).unwrap()).unwrap();
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["kind"] == "Pod")
            .map(|p| (p["metadata"]["name"].as_str().unwrap().to_string(), p["spec"]["priority"].as_i64().unwrap()))
            .collect()
    };
    let kube: Victims = match (request["NodeNameToVictims"].as_object(), request["NodeNameToMetaVictims"].as_object()) {
        (Some(full), _) => full
            .iter()
            .map(|(n, v)| {
                let pods = v["Pods"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
                    .collect();
                (n.clone(), (pods, v["NumPDBViolations"].as_i64().unwrap()))
            })
            .collect(),
        (None, Some(meta)) => meta
            .iter()
            .map(|(n, v)| {
                let pods =
                    v["Pods"].as_array().unwrap().iter().map(|p| names[p["UID"].as_str().unwrap()].clone()).collect();
                (n.clone(), (pods, v["NumPDBViolations"].as_i64().unwrap()))
            })
            .collect(),
        _ => unreachable!(),
    };
    assert_eq!(ours.keys().collect::<Vec<_>>(), kube.keys().collect::<Vec<_>>(), "same candidate nodes survive");
    for (node, (kube_pods, kube_violations)) in &kube {
        let (our_pods, our_violations) = &ours[node];
        let shape = |pods: &[String]| {
            let mut p: Vec<i64> = pods.iter().map(|n| prio[n]).collect();
            p.sort_unstable_by(|a, b| b.cmp(a));
            p
        };
        assert_eq!(our_violations, kube_violations, "{node}: PDB violations");
        assert_eq!(shape(our_pods), shape(kube_pods), "{node}: victim priorities ours {our_pods:?} kube {kube_pods:?}");
        let forced = matches!((seq, node.as_str()), ("0041", _) | ("0043", _) | (_, "node-a1"));
        if forced {
            let (mut a, mut b) = (our_pods.clone(), kube_pods.clone());
            a.sort();
            b.sort();
            assert_eq!(a, b, "{node}: the only possible victims");
        }
    }
}

// ---- filter and prioritize -------------------------------------------------------------

fn index(round: &str) -> Vec<Value> {
    std::fs::read_to_string(fixtures().join(round).join("index.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[rstest]
fn filter_answers_follow_placement_rules(#[values("r1-nodecache-false", "r2-nodecache-true")] round: &str) {
    let policy = policy("default");
    let snap = snapshot::load(&fixtures().join(round).join("0037-preempt.snapshot.json")).unwrap();
    let view = View::build(snap, &policy);
    let mut checked = 0;
    for entry in index(round).iter().filter(|e| e["verb"] == "filter") {
        let seq = format!("{:04}", entry["seq"].as_u64().unwrap());
        let body = std::fs::read(fixtures().join(round).join(format!("{seq}-filter.json"))).unwrap();
        let pod = entry["pod"].as_str().unwrap();
        let a = replay(Verb::Filter, &body, &policy, Some(&view), now()).unwrap();
        let out: Value = serde_json::from_slice(&a.body).unwrap();
        let unresolvable: Vec<&String> = out["FailedAndUnresolvableNodes"].as_object().unwrap().keys().collect();
        let input: Value = serde_json::from_slice(&body).unwrap();
        let input_names: Vec<String> = match input["NodeNames"].as_array() {
            Some(n) => n.iter().map(|x| x.as_str().unwrap().to_string()).collect(),
            None => input["Nodes"]["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n["metadata"]["name"].as_str().unwrap().to_string())
                .collect(),
        };
        let expected: Vec<&str> = if pod == "online/online-toobig" {
            // 5 CPUs on 4-CPU nodes: no preemption can help anywhere.
            input_names.iter().map(String::as_str).collect()
        } else if pod.starts_with("batch/") {
            input_names.iter().map(String::as_str).filter(|n| *n == "node-b1").collect()
        } else {
            vec![]
        };
        assert_eq!(unresolvable, expected, "{round} {seq} {pod}");
        let kept =
            out["Nodes"]["items"].as_array().map(|i| i.len()).or(out["NodeNames"].as_array().map(|n| n.len())).unwrap();
        assert_eq!(kept + unresolvable.len(), input_names.len(), "{round} {seq}: every node is kept or failed");
        assert!(out["FailedNodes"].as_object().unwrap().is_empty());
        checked += 1;
    }
    assert!(checked >= 20, "only {checked} filter payloads");
}

#[rstest]
fn prioritize_scores_stay_in_range_and_prefer_colocation_nodes_for_batch(
    #[values("r1-nodecache-false", "r2-nodecache-true")] round: &str,
) {
    let policy = policy("default");
    let snap = snapshot::load(&fixtures().join(round).join("0037-preempt.snapshot.json")).unwrap();
    let view = View::build(snap, &policy);
    let mut checked = 0;
    for entry in index(round).iter().filter(|e| e["verb"] == "prioritize") {
        let seq = format!("{:04}", entry["seq"].as_u64().unwrap());
        let body = std::fs::read(fixtures().join(round).join(format!("{seq}-prioritize.json"))).unwrap();
        for v in [None, Some(&view)] {
            let a = replay(Verb::Prioritize, &body, &policy, v, now()).unwrap();
            let scores: Vec<Value> = serde_json::from_slice(&a.body).unwrap();
            assert!(!scores.is_empty());
            for s in &scores {
                let score = s["Score"].as_i64().unwrap();
                assert!((0..=10).contains(&score), "{seq}: {s}");
                assert!(s["Host"].is_string());
            }
        }
        checked += 1;
    }
    assert!(checked >= 10);
}

/// Per recorded request, the victims of kube-scheduler's own choice against the policy's
/// (shadow mode counts both where kube-scheduler would evict): the same count, except for
/// online-3 (0039), where kube's node-a2 pushes the workers' PDB past its budget (kube
/// counts none: the PDB's status was written before worker-3 was evicted) and breaks
/// gang-a; the policy's node-a1 takes one pod more, the bare free-1, requeued, and
/// violates nothing. (No recorded pod had a startTime: no
/// kubelet ran, so both discard 0 CPU-seconds.)
#[rstest]
fn per_request_the_policy_evicts_no_more_than_kube_scheduler_unless_kubes_choice_violates_a_pdb(
    #[values("r1-nodecache-false", "r2-nodecache-true")] round: &str,
    #[values("0037", "0039", "0041", "0043")] seq: &str,
) {
    let rec = preempt_request(round, seq);
    let mut policy = policy("default");
    policy.mode = coloc_extender::policy::Mode::Shadow;
    let view = View::build(snapshot::load(&rec.snapshot).unwrap(), &policy);
    let a = replay(Verb::Preempt, &rec.request, &policy, Some(&view), now()).unwrap();
    let (kube, ours) = (a.discarded().expect("kube's choice"), a.would_discard().expect("the policy's"));
    let count = |d: &coloc_extender::discarded::Discarded| (d.node.clone(), d.victims);
    let want = match seq {
        "0037" => (("node-gpu1", 3), ("node-gpu1", 3)),
        "0039" => (("node-a2", 3), ("node-a1", 4)),
        _ => (("node-gpu1", 1), ("node-gpu1", 1)),
    };
    let want = ((want.0 .0.to_string(), want.0 .1), (want.1 .0.to_string(), want.1 .1));
    assert_eq!((count(kube), count(ours)), want, "kube-scheduler's choice, then the policy's");
    if seq == "0039" {
        let a2 = a.explanations.iter().find(|e| e.code == "candidate" && e.node.as_deref() == Some("node-a2")).unwrap();
        assert!(a2.detail.contains("1 PDB violation(s)"), "{}", a2.detail);
    }
}
