//! The policy's JSON Schema (policy/policy.schema.json, for editors and CI) is what
//! `coloc-extender policy-schema` generates from the policy's types, and agrees with
//! check-policy on shape: every shipped policy conforms, every shape mistake check-policy
//! refuses the schema refuses too. Meaning (a class named in `preempts` exists) is
//! check-policy's alone.
//!
//! After changing the policy's types: `coloc-extender policy-schema > policy/policy.schema.json`.

use std::path::{Path, PathBuf};
use std::process::Command;

use coloc_extender::policy::Policy;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_coloc-extender");

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn schema() -> Value {
    serde_json::from_str(&std::fs::read_to_string(root().join("policy/policy.schema.json")).unwrap()).unwrap()
}

/// The subset of JSON Schema 2020-12 the generated schema uses, except `pattern` (durations
/// are left to check-policy): `$ref` into `$defs`, `oneOf`/`anyOf`, `const`, `enum`,
/// `type`, `properties`/`additionalProperties`/`required`, `items`, `minimum`.
fn conforms(root: &Value, node: &Value, value: &Value, at: &str) -> Result<(), String> {
    if let Some(r) = node["$ref"].as_str() {
        let name = r.strip_prefix("#/$defs/").ok_or(format!("{at}: unsupported $ref {r}"))?;
        return conforms(root, &root["$defs"][name], value, at);
    }
    for (key, exactly_one) in [("oneOf", true), ("anyOf", false)] {
        if let Some(options) = node[key].as_array() {
            let passing = options.iter().filter(|o| conforms(root, o, value, at).is_ok()).count();
            if passing == 0 || (exactly_one && passing > 1) {
                return Err(format!("{at}: {value} matches {passing} of the {key} options"));
            }
        }
    }
    if let Some(c) = node.get("const") {
        if c != value {
            return Err(format!("{at}: {value} is not {c}"));
        }
    }
    if let Some(allowed) = node["enum"].as_array() {
        if !allowed.contains(value) {
            return Err(format!("{at}: {value} is not one of {allowed:?}"));
        }
    }
    let types: Vec<&str> = match &node["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let is = |t: &str| match t {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        _ => false,
    };
    if !types.is_empty() && !types.iter().any(|t| is(t)) {
        return Err(format!("{at}: {value} is not of type {types:?}"));
    }
    if let (Some(min), Some(v)) = (node["minimum"].as_f64(), value.as_f64()) {
        if v < min {
            return Err(format!("{at}: {v} is below {min}"));
        }
    }
    if let Some(object) = value.as_object() {
        for required in node["required"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            if !object.contains_key(required) {
                return Err(format!("{at}: {required} is required"));
            }
        }
        for (k, v) in object {
            let path = format!("{at}.{k}");
            match (node["properties"].get(k), &node["additionalProperties"]) {
                (Some(p), _) => conforms(root, p, v, &path)?,
                (None, Value::Bool(false)) => return Err(format!("{path}: not a field here")),
                (None, extra @ Value::Object(_)) => conforms(root, extra, v, &path)?,
                (None, _) => {}
            }
        }
    }
    if let (Some(items), Some(array)) = (node.get("items"), value.as_array()) {
        for (i, v) in array.iter().enumerate() {
            conforms(root, items, v, &format!("{at}[{i}]"))?;
        }
    }
    Ok(())
}

fn schema_check(yaml: &str) -> Result<(), String> {
    let value: Value = serde_yaml_ng::from_str(yaml).map_err(|e| e.to_string())?;
    let s = schema();
    conforms(&s, &s, &value, "policy")
}

#[test]
fn the_checked_in_schema_is_the_generated_one() {
    let out = Command::new(BIN).arg("policy-schema").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let generated = String::from_utf8(out.stdout).unwrap();
    let file = std::fs::read_to_string(root().join("policy/policy.schema.json")).unwrap();
    assert!(
        generated == file,
        "policy/policy.schema.json is stale: coloc-extender policy-schema > policy/policy.schema.json"
    );
}

#[test]
fn every_shipped_policy_conforms_to_the_schema() {
    let files = std::fs::read_dir(root().join("policy"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .chain([root().join("manifests/policy.yaml")])
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"));
    let mut checked = 0;
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        Policy::load(Path::new(&path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        schema_check(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        checked += 1;
    }
    assert!(checked >= 4, "only {checked} policies found");
}

#[test]
fn shape_mistakes_are_refused_by_the_schema_as_by_check_policy() {
    let base = "defaultClass: a\nclasses: [{name: a, victim: {allowed: true}}]\n";
    assert!(schema_check(base).is_ok() && Policy::from_yaml(base).is_ok());
    let mistakes = [
        ("an unknown field", "defaultClass: a\nclases: []\nclasses: [{name: a}]\n"),
        ("an unknown class field", "defaultClass: a\nclasses: [{name: a, victm: {allowed: true}}]\n"),
        ("an unknown mode", "mode: enforcing\ndefaultClass: a\nclasses: [{name: a}]\n"),
        ("a number that is not", "maxCandidates: many\ndefaultClass: a\nclasses: [{name: a}]\n"),
        ("a negative count", "maxCandidates: -1\ndefaultClass: a\nclasses: [{name: a}]\n"),
        ("an unknown gang source", "defaultClass: a\ngangs: {sources: {slurm: true}}\nclasses: [{name: a}]\n"),
        ("an unknown bare-pod rule", "defaultClass: a\nclasses: [{name: a, victim: {allowed: true, bare: keep}}]\n"),
        (
            "labels that are not strings",
            "defaultClass: a\nclasses: [{name: a, placement: {requireNodeLabels: {pool: [x]}}}]\n",
        ),
        ("a missing default class", "classes: [{name: a}]\n"),
    ];
    for (what, yaml) in mistakes {
        assert!(Policy::from_yaml(yaml).is_err(), "check-policy accepts {what}");
        assert!(schema_check(yaml).is_err(), "the schema accepts {what}:\n{yaml}");
    }
    // Meaning is check-policy's: the schema cannot know which classes exist.
    let ghost = "defaultClass: a\nclasses: [{name: a, preempts: [ghost]}]\n";
    assert!(schema_check(ghost).is_ok() && Policy::from_yaml(ghost).is_err());
}
