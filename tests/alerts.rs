//! Every shipped alert is proven to fire: `promtool test rules` runs
//! tests/data/alerts.test.yaml against the rules of manifests/monitoring/prometheusrule.yaml,
//! and each alert has a case where it fires and one where it stays quiet. Needs `promtool`
//! (Debian's `prometheus` package; `PROMTOOL` names another); without it each test says in
//! one line that it skipped.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_yaml_ng::Value;

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn promtool() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PROMTOOL") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join("promtool")).find(|p| p.is_file())
}

/// The PrometheusRule's groups as a Prometheus rules file; `annotations` kept or not.
fn rules(annotations: bool) -> Value {
    let text = std::fs::read_to_string(repo("manifests/monitoring/prometheusrule.yaml")).unwrap();
    let rule: Value = serde_yaml_ng::from_str(&text).unwrap();
    let mut groups = rule["spec"]["groups"].clone();
    if !annotations {
        for g in groups.as_sequence_mut().unwrap() {
            for r in g["rules"].as_sequence_mut().unwrap() {
                r.as_mapping_mut().unwrap().remove("annotations");
            }
        }
    }
    let mut file = serde_yaml_ng::Mapping::new();
    file.insert("groups".into(), groups);
    Value::Mapping(file)
}

fn alert_names(rules: &Value) -> BTreeSet<String> {
    rules["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap())
        .filter_map(|r| r["alert"].as_str().map(str::to_string))
        .collect()
}

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("coloc-alerts-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run(promtool: &Path, args: &[&str], dir: &Path) -> String {
    let out = Command::new(promtool).args(args).current_dir(dir).output().expect("promtool runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "promtool {}:\n{text}", args.join(" "));
    text
}

#[test]
fn the_shipped_rules_and_their_templates_are_valid() {
    let Some(promtool) = promtool() else {
        return println!("alerts: skipped: no promtool on PATH (Debian's prometheus package) and no PROMTOOL");
    };
    let dir = scratch("check");
    std::fs::write(dir.join("rules.yaml"), serde_yaml_ng::to_string(&rules(true)).unwrap()).unwrap();
    run(&promtool, &["check", "rules", "rules.yaml"], &dir);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn every_alert_fires_on_its_failure_and_stays_quiet_without_it() {
    let rules = rules(false);
    let names = alert_names(&rules);
    assert_eq!(names.len(), 15, "the shipped alerts: {names:?}");
    // Coverage first (needs no promtool): a firing and a quiet case per alert.
    let tests: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(repo("tests/data/alerts.test.yaml")).unwrap()).unwrap();
    let (mut fires, mut quiet) = (BTreeSet::new(), BTreeSet::new());
    for t in tests["tests"].as_sequence().unwrap() {
        for a in t["alert_rule_test"].as_sequence().unwrap() {
            let name = a["alertname"].as_str().unwrap().to_string();
            assert!(names.contains(&name), "a test of {name}, which is not shipped");
            match a["exp_alerts"].as_sequence().map(Vec::len) {
                Some(0) => quiet.insert(name),
                _ => fires.insert(name),
            };
        }
    }
    assert_eq!(fires, names, "alerts without a case where they fire");
    assert_eq!(quiet, names, "alerts without a case where they stay quiet");
    let Some(promtool) = promtool() else {
        return println!("alerts: skipped: no promtool on PATH (Debian's prometheus package) and no PROMTOOL");
    };
    let dir = scratch("test");
    std::fs::write(dir.join("rules.yaml"), serde_yaml_ng::to_string(&rules).unwrap()).unwrap();
    std::fs::copy(repo("tests/data/alerts.test.yaml"), dir.join("alerts.test.yaml")).unwrap();
    run(&promtool, &["test", "rules", "alerts.test.yaml"], &dir);
    let _ = std::fs::remove_dir_all(dir);
}
