//! Strict decoding of extender requests (the hardening issue's wire rows): an object is
//! never read from an array, a node is never listed twice, counts are never negative,
//! every victim names its pod, errors name the item they are about, and no error quotes
//! more than a few hundred bytes of the input.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use coloc_extender::cluster::{snapshot, View, ViewCell};
use coloc_extender::http::router;
use coloc_extender::http::state::{AppState, ViewSource};
use coloc_extender::pipeline::{replay, Verb};
use coloc_extender::policy::Policy;
use coloc_extender::wire::error::{clip_message, DecodeError, MESSAGE_LIMIT};
use coloc_extender::wire::{decode_extender_args, decode_preempt_args, decode_preempt_args_for, Candidates};
use http_body_util::BodyExt;
use proptest::prelude::*;
use rstest::rstest;
use serde_json::{json, Value};
use tower::ServiceExt;

/// 2026-11-21T19:00:00Z, ten minutes after the recording.
const NOW: i64 = 1_795_287_600;
const R1: &str = "r1-nodecache-false";
const R2: &str = "r2-nodecache-true";

// ---- helpers -----------------------------------------------------------------------------

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn payload_path(round: &str, file: &str) -> PathBuf {
    root().join("tests/fixtures/payloads").join(round).join(file)
}

fn payload_json(round: &str, file: &str) -> Value {
    serde_json::from_slice(&std::fs::read(payload_path(round, file)).unwrap()).unwrap()
}

fn app(snapshot_of: Option<&str>) -> Router {
    let policy = Policy::builtin_default().enforced();
    let cell = ViewCell::default();
    let source = match snapshot_of {
        Some(round) => {
            cell.publish(View::build(
                snapshot::load(&payload_path(round, "0037-preempt.snapshot.json")).unwrap(),
                &policy,
            ));
            ViewSource::Snapshot
        }
        None => ViewSource::None,
    };
    let mut state = AppState::new(policy, Arc::new(cell), source);
    state.clock = Arc::new(|| NOW);
    router(state, "", decision_workers())
}

async fn post(app: &Router, path: &str, body: impl Into<Body>) -> (StatusCode, Bytes) {
    let req = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header("content-type", "application/json")
        .body(body.into())
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    (status, resp.into_body().collect().await.unwrap().to_bytes())
}

/// POST that must fail with `status` and a `{code, error}` body; returns the error text.
async fn err_json(app: &Router, path: &str, body: impl Into<Body>, status: u16, code: &str) -> String {
    let (got, bytes) = post(app, path, body).await;
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(4096)]);
    assert_eq!(got.as_u16(), status, "{path}: {text}");
    let v: Value = serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("error body is not JSON ({e}): {text}"));
    assert_eq!(v["code"], code, "{text}");
    v["error"].as_str().unwrap_or_else(|| panic!("no error text: {text}")).to_string()
}

async fn ok_json(app: &Router, path: &str, body: impl Into<Body>) -> Value {
    let (status, bytes) = post(app, path, body).await;
    assert_eq!(status, StatusCode::OK, "{path}: {}", String::from_utf8_lossy(&bytes));
    serde_json::from_slice(&bytes).unwrap()
}

fn pod_json() -> Value {
    json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u-p"},
           "spec": {"priority": 10000, "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}})
}

fn victim_json(name: &str, node: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "ns", "uid": format!("u-{name}")},
           "spec": {"nodeName": node, "priority": 10, "containers": []}})
}

fn first_key(v: &Value) -> String {
    v.as_object().unwrap().keys().next().unwrap().clone()
}

/// The object at `pointer` replaced by the array of its values, in order: what serde's
/// derive would read positionally as the same struct.
fn positional(mut body: Value, pointer: &str) -> String {
    let at = body.pointer_mut(pointer).unwrap_or_else(|| panic!("no {pointer}"));
    let values: Vec<Value> =
        at.as_object().unwrap_or_else(|| panic!("{pointer} is not an object")).values().cloned().collect();
    *at = Value::Array(values);
    body.to_string()
}

// ---- row 9: NumPDBViolations is never negative ------------------------------------------

