//! The monitoring component as shipped, on a real Prometheus server: it scrapes the
//! extender's admin port, the requeue controller's and kube-scheduler's secure port as the
//! shipped PodMonitors say
//! (path, scheme, TLS, the bearer token of the ServiceAccount each credentials Secret is
//! for, the operator's job label) and evaluates the shipped PrometheusRule. Every target
//! is up only through the shipped RBAC; every series an alert reads is there from the
//! first scrape; all alerts are quiet; deleting requeue's RBAC binding, a real fault,
//! puts ColocExtenderRequeueUnavailable pending and leaves the others quiet.

mod prometheus;

use std::time::Duration;

use coloc_testbed::scheduler::{ClientTls, ExtenderEntry};
use coloc_testbed::{Binaries, Scheduler};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::bed::{repo, QPS};
use crate::{Bed, Case, Mode};
use prometheus::Prometheus;

pub fn cases() -> Vec<Case> {
    vec![Case {
        name: "monitoring_prometheus_scrapes_both_as_shipped_and_the_requeue_alert_goes_pending_on_a_real_fault",
        run: |b, m| Box::pin(scraped_as_shipped(b, m)),
    }]
}

const HALF_MINUTE: Duration = Duration::from_secs(30);
const VERBS: [&str; 3] = ["filter", "prioritize", "preempt"];
/// The reasons a copy is given up for (`requeue/kube.rs`): each its own series.
/// The alert the fault puts pending.
const FAULT_ALERT: &str = "ColocExtenderRequeueUnavailable";

/// What a series reads at the first scrape.
#[derive(Clone, Copy, Debug)]
enum Reads {
    Zero,
    One,
    /// A Unix time over a day ahead (a certificate's notAfter).
    Later,
}

/// One series an alert reads: its metric, labels it has, what it reads.
struct Want {
    metric: &'static str,
    labels: Vec<(&'static str, &'static str)>,
    reads: Reads,
}

fn want(metric: &'static str, labels: &[(&'static str, &'static str)], reads: Reads) -> Want {
    Want { metric, labels: labels.to_vec(), reads }
}

/// The series the 14 alerts read, as a replica that has answered nothing yet exports them
/// (serving TLS, with --requeue) and its requeue controller. Absent by design: each client
/// certificate's expiry until that client's first handshake (a 0 would read as expired).
/// kube-scheduler's `scheduler_schedule_attempts_total` (ColocExtenderFailingClosed) is
/// its own: it appears at the first scheduling attempt.
fn at_start() -> Vec<Want> {
    let mut w = Vec::new();
    for verb in VERBS {
        for (status, code) in [("500", "internal"), ("503", "overloaded"), ("503", "timeout"), ("503", "cancelled")] {
            w.push(want("coloc_requests_total", &[("verb", verb), ("status", status), ("code", code)], Reads::Zero));
        }
        w.push(want("coloc_request_duration_seconds_bucket", &[("verb", verb), ("le", "+Inf")], Reads::Zero));
    }
    w.push(want("coloc_view_stale", &[], Reads::Zero));
    w.push(want("coloc_view_ready", &[], Reads::One));
    for result in ["error", "unreadable"] {
        w.push(want("coloc_policy_reloads_total", &[("result", result)], Reads::Zero));
    }
    w.push(want("coloc_policy_fallback", &[], Reads::Zero));
    for reason in coloc_extender::requeue::kube::GIVEN_UP_REASONS {
        w.push(want("coloc_requeue_given_up_total", &[("reason", reason)], Reads::Zero));
    }
    for reason in ["no_record", "other_name", "spec_differs"] {
        w.push(want("coloc_requeue_unrecorded_copies_total", &[("reason", reason)], Reads::Zero));
    }
    w.push(want("coloc_requeue_available", &[], Reads::One));
    w.push(want("coloc_requeue_guards_left", &[], Reads::Zero));
    for reason in coloc_extender::tls::HANDSHAKE_FAILURES {
        w.push(want("coloc_tls_handshake_failures_total", &[("reason", reason)], Reads::Zero));
    }
    w.push(want("coloc_tls_serving_cert_expiry_timestamp_seconds", &[], Reads::Later));
    w.push(want("coloc_tls_client_ca_expiry_timestamp_seconds", &[], Reads::Later));
    w
}

/// The status of a GET on the admin port without a token.
async fn status_without_token(port: u16, path: &str) -> anyhow::Result<u16> {
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    conn.write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").as_bytes()).await?;
    let mut reply = String::new();
    conn.read_to_string(&mut reply).await?;
    reply.get(9..12).and_then(|s| s.parse().ok()).ok_or_else(|| anyhow::anyhow!("no status: {reply}"))
}

