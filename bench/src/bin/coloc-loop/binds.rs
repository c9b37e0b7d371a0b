//! When each pod of a namespace got its node, as seen by a watch started before
//! kube-scheduler (binding sets `spec.nodeName`; the pods stay Pending without a kubelet).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use coloc_testbed::cluster;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};

pub struct Binds {
    times: Arc<Mutex<Vec<Instant>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Binds {
    /// Starts watching `namespace`; returns once the initial list is in, so that no bind
    /// is missed.
    pub async fn watch(client: Client, namespace: &str) -> anyhow::Result<Binds> {
        let times = Arc::new(Mutex::new(Vec::new()));
        let synced = Arc::new(AtomicBool::new(false));
        let api: Api<Pod> = Api::namespaced(client, namespace);
        let task = tokio::spawn({
            let (times, synced) = (times.clone(), synced.clone());
            async move {
                let mut seen = HashSet::new();
                let mut events = watcher::watcher(api, watcher::Config::default()).boxed();
                while let Some(event) = events.next().await {
                    match event {
                        Ok(Event::Apply(pod) | Event::InitApply(pod)) => {
                            if cluster::node_of(&pod).is_some() && seen.insert(cluster::name(&pod).to_string()) {
                                times.lock().expect("not poisoned").push(Instant::now());
                            }
                        }
                        Ok(Event::InitDone) => synced.store(true, Ordering::Release),
                        Ok(_) => {}
                        // The watcher retries by itself; a bind seen late is timed late.
                        Err(e) => eprintln!("coloc-loop: pod watch: {e}"),
                    }
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        while !synced.load(Ordering::Acquire) {
            anyhow::ensure!(Instant::now() < deadline, "pod watch not synced after 60 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(Binds { times, task })
    }

    pub fn count(&self) -> usize {
        self.times.lock().expect("not poisoned").len()
    }

    /// Waits until `want` pods are bound or `timeout` passes; the bind instants, in order.
    pub async fn wait(self, want: usize, timeout: Duration) -> Vec<Instant> {
        let deadline = Instant::now() + timeout;
        while self.count() < want && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.task.abort();
        let times = self.times.lock().expect("not poisoned").clone();
        times
    }
}