#[rstest]
#[case::full(R1, "NodeNameToVictims")]
#[case::meta(R2, "NodeNameToMetaVictims")]
#[tokio::test]
async fn negative_pdb_violations_are_rejected_naming_the_node(
    #[case] round: &str,
    #[case] map: &str,
    #[values(false, true)] with_view: bool,
) {
    let mut req = payload_json(round, "0037-preempt.json");
    req[map]["node-c1"]["NumPDBViolations"] = json!(-1000);
    let app = app(with_view.then_some(round));
    let error = err_json(&app, "/preempt", req.to_string(), 422, "invalid_field").await;
    assert!(error.contains(&format!("{map}[node-c1].NumPDBViolations")) && error.contains("-1000"), "{error}");

    // Zero and positive counts are still read.
    req[map]["node-c1"]["NumPDBViolations"] = json!(1);
    ok_json(&app, "/preempt", req.to_string()).await;
}

#[test]
fn negative_pdb_violations_on_a_placeholder_candidate_are_rejected_too() {
    let body =
        json!({"Pod": pod_json(), "NodeNameToMetaVictims": {"n1": {"Pods": [], "NumPDBViolations": -1}}}).to_string();
    match decode_preempt_args(body.as_bytes()) {
        Err(DecodeError::NegativePdbViolations { node, value: -1, .. }) => assert_eq!(node, "n1"),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("accepted"),
    }
}

// ---- row 11: no object from an array -------------------------------------------------------

/// Bodies that serde's derive reads positionally; each must be a 422 naming what was expected.
#[rstest]
#[case::pod_as_two_objects("/filter", json!({"Pod": [{"metadata": {"name": "p"}}, {"containers": []}], "NodeNames": ["a"]}))]
#[case::pod_as_two_objects_preempt("/preempt", json!({"Pod": [{"metadata": {"name": "p"}}, {}], "NodeNameToMetaVictims": {}}))]
#[case::metadata_as_array("/prioritize", json!({"Pod": {"metadata": ["p", "ns", "u-p"]}, "NodeNames": ["a"]}))]
#[case::spec_as_array("/filter", json!({"Pod": {"metadata": {"name": "p"}, "spec": [[{"resources": {"requests": {"cpu": "64"}}}]]}, "NodeNames": ["a"]}))]
#[case::container_as_array("/filter", json!({"Pod": {"spec": {"containers": [[{"requests": {"cpu": "64"}}]]}}, "NodeNames": ["a"]}))]
#[case::resources_as_array("/filter", json!({"Pod": {"spec": {"containers": [{"resources": [{"cpu": "64"}]}]}}, "NodeNames": ["a"]}))]
#[case::nodes_as_array("/filter", json!({"Pod": pod_json(), "Nodes": [[{"metadata": {"name": "n1"}}]]}))]
#[case::node_item_as_array("/filter", json!({"Pod": pod_json(), "Nodes": {"items": [[{"name": "n1"}, {}, {"allocatable": {"cpu": "1"}}]]}}))]
#[case::node_metadata_as_array("/prioritize", json!({"Pod": pod_json(), "Nodes": {"items": [{"metadata": ["n1"]}]}}))]
#[case::victim_as_array("/preempt", json!({"Pod": pod_json(), "NodeNameToVictims": {"n1": {"Pods": [[{"name": "v", "uid": "u-v"}, {"nodeName": "n1"}]]}}}))]
#[case::victim_metadata_as_array("/preempt", json!({"Pod": pod_json(), "NodeNameToVictims": {"n1": {"Pods": [{"metadata": ["v", "ns", "u-v"], "spec": {"nodeName": "n1"}}]}}}))]
#[case::victims_object_as_array("/preempt", json!({"Pod": pod_json(), "NodeNameToVictims": {"n1": [[victim_json("v", "n1")], 0]}}))]
#[case::meta_victims_as_array("/preempt", json!({"Pod": pod_json(), "NodeNameToMetaVictims": {"n1": [[{"UID": "u"}], 0]}}))]
#[case::meta_pod_as_array("/preempt", json!({"Pod": pod_json(), "NodeNameToMetaVictims": {"n1": {"Pods": [["u"]]}}}))]
#[tokio::test]
async fn arrays_where_objects_belong_are_rejected(#[case] path: &str, #[case] body: Value) {
    let error = err_json(&app(None), path, body.to_string(), 422, "invalid_field").await;
    assert!(error.contains("invalid type: sequence, expected"), "{error}");
}

