//! The deployment manifests keep the promises the README makes about them.

use std::path::Path;

use serde_yaml_ng::Value;

fn load(file: &str) -> Value {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests").join(file)).unwrap();
    serde_yaml_ng::from_str(&text).unwrap()
}

/// The components the base turns on: only the scheduler of its own, which governs
/// nothing until a namespace is labelled.
fn base_components() -> Vec<String> {
    let base = load("kustomization.yaml");
    base["components"].as_sequence().unwrap().iter().map(|c| c.as_str().unwrap().to_string()).collect()
}

/// Every grant of a ClusterRole as `group/resource:verb`, sorted.
fn grants(role: &Value) -> Vec<String> {
    let mut granted = Vec::new();
    for rule in role["rules"].as_sequence().unwrap() {
        for group in rule["apiGroups"].as_sequence().unwrap() {
            for res in rule["resources"].as_sequence().unwrap() {
                for verb in rule["verbs"].as_sequence().unwrap() {
                    granted.push(format!(
                        "{}/{}:{}",
                        group.as_str().unwrap(),
                        res.as_str().unwrap(),
                        verb.as_str().unwrap()
                    ));
                }
            }
        }
    }
    granted.sort();
    granted
}

#[test]
fn the_cluster_role_reads_what_the_view_watches_and_writes_only_events_and_what_finishes_an_earlier_run() {
    let granted = grants(&load("clusterrole.yaml"));
    let read = |r: &str| ["get", "list", "watch"].map(|v| format!("{r}:{v}"));
    let mut expected: Vec<String> = [
        "/namespaces",
        "/nodes",
        "/pods",
        "batch/jobs",
        "policy/poddisruptionbudgets",
        "scheduling.k8s.io/podgroups",
        "scheduling.k8s.io/priorityclasses",
        "scheduling.volcano.sh/podgroups",
        "scheduling.x-k8s.io/podgroups",
    ]
    .iter()
    .flat_map(|r| read(r))
    .collect();
    // Events on preemptors (serve --events): the Warning/Normal `kubectl describe pod` shows.
    expected.extend(["events.k8s.io/events:create".to_string(), "events.k8s.io/events:patch".to_string()]);
    // No pod write: copies are the requeue controller's, as its own identity.
    // The admin port (--admin-auth kube) asks whose each token is and what they may get:
    // what system:auth-delegator grants.
    expected.extend([
        "authentication.k8s.io/tokenreviews:create".to_string(),
        "authorization.k8s.io/subjectaccessreviews:create".to_string(),
    ]);
    expected.sort();
    assert_eq!(granted, expected);
}

/// The Deployments that run the extender: beside kube-scheduler (the default) and on its own.
const EXTENDER_DEPLOYMENTS: [&str; 2] = ["scheduler-of-its-own/deployment.yaml", "standalone/deployment.yaml"];

/// The extender's container: the first of its Deployment's, where the components that add
/// its flags patch it.
fn extender_container(deployment: &Value) -> &Value {
    let c = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["name"], Value::from("coloc-extender"), "the extender is the first container");
    c
}

fn args(container: &Value) -> Vec<&str> {
    container["args"].as_sequence().unwrap().iter().map(|a| a.as_str().unwrap()).collect()
}

#[test]
fn every_deployment_running_the_extender_hardens_and_probes_it() {
    for file in EXTENDER_DEPLOYMENTS {
        let d = load(file);
        let spec = &d["spec"]["template"]["spec"];
        assert!(d["spec"]["replicas"].as_i64().unwrap() >= 2, "{file}");
        assert!(spec["priorityClassName"].as_str().unwrap().starts_with("system-"), "{file}: never the one preempted");
        let c = extender_container(&d);
        let sc = &c["securityContext"];
        assert_eq!(sc["readOnlyRootFilesystem"], Value::Bool(true), "{file}");
        assert_eq!(sc["allowPrivilegeEscalation"], Value::Bool(false), "{file}");
        let non_root = sc["runAsNonRoot"].as_bool().or(spec["securityContext"]["runAsNonRoot"].as_bool());
        assert_eq!(non_root, Some(true), "{file}");
        assert_eq!(c["readinessProbe"]["httpGet"]["path"], Value::from("/readyz"), "{file}");
        assert_eq!(c["livenessProbe"]["httpGet"]["path"], Value::from("/healthz"), "{file}");
        assert!(c["resources"]["limits"]["memory"].is_string() && c["resources"]["requests"]["cpu"].is_string());
        let args = args(c);
        for flag in
            ["--kube", "--health-listen", "--policy", "--events", "--admin-listen=0.0.0.0:8082", "--admin-auth=kube"]
        {
            assert!(args.contains(&flag), "{file}: missing {flag}");
        }
        assert!(!spec["affinity"]["podAntiAffinity"].is_null(), "{file}");
        // Prometheus scrapes the admin port, the only one serving /metrics.
        let annotations = &d["spec"]["template"]["metadata"]["annotations"];
        assert_eq!(
            (&annotations["prometheus.io/port"], &annotations["prometheus.io/path"]),
            (&Value::from("8082"), &Value::from("/metrics")),
            "{file}"
        );
        assert_eq!(d["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"], Value::from(0), "{file}");
    }
    // Standalone, kube-scheduler dials its Service over mutual TLS.
    let standalone = load("standalone/deployment.yaml");
    let flags = args(extender_container(&standalone));
    for flag in ["--tls-cert", "--client-ca", "0.0.0.0:8443"] {
        assert!(flags.contains(&flag), "standalone: missing {flag}");
    }
    assert_eq!(
        container_ports(&standalone),
        [("https".to_string(), 8443), ("health".to_string(), 8081), ("admin".to_string(), 8082)]
    );
}