/// A token of `namespace/name` from the TokenRequest API, in a file, once RBAC lets it
/// get /metrics (the authorizer follows bindings through a watch).
async fn token_file(bed: &Bed, (namespace, name): &(String, String)) -> anyhow::Result<std::path::PathBuf> {
    let token = bed.plane.kubectl(&["-n", namespace, "create", "token", name, "--duration", "1h"])?;
    let path = bed.plane.dir().join(format!("{name}.token"));
    std::fs::write(&path, token.trim())?;
    let user = format!("system:serviceaccount:{namespace}:{name}");
    coloc_testbed::wait::until(HALF_MINUTE, &format!("{user} may get /metrics"), || async {
        match bed.plane.kubectl(&["auth", "can-i", "get", "/metrics", "--as", &user]) {
            Ok(yes) if yes.trim() == "yes" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await?;
    Ok(path)
}

/// Every series of `at_start` is scraped, each reading what it should.
async fn exported_from_start(prom: &Prometheus) -> anyhow::Result<()> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs_f64();
    let mut wrong = Vec::new();
    for w in at_start() {
        let series = prom.series(w.metric).await.map_err(anyhow::Error::msg)?;
        let found: Vec<f64> = series
            .iter()
            .filter(|(labels, _)| w.labels.iter().all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v)))
            .map(|(_, value)| *value)
            .collect();
        let right = !found.is_empty()
            && found.iter().all(|v| match w.reads {
                Reads::Zero => *v == 0.0,
                Reads::One => *v == 1.0,
                Reads::Later => *v > now + 86_400.0,
            });
        if !right {
            wrong.push(format!("{}{:?} should read {:?}, found {found:?}", w.metric, w.labels, w.reads));
        }
    }
    anyhow::ensure!(wrong.is_empty(), "at the first scrape:\n{}", wrong.join("\n"));
    Ok(())
}

/// Waits until every shipped alert is loaded and evaluates without error, `pending` (if
/// any) pending or firing and every other alert inactive.
/// How many alerts manifests/monitoring ships: Prometheus must have loaded every one.
fn shipped_alerts() -> Result<usize, String> {
    let rules = std::fs::read_to_string(repo("manifests/monitoring/prometheusrule.yaml")).map_err(|e| e.to_string())?;
    Ok(rules.lines().filter(|l| l.trim_start().starts_with("- alert:")).count())
}

async fn until_alerts(prom: &Prometheus, pending: Option<&str>, what: &str) -> anyhow::Result<()> {
    coloc_testbed::wait::until(HALF_MINUTE, what, || async {
        let rules = prom.rules().await?;
        let alerts = prom.alerts().await?;
        let broken: Vec<_> = rules.iter().filter(|(_, (_, health))| health != "ok").collect();
        let expected: Vec<&str> = pending.into_iter().collect();
        let active: Vec<&str> = alerts.keys().map(String::as_str).collect();
        let states_agree =
            rules.iter().all(|(name, (state, _))| (state == "inactive") != (Some(name.as_str()) == pending));
        if rules.len() == shipped_alerts()? && broken.is_empty() && active == expected && states_agree {
            Ok(())
        } else {
            Err(format!("rules {rules:?}; alerts {alerts:?}"))
        }
    })
    .await
}