/// The same through the recorded payloads: any decoded object turned into the array of
/// its values is rejected, with and without a cluster view. (A Node object the view holds
/// is read for its name only, tests/objects_mode.rs: what it carries besides is
/// kube-scheduler's, and goes back unread.)
#[rstest]
#[case::pod("/filter", R1, "0001-filter.json", "/Pod")]
#[case::pod_spec("/filter", R1, "0001-filter.json", "/Pod/spec")]
#[case::pod_status("/prioritize", R1, "0002-prioritize.json", "/Pod/status")]
#[case::container("/filter", R1, "0001-filter.json", "/Pod/spec/containers/0")]
#[case::container_resources("/filter", R1, "0001-filter.json", "/Pod/spec/containers/0/resources")]
#[case::nodes("/filter", R1, "0001-filter.json", "/Nodes")]
#[case::node_item("/filter", R1, "0001-filter.json", "/Nodes/items/2")]
#[case::node_status("/prioritize", R1, "0002-prioritize.json", "/Nodes/items/0/status")]
#[case::preemptor("/preempt", R2, "0037-preempt.json", "/Pod")]
#[case::victim("/preempt", R1, "0037-preempt.json", "/NodeNameToVictims/node-c1/Pods/1")]
#[case::victim_metadata("/preempt", R1, "0037-preempt.json", "/NodeNameToVictims/node-c1/Pods/0/metadata")]
#[case::victims_object("/preempt", R1, "0037-preempt.json", "/NodeNameToVictims/node-a1")]
#[case::meta_victims_object("/preempt", R2, "0037-preempt.json", "/NodeNameToMetaVictims/node-a1")]
#[case::meta_pod("/preempt", R2, "0037-preempt.json", "/NodeNameToMetaVictims/node-a2/Pods/2")]
#[tokio::test]
async fn recorded_objects_turned_into_arrays_are_rejected(
    #[case] path: &str,
    #[case] round: &str,
    #[case] file: &str,
    #[case] pointer: &str,
    #[values(false, true)] with_view: bool,
) {
    let body = positional(payload_json(round, file), pointer);
    if with_view && pointer.starts_with("/Nodes/items/") && pointer.ends_with("/status") {
        ok_json(&app(Some(round)), path, body).await;
        return;
    }
    let error = err_json(&app(with_view.then_some(round)), path, body, 422, "invalid_field").await;
    assert!(error.contains("invalid type: sequence, expected"), "{pointer}: {error}");
}

// ---- row 12: a node key listed twice -------------------------------------------------------

#[rstest]
#[case::full(R1, "NodeNameToVictims")]
#[case::meta(R2, "NodeNameToMetaVictims")]
#[tokio::test]
async fn a_node_listed_twice_in_a_preempt_map_is_rejected(
    #[case] round: &str,
    #[case] map: &str,
    #[values(false, true)] with_view: bool,
) {
    // serde_json::Value keeps one of each key: splice the repeat in as text.
    let req = payload_json(round, "0037-preempt.json");
    let node = first_key(&req[map]);
    let repeat = format!("{:?}:{}", node, req[map][&node]);
    let text = req.to_string();
    let open = format!("\"{map}\":{{");
    let at = text.find(&open).unwrap() + open.len();
    let body = format!("{}{repeat},{}", &text[..at], &text[at..]);
    let error = err_json(&app(with_view.then_some(round)), "/preempt", body, 422, "duplicate_node").await;
    assert!(error.contains(&format!("node {node} ")) && error.contains(map), "{error}");
}

