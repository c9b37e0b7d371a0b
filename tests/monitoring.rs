//! The dashboard and the alerts in manifests/monitoring read metrics the extender really
//! exports: every `coloc_*` name they use appears in a real /metrics output. Its own test
//! binary: the metrics recorder is process-global.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use coloc_extender::cluster::{snapshot, View, ViewCell};
use coloc_extender::http::state::{AppState, ViewSource};
use coloc_extender::http::{admin_router, router};
use coloc_extender::policy::Policy;
use http_body_util::BodyExt;
use tower::ServiceExt;

fn repo(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// Every `coloc_…` identifier in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("coloc_") {
        let tail = &rest[i..];
        let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        names.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

async fn call(app: &Router, req: Request<Body>) -> String {
    let resp = app.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    String::from_utf8(resp.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
}

#[tokio::test]
async fn every_metric_the_dashboard_and_the_alerts_use_is_exported() {
    let round = "tests/fixtures/payloads/r1-nodecache-false";
    let policy = Policy::builtin_default().enforced();
    let view = Arc::new(ViewCell::default());
    view.publish(View::build(
        snapshot::parse(repo(&format!("{round}/0037-preempt.snapshot.json")).as_bytes()).unwrap(),
        &policy,
    ));
    let state = AppState::new(policy, view, ViewSource::Snapshot);
    let (app, admin) = (router(state.clone(), "", decision_workers()), admin_router(state));
    // What a replica with --kube registers at start, once the recorder is installed
    // (requeue's and the old guards' series).
    coloc_extender::requeue::kube::register_metrics();
    let default = Policy::builtin_default().enforced();
    coloc_extender::http::prometheus::record_policy(default.mode.as_str(), &default.fingerprint());
    let _requeue_on = coloc_extender::requeue::availability::Availability::new(true);
    // ... and with TLS (--tls-cert, --client-ca): the certificates loaded, one client's
    // handshake.
    coloc_extender::tls::register_metrics();
    // serve --check-routing's gauge, as its first check sets it.
    coloc_extender::routing::probe::record(&coloc_extender::routing::check::Verdict::InEffect);
    let dir = std::env::temp_dir().join(format!("coloc-monitoring-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = rcgen::generate_simple_self_signed(vec!["coloc-ca".into()]).unwrap();
    let serving = rcgen::generate_simple_self_signed(vec!["coloc-extender".into()]).unwrap();
    std::fs::write(dir.join("ca.crt"), ca.cert.pem()).unwrap();
    std::fs::write(dir.join("tls.crt"), serving.cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), serving.signing_key.serialize_pem()).unwrap();
    let files = coloc_extender::tls::TlsFiles {
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
        client_ca: Some(dir.join("ca.crt")),
    };
    files.load().expect("the test certificates load");
    coloc_extender::tls::record_client_certificate(ca.cert.der());
    // online-gpu (0041) takes bare pods requeue cannot bring back (it is off here): a
    // victim of last resort, counted.
    for (verb, file) in [
        ("filter", "0001-filter.json"),
        ("prioritize", "0002-prioritize.json"),
        ("preempt", "0037-preempt.json"),
        ("preempt", "0041-preempt.json"),
    ] {
        let req = Request::post(format!("/{verb}"))
            .header("content-type", "application/json")
            .body(Body::from(repo(&format!("{round}/{file}"))))
            .unwrap();
        call(&app, req).await;
    }
    let exported = call(&admin, Request::get("/metrics").body(Body::empty()).unwrap()).await;
    assert!(exported.contains(r#"coloc_bare_lost_total{reason="requeue_unavailable"}"#), "{exported}");
    let exported: BTreeSet<&str> =
        exported.lines().filter(|l| !l.starts_with('#')).filter_map(|l| l.split(['{', ' ']).next()).collect();

    let dashboard = repo("manifests/monitoring/coloc-extender-dashboard.json");
    let json: serde_json::Value = serde_json::from_str(&dashboard).expect("the dashboard is JSON");
    assert!(!json["panels"].as_array().unwrap().is_empty());
    let rules = repo("manifests/monitoring/prometheusrule.yaml");
    let yaml: serde_yaml_ng::Value = serde_yaml_ng::from_str(&rules).unwrap();
    assert_eq!(yaml["kind"], serde_yaml_ng::Value::from("PrometheusRule"));
    let alerts: Vec<&str> = yaml["spec"]["groups"][0]["rules"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|r| r["alert"].as_str().unwrap())
        .collect();
    assert_eq!(
        alerts,
        [
            "ColocExtenderErrors",
            "ColocExtenderSlow",
            "ColocExtenderViewStale",
            "ColocExtenderPolicyReloadFailed",
            "ColocExtenderRoutingNotInEffect",
            "ColocExtenderPolicyFallback",
            "ColocExtenderRequeueGivenUp",
            "ColocExtenderRequeueUnavailable",
            "ColocExtenderRequeueCopyNotRecorded",
            "ColocExtenderGuardsLeft",
            "ColocExtenderNoReadyReplica",
            "ColocExtenderFailingClosed",
            "ColocSchedulerNoReadyReplica",
            "ColocExtenderTLSHandshakesFailing",
            "ColocExtenderCertificateExpiresSoon"
        ]
    );

    for (what, text) in [("dashboard", &dashboard), ("alerts", &rules)] {
        let used = metric_names(text);
        assert!(used.len() >= 4, "{what} uses {used:?}");
        let missing: Vec<&String> = used.iter().filter(|n| !exported.contains(n.as_str())).collect();
        assert!(
            missing.is_empty(),
            "{what} uses metrics /metrics does not export: {missing:?}\nexported: {exported:?}"
        );
    }
    // What the issue asks the dashboard to show.
    for needed in [
        "coloc_request_duration_seconds_bucket",
        "coloc_requests_total",
        "coloc_decisions_total",
        "coloc_view_stale",
        "coloc_requeue_replacements_total",
        "coloc_shadow_diffs_total",
    ] {
        assert!(dashboard.contains(needed), "the dashboard lacks {needed}");
    }

    let component: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&repo("manifests/monitoring/kustomization.yaml")).unwrap();
    assert_eq!(component["kind"], serde_yaml_ng::Value::from("Component"));
    let base: serde_yaml_ng::Value = serde_yaml_ng::from_str(&repo("manifests/kustomization.yaml")).unwrap();
    let on = serde_yaml_ng::to_string(&base["components"]).unwrap();
    assert!(!on.contains("monitoring"), "monitoring is opt-in: {on}");
}

#[test]
fn the_pod_monitor_scrapes_the_admin_port_the_no_replica_alert_reads() {
    let monitor: serde_yaml_ng::Value = serde_yaml_ng::from_str(&repo("manifests/monitoring/podmonitor.yaml")).unwrap();
    assert_eq!(monitor["kind"], serde_yaml_ng::Value::from("PodMonitor"));
    assert_eq!(monitor["spec"]["podMetricsEndpoints"][0]["port"], serde_yaml_ng::Value::from("admin"));
    for deployment in ["scheduler-of-its-own/deployment.yaml", "standalone/deployment.yaml"] {
        let text = repo(&format!("manifests/{deployment}"));
        assert!(text.contains("name: admin"), "{deployment} names its admin port");
    }
    // Prometheus Operator names the job namespace/name: the alert matches any namespace.
    let job = format!("job=~\".+/{}\"", monitor["metadata"]["name"].as_str().unwrap());
    assert!(repo("manifests/monitoring/prometheusrule.yaml").contains(&job), "the alert reads {job}");
    let component = repo("manifests/monitoring/kustomization.yaml");
    assert!(component.contains("- podmonitor.yaml"));
}

/// Every metric the code records, with its type, as `metrics::counter!("name"` and the
/// like spell it in src/.
fn recorded_metrics() -> BTreeSet<(String, String)> {
    let mut found = BTreeSet::new();
    let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for kind in ["counter", "gauge", "histogram"] {
                let mut rest = text.as_str();
                while let Some(i) = rest.find(&format!("{kind}!(")) {
                    rest = &rest[i + kind.len() + 2..];
                    let call = rest.trim_start().strip_prefix('"').unwrap_or("");
                    if let Some(name) = call.split('"').next().filter(|n| n.starts_with("coloc_")) {
                        found.insert((name.to_string(), kind.to_string()));
                    }
                }
            }
        }
    }
    found
}

#[test]
fn the_metric_reference_lists_every_metric_the_code_records_and_nothing_else() {
    let doc = repo("docs/metrics.md");
    let rows: BTreeSet<(String, String)> = doc
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let name = cells.get(1)?.strip_prefix("`coloc_")?.strip_suffix('`')?;
            Some((format!("coloc_{name}"), cells.get(2)?.to_string()))
        })
        .collect();
    let recorded = recorded_metrics();
    assert!(recorded.len() >= 30, "{recorded:?}");
    let missing: Vec<_> = recorded.difference(&rows).collect();
    let stale: Vec<_> = rows.difference(&recorded).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/metrics.md lacks {missing:?} and lists {stale:?} the code does not record"
    );
}

/// The decision workers `serve` starts beside the router.
fn decision_workers() -> std::sync::Arc<coloc_extender::workers::Workers> {
    std::sync::Arc::new(coloc_extender::workers::Workers::new(1).unwrap())
}