/// The default topology: kube-scheduler calls the extender of its own pod on loopback, in
/// plain HTTP, and nothing of TLS is left to make: no certificate, Secret or Service.
#[test]
fn beside_kube_scheduler_the_extender_is_called_on_loopback_with_no_certificate() {
    let d = load("scheduler-of-its-own/deployment.yaml");
    let extender = extender_container(&d);
    let flags = args(extender);
    let listen = flags[flags.iter().position(|f| *f == "--listen").unwrap() + 1];
    let prefix = flags[flags.iter().position(|f| *f == "--path-prefix").unwrap() + 1];
    assert_eq!(listen, "127.0.0.1:8888", "on loopback: nothing outside the pod reaches the verbs");
    for flag in ["--tls-cert", "--tls-key", "--client-ca"] {
        assert!(!flags.contains(&flag), "no {flag}");
    }
    let config = load("scheduler-of-its-own/kube-scheduler-config.yaml");
    let entries = config["extenders"].as_sequence().unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["urlPrefix"], Value::from(format!("http://{listen}{prefix}")));
    assert_eq!(entries[0]["enableHTTPS"], Value::Bool(false));
    assert!(entries[0]["tlsConfig"].is_null());
    // The verb port is not a container port: only the pod itself calls it.
    assert_eq!(container_ports(&d), [("health".to_string(), 8081), ("admin".to_string(), 8082)]);
    let pod = &d["spec"]["template"]["spec"];
    let containers: Vec<&str> =
        pod["containers"].as_sequence().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(containers, ["coloc-extender", "kube-scheduler"]);
    for v in pod["volumes"].as_sequence().unwrap() {
        assert!(v["secret"].is_null() && v["projected"].is_null(), "a volume that wants a Secret: {v:?}");
    }
    for file in load("scheduler-of-its-own/kustomization.yaml")["resources"].as_sequence().unwrap() {
        for o in load_all(&format!("scheduler-of-its-own/{}", file.as_str().unwrap())) {
            assert!(!["Service", "Certificate", "Secret"].contains(&o["kind"].as_str().unwrap()), "{o:?}");
        }
    }
    assert_eq!(pod["serviceAccountName"], Value::from("coloc-scheduler"), "kube-scheduler's identity");
    // The extender acts as its own identity, in the pod's namespace (it follows the install's).
    assert!(flags.contains(&"--act-as=system:serviceaccount:$(POD_NAMESPACE):coloc-extender"), "{flags:?}");
    let env: Vec<&str> = extender["env"].as_sequence().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert!(env.contains(&"POD_NAMESPACE"), "$(POD_NAMESPACE) is expanded from the container's env");
}

/// coloc-scheduler's pods are never scheduled through the extender they carry: they name no
/// scheduler (the default one places them) and their class is one the routing never sends
/// to coloc-scheduler, whatever their namespace's labels.
#[test]
fn coloc_schedulers_pods_are_placed_by_the_default_scheduler() {
    let d = load("scheduler-of-its-own/deployment.yaml");
    let pod = &d["spec"]["template"]["spec"];
    assert!(pod["schedulerName"].is_null(), "the default scheduler places them");
    let class = pod["priorityClassName"].as_str().unwrap();
    assert_eq!(class, "system-cluster-critical");
    let routing = load("routing/mutatingadmissionpolicy.yaml");
    let guard = routing["spec"]["matchConditions"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "not-a-system-pod")
        .unwrap()["expression"]
        .as_str()
        .unwrap()
        .to_string();
    // Whatever the policy's classes say, nothing above a user's highest priority is routed,
    // and system-cluster-critical's value (2,000,000,000) is above it.
    use coloc_extender::policy::routing::HIGHEST_USER_PRIORITY;
    assert_eq!(guard, format!("object.spec.?priority.orValue(0) <= {HIGHEST_USER_PRIORITY}"));
    const { assert!(2_000_000_000 > HIGHEST_USER_PRIORITY) };
}

/// Which pods the routing and per-pod-verbs admission policies send is the policy's alone:
/// each reads the classes the extender publishes (its parameter, the ConfigMap
/// coloc-extender-classes, one selector a line) and does nothing where that ConfigMap is
/// missing, which it is once no pod that runs the extender is left (it owns it).
#[test]
fn routing_and_per_pod_verbs_read_the_classes_the_extender_publishes_and_nothing_without_them() {
    use coloc_extender::routing::{NAME, PER_POD_VERBS, ROUTED};
    for (dir, key) in [("routing", ROUTED), ("per-pod-verbs", PER_POD_VERBS)] {
        let policy = load(&format!("{dir}/mutatingadmissionpolicy.yaml"));
        let spec = &policy["spec"];
        assert_eq!(spec["paramKind"]["kind"], "ConfigMap", "{dir}");
        let text = serde_yaml_ng::to_string(spec).unwrap();
        assert!(text.contains(&format!("params.?data.?{key}.orValue('')")), "{dir} reads {key}");
        // The one place classes are named is the policy: no PriorityClass name here.
        for name in ["online-prod", "offline-batch", "free-tier", "koord"] {
            assert!(!text.contains(name), "{dir} names {name}");
        }
        let binding = load(&format!("{dir}/mutatingadmissionpolicybinding.yaml"));
        let param = &binding["spec"]["paramRef"];
        assert_eq!(param["name"], NAME, "{dir}");
        assert_eq!(param["parameterNotFoundAction"], "Allow", "{dir}: a missing parameter routes nothing");
    }
    // Each Deployment that runs the extender publishes them, owned by its pod.
    for file in EXTENDER_DEPLOYMENTS {
        let d = load(file);
        let container = extender_container(&d);
        let args: Vec<&str> = container["args"].as_sequence().unwrap().iter().filter_map(|a| a.as_str()).collect();
        assert!(args.contains(&"--publish-classes"), "{file}");
        let env = serde_yaml_ng::to_string(&container["env"]).unwrap();
        assert!(env.contains("POD_UID") && env.contains("metadata.uid"), "{file}");
    }
    let role = load_all("role-classes.yaml");
    assert_eq!(grants(&role[0]), ["/configmaps:create", "/configmaps:get", "/configmaps:update"]);
    assert_eq!(role[0]["rules"][1]["resourceNames"], Value::from(vec![NAME]));
}

