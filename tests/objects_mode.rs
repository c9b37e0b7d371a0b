//! Objects mode at the floor of its protocol: a filter or prioritize request carries every
//! Node object whole, and the extender reads, of each node the cluster view holds, only its
//! name (decisions read the view's Node; the object's bytes go back as they came). Nodes
//! the view does not hold are decoded whole, and checked.

use std::path::{Path, PathBuf};

use coloc_extender::cluster::{snapshot, View};
use coloc_extender::pipeline::{self, Verb};
use coloc_extender::policy::Policy;
use serde_json::{json, Value};

const NOW: i64 = 1_795_000_000;

fn fixture(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/payloads/r1-nodecache-false").join(file)
}

/// The recorded filter request, its first Node object's allocatable CPU made unreadable.
fn filter_with_a_broken_node() -> (Vec<u8>, String) {
    let mut req: Value = serde_json::from_slice(&std::fs::read(fixture("0001-filter.json")).unwrap()).unwrap();
    let node = &mut req["Nodes"]["items"][0];
    node["status"]["allocatable"]["cpu"] = json!("not a quantity");
    let name = node["metadata"]["name"].as_str().unwrap().to_string();
    (serde_json::to_vec(&req).unwrap(), name)
}

fn view(policy: &Policy) -> View {
    View::build(snapshot::load(&fixture("0037-preempt.snapshot.json")).unwrap(), policy)
}

#[test]
fn a_node_object_the_view_holds_is_not_decoded_and_goes_back_unchanged() {
    let policy = Policy::builtin_default().enforced();
    let (body, broken) = filter_with_a_broken_node();
    // Without a view every object is decoded, and the broken one is refused.
    let err = pipeline::replay(Verb::Filter, &body, &policy, None, NOW).err().expect("refused without a view");
    assert!(err.to_string().contains(&broken), "{err}");
    // With a view holding the node, only its name is read: the answer keeps it, as sent.
    let view = view(&policy);
    assert!(view.node(&broken).is_some(), "the snapshot holds {broken}");
    let answer = pipeline::replay(Verb::Filter, &body, &policy, Some(&view), NOW).expect("answered from the view");
    let out: Value = serde_json::from_slice(&answer.body).unwrap();
    let kept = out["Nodes"]["items"].as_array().unwrap();
    let sent = kept.iter().find(|n| n["metadata"]["name"] == broken.as_str()).expect("the node is kept");
    assert_eq!(sent["status"]["allocatable"]["cpu"], "not a quantity", "its bytes go back as they came");
    let prioritized = pipeline::replay(Verb::Prioritize, &body, &policy, Some(&view), NOW);
    assert!(prioritized.is_ok(), "{:?}", prioritized.err());
}

#[test]
fn objects_and_names_decide_alike_where_the_view_holds_every_node() {
    // The recorded filters of the round, each in both forms, against the same view.
    let policy = Policy::builtin_default().enforced();
    let view = view(&policy);
    for file in ["0001-filter.json", "0003-filter.json", "0005-filter.json"] {
        let objects: Value = serde_json::from_slice(&std::fs::read(fixture(file)).unwrap()).unwrap();
        let names: Vec<Value> =
            objects["Nodes"]["items"].as_array().unwrap().iter().map(|n| n["metadata"]["name"].clone()).collect();
        let as_names = json!({"Pod": objects["Pod"], "NodeNames": names});
        let a =
            pipeline::replay(Verb::Filter, &serde_json::to_vec(&objects).unwrap(), &policy, Some(&view), NOW).unwrap();
        let b =
            pipeline::replay(Verb::Filter, &serde_json::to_vec(&as_names).unwrap(), &policy, Some(&view), NOW).unwrap();
        let a: Value = serde_json::from_slice(&a.body).unwrap();
        let b: Value = serde_json::from_slice(&b.body).unwrap();
        let kept: Vec<&Value> =
            a["Nodes"]["items"].as_array().unwrap().iter().map(|n| &n["metadata"]["name"]).collect();
        let kept_names: Vec<&Value> = b["NodeNames"].as_array().unwrap().iter().collect();
        assert_eq!(kept, kept_names, "{file}");
        assert_eq!(a["FailedAndUnresolvableNodes"], b["FailedAndUnresolvableNodes"], "{file}");
    }
}
