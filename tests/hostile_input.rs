//! Corrupted and adversarial bodies: every one is answered or rejected, none panics.

use std::path::Path;
use std::sync::OnceLock;

use coloc_extender::cluster::{snapshot, View};
use coloc_extender::http::error::ApiError;
use coloc_extender::pipeline::{replay, Verb};
use coloc_extender::policy::Policy;
use coloc_extender::wire::error::DecodeError;
use coloc_extender::wire::error::MESSAGE_LIMIT;
use coloc_extender::wire::{decode_extender_args_within, decode_preempt_args_for, Bounds, Caps};
use proptest::prelude::*;
use serde_json::Value;

const ROUND: &str = "tests/fixtures/payloads/r1-nodecache-false";

fn read(name: &str) -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join(ROUND).join(name)).unwrap()
}

/// The policy, the view and the recorded requests every case starts from.
type Fixtures = (Policy, View, Vec<(Verb, Vec<u8>)>);

fn fixtures() -> &'static Fixtures {
    static F: OnceLock<Fixtures> = OnceLock::new();
    F.get_or_init(|| {
        let policy = Policy::builtin_default().enforced();
        let view = View::build(snapshot::parse(&read("0037-preempt.snapshot.json")).unwrap(), &policy);
        let bodies = vec![
            (Verb::Filter, read("0001-filter.json")),
            (Verb::Prioritize, read("0002-prioritize.json")),
            (Verb::Preempt, read("0037-preempt.json")),
            (Verb::Preempt, read("0041-preempt.json")),
        ];
        (policy, view, bodies)
    })
}

