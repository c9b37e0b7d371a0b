//! The cluster view from the Kubernetes API: watches on Nodes, Pods, PDBs and
//! PriorityClasses (kube-rs watchers with backoff), converted on arrival to the lean
//! model and republished as a fresh `View` when something changed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::Mutex;

use super::{Objects, View, ViewCell};
use crate::model;
use crate::policy::Policy;
use crate::wire::k8s;

/// How current the view is, for `/readyz` and metrics.
#[derive(Default)]
pub struct Freshness {
    /// Unix seconds of the last successful watch event of any kind.
    pub last_event: AtomicI64,
    /// Unix seconds since which a watch has been failing (API server unreachable, RBAC,
    /// ...); 0 while all is well.
    pub failing_since: AtomicI64,
}

impl Freshness {
    fn failed(&self, now: i64) {
        let _ = self.failing_since.compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
    }

    fn succeeded(&self, now: i64) {
        self.failing_since.store(0, Ordering::Relaxed);
        self.last_event.store(now, Ordering::Relaxed);
    }

    /// Failing for longer than `limit` seconds at `now`?
    pub fn is_stale(&self, now: i64, limit: i64) -> bool {
        let since = self.failing_since.load(Ordering::Relaxed);
        since != 0 && now - since > limit
    }
}

/// Objects of one kind, keyed by namespace/name, as the model sees them.
type Store<T> = Arc<Mutex<KindState<T>>>;

struct KindState<T> {
    live: HashMap<String, T>,
    /// Objects listed during a re-list, swapped in at `InitDone`.
    relist: Option<HashMap<String, T>>,
    synced: bool,
}

impl<T> Default for KindState<T> {
    fn default() -> Self {
        KindState { live: HashMap::new(), relist: None, synced: false }
    }
}

/// Lean conversion through the same decoders requests and snapshots use, so the three
/// sources cannot disagree on what a field means.
fn convert<K: Serialize, J: DeserializeOwned>(obj: &K) -> Option<J> {
    serde_json::to_vec(obj).ok().and_then(|b| serde_json::from_slice(&b).ok())
}

fn to_pod(p: &Pod) -> Option<model::Pod> {
    convert::<_, k8s::Pod>(p)?.into_model().ok()
}
fn to_node(n: &Node) -> Option<model::Node> {
    convert::<_, k8s::Node>(n)?.into_model().ok()
}
fn to_pdb(p: &PodDisruptionBudget) -> Option<model::Pdb> {
    Some(convert::<_, k8s::Pdb>(p)?.into_model())
}
fn to_pc(p: &PriorityClass) -> Option<model::PriorityClass> {
    Some(model::PriorityClass { name: p.name_any(), value: p.value })
}

async fn follow<K, T>(
    api: Api<K>,
    config: watcher::Config,
    store: Store<T>,
    dirty: Arc<AtomicBool>,
    fresh: Arc<Freshness>,
    to_model: fn(&K) -> Option<T>,
) where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
    T: Send + 'static,
{
    let kind = K::kind(&K::DynamicType::default()).to_string();
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(e) => e,
            Err(e) => {
                fresh.failed(crate::http::system_now());
                metrics::counter!("coloc_watch_errors_total", "kind" => kind.clone()).increment(1);
                tracing::warn!(kind = %kind, error = %e, "watch failed; retrying with backoff");
                continue;
            }
        };
        fresh.succeeded(crate::http::system_now());
        let key = |o: &K| format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any());
        let mut s = store.lock().await;
        match event {
            Event::Init => s.relist = Some(HashMap::new()),
            Event::InitApply(o) => {
                if let Some(m) = to_model(&o) {
                    s.relist.get_or_insert_with(HashMap::new).insert(key(&o), m);
                }
            }
            Event::InitDone => {
                let listed = s.relist.take().unwrap_or_default();
                s.live = listed;
                s.synced = true;
                dirty.store(true, Ordering::Relaxed);
                tracing::info!(kind = %kind, objects = s.live.len(), "watch synced");
            }
            Event::Apply(o) => {
                match to_model(&o) {
                    Some(m) => s.live.insert(key(&o), m),
                    None => s.live.remove(&key(&o)),
                };
                dirty.store(true, Ordering::Relaxed);
            }
            Event::Delete(o) => {
                s.live.remove(&key(&o));
                dirty.store(true, Ordering::Relaxed);
            }
        }
    }
}

/// Seconds a watch may fail before the view counts as stale: `/readyz` turns 503 and
/// decisions fall back to each class's `withoutView` behaviour.
pub const STALE_AFTER_SECS: i64 = 30;

/// Runs the watches and republishes the view at most every `debounce` while changes
/// arrive. The first view is published only once every kind has synced.
pub async fn run(client: Client, cell: Arc<ViewCell>, policy: Arc<ArcSwap<Policy>>, fresh: Arc<Freshness>, debounce: Duration) {
    let dirty = Arc::new(AtomicBool::new(false));
    let nodes: Store<model::Node> = Default::default();
    let pods: Store<model::Pod> = Default::default();
    let pdbs: Store<model::Pdb> = Default::default();
    let pcs: Store<model::PriorityClass> = Default::default();
    // Terminal pods never hold resources in kube-scheduler's cache either.
    let pod_config = watcher::Config::default().fields("status.phase!=Succeeded,status.phase!=Failed");
    tokio::spawn(follow(Api::<Node>::all(client.clone()), Default::default(), nodes.clone(), dirty.clone(), fresh.clone(), to_node));
    tokio::spawn(follow(Api::<Pod>::all(client.clone()), pod_config, pods.clone(), dirty.clone(), fresh.clone(), to_pod));
    tokio::spawn(follow(Api::<PodDisruptionBudget>::all(client.clone()), Default::default(), pdbs.clone(), dirty.clone(), fresh.clone(), to_pdb));
    tokio::spawn(follow(Api::<PriorityClass>::all(client), Default::default(), pcs.clone(), dirty.clone(), fresh.clone(), to_pc));

    let mut policy_seen = policy.load_full();
    loop {
        tokio::time::sleep(debounce).await;
        let stale = fresh.is_stale(crate::http::system_now(), STALE_AFTER_SECS);
        cell.set_stale(stale);
        metrics::gauge!("coloc_view_ready").set(if cell.is_ready() { 1.0 } else { 0.0 });
        let current_policy = policy.load_full();
        let policy_changed = !Arc::ptr_eq(&current_policy, &policy_seen);
        if !dirty.swap(false, Ordering::Relaxed) && !policy_changed {
            continue;
        }
        policy_seen = current_policy.clone();
        let (n, p, d, c) = (nodes.lock().await, pods.lock().await, pdbs.lock().await, pcs.lock().await);
        if !(n.synced && p.synced && d.synced && c.synced) {
            continue;
        }
        let objects = Objects {
            nodes: n.live.values().cloned().collect(),
            pods: p.live.values().cloned().collect(),
            pdbs: d.live.values().cloned().collect(),
            priority_classes: c.live.values().cloned().collect(),
        };
        drop((n, p, d, c));
        let view = View::build(objects, &current_policy);
        tracing::debug!(nodes = view.node_count(), pods = view.pod_count(), "cluster view rebuilt");
        cell.publish(view);
    }
}
