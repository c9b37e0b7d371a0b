use rstest::rstest;

use super::*;
use crate::model::Pod;

fn pod(pc: Option<&str>, ns: &str, labels: &[(&str, &str)]) -> Pod {
    Pod {
        namespace: ns.into(),
        priority_class_name: pc.map(Into::into),
        labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        ..Pod::default()
    }
}

#[test]
fn shipped_policies_are_valid() {
    for file in ["default.yaml", "koordinator.yaml", "custom-priority-classes.yaml"] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("policy").join(file);
        Policy::load(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
    }
}

#[test]
fn shipped_policies_enable_every_gang_source() {
    use crate::model::GangSource;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = std::fs::read_dir(root.join("policy"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .chain([root.join("manifests/policy.yaml")]);
    for path in files.filter(|p| p.extension().is_some_and(|e| e == "yaml")) {
        let policy = Policy::load(&path).unwrap();
        for source in
            [GangSource::Native, GangSource::Coscheduling, GangSource::Volcano, GangSource::Kueue, GangSource::Labels]
        {
            assert!(policy.gangs.sources.enabled(source), "{}: gang source {} is off", path.display(), source.name());
        }
    }
}

#[test]
fn gang_sources_can_be_switched_off_one_by_one() {
    let p = Policy::from_yaml("defaultClass: a\ngangs: {sources: {kueue: false}}\nclasses: [{name: a}]\n").unwrap();
    let mut pod = pod(None, "ml", &[("kueue.x-k8s.io/pod-group-name", "q")]);
    assert_eq!(p.gangs.gang_of(&pod), None);
    pod.labels.insert("scheduling.x-k8s.io/pod-group".into(), "c".into());
    assert_eq!(
        p.gangs.gang_of(&pod).map(|g| (g.source, g.name)),
        Some((crate::model::GangSource::Coscheduling, "c".into()))
    );
    let err = Policy::from_yaml("defaultClass: a\ngangs: {sources: {slurm: true}}\nclasses: [{name: a}]\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("slurm"), "{err}");
}

#[test]
fn there_is_one_default_policy_versioned_and_in_shadow_mode_for_a_first_install() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let default = std::fs::read_to_string(root.join("policy/default.yaml")).unwrap();
    let shipped = std::fs::read_to_string(root.join("manifests/policy.yaml")).unwrap();
    assert!(default == shipped, "manifests/policy.yaml must be policy/default.yaml, unchanged");
    let policy = Policy::from_yaml(&shipped).unwrap();
    assert_eq!(policy.mode, crate::policy::Mode::Shadow);
    assert_eq!((policy.api_version.as_deref(), policy.kind.as_deref()), (Some(API_VERSION), Some(KIND)));
    // Enforcing is that one line.
    let enforcing = Policy::from_yaml(&shipped.replace("\nmode: shadow\n", "\nmode: enforce\n")).unwrap();
    assert_eq!(enforcing.mode, crate::policy::Mode::Enforce);
    assert_eq!(Policy::builtin_default().mode, crate::policy::Mode::Shadow);
}

#[test]
fn a_policy_names_its_api_and_a_file_written_before_it_was_versioned_still_loads() {
    let body = "defaultClass: a\nclasses: [{name: a}]\n";
    assert!(Policy::from_yaml(body).is_ok(), "no apiVersion: read as v1alpha1");
    let named = format!("apiVersion: {API_VERSION}\nkind: {KIND}\n{body}");
    assert_eq!(Policy::from_yaml(&named).unwrap().fingerprint(), Policy::from_yaml(body).unwrap().fingerprint());
    let future = Policy::from_yaml(&format!("apiVersion: coloc-extender.io/v2\n{body}")).unwrap_err().to_string();
    assert!(future.starts_with("apiVersion:") && future.contains(API_VERSION) && future.contains("line 1"), "{future}");
    let before = format!("apiVersion: {}\n{body}", crate::policy::API_VERSION_BEFORE);
    assert!(Policy::from_yaml(&before).is_ok(), "a v1alpha1 file without waitTolerance still loads");
    let tolerance = format!(
        "apiVersion: {}\n{}",
        crate::policy::API_VERSION_BEFORE,
        body.replace("{name: a}", "{name: a, waitTolerance: 2}")
    );
    let replaced = Policy::from_yaml(&tolerance).unwrap_err().to_string();
    assert!(replaced.contains("replaced by waitPrice"), "{replaced}");
    let other = Policy::from_yaml(&format!("kind: KubeSchedulerConfiguration\n{body}")).unwrap_err().to_string();
    assert!(other.starts_with("kind:") && other.contains("kind: Policy"), "{other}");
}

#[rstest]
#[case::system_by_priority(None, 2_000_000_000, "system")]
#[case::online_by_name(Some("online-prod"), 10_000, "online")]
#[case::koord_prod_band(None, 9_500, "online")]
#[case::mid_band(None, 7_050, "mid")]
#[case::batch_by_name(Some("offline-batch"), 100, "batch")]
#[case::koord_batch_band(None, 6_500, "batch")]
#[case::free_by_name(Some("free"), 10, "free")]
#[case::koord_free_band(None, 3_500, "free")]
#[case::plain_priority_zero(None, 0, "unclassified")]
fn default_policy_classifies(#[case] pc: Option<&str>, #[case] priority: i32, #[case] class: &str) {
    let p = Policy::builtin_default();
    let id = p.classify(&pod(pc, "default", &[]), priority);
    assert_eq!(p.class(id).name, class);
}

#[test]
fn first_matching_class_wins_and_selectors_combine_fields() {
    let p = Policy::from_yaml(
        r#"
defaultClass: other
classes:
  - name: tenant-a-batch
    match: [{namespaces: [tenant-a], labels: {tier: batch}}]
  - name: any-batch
    match: [{labels: {tier: batch}}]
  - name: other
"#,
    )
    .unwrap();
    let name = |pd: &Pod| p.class(p.classify(pd, 0)).name.clone();
    assert_eq!(name(&pod(None, "tenant-a", &[("tier", "batch")])), "tenant-a-batch");
    assert_eq!(name(&pod(None, "tenant-b", &[("tier", "batch")])), "any-batch");
    assert_eq!(name(&pod(None, "tenant-a", &[])), "other");
}

#[test]
fn preemption_matrix_follows_preempts() {
    let p = Policy::builtin_default();
    let id = |n: &str| p.classes.iter().position(|c| c.name == n).unwrap();
    assert!(p.may_preempt(id("online"), id("batch")));
    assert!(p.may_preempt(id("online"), id("free")));
    assert!(p.may_preempt(id("batch"), id("free")));
    assert!(!p.may_preempt(id("batch"), id("batch")));
    assert!(!p.may_preempt(id("batch"), id("online")));
    assert!(!p.preempts_anything(id("free")));
    assert!(!p.preempts_anything(id("unclassified")));
}

#[rstest]
#[case::unknown_field(
    "defaultClass: a\nclasses:\n  - name: a\n    victim: {alowed: true}\n",
    "unknown field `alowed`",
    "line 4"
)]
#[case::wrong_type("defaultClass: a\nmaxCandidates: many\nclasses: [{name: a}]\n", "maxCandidates", "line 2")]
#[case::unknown_preempt_target(
    "defaultClass: a\nclasses:\n  - name: a\n    preempts: [batchh]\n",
    "classes[0].preempts[0]: unknown class \"batchh\"",
    "line 4"
)]
#[case::target_not_a_victim(
    "defaultClass: a\nclasses:\n  - name: a\n    preempts: [b]\n  - name: b\n",
    "victim.allowed is false",
    "line 4"
)]
#[case::unknown_default("defaultClass: nope\nclasses: [{name: a}]\n", "defaultClass: unknown class \"nope\"", "line 1")]
#[case::duplicate_name("defaultClass: a\nclasses:\n  - name: a\n  - name: a\n", "duplicate class name", "")]
#[case::not_a_kubernetes_name(
    "defaultClass: a\nclasses:\n  - name: a\n    match: [{priorityClassNames: [\"tier|1\"]}]\n",
    "classes[0].match[0].priorityClassNames: \"tier|1\" is no Kubernetes name",
    "line 4"
)]
#[case::a_label_value_with_a_comma(
    "defaultClass: a\nclasses:\n  - name: a\n    match: [{labels: {team: \"a,b\"}}]\n",
    "classes[0].match[0].labels: \"a,b\" is no Kubernetes name",
    ""
)]
#[case::inverted_range(
    "defaultClass: a\nclasses:\n  - name: a\n    match: [{priority: {min: 10, max: 5}}]\n",
    "classes[0].match[0].priority: min 10 is greater than max 5",
    "line 4"
)]
#[case::bad_duration(
    "defaultClass: a\nclasses:\n  - name: a\n    victim: {allowed: true, minRuntime: soon}\n",
    "invalid duration \"soon\"",
    "line 4"
)]
#[case::bad_pdb_mode(
    "defaultClass: a\nclasses:\n  - name: a\n    victim: {allowed: true, pdb: maybe}\n",
    "unknown variant `maybe`",
    "line 4"
)]
#[case::bad_jobs_mode(
    "defaultClass: a\nclasses:\n  - name: a\n    victim: {allowed: true, jobs: maybe}\n",
    "unknown variant `maybe`",
    "line 4"
)]
#[case::no_classes("defaultClass: a\nclasses: []\n", "at least one class", "")]
#[case::zero_candidates(
    "defaultClass: a\nmaxCandidates: 0\nclasses: [{name: a}]\n",
    "maxCandidates: must be at least 1",
    "line 2"
)]
#[case::bad_weight(
    "defaultClass: a\ntenants: {weights: {t1: 0}}\nclasses: [{name: a}]\n",
    "tenants.weights.t1",
    "line 2"
)]
#[case::queue_without_namespace(
    "defaultClass: a\ntenants:\n  label: q\n  queues: [gpu]\nclasses: [{name: a}]\n",
    "tenants.queues[0]: \"gpu\" must be namespace/queue",
    "line 4"
)]
#[case::weight_of_a_half_queue(
    "defaultClass: a\ntenants: {label: q, weights: {team-a/: 2}}\nclasses: [{name: a}]\n",
    "tenants.weights.team-a/: \"team-a/\" must be a namespace, or namespace/queue",
    "line 2"
)]
#[case::queues_without_a_label(
    "defaultClass: a\ntenants:\n  queues: [team-a/gpu]\nclasses: [{name: a}]\n",
    "tenants.queues: queues are named but tenants.label",
    "line 3"
)]
#[case::checkpoints_of_a_class_never_evicted(
    "defaultClass: a\nclasses:\n  - name: a\n    victim: {checkpointsOnTerm: true}\n",
    "classes[0].victim.checkpointsOnTerm: its pods are never victims (victim.allowed is false)",
    "line 4"
)]
#[case::wait_tolerance_replaced(
    "defaultClass: a\nclasses:\n  - name: a\n    waitTolerance: 2\n",
    "classes[0].waitTolerance: waitTolerance was replaced by waitPrice in coloc-extender.io/v1alpha2",
    "line 4"
)]
#[case::wait_price_negative(
    "defaultClass: a\nclasses:\n  - name: a\n    waitPrice: -2\n",
    "classes[0].waitPrice: -2 must be a number of CPU-seconds, 0 or more",
    "line 4"
)]
#[case::wait_price_not_a_number(
    "defaultClass: a\nclasses:\n  - name: a\n    waitPrice: .nan\n",
    "classes[0].waitPrice: NaN must be a number of CPU-seconds",
    "line 4"
)]
#[case::wait_price_infinite(
    "defaultClass: a\nclasses:\n  - name: a\n    waitPrice: .inf\n",
    "classes[0].waitPrice: inf must be a number of CPU-seconds",
    "line 4"
)]
#[case::wait_price_a_word(
    "defaultClass: a\nclasses:\n  - name: a\n    waitPrice: soon\n",
    "waitPrice: invalid type",
    "line 4"
)]
fn invalid_policies_name_the_field(#[case] yaml: &str, #[case] message: &str, #[case] line: &str) {
    let err = Policy::from_yaml(yaml).expect_err("must be rejected").to_string();
    assert!(err.contains(message), "{err:?} should contain {message:?}");
    assert!(err.contains(line), "{err:?} should name {line:?}");
}