/// The components that add the extender's flags patch the first container of every
/// Deployment carrying the extender's component label, which both topologies' carry.
#[test]
fn flags_reach_the_extender_in_either_topology() {
    for file in EXTENDER_DEPLOYMENTS {
        let d = load(file);
        extender_container(&d);
        for labels in [&d["metadata"]["labels"], &d["spec"]["template"]["metadata"]["labels"]] {
            assert_eq!(labels["app.kubernetes.io/component"], Value::from("scheduler-extender"), "{file}");
        }
    }
    for (component, flag) in [("requeue", "--requeue"), ("wake", "--wake")] {
        let patches = load(&format!("{component}/kustomization.yaml"))["patches"].clone();
        let patch = &patches[0];
        assert_eq!(patch["target"]["labelSelector"], Value::from("app.kubernetes.io/component=scheduler-extender"));
        assert!(patch["target"]["name"].is_null(), "{component}: not one Deployment by name");
        let ops = patch["patch"].as_str().unwrap();
        assert!(ops.contains("/spec/template/spec/containers/0/args/-") && ops.contains(flag), "{ops}");
    }
}

/// The extender container's ports, (name, number).
fn container_ports(deployment: &Value) -> Vec<(String, i64)> {
    let ports = extender_container(deployment)["ports"].as_sequence().unwrap();
    ports.iter().map(|p| (p["name"].as_str().unwrap().to_string(), p["containerPort"].as_i64().unwrap())).collect()
}

/// Every named port of a Deployment's pods, over all its containers.
fn pod_ports(deployment: &Value) -> Vec<(String, i64)> {
    let containers = deployment["spec"]["template"]["spec"]["containers"].as_sequence().unwrap();
    containers
        .iter()
        .flat_map(|c| c["ports"].as_sequence().into_iter().flatten())
        .map(|p| (p["name"].as_str().unwrap().to_string(), p["containerPort"].as_i64().unwrap()))
        .collect()
}

/// Each topology's NetworkPolicy selects exactly its pods, opens the verb (standalone) or
/// kube-scheduler's port (beside it) and the health port to all, and the admin port to
/// the monitoring namespace only. Beside kube-scheduler the hop is the pod's loopback,
/// which no NetworkPolicy governs.
#[test]
fn the_network_policy_opens_the_verb_and_health_ports_and_the_admin_port_to_monitoring_only() {
    for (dir, open) in [("standalone", [8081, 8443]), ("scheduler-of-its-own", [8081, 10259])] {
        let component = load(&format!("{dir}/kustomization.yaml"));
        let resources = serde_yaml_ng::to_string(&component["resources"]).unwrap();
        assert!(resources.contains("networkpolicy.yaml"), "{dir}: {resources}");
        let d = load(&format!("{dir}/deployment.yaml"));
        let np = load(&format!("{dir}/networkpolicy.yaml"));
        assert_eq!(
            (&np["apiVersion"], &np["kind"]),
            (&Value::from("networking.k8s.io/v1"), &Value::from("NetworkPolicy"))
        );
        assert_eq!(np["metadata"]["namespace"], d["metadata"]["namespace"]);
        let spec = &np["spec"];
        // It selects exactly the pods that run the extender.
        assert_eq!(spec["podSelector"]["matchLabels"], d["spec"]["selector"]["matchLabels"], "{dir}");
        let pod_labels = d["spec"]["template"]["metadata"]["labels"].as_mapping().unwrap();
        for (k, v) in spec["podSelector"]["matchLabels"].as_mapping().unwrap() {
            assert_eq!(pod_labels.get(k), Some(v), "{dir}: the pods carry {k:?}");
        }
        assert_eq!(spec["policyTypes"], Value::from(vec!["Ingress"]));
        // Each rule's ports, resolved against the pod's named ports, with its sources.
        let named = pod_ports(&d);
        let number = |p: &Value| match p {
            Value::String(name) => {
                named.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("{dir}: no container port {name}")).1
            }
            other => other.as_i64().unwrap(),
        };
        let mut rules: Vec<(Vec<i64>, Value)> = spec["ingress"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|r| {
                let mut ports: Vec<i64> =
                    r["ports"].as_sequence().unwrap().iter().map(|p| number(&p["port"])).collect();
                ports.sort();
                (ports, r["from"].clone())
            })
            .collect();
        rules.sort_by(|a, b| a.0.cmp(&b.0));
        let monitoring: Value =
            serde_yaml_ng::from_str("[{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]")
                .unwrap();
        // No `from`: any source (the kubelet probes; kube-scheduler is often host-networked
        // and --client-ca guards 8443).
        assert_eq!(rules, [(open.to_vec(), Value::Null), (vec![8082], monitoring)], "{dir}");
    }
}

/// Every document of a manifest file.
fn load_all(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests").join(file)).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text).map(|d| serde::Deserialize::deserialize(d).unwrap()).collect()
}

/// The non-resource grants of a ClusterRole as `path:verb`, sorted; it has no other.
fn url_grants(role: &Value) -> Vec<String> {
    let mut granted = Vec::new();
    for rule in role["rules"].as_sequence().unwrap() {
        assert!(rule["resources"].is_null() && rule["apiGroups"].is_null(), "{rule:?}");
        for url in rule["nonResourceURLs"].as_sequence().unwrap() {
            for verb in rule["verbs"].as_sequence().unwrap() {
                granted.push(format!("{}:{}", url.as_str().unwrap(), verb.as_str().unwrap()));
            }
        }
    }
    granted.sort();
    granted
}