#[test]
fn a_node_listed_twice_with_different_victims_is_rejected_not_last_wins() {
    let body = format!(
        r#"{{"Pod":{},"NodeNameToMetaVictims":{{"n1":{{"Pods":[{{"UID":"a"}}]}},"n2":{{"Pods":[{{"UID":"b"}}]}},"n1":{{"Pods":[{{"UID":"c"}}]}}}}}}"#,
        pod_json()
    );
    match decode_preempt_args(body.as_bytes()) {
        Err(e @ DecodeError::DuplicateNode { .. }) => {
            assert_eq!(e.to_string(), "node n1 is listed more than once in NodeNameToMetaVictims")
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("accepted"),
    }
}

// ---- row 13: victims name their pod, once ----------------------------------------------------

#[rstest]
#[case::full_no_uid(R1, json!({"metadata": {"name": "nouid", "namespace": "batch"}, "spec": {"nodeName": "node-c1"}}), "metadata.uid")]
#[case::full_null_uid(R1, json!({"metadata": {"name": "nouid", "uid": null}, "spec": {"nodeName": "node-c1"}}), "metadata.uid")]
#[case::full_empty_uid(R1, json!({"metadata": {"name": "nouid", "uid": ""}}), "metadata.uid")]
#[case::full_no_metadata(R1, json!({"spec": {"nodeName": "node-c1"}}), "metadata.uid")]
#[case::meta_no_uid(R2, json!({}), "UID")]
#[case::meta_null_uid(R2, json!({"UID": null}), "UID")]
#[case::meta_empty_uid(R2, json!({"UID": ""}), "UID")]
#[tokio::test]
async fn a_victim_without_a_uid_is_rejected_naming_node_and_index(
    #[case] round: &str,
    #[case] victim: Value,
    #[case] field: &str,
    #[values(false, true)] with_view: bool,
) {
    let map = if round == R1 { "NodeNameToVictims" } else { "NodeNameToMetaVictims" };
    let mut req = payload_json(round, "0037-preempt.json");
    req[map]["node-c1"]["Pods"].as_array_mut().unwrap().insert(1, victim);
    let error = err_json(&app(with_view.then_some(round)), "/preempt", req.to_string(), 422, "missing_uid").await;
    assert!(error.contains(&format!("{map}[node-c1].Pods[1] has no {field}")), "{error}");
}

/// Without a view, kube's victims are judged and returned as they came: a repeated victim
/// came back twice. It is now read once, so the answer is the one without the repeat.
#[rstest]
fn a_repeated_victim_is_answered_once(#[values(0, 1, 2)] which: usize) {
    let policy = Policy::builtin_default().enforced();
    let req = payload_json(R1, "0037-preempt.json");
    let want = replay(Verb::Preempt, req.to_string().as_bytes(), &policy, None, NOW).unwrap().body;
    let want: Value = serde_json::from_slice(&want).unwrap();
    assert_eq!(want["NodeNameToMetaVictims"]["node-gpu1"]["Pods"].as_array().unwrap().len(), 3, "{want}");

    let mut repeated = req.clone();
    let pods = repeated["NodeNameToVictims"]["node-gpu1"]["Pods"].as_array_mut().unwrap();
    let copy = pods[which].clone();
    pods.push(copy.clone());
    pods.insert(0, copy);
    let got = replay(Verb::Preempt, repeated.to_string().as_bytes(), &policy, None, NOW).unwrap().body;
    let got: Value = serde_json::from_slice(&got).unwrap();
    assert_eq!(got, want);
}

#[test]
fn repeated_victims_are_decoded_once_keeping_the_first() {
    let uids = |list: &[&str]| list.iter().map(|u| json!({"UID": u})).collect::<Vec<_>>();
    let body = json!({"Pod": pod_json(), "NodeNameToMetaVictims": {
        "n1": {"Pods": uids(&["b", "a", "b", "c", "a"]), "NumPDBViolations": 1},
        "n2": {"Pods": uids(&["a"])},
    }});
    let args = decode_preempt_args(body.to_string().as_bytes()).unwrap();
    let Candidates::Meta(map) = args.candidates else { panic!("not meta") };
    assert_eq!(map["n1"].uids, ["b", "a", "c"]);
    assert_eq!(map["n2"].uids, ["a"], "the same pod under another node is another node's business");

    let body = json!({"Pod": pod_json(), "NodeNameToVictims": {"n1": {"Pods": [
        victim_json("v1", "n1"), victim_json("v2", "n1"), victim_json("v1", "n1")]}}});
    let args = decode_preempt_args(body.to_string().as_bytes()).unwrap();
    let Candidates::Full(map) = args.candidates else { panic!("not full") };
    let v = &map["n1"];
    assert_eq!((v.count, v.uids.as_slice()), (2, ["u-v1".to_string(), "u-v2".to_string()].as_slice()));
    assert_eq!(v.pods.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["v1", "v2"]);
}

// ---- row 15: errors inside an item name the item -----------------------------------------------

fn nodes_with_bad_item(bad: Value) -> Value {
    let mut items: Vec<Value> = (0..5).map(|i| json!({"metadata": {"name": format!("node-{i}")}})).collect();
    items[3] = bad;
    json!({"Pod": pod_json(), "Nodes": {"items": items}})
}

#[rstest]
#[case::named(
    nodes_with_bad_item(json!({"metadata": {"name": "node-x", "labels": {"zone": 5}}})),
    "Nodes.items[3] (node-x): invalid type: integer `5`, expected a string at column 31 of the item"
)]
#[case::name_unreadable(
    nodes_with_bad_item(json!({"metadata": {"name": 7}})),
    "Nodes.items[3]: invalid type: integer `7`, expected a string at column 21 of the item"
)]
#[case::victim(
    json!({"Pod": pod_json(), "NodeNameToVictims": {"n1": {"Pods": [
        victim_json("v1", "n1"),
        {"metadata": {"name": "v2", "namespace": "ns", "uid": "u2"}, "spec": {"nodeName": "n1", "priority": "high"}}]}}}),
    "NodeNameToVictims[n1].Pods[1] (ns/v2): invalid type: string \"high\", expected i32 at column 95 of the item"
)]
#[tokio::test]
async fn a_type_error_inside_an_item_names_the_item_and_its_position_in_it(#[case] body: Value, #[case] want: &str) {
    let path = if body.get("Nodes").is_some() { "/filter" } else { "/preempt" };
    let error = err_json(&app(None), path, body.to_string(), 422, "invalid_field").await;
    assert_eq!(error, want);
}

