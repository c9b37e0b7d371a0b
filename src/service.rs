//! The per-request logic of the verbs, with no HTTP in it: how many decisions a preempt
//! needs (the view catching up with kube-scheduler's proposal; rounds of "decide, then
//! store the replacements the answer needs"), and which pod a failed preempt leaves to
//! wake. The HTTP edge (`http::handlers`) reads the request, hands this a way to decide
//! once, and writes the answer.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::cluster::ViewCell;
use crate::pipeline::Answer;
use crate::requeue::RequeueIntent;
use crate::wake::Reason as WakeReason;

/// The pods (UID → why) whose replacement could not be stored: decided again, they are
/// spared.
pub type Failed = Arc<BTreeMap<String, String>>;

/// How long a preempt waits for the view to catch up with kube-scheduler's cache. The
/// watch trails it by milliseconds; this bounds what a view that never catches up (a pod
/// deleted since kube-scheduler looked) costs the scheduling thread.
pub const VIEW_CATCH_UP: Duration = Duration::from_millis(250);

/// Rounds of "decide, then store the replacements it needs" before requeue is given up.
pub const REQUEUE_ROUNDS: usize = 3;

/// Where replacements are stored (the API server, through `requeue::kube::Requeuer`).
pub trait ReplacementStore {
    /// A preempt call arrived: background writes make way.
    fn preempt_seen(&self);
    /// Stores every replacement within `budget`; the ones that failed, UID → why.
    fn store_all(
        &self,
        intents: &[RequeueIntent],
        budget: Duration,
    ) -> impl Future<Output = BTreeMap<String, String>> + Send;
}

impl ReplacementStore for crate::requeue::kube::Requeuer {
    fn preempt_seen(&self) {
        self.pace.preempt_seen();
    }

    fn store_all(
        &self,
        intents: &[RequeueIntent],
        budget: Duration,
    ) -> impl Future<Output = BTreeMap<String, String>> + Send {
        crate::requeue::kube::Requeuer::store_all(self, intents, budget)
    }
}

/// A preempt: decided with requeue when a store is given, else with requeue off. `decide`
/// makes one decision with the requeue state it is given (`None`: requeue off; `Some`: on,
/// sparing the failed pods); `watched` is the view fed by watches, which may trail
/// kube-scheduler's cache (`None` for a snapshot or no view: nothing will catch up).
pub async fn preempt<D, F, E, S>(
    decide: D,
    watched: Option<&ViewCell>,
    store: Option<(&S, Duration)>,
) -> Result<Answer, E>
where
    D: Fn(Option<Failed>) -> F,
    F: Future<Output = Result<Answer, E>>,
    S: ReplacementStore,
{
    match store {
        Some((store, budget)) => preempt_with_requeue(&decide, watched, store, budget).await,
        None => caught_up(&decide, watched, None).await,
    }
}

/// A preempt decided on a view that has caught up with what kube-scheduler proposed. A
/// pod bound a moment ago may be missing from the view: deciding without it would drop
/// its node as "fits without evictions" and pick a worse one (a gang member's node).
async fn caught_up<D, F, E>(decide: &D, watched: Option<&ViewCell>, requeue: Option<Failed>) -> Result<Answer, E>
where
    D: Fn(Option<Failed>) -> F,
    F: Future<Output = Result<Answer, E>>,
{
    let Some(view) = watched else { return decide(requeue).await };
    let deadline = tokio::time::Instant::now() + VIEW_CATCH_UP;
    loop {
        let mut published = view.subscribe();
        let answer = decide(requeue.clone()).await?;
        if !answer.view_behind() {
            return Ok(answer);
        }
        if !matches!(tokio::time::timeout_at(deadline, published.changed()).await, Ok(Ok(()))) {
            tracing::debug!(pod = %answer.pod, "the view did not catch up with kube-scheduler's proposal in time: answering as decided");
            return Ok(answer);
        }
    }
}

/// A bare victim is answered only once its replacement is stored: decide, store the
/// replacements the answer needs (at once), and if any could not be stored decide again
/// with those pods spared. If replacements keep failing, answer with requeue off.
async fn preempt_with_requeue<D, F, E, S>(
    decide: &D,
    watched: Option<&ViewCell>,
    store: &S,
    budget: Duration,
) -> Result<Answer, E>
where
    D: Fn(Option<Failed>) -> F,
    F: Future<Output = Result<Answer, E>>,
    S: ReplacementStore,
{
    store.preempt_seen();
    let deadline = tokio::time::Instant::now() + budget;
    let mut failed = BTreeMap::new();
    for _ in 0..REQUEUE_ROUNDS {
        let answer = caught_up(decide, watched, Some(Arc::new(failed.clone()))).await?;
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let newly = if answer.requeues().is_empty() {
            BTreeMap::new()
        } else if left.is_zero() {
            answer
                .requeues()
                .iter()
                .map(|i| (i.uid.clone(), "no time left in the requeue budget".to_string()))
                .collect()
        } else {
            store.store_all(answer.requeues(), left).await
        };
        if newly.is_empty() {
            return Ok(answer);
        }
        failed.extend(newly);
    }
    tracing::warn!(
        failed = failed.len(),
        "requeue replacements keep failing: answering with requeue off for this preempt"
    );
    let mut answer = caught_up(decide, watched, None).await?;
    answer.preempt.get_or_insert_with(Default::default).requeue_gave_up = true;
    Ok(answer)
}

/// A preempt answered in doubt leaves its pod parked in kube-scheduler: why it should be
/// woken once the cause has cleared (`wake`), if it should. `answered` is the answer, or
/// `None` when the request failed; `ready` whether the extender was ready.
pub fn wake_reason(answered: Option<&Answer>, ready: bool) -> Option<WakeReason> {
    match answered {
        None => Some(WakeReason::PreemptFailed),
        Some(_) if !ready => Some(WakeReason::ViewNotReady),
        Some(answer) if answer.requeue_gave_up() => Some(WakeReason::RequeueUnavailable),
        Some(_) => None,
    }
}
