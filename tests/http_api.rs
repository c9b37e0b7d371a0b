//! The HTTP API end to end, in-process: the real router driven with `oneshot`, fed the
//! payloads a real kube-scheduler recorded (tests/fixtures/payloads) and hand-made bad ones.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use coloc_extender::cluster::{snapshot, View, ViewCell};
use coloc_extender::http::state::{AppState, ViewSource};
use coloc_extender::http::{admin_router, health_router, router};
use coloc_extender::policy::Policy;
use http_body_util::BodyExt;
use rstest::rstest;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tower::ServiceExt;

/// 2026-11-21T19:00:00Z, ten minutes after the recording.
const NOW: i64 = 1_795_287_600;
const R1: &str = "r1-nodecache-false";
const R2: &str = "r2-nodecache-true";
const OFFLINE_LABEL: &str = "colocation.example.com/offline-allowed";

// ---- helpers -----------------------------------------------------------------------------

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn payload_path(round: &str, file: &str) -> PathBuf {
    root().join("tests/fixtures/payloads").join(round).join(file)
}

fn payload(round: &str, file: &str) -> Vec<u8> {
    std::fs::read(payload_path(round, file)).unwrap_or_else(|e| panic!("{round}/{file}: {e}"))
}

fn payload_json(round: &str, file: &str) -> Value {
    serde_json::from_slice(&payload(round, file)).unwrap()
}

/// Recorded request bodies of one verb, as (file name, bytes), found through index.jsonl.
fn recorded(round: &str, verb: &str) -> Vec<(String, Vec<u8>)> {
    let index = std::fs::read_to_string(payload_path(round, "index.jsonl")).unwrap();
    let out: Vec<_> = index
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["verb"] == verb)
        .map(|e| {
            let file = format!("{:04}-{verb}.json", e["seq"].as_u64().unwrap());
            let body = payload(round, &file);
            (file, body)
        })
        .collect();
    assert!(!out.is_empty(), "no recorded {verb} requests in {round}");
    out
}

/// A pod object from the round's cluster dump, by name.
fn cluster_pod(name: &str) -> Value {
    let pods = payload_json(R1, "cluster/pods-after.json");
    pods["items"].as_array().unwrap().iter().find(|p| p["metadata"]["name"] == name).unwrap().clone()
}

fn custom_policy() -> Policy {
    Policy::load(&root().join("policy/custom-priority-classes.yaml")).unwrap()
}

/// The snapshot taken at r1's first preempt (0037): every node, every offline pod.
fn snapshot_path(round: &str) -> PathBuf {
    payload_path(round, "0037-preempt.snapshot.json")
}

fn state_with(policy: Policy, snapshot: Option<&Path>) -> AppState {
    let cell = ViewCell::default();
    let source = match snapshot {
        Some(path) => {
            cell.publish(View::build(snapshot::load(path).unwrap(), &policy));
            ViewSource::Snapshot
        }
        None => ViewSource::None,
    };
    let mut state = AppState::new(policy, Arc::new(cell), source);
    state.clock = Arc::new(|| NOW);
    state
}

fn app(policy: Policy, snapshot: Option<&Path>) -> Router {
    router(state_with(policy, snapshot), "", decision_workers())
}

fn default_app() -> Router {
    app(Policy::builtin_default().enforced(), None)
}

async fn send(app: &Router, method: Method, path: &str, body: Body) -> (StatusCode, Bytes) {
    let req =
        Request::builder().method(method).uri(path).header("content-type", "application/json").body(body).unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    (status, resp.into_body().collect().await.unwrap().to_bytes())
}

async fn post(app: &Router, path: &str, body: impl Into<Body>) -> (StatusCode, Bytes) {
    send(app, Method::POST, path, body.into()).await
}

/// POST that must answer 200 with JSON.
async fn ok_json(app: &Router, path: &str, body: impl Into<Body>) -> Value {
    let (status, bytes) = post(app, path, body).await;
    assert_eq!(status, StatusCode::OK, "{path}: {}", String::from_utf8_lossy(&bytes));
    serde_json::from_slice(&bytes).unwrap()
}

/// POST that must fail with `status` and a `{code, error}` body; returns the error text.
async fn err_json(app: &Router, path: &str, body: impl Into<Body>, status: u16, code: &str) -> String {
    let (got, bytes) = post(app, path, body).await;
    let text = String::from_utf8_lossy(&bytes);
    assert_eq!(got.as_u16(), status, "{path}: {text}");
    let v: Value = serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("error body is not JSON ({e}): {text}"));
    assert_eq!(v["code"], code, "{text}");
    let error = v["error"].as_str().unwrap_or_else(|| panic!("no error text: {text}"));
    assert!(!error.is_empty());
    error.to_string()
}

#[derive(Deserialize)]
struct RawNodes {
    items: Vec<Box<RawValue>>,
}

/// The raw text of every `Nodes.items[*]` of a filter request or answer.
fn raw_items(body: &[u8]) -> Vec<String> {
    #[derive(Deserialize)]
    struct Args {
        #[serde(rename = "Nodes")]
        nodes: Option<RawNodes>,
    }
    let args: Args = serde_json::from_slice(body).unwrap();
    args.nodes.map(|n| n.items.iter().map(|i| i.get().to_string()).collect()).unwrap_or_default()
}