#[test]
fn each_admin_port_reader_role_grants_one_path_of_it_and_ships_in_the_base() {
    let resources = load("kustomization.yaml")["resources"].clone();
    assert!(resources.as_sequence().unwrap().contains(&Value::from("clusterrole-diagnosis.yaml")), "in the base");
    let roles = load_all("clusterrole-diagnosis.yaml");
    let grants: Vec<(&str, Vec<String>)> =
        roles.iter().map(|r| (r["metadata"]["name"].as_str().unwrap(), url_grants(r))).collect();
    assert_eq!(
        grants,
        [
            ("coloc-extender-metrics-reader", vec!["/metrics:get".to_string()]),
            ("coloc-extender-decisions-reader", vec!["/decisions:get".to_string()]),
        ]
    );
    // The names the extender's refusals tell whoever is refused to ask for.
    for (_, role) in coloc_extender::http::admin_auth::ADMIN_PATHS {
        assert!(grants.iter().any(|(name, _)| *name == role), "{role}");
    }
}

#[test]
fn the_pod_monitor_scrapes_with_the_token_of_a_service_account_bound_to_the_metrics_reader() {
    let monitor = load("monitoring/podmonitor.yaml");
    let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
    assert_eq!((&endpoint["port"], &endpoint["path"]), (&Value::from("admin"), &Value::from("/metrics")));
    assert_eq!(endpoint["authorization"]["type"], Value::from("Bearer"));
    let secret_name = endpoint["authorization"]["credentials"]["name"].as_str().unwrap();
    assert_eq!(endpoint["authorization"]["credentials"]["key"], Value::from("token"));
    let rbac = load_all("monitoring/extender-metrics-rbac.yaml");
    let of_kind = |kind: &str| rbac.iter().filter(|o| o["kind"] == kind).collect::<Vec<_>>();
    // The Secret is the token the token controller fills in for a ServiceAccount ...
    let secret = of_kind("Secret").into_iter().find(|s| s["metadata"]["name"] == secret_name).unwrap();
    assert_eq!(secret["type"], Value::from("kubernetes.io/service-account-token"));
    let account = secret["metadata"]["annotations"]["kubernetes.io/service-account.name"].as_str().unwrap();
    let sa = of_kind("ServiceAccount").into_iter().find(|s| s["metadata"]["name"] == account).unwrap();
    assert_eq!(sa["automountServiceAccountToken"], Value::Bool(false), "no pod runs as it");
    // ... bound to the metrics reader, and to nothing else.
    let bindings = of_kind("ClusterRoleBinding");
    assert_eq!(bindings.len(), 1);
    assert_eq!(bindings[0]["roleRef"]["name"], Value::from("coloc-extender-metrics-reader"));
    assert_eq!(bindings[0]["subjects"][0]["name"], Value::from(account));
    assert_eq!(bindings[0]["subjects"][0]["namespace"], secret["metadata"]["namespace"]);
    assert!(load("monitoring/kustomization.yaml")["resources"]
        .as_sequence()
        .unwrap()
        .contains(&Value::from("extender-metrics-rbac.yaml")));
}

#[test]
fn a_rolling_update_keeps_serving_until_the_endpoint_is_gone_and_drains_within_the_grace_period() {
    let d = load("standalone/deployment.yaml");
    let spec = &d["spec"]["template"]["spec"];
    let container = extender_container(&d);
    let pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"].as_i64().expect("a preStop sleep");
    let grace = spec["terminationGracePeriodSeconds"].as_i64().unwrap();
    // preStop, then the server's 20 s drain (serve's ServeOptions::drain_timeout), inside the grace period.
    assert!(pre_stop >= 3 && pre_stop + 20 <= grace, "preStop {pre_stop}s + 20s drain must fit in {grace}s");
    assert_eq!(d["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"], Value::from(0));
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], Value::from("/readyz"));
    // Beside kube-scheduler no endpoint is to leave (its caller stops with it): the drain
    // alone fits in the grace period.
    let d = load("scheduler-of-its-own/deployment.yaml");
    let grace = d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"].as_i64().unwrap();
    assert!(20 <= grace, "the 20s drain must fit in {grace}s");
}

#[test]
fn requeue_writes_are_an_opt_in_component_with_only_the_writes_it_needs() {
    let role = load("requeue/clusterrole.yaml");
    // Copies made, released and deleted: by the requeue identity alone (what it reads and
    // its Events: the base role, bound to it too).
    assert_eq!(grants(&role), ["/pods:create", "/pods:delete", "/pods:patch"]);
    let component = load("requeue/kustomization.yaml");
    assert_eq!(component["kind"], Value::from("Component"));
    assert!(serde_yaml_ng::to_string(&component["patches"]).unwrap().contains("--requeue"));
    assert_eq!(base_components(), ["scheduler-of-its-own", "routing"], "off unless an operator opts in");
    let bindings = load_all("requeue/clusterrolebinding.yaml");
    let roles: Vec<&Value> = bindings.iter().map(|b| &b["roleRef"]["name"]).collect();
    assert_eq!(roles, [&role["metadata"]["name"], &Value::from("coloc-extender")]);
    for b in &bindings {
        assert_eq!(b["subjects"].as_sequence().map(Vec::len), Some(1));
        assert_eq!(
            b["subjects"][0]["name"],
            Value::from("coloc-extender-requeue"),
            "granted to the requeue identity alone"
        );
    }
    // Nobody acts as it: its own pods run as it, and only they mount its token.
    assert!(
        !std::path::Path::new(&format!("{}/manifests/requeue/impersonate.yaml", env!("CARGO_MANIFEST_DIR"))).exists()
    );
    let account = load("requeue/serviceaccount.yaml");
    assert_eq!(account["automountServiceAccountToken"], false);
    let docs = load_all("requeue/deployment.yaml");
    let d = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
    let spec = &d["spec"]["template"]["spec"];
    assert_eq!(spec["serviceAccountName"], Value::from("coloc-extender-requeue"));
    assert_eq!(spec["automountServiceAccountToken"], Value::Bool(true));
    assert_eq!(spec["containers"][0]["args"][0], Value::from("requeue"));
    assert_eq!(spec["schedulerName"], Value::Null, "placed by the default scheduler");
    // The Lease: written by the requeue identity, read (get, nothing else) by the extender.
    let lease = load_all("requeue/lease.yaml");
    let writer = &lease[0];
    assert_eq!(
        grants(writer),
        ["coordination.k8s.io/leases:create", "coordination.k8s.io/leases:get", "coordination.k8s.io/leases:update"]
    );
    assert_eq!(lease[1]["subjects"][0]["name"], Value::from("coloc-extender-requeue"));
    assert_eq!(grants(&lease[2]), ["coordination.k8s.io/leases:get"]);
    assert_eq!(lease[2]["rules"][0]["resourceNames"], Value::from(vec!["coloc-requeue"]));
    assert_eq!(lease[3]["subjects"][0]["name"], Value::from("coloc-extender"));
}

