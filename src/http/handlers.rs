//! Request handlers: HTTP only. Admission, the request handed to `service`, metrics and
//! the response; what a verb decides, where and in how many rounds is `service`'s.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Extension, Request as HttpRequest, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use super::admission::Gate;
use super::error::ApiError;
use super::state::{AppState, ViewSource};
use super::{memory, prometheus};
use crate::pipeline::{Answer, Verb};
use crate::service::{Answered, Request, Sources};
use crate::workers::{Cancel, Workers};

/// What the verb routes share besides `AppState`: admission budgets and the workers.
pub struct Verbs {
    pub gate: Gate,
    pub workers: Arc<Workers>,
}

pub async fn post_filter(state: State<AppState>, verbs: Extension<Arc<Verbs>>, req: HttpRequest) -> Response {
    handle(Verb::Filter, state, verbs, req).await
}

pub async fn post_prioritize(state: State<AppState>, verbs: Extension<Arc<Verbs>>, req: HttpRequest) -> Response {
    handle(Verb::Prioritize, state, verbs, req).await
}

pub async fn post_preempt(state: State<AppState>, verbs: Extension<Arc<Verbs>>, req: HttpRequest) -> Response {
    handle(Verb::Preempt, state, verbs, req).await
}

async fn handle(
    verb: Verb,
    State(state): State<AppState>,
    Extension(verbs): Extension<Arc<Verbs>>,
    req: HttpRequest,
) -> Response {
    let started = Instant::now();
    // Dropped with this future (timeout, client gone): work still running stops.
    let cancel = Cancel::default();
    let guard = cancel.on_drop();
    let (parts, body) = req.into_parts();
    let mut body_bytes = 0;
    let result = match verbs.gate.admit(&parts.headers, body, &state.limits).await {
        Ok((body, admitted)) => {
            body_bytes = body.len();
            let on_workers = body.len() > state.limits.inline_decode_bytes;
            let request = Request {
                verb,
                body,
                sources: Sources {
                    policy: state.policy.clone(),
                    view: state.view.clone(),
                    view_expected: state.view_source != ViewSource::None,
                    clock: state.clock.clone(),
                    requeue: state.requeue.copies_possible(),
                    caps: state.limits.caps,
                    workers: verbs.workers.clone(),
                },
                on_workers,
                hold: Arc::new(admitted),
                cancel,
                ready: state.is_ready(),
            };
            state.service.respond(request).await.map_err(ApiError::from)
        }
        Err(e) => Err(e),
    };
    guard.disarm();
    if body_bytes >= memory::TRIM_AFTER_BODY_BYTES {
        verbs.workers.detach(memory::trim);
    }
    let seconds = || started.elapsed().as_secs_f64();
    match result {
        Ok(Answered { sent, later }) => {
            prometheus::record_request(verb.as_str(), 200, "ok", seconds());
            match later {
                None => explain(&state, verb, &sent, started),
                // Shadow mode: kube-scheduler's own answer goes now; the policy's decision
                // is explained and counted once made.
                Some(later) => {
                    let (state, pod) = (state.clone(), sent.pod.clone());
                    tokio::spawn(async move {
                        match later.decision.await {
                            Ok(decided) => explain(&state, verb, &decided, started),
                            Err(e) => tracing::warn!(verb = verb.as_str(), %pod, error = %e,
                                "shadow: the policy's decision could not be made after kube-scheduler's own answer"),
                        }
                        drop(later.slot);
                    });
                }
            }
            ([(header::CONTENT_TYPE, "application/json")], sent.body).into_response()
        }
        Err(e) => {
            prometheus::record_request(verb.as_str(), e.status.as_u16(), e.code, seconds());
            prometheus::warn_refusal(verb.as_str(), e.status.as_u16(), e.code, &e.message);
            e.into_response()
        }
    }
}

/// A decision made: logged, counted, kept for `/decisions` and told (`observe`).
fn explain(state: &AppState, verb: Verb, answer: &Answer, started: Instant) {
    log_answer(verb, answer, started);
    prometheus::record_decisions(verb.as_str(), &answer.explanations);
    super::observe::answered(state, verb, answer);
}

fn log_answer(verb: Verb, answer: &Answer, started: Instant) {
    let micros = started.elapsed().as_micros() as u64;
    // Every decision line is debug; info gets at most one line per request, and only for
    // a request whose answer rejects, changes or degrades something. kube-scheduler calls
    // per pod from its one scheduling thread: a line per node or victim would cost more
    // than the answer (a hostile body of 266k unknown UIDs once made 266k lines).
    if tracing::enabled!(tracing::Level::DEBUG) {
        for e in &answer.explanations {
            tracing::debug!(verb = verb.as_str(), pod = %answer.pod, node = e.node.as_deref(), victim = e.pod.as_deref(), verdict = e.verdict.as_str(), reason = e.code.as_str(), detail = %e.detail, "decision");
        }
    }
    if answer.explanations.iter().all(|e| e.is_routine()) {
        tracing::debug!(verb = verb.as_str(), pod = %answer.pod, micros, summary = %answer.summary, "answered");
    } else if tracing::enabled!(tracing::Level::INFO) {
        let reasons = reason_counts(&answer.explanations);
        // maxCandidates may name many nodes in a preempt summary: one line stays short.
        let summary = crate::wire::error::clip(&answer.summary, 512);
        tracing::info!(verb = verb.as_str(), pod = %answer.pod, micros, %summary, %reasons, "answered");
    }
}

/// "unresolvable/placement×57 victim/chosen×3": the request's non-routine decisions,
/// counted by verdict and reason (at most `SHOWN` kinds named).
fn reason_counts(explanations: &[crate::explanation::Explanation]) -> String {
    const SHOWN: usize = 12;
    let counts = crate::explanation::count_reasons(explanations);
    let mut out: Vec<String> = counts
        .iter()
        .take(SHOWN)
        .map(|((verdict, code), n)| if *n > 1 { format!("{verdict}/{code}×{n}") } else { format!("{verdict}/{code}") })
        .collect();
    if counts.len() > SHOWN {
        out.push(format!("… {} more kinds", counts.len() - SHOWN));
    }
    out.join(" ")
}

pub async fn healthz() -> &'static str {
    "ok"
}

pub async fn readyz(State(state): State<AppState>) -> Response {
    let detail = state.readiness_detail();
    if state.is_ready() {
        (StatusCode::OK, format!("ready\n{detail}\n")).into_response()
    } else {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_ready",
            format!("cluster view not usable yet; {}", detail.replace('\n', "; ")),
        )
        .into_response()
    }
}

pub async fn metrics_text(State(state): State<AppState>) -> Response {
    super::observe::view_freshness(&state);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], prometheus::handle().render()).into_response()
}