fn input_names(req: &Value) -> Vec<String> {
    match req["Nodes"]["items"].as_array() {
        Some(items) => items.iter().map(|n| n["metadata"]["name"].as_str().unwrap().to_string()).collect(),
        None => req["NodeNames"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect(),
    }
}

/// Names the filter answer kept, in either mode.
fn kept_names(answer: &Value) -> Vec<String> {
    match answer["Nodes"]["items"].as_array() {
        Some(items) => items.iter().map(|n| n["metadata"]["name"].as_str().unwrap().to_string()).collect(),
        None => answer["NodeNames"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect(),
    }
}

fn pod_class(req: &Value) -> &str {
    req["Pod"]["spec"]["priorityClassName"].as_str().unwrap_or("")
}

/// A filter request body from parts, Go casing.
fn filter_body(pod: &Value, nodes: Option<Vec<Value>>, names: Option<Vec<&str>>) -> String {
    json!({"Pod": pod, "Nodes": nodes.map(|items| json!({"metadata": {}, "items": items})), "NodeNames": names})
        .to_string()
}

fn node_object(name: &str) -> Value {
    let nodes = payload_json(R1, "cluster/nodes.json");
    nodes["items"].as_array().unwrap().iter().find(|n| n["metadata"]["name"] == name).unwrap().clone()
}

/// uid → (node, priority) of every pod in a snapshot.
fn snapshot_pods(path: &Path) -> BTreeMap<String, (String, i64)> {
    let snap: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    snap["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["kind"] == "Pod")
        .map(|p| {
            (
                p["metadata"]["uid"].as_str().unwrap().to_string(),
                (p["spec"]["nodeName"].as_str().unwrap_or("").to_string(), p["spec"]["priority"].as_i64().unwrap_or(0)),
            )
        })
        .collect()
}

/// node → victim UIDs of a preempt request, in either mode.
fn candidate_uids(req: &Value) -> BTreeMap<String, Vec<String>> {
    let (map, uid_of): (&Value, fn(&Value) -> String) = if req["NodeNameToVictims"].is_object() {
        (&req["NodeNameToVictims"], |p| p["metadata"]["uid"].as_str().unwrap().to_string())
    } else {
        (&req["NodeNameToMetaVictims"], |p| p["UID"].as_str().unwrap().to_string())
    };
    map.as_object()
        .map(|m| {
            m.iter().map(|(n, v)| (n.clone(), v["Pods"].as_array().unwrap().iter().map(uid_of).collect())).collect()
        })
        .unwrap_or_default()
}

/// The answer's `NodeNameToMetaVictims`, checking it is the only key.
fn meta_victims(answer: &Value) -> &serde_json::Map<String, Value> {
    let top = answer.as_object().expect("preempt answer is an object");
    assert_eq!(top.keys().collect::<Vec<_>>(), ["NodeNameToMetaVictims"], "{answer}");
    answer["NodeNameToMetaVictims"].as_object().expect("NodeNameToMetaVictims is an object, never null")
}

fn answer_uids(v: &Value) -> Vec<String> {
    v["Pods"].as_array().unwrap().iter().map(|p| p["UID"].as_str().unwrap().to_string()).collect()
}

// ---- 1. filter ---------------------------------------------------------------------------

#[rstest]
#[tokio::test]
async fn recorded_filter_answers_in_the_mode_it_came(
    #[values(R1, R2)] round: &str,
    #[values(false, true)] with_view: bool,
) {
    let snap = snapshot_path(round);
    let app = app(Policy::builtin_default().enforced(), with_view.then_some(snap.as_path()));
    for (file, body) in recorded(round, "filter") {
        let req: Value = serde_json::from_slice(&body).unwrap();
        let (status, bytes) = post(&app, "/filter", body.clone()).await;
        assert_eq!(status, StatusCode::OK, "{round}/{file}: {}", String::from_utf8_lossy(&bytes));
        let answer: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(answer["Error"], "", "{round}/{file}");
        let inputs = input_names(&req);
        if round == R1 {
            assert!(answer["Nodes"]["items"].is_array(), "{round}/{file}: {answer}");
            assert!(answer["NodeNames"].is_null(), "{round}/{file}: {answer}");
            // Kept nodes travel byte for byte, in request order.
            let (ins, outs) = (raw_items(&body), raw_items(&bytes));
            let mut rest = ins.iter();
            for out in &outs {
                assert!(
                    rest.any(|i| i == out),
                    "{round}/{file}: answer item is not an input item (or out of order):\n{out}"
                );
            }
        } else {
            assert!(answer["Nodes"].is_null(), "{round}/{file}: {answer}");
            assert!(answer["NodeNames"].is_array(), "{round}/{file}: {answer}");
        }
        // Every input node is accounted for exactly once: kept or failed; nothing else appears.
        let kept = kept_names(&answer);
        let failed: Vec<String> = ["FailedNodes", "FailedAndUnresolvableNodes"]
            .iter()
            .flat_map(|k| answer[k].as_object().unwrap().keys().cloned())
            .collect();
        let mut seen: Vec<String> = kept.iter().chain(&failed).cloned().collect();
        seen.sort();
        let mut want = inputs.clone();
        want.sort();
        assert_eq!(seen, want, "{round}/{file}: {answer}");
    }
}

/// Recorded requests never carry node-b1 for offline pods (kube's taint filter runs
/// first), so these add it: the policy must reject it on its label.
#[rstest]
#[case::batch("0001-filter.json")]
#[case::free("0021-filter.json")]
#[tokio::test]
async fn offline_pod_gets_online_only_node_unresolvable_in_nodes_mode(#[case] file: &str) {
    let req = payload_json(R1, file);
    assert!(["offline-batch", "free"].contains(&pod_class(&req)));
    let mut items = req["Nodes"]["items"].as_array().unwrap().clone();
    let b1 = payload_json(R1, "0036-filter.json")["Nodes"]["items"][0].clone();
    assert_eq!(b1["metadata"]["name"], "node-b1");
    items.push(b1);
    let answer = ok_json(&default_app(), "/filter", filter_body(&req["Pod"], Some(items), None)).await;

    let reason = answer["FailedAndUnresolvableNodes"]["node-b1"].as_str().unwrap_or_else(|| panic!("{answer}"));
    assert!(reason.contains(OFFLINE_LABEL), "reason does not name the label: {reason}");
    assert!(answer["FailedNodes"].get("node-b1").is_none());
    let kept = kept_names(&answer);
    assert!(!kept.contains(&"node-b1".to_string()));
    assert_eq!(kept, input_names(&req), "the co-location nodes are all kept, in order");
}

#[rstest]
#[case::no_view_no_labels_kept(false)]
#[case::view_knows_the_label(true)]
#[tokio::test]
async fn offline_pod_and_online_only_node_in_names_mode(#[case] with_view: bool) {
    let req = payload_json(R2, "0001-filter.json");
    assert_eq!(pod_class(&req), "offline-batch");
    let mut names: Vec<&str> = req["NodeNames"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    names.push("node-b1");
    let snap = snapshot_path(R2);
    let app = app(Policy::builtin_default().enforced(), with_view.then_some(snap.as_path()));
    let answer = ok_json(&app, "/filter", filter_body(&req["Pod"], None, Some(names))).await;
    assert!(answer["Nodes"].is_null());
    let kept = kept_names(&answer);
    if with_view {
        let reason = answer["FailedAndUnresolvableNodes"]["node-b1"].as_str().unwrap_or_else(|| panic!("{answer}"));
        assert!(reason.contains(OFFLINE_LABEL), "{reason}");
        assert!(!kept.contains(&"node-b1".to_string()));
        assert_eq!(kept.len(), 4);
    } else {
        assert!(kept.contains(&"node-b1".to_string()), "without labels the node is kept: {answer}");
        assert_eq!(answer["FailedAndUnresolvableNodes"], json!({}));
    }
}

#[rstest]
#[tokio::test]
async fn online_pod_keeps_online_only_node(#[values(R1, R2)] round: &str, #[values(false, true)] with_view: bool) {
    let body = payload(round, "0036-filter.json");
    let req: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(req["Pod"]["metadata"]["name"], "online-1");
    assert_eq!(input_names(&req), ["node-b1"]);
    let snap = snapshot_path(round);
    let answer =
        ok_json(&app(Policy::builtin_default().enforced(), with_view.then_some(snap.as_path())), "/filter", body).await;
    assert_eq!(kept_names(&answer), ["node-b1"], "{answer}");
    assert_eq!(answer["FailedAndUnresolvableNodes"], json!({}));
    assert_eq!(answer["FailedNodes"], json!({}));
}

/// online-toobig (5 CPU) never reached the extender in the recording (no node passed
/// kube's own filters), so its request is built from the cluster dump: all five nodes.
#[rstest]
#[case::nodes_mode(false)]
#[case::names_mode_with_view(true)]
#[tokio::test]
async fn too_big_pod_is_unresolvable_everywhere(#[case] names_mode: bool) {
    let pod = cluster_pod("online-toobig");
    let all = ["node-a1", "node-a2", "node-b1", "node-c1", "node-gpu1"];
    let (body, app) = if names_mode {
        let snap = snapshot_path(R2);
        (filter_body(&pod, None, Some(all.to_vec())), app(Policy::builtin_default().enforced(), Some(&snap)))
    } else {
        (filter_body(&pod, Some(all.iter().map(|n| node_object(n)).collect()), None), default_app())
    };
    let answer = ok_json(&app, "/filter", body).await;
    assert!(kept_names(&answer).is_empty(), "{answer}");
    let unresolvable = answer["FailedAndUnresolvableNodes"].as_object().unwrap();
    assert_eq!(unresolvable.keys().collect::<Vec<_>>(), all);
    for (node, reason) in unresolvable {
        assert!(reason.as_str().unwrap().contains("cpu"), "{node}: {reason}");
    }
}

// ---- 2. prioritize -----------------------------------------------------------------------

#[rstest]
#[tokio::test]
async fn recorded_prioritize_scores_every_input_node_in_range(
    #[values(R1, R2)] round: &str,
    #[values(false, true)] with_view: bool,
) {
    let snap = snapshot_path(round);
    let app = app(Policy::builtin_default().enforced(), with_view.then_some(snap.as_path()));
    for (file, body) in recorded(round, "prioritize") {
        let req: Value = serde_json::from_slice(&body).unwrap();
        let answer = ok_json(&app, "/prioritize", body).await;
        let list = answer.as_array().unwrap_or_else(|| panic!("{round}/{file}: not an array: {answer}"));
        let mut hosts: Vec<String> = list
            .iter()
            .map(|hp| {
                let obj = hp.as_object().unwrap();
                assert_eq!(
                    obj.keys().collect::<BTreeSet<_>>(),
                    BTreeSet::from([&"Host".to_string(), &"Score".to_string()])
                );
                let score = hp["Score"].as_i64().unwrap_or_else(|| panic!("{round}/{file}: {hp}"));
                assert!((0..=10).contains(&score), "{round}/{file}: {hp}");
                hp["Host"].as_str().unwrap().to_string()
            })
            .collect();
        hosts.sort();
        let mut want = input_names(&req);
        want.sort();
        assert_eq!(hosts, want, "{round}/{file}");
    }
}

// ---- 3. preempt --------------------------------------------------------------------------

#[rstest]
#[tokio::test]
async fn recorded_preempt_answers_are_well_formed(
    #[values(R1, R2)] round: &str,
    #[values(false, true)] with_view: bool,
    #[values(false, true)] custom: bool,
) {
    let snap = snapshot_path(round);
    let policy = if custom { custom_policy() } else { Policy::builtin_default().enforced() };
    let app = app(policy, with_view.then_some(snap.as_path()));
    for (file, body) in recorded(round, "preempt") {
        let req: Value = serde_json::from_slice(&body).unwrap();
        let candidates = candidate_uids(&req);
        // The pods the decision knew: the view's (0037's, whatever the request), else the
        // cluster as it was at the request.
        let known =
            if with_view { snap.clone() } else { payload_path(round, &file.replace(".json", ".snapshot.json")) };
        let here = snapshot_pods(&known);
        let answer = ok_json(&app, "/preempt", body).await;
        for (node, victims) in meta_victims(&answer) {
            let uids = answer_uids(victims);
            assert!(candidates.contains_key(node), "{round}/{file}: {node} was not a candidate");
            assert!(!uids.is_empty(), "{round}/{file}: {node} came with victims, answer has none");
            assert!(victims["NumPDBViolations"].as_i64().unwrap() >= 0);
            for uid in &uids {
                let (on, _) = here.get(uid).unwrap_or_else(|| panic!("{round}/{file}: unknown UID {uid}"));
                assert_eq!(on, node, "{round}/{file}: {uid} is not on {node}");
                if !with_view {
                    assert!(candidates[node].contains(uid), "{round}/{file}: no view, yet {uid} was added");
                }
            }
            let prios: Vec<i64> = uids.iter().map(|u| here[u].1).collect();
            assert!(
                prios.windows(2).all(|w| w[0] >= w[1]),
                "{round}/{file}: {node} victims not by descending priority: {prios:?}"
            );
        }
    }
}

#[rstest]
#[tokio::test]
async fn never_preempting_pod_gets_an_empty_map(#[values(R1, R2)] round: &str, #[values(false, true)] with_view: bool) {
    let mut req = payload_json(round, "0037-preempt.json");
    req["Pod"] = cluster_pod("online-never");
    assert_eq!(req["Pod"]["spec"]["preemptionPolicy"], "Never");
    let snap = snapshot_path(round);
    let app = app(custom_policy(), with_view.then_some(snap.as_path()));
    let answer = ok_json(&app, "/preempt", req.to_string()).await;
    assert!(meta_victims(&answer).is_empty(), "{answer}");
}

#[tokio::test]
async fn uids_only_without_a_view_gives_an_empty_map() {
    for policy in [Policy::builtin_default().enforced(), custom_policy()] {
        let app = app(policy, None);
        for (file, body) in recorded(R2, "preempt") {
            let answer = ok_json(&app, "/preempt", body).await;
            assert!(meta_victims(&answer).is_empty(), "{file}: {answer}");
        }
    }
}

#[tokio::test]
async fn r1_online_2_with_view_and_custom_policy_picks_one_node_three_victims() {
    let snap = snapshot_path(R1);
    let app = app(custom_policy(), Some(&snap));
    let answer = ok_json(&app, "/preempt", payload(R1, "0037-preempt.json")).await;
    let map = meta_victims(&answer);
    assert_eq!(map.len(), 1, "{answer}");
    let (node, victims) = map.iter().next().unwrap();
    let uids = answer_uids(victims);
    assert_eq!(uids.len(), 3, "{answer}");
    assert_eq!(victims["NumPDBViolations"], 1, "{answer}");
    let pods = snapshot_pods(&snap);
    for uid in &uids {
        assert_eq!(&pods[uid].0, node, "{uid} is not on {node}");
    }
    let prios: Vec<i64> = uids.iter().map(|u| pods[u].1).collect();
    assert!(prios.windows(2).all(|w| w[0] >= w[1]), "{prios:?}");
}

// ---- 4. wire casing, null vs missing, empty victim lists ---------------------------------

/// Renames object keys: `at` selects the objects (a JSON pointer-ish path of keys, `*` for
/// every member), `from` → `to`.
fn rename(v: &mut Value, at: &[&str], from: &str, to: &str) {
    match at.split_first() {
        None => {
            if let Some(obj) = v.as_object_mut() {
                if let Some(x) = obj.remove(from) {
                    obj.insert(to.to_string(), x);
                }
            }
        }
        Some((&"*", rest)) => match v {
            Value::Object(m) => m.values_mut().for_each(|x| rename(x, rest, from, to)),
            Value::Array(a) => a.iter_mut().for_each(|x| rename(x, rest, from, to)),
            _ => {}
        },
        Some((k, rest)) => {
            if let Some(x) = v.get_mut(*k) {
                rename(x, rest, from, to)
            }
        }
    }
}

fn lowercased(req: &Value) -> Value {
    let mut v = req.clone();
    for k in ["Pod", "Nodes", "NodeNames"] {
        rename(&mut v, &[], k, &k.to_lowercase());
    }
    for (map, new) in [("NodeNameToVictims", "nodeNameToVictims"), ("NodeNameToMetaVictims", "nodeNameToMetaVictims")] {
        rename(&mut v, &[map, "*"], "Pods", "pods");
        rename(&mut v, &[map, "*"], "NumPDBViolations", "numPDBViolations");
        rename(&mut v, &[map, "*", "pods", "*"], "UID", "uid");
        rename(&mut v, &[], map, new);
    }
    v
}

#[rstest]
#[case::filter_objects(R1, "0001-filter.json", "/filter")]
#[case::filter_names(R2, "0001-filter.json", "/filter")]
#[case::prioritize_objects(R1, "0002-prioritize.json", "/prioritize")]
#[case::prioritize_names(R2, "0002-prioritize.json", "/prioritize")]
#[case::preempt_full(R1, "0037-preempt.json", "/preempt")]
#[case::preempt_meta(R2, "0037-preempt.json", "/preempt")]
#[tokio::test]
async fn lowercase_keys_give_the_same_answer(#[case] round: &str, #[case] file: &str, #[case] path: &str) {
    let req = payload_json(round, file);
    let lower = lowercased(&req);
    let text = lower.to_string();
    for k in ["\"Pod\"", "\"Nodes\"", "\"NodeNames\"", "\"Pods\"", "\"NumPDBViolations\"", "\"UID\"", "\"NodeNameTo"] {
        assert!(!text.contains(k), "{k} left in the lowercased request");
    }
    let snap = snapshot_path(round);
    let app = app(custom_policy(), Some(&snap));
    let (s1, go) = post(&app, path, req.to_string()).await;
    let (s2, low) = post(&app, path, text).await;
    assert_eq!((s1, s2), (StatusCode::OK, StatusCode::OK), "{}", String::from_utf8_lossy(&low));
    assert_eq!(String::from_utf8_lossy(&go), String::from_utf8_lossy(&low));
    if path == "/preempt" {
        assert!(!meta_victims(&serde_json::from_slice(&go).unwrap()).is_empty(), "the case should preempt something");
    }
}

/// Variants of a request that differ only in `null` vs a missing key.
#[rstest]
#[case::filter_objects(R1, "0001-filter.json", "/filter", &["NodeNames"])]
#[case::filter_names(R2, "0001-filter.json", "/filter", &["Nodes"])]
#[case::preempt_full(R1, "0037-preempt.json", "/preempt", &["NodeNameToMetaVictims"])]
#[case::preempt_meta(R2, "0037-preempt.json", "/preempt", &["NodeNameToVictims"])]
#[tokio::test]
async fn null_and_missing_keys_are_the_same(
    #[case] round: &str,
    #[case] file: &str,
    #[case] path: &str,
    #[case] keys: &[&str],
) {
    let with_null = payload_json(round, file);
    for k in keys {
        assert!(with_null[*k].is_null(), "recording sends {k}: null");
    }
    let mut missing = with_null.clone();
    keys.iter().for_each(|k| _ = missing.as_object_mut().unwrap().remove(*k));
    let snap = snapshot_path(round);
    let app = app(custom_policy(), Some(&snap));
    let a = ok_json(&app, path, with_null.to_string()).await;
    let b = ok_json(&app, path, missing.to_string()).await;
    assert_eq!(a, b);
}

#[rstest]
#[case::full(R1)]
#[case::meta(R2)]
#[tokio::test]
async fn null_pods_and_violations_inside_a_candidate_read_as_empty_and_zero(#[case] round: &str) {
    let map = if round == R1 { "NodeNameToVictims" } else { "NodeNameToMetaVictims" };
    let mut base = payload_json(round, "0037-preempt.json");
    base[map] = json!({"node-x": {"Pods": [], "NumPDBViolations": 0}});
    let mut nulls = base.clone();
    nulls[map]["node-x"] = json!({"Pods": null, "NumPDBViolations": null});
    let mut missing = base.clone();
    missing[map]["node-x"] = json!({});
    let app = default_app();
    let want = ok_json(&app, "/preempt", base.to_string()).await;
    assert_eq!(want, json!({"NodeNameToMetaVictims": {"node-x": {"Pods": [], "NumPDBViolations": 0}}}));
    assert_eq!(ok_json(&app, "/preempt", nulls.to_string()).await, want);
    assert_eq!(ok_json(&app, "/preempt", missing.to_string()).await, want);
}

#[rstest]
#[case::full(R1)]
#[case::meta(R2)]
#[tokio::test]
async fn candidate_with_no_victims_is_returned_as_is(#[case] round: &str) {
    let map = if round == R1 { "NodeNameToVictims" } else { "NodeNameToMetaVictims" };
    let mut req = payload_json(round, "0037-preempt.json");
    req[map]["node-b1"] = json!({"Pods": [], "NumPDBViolations": 0});
    let snap = snapshot_path(round);
    let answer = ok_json(&app(custom_policy(), Some(&snap)), "/preempt", req.to_string()).await;
    let victims = meta_victims(&answer);
    assert_eq!(victims["node-b1"], json!({"Pods": [], "NumPDBViolations": 0}), "{answer}");
}

/// A preemptor that fits without evicting anything (per the view): the nodes came with
/// victims, so none may come back with an empty list.
#[rstest]
#[tokio::test]
async fn nodes_that_came_with_victims_never_come_back_empty(
    #[values(R1, R2)] round: &str,
    #[values(false, true)] custom: bool,
) {
    let mut req = payload_json(round, "0037-preempt.json");
    req["Pod"]["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "10m", "memory": "1Mi"}});
    req["Pod"]["spec"]["initContainers"] = json!(null);
    let snap = snapshot_path(round);
    let policy = if custom { custom_policy() } else { Policy::builtin_default().enforced() };
    let answer = ok_json(&app(policy, Some(&snap)), "/preempt", req.to_string()).await;
    for (node, v) in meta_victims(&answer) {
        assert!(!answer_uids(v).is_empty(), "{node} returned with no victims: {answer}");
    }
}

// ---- 5. bad input ------------------------------------------------------------------------

fn pod_json(cpu: &str) -> Value {
    json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u-p"},
           "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}})
}

fn victim_json(name: &str, node: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "ns", "uid": format!("u-{name}")},
           "spec": {"nodeName": node, "priority": 10, "containers": []}})
}

fn truncated_recording() -> Vec<u8> {
    let mut body = payload(R1, "0001-filter.json");
    body.truncate(body.len() / 2);
    body
}

#[rstest]
#[case::malformed("/filter", br#"{"Pod": }"#.to_vec(), 400, "malformed_json", "malformed")]
#[case::not_json("/preempt", b"Pod=x".to_vec(), 400, "malformed_json", "malformed")]
#[case::truncated("/filter", truncated_recording(), 400, "truncated_json", "EOF")]
#[case::empty_body("/prioritize", Vec::new(), 400, "truncated_json", "EOF")]
#[case::pod_is_a_number("/filter", br#"{"Pod": 5, "NodeNames": ["a"]}"#.to_vec(), 422, "invalid_field", "invalid type")]
#[case::names_is_a_string("/filter", json!({"Pod": pod_json("1"), "NodeNames": "x"}).to_string().into_bytes(), 422, "invalid_field", "invalid type")]
#[case::victims_is_a_list("/preempt", json!({"Pod": pod_json("1"), "NodeNameToVictims": []}).to_string().into_bytes(), 422, "invalid_field", "invalid type")]
#[case::body_is_a_list("/filter", b"[]".to_vec(), 422, "invalid_field", "invalid type")]
#[case::missing_pod("/filter", br#"{"NodeNames": ["a"]}"#.to_vec(), 422, "missing_pod", "Pod")]
#[case::null_pod("/prioritize", br#"{"Pod": null, "NodeNames": ["a"]}"#.to_vec(), 422, "missing_pod", "Pod")]
#[case::null_pod_preempt("/preempt", br#"{"Pod": null, "NodeNameToMetaVictims": {}}"#.to_vec(), 422, "missing_pod", "Pod")]
#[case::no_nodes("/filter", json!({"Pod": pod_json("1")}).to_string().into_bytes(), 422, "missing_nodes", "neither Nodes nor NodeNames")]
#[case::null_nodes("/prioritize", json!({"Pod": pod_json("1"), "Nodes": null, "NodeNames": null}).to_string().into_bytes(), 422, "missing_nodes", "neither Nodes nor NodeNames")]
#[case::bad_quantity("/filter", json!({"Pod": pod_json("lots"), "NodeNames": ["a"]}).to_string().into_bytes(), 422, "invalid_field", "Pod.spec.containers[0].resources.requests.cpu")]
#[case::bad_node_quantity("/filter", json!({"Pod": pod_json("1"), "Nodes": {"items": [
    {"metadata": {"name": "n1"}, "status": {"allocatable": {"memory": "8 gigs"}}}]}}).to_string().into_bytes(),
    422, "invalid_field", "Nodes.items[0] (n1).status.allocatable.memory")]
