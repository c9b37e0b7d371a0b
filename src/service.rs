//! The per-request logic of the verbs, with no HTTP in it: one room for a verb's answer
//! and the state a preempt flow carries between requests. `Service::respond` takes a
//! `Request` the HTTP edge (`http::handlers`) has read and admitted, decides it (inline,
//! or on the `Workers` for a large body): for a preempt, again while the view catches up
//! with kube-scheduler's proposal, counting the room earlier answers promised
//! (`Promises`), remembering what this one promises, and asking for a wake when it
//! answers in doubt. The edge writes the answer. A preempt answers from the decision
//! alone: requeue copies evicted pods on its own, in pods of its own, never in the answer
//! path. In shadow mode the answer is kube-scheduler's own, sent at once; the policy's
//! decision, which only explains and counts, is made after it, in the background
//! (`Answered::later`), at most `SHADOW_DECISIONS` at a time per verb.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;

use crate::cluster::ViewCell;
use crate::decide::promised::PromisedRoom;
use crate::decide::{Context, Detail, Requeue};
use crate::model::Timestamp;
use crate::pipeline::{self, Answer, Verb};
use crate::policy::{Mode, Policy};
use crate::wake::kube::Waker;
use crate::wake::Reason as WakeReason;
use crate::wire::error::DecodeError;
use crate::wire::{Bounds, Caps};
use crate::workers::{Cancel, Workers};

/// One admitted request: what kube-scheduler sent, how it is held, and what its
/// decisions read (`Sources`, the same for every request).
pub struct Request {
    pub verb: Verb,
    pub body: bytes::Bytes,
    pub sources: Sources,
    /// The body is too large to decide on the I/O threads.
    pub on_workers: bool,
    /// What the request holds (its admission), kept until its last decision ends.
    pub hold: Arc<dyn Send + Sync>,
    pub cancel: Cancel,
    /// The extender was ready (a preempt answered while not is woken later).
    pub ready: bool,
}

/// What decisions read beside a request: the edge fills it from its state.
#[derive(Clone)]
pub struct Sources {
    pub policy: Arc<ArcSwap<Policy>>,
    pub view: Arc<ViewCell>,
    /// A view is configured, so its absence is a fault.
    pub view_expected: bool,
    pub clock: Arc<dyn Fn() -> Timestamp + Send + Sync>,
    /// Copies can be stored: bare victims of `requeue` classes come back.
    pub requeue: bool,
    pub caps: Caps,
    /// Where a body too large to decide on the I/O threads is decided, and shadow mode's
    /// decisions are made in the background.
    pub workers: Arc<Workers>,
}

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum Unanswered {
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error("the decision workers are gone")]
    WorkersGone,
}

/// How long a preempt waits for the view to catch up with kube-scheduler's cache. The
/// watch trails it by milliseconds; this bounds what a view that never catches up (a pod
/// deleted since kube-scheduler looked) costs the scheduling thread.
pub const VIEW_CATCH_UP: Duration = Duration::from_millis(250);

/// How long an answer's promise holds its room without the view showing the nomination:
/// the watch shows it within milliseconds; a preemption kube-scheduler gave up (its
/// victims not all gone) releases the room after this.
pub const PROMISE_HOLDS: Timestamp = 5;

/// Shadow mode's decisions made at once in the background, per verb (a pod's filter comes
/// just before its preempt: the cheap verbs must not take the preempt's places). A request
/// arriving while its verb's are all busy goes unexplained
/// (`coloc_shadow_decisions_skipped_total`), so that a storm never queues work behind the
/// answers.
pub const SHADOW_DECISIONS: usize = 2;

/// An answer to send, and in shadow mode the policy's decision still being made.
pub struct Answered {
    pub sent: Answer,
    /// The policy's decision, to explain and count once made (shadow mode).
    pub later: Option<Later>,
}

/// The policy's decision on an answer already sent. It holds one of the shadow slots
/// until dropped, so that whoever explains the decision does so inside the slot and
/// `Service::settle` waits for that too.
pub struct Later {
    pub decision: std::pin::Pin<Box<dyn Future<Output = Result<Answer, Unanswered>> + Send>>,
    pub slot: tokio::sync::OwnedSemaphorePermit,
}

/// What the verbs' answers share from one request to the next.
pub struct Service {
    decider: Decider,
    /// Wakes pods kube-scheduler parked after a preempt answered in doubt (`--wake`).
    waker: Option<Arc<Waker>>,
    /// Shadow decisions that may run now, by verb (`Verb::index`).
    shadow_slots: [Arc<tokio::sync::Semaphore>; 3],
}

impl Default for Service {
    fn default() -> Self {
        Service::new(None, None)
    }
}

