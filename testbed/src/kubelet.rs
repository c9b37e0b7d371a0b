//! A kubelet stand-in for every node at once. There is no container runtime; what the
//! control plane and the extender observe of kubelets is reproduced:
//! - a bound pod becomes Running and Ready, with a start time;
//! - a pod being deleted reaches a terminal phase first (`Failed`, or `Succeeded` if it had
//!   completed), keeping its conditions, so Job `podFailurePolicy` rules see the
//!   `DisruptionTarget` condition kube-scheduler set; then, after a short grace, it is
//!   deleted for good (grace period 0), as the kubelet's status manager does;
//! - a pod annotated [`RUN_SECONDS`] completes (`Succeeded`) after that long Running.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::json;

/// Annotation: seconds after which a running pod completes successfully.
pub const RUN_SECONDS: &str = "testbed.coloc-extender.io/run-seconds";

#[derive(Debug, Clone)]
pub struct Options {
    /// How long a terminating pod stays (in its terminal phase) before the final delete.
    pub delete_after: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options { delete_after: Duration::from_millis(300) }
    }
}

pub struct Kubelet {
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct Seen {
    started: HashSet<String>,
    terminating: HashSet<String>,
    completing: HashSet<String>,
}

impl Kubelet {
    pub fn start(client: Client, opts: Options) -> Kubelet {
        let task = tokio::spawn(run(client, opts));
        Kubelet { task }
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn run(client: Client, opts: Options) {
    let api: Api<Pod> = Api::all(client.clone());
    let seen = Arc::new(Mutex::new(Seen::default()));
    let limit = Arc::new(tokio::sync::Semaphore::new(64));
    let mut events = watcher(api, watcher::Config::default()).boxed();
    while let Some(event) = events.next().await {
        let pod = match event {
            Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => p,
            Ok(_) => continue,
            Err(e) => {
                tracing::debug!(error = %e, "kubelet stand-in: watch error");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let Some(action) = next_action(&pod, &mut seen.lock().unwrap()) else {
            continue;
        };
        let (client, limit, opts) = (client.clone(), limit.clone(), opts.clone());
        tokio::spawn(async move {
            let _permit = limit.acquire().await;
            // A kubelet keeps at it until the API server answers (e.g. across a restart).
            for attempt in 0..60 {
                match act(&client, &pod, action, &opts).await {
                    Ok(()) => return,
                    Err(e) => tracing::debug!(error = %e, attempt, "kubelet stand-in: action failed; retrying"),
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
    }
}

#[derive(Debug, Clone, Copy)]
enum Action {
    Start,
    Terminate,
    Complete(u64),
}

fn next_action(pod: &Pod, seen: &mut Seen) -> Option<Action> {
    let uid = pod.metadata.uid.clone()?;
    let spec = pod.spec.as_ref()?;
    spec.node_name.as_ref()?;
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    if pod.metadata.deletion_timestamp.is_some() {
        return seen.terminating.insert(uid).then_some(Action::Terminate);
    }
    match phase {
        "Pending" => seen.started.insert(uid).then_some(Action::Start),
        "Running" => {
            let secs = pod.metadata.annotations.as_ref()?.get(RUN_SECONDS)?.parse().ok()?;
            seen.completing.insert(uid).then_some(Action::Complete(secs))
        }
        _ => None,
    }
}

async fn act(client: &Client, pod: &Pod, action: Action, opts: &Options) -> anyhow::Result<()> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let uid = pod.metadata.uid.clone();
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let now = jiff::Timestamp::now().to_string();
    let strategic = PatchParams::default();
    match action {
        Action::Start => {
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
            ok_if_gone(api.patch_status(name, &strategic, &Patch::Strategic(status)).await)?;
        }
        Action::Complete(secs) => {
            tokio::time::sleep(Duration::from_secs(secs)).await;
            let done = json!({"status": {"phase": "Succeeded",
                "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": jiff::Timestamp::now().to_string()}]}});
            ok_if_gone(api.patch_status(name, &strategic, &Patch::Strategic(done)).await)?;
        }
        Action::Terminate => {
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
            if phase != "Failed" && phase != "Succeeded" {
                // Only the phase: the conditions (DisruptionTarget) stay as they are.
                let failed = json!({"status": {"phase": "Failed", "reason": "Terminated",
                    "conditions": [{"type": "Ready", "status": "False", "reason": "PodFailed", "lastTransitionTime": now}]}});
                ok_if_gone(api.patch_status(name, &strategic, &Patch::Strategic(failed)).await)?;
            }
            tokio::time::sleep(opts.delete_after).await;
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions { uid, resource_version: None }),
                ..Default::default()
            };
            match api.delete(name, &params).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

/// A pod deleted meanwhile needs nothing more.
fn ok_if_gone<T>(r: Result<T, kube::Error>) -> anyhow::Result<()> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
