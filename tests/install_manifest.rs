//! The single-file install (deploy/coloc-extender.yaml) is `kubectl kustomize manifests`,
//! kept in step, and a real API server accepts every object of it (server-side dry run).
//! Needs kubectl and the control plane's binaries (`KUBE_BIN_DIR`); without them each
//! test says in one line that it skipped.
//!
//! After changing manifests/: `COLOC_BLESS=1 cargo test --test install_manifest`.

use std::path::{Path, PathBuf};

use coloc_testbed::control_plane::Options;
use coloc_testbed::{Binaries, ControlPlane};

const HEADER: &str = "\
# coloc-extender, rendered from manifests/ (kubectl kustomize manifests): the extender in
# shadow mode beside a scheduler of its own, in the namespace coloc-system. Do not edit:
# change manifests/ and run COLOC_BLESS=1 cargo test --test install_manifest. No
# certificate or Secret to make: kube-scheduler calls the extender on its pod's loopback.
";

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn rendered(bins: &Binaries) -> String {
    let out = std::process::Command::new(&bins.kubectl)
        .args(["kustomize", &repo("manifests").display().to_string()])
        .output()
        .expect("kubectl runs");
    assert!(out.status.success(), "kubectl kustomize manifests: {}", String::from_utf8_lossy(&out.stderr));
    format!("{HEADER}{}", String::from_utf8(out.stdout).unwrap())
}

/// `kubectl apply --server-side --dry-run=server` of `file`: what the API server says of
/// each object. --validate=false skips only kubectl's client-side schema check
/// (ControlPlane::apply says why); the API server validates and admits each in full.
fn server_dry_run(plane: &ControlPlane, file: &Path) -> anyhow::Result<String> {
    let file = file.display().to_string();
    plane.kubectl(&[
        "apply",
        "--server-side",
        "--dry-run=server",
        "--validate=false",
        "--field-manager=coloc-install-check",
        "-f",
        &file,
    ])
}

#[test]
fn the_install_file_is_the_rendered_manifests() {
    let bins = match Binaries::find() {
        Ok(b) => b,
        Err(why) => return println!("install_manifest: skipped: {why}"),
    };
    let want = rendered(&bins);
    let path = repo("deploy/coloc-extender.yaml");
    if std::env::var_os("COLOC_BLESS").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(have == want, "deploy/coloc-extender.yaml is not `kubectl kustomize manifests`: COLOC_BLESS=1 cargo test --test install_manifest");
}

#[tokio::test]
async fn a_real_api_server_accepts_the_install_file() {
    let bins = match Binaries::find() {
        Ok(b) => b,
        Err(why) => return println!("install_manifest: skipped: {why}"),
    };
    let plane = ControlPlane::start(&bins, Options { controllers: false, ..Default::default() }).await.unwrap();
    // A dry run stores no Namespace for the objects in it, nor the policy giving the
    // grants their owner.
    plane.kubectl(&["create", "namespace", "coloc-system"]).unwrap();
    let text = std::fs::read_to_string(repo("deploy/coloc-extender.yaml")).unwrap();
    let objects: Vec<serde_yaml_ng::Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &serde_yaml_ng::Value| !v.is_null())
        .collect();
    grants_policy_stored(&plane, &objects);
    let out = server_dry_run(&plane, &repo("deploy/coloc-extender.yaml"))
        .unwrap_or_else(|e| panic!("server-side dry run refused the install file: {e:#}"));
    // Every object, the cluster-scoped admission policies included, is named in the answer.
    for kind in [
        "namespace/coloc-system",
        "deployment.apps/coloc-scheduler",
        "mutatingadmissionpolicy.admissionregistration.k8s.io/coloc-scheduler",
        "validatingadmissionpolicy.admissionregistration.k8s.io/coloc-extender",
    ] {
        assert!(out.contains(&format!("{kind} serverside-applied (server dry run)")), "{kind} missing from:\n{out}");
    }
}

