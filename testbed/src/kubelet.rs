//! A kubelet stand-in for every node at once. There is no container runtime; what the
//! control plane and the extender observe of kubelets is reproduced:
//! - a bound pod becomes Running and Ready, with a start time;
//! - a pod being deleted runs on (phase and containers unchanged) through its grace period,
//!   until its `deletionTimestamp` (the time of the delete plus `deletionGracePeriodSeconds`,
//!   which the API server took from `terminationGracePeriodSeconds` unless the deleter gave
//!   another), or earlier: if it completes meanwhile, if annotated [`EXITS_AFTER_SECONDS`],
//!   or if [`Options::grace`] caps the grace (the default, [`DEFAULT_GRACE_CAP`]);
//! - it then reaches a terminal phase (`Failed`, or `Succeeded` if it had completed),
//!   keeping its conditions, so Job `podFailurePolicy` rules see the `DisruptionTarget`
//!   condition kube-scheduler set; then, after [`Options::delete_after`], it is deleted for
//!   good (grace period 0), as the kubelet's status manager does;
//! - a pod annotated [`RUN_SECONDS`] completes (`Succeeded`) after that long Running.
//!
//! Pods deleted with grace 0 are gone from the API at once: nothing to do for them.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::{json, Value};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

/// Annotation: seconds after which a running pod completes successfully.
pub const RUN_SECONDS: &str = "testbed.coloc-extender.io/run-seconds";

/// Annotation: seconds (a decimal number) after which a pod being deleted stops, counted
/// from when the stand-in saw the delete, as a container that handles SIGTERM quickly
/// would. It never outlasts the grace period: the earlier of the two wins.
pub const EXITS_AFTER_SECONDS: &str = "testbed.coloc-extender.io/exits-after-seconds";

/// The default [`Grace::Cap`]: long enough to observe pods Terminating, short enough for
/// tests whose pods have the usual 30 s grace period.
pub const DEFAULT_GRACE_CAP: Duration = Duration::from_secs(2);

/// How much of its grace period a pod being deleted gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grace {
    /// All of it, as with a real kubelet whose containers ignore SIGTERM.
    Honour,
    /// At most this long after the delete was seen; `Cap(Duration::ZERO)` stops it at once.
    Cap(Duration),
}

#[derive(Debug, Clone)]
pub struct Options {
    /// How long a stopped pod stays (in its terminal phase) before the final delete.
    pub delete_after: Duration,
    /// How much of its grace period a pod being deleted runs on for.
    pub grace: Grace,
}

impl Default for Options {
    /// 300 ms before the final delete; graces capped at [`DEFAULT_GRACE_CAP`].
    fn default() -> Self {
        Options { delete_after: Duration::from_millis(300), grace: Grace::Cap(DEFAULT_GRACE_CAP) }
    }
}

pub struct Kubelet {
    task: tokio::task::JoinHandle<()>,
}

impl Kubelet {
    pub fn start(client: Client, opts: Options) -> Kubelet {
        let task = tokio::spawn(run(client, opts));
        Kubelet { task }
    }
}

impl Drop for Kubelet {
    /// Stops the watch and, with it, every pod's task (they live in its `JoinSet`).
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What was done or is under way, per pod UID.
#[derive(Default)]
struct Seen {
    started: HashSet<String>,
    completing: HashSet<String>,
    terminating: HashMap<String, Terminating>,
}

struct Terminating {
    /// When the delete was first seen.
    seen: Timestamp,
    /// The stop time, to the pod's task; dropping it (the pod is gone) ends the task.
    stop: watch::Sender<Timestamp>,
}

impl Seen {
    fn forget(&mut self, uid: &str) {
        self.started.remove(uid);
        self.completing.remove(uid);
        self.terminating.remove(uid);
    }