#[case::bad_victim_quantity("/preempt", json!({"Pod": pod_json("1"), "NodeNameToVictims": {"n1": {"Pods": [
    {"metadata": {"name": "v"}, "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "-"}}}]}}]}}}).to_string().into_bytes(),
    422, "invalid_field", "NodeNameToVictims[n1].Pods[0].spec.containers[0].resources.requests.cpu")]
#[case::victim_elsewhere("/preempt", json!({"Pod": pod_json("1"), "NodeNameToVictims": {"n1": {"Pods": [victim_json("v1", "n1"), victim_json("v2", "n2")]}}}).to_string().into_bytes(),
    422, "victim_not_on_node", "ns/v2")]
#[case::duplicate_name("/filter", json!({"Pod": pod_json("1"), "NodeNames": ["a", "b", "a"]}).to_string().into_bytes(), 422, "duplicate_node", "node a ")]
#[case::duplicate_object("/prioritize", json!({"Pod": pod_json("1"), "Nodes": {"items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "a"}}]}}).to_string().into_bytes(),
    422, "duplicate_node", "node a ")]
#[tokio::test]
async fn bad_requests_are_rejected_with_a_named_problem(
    #[case] path: &str,
    #[case] body: Vec<u8>,
    #[case] status: u16,
    #[case] code: &str,
    #[case] names: &str,
) {
    let error = err_json(&default_app(), path, body, status, code).await;
    assert!(error.contains(names), "error does not name {names:?}: {error}");
}