async fn scraped_as_shipped(bins: Binaries, mode: Mode) -> anyhow::Result<()> {
    let server = match prometheus::binary() {
        Ok(p) => p,
        Err(why) => {
            println!("monitoring: skipped: {why}");
            return Ok(());
        }
    };
    let mut bed = Bed::up(bins, mode).await?;
    for f in [
        "clusterrole-diagnosis.yaml",
        "monitoring/extender-metrics-rbac.yaml",
        "monitoring/scheduler-metrics-rbac.yaml",
    ] {
        bed.plane.apply(&repo(&format!("manifests/{f}")))?;
    }
    let extender_job = prometheus::job("podmonitor.yaml", "extender-metrics-rbac.yaml")?;
    let requeue_job = prometheus::job("podmonitor-requeue.yaml", "extender-metrics-rbac.yaml")?;
    let scheduler_job = prometheus::job("podmonitor-scheduler.yaml", "scheduler-metrics-rbac.yaml")?;
    anyhow::ensure!(
        extender_job.port == "admin" && requeue_job.port == "admin" && scheduler_job.port == "https",
        "{extender_job:?} {requeue_job:?} {scheduler_job:?}"
    );
    let extender_token = token_file(&bed, &extender_job.account).await?;
    let requeue_token = token_file(&bed, &requeue_job.account).await?;
    let scheduler_token = token_file(&bed, &scheduler_job.account).await?;

    // The extender as the Deployment runs it (TLS with client certificates, the admin port
    // behind tokens) with the requeue component. The test bed's CA and its certificate (no
    // usage restriction) serve both ends of the hop: the hop is not what this case shows.
    let ca = bed.plane.dir().join("ca.crt");
    let (cert, key) = bed.plane.serving_pair();
    let arg = |p: &std::path::Path| p.display().to_string();
    let (ca_arg, cert_arg, key_arg) = (arg(&ca), arg(&cert), arg(&key));
    let tls = ["--tls-cert", &cert_arg, "--tls-key", &key_arg, "--client-ca", &ca_arg];
    let e = bed.extender(&[&["--requeue", "--events", "--admin-auth", "kube"][..], &tls[..]].concat()).await?;
    let admin_port = bed.extenders[e].admin_port;
    let requeue_port = bed.extenders[e].requeue.as_ref().map(|r| r.admin_port).unwrap_or_default();
    let mut entry =
        ExtenderEntry::all_verbs(&format!("https://127.0.0.1:{}", bed.extenders[e].port), mode.node_cache_capable());
    entry.tls = Some(ClientTls { cert_file: cert, key_file: key, ca_file: ca, server_name: "localhost".into() });
    // kube-scheduler as a pod of coloc-scheduler serves its secure port: scrapes reviewed
    // with the API server as its ServiceAccount (what in-cluster configuration gives the
    // pod; here its kubeconfig), only the probes' paths open (kube-scheduler's default).
    let reviewer = arg(&bed.plane.scheduler_kubeconfig);
    let delegated = [
        "--authentication-kubeconfig",
        &reviewer,
        "--authorization-kubeconfig",
        &reviewer,
        "--authorization-always-allow-paths=/healthz,/readyz,/livez",
    ];
    let scheduler = Scheduler::start_with(&bed.plane, "coloc-scheduler", &[entry], QPS, &delegated).await?;
    let scheduler_port = scheduler.port;
    // Without a token neither port serves /metrics: a target up below is the token's doing.
    anyhow::ensure!(status_without_token(admin_port, "/metrics").await? == 401, "the admin port wants a token");
    anyhow::ensure!(status_without_token(requeue_port, "/metrics").await? == 401, "the controller's wants one too");
    coloc_testbed::wait::until(HALF_MINUTE, "kube-scheduler refusing /metrics without a token", || async {
        match scheduler.metrics().await {
            Err(e) if format!("{e:?}").contains("403") => Ok(()),
            Err(e) => Err(format!("{e:?}")),
            Ok(text) => Err(format!("served: {}", text.get(..200).unwrap_or(&text))),
        }
    })
    .await?;
    bed.scheduler = Some(scheduler);

    let jobs = [
        (extender_job, format!("127.0.0.1:{admin_port}"), extender_token),
        (requeue_job, format!("127.0.0.1:{requeue_port}"), requeue_token),
        (scheduler_job, format!("127.0.0.1:{scheduler_port}"), scheduler_token),
    ];
    let names: Vec<String> = jobs.iter().map(|(j, _, _)| j.name.clone()).collect();
    let prom = Prometheus::start(&server, bed.plane.dir(), &jobs).await?;
    let logs =
        |e: anyhow::Error| anyhow::anyhow!("{e:#}\n--- prometheus ---\n{}\n{}", prom.proc.log_tail(3000), bed.logs());

    coloc_testbed::wait::until(HALF_MINUTE, "every target up", || async {
        let targets = prom.targets().await?;
        let up = names.iter().all(|n| targets.get(n).is_some_and(|(health, _)| health == "up"));
        up.then_some(()).ok_or(format!("{targets:?}"))
    })
    .await
    .map_err(logs)?;
    exported_from_start(&prom).await.map_err(logs)?;
    until_alerts(&prom, None, "every alert quiet").await.map_err(logs)?;

    bed.plane.kubectl(&["delete", "clusterrolebinding", "coloc-extender-requeue"])?;
    until_alerts(&prom, Some(FAULT_ALERT), &format!("{FAULT_ALERT} pending, the rest quiet")).await.map_err(logs)?;
    bed.finish()
}