#[test]
fn wake_writes_are_an_opt_in_component_limited_to_pods_in_the_extenders_namespace() {
    let role = load("wake/role.yaml");
    assert_eq!(role["kind"], Value::from("Role"), "namespaced, not cluster-wide");
    assert_eq!(grants(&role), ["/pods:create", "/pods:delete", "/pods:list"]);
    let component = load("wake/kustomization.yaml");
    assert_eq!(component["kind"], Value::from("Component"));
    assert!(serde_yaml_ng::to_string(&component["patches"]).unwrap().contains("--wake"));
    let binding = load("wake/rolebinding.yaml");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(binding["metadata"]["namespace"], role["metadata"]["namespace"]);
    assert_eq!(
        binding["subjects"][0]["name"],
        Value::from("coloc-extender-wake"),
        "granted to the wake identity alone"
    );
    acted_as_by_the_pods_running_the_extender_alone("wake", "coloc-extender-wake");
}

/// A component's identity: a ServiceAccount no pod mounts, which the pods that run the
/// extender (and nobody else the component names) may impersonate. The file names the
/// standalone extender's ServiceAccount; install-namespace names coloc-scheduler's where it
/// runs the extender (tests/install_manifest.rs renders both).
fn acted_as_by_the_pods_running_the_extender_alone(component: &str, identity: &str) {
    let account = load(&format!("{component}/serviceaccount.yaml"));
    assert_eq!(account["metadata"]["name"], identity);
    assert_eq!(account["automountServiceAccountToken"], false);
    let docs = load_all(&format!("{component}/impersonate.yaml"));
    let (role, binding) = (&docs[0], &docs[1]);
    assert_eq!(grants(role), ["/serviceaccounts:impersonate"]);
    assert_eq!(role["rules"][0]["resourceNames"].as_sequence().map(Vec::len), Some(1));
    assert_eq!(role["rules"][0]["resourceNames"][0], Value::from(identity));
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(binding["subjects"].as_sequence().map(Vec::len), Some(1));
    assert_eq!(binding["subjects"][0]["name"], Value::from("coloc-extender"));
}

/// Beside kube-scheduler, the pod's ServiceAccount (coloc-scheduler) may act as the
/// extender's own identity and as nothing else; no pod runs as that identity then, and
/// none mounts its token unless it runs as it (standalone).
#[test]
fn coloc_scheduler_may_act_as_the_extender_and_nothing_else() {
    let docs = load_all("scheduler-of-its-own/impersonate.yaml");
    let (role, binding) = (&docs[0], &docs[1]);
    assert_eq!(grants(role), ["/serviceaccounts:impersonate"]);
    assert_eq!(role["rules"][0]["resourceNames"], Value::from(vec!["coloc-extender"]));
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(binding["subjects"].as_sequence().map(Vec::len), Some(1));
    assert_eq!(binding["subjects"][0]["name"], Value::from("coloc-scheduler"));
    let component = serde_yaml_ng::to_string(&load("scheduler-of-its-own/kustomization.yaml")["resources"]).unwrap();
    assert!(component.contains("impersonate.yaml"), "{component}");
    assert_eq!(load("serviceaccount.yaml")["automountServiceAccountToken"], Value::Bool(false));
    let standalone = load("standalone/deployment.yaml");
    assert_eq!(standalone["spec"]["template"]["spec"]["serviceAccountName"], Value::from("coloc-extender"));
    assert_eq!(standalone["spec"]["template"]["spec"]["automountServiceAccountToken"], Value::Bool(true));
}

