//! The view keeps of a pod's annotations only those decisions read: however much a tenant
//! writes on its pods, a replica holds a few short values per pod. Every rule that reads an
//! annotation still finds it there.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use coloc_extender::cluster::{snapshot, Objects, RequeueView, View};
use coloc_extender::model::{marks, BaselineControl, COMPLETION_INDEX, INDEX_FAILURE_COUNT};
use coloc_extender::policy::{AnnotationsRead, Policy};
use coloc_extender::policy::{ALWAYS_READ, LONGEST_VALUE};
use proptest::prelude::*;
use serde_json::{json, Value};

/// A gang minimum the cluster's own tooling writes, named by the policy.
const MIN_MEMBERS: &str = "example.com/min-members";
const GROUP_LABEL: &str = "pod-group.scheduling.sigs.k8s.io/name";

fn policy_reading(min_member_annotations: &[&str]) -> Policy {
    let keys = min_member_annotations.iter().map(|k| format!("{k:?}")).collect::<Vec<_>>().join(", ");
    common::policy("prefer", &format!("gangs: {{minMemberAnnotations: [{keys}]}}"))
}

/// A running bare batch pod on n1 with these labels and annotations, as the API server
/// writes it.
fn pod_json(name: &str, labels: Value, annotations: Value) -> Value {
    json!({"kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
            "labels": labels, "annotations": annotations},
        "spec": {"nodeName": "n1", "priority": 100, "priorityClassName": "batch",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]},
        "status": {"phase": "Running"}})
}