#[rstest]
#[case("0", 0)]
#[case("30s", 30)]
#[case("10m", 600)]
#[case("1h30m", 5400)]
#[case("2d", 172800)]
fn durations(#[case] s: &str, #[case] secs: i64) {
    assert_eq!(parse_duration(s).unwrap(), secs);
}

#[test]
fn placement_reasons_name_the_label() {
    let p = Policy::builtin_default();
    let batch = p.classes.iter().find(|c| c.name == "batch").unwrap();
    let labels =
        |v: &str| [("colocation.example.com/offline-allowed".to_string(), v.to_string())].into_iter().collect();
    assert_eq!(batch.placement.rejects(&labels("true")), None);
    let why = batch.placement.rejects(&labels("false")).unwrap();
    assert!(why.contains("colocation.example.com/offline-allowed=false"), "{why}");
    let why = batch.placement.rejects(&Default::default()).unwrap();
    assert!(why.contains("lacks label"), "{why}");
}

#[test]
fn deeply_nested_or_huge_files_are_refused_before_parsing() {
    let flow = format!("defaultClass: x\nclasses: {}{}\n", "[".repeat(60_000), "]".repeat(60_000));
    let e = Policy::from_yaml(&flow).unwrap_err().to_string();
    assert!(e.contains("nested deeper than 64 levels"), "{e}");
    let block: String = (0..200).map(|i| format!("{}a:\n", " ".repeat(i * 2))).collect();
    assert!(Policy::from_yaml(&block).unwrap_err().to_string().contains("nested deeper"));
    let huge = format!("defaultClass: x\n# {}\n", "x".repeat(2 << 20));
    assert!(Policy::from_yaml(&huge).unwrap_err().to_string().contains("at most"));
    for file in ["default.yaml", "koordinator.yaml", "custom-priority-classes.yaml"] {
        let text = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("policy").join(file))
            .unwrap();
        check_shape(&text).unwrap();
    }
}