/// Every pod write RBAC grants (the base's guard clean-up, the requeue and wake
/// components, the uninstall Job) is bounded by one ValidatingAdmissionPolicy in the base:
/// bound with Deny, matching every pod write of the extender's and the uninstall Job's
/// ServiceAccounts of the install namespace and nobody else's, with no parameter (what it
/// allows is shown on a real API server: tests/e2e/privilege.rs; that no missing object
/// refuses anyone else: tests/e2e/fails_safe.rs).
#[test]
fn the_base_ships_an_admission_policy_bounding_every_pod_write() {
    let account =
        |dir: &str| load(&format!("{dir}serviceaccount.yaml"))["metadata"]["name"].as_str().unwrap().to_string();
    let kustomization = load("kustomization.yaml");
    let files: Vec<&str> =
        kustomization["resources"].as_sequence().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    for f in ["admission", "admission-backstop"] {
        assert!(files.contains(&f), "the base lacks {f}: {files:?}");
    }
    let admission: Vec<String> = load("admission/kustomization.yaml")["resources"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        admission,
        [
            "validatingadmissionpolicy.yaml",
            "validatingadmissionpolicybinding.yaml",
            "validatingadmissionpolicy-marks.yaml",
            "validatingadmissionpolicybinding-marks.yaml",
            "validatingadmissionpolicy-policy.yaml",
            "validatingadmissionpolicybinding-policy.yaml",
            "validatingadmissionpolicy-classes.yaml",
            "validatingadmissionpolicybinding-classes.yaml",
            "validatingadmissionpolicy-copy-class.yaml",
            "validatingadmissionpolicybinding-copy-class.yaml"
        ]
    );
    let backstop = load("admission-backstop/kustomization.yaml");
    assert_eq!(backstop["resources"], Value::from(vec!["../admission"]));
    assert_eq!(backstop["nameSuffix"], Value::from("-backstop"));
    let policy = load("admission/validatingadmissionpolicy.yaml");
    let binding = load("admission/validatingadmissionpolicybinding.yaml");
    assert_eq!(
        (&policy["apiVersion"], &policy["kind"]),
        (&Value::from("admissionregistration.k8s.io/v1"), &Value::from("ValidatingAdmissionPolicy"))
    );
    assert_eq!(
        (&binding["apiVersion"], &binding["kind"]),
        (&Value::from("admissionregistration.k8s.io/v1"), &Value::from("ValidatingAdmissionPolicyBinding"))
    );
    assert_eq!(binding["spec"]["policyName"], policy["metadata"]["name"]);
    assert_eq!(binding["spec"]["validationActions"], Value::from(vec!["Deny"]));
    assert!(binding["spec"]["matchResources"].is_null(), "every namespace, kube-system included");
    assert!(policy["metadata"]["namespace"].is_null() && binding["metadata"]["namespace"].is_null(), "cluster-scoped");
    let spec = &policy["spec"];
    assert_eq!(spec["failurePolicy"], Value::from("Fail"));
    // No parameter: nothing of the install can go missing and refuse a write.
    for (what, doc) in [("policy", &policy), ("binding", &binding)] {
        let text = serde_yaml_ng::to_string(&doc["spec"]).unwrap();
        assert!(
            !text.contains("paramKind") && !text.contains("paramRef") && !text.contains("params."),
            "the {what} has a parameter"
        );
    }
    let rules = spec["matchConstraints"]["resourceRules"].as_sequence().unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0]["resources"], Value::from(vec!["pods"]), "pods; RBAC grants no subresource");
    assert_eq!(rules[0]["operations"], Value::from(vec!["CREATE", "UPDATE", "DELETE"]));
    let conditions = spec["matchConditions"].as_sequence().unwrap();
    assert_eq!(conditions.len(), 1);
    let matched = conditions[0]["expression"].as_str().unwrap();
    // Every identity, the ServiceAccounts of the install namespace (a literal the
    // install-namespace transformers rewrite), and nobody else.
    assert_eq!(
        [account(""), account("uninstall/"), account("requeue/"), account("wake/")],
        ["coloc-extender", "coloc-extender-uninstall", "coloc-extender-requeue", "coloc-extender-wake"]
    );
    assert!(
        matched.contains(
            "matches('^system:serviceaccount:coloc-system:coloc-extender(-uninstall|-requeue|-wake|-routing-check)?$')"
        ),
        "{matched}"
    );
    for v in spec["validations"].as_sequence().unwrap() {
        let message = v["message"].as_str().or(v["messageExpression"].as_str()).unwrap();
        assert!(message.contains("coloc-extender"), "{message}");
        assert_eq!(v["reason"], Value::from("Forbidden"));
    }
    // One policy bounds every component: none ships its own.
    for component in ["requeue", "wake"] {
        let files = serde_yaml_ng::to_string(&load(&format!("{component}/kustomization.yaml"))["resources"]).unwrap();
        assert!(!files.contains("admissionpolicy"), "{component} ships a policy of its own");
    }
    use coloc_extender::{model::marks, wake};
    let text = serde_yaml_ng::to_string(spec).unwrap();
    for name in [marks::LABEL, marks::FROM_UID, marks::GATE, marks::GUARD, wake::LABEL, wake::NODE, wake::IMAGE] {
        assert!(text.contains(&format!("'{name}'")), "the policy does not name {name}, as the extender does");
    }
    // The marks are reserved through every path that carries a pod's metadata (every pods/*
    // subresource, the legacy bindings), by a policy that exempts the same identities and
    // nobody else; repairers are who RBAC grants the shipped mark writer's verb.
    let marks = load("admission/validatingadmissionpolicy-marks.yaml");
    let text = serde_yaml_ng::to_string(&marks["spec"]).unwrap();
    assert!(!text.contains("paramKind"));
    assert_eq!(
        marks["spec"]["matchConstraints"]["resourceRules"][0]["resources"],
        Value::from(vec!["pods", "pods/*", "bindings"])
    );
    let writer = load_all("clusterrole-mark-writer.yaml");
    assert_eq!(grants(&writer[0]), ["coloc-extender.io/marks:write"]);
    assert_eq!(writer[1]["subjects"][0]["name"], "coloc-extender:mark-writers");
    assert!(text.contains("authorizer.group('coloc-extender.io').resource('marks').check('write')"));
    let exempt = marks["spec"]["matchConditions"][0]["expression"].as_str().unwrap();
    assert!(
        exempt.contains("matches('^system:serviceaccount:coloc-system:coloc-extender(-uninstall|-requeue|-wake)?$')")
    );
}

