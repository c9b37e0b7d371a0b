//! The Prometheus recorder and what the service records in it (through the `metrics`
//! crate's macros). The recorder is process-global (the `metrics` crate's design), so it
//! is installed once and shared by every router.

use std::sync::OnceLock;

use metrics_exporter_prometheus::Matcher::Full;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::explanation::Explanation;

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

pub fn handle() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets(&[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0])
                .and_then(|b| {
                    b.set_buckets_for_metric(Full("coloc_preempt_wait_seconds".into()), super::waits::WAIT_BUCKETS)
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Full("coloc_preempt_wait_error_seconds".into()),
                        super::waits::ERROR_BUCKETS,
                    )
                })
                .expect("static buckets are valid")
                .build_recorder();
            let handle = recorder.handle();
            // Another recorder may already be installed (e.g. by an embedding program);
            // the handle still renders ours.
            let _ = metrics::set_global_recorder(recorder);
            describe();
            // Histogram samples queue up until drained into their buckets; without a
            // scrape they would grow without bound (found by the soak run), so drain
            // them on a timer.
            let upkeep = handle.clone();
            let _ = std::thread::Builder::new().name("metrics-upkeep".into()).spawn(move || loop {
                std::thread::sleep(std::time::Duration::from_secs(5));
                upkeep.run_upkeep();
            });
            handle
        })
        .clone()
}