impl Service {
    pub fn new(watched: Option<Arc<ViewCell>>, waker: Option<Arc<Waker>>) -> Service {
        let slots = || Arc::new(tokio::sync::Semaphore::new(SHADOW_DECISIONS));
        let shadow_slots = [slots(), slots(), slots()];
        Service { decider: Decider { watched, promises: Arc::default() }, waker, shadow_slots }
    }

    /// `request`'s answer.
    pub async fn respond(&self, request: Request) -> Result<Answered, Unanswered> {
        if request.sources.policy.load().mode == Mode::Shadow {
            return self.respond_in_shadow(request).await;
        }
        let sent = self.decider.decide(&request, Run::Answer).await;
        if let (Some(waker), Some(reason)) = (&self.waker, wake_reason(sent.as_ref().ok(), request.ready)) {
            waker.request(reason);
        }
        if let (Some(waker), Some(at)) = (&self.waker, sent.as_ref().ok().and_then(|a| a.retry_at)) {
            waker.request_at(at);
        }
        Ok(Answered { sent: sent?, later: None })
    }

    /// kube-scheduler's own answer now (`pipeline::echo`, on the workers for a large body),
    /// and the policy's decision in the background.
    async fn respond_in_shadow(&self, request: Request) -> Result<Answered, Unanswered> {
        let Sources { clock, caps, view, .. } = request.sources.clone();
        let (verb, body, cancel, hold, view) =
            (request.verb, request.body.clone(), request.cancel.clone(), request.hold.clone(), view.load());
        let echo = move || {
            let _hold = hold;
            let bounds = Bounds::new(caps, Some(cancel.flag()));
            Ok(pipeline::echo(verb, &body, &bounds, clock(), view.as_deref())?)
        };
        let sent = run_as(&request, Run::Answer, echo).await;
        if request.verb == Verb::Preempt {
            // Never in doubt (it is kube-scheduler's own), unless it could not be made.
            if let (Some(waker), Err(_)) = (&self.waker, &sent) {
                waker.request(WakeReason::PreemptFailed);
            }
        }
        let sent = sent?;
        let Ok(slot) = self.shadow_slots[request.verb.index()].clone().try_acquire_owned() else {
            metrics::counter!("coloc_shadow_decisions_skipped_total", "verb" => request.verb.as_str()).increment(1);
            return Ok(Answered { sent, later: None });
        };
        let decider = self.decider.clone();
        // The answer is sent: its admission is not held by what follows.
        let request = Request { hold: Arc::new(()), ..request };
        let decision = async move { decider.decide(&request, Run::Background).await };
        Ok(Answered { sent, later: Some(Later { decision: Box::pin(decision), slot }) })
    }

    /// Waits, at most `within`, for the shadow decisions still being made and explained
    /// (shutdown: what was decided is logged and counted before the process ends).
    pub async fn settle(&self, within: Duration) {
        let all = async {
            for slots in self.shadow_slots.iter() {
                let _ = slots.acquire_many(SHADOW_DECISIONS as u32).await;
            }
        };
        if tokio::time::timeout(within, all).await.is_err() {
            tracing::warn!(?within, "shadow decisions still running at shutdown: left unexplained");
        }
    }
}

/// What a decision reads beside its request, shared by the answers and shadow mode's
/// decisions in the background.
#[derive(Clone)]
struct Decider {
    /// The view fed by watches, which may trail kube-scheduler's cache (`None`: a
    /// snapshot or no view, which nothing will catch up).
    watched: Option<Arc<ViewCell>>,
    promises: Arc<Promises>,
}

impl Decider {
    /// The policy's decision on `request`: a preempt's on a view caught up with
    /// kube-scheduler's proposal, counting and then recording the room answers promise.
    async fn decide(&self, request: &Request, run: Run) -> Result<Answer, Unanswered> {
        if request.verb != Verb::Preempt {
            return decide_once(request, None, run).await;
        }
        let decide = || decide_once(request, Some(self.promises.clone()), run);
        let answer = decide_caught_up(decide, self.watched.as_deref()).await;
        if let Ok(answer) = &answer {
            self.promises.record(answer);
        }
        answer
    }
}

/// Where a decision runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Run {
    /// kube-scheduler waits for it.
    Answer,
    /// Nobody does (shadow mode's decisions).
    Background,
}

/// Runs `work` where `run` and the request's size say: an answer inline, or on the
/// workers for a large body; a background decision on the housekeeping thread.
async fn run_as<T: Send + 'static>(
    request: &Request,
    run: Run,
    work: impl FnOnce() -> Result<T, Unanswered> + Send + 'static,
) -> Result<T, Unanswered> {
    let gone = || Err(Unanswered::WorkersGone);
    match run {
        Run::Background => request.sources.workers.run_background(work).await.unwrap_or_else(gone),
        Run::Answer if request.on_workers => request.sources.workers.run(work).await.unwrap_or_else(gone),
        Run::Answer => work(),
    }
}