/// The uninstall Job runs as a ServiceAccount of its own, with what it needs: list pods
/// and FailedScheduling Events, patch (guards, gates), create (a preempted guarded pod's
/// copy) and delete (replacements, placeholders) pods.
#[test]
fn the_uninstall_job_has_its_own_narrow_rbac() {
    let kustomization = load("uninstall/kustomization.yaml");
    let files: Vec<&str> =
        kustomization["resources"].as_sequence().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    assert_eq!(files, ["serviceaccount.yaml", "clusterrole.yaml", "clusterrolebinding.yaml", "job.yaml"]);
    let granted = grants(&load("uninstall/clusterrole.yaml"));
    let mut expected: Vec<String> = [
        "/pods:get",
        "/pods:list",
        "/pods:patch",
        "/pods:create",
        "/pods:delete",
        "/events:list",
        "events.k8s.io/events:create",
        "events.k8s.io/events:patch",
    ]
    .map(String::from)
    .to_vec();
    expected.sort();
    assert_eq!(granted, expected);
    let job = load("uninstall/job.yaml");
    let pod = &job["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], load("uninstall/serviceaccount.yaml")["metadata"]["name"]);
    assert_eq!(job["spec"]["backoffLimit"], Value::from(0), "a refusal is read in the log, not retried");
    assert_eq!(pod["containers"][0]["args"][0], Value::from("uninstall"));
}

#[test]
fn the_per_pod_verbs_profile_sends_every_pod_to_preempt_and_only_marked_ones_to_filter() {
    use coloc_extender::model::marks::PER_POD_VERBS_MARKER as MARKER;
    let config = load("scheduler/kube-scheduler-config-per-pod-verbs.yaml");
    let entries = config["extenders"].as_sequence().unwrap();
    assert_eq!(entries.len(), 2);
    let (every_pod, marked) = (&entries[0], &entries[1]);
    assert_eq!(every_pod["urlPrefix"], marked["urlPrefix"], "one service");
    assert_eq!(every_pod["nodeCacheCapable"], marked["nodeCacheCapable"]);
    // A: preempt for every pod, online ones included.
    assert_eq!(every_pod["preemptVerb"], Value::from("preempt"));
    assert!(every_pod["filterVerb"].is_null() && every_pod["prioritizeVerb"].is_null());
    assert!(every_pod["managedResources"].is_null());
    // B: filter and prioritize for pods with the marker, which kube-scheduler's fit ignores.
    assert_eq!(
        (&marked["filterVerb"], &marked["prioritizeVerb"]),
        (&Value::from("filter"), &Value::from("prioritize"))
    );
    assert!(marked["preemptVerb"].is_null());
    assert!(marked["weight"].as_i64().unwrap() > 0);
    let managed = marked["managedResources"].as_sequence().unwrap();
    assert_eq!(managed.len(), 1);
    assert_eq!((&managed[0]["name"], &managed[0]["ignoredByScheduler"]), (&Value::from(MARKER), &Value::Bool(true)));
}

#[test]
fn the_marker_policy_is_an_opt_in_component_that_marks_the_classes_needing_filter() {
    use coloc_extender::model::marks::PER_POD_VERBS_MARKER as MARKER;
    use coloc_extender::policy::Policy;
    let component = load("per-pod-verbs/kustomization.yaml");
    assert_eq!(component["kind"], Value::from("Component"));
    let files: Vec<&str> = component["resources"].as_sequence().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    assert_eq!(files, ["mutatingadmissionpolicy.yaml", "mutatingadmissionpolicybinding.yaml"]);
    assert_eq!(base_components(), ["scheduler-of-its-own", "routing"], "off unless an operator opts in");

    let policy = load("per-pod-verbs/mutatingadmissionpolicy.yaml");
    assert_eq!(policy["apiVersion"], Value::from("admissionregistration.k8s.io/v1"));
    let spec = &policy["spec"];
    assert_eq!(spec["reinvocationPolicy"], Value::from("Never"));
    let rule = &spec["matchConstraints"]["resourceRules"][0];
    assert_eq!((&rule["operations"][0], &rule["resources"][0]), (&Value::from("CREATE"), &Value::from("pods")));
    assert!(serde_yaml_ng::to_string(&spec["variables"]).unwrap().contains(MARKER));
    let binding = load("per-pod-verbs/mutatingadmissionpolicybinding.yaml");
    assert_eq!(binding["spec"]["policyName"], policy["metadata"]["name"]);
    // Only where the registration is: the standalone extender's, never with
    // coloc-scheduler (which has none), so it does not render without standalone.
    let overlay = std::env::temp_dir().join(format!("per-pod-verbs-{}", std::process::id()));
    std::fs::create_dir_all(&overlay).unwrap();
    let up = "../".repeat(overlay.components().count() - 1);
    let manifests = format!("{up}{}", Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests").display());
    let kustomization = format!("resources: [{manifests}]\ncomponents: [{manifests}/per-pod-verbs]\n");
    std::fs::write(overlay.join("kustomization.yaml"), kustomization).unwrap();
    let out =
        std::process::Command::new("kubectl").args(["kustomize", &overlay.display().to_string()]).output().unwrap();
    let _ = std::fs::remove_dir_all(&overlay);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("Deployment") && err.contains("coloc-extender"), "{err}");

    // Which classes it marks: those the published `perPodVerbs` names, the policy's
    // classes that need filter/prioritize (routing::tests); online ones are not.
    let default = Policy::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("policy/default.yaml")).unwrap();
    let marked = default.per_pod_verbs_selectors();
    for class in &default.classes {
        let needs = !class.per_pod_verbs_reasons().is_empty();
        for name in class.r#match.iter().flat_map(|s| &s.priority_class_names) {
            assert_eq!(
                marked.contains(&format!("{name},")) || marked.contains(&format!("{name}|")),
                needs,
                "class {} name {name}",
                class.name
            );
        }
    }
}

/// Safe defaults: every example registration, and the scheduler of its own's, is names mode
/// (the fast one) and ignorable (fail-open while trying it).
#[test]
fn every_shipped_registration_is_names_mode_and_ignorable() {
    let files = [
        "scheduler/kube-scheduler-config.yaml",
        "scheduler/kube-scheduler-config-nodecache.yaml",
        "scheduler/kube-scheduler-config-per-pod-verbs.yaml",
        "scheduler-of-its-own/kube-scheduler-config.yaml",
    ];
    for f in files {
        let config = load(f);
        let entries = config["extenders"].as_sequence().unwrap();
        assert!(!entries.is_empty(), "{f}");
        for e in entries {
            assert_eq!(e["nodeCacheCapable"], Value::from(true), "{f}: names mode");
            assert_eq!(e["ignorable"], Value::from(true), "{f}: fail-open while trying it");
        }
    }
}