fn describe() {
    metrics::describe_gauge!("coloc_build_info", "Always 1, labelled with the running release's version");
    metrics::gauge!("coloc_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    metrics::describe_histogram!("coloc_request_duration_seconds", "Time to answer a request, by verb");
    metrics::describe_counter!(
        "coloc_requests_total",
        "Requests by verb, HTTP status and code (ok or the error's code)"
    );
    metrics::describe_counter!(
        "coloc_requests_abandoned_total",
        "Decisions stopped early because their request timed out or its client went away"
    );
    metrics::describe_gauge!(
        "coloc_requests_in_flight",
        "Verb requests admitted and not yet finished (work that outlives a timeout included)"
    );
    metrics::describe_counter!("coloc_decisions_total", "Decisions by verb, verdict and reason code");
    metrics::describe_counter!("coloc_gang_decisions_total", "Decisions about gangs by verb, verdict, reason code and where the gang is declared (native, coscheduling, volcano, kueue, labels)");
    metrics::describe_counter!("coloc_pdb_violations_total", "PDB violations in preempt answers");
    metrics::describe_counter!("coloc_policy_reloads_total", "Policy reloads by result");
    metrics::describe_gauge!(
        "coloc_policy_info",
        "1 for the policy in force, labelled with its mode and fingerprint (check-policy prints it); 0 for those it replaced"
    );
    metrics::describe_counter!(
        "coloc_tls_handshake_failures_total",
        "Failed TLS handshakes on the verb port, by reason"
    );
    metrics::describe_gauge!(
        "coloc_tls_serving_cert_expiry_timestamp_seconds",
        "notAfter of the serving certificate loaded, Unix seconds"
    );
    metrics::describe_gauge!(
        "coloc_tls_client_ca_expiry_timestamp_seconds",
        "notAfter of the first client CA to expire, Unix seconds"
    );
    metrics::describe_gauge!(
        "coloc_tls_client_cert_expiry_timestamp_seconds",
        "notAfter of the certificate each client (by subject CN) presented at its last handshake, Unix seconds"
    );
    metrics::describe_gauge!("coloc_policy_fallback", "1 while the replica serves the built-in default policy in shadow mode because its policy file was invalid at start");
    metrics::describe_gauge!("coloc_view_ready", "1 when the cluster view has synced");
    metrics::describe_gauge!("coloc_view_age_seconds", "Seconds since the cluster view was last rebuilt");
    metrics::describe_gauge!(
        "coloc_view_stale",
        "1 when a watch has failed long enough that decisions run without the view"
    );
    metrics::describe_gauge!(
        "coloc_view_watch_failing_seconds",
        "Seconds the longest-failing watch has been failing (0: all well)"
    );
    metrics::describe_counter!("coloc_requeue_replacements_total", "Requeue replacements stored, by outcome");
    metrics::describe_counter!("coloc_requeue_released_total", "Requeue replacements released (original gone)");
    metrics::describe_counter!(
        "coloc_requeue_cleaned_total",
        "Requeue replacements deleted (original not evicted in time)"
    );
    metrics::describe_counter!(
        "coloc_requeue_guards_total",
        "Requeue guards (finalizer and label on a bare pod), by change: added, removed"
    );
    metrics::describe_counter!("coloc_requeue_events_total", "Events requeue recorded (one per released replacement)");
    metrics::describe_counter!(
        "coloc_events_total",
        "Events on preemptors by result: written, failed, throttled, dropped"
    );
    metrics::describe_counter!(
        "coloc_admin_requests_total",
        "Requests for /metrics and /decisions on the admin port, by path and outcome: allowed, unauthenticated, forbidden, unavailable (the API server could not say), open (--admin-auth none)"
    );
    metrics::describe_counter!(
        "coloc_admin_reviews_total",
        "TokenReviews (token) and SubjectAccessReviews (access) the admin port asked the API server for: the requests its cache did not answer"
    );
    metrics::describe_counter!(
        "coloc_shadow_diffs_total",
        "Shadow mode: what the policy would have changed, by verb and kind"
    );
    metrics::describe_counter!(
        "coloc_shadow_decisions_skipped_total",
        "Shadow mode: requests answered (kube-scheduler's own answer) whose policy decision was not made because the background decisions were all busy, by verb"
    );
    metrics::describe_counter!("coloc_discarded_cpu_seconds_total", "Run time x CPU request of the victims preempt answers evict, by victim class (shadow mode: kube-scheduler's own choice)");
    metrics::describe_counter!(
        "coloc_shadow_discarded_cpu_seconds_total",
        "Shadow mode: run time x CPU request the policy's preempt answers would have evicted, by victim class"
    );
    metrics::describe_histogram!(
        "coloc_preempt_wait_seconds",
        "Enforced preempt answers: how long until every victim was gone, as expected and as observed"
    );
    metrics::describe_histogram!(
        "coloc_preempt_wait_error_seconds",
        "Enforced preempt answers: observed minus expected wait until every victim was gone, by what the estimate came from"
    );
    metrics::describe_counter!(
        "coloc_preempt_wait_unobserved_total",
        "Enforced preempt answers whose victims were not all seen gone within 30 minutes (evicted elsewhere, or not at all)"
    );
    // Series alerts and dashboards read exist from the start (rate() of a missing series
    // is no data, not zero).
    for verb in ["filter", "prioritize", "preempt"] {
        for kind in crate::shadow::DiffKind::ALL {
            metrics::counter!("coloc_shadow_diffs_total", "verb" => verb, "kind" => kind.as_str()).increment(0);
        }
        metrics::counter!("coloc_shadow_decisions_skipped_total", "verb" => verb).increment(0);
    }
    record_policy_fallback(false);
    for result in ["ok", "error", "unreadable"] {
        metrics::counter!("coloc_policy_reloads_total", "result" => result).increment(0);
    }
    for outcome in ["created", "existed", "failed"] {
        metrics::counter!("coloc_requeue_replacements_total", "outcome" => outcome).increment(0);
    }
    // Each verb's answers as ColocExtenderErrors and ColocExtenderSlow read them: the ok
    // count, every 5xx the extender can answer (`service::Unanswered`, `admission::overloaded`,
    // `time_limit`, a decode stopped by `Cancelled`), and the latency histogram. A 5xx
    // series born at its first error would hide that error from rate().
    for verb in ["filter", "prioritize", "preempt"] {
        // Registering it is enough: it is rendered with empty buckets.
        let _ = metrics::histogram!("coloc_request_duration_seconds", "verb" => verb);
        for (status, code) in ANSWERS_ALERTED_ON {
            metrics::counter!("coloc_requests_total", "verb" => verb, "status" => status.to_string(), "code" => code)
                .increment(0);
        }
    }
    metrics::counter!("coloc_requeue_released_total").increment(0);
    metrics::counter!("coloc_requeue_cleaned_total").increment(0);
    for result in ["written", "failed", "throttled", "dropped"] {
        metrics::counter!("coloc_events_total", "result" => result).increment(0);
    }
}

/// (status, code) of the answers `coloc_requests_total` counts from the start.
const ANSWERS_ALERTED_ON: [(u16, &str); 5] =
    [(200, "ok"), (500, "internal"), (503, "overloaded"), (503, "timeout"), (503, "cancelled")];

/// Run time a preempt answer discards, by victim class: what the sent answer evicts
/// (`coloc_discarded_cpu_seconds_total`; in shadow mode kube-scheduler's own choice), and
/// in shadow mode what the policy's answer would have (`coloc_shadow_discarded_…`).
pub fn record_discarded(answer: &crate::pipeline::Answer) {
    let count = |name: &'static str, d: &crate::discarded::Discarded| {
        for (class, seconds) in &d.cpu_seconds {
            metrics::counter!(name, "class" => class.clone()).increment(seconds.round() as u64);
        }
    };
    if let Some(d) = answer.discarded() {
        count("coloc_discarded_cpu_seconds_total", d);
    }
    if let Some(d) = answer.would_discard() {
        count("coloc_shadow_discarded_cpu_seconds_total", d);
    }
}