    /// After a relist: pods not listed are gone.
    fn keep_only(&mut self, listed: &HashSet<String>) {
        self.started.retain(|uid| listed.contains(uid));
        self.completing.retain(|uid| listed.contains(uid));
        self.terminating.retain(|uid, _| listed.contains(uid));
    }
}

async fn run(client: Client, opts: Options) {
    let api: Api<Pod> = Api::all(client.clone());
    let mut seen = Seen::default();
    let mut listed: Option<HashSet<String>> = None;
    let mut tasks = JoinSet::new();
    let limit = Arc::new(Semaphore::new(64));
    let mut events = watcher(api, watcher::Config::default()).boxed();
    while let Some(event) = events.next().await {
        while tasks.try_join_next().is_some() {}
        let pod = match event {
            Ok(watcher::Event::Apply(p)) => p,
            Ok(watcher::Event::InitApply(p)) => {
                if let (Some(listed), Some(uid)) = (listed.as_mut(), p.metadata.uid.as_ref()) {
                    listed.insert(uid.clone());
                }
                p
            }
            Ok(watcher::Event::Delete(p)) => {
                if let Some(uid) = &p.metadata.uid {
                    seen.forget(uid);
                }
                continue;
            }
            Ok(watcher::Event::Init) => {
                listed = Some(HashSet::new());
                continue;
            }
            Ok(watcher::Event::InitDone) => {
                if let Some(listed) = listed.take() {
                    seen.keep_only(&listed);
                }
                continue;
            }
            Err(e) => {
                tracing::debug!(error = %e, "kubelet stand-in: watch error");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let Some(action) = next_action(&pod, &mut seen, Timestamp::now(), opts.grace) else {
            continue;
        };
        tasks.spawn(act(client.clone(), pod, action, limit.clone(), opts.clone()));
    }
}

enum Action {
    Start,
    Terminate(watch::Receiver<Timestamp>),
    Complete(u64),
}

fn next_action(pod: &Pod, seen: &mut Seen, now: Timestamp, grace: Grace) -> Option<Action> {
    let uid = pod.metadata.uid.clone()?;
    let spec = pod.spec.as_ref()?;
    spec.node_name.as_ref()?;
    if pod.metadata.deletion_timestamp.is_some() {
        if let Some(t) = seen.terminating.get(&uid) {
            // Seen before: a second delete may have shortened the grace, or the pod completed.
            let stop = stops_at(pod, t.seen, grace)?;
            t.stop.send_if_modified(|s| {
                let earlier = stop < *s;
                if earlier {
                    *s = stop;
                }
                earlier
            });
            return None;
        }
        let (tx, rx) = watch::channel(stops_at(pod, now, grace)?);
        seen.terminating.insert(uid, Terminating { seen: now, stop: tx });
        return Some(Action::Terminate(rx));
    }
    match phase(pod) {
        "Pending" => seen.started.insert(uid).then_some(Action::Start),
        "Running" => {
            let secs = pod.metadata.annotations.as_ref()?.get(RUN_SECONDS)?.parse().ok()?;
            seen.completing.insert(uid).then_some(Action::Complete(secs))
        }
        _ => None,
    }
}

/// When a pod being deleted stops (its containers have exited), the delete seen at `seen`;
/// `None` if it is not being deleted.
///
/// The grace ends at the delete's time plus `deletionGracePeriodSeconds`. The API server
/// stored that as `deletionTimestamp`, truncated to the second, so it lies in
/// `[deletionTimestamp, deletionTimestamp + 1 s)`, and no later than `seen` plus the grace.
fn stops_at(pod: &Pod, seen: Timestamp, grace: Grace) -> Option<Timestamp> {
    let deadline = pod.metadata.deletion_timestamp.as_ref()?.0;
    if matches!(phase(pod), "Succeeded" | "Failed") {
        return Some(seen);
    }
    let end = match pod.metadata.deletion_grace_period_seconds {
        Some(secs) => plus(seen, SignedDuration::from_secs(secs.max(0)))
            .clamp(deadline, plus(deadline, SignedDuration::from_secs(1))),
        None => deadline,
    };
    let exits = exits_after(pod).map(|d| plus(seen, d));
    let capped = match grace {
        Grace::Honour => None,
        Grace::Cap(cap) => Some(plus(seen, SignedDuration::try_from(cap).unwrap_or(SignedDuration::MAX))),
    };
    [Some(end), exits, capped].into_iter().flatten().min()
}

/// [`EXITS_AFTER_SECONDS`], if set to a number of seconds, not negative.
fn exits_after(pod: &Pod) -> Option<SignedDuration> {
    let secs: f64 = pod.metadata.annotations.as_ref()?.get(EXITS_AFTER_SECONDS)?.trim().parse().ok()?;
    (secs >= 0.0).then(|| SignedDuration::try_from_secs_f64(secs).ok()).flatten()
}

fn plus(t: Timestamp, d: SignedDuration) -> Timestamp {
    t.saturating_add(d).unwrap_or(Timestamp::MAX)
}

fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending")
}

/// One pod's task: waits without holding a permit, then calls the API with one.
async fn act(client: Client, pod: Pod, action: Action, limit: Arc<Semaphore>, opts: Options) {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let api: Api<Pod> = Api::namespaced(client, ns);
    match action {
        Action::Start => {
            let _permit = limit.acquire().await;
            persist("start", || start(&api, &pod)).await;
        }
        Action::Complete(secs) => {
            tokio::time::sleep(Duration::from_secs(secs)).await;
            let _permit = limit.acquire().await;
            persist("complete", || complete(&api, &pod)).await;
        }
        Action::Terminate(stop) => {
            if !until_stop(stop).await {
                return; // gone meanwhile
            }
            {
                let _permit = limit.acquire().await;
                if persist("stop", || stop_containers(&api, &pod)).await != Some(true) {
                    return;
                }
            }
            tokio::time::sleep(opts.delete_after).await;
            let _permit = limit.acquire().await;
            persist("delete", || delete_for_good(&api, &pod)).await;
        }
    }
}

/// Waits until the stop time, which may move earlier; false if the pod went first.
async fn until_stop(mut stop: watch::Receiver<Timestamp>) -> bool {
    loop {
        let left = stop.borrow_and_update().duration_since(Timestamp::now());
        if !left.is_positive() {
            return true;
        }
        tokio::select! {
            _ = tokio::time::sleep(left.unsigned_abs()) => {}
            changed = stop.changed() => {
                if changed.is_err() {
                    return false;
                }
            }
        }
    }
}

/// A kubelet keeps at it until the API server answers (e.g. across a restart).
async fn persist<T, F, Fut>(what: &str, mut call: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<T>>,
{
    for attempt in 0..60 {
        match call().await {
            Ok(t) => return Some(t),
            Err(e) => tracing::debug!(error = %e, attempt, what, "kubelet stand-in: action failed; retrying"),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tracing::debug!(what, "kubelet stand-in: action failed; giving up");
    None
}

fn name(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or_default()
}

/// The pod as it is now, if it is still the same pod (not one recreated under its name).
async fn current(api: &Api<Pod>, pod: &Pod) -> anyhow::Result<Option<Pod>> {
    Ok(api.get_opt(name(pod)).await?.filter(|p| p.metadata.uid == pod.metadata.uid))
}

async fn patch_status(api: &Api<Pod>, pod: &Pod, status: Value) -> anyhow::Result<bool> {
    ok_if_gone(api.patch_status(name(pod), &PatchParams::default(), &Patch::Strategic(status)).await)
}

async fn start(api: &Api<Pod>, pod: &Pod) -> anyhow::Result<()> {
    let now = Timestamp::now().to_string();
    let containers: Vec<_> = pod
        .spec
        .iter()
        .flat_map(|s| &s.containers)
        .map(|c| json!({"name": c.name, "image": c.image, "imageID": "", "ready": true, "started": true, "restartCount": 0, "state": {"running": {"startedAt": now}}}))
        .collect();
    let cond = |t: &str| json!({"type": t, "status": "True", "lastTransitionTime": now});
    let status = json!({"status": {
        "phase": "Running",
        "startTime": now,
        "podIP": "10.244.0.1",
        "conditions": [cond("PodReadyToStartContainers"), cond("Initialized"), cond("ContainersReady"), cond("Ready")],
        "containerStatuses": containers,
    }});
    patch_status(api, pod, status).await.map(drop)
}

async fn complete(api: &Api<Pod>, pod: &Pod) -> anyhow::Result<()> {
    // Stopped meanwhile (deleted, its grace over): a terminal phase is final.
    match current(api, pod).await? {
        Some(now) if !matches!(phase(&now), "Succeeded" | "Failed") => {}
        _ => return Ok(()),
    }
    let done = json!({"status": {"phase": "Succeeded",
        "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": Timestamp::now().to_string()}]}});
    patch_status(api, pod, done).await.map(drop)
}

/// The grace is over: containers terminated, phase `Failed` unless it is terminal already;
/// only the Ready condition changes (`DisruptionTarget` stays). False if the pod is gone.
async fn stop_containers(api: &Api<Pod>, pod: &Pod) -> anyhow::Result<bool> {
    let Some(pod) = current(api, pod).await? else {
        return Ok(false);
    };
    if matches!(phase(&pod), "Succeeded" | "Failed") {
        return Ok(true);
    }
    let now = Timestamp::now().to_string();
    let mut status = json!({"phase": "Failed", "reason": "Terminated",
        "conditions": [{"type": "Ready", "status": "False", "reason": "PodFailed", "lastTransitionTime": now}]});
    let statuses = pod.status.as_ref().and_then(|s| s.container_statuses.as_ref()).filter(|c| !c.is_empty());
    if let Some(statuses) = statuses {
        let terminated: Vec<_> = statuses
            .iter()
            .map(|c| {
                let started = c.state.as_ref().and_then(|s| s.running.as_ref()).and_then(|r| r.started_at.clone());
                let mut c = serde_json::to_value(c).unwrap_or_default();
                c["ready"] = json!(false);
                c["started"] = json!(false);
                // 143: the exit status of a process ended by SIGTERM.
                c["state"] = json!({"terminated": {"exitCode": 143, "reason": "Error", "startedAt": started, "finishedAt": now}});
                c
            })
            .collect();
        status["containerStatuses"] = json!(terminated);
    }
    patch_status(api, &pod, json!({ "status": status })).await
}

async fn delete_for_good(api: &Api<Pod>, pod: &Pod) -> anyhow::Result<()> {
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions { uid: pod.metadata.uid.clone(), resource_version: None }),
        ..Default::default()
    };
    match api.delete(name(pod), &params).await {
        Ok(_) => Ok(()),
        // Gone, or another pod under its name.
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A pod deleted meanwhile needs nothing more: false then.
fn ok_if_gone<T>(r: Result<T, kube::Error>) -> anyhow::Result<bool> {
    match r {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DELETED: &str = "2030-01-01T00:00:30Z";

    fn at(t: &str) -> Timestamp {
        t.parse().unwrap()
    }

    /// A Running pod deleted at `DELETED` minus `grace`, as the API server records it.
    fn deleted(grace: Option<i64>, annotations: &[(&str, &str)]) -> Pod {
        let annotations: serde_json::Map<String, Value> =
            annotations.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
        serde_json::from_value(json!({
            "metadata": {"name": "p", "uid": "u1", "deletionTimestamp": DELETED, "deletionGracePeriodSeconds": grace,
                "annotations": annotations},
            "spec": {"nodeName": "node-1", "containers": [{"name": "main"}]},
            "status": {"phase": "Running"},
        }))
        .unwrap()
    }

    #[test]
    fn a_running_pod_stops_when_its_grace_ends() {
        // Seen 0.4 s after a delete with 30 s of grace at 00:00:00.4.
        let pod = deleted(Some(30), &[]);
        assert_eq!(stops_at(&pod, at("2030-01-01T00:00:00.4Z"), Grace::Honour), Some(at("2030-01-01T00:00:30.4Z")));
    }

    #[test]
    fn the_grace_end_stays_within_the_second_of_the_deletion_timestamp() {
        let pod = deleted(Some(30), &[]);
        // Seen late (a relist): no later than deletionTimestamp + 1 s.
        assert_eq!(stops_at(&pod, at("2030-01-01T00:00:20Z"), Grace::Honour), Some(at("2030-01-01T00:00:31Z")));
        // A clock behind: no earlier than deletionTimestamp.
        assert_eq!(stops_at(&pod, at("2029-12-31T23:59:59Z"), Grace::Honour), Some(at(DELETED)));
        // No grace recorded: the deletionTimestamp.
        let pod = deleted(None, &[]);
        assert_eq!(stops_at(&pod, at("2030-01-01T00:00:00Z"), Grace::Honour), Some(at(DELETED)));
    }

    #[test]
    fn the_annotation_stops_it_earlier_but_never_later() {
        let seen = at("2030-01-01T00:00:00Z");
        let pod = deleted(Some(30), &[(EXITS_AFTER_SECONDS, "2.5")]);
        assert_eq!(stops_at(&pod, seen, Grace::Honour), Some(at("2030-01-01T00:00:02.5Z")));
        let pod = deleted(Some(30), &[(EXITS_AFTER_SECONDS, "45")]);
        assert_eq!(stops_at(&pod, seen, Grace::Honour), Some(at(DELETED)));
        for junk in ["-1", "soon", "NaN", ""] {
            let pod = deleted(Some(30), &[(EXITS_AFTER_SECONDS, junk)]);
            assert_eq!(stops_at(&pod, seen, Grace::Honour), Some(at(DELETED)), "{junk:?}");
        }
    }

    #[test]
    fn a_cap_shortens_every_grace() {
        let seen = at("2030-01-01T00:00:00Z");
        let pod = deleted(Some(30), &[(EXITS_AFTER_SECONDS, "5")]);
        assert_eq!(stops_at(&pod, seen, Grace::Cap(DEFAULT_GRACE_CAP)), Some(at("2030-01-01T00:00:02Z")));
        assert_eq!(stops_at(&pod, seen, Grace::Cap(Duration::ZERO)), Some(seen));
        assert_eq!(stops_at(&pod, seen, Grace::Cap(Duration::MAX)), Some(at("2030-01-01T00:00:05Z")));
        let pod = deleted(Some(30), &[(EXITS_AFTER_SECONDS, "1")]);
        assert_eq!(stops_at(&pod, seen, Grace::Cap(DEFAULT_GRACE_CAP)), Some(at("2030-01-01T00:00:01Z")));
    }

    #[test]
    fn a_completed_or_undeleted_pod() {
        let seen = at("2030-01-01T00:00:00Z");
        let mut pod = deleted(Some(30), &[]);
        pod.status.as_mut().unwrap().phase = Some("Succeeded".into());
        assert_eq!(stops_at(&pod, seen, Grace::Honour), Some(seen));
        pod.metadata.deletion_timestamp = None;
        assert_eq!(stops_at(&pod, seen, Grace::Honour), None);
    }

    #[test]
    fn a_second_delete_moves_the_stop_earlier_only() {
        let mut seen = Seen::default();
        let first = at("2030-01-01T00:00:00Z");
        let pod = deleted(Some(30), &[]);
        let Some(Action::Terminate(rx)) = next_action(&pod, &mut seen, first, Grace::Honour) else {
            panic!("no Terminate");
        };
        assert_eq!(*rx.borrow(), at(DELETED));
        // Deleted again with 5 s of grace at 00:00:03.
        let mut again = deleted(Some(5), &[]);
        again.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at("2030-01-01T00:00:08Z")));
        assert!(next_action(&again, &mut seen, at("2030-01-01T00:00:03Z"), Grace::Honour).is_none());
        // Counted from the first sighting, clamped to the new deletionTimestamp.
        assert_eq!(*rx.borrow(), at("2030-01-01T00:00:08Z"));
        // A repeat of the first (an older event) changes nothing.
        assert!(next_action(&pod, &mut seen, at("2030-01-01T00:00:04Z"), Grace::Honour).is_none());
        assert_eq!(*rx.borrow(), at("2030-01-01T00:00:08Z"));
        // Gone: the task's channel closes.
        seen.forget("u1");
        assert!(rx.has_changed().is_err());
    }
}