#[test]
fn every_shipped_registration_weighs_the_policys_scores_as_the_test_bed_does() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests");
    let mut checked = 0;
    for dir in ["scheduler", "scheduler-of-its-own"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            for (i, _) in text.match_indices("prioritizeVerb: prioritize") {
                let weight = text[i..].lines().find_map(|l| l.trim().strip_prefix("weight: "));
                let weight = weight.and_then(|w| w.split_whitespace().next()).and_then(|w| w.parse::<u32>().ok());
                assert_eq!(weight, Some(coloc_testbed::scheduler::SHIPPED_WEIGHT), "{dir}: {}", &text[i..]);
                checked += 1;
            }
        }
    }
    assert!(checked >= 4, "{checked} registrations with prioritize");
}

/// The example PriorityClasses (opt-in component) each fall in the default policy's class
/// their description names, and the routing sends their pods to coloc-scheduler.
#[test]
fn the_example_priority_classes_are_the_default_policys_and_routed() {
    use coloc_extender::model::Pod;
    let policy = coloc_extender::policy::Policy::builtin_default().enforced();
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/priorityclasses/priorityclasses.yaml"),
    )
    .unwrap();
    let routing = policy.routed_selectors();
    let component = load("priorityclasses/kustomization.yaml");
    assert_eq!(component["kind"], Value::from("Component"));
    let mut seen = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let pc: Value = serde::Deserialize::deserialize(doc).unwrap();
        let name = pc["metadata"]["name"].as_str().unwrap().to_string();
        let value = pc["value"].as_i64().unwrap() as i32;
        let pod = Pod { priority_class_name: Some(name.clone()), priority: Some(value), ..Default::default() };
        let class = &policy.class(policy.classify(&pod, value)).name;
        // By name and by value alike (the Priority admission plugin resolves the value).
        let by_value = Pod { priority: Some(value), ..Default::default() };
        assert_eq!(
            &policy.class(policy.classify(&by_value, value)).name,
            class,
            "{name}: its value is another class's"
        );
        let description = pc["description"].as_str().unwrap();
        assert!(
            description.contains(&format!("coloc-extender class {class})")),
            "{name} is class {class}: {description}"
        );
        let named = routing.lines().any(|l| l.split('|').next().unwrap().split(',').any(|n| n == name));
        assert!(named, "the routing does not send {name} pods to coloc-scheduler");
        seen.push((name, class.clone()));
    }
    let classes: Vec<&str> = seen.iter().map(|(_, c)| c.as_str()).collect();
    assert_eq!(classes, ["online", "online", "batch", "free"]);
}

/// The install has a namespace of its own, coloc-system, set once (the base's
/// NamespaceTransformer) and shipped as an object, so that `kubectl apply -k manifests`
/// needs nothing made first and `kubectl delete -k` leaves nothing behind in it.
#[test]
fn the_install_namespace_is_its_own_coloc_system_and_ships_with_it() {
    let base = load("kustomization.yaml");
    let set: Vec<&str> = base["transformers"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|t| t.as_str())
        .filter(|t| t.contains("kind: NamespaceTransformer"))
        .collect();
    assert_eq!(set.len(), 1, "set once");
    let transformer: Value = serde_yaml_ng::from_str(set[0]).unwrap();
    assert_eq!(transformer["metadata"]["namespace"], Value::from("coloc-system"));
    let namespace = load("namespace.yaml");
    assert_eq!(
        (&namespace["kind"], &namespace["metadata"]["name"]),
        (&Value::from("Namespace"), &Value::from("coloc-system"))
    );
    assert!(base["resources"].as_sequence().unwrap().contains(&Value::from("namespace.yaml")));
}

/// The shipped mutating policies (routing, per-pod-verbs) leave a requeue copy as requeue
/// built it: requeue releases only a copy whose spec is the one it built, so a copy
/// mutated at its creation (another scheduler, a marker) would never run and its original
/// would be lost.
#[test]
fn the_mutating_policies_leave_requeue_copies_alone() {
    for file in ["routing/mutatingadmissionpolicy.yaml", "per-pod-verbs/mutatingadmissionpolicy.yaml"] {
        let policy = load(file);
        let conditions = policy["spec"]["matchConditions"].as_sequence().unwrap();
        let skip = conditions.iter().find(|c| c["name"] == "not-a-requeue-copy").unwrap_or_else(|| panic!("{file}"));
        let expression = skip["expression"].as_str().unwrap();
        assert!(
            expression.contains(&format!("'{}'", coloc_extender::model::marks::LABEL))
                && expression.contains("!= 'true'"),
            "{file}: {expression}"
        );
    }
}

/// The classes the extender publishes are read by three policies and held to their
/// grammar at write by a fourth; CEL cannot share an expression, so each carries the
/// grammar's pattern. They are one pattern: a line the extender may write is a line each
/// reader reads, and a line none may write matches nothing in any.
#[test]
fn every_reader_of_the_published_classes_reads_the_grammar_they_are_written_in() {
    let pattern = |file: &str| {
        let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests").join(file)).unwrap();
        let start = text.find(".matches('^[^|]").unwrap_or_else(|| panic!("{file} filters no selector line")) + 10;
        let end = start + text[start..].find("')").unwrap();
        text[start..end].to_string()
    };
    let written = pattern("admission/validatingadmissionpolicy-classes.yaml");
    for reader in [
        "routing/mutatingadmissionpolicy.yaml",
        "per-pod-verbs/mutatingadmissionpolicy.yaml",
        "admission/validatingadmissionpolicy-copy-class.yaml",
    ] {
        assert_eq!(pattern(reader), written, "{reader} reads another grammar than the extender writes");
    }
}
