//! The per-request logic of the verbs, with no HTTP in it: how many decisions a preempt
//! needs (the view catching up with kube-scheduler's proposal), and which pod a failed
//! preempt leaves to wake. The HTTP edge (`http::handlers`) reads the request, hands this
//! a way to decide once, and writes the answer. A preempt answers from the decision alone:
//! requeue copies evicted pods on its own (`requeue::controller`), never in the answer path.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use crate::cluster::ViewCell;
use crate::decide::promised::PromisedRoom;
use crate::model::Timestamp;
use crate::pipeline::Answer;
use crate::wake::Reason as WakeReason;

/// How long a preempt waits for the view to catch up with kube-scheduler's cache. The
/// watch trails it by milliseconds; this bounds what a view that never catches up (a pod
/// deleted since kube-scheduler looked) costs the scheduling thread.
pub const VIEW_CATCH_UP: Duration = Duration::from_millis(250);

/// A preempt decided on a view that has caught up with what kube-scheduler proposed.
/// `decide` makes one decision; `watched` is the view fed by watches, which may trail
/// kube-scheduler's cache (`None` for a snapshot or no view: nothing will catch up). A
/// pod bound a moment ago may be missing from the view: deciding without it would drop
/// its node as "fits without evictions" and pick a worse one (a gang member's node).
pub async fn preempt<D, F, E>(decide: D, watched: Option<&ViewCell>) -> Result<Answer, E>
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

/// How long an answer's promise holds its room without the view showing the nomination:
/// the watch shows it within milliseconds; a preemption kube-scheduler gave up (its
/// victims not all gone) releases the room after this.
pub const PROMISE_HOLDS: Timestamp = 5;

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