fn all_verbs(body: &[u8]) {
    let (policy, view, _) = fixtures();
    for verb in [Verb::Filter, Verb::Prioritize, Verb::Preempt] {
        let _ = replay(verb, body, policy, None, 1_800_000_000);
        let _ = replay(verb, body, policy, Some(view), 1_800_000_000);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn flipped_bytes_never_panic(which in 0usize..4, flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
        let (_, _, bodies) = fixtures();
        let mut body = bodies[which].1.clone();
        for (at, byte) in flips {
            let i = at.index(body.len());
            body[i] = byte;
        }
        all_verbs(&body);
    }

    #[test]
    fn truncated_bodies_are_rejected(which in 0usize..4, keep in 0.0f64..0.999) {
        let (policy, _, bodies) = fixtures();
        let (verb, body) = &bodies[which];
        let cut = &body[..(body.len() as f64 * keep) as usize];
        prop_assert!(replay(*verb, cut, policy, None, 0).is_err());
    }

    #[test]
    fn any_json_value_in_any_top_level_key_never_panics(key in prop_oneof![Just("Pod"), Just("Nodes"), Just("NodeNames"), Just("NodeNameToVictims"), Just("NodeNameToMetaVictims")], value in arb_json()) {
        let (_, _, bodies) = fixtures();
        for (_, body) in bodies {
            let mut v: serde_json::Value = serde_json::from_slice(body).unwrap();
            v[key] = value.clone();
            all_verbs(&serde_json::to_vec(&v).unwrap());
        }
    }
}

/// Every place in `v` a value or a key sits: JSON pointers, and for keys the pointer of
/// their object plus the key.
fn places(v: &Value, at: String, out: &mut Vec<(String, Option<String>)>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                out.push((at.clone(), Some(k.clone())));
                places(x, format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")), out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                places(x, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
    out.push((at, None));
}

/// A long string with the characters that escaping and clipping must get right.
fn long_text() -> impl Strategy<Value = String> {
    ("[a-z\"\\`é😀 ]{1,16}", 4_096usize..40_000).prop_map(|(unit, len)| unit.repeat(len / unit.len() + 1))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Row 6: a long string put anywhere (as a value or as a key) is never echoed in full
    /// by an error, neither in the DecodeError (replay) nor in the API error (body, log).
    #[test]
    fn long_input_anywhere_is_never_echoed_in_full(which in 0usize..4, place in any::<prop::sample::Index>(), as_key in any::<bool>(), text in long_text()) {
        let (policy, view, bodies) = fixtures();
        let (verb, body) = &bodies[which];
        let mut v: Value = serde_json::from_slice(body).unwrap();
        let mut all = Vec::new();
        places(&v, String::new(), &mut all);
        let (pointer, key) = place.get(&all).clone();
        match (key, as_key) {
            (Some(key), true) => {
                let obj = v.pointer_mut(&pointer).unwrap().as_object_mut().unwrap();
                let x = obj.remove(&key).unwrap();
                obj.insert(text.clone(), x);
            }
            _ => *v.pointer_mut(&pointer).unwrap() = Value::String(text.clone()),
        }
        let body = serde_json::to_vec(&v).unwrap();
        for view in [None, Some(view)] {
            if let Err(e) = replay(*verb, &body, policy, view, 1_800_000_000) {
                let message = e.to_string();
                prop_assert!(message.len() <= MESSAGE_LIMIT + 64, "{} bytes: {}", message.len(), message.chars().take(500).collect::<String>());
                let api = ApiError::from(e);
                prop_assert!(api.message.len() <= MESSAGE_LIMIT + 64, "{} bytes", api.message.len());
            }
        }
    }
}

fn arb_json() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        "[a-zA-Z0-9 ./-]{0,12}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
            prop::collection::btree_map("[A-Za-z]{1,10}", inner, 0..6)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

#[test]
fn deep_nesting_is_rejected_not_overflowed() {
    let (policy, _, _) = fixtures();
    for depth in [200usize, 100_000] {
        let body = format!("{{\"Pod\":{}{}}}", "[".repeat(depth), "]".repeat(depth));
        assert!(replay(Verb::Filter, body.as_bytes(), policy, None, 0).is_err());
        let body = format!(
            "{{\"Pod\":{{\"metadata\":{{\"labels\":{}}}}}}}",
            "{\"a\":".repeat(depth) + "1" + &"}".repeat(depth)
        );
        assert!(replay(Verb::Preempt, body.as_bytes(), policy, None, 0).is_err());
    }
}

#[test]
fn node_lists_up_to_the_cap_are_answered_and_one_more_is_refused_naming_the_cap() {
    let (policy, _, _) = fixtures();
    let cap = Caps::default().max_nodes;
    let body = |n: usize| {
        let names: Vec<String> = (0..n).map(|i| format!("node-{i}")).collect();
        serde_json::to_vec(&serde_json::json!({"Pod": {"metadata": {"name": "p"}}, "NodeNames": names})).unwrap()
    };
    let a = replay(Verb::Filter, &body(cap), policy, None, 0).unwrap();
    let out: serde_json::Value = serde_json::from_slice(&a.body).unwrap();
    assert_eq!(out["NodeNames"].as_array().unwrap().len(), cap);
    let error = replay(Verb::Filter, &body(1_000_000), policy, None, 0).err().expect("refused");
    assert!(matches!(error, DecodeError::TooMany { cap: c, flag: "--max-nodes", .. } if c == cap), "{error:?}");
    assert_eq!(
        error.to_string(),
        format!("NodeNames has more than {cap} entries, the most one request may carry (--max-nodes)")
    );
}

#[test]
fn victim_lists_up_to_the_cap_are_answered_and_one_more_is_refused_naming_the_cap() {
    let (policy, view, _) = fixtures();
    let cap = Caps::default().max_victims_per_node;
    let body = |n: usize| {
        let uids: Vec<serde_json::Value> = (0..n).map(|i| serde_json::json!({"UID": format!("u{i}")})).collect();
        serde_json::to_vec(&serde_json::json!({
            "Pod": {"metadata": {"name": "p"}, "spec": {"priorityClassName": "online-prod", "priority": 10000}},
            "NodeNameToMetaVictims": {"node-a1": {"Pods": uids, "NumPDBViolations": 0}}
        }))
        .unwrap()
    };
    let a = replay(Verb::Preempt, &body(cap), policy, Some(view), 0).unwrap();
    assert!(String::from_utf8_lossy(&a.body).starts_with("{\"NodeNameToMetaVictims\""));
    let error = replay(Verb::Preempt, &body(200_000), policy, Some(view), 0).err().expect("refused");
    assert_eq!(error.to_string(), format!("NodeNameToMetaVictims[node-a1].Pods has more than {cap} entries, the most one request may carry (--max-victims-per-node)"));
}

/// Caps small enough to hit with a hand-written body.
const SMALL: Caps = Caps { max_nodes: 2, max_victims_per_node: 2, max_victims: 3 };

fn preempt_error(body: serde_json::Value, caps: Caps) -> String {
    let body = body.to_string();
    match decode_preempt_args_for(body.as_bytes(), |_| true, &Bounds::new(caps, None)) {
        Ok(_) => panic!("accepted over its caps: {body}"),
        Err(e) => e.to_string(),
    }
}

fn victim(uid: &str) -> serde_json::Value {
    serde_json::json!({"metadata": {"name": uid, "namespace": "b", "uid": uid}})
}

#[test]
fn every_list_stops_at_its_cap_and_the_error_names_it() {
    let pod = serde_json::json!({"metadata": {"name": "p"}});
    let three_nodes: Vec<_> = (0..3).map(|i| serde_json::json!({"metadata": {"name": format!("n{i}")}})).collect();
    let body = serde_json::json!({"Pod": pod, "Nodes": {"items": three_nodes}}).to_string();
    let error = decode_extender_args_within(body.as_bytes(), &Bounds::new(SMALL, None)).err().unwrap().to_string();
    assert_eq!(error, "Nodes.items has more than 2 entries, the most one request may carry (--max-nodes)");

    let error = preempt_error(serde_json::json!({"Pod": pod, "NodeNameToVictims": {"a": {}, "b": {}, "c": {}}}), SMALL);
    assert_eq!(
        error,
        "NodeNameToVictims (candidate nodes) has more than 2 entries, the most one request may carry (--max-nodes)"
    );

    let error = preempt_error(
        serde_json::json!({"Pod": pod, "NodeNameToVictims": {"a": {"Pods": [victim("1"), victim("2"), victim("3")]}}}),
        SMALL,
    );
    assert_eq!(
        error,
        "NodeNameToVictims[a].Pods has more than 2 entries, the most one request may carry (--max-victims-per-node)"
    );

    let error = preempt_error(
        serde_json::json!({"Pod": pod, "NodeNameToMetaVictims": {"a": {"Pods": [{"UID": "1"}, {"UID": "2"}]}, "b": {"Pods": [{"UID": "3"}, {"UID": "4"}]}}}),
        SMALL,
    );
    assert_eq!(
        error,
        "victims over all candidate nodes has more than 3 entries, the most one request may carry (--max-victims)"
    );

    // At the caps exactly, the same shapes decode.
    let body = serde_json::json!({"Pod": pod, "NodeNameToVictims": {"a": {"Pods": [victim("1"), victim("2")]}, "b": {"Pods": [victim("3")]}}}).to_string();
    assert!(decode_preempt_args_for(body.as_bytes(), |_| true, &Bounds::new(SMALL, None)).is_ok());
}

#[test]
fn an_over_cap_request_is_413_too_many_items() {
    let e = ApiError::from(DecodeError::TooMany { what: "NodeNames".into(), cap: 2, flag: "--max-nodes" });
    assert_eq!((e.status.as_u16(), e.code), (413, "too_many_items"));
    assert!(e.message.contains("NodeNames") && e.message.contains("--max-nodes"), "{}", e.message);
}

#[test]
fn a_cancelled_request_stops_decoding() {
    let cancelled = std::sync::atomic::AtomicBool::new(true);
    let bounds = Bounds::new(Caps::default(), Some(&cancelled));
    let names: Vec<String> = (0..10).map(|i| format!("n{i}")).collect();
    let body = serde_json::json!({"Pod": {"metadata": {"name": "p"}}, "NodeNames": names}).to_string();
    assert!(matches!(decode_extender_args_within(body.as_bytes(), &bounds), Err(DecodeError::Cancelled)));
    let body =
        serde_json::json!({"Pod": {"metadata": {"name": "p"}}, "NodeNameToVictims": {"a": {"Pods": [victim("1")]}}})
            .to_string();
    assert!(matches!(decode_preempt_args_for(body.as_bytes(), |_| true, &bounds), Err(DecodeError::Cancelled)));
    let e = ApiError::from(DecodeError::Cancelled);
    assert_eq!((e.status.as_u16(), e.code), (503, "cancelled"));
}