/// `pods` on a node n1, as a snapshot holds them.
fn objects(pods: Vec<Value>) -> Objects {
    let node = json!({"kind": "Node", "apiVersion": "v1", "metadata": {"name": "n1"},
        "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}});
    let items: Vec<Value> = std::iter::once(node).chain(pods).collect();
    snapshot::parse(json!({"kind": "List", "items": items}).to_string().as_bytes()).unwrap()
}

fn view_of(pods: Vec<Value>, policy: &Policy) -> View {
    View::build(objects(pods), policy)
}

fn annotations_in(view: &View, name: &str) -> BTreeMap<String, String> {
    let pod = view.pod(&format!("default/{name}")).unwrap_or_else(|| panic!("{name} is not in the view"));
    pod.annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn a_pod_in_the_view_keeps_the_annotations_decisions_read_and_no_other() {
    let policy = policy_reading(&[MIN_MEMBERS]);
    let mut annotations = serde_json::Map::new();
    for key in ALWAYS_READ.iter().chain(&[MIN_MEMBERS]) {
        annotations.insert(key.to_string(), json!("1"));
    }
    let read = annotations.clone();
    annotations.insert("notes".into(), json!("n".repeat(240 * 1024)));
    annotations.insert("team".into(), json!("ml"));
    annotations.insert(marks::PREEMPTED_ON.into(), json!("n1"));
    annotations.insert("container.apparmor.security.beta.kubernetes.io/c".into(), json!("runtime/default"));
    let view = view_of(vec![pod_json("p", json!({}), Value::Object(annotations))], &policy);
    let kept = annotations_in(&view, "p");
    assert_eq!(kept.keys().collect::<Vec<_>>(), read.keys().collect::<Vec<_>>());
}

#[test]
fn a_pod_with_no_annotation_decisions_read_keeps_none() {
    let annotations = json!({"notes": "n".repeat(240 * 1024), "prometheus.io/scrape": "true"});
    let view = view_of(vec![pod_json("p", json!({}), annotations)], &common::policy("prefer", ""));
    assert!(annotations_in(&view, "p").is_empty());
}

/// A key of the policy's, of the marks, or anyone's; short, long, or longer than any name.
fn key() -> impl Strategy<Value = String> {
    let read: Vec<String> = ALWAYS_READ.iter().chain(&[MIN_MEMBERS]).map(|k| k.to_string()).collect();
    prop_oneof![prop::sample::select(read), "[a-z]{1,8}(\\.example\\.com/[a-z-]{1,12})?"]
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9/-]{0,12}",
        (LONGEST_VALUE - 2..LONGEST_VALUE + 3).prop_map(|n| "v".repeat(n)),
        (1usize..64).prop_map(|kib| "w".repeat(kib * 1024)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Exactly the read keys whose values could mean anything, whatever else is written.
    #[test]
    fn the_view_keeps_exactly_the_read_keys_of_any_annotations(
        annotations in prop::collection::btree_map(key(), value(), 0..10)
    ) {
        let policy = policy_reading(&[MIN_MEMBERS]);
        let read = AnnotationsRead::of(&policy.gangs);
        let view = view_of(vec![pod_json("p", json!({}), json!(annotations))], &policy);
        let expected: BTreeMap<String, String> = annotations
            .into_iter()
            .filter(|(k, v)| read.reads(k) && v.len() <= LONGEST_VALUE)
            .collect();
        prop_assert_eq!(annotations_in(&view, "p"), expected);
    }
}

// ---- every rule that reads an annotation still finds it ------------------------------------

/// Three members of a gang declared by a label, whose minimum only an annotation the policy
/// names gives.
fn gang_of_three(min: &str) -> Vec<Value> {
    (1..=3)
        .map(|i| {
            let annotations = json!({MIN_MEMBERS: min, "notes": "n".repeat(64 * 1024)});
            pod_json(&format!("m-{i}"), json!({GROUP_LABEL: "train"}), annotations)
        })
        .collect()
}

fn minimum_of(view: &View, name: &str) -> (usize, String) {
    let member = view.pod(&format!("default/{name}")).unwrap().clone();
    let info = view.gang(&view.gang_of(&member).expect("a gang"), &member);
    (info.min, info.min_from)
}

#[test]
fn a_gang_minimum_named_by_the_policy_is_read_from_a_pod_in_the_view() {
    let view = view_of(gang_of_three("2"), &policy_reading(&[MIN_MEMBERS]));
    assert_eq!(minimum_of(&view, "m-1"), (2, "min-members 2".into()));
    // A policy that does not name the key reads no minimum: every member must stay.
    let view = view_of(gang_of_three("2"), &policy_reading(&[]));
    assert_eq!(minimum_of(&view, "m-1").0, 3);
}

#[test]
fn a_copys_requeue_attempt_is_counted_from_the_view() {
    let annotations = json!({marks::FROM_UID: "uid-original", marks::FROM_POD: "default/original",
        marks::ATTEMPT: "3", marks::BASE_NAME: "original", "notes": "n".repeat(64 * 1024)});
    let pods = vec![pod_json("original-rq-1", json!({marks::LABEL: "true"}), annotations)];
    let policy = common::policy("prefer", "");
    let view = view_of(pods.clone(), &policy);
    let copy = view.pod("default/original-rq-1").unwrap();
    assert!(marks::is_replacement(copy));
    assert_eq!(marks::attempt_of(copy), 3);
    assert!(marks::replacement_name(copy).starts_with("original-rq-"), "named after the chain's first pod");
    // The requeue controller's view of the same pods counts it among the copies it settles.
    let requeue = RequeueView::build(objects(pods), &policy);
    assert_eq!(requeue.replacements().count(), 1);
}

#[test]
fn an_opt_out_and_a_jobs_index_and_failures_are_read_from_the_view() {
    let annotations = json!({marks::OPT_OUT: "never", COMPLETION_INDEX: "4", INDEX_FAILURE_COUNT: "2",
        "notes": "n".repeat(64 * 1024)});
    let view = view_of(vec![pod_json("p", json!({}), annotations)], &common::policy("prefer", ""));
    let pod = view.pod("default/p").unwrap();
    assert!(marks::opted_out(pod));
    assert_eq!(pod.completion_index(), Some(4));
    assert_eq!(pod.annotations.get(INDEX_FAILURE_COUNT), Some("2"));
}

#[test]
fn pod_security_is_judged_on_every_annotation_before_the_view_keeps_none_of_them() {
    let apparmor = "container.apparmor.security.beta.kubernetes.io/c";
    let view = view_of(vec![pod_json("p", json!({}), json!({apparmor: "unconfined"}))], &common::policy("prefer", ""));
    let pod = view.pod("default/p").unwrap();
    assert_eq!(pod.beyond_baseline, Some(BaselineControl::AppArmor));
    assert!(pod.annotations.is_empty());
}

#[test]
fn a_view_re_indexed_for_a_policy_that_reads_less_keeps_less() {
    let view = view_of(gang_of_three("2"), &policy_reading(&[MIN_MEMBERS]));
    let reads_less = policy_reading(&[]);
    assert!(!AnnotationsRead::of(&reads_less.gangs)
        .reads_more_than(&AnnotationsRead::of(&policy_reading(&[MIN_MEMBERS]).gangs)));
    let rebuilt = view.rebuild(&reads_less);
    assert!(annotations_in(&rebuilt, "m-1").is_empty());
    assert_eq!(annotations_in(&view, "m-1").len(), 1, "the published view is left as it was");
}

// ---- no rule reads an annotation the view does not keep --------------------------------------

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("tests.rs") {
            out.push(path);
        }
    }
}

/// Every read of a pod's annotations in `src/` names a key the view keeps, so a rule that
/// starts reading another one fails here rather than finding nothing in a live cluster.
/// (The JSON a copy is built from, and Kubernetes' own types, are not `Pod::annotations`.)
#[test]
fn every_annotation_read_of_a_pod_is_one_the_view_keeps() {
    let read = AnnotationsRead::default();
    // The constants reads name, by the name they are read with.
    let constants: BTreeMap<&str, &str> = [
        ("OPT_OUT", marks::OPT_OUT),
        ("FROM_UID", marks::FROM_UID),
        ("FROM_POD", marks::FROM_POD),
        ("ATTEMPT", marks::ATTEMPT),
        ("BASE_NAME", marks::BASE_NAME),
        ("COMPLETION_INDEX", COMPLETION_INDEX),
        ("INDEX_FAILURE_COUNT", INDEX_FAILURE_COUNT),
        ("VOLCANO_ANNOTATION", "scheduling.k8s.io/group-name"),
    ]
    .into();
    // Reads through a closure, and where it is given keys: the gang minimum
    // (`KUEUE_TOTAL_COUNT` and the policy's `minMemberAnnotations`), a release's marks.
    let closures = [("policy/model.rs", "a"), ("requeue/plan.rs", "k")];
    // Whole maps read: baseline judges them as the pod is decoded, before the view keeps
    // any; the view's own cut.
    let whole = ["wire/baseline.rs", "policy/annotations_read.rs"];
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut found = 0;
    let mut unknown = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap().to_string_lossy().replace('\\', "/");
        let text = std::fs::read_to_string(file).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap();
        for (at, _) in code.match_indices("annotations.") {
            let rest = &code[at + "annotations.".len()..];
            let arg = |call: &str| rest.strip_prefix(call).and_then(|r| r.split(')').next());
            let Some(arg) = arg("get(").or_else(|| arg("contains_key(")) else {
                if rest.starts_with("iter(") && !whole.contains(&rel.as_str()) {
                    unknown.push(format!("src/{rel} reads every annotation"));
                }
                continue;
            };
            found += 1;
            let name = arg.trim().trim_start_matches('&').rsplit("::").next().unwrap_or_default();
            let kept = match constants.get(name) {
                Some(key) => read.reads(key),
                None => closures.contains(&(rel.as_str(), name)),
            };
            if !kept {
                unknown.push(format!("src/{rel} reads the annotation {arg}"));
            }
        }
    }
    assert!(found >= 15, "the scan finds the reads ({found})");
    assert!(
        unknown.is_empty(),
        "reads of annotations the view does not keep (add the key to policy/annotations_read.rs): {unknown:#?}"
    );
    assert!(constants.values().all(|k| ALWAYS_READ.contains(k)));
}
