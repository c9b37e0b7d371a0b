//! Request handlers: HTTP only. Admission, one decision on the right thread, metrics and
//! the response; what a verb decides and in how many rounds is `service`'s.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Extension, Request as HttpRequest, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use super::admission::{Admitted, Gate};
use super::error::ApiError;
use super::state::{AppState, ViewSource};
use super::workers::{Cancel, Workers};
use super::{memory, metrics};
use crate::decide::{Context, Detail, Requeue};
use crate::pipeline::{self, Answer, Verb};
use crate::service::Promises;
use crate::wire::{Bounds, DecodeError};

/// What the verb routes share besides `AppState`: admission budgets and the workers.
pub struct Verbs {
    pub gate: Gate,
    pub workers: Workers,
}

pub async fn filter(state: State<AppState>, verbs: Extension<Arc<Verbs>>, req: HttpRequest) -> Response {
    handle(Verb::Filter, state, verbs, req).await
}

pub async fn prioritize(state: State<AppState>, verbs: Extension<Arc<Verbs>>, req: HttpRequest) -> Response {
    handle(Verb::Prioritize, state, verbs, req).await
}

pub async fn preempt(state: State<AppState>, verbs: Extension<Arc<Verbs>>, req: HttpRequest) -> Response {
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
            let req = AdmittedRequest { body, admitted: Arc::new(admitted), cancel };
            let decide = |promises| decide(verb, &state, &verbs, &req, promises);
            state.service.answer(verb, state.is_ready(), decide).await
        }
        Err(e) => Err(e),
    };
    guard.disarm();
    if body_bytes >= memory::TRIM_AFTER_BODY_BYTES {
        verbs.workers.detach(memory::trim);
    }
    let seconds = || started.elapsed().as_secs_f64();
    match result {
        Ok(answer) => {
            log_answer(verb, &answer, started);
            metrics::record_decisions(verb.as_str(), &answer.explanations);
            metrics::record_request(verb.as_str(), 200, "ok", seconds());
            super::observe::answered(&state, verb, &answer);
            ([(header::CONTENT_TYPE, "application/json")], answer.body).into_response()
        }
        Err(e) => {
            metrics::record_request(verb.as_str(), e.status.as_u16(), e.code, seconds());
            metrics::warn_refusal(verb.as_str(), e.status.as_u16(), e.code, &e.message);
            e.into_response()
        }
    }
}

/// An admitted request: its body, what it holds, and its cancel flag.
struct AdmittedRequest {
    body: Bytes,
    admitted: Arc<Admitted>,
    cancel: Cancel,
}

/// One decision, counting the room `promises` hold at its time. Large bodies are decided on
/// the workers, which keep the request's admission until they finish and stop early once
/// it is cancelled.
async fn decide(
    verb: Verb,
    state: &AppState,
    verbs: &Verbs,
    req: &AdmittedRequest,
    promises: Option<Arc<Promises>>,
) -> Result<Answer, ApiError> {
    let policy = state.policy.load_full();
    let view = state.view.load();
    let clock = state.clock.clone();
    let inline = req.body.len() <= state.limits.inline_decode_bytes;
    let view_expected = state.view_source != ViewSource::None;
    let caps = state.limits.caps;
    let (body, admitted, cancel) = (req.body.clone(), req.admitted.clone(), req.cancel.clone());
    let requeue = if state.requeue.copies_possible() { Requeue::enabled() } else { Requeue::disabled() };
    let work = move || {
        let _admitted = admitted;
        let now = clock();
        let promised = promises.map(|p| p.current(now)).unwrap_or_default();
        // Routine lines (each node's score) are only ever logged at debug: built only then.
        let detail = if tracing::enabled!(tracing::Level::DEBUG) { Detail::Routine } else { Detail::Decisions };
        let ctx = Context {
            policy: &policy,
            view: view.as_deref(),
            view_expected,
            now,
            requeue,
            detail,
            promised: &promised,
        };
        // Errors are rendered here: a message quoting a huge input is clipped off the I/O threads.
        let answer = pipeline::answer_within(verb, &body, &ctx, &Bounds::new(caps, Some(cancel.flag())));
        if matches!(answer, Err(DecodeError::Cancelled)) {
            metrics::record_abandoned(verb.as_str());
        }
        answer.map_err(ApiError::from)
    };
    if inline {
        return work();
    }
    verbs.workers.run(work).await.unwrap_or_else(|| {
        Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "the decision workers are gone"))
    })
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
        let summary = crate::wire::request::clip(&answer.summary, 512);
        tracing::info!(verb = verb.as_str(), pod = %answer.pod, micros, %summary, %reasons, "answered");
    }
}

/// "unresolvable/placement×57 victim/chosen×3": the request's non-routine decisions,
/// counted by verdict and reason (at most `SHOWN` kinds named).
fn reason_counts(explanations: &[crate::decide::Explanation]) -> String {
    const SHOWN: usize = 12;
    let counts = crate::decide::count_reasons(explanations);
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
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], metrics::handle().render()).into_response()
}