/// One decision of `request` on the view as it is now, counting the room `promises` hold
/// at the decision's own time (a preempt's; `None` for the other verbs).
/// A large body is decided on the workers, which keep the request's hold until they
/// finish and stop early once it is cancelled.
async fn decide_once(request: &Request, promises: Option<Arc<Promises>>, run: Run) -> Result<Answer, Unanswered> {
    let Sources { policy, view, view_expected, clock, requeue, caps, .. } = request.sources.clone();
    let (policy, view) = (policy.load_full(), view.load());
    let (verb, body, hold, cancel) = (request.verb, request.body.clone(), request.hold.clone(), request.cancel.clone());
    let work = move || {
        let _hold = hold;
        let now = clock();
        let promised: Vec<PromisedRoom> = promises.map(|p| p.current(now)).unwrap_or_default();
        // Routine lines (each node's score) are only ever logged at debug: built only then.
        let detail = if tracing::enabled!(tracing::Level::DEBUG) { Detail::Routine } else { Detail::Decisions };
        let ctx = Context {
            detail,
            promised: &promised,
            requeue: Requeue { enabled: requeue },
            ..Context::new(&policy, view.as_deref(), now).with_view_expected(view_expected)
        };
        // Errors are rendered here: a message quoting a huge input is clipped off the I/O threads.
        let answer = pipeline::answer(verb, &body, &ctx, &Bounds::new(caps, Some(cancel.flag())));
        if matches!(answer, Err(DecodeError::Cancelled)) {
            // Counted here: the request that gave it up is gone.
            metrics::counter!("coloc_requests_abandoned_total", "verb" => verb.as_str()).increment(1);
        }
        Ok(answer?)
    };
    run_as(request, run, work).await
}

/// A preempt decided on a view that has caught up with what kube-scheduler proposed.
/// `decide` makes one decision; `watched` is the view fed by watches (`None`: nothing will
/// catch up). A pod bound a moment ago may be missing from the view: deciding without it
/// would drop its node as "fits without evictions" and pick a worse one (a gang member's
/// node).
pub async fn decide_caught_up<D, F, E>(decide: D, watched: Option<&ViewCell>) -> Result<Answer, E>
where
    D: Fn() -> F,
    F: Future<Output = Result<Answer, E>>,
{
    let Some(view) = watched else { return decide().await };
    let deadline = tokio::time::Instant::now() + VIEW_CATCH_UP;
    loop {
        let mut published = view.subscribe();
        let answer = decide().await?;
        if !answer.view_behind() {
            return Ok(answer);
        }
        if !matches!(tokio::time::timeout_at(deadline, published.changed()).await, Ok(Ok(()))) {
            tracing::debug!(pod = %answer.pod, "the view did not catch up with kube-scheduler's proposal in time: answering as decided");
            return Ok(answer);
        }
    }
}

/// A preempt answered in doubt leaves its pod parked in kube-scheduler: why it should be
/// woken once the cause has cleared (`wake`), if it should. `answered` is the answer, or
/// `None` when the request failed; `ready` whether the extender was ready.
pub fn wake_reason(answered: Option<&Answer>, ready: bool) -> Option<WakeReason> {
    match answered {
        None => Some(WakeReason::PreemptFailed),
        Some(_) if !ready => Some(WakeReason::ViewNotReady),
        Some(_) => None,
    }
}

/// The rooms recent preempt answers promised (`PromisedRoom`), one per preemptor and node,
/// read by the next decisions. Held for `PROMISE_HOLDS` at most; the decision itself stops
/// counting one as soon as the view shows it.
#[derive(Default)]
pub struct Promises(Mutex<Vec<PromisedRoom>>);

impl Promises {
    /// Remembers what `answer` promised (nothing unless it was enforced and gave nodes); a
    /// preemptor answered again holds only its latest answer's room.
    pub fn record(&self, answer: &Answer) {
        let Some(promised) = answer.preempt.as_ref().map(|p| &p.promised).filter(|p| !p.is_empty()) else {
            return;
        };
        let mut held = self.lock();
        held.retain(|p| p.pod.uid != answer.pod_uid);
        held.extend(promised.iter().cloned());
    }

    /// The promises still holding at `now`.
    pub fn current(&self, now: Timestamp) -> Vec<PromisedRoom> {
        let mut held = self.lock();
        held.retain(|p| now - p.at <= PROMISE_HOLDS);
        held.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<PromisedRoom>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}