#[test]
fn the_fingerprint_names_the_rules_not_the_layout_or_the_mode() {
    let text = include_str!("../../policy/default.yaml");
    let base = Policy::from_yaml(text).unwrap().fingerprint();
    assert_eq!(base.len(), 16);
    let relaid = Policy::from_yaml(&format!("# a comment of the operator's\n{text}\n\n")).unwrap();
    assert_eq!(relaid.fingerprint(), base, "comments and blank lines change nothing");
    let mut shadow = Policy::from_yaml(text).unwrap();
    shadow.mode = Mode::Shadow;
    assert_eq!(shadow.fingerprint(), base, "the mode is reported apart");
    let changed = Policy::from_yaml(&text.replace("maxCandidates: 1", "maxCandidates: 2")).unwrap();
    assert_ne!(changed.fingerprint(), base, "a rule that differs");
}

#[test]
fn the_wait_and_checkpoints_have_their_defaults_and_read_as_written() {
    let p = Policy::from_yaml(
        "defaultClass: a\nclasses:\n  - name: a\n    preempts: [b]\n  - name: b\n    waitPrice: 0\n    victim: {allowed: true, checkpointsOnTerm: true}\n",
    )
    .unwrap();
    assert_eq!(p.classes[0].wait_price, crate::policy::DEFAULT_WAIT_PRICE);
    assert!(!p.classes[0].victim.checkpoints_on_term);
    assert_eq!(p.classes[1].wait_price, 0.0);
    assert!(p.classes[1].victim.checkpoints_on_term);
}