/// Victims on a node the view holds are read for their UIDs in the first pass: the same
/// UIDs as decoding every pod, and a bad one is named as precisely.
#[rstest]
fn victims_read_for_their_uids_only_give_the_same_uids_and_the_same_errors(#[values(false, true)] needs_pods: bool) {
    let req = payload_json(R1, "0037-preempt.json");
    let uids = |args: coloc_extender::wire::PreemptArgs| {
        let Candidates::Full(map) = args.candidates else { panic!("not full") };
        map.into_iter().map(|(n, v)| (n, v.uids, v.count)).collect::<Vec<_>>()
    };
    let all = uids(decode_preempt_args(req.to_string().as_bytes()).unwrap());
    let some = uids(decode_preempt_args_for(req.to_string().as_bytes(), |_| needs_pods, &Default::default()).unwrap());
    assert_eq!(some, all);

    let body = json!({"Pod": pod_json(), "NodeNameToVictims": {"n1": {"Pods": [
        victim_json("v1", "n1"),
        {"metadata": {"name": "v2", "namespace": "ns", "uid": 2}, "spec": {"nodeName": "n1"}}]}}});
    let error = decode_preempt_args_for(body.to_string().as_bytes(), |_| needs_pods, &Default::default())
        .err()
        .expect("rejected")
        .to_string();
    assert_eq!(
        error,
        "NodeNameToVictims[n1].Pods[1] (ns/v2): invalid type: integer `2`, expected a string at column 49 of the item"
    );
}

#[test]
fn a_type_error_in_a_pretty_printed_item_gives_line_and_column() {
    let body = serde_json::to_string_pretty(&nodes_with_bad_item(
        json!({"metadata": {"name": "node-x", "labels": {"zone": 5}}}),
    ))
    .unwrap();
    let error = decode_extender_args(body.as_bytes()).err().expect("rejected").to_string();
    assert_eq!(
        error,
        "Nodes.items[3] (node-x): invalid type: integer `5`, expected a string at line 4 column 21 of the item"
    );
}

// ---- row 6: no error echoes a huge input ---------------------------------------------------

const MIB: usize = 1 << 20;

fn huge(n: usize) -> String {
    "x".repeat(n)
}