/// The kinds a v1.33 API server serves, of those the install file holds (the oldest minor
/// the README supports). MutatingAdmissionPolicy is served as v1 from v1.36 only.
const SERVED_BY_V1_33: &[(&str, &[&str])] = &[
    ("v1", &["ConfigMap", "Namespace", "Service", "ServiceAccount", "Secret", "PodTemplate"]),
    ("apps/v1", &["Deployment"]),
    ("policy/v1", &["PodDisruptionBudget"]),
    ("networking.k8s.io/v1", &["NetworkPolicy"]),
    ("rbac.authorization.k8s.io/v1", &["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]),
    ("admissionregistration.k8s.io/v1", &["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]),
    ("scheduling.k8s.io/v1", &["PriorityClass"]),
];

/// Every object of the install file a v1.33-1.35 cluster serves, but those of the routing
/// component and the grants policy, which such an install leaves out (one line each, and
/// grants-owned with it: manifests/kustomization.yaml).
#[test]
fn the_base_install_asks_only_for_what_v1_33_serves_but_the_routing_it_leaves_out() {
    let text = std::fs::read_to_string(repo("deploy/coloc-extender.yaml")).unwrap();
    let files = [
        "routing/mutatingadmissionpolicy.yaml",
        "routing/mutatingadmissionpolicybinding.yaml",
        "routing/parameter-keeper.yaml",
    ];
    let files =
        files.into_iter().chain(["grants/mutatingadmissionpolicy.yaml", "grants/mutatingadmissionpolicybinding.yaml"]);
    let mut routing: Vec<(String, String)> = files
        .flat_map(|f| {
            let text = std::fs::read_to_string(repo(&format!("manifests/{f}"))).unwrap();
            serde_yaml_ng::Deserializer::from_str(&text)
                .map(|d| serde::Deserialize::deserialize(d).unwrap())
                .collect::<Vec<serde_yaml_ng::Value>>()
        })
        .map(|v| (v["kind"].as_str().unwrap().to_string(), v["metadata"]["name"].as_str().unwrap().to_string()))
        .collect();
    routing.sort();
    let mut left_out = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let v: serde_yaml_ng::Value = serde::Deserialize::deserialize(doc).unwrap();
        let (api, kind) = (v["apiVersion"].as_str().unwrap_or(""), v["kind"].as_str().unwrap_or(""));
        let name = v["metadata"]["name"].as_str().unwrap_or("").to_string();
        if SERVED_BY_V1_33.iter().any(|(a, kinds)| *a == api && kinds.contains(&kind)) {
            continue;
        }
        assert!(routing.contains(&(kind.to_string(), name.clone())), "{api} {kind} {name}: not served by v1.33");
        left_out.push((kind.to_string(), name));
    }
    left_out.sort();
    assert_eq!(left_out, routing, "the routing and grants policies are all a v1.33 install leaves out");
}

/// deploy/overlay-example's namespace: not the default, so that a missed rewrite shows.
const OVERLAY_NAMESPACE: &str = "platform-coloc";

fn render(bins: &Binaries, dir: &str) -> Vec<serde_yaml_ng::Value> {
    render_path(bins, &repo(dir))
}

fn render_path(bins: &Binaries, dir: &Path) -> Vec<serde_yaml_ng::Value> {
    let out = std::process::Command::new(&bins.kubectl)
        .args(["kustomize", &dir.display().to_string()])
        .output()
        .expect("kubectl runs");
    assert!(out.status.success(), "kubectl kustomize {}: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &serde_yaml_ng::Value| !v.is_null())
        .collect()
}

/// Kinds that have no namespace.
const CLUSTER_SCOPED: &[&str] = &[
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "PriorityClass",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
];

/// Every object where it belongs and naming `namespace_of_install` wherever it names the
/// install's: cluster-scoped kinds with none, every binding's ServiceAccount there, neither
/// the files' `coloc-system` nor `kube-system` where the install's is meant, no
/// placeholder left, the serving certificate's DNS names, images as `images:` set them.
fn every_object_in(objects: &[serde_yaml_ng::Value], namespace_of_install: &str) {
    for o in objects {
        let (kind, name) = (o["kind"].as_str().unwrap(), o["metadata"]["name"].as_str().unwrap());
        let namespace = o["metadata"]["namespace"].as_str();
        if kind == "Namespace" {
            assert_eq!(name, namespace_of_install, "the install's own namespace");
        }
        if CLUSTER_SCOPED.contains(&kind) {
            assert_eq!(namespace, None, "{kind} {name} is cluster-scoped");
        } else {
            assert_eq!(namespace, Some(namespace_of_install), "{kind} {name}");
        }
        // A ServiceAccount's, that is: a group (the mark writers) has no namespace.
        for s in o["subjects"].as_sequence().into_iter().flatten().filter(|s| s["kind"] == "ServiceAccount") {
            assert_eq!(s["namespace"].as_str(), Some(namespace_of_install), "{kind} {name}: subject {s:?}");
        }
        let text = serde_yaml_ng::to_string(o).unwrap();
        // The admission policy (and its backstop) names kube-system on purpose: never a
        // home for copies.
        let names_home_on_purpose = kind == "ValidatingAdmissionPolicy"
            && name.starts_with("coloc-extender")
            && !name.contains("marks")
            && !name.contains("-policy");
        for other in ["coloc-system", "kube-system"].into_iter().filter(|n| *n != namespace_of_install) {
            if other == "kube-system" && names_home_on_purpose {
                continue;
            }
            assert!(!text.contains(other), "{kind} {name} names {other}:\n{text}");
        }
        assert!(!text.replace("POD_NAMESPACE", "").contains("NAMESPACE"), "{kind} {name} keeps a placeholder:\n{text}");
        if kind == "Certificate" && name == "coloc-extender-serving" {
            let dns: Vec<&str> =
                o["spec"]["dnsNames"].as_sequence().unwrap().iter().filter_map(|d| d.as_str()).collect();
            assert!(dns.contains(&format!("coloc-extender.{namespace_of_install}.svc").as_str()), "{dns:?}");
        }
        for c in o["spec"]["template"]["spec"]["containers"].as_sequence().into_iter().flatten() {
            let image = c["image"].as_str().unwrap_or("");
            if image.contains("coloc-extender") {
                assert_eq!(image, "registry.example/coloc-extender:0.1.0", "{kind} {name} follows images:");
            }
        }
    }
}

/// The objects of `kind` named `name`.
fn named<'a>(objects: &'a [serde_yaml_ng::Value], kind: &str, name: &str) -> &'a serde_yaml_ng::Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// The topology as rendered with requeue, wake and monitoring on: the components' flags
/// reach the extender, the first container of `deployment` (and nothing else of it); the
/// impersonation bindings name the pods' ServiceAccount and nobody else; the extender's
/// PodMonitor selects those pods, whose `admin` port is the extender's.
fn the_topology_follows(objects: &[serde_yaml_ng::Value], deployment: &str) {
    let d = named(objects, "Deployment", deployment);
    let pod = &d["spec"]["template"]["spec"];
    let account = pod["serviceAccountName"].as_str().unwrap();
    let containers = pod["containers"].as_sequence().unwrap();
    assert_eq!(containers[0]["name"].as_str(), Some("coloc-extender"));
    let args: Vec<&str> = containers[0]["args"].as_sequence().unwrap().iter().filter_map(|a| a.as_str()).collect();
    for flag in ["--requeue", "--wake"] {
        assert!(args.contains(&flag), "{deployment}: the extender lacks {flag}: {args:?}");
        for other in &containers[1..] {
            assert!(!serde_yaml_ng::to_string(other).unwrap().contains(flag), "{deployment}: {flag} reached {other:?}");
        }
    }
    let bindings: Vec<&serde_yaml_ng::Value> = objects
        .iter()
        .filter(|o| o["kind"] == "RoleBinding")
        .filter(|o| o["metadata"]["name"].as_str().unwrap().starts_with("coloc-extender-act-as"))
        .collect();
    let expected = if account == "coloc-extender" { 1 } else { 2 };
    assert_eq!(
        bindings.len(),
        expected,
        "the wake identity (and beside kube-scheduler, the extender's): nobody acts as the requeue identity"
    );
    for b in bindings {
        let subjects = b["subjects"].as_sequence().unwrap();
        assert_eq!(subjects.len(), 1);
        assert_eq!(subjects[0]["name"].as_str(), Some(account), "{:?} names another", b["metadata"]["name"]);
    }
    let monitor = named(objects, "PodMonitor", "coloc-extender");
    let labels = &d["spec"]["template"]["metadata"]["labels"];
    for (k, v) in monitor["spec"]["selector"]["matchLabels"].as_mapping().unwrap() {
        assert_eq!(&labels[k], v, "the extender's PodMonitor does not select {deployment}'s pods ({k:?})");
    }
    let port = monitor["spec"]["podMetricsEndpoints"][0]["port"].as_str().unwrap();
    let ports = containers[0]["ports"].as_sequence().unwrap();
    assert!(ports.iter().any(|p| p["name"].as_str() == Some(port)), "the extender has no port {port}");
    let selected = objects
        .iter()
        .filter(|o| o["kind"] == "Deployment")
        .filter(|o| {
            let labels = &o["spec"]["template"]["metadata"]["labels"];
            monitor["spec"]["selector"]["matchLabels"].as_mapping().unwrap().iter().all(|(k, v)| &labels[k] == v)
        })
        .count();
    assert_eq!(selected, 1, "the extender's PodMonitor selects the pods of one Deployment");
    // Copies are the requeue controller's, in pods of its own running as the requeue
    // identity; the extender's pods only read its Lease.
    let requeue = named(objects, "Deployment", "coloc-requeue");
    let spec = &requeue["spec"]["template"]["spec"];
    assert_eq!(spec["serviceAccountName"].as_str(), Some("coloc-extender-requeue"));
    assert_ne!(account, "coloc-extender-requeue");
}

/// The example overlay (another namespace, every component on) puts every object where
/// it belongs and names the install namespace wherever it names one: no `kube-system`
/// where the install's is meant, no placeholder left; the components reach the extender
/// beside kube-scheduler; and a real API server, with the CRDs of the Prometheus Operator
/// loaded, accepts every object.
#[tokio::test]
async fn an_overlay_in_another_namespace_with_every_component_renders_right_and_is_accepted() {
    let bins = match Binaries::find() {
        Ok(b) => b,
        Err(why) => return println!("install_manifest: skipped: {why}"),
    };
    let objects = render(&bins, "deploy/overlay-example");
    let kinds: std::collections::BTreeSet<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    for kind in ["Namespace", "PodMonitor", "PrometheusRule", "PriorityClass", "Deployment"] {
        assert!(kinds.contains(kind), "every component is on: no {kind} in {kinds:?}");
    }
    for kind in ["Service", "Certificate", "Secret"] {
        let of_kind: Vec<_> = objects.iter().filter(|o| o["kind"] == kind).map(|o| &o["metadata"]["name"]).collect();
        let tokens = of_kind.iter().all(|n| n.as_str().is_some_and(|n| n.ends_with("-metrics-reader")));
        assert!(tokens, "no {kind} but the scrapers' tokens: {of_kind:?}");
    }
    every_object_in(&objects, OVERLAY_NAMESPACE);
    the_topology_follows(&objects, "coloc-scheduler");
    // The admission policies name the install's ServiceAccounts, the backstops too.
    let identities = format!("system:serviceaccount:{OVERLAY_NAMESPACE}:coloc-extender");
    let policies: Vec<&serde_yaml_ng::Value> = objects
        .iter()
        .filter(|o| o["kind"] == "ValidatingAdmissionPolicy")
        .filter(|o| {
            let name = o["metadata"]["name"].as_str().unwrap_or("");
            !name.starts_with("coloc-extender-policy")
        })
        .collect();
    assert_eq!(
        policies.len(),
        8,
        "two policies on pods, one on the extender's ConfigMap, one on copies' classes, and their backstops"
    );
    for p in policies {
        let text = serde_yaml_ng::to_string(&p["spec"]).unwrap();
        assert!(text.contains(&identities), "{:?} does not name {identities}", p["metadata"]["name"]);
    }
    // Every parameter is the classes the install publishes in its own namespace.
    let bindings = objects.iter().filter(|o| o["kind"].as_str().is_some_and(|k| k.ends_with("AdmissionPolicyBinding")));
    let params: Vec<_> = bindings.filter(|b| b["spec"]["paramRef"]["name"] == "coloc-extender-classes").collect();
    assert!(params.len() >= 4, "routing, per-pod-verbs and copy-class (and its backstop) read the classes: {params:?}");
    for b in params {
        let ns = b["spec"]["paramRef"]["namespace"].as_str();
        assert_eq!(ns, Some(OVERLAY_NAMESPACE), "{:?} reads its parameter elsewhere", b["metadata"]["name"]);
    }
    // The uninstall Job of the same install: its namespace and image.
    let uninstall = render(&bins, "deploy/overlay-example/uninstall");
    let job = uninstall.iter().find(|o| o["kind"] == "Job").unwrap();
    assert_eq!(job["metadata"]["namespace"].as_str(), Some(OVERLAY_NAMESPACE));
    assert_eq!(
        job["spec"]["template"]["spec"]["containers"][0]["image"].as_str(),
        Some("registry.example/coloc-extender:0.1.0")
    );
    let all = [&objects[..], &uninstall[..]].concat();
    let out = dry_run_with_crds(&bins, OVERLAY_NAMESPACE, &all).await;
    for kind in [
        "namespace/platform-coloc",
        "deployment.apps/coloc-scheduler",
        "podmonitor.monitoring.coreos.com/coloc-scheduler",
        "prometheusrule.monitoring.coreos.com/coloc-extender",
        "validatingadmissionpolicy.admissionregistration.k8s.io/coloc-extender-marks-backstop",
        "job.batch/coloc-extender-uninstall",
    ] {
        assert!(out.contains(&format!("{kind} serverside-applied (server dry run)")), "{kind} missing from:\n{out}");
    }
}

/// `objects` applied with --dry-run=server to a real API server holding the CRDs of
/// cert-manager and the Prometheus Operator, `namespace` made first (a dry run stores no
/// Namespace for the objects in it); what the API server answered.
async fn dry_run_with_crds(bins: &Binaries, namespace: &str, objects: &[serde_yaml_ng::Value]) -> String {
    let plane = ControlPlane::start(bins, Options { controllers: false, ..Default::default() }).await.unwrap();
    for crd in std::fs::read_dir(repo("tests/data/crds")).unwrap() {
        let path = crd.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            plane.kubectl(&["apply", "--server-side", "--validate=false", "-f", &path.display().to_string()]).unwrap();
        }
    }
    plane.kubectl(&["wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"]).unwrap();
    if plane.kubectl(&["get", "namespace", namespace]).is_err() {
        plane.kubectl(&["create", "namespace", namespace]).unwrap();
    }
    grants_policy_stored(&plane, objects);
    let file = std::env::temp_dir().join(format!("coloc-dry-run-{namespace}-{}.yaml", std::process::id()));
    let all: Vec<String> = objects.iter().map(|o| serde_yaml_ng::to_string(o).unwrap()).collect();
    std::fs::write(&file, all.join("---\n")).unwrap();
    let out = server_dry_run(&plane, &file).unwrap_or_else(|e| panic!("the API server refused the install: {e:#}"));
    let _ = std::fs::remove_file(&file);
    out
}

/// The policy that gives the install's grants their owner (manifests/grants), stored for
/// real: a dry run stores none, and the grants are refused without it.
fn grants_policy_stored(plane: &ControlPlane, objects: &[serde_yaml_ng::Value]) {
    let policy: Vec<String> = objects
        .iter()
        .filter(|o| o["kind"].as_str().is_some_and(|k| k.starts_with("MutatingAdmissionPolicy")))
        .filter(|o| o["metadata"]["name"] == "coloc-extender-grants")
        .map(|o| serde_yaml_ng::to_string(o).unwrap())
        .collect();
    assert_eq!(policy.len(), 2, "the grants policy and its binding");
    let file = std::env::temp_dir().join(format!("coloc-grants-{}.yaml", std::process::id()));
    std::fs::write(&file, policy.join("---\n")).unwrap();
    let path = file.display().to_string();
    // The dry run's field manager, so that it finds no conflict on them.
    plane
        .kubectl(&["apply", "--server-side", "--validate=false", "--field-manager=coloc-install-check", "-f", &path])
        .unwrap();
    let _ = std::fs::remove_file(&file);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

/// Every kubectl this machine has (`KUBE_BIN_DIR`'s and each on `PATH`), by the
/// kustomize it carries: a kustomize before v5.8 reads a replacement's target name as a
/// literal where a later one reads a pattern, so an install that relied on patterns would
/// silently name another namespace with the older tool.
fn every_kubectl(bins: &Binaries) -> Vec<(String, PathBuf)> {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join("kubectl")).filter(|k| k.is_file()).collect::<Vec<_>>())
        .unwrap_or_default();
    let mut found: Vec<(String, PathBuf)> = Vec::new();
    for kubectl in std::iter::once(bins.kubectl.clone()).chain(on_path) {
        let Ok(out) = std::process::Command::new(&kubectl).args(["version", "--client", "-o", "json"]).output() else {
            continue;
        };
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let kustomize = v["kustomizeVersion"].as_str().unwrap_or("unknown").to_string();
        if !found.iter().any(|(k, _)| *k == kustomize) {
            found.push((kustomize, kubectl));
        }
    }
    found
}

/// The same install whichever supported kubectl renders it: every documented overlay, for
/// coloc-system and for another namespace, is the same text with each kubectl found (the
/// machine image's v1.32, kustomize v5.5, beside v1.36's v5.8), and puts every object and
/// every identity in the install namespace with each.
#[test]
fn every_supported_kubectl_renders_the_same_install() {
    let bins = match Binaries::find() {
        Ok(b) => b,
        Err(why) => return println!("install_manifest: skipped: {why}"),
    };
    let kubectls = every_kubectl(&bins);
    if kubectls.len() < 2 {
        println!("install_manifest: one kustomize only ({kubectls:?}): nothing to compare the render with");
    }
    for (dir, namespace) in [("manifests", "coloc-system"), ("deploy/overlay-example", OVERLAY_NAMESPACE)] {
        let mut first: Option<(String, String)> = None;
        for (kustomize, kubectl) in &kubectls {
            let out = std::process::Command::new(kubectl)
                .args(["kustomize", &repo(dir).display().to_string()])
                .output()
                .expect("kubectl runs");
            assert!(
                out.status.success(),
                "{kustomize}: kubectl kustomize {dir}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let text = String::from_utf8(out.stdout).unwrap();
            let objects: Vec<serde_yaml_ng::Value> = serde_yaml_ng::Deserializer::from_str(&text)
                .map(|d| serde::Deserialize::deserialize(d).unwrap())
                .filter(|v: &serde_yaml_ng::Value| !v.is_null())
                .collect();
            if dir != "manifests" {
                every_object_in(&objects, namespace);
            }
            let identities = format!("system:serviceaccount:{namespace}:coloc-extender");
            for p in objects.iter().filter(|o| o["kind"] == "ValidatingAdmissionPolicy") {
                let spec = serde_yaml_ng::to_string(&p["spec"]).unwrap();
                let names_identities = spec.contains("system:serviceaccount:");
                assert!(
                    !names_identities || spec.contains(&identities),
                    "{kustomize}: {:?} names no identity of {namespace}",
                    p["metadata"]["name"]
                );
            }
            match &first {
                None => first = Some((kustomize.clone(), text)),
                Some((k, t)) => assert!(t == &text, "{dir}: kustomize {kustomize} renders otherwise than {k}"),
            }
        }
    }
}

/// The other documented way: the namespace set in the base (its NamespaceTransformer, in
/// a copy of manifests/), every component enabled from an overlay that sets none.
#[test]
fn a_namespace_set_in_the_base_with_components_from_an_overlay_reaches_every_object() {
    let bins = match Binaries::find() {
        Ok(b) => b,
        Err(why) => return println!("install_manifest: skipped: {why}"),
    };
    let root = std::env::temp_dir().join(format!("coloc-base-namespace-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    copy_dir(&repo("manifests"), &root.join("manifests"));
    let base = root.join("manifests/kustomization.yaml");
    let text = std::fs::read_to_string(&base).unwrap();
    let set = "      name: install-namespace\n      namespace: ";
    let edited = text.replacen(&format!("{set}coloc-system"), &format!("{set}team-infra"), 1);
    assert_ne!(edited, text, "the base sets its namespace in one place");
    std::fs::write(&base, edited).unwrap();
    let overlay = std::fs::read_to_string(repo("deploy/overlay-example/kustomization.yaml"))
        .unwrap()
        .replace(&format!("namespace: {OVERLAY_NAMESPACE}\n"), "")
        .replace("../../manifests", "../manifests");
    std::fs::create_dir_all(root.join("overlay")).unwrap();
    std::fs::write(root.join("overlay/kustomization.yaml"), overlay).unwrap();
    let objects = render_path(&bins, &root.join("overlay"));
    let _ = std::fs::remove_dir_all(&root);
    every_object_in(&objects, "team-infra");
}

/// The advanced topology, as docs/deploy.md §4 makes it: in a copy of manifests/, the
/// standalone component (with cert-manager) instead of the scheduler of its own and the
/// routing; an overlay puts it in kube-system (where the cluster's own kube-scheduler's
/// configuration names its Service), drops the Namespace object (kube-system is not the
/// install's to delete) and enables requeue, wake and monitoring. The components reach the
/// standalone extender; a real API server accepts every object.
#[tokio::test]
async fn the_standalone_topology_in_kube_system_renders_right_and_is_accepted() {
    let bins = match Binaries::find() {
        Ok(b) => b,
        Err(why) => return println!("install_manifest: skipped: {why}"),
    };
    let root = std::env::temp_dir().join(format!("coloc-standalone-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    copy_dir(&repo("manifests"), &root.join("manifests"));
    let base = root.join("manifests/kustomization.yaml");
    let text = std::fs::read_to_string(&base).unwrap();
    let edited = text.replacen("  - scheduler-of-its-own\n", "  - standalone\n  - cert-manager\n", 1).replacen(
        "  - routing\n",
        "",
        1,
    );
    assert_eq!(edited.matches("  - standalone\n").count(), 1, "the topology is one line of the base");
    std::fs::write(&base, edited).unwrap();
    let overlay = "namespace: kube-system\n\
        resources: [../manifests]\n\
        components: [../manifests/requeue, ../manifests/wake, ../manifests/monitoring]\n\
        transformers: [../manifests/install-namespace]\n\
        images: [{name: coloc-extender, newName: registry.example/coloc-extender, newTag: \"0.1.0\"}]\n\
        patches:\n\
        - patch: |-\n    $patch: delete\n    apiVersion: v1\n    kind: Namespace\n    metadata:\n      name: coloc-system\n";
    std::fs::create_dir_all(root.join("overlay")).unwrap();
    std::fs::write(root.join("overlay/kustomization.yaml"), overlay).unwrap();
    let objects = render_path(&bins, &root.join("overlay"));
    let _ = std::fs::remove_dir_all(&root);
    assert!(!objects.iter().any(|o| o["kind"] == "Namespace"), "kube-system is not the install's to ship");
    for (kind, name) in
        [("Deployment", "coloc-extender"), ("Service", "coloc-extender"), ("Certificate", "coloc-extender-serving")]
    {
        named(&objects, kind, name);
    }
    let own = ["Deployment", "MutatingAdmissionPolicy"]
        .map(|kind| objects.iter().any(|o| o["kind"] == kind && o["metadata"]["name"] == "coloc-scheduler"));
    assert_eq!(own, [false, false], "no scheduler of its own, no routing");
    every_object_in(&objects, "kube-system");
    the_topology_follows(&objects, "coloc-extender");
    let out = dry_run_with_crds(&bins, "kube-system", &objects).await;
    for kind in [
        "deployment.apps/coloc-extender",
        "service/coloc-extender",
        "certificate.cert-manager.io/coloc-extender-serving",
    ] {
        assert!(out.contains(&format!("{kind} serverside-applied (server dry run)")), "{kind} missing from:\n{out}");
    }
}

/// The README's way to turn a component on without choosing a namespace: an overlay of
/// manifests/ that sets none, listing install-namespace; everything stays in coloc-system.
#[test]
fn components_from_an_overlay_that_sets_no_namespace_stay_in_coloc_system() {
    let bins = match Binaries::find() {
        Ok(b) => b,
        Err(why) => return println!("install_manifest: skipped: {why}"),
    };
    let root = std::env::temp_dir().join(format!("coloc-default-namespace-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    copy_dir(&repo("manifests"), &root.join("manifests"));
    let overlay = "resources: [../manifests]\n\
        components: [../manifests/requeue, ../manifests/wake, ../manifests/monitoring]\n\
        transformers: [../manifests/install-namespace]\n\
        images: [{name: coloc-extender, newName: registry.example/coloc-extender, newTag: \"0.1.0\"}]\n";
    std::fs::create_dir_all(root.join("overlay")).unwrap();
    std::fs::write(root.join("overlay/kustomization.yaml"), overlay).unwrap();
    let objects = render_path(&bins, &root.join("overlay"));
    let _ = std::fs::remove_dir_all(&root);
    every_object_in(&objects, "coloc-system");
    the_topology_follows(&objects, "coloc-scheduler");
}