pub fn record_shadow_diffs(verb: &'static str, diffs: &crate::shadow::Diffs) {
    for (kind, n) in &diffs.0 {
        metrics::counter!("coloc_shadow_diffs_total", "verb" => verb, "kind" => kind.as_str()).increment(*n);
    }
}

/// An answered request; `code` is "ok" or the error's code.
pub fn record_request(verb: &'static str, status: u16, code: &'static str, seconds: f64) {
    metrics::histogram!("coloc_request_duration_seconds", "verb" => verb).record(seconds);
    metrics::counter!("coloc_requests_total", "verb" => verb, "status" => status.to_string(), "code" => code)
        .increment(1);
}

/// Counts every decision except per-node "kept"/"score" lines, which would only
/// restate the request size.
pub fn record_decisions(verb: &'static str, explanations: &[Explanation]) {
    // One registry lookup per (verdict, reason), not per decision.
    let counts = crate::explanation::count_reasons(explanations);
    for ((verdict, reason), n) in counts {
        metrics::counter!("coloc_decisions_total", "verb" => verb, "verdict" => verdict, "reason" => reason)
            .increment(n);
    }
    // Gang decisions once more with the gang's source (bounded: five sources).
    for e in explanations.iter().filter(|e| e.gang_source.is_some()) {
        let source = e.gang_source.unwrap_or_default();
        metrics::counter!("coloc_gang_decisions_total", "verb" => verb, "verdict" => e.verdict.as_str(), "reason" => e.code.as_str(), "source" => source).increment(1);
    }
}

/// `result`: ok, error (invalid file), unreadable (missing, a directory, no permission).
pub fn record_policy_reload(result: &'static str) {
    metrics::counter!("coloc_policy_reloads_total", "result" => result).increment(1);
}

/// The policy in force (its mode and `Policy::fingerprint`): `coloc_policy_info{mode,
/// hash}` is 1 for it, and 0 for the one it replaced (a series cannot be removed).
pub fn record_policy(mode: &'static str, fingerprint: &str) {
    static LAST: std::sync::Mutex<Option<(&'static str, String)>> = std::sync::Mutex::new(None);
    let now = (mode, fingerprint.to_string());
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((mode, hash)) = last.take().filter(|l| *l != now) {
        metrics::gauge!("coloc_policy_info", "mode" => mode, "hash" => hash).set(0.0);
    }
    metrics::gauge!("coloc_policy_info", "mode" => now.0, "hash" => now.1.clone()).set(1.0);
    *last = Some(now);
}

/// Whether the replica serves the built-in default policy in shadow mode because its
/// policy file was invalid when it started.
pub fn record_policy_fallback(on: bool) {
    metrics::gauge!("coloc_policy_fallback").set(if on { 1.0 } else { 0.0 });
}

/// A request for an admin path; `outcome` is allowed, unauthenticated, forbidden,
/// unavailable or open.
pub fn record_admin_request(path: &'static str, outcome: &'static str) {
    metrics::counter!("coloc_admin_requests_total", "path" => path, "outcome" => outcome).increment(1);
}

/// A request refused by the middleware (timeout): counted like any answer, and logged.
pub fn record_refusal(path: &str, status: u16, code: &'static str, message: &str) {
    let verb = ["filter", "prioritize", "preempt"].into_iter().find(|v| path.ends_with(v)).unwrap_or("other");
    metrics::counter!("coloc_requests_total", "verb" => verb, "status" => status.to_string(), "code" => code)
        .increment(1);
    warn_refusal(verb, status, code, message);
}

/// Logs a refused request at WARN, at most once a second, with how many were not logged.
pub fn warn_refusal(verb: &str, status: u16, code: &str, message: &str) {
    use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
    static LAST: AtomicI64 = AtomicI64::new(0);
    static SUPPRESSED: AtomicU64 = AtomicU64::new(0);
    let now = crate::clock::system_now();
    let last = LAST.load(Ordering::Relaxed);
    if now > last && LAST.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
        let suppressed = SUPPRESSED.swap(0, Ordering::Relaxed);
        tracing::warn!(verb, status, code, suppressed, error = %message, "request refused");
    } else {
        SUPPRESSED.fetch_add(1, Ordering::Relaxed);
    }
}