#[rstest]
#[case::pod_is_a_20_mib_string("/filter", json!({"Pod": huge(20 * MIB), "NodeNames": ["a"]}), 422, "invalid_field")]
#[case::huge_quantity("/filter", json!({"Pod": {"spec": {"containers": [{"resources": {"requests": {"cpu": huge(MIB)}}}]}}, "NodeNames": ["a"]}), 422, "invalid_field")]
#[case::huge_resource_name("/filter", json!({"Pod": {"spec": {"overhead": {huge(MIB): "lots"}}}, "NodeNames": ["a"]}), 422, "invalid_field")]
#[case::huge_time("/filter", json!({"Pod": {"metadata": {"creationTimestamp": huge(MIB)}}, "NodeNames": ["a"]}), 422, "invalid_field")]
#[case::huge_duplicate_name("/filter", json!({"Pod": pod_json(), "NodeNames": [huge(MIB), huge(MIB)]}), 422, "duplicate_node")]
#[case::huge_node_name_in_item_error("/filter", nodes_with_bad_item(json!({"metadata": {"name": huge(MIB), "labels": {"a": [huge(MIB)]}}})), 422, "invalid_field")]
#[case::huge_node_key("/preempt", json!({"Pod": pod_json(), "NodeNameToMetaVictims": {huge(MIB): {"Pods": [], "NumPDBViolations": -1}}}), 422, "invalid_field")]
#[case::huge_victim_elsewhere("/preempt", json!({"Pod": pod_json(), "NodeNameToVictims": {huge(MIB): {"Pods": [victim_json(&huge(MIB), &huge(MIB + 1))]}}}), 422, "victim_not_on_node")]
#[case::huge_string_for_a_number("/preempt", json!({"Pod": pod_json(), "NodeNameToMetaVictims": {"n1": {"Pods": [], "NumPDBViolations": huge(MIB)}}}), 422, "invalid_field")]
#[tokio::test]
async fn errors_quote_at_most_a_few_hundred_bytes_of_the_input(
    #[case] path: &str,
    #[case] body: Value,
    #[case] status: u16,
    #[case] code: &str,
) {
    let body = body.to_string();
    let (got, bytes) = post(&app(None), path, body).await;
    let head = String::from_utf8_lossy(&bytes[..bytes.len().min(2048)]);
    assert_eq!(got.as_u16(), status, "{head}");
    assert!(bytes.len() < 2 * 1024, "{} byte error body: {head}…", bytes.len());
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(v["code"], code, "{head}");
    let error = v["error"].as_str().unwrap();
    assert!(error.contains(" bytes)"), "says how much was left out: {error}");
    assert!(!error.contains(&"x".repeat(260)), "{error}");
}

#[test]
fn a_huge_pod_string_is_clipped_in_the_decode_error_too() {
    // replay prints the DecodeError itself.
    let body = json!({"Pod": huge(20 * MIB), "NodeNames": ["a"]}).to_string();
    let error = decode_extender_args(body.as_bytes()).err().expect("rejected").to_string();
    assert!(error.len() < MESSAGE_LIMIT, "{} bytes", error.len());
    assert!(error.starts_with("request JSON has a value of the wrong type: invalid type: string \"xxx"), "{error}");
    assert!(error.contains(&format!("…\" ({} bytes), expected struct Pod at line 1 column ", 20 * MIB)), "{error}");
}

#[rstest]
#[case::short("invalid type: string \"abc\", expected struct Pod", "invalid type: string \"abc\", expected struct Pod")]
#[case::escapes(&format!("a \"{}\\\"{}\" b", "y".repeat(199), "z".repeat(300)), &format!("a \"{}…\" (501 bytes) b", "y".repeat(199)))]
#[case::backticks(&format!("unknown field `{}`, expected one of", "k".repeat(1000)), &format!("unknown field `{}…` (1000 bytes), expected one of", "k".repeat(200)))]
#[case::unclosed(&format!("x \"{}", "é".repeat(300)), &format!("x \"{}…\" (600 bytes)", "é".repeat(100)))]
fn clip_message_shortens_long_quotes(#[case] message: &str, #[case] want: &str) {
    assert_eq!(clip_message(message, MESSAGE_LIMIT), want);
}

proptest! {
    #[test]
    fn clip_message_never_panics_and_bounds_the_length(message in "([\"`\\\\a-z é😀]{0,40}|[a-z]{300}){0,12}", limit in 0usize..2000) {
        let out = clip_message(&message, limit);
        prop_assert!(out.len() <= limit + 40, "{} > {limit}: {out}", out.len());
        if message.len() <= limit.min(200) {
            prop_assert_eq!(out.as_ref(), message.as_str());
        }
    }
}

/// The decision workers `serve` starts beside the router.
fn decision_workers() -> std::sync::Arc<coloc_extender::workers::Workers> {
    std::sync::Arc::new(coloc_extender::workers::Workers::new(1).unwrap())
}