#[tokio::test]
async fn unknown_path_is_404_and_wrong_method_405() {
    let app = default_app();
    let error = err_json(&app, "/bind", "{}", 404, "unknown_path").await;
    assert!(error.contains("/bind"), "{error}");
    let (status, body) = send(&app, Method::GET, "/filter", Body::empty()).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["code"], "method_not_allowed");
    assert!(v["error"].as_str().unwrap().contains("GET"), "{v}");
    let (status, _) = send(&app, Method::POST, "/healthz", Body::empty()).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
}

#[rstest]
#[case::whole_body(false)]
#[case::streamed_without_length(true)]
#[tokio::test]
async fn body_over_the_limit_is_413(#[case] streamed: bool) {
    let mut state = state_with(Policy::builtin_default().enforced(), None);
    state.limits.max_body_bytes = 1024;
    let app = router(state, "", decision_workers());
    let body = payload(R1, "0001-filter.json");
    assert!(body.len() > 1024);
    let body = if streamed {
        let chunks: Vec<Result<Bytes, std::io::Error>> =
            body.chunks(100).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
        Body::from_stream(futures::stream::iter(chunks))
    } else {
        Body::from(body)
    };
    let error = err_json(&app, "/filter", body, 413, "body_too_large").await;
    assert!(error.contains("1024"), "{error}");
    // Small requests still pass.
    let small = json!({"Pod": pod_json("1"), "NodeNames": ["a"]}).to_string();
    ok_json(&app, "/filter", small).await;
}

