//! The deployment manifests keep the promises the README makes about them.

use std::path::Path;

use serde_yaml_ng::Value;

fn load(file: &str) -> Value {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests").join(file)).unwrap();
    serde_yaml_ng::from_str(&text).unwrap()
}

/// Every grant of a ClusterRole as `group/resource:verb`, sorted.
fn grants(role: &Value) -> Vec<String> {
    let mut granted = Vec::new();
    for rule in role["rules"].as_sequence().unwrap() {
        for group in rule["apiGroups"].as_sequence().unwrap() {
            for res in rule["resources"].as_sequence().unwrap() {
                for verb in rule["verbs"].as_sequence().unwrap() {
                    granted.push(format!("{}/{}:{}", group.as_str().unwrap(), res.as_str().unwrap(), verb.as_str().unwrap()));
                }
            }
        }
    }
    granted.sort();
    granted
}

#[test]
fn the_cluster_role_reads_what_the_view_watches_and_writes_only_events() {
    let granted = grants(&load("clusterrole.yaml"));
    let read = |r: &str| ["get", "list", "watch"].map(|v| format!("{r}:{v}"));
    let mut expected: Vec<String> = ["/nodes", "/pods", "batch/jobs", "policy/poddisruptionbudgets", "scheduling.k8s.io/podgroups", "scheduling.k8s.io/priorityclasses", "scheduling.volcano.sh/podgroups", "scheduling.x-k8s.io/podgroups"].iter().flat_map(|r| read(r)).collect();
    // Events on preemptors (serve --events): the Warning/Normal `kubectl describe pod` shows.
    expected.extend(["events.k8s.io/events:create".to_string(), "events.k8s.io/events:patch".to_string()]);
    expected.sort();
    assert_eq!(granted, expected);
}

#[test]
fn the_deployment_is_hardened_and_probed() {
    let d = load("deployment.yaml");
    let spec = &d["spec"]["template"]["spec"];
    assert!(d["spec"]["replicas"].as_i64().unwrap() >= 2);
    assert!(spec["priorityClassName"].as_str().unwrap().starts_with("system-"), "never the one preempted");
    let c = &spec["containers"][0];
    let sc = &c["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], Value::Bool(true));
    assert_eq!(sc["allowPrivilegeEscalation"], Value::Bool(false));
    let non_root = sc["runAsNonRoot"].as_bool().or(spec["securityContext"]["runAsNonRoot"].as_bool());
    assert_eq!(non_root, Some(true));
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], Value::from("/readyz"));
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], Value::from("/healthz"));
    assert!(c["resources"]["limits"]["memory"].is_string() && c["resources"]["requests"]["cpu"].is_string());
    let args: Vec<&str> = c["args"].as_sequence().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    for flag in ["--kube", "--tls-cert", "--client-ca", "--health-listen", "--policy", "--events"] {
        assert!(args.contains(&flag), "missing {flag}");
    }
    assert!(!spec["affinity"]["podAntiAffinity"].is_null());
}

#[test]
fn a_rolling_update_keeps_serving_until_the_endpoint_is_gone_and_drains_within_the_grace_period() {
    let d = load("deployment.yaml");
    let spec = &d["spec"]["template"]["spec"];
    let container = &spec["containers"][0];
    let pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"].as_i64().expect("a preStop sleep");
    let grace = spec["terminationGracePeriodSeconds"].as_i64().unwrap();
    // preStop, then the server's 20 s drain (serve's ServeOptions::drain_timeout), inside the grace period.
    assert!(pre_stop >= 3 && pre_stop + 20 <= grace, "preStop {pre_stop}s + 20s drain must fit in {grace}s");
    assert_eq!(d["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"], Value::from(0));
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], Value::from("/readyz"));
}

#[test]
fn requeue_writes_are_an_opt_in_component_with_only_the_writes_it_needs() {
    let role = load("requeue/clusterrole.yaml");
    // Events are in the base role already (serve --events).
    assert_eq!(grants(&role), ["/pods:create", "/pods:delete", "/pods:patch"]);
    let component = load("requeue/kustomization.yaml");
    assert_eq!(component["kind"], Value::from("Component"));
    assert!(serde_yaml_ng::to_string(&component["patches"]).unwrap().contains("--requeue"));
    let base = load("kustomization.yaml");
    assert!(base["components"].is_null(), "off unless an operator opts in");
    let binding = load("requeue/clusterrolebinding.yaml");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
}

#[test]
fn wake_writes_are_an_opt_in_component_limited_to_pods_in_the_extenders_namespace() {
    let role = load("wake/role.yaml");
    assert_eq!(role["kind"], Value::from("Role"), "namespaced, not cluster-wide");
    assert_eq!(grants(&role), ["/pods:create", "/pods:delete"]);
    let component = load("wake/kustomization.yaml");
    assert_eq!(component["kind"], Value::from("Component"));
    assert!(serde_yaml_ng::to_string(&component["patches"]).unwrap().contains("--wake"));
    let binding = load("wake/rolebinding.yaml");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(binding["metadata"]["namespace"], role["metadata"]["namespace"]);
}