#[tokio::test]
async fn a_declared_length_over_the_limit_is_413_before_the_body_arrives() {
    let mut state = state_with(Policy::builtin_default().enforced(), None);
    state.limits.max_body_bytes = 1024;
    state.limits.request_timeout = Duration::from_secs(30);
    let app = router(state, "", decision_workers());
    // The body never arrives: only the header can say it is too large.
    let req = Request::post("/filter")
        .header("content-type", "application/json")
        .header("content-length", "1000000")
        .body(stalled_body())
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(10), app.oneshot(req))
        .await
        .expect("answered from the header")
        .unwrap();
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["code"], "body_too_large");
    assert!(v["error"].as_str().unwrap().contains("Content-Length 1000000"), "{v}");
}

#[tokio::test]
async fn body_over_64_mib_is_accepted_under_the_default_limit() {
    let app = default_app();
    let pod = payload_json(R2, "0001-filter.json")["Pod"].clone();
    let mut body = json!({"Pod": pod, "NodeNames": ["node-a1", "node-a2"]}).to_string();
    body.pop(); // '}'
    body.push_str(r#","Padding":""#);
    body.push_str(&"x".repeat(65 << 20));
    body.push_str(r#""}"#);
    assert!(body.len() > 64 << 20);
    let answer = ok_json(&app, "/filter", body).await;
    assert_eq!(kept_names(&answer), ["node-a1", "node-a2"]);
}

#[rstest]
#[case::top_level("/filter", "")]
#[case::unknown_key("/filter", r#"{"Extra": "#)]
#[case::inside_pod("/prioritize", r#"{"Pod": {"spec": {"x": "#)]
#[case::inside_node_item("/filter", r#"{"Pod": {}, "Nodes": {"items": [{"metadata": {"name": "n"}, "x": "#)]
#[case::inside_victims("/preempt", r#"{"Pod": {}, "NodeNameToVictims": {"n": {"Pods": [{"spec": {"x": "#)]
#[tokio::test]
async fn deeply_nested_json_is_a_client_error(#[case] path: &str, #[case] prefix: &str) {
    let app = default_app();
    let depth = 100_000;
    let body = format!("{prefix}{}{}", "[".repeat(depth), "]".repeat(depth));
    let (status, bytes) = post(&app, path, body).await;
    assert!(status.is_client_error(), "{status}: {}", String::from_utf8_lossy(&bytes));
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert!(v["code"].is_string() && v["error"].is_string(), "{v}");
    // And the service still answers.
    ok_json(&app, "/filter", json!({"Pod": pod_json("1"), "NodeNames": ["a"]}).to_string()).await;
}

/// One chunk of an unfinished request, then nothing, ever.
fn stalled_body() -> Body {
    use futures::StreamExt;
    let first = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from_static(br#"{"Pod": {"#))]);
    Body::from_stream(first.chain(futures::stream::pending()))
}

#[tokio::test]
async fn no_concurrency_budget_answers_503_overloaded() {
    let mut state = state_with(Policy::builtin_default().enforced(), None);
    state.limits.max_concurrency = 0;
    let app = router(state.clone(), "", decision_workers());
    err_json(&app, "/filter", payload(R2, "0001-filter.json"), 503, "overloaded").await;
    // Refusals are counted like any answer, so they can be alerted on.
    let (_, metrics) = get(&admin_router(state), "/metrics").await;
    assert!(
        metrics.lines().any(|l| l.starts_with("coloc_requests_total")
            && l.contains("code=\"overloaded\"")
            && l.contains("verb=\"filter\"")
            && !l.ends_with(" 0")),
        "{metrics}"
    );
    // Probes are not subject to the verb budget.
    let (status, _) = send(&app, Method::GET, "/healthz", Body::empty()).await;
    assert_eq!(status, StatusCode::OK);
}

// Admission (body first, then a slot), timeouts and cancellation: tests/admission.rs.

// ---- 6. health, readiness, metrics -------------------------------------------------------

async fn get(app: &Router, path: &str) -> (StatusCode, String) {
    let (status, body) = send(app, Method::GET, path, Body::empty()).await;
    (status, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test]
async fn healthz_and_readyz() {
    let app = default_app();
    assert_eq!(get(&app, "/healthz").await.0, StatusCode::OK);
    assert_eq!(get(&app, "/readyz").await.0, StatusCode::OK, "no view needed: ready");

    let policy = Policy::builtin_default().enforced();
    let cell = Arc::new(ViewCell::default());
    let app = router(AppState::new(policy.clone(), cell.clone(), ViewSource::Kubernetes), "", decision_workers());
    assert_eq!(get(&app, "/healthz").await.0, StatusCode::OK, "alive while syncing");
    let (status, body) = get(&app, "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["code"], "not_ready");
    cell.publish(View::build(snapshot::load(&snapshot_path(R1)).unwrap(), &policy));
    let (status, body) = get(&app, "/readyz").await;
    assert_eq!(status, StatusCode::OK);
    // Requeue off: bare pods it would bring back are taken only as a last resort, and lost.
    assert!(
        body.contains("requeue: off (serve --kube --requeue): bare pods of batch, free are victims of last resort"),
        "{body}"
    );
}

#[tokio::test]
async fn metrics_count_requests_and_decisions() {
    let state = state_with(custom_policy(), None);
    let (app, admin) = (router(state.clone(), "", decision_workers()), admin_router(state));
    assert_eq!(get(&admin, "/metrics").await.0, StatusCode::OK);
    ok_json(&app, "/filter", payload(R1, "0001-filter.json")).await;
    let mut never = payload_json(R1, "0037-preempt.json");
    never["Pod"] = cluster_pod("online-never");
    ok_json(&app, "/preempt", never.to_string()).await;

    let (status, text) = get(&admin, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    let line = |name: &str, labels: &[&str]| {
        // Counted, not only exported (the answers' series exist at 0 from the start).
        text.lines()
            .any(|l| l.starts_with(&format!("{name}{{")) && labels.iter().all(|x| l.contains(x)) && !l.ends_with(" 0"))
    };
    assert!(line("coloc_requests_total", &[r#"verb="filter""#, r#"status="200""#]), "{text}");
    assert!(line("coloc_decisions_total", &[r#"verb="preempt""#, r#"reason="preemption_never""#]), "{text}");
    assert!(line("coloc_request_duration_seconds_count", &[r#"verb="filter""#]), "{text}");
}

// ---- 7. path prefix ----------------------------------------------------------------------

#[tokio::test]
async fn path_prefix_moves_the_verbs_only() {
    for prefix in ["/scheduler", "/scheduler/"] {
        let app = router(state_with(Policy::builtin_default().enforced(), None), prefix, decision_workers());
        ok_json(&app, "/scheduler/filter", payload(R2, "0001-filter.json")).await;
        ok_json(&app, "/scheduler/prioritize", payload(R2, "0002-prioritize.json")).await;
        ok_json(&app, "/scheduler/preempt", payload(R1, "0037-preempt.json")).await;
        err_json(&app, "/filter", payload(R2, "0001-filter.json"), 404, "unknown_path").await;
        assert_eq!(get(&app, "/healthz").await.0, StatusCode::OK);
        assert_eq!(get(&app, "/metrics").await.0, StatusCode::NOT_FOUND);
    }
}

// ---- 8. which port serves what -----------------------------------------------------------

/// Decisions name pods and reasons, metrics describe the workload: both only on the admin
/// port (loopback by default), never on the scheduler port or the probes' port.
#[tokio::test]
async fn metrics_and_decisions_are_served_on_the_admin_port_only() {
    let state = state_with(Policy::builtin_default().enforced(), Some(&snapshot_path(R1)));
    let (app, health, admin) =
        (router(state.clone(), "", decision_workers()), health_router(state.clone()), admin_router(state));
    ok_json(&app, "/preempt", payload(R1, "0037-preempt.json")).await;
    let decisions = "/decisions?pod=online/online-2";
    for path in ["/metrics", decisions] {
        for (port, router) in [("scheduler", &app), ("health", &health)] {
            let (status, body) = get(router, path).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{path} on the {port} port: {body}");
            let v: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(v["code"], "unknown_path", "{body}");
            let listed = v["error"].as_str().unwrap().rsplit_once(": ").unwrap().1;
            assert!(
                !listed.contains("/metrics") && !listed.contains("/decisions"),
                "{port} port's 404 lists only its own routes: {body}"
            );
        }
    }
    let (status, text) = get(&admin, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    assert!(text.contains("coloc_requests_total"), "{text}");
    let (status, body) = get(&admin, decisions).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        serde_json::from_str::<Value>(&body).unwrap()["decisions"].as_array().is_some_and(|d| !d.is_empty()),
        "{body}"
    );
    // Each port's 404 lists what it serves; the admin port serves no probes and no verbs.
    let (_, body) = get(&app, "/nope").await;
    assert!(body.contains("GET /healthz, /readyz") && body.contains("POST /filter"), "{body}");
    let (_, body) = get(&health, "/nope").await;
    assert!(body.contains("this port serves /healthz, /readyz\""), "{body}");
    for path in ["/healthz", "/readyz", "/nope"] {
        let (status, body) = get(&admin, path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
        assert!(body.contains("this port serves /metrics, /decisions"), "{body}");
    }
    let (status, _) = send(&admin, Method::POST, "/preempt", Body::from(payload(R1, "0037-preempt.json"))).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// Two preemptors of one wave, answered one after the other before the view shows the
/// first one's nomination: the second is not given the room the first was promised.
#[tokio::test]
async fn a_second_preemptor_of_a_wave_is_not_given_the_room_promised_to_the_first() {
    for round in [R1, R2] {
        let snap = snapshot_path(round);
        let app = app(Policy::builtin_default().enforced(), Some(snap.as_path()));
        let first: Value = serde_json::from_slice(&payload(round, "0037-preempt.json")).unwrap();
        let mut second = first.clone();
        second["Pod"]["metadata"]["name"] = json!("web-second");
        second["Pod"]["metadata"]["uid"] = json!("uid-of-the-second-preemptor");
        let a = ok_json(&app, "/preempt", first.to_string()).await;
        let b = ok_json(&app, "/preempt", second.to_string()).await;
        let (a, b) = (meta_victims(&a), meta_victims(&b));
        assert!(!a.is_empty(), "{round}: the first preemptor is answered");
        assert_ne!(
            a.iter().map(|(n, v)| (n.to_string(), answer_uids(v))).collect::<Vec<_>>(),
            b.iter().map(|(n, v)| (n.to_string(), answer_uids(v))).collect::<Vec<_>>(),
            "{round}: the second preemptor was given the first one's room"
        );
        // A fresh extender (nothing promised) gives the second the same room as the first.
        let fresh = app_fresh(round);
        let c = ok_json(&fresh, "/preempt", second.to_string()).await;
        assert_eq!(
            a.iter().map(|(n, v)| (n.to_string(), answer_uids(v))).collect::<Vec<_>>(),
            meta_victims(&c).iter().map(|(n, v)| (n.to_string(), answer_uids(v))).collect::<Vec<_>>(),
            "{round}: alone, the second preemptor takes the same room"
        );
    }
}

fn app_fresh(round: &str) -> Router {
    let snap = snapshot_path(round);
    app(Policy::builtin_default().enforced(), Some(snap.as_path()))
}

/// The decision workers `serve` starts beside the router.
fn decision_workers() -> std::sync::Arc<coloc_extender::workers::Workers> {
    std::sync::Arc::new(coloc_extender::workers::Workers::new(1).unwrap())
}
