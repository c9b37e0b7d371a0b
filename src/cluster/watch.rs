//! The cluster view from the Kubernetes API: one watch per kind (pods listed from the watch
//! cache by `cached`, the others by kube-rs' watcher), decoded once into
//! the lean model (`lean`), each event applied at once to the view staged in the
//! `ViewCell`, which the very next request gets. No debounce: a deleted or terminating pod
//! must not be offered as a victim a moment after kube-scheduler's cache dropped it. Jobs are
//! required like PDBs: a Job victim is costed by what its preemption does to the Job, and
//! a view without Jobs would cost every Job pod as merely recreated. Gang kinds
//! (PodGroups) are optional: watched while the API server serves them (`optional`).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use futures::{Stream, StreamExt};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};

use super::lean::{
    DecisionPodKind, JobKind, Lean, LeanKind, NamespaceKind, NodeKind, PdbKind, PodGroupApi, PodGroupKind, PodKind,
    PriorityClassKind,
};
use super::{View, ViewCell};
use crate::policy::{AnnotationsRead, Policy};

/// Seconds a watch may fail before the view counts as stale: `/readyz` turns 503 and
/// decisions fall back to each class's `withoutView` behaviour.
pub const STALE_AFTER_SECS: i64 = 30;

mod cached;
mod optional;

/// How often the API server is asked again which gang kinds it serves (a CRD installed
/// later is picked up, one removed is dropped).
pub const DISCOVERY_EVERY: Duration = Duration::from_secs(180);

/// The kinds the view is built from; it is published once every one has synced (and the
/// gang kinds served at start-up).
pub const KINDS: [&str; 6] =
    [PodKind::KIND, NodeKind::KIND, PdbKind::KIND, PriorityClassKind::KIND, JobKind::KIND, NamespaceKind::KIND];

#[derive(Debug, Default, Clone, Copy)]
struct KindHealth {
    synced: bool,
    /// A gang kind: it never makes the view stale (its objects only refine gangs, and a
    /// CRD may be removed between two discoveries).
    optional: bool,
    /// Unix seconds since which this kind's watch has been failing; 0 while all is well.
    failing_since: i64,
}

/// How current the view is, per kind, for `/readyz` and metrics. A failing Pod watch makes
/// the view stale even while Nodes keep streaming.
#[derive(Debug, Default)]
pub struct Freshness {
    kinds: Mutex<BTreeMap<&'static str, KindHealth>>,
}

impl Freshness {
    fn update(&self, kind: &'static str, f: impl FnOnce(&mut KindHealth)) {
        f(self.kinds.lock().unwrap_or_else(|e| e.into_inner()).entry(kind).or_default());
    }

    fn failed(&self, kind: &'static str, now: i64) {
        self.update(kind, |h| {
            if h.failing_since == 0 {
                h.failing_since = now;
            }
        });
    }

    fn succeeded(&self, kind: &'static str) {
        self.update(kind, |h| h.failing_since = 0);
    }

    fn synced(&self, kind: &'static str) {
        self.update(kind, |h| h.synced = true);
    }

    fn watching_optional(&self, kind: &'static str) {
        self.update(kind, |h| h.optional = true);
    }

    fn forget(&self, kind: &'static str) {
        self.kinds.lock().unwrap_or_else(|e| e.into_inner()).remove(kind);
    }

    /// Unix seconds since which `kind`'s watch has been failing; 0 while it is not.
    pub fn failing_since(&self, kind: &str) -> i64 {
        self.kinds.lock().unwrap_or_else(|e| e.into_inner()).get(kind).map_or(0, |h| h.failing_since)
    }

    /// Required kinds failing for longer than `limit` seconds at `now`.
    pub fn stale_kinds(&self, now: i64, limit: i64) -> Vec<&'static str> {
        let kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        kinds
            .iter()
            .filter(|(_, h)| !h.optional && h.failing_since != 0 && now - h.failing_since > limit)
            .map(|(k, _)| *k)
            .collect()
    }

    /// Is any kind failing for longer than `limit` seconds at `now`?
    pub fn is_stale(&self, now: i64, limit: i64) -> bool {
        !self.stale_kinds(now, limit).is_empty()
    }

    /// Kinds whose watch is failing now.
    pub fn failing_kinds(&self) -> Vec<&'static str> {
        let kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        kinds.iter().filter(|(_, h)| h.failing_since != 0).map(|(k, _)| *k).collect()
    }

    /// Kinds of `KINDS`, and gang kinds being watched, that have not completed their
    /// first list.
    pub fn unsynced_kinds(&self) -> Vec<&'static str> {
        let kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        let optional = kinds.iter().filter(|(_, h)| h.optional).map(|(k, _)| *k);
        KINDS.iter().copied().chain(optional).filter(|k| !kinds.get(k).is_some_and(|h| h.synced)).collect()
    }

    /// Has every kind completed its first list? (The first view is published only then.)
    fn all_synced(&self) -> bool {
        self.unsynced_kinds().is_empty()
    }
}

/// One kind's list in progress.
#[derive(Default)]
struct Relist {
    /// Keys listed: what the view holds and is not listed again was deleted. `None` when
    /// the view held nothing of the kind as the list began (the first list): nothing can
    /// have gone then, and 150,000 pod keys need not be kept.
    keys: Option<HashSet<String>>,
    objects: usize,
}

/// What the watches share: their bookkeeping, and the cell whose staged view they change.
struct Shared {
    master: Mutex<Master>,
    cell: Arc<ViewCell>,
    fresh: Arc<Freshness>,
}

struct Master {
    policy: Arc<Policy>,
    /// What each kind's (re-)list has brought so far.
    relisting: BTreeMap<&'static str, Relist>,
    /// The first view is out: from now on every change is seen (a gang kind found later
    /// does not hold the view back while it lists).
    published: bool,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Master> {
        self.master.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens the staged view to readers once every kind has synced.
    fn open_when_synced(&self, m: &mut Master) {
        if !m.published && self.fresh.all_synced() {
            m.published = true;
            self.cell.open();
        }
    }
}

/// How one kind's objects enter and leave the view.
trait Applies: LeanKind {
    fn apply(view: &mut View, model: Self::Model, policy: &Policy);
    /// Removes the object with `Lean::key()` `key`.
    fn remove(view: &mut View, key: &str, policy: &Policy);
    /// Removes an object the API server deleted; `last` is what the event carried.
    fn deleted(view: &mut View, key: &str, _last: Option<&Self::Model>, policy: &Policy) {
        Self::remove(view, key, policy)
    }
    /// Removes an object a re-list no longer finds (it went while the watch was down).
    fn unseen(view: &mut View, key: &str, policy: &Policy) {
        Self::remove(view, key, policy)
    }
    /// Keys (as `Lean::key()` spells them) of every object of this kind in the view.
    fn keys(view: &View) -> Vec<String>;
    /// Does the view hold any object of this kind?
    fn holds_any(view: &View) -> bool {
        !Self::keys(view).is_empty()
    }
}

fn split(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("", key))
}

/// What the pod watch keeps of each pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodsKept {
    /// What decisions read: the extender's view (it copies no pod).
    ForDecisions,
    /// Also what requeue copies a marked pod from (its bytes, its spec's digest): the
    /// requeue controller's view.
    ForRequeue,
}

impl Applies for DecisionPodKind {
    fn apply(view: &mut View, model: Self::Model, policy: &Policy) {
        PodKind::apply(view, model, policy)
    }
    fn remove(view: &mut View, key: &str, policy: &Policy) {
        PodKind::remove(view, key, policy)
    }
    fn deleted(view: &mut View, key: &str, last: Option<&Self::Model>, policy: &Policy) {
        PodKind::deleted(view, key, last, policy)
    }
    fn unseen(view: &mut View, key: &str, policy: &Policy) {
        PodKind::unseen(view, key, policy)
    }
    fn keys(view: &View) -> Vec<String> {
        PodKind::keys(view)
    }
    fn holds_any(view: &View) -> bool {
        PodKind::holds_any(view)
    }
}

impl Applies for PodKind {
    fn apply(view: &mut View, model: Self::Model, policy: &Policy) {
        view.apply_pod(Arc::new(model), policy);
    }
    fn remove(view: &mut View, key: &str, policy: &Policy) {
        view.remove_pod(key, policy);
    }
    fn deleted(view: &mut View, key: &str, last: Option<&Self::Model>, policy: &Policy) {
        match last {
            Some(last) => view.remove_deleted_pod(key, last, policy),
            None => view.remove_pod(key, policy),
        };
    }
    fn unseen(view: &mut View, key: &str, policy: &Policy) {
        view.remove_unseen_pod(key, policy);
    }
    fn keys(view: &View) -> Vec<String> {
        view.all_pods().map(|p| p.key()).collect()
    }
    fn holds_any(view: &View) -> bool {
        view.all_pods().next().is_some()
    }
}

impl Applies for NodeKind {
    fn apply(view: &mut View, model: Self::Model, _: &Policy) {
        view.apply_node(model);
    }
    fn remove(view: &mut View, key: &str, _: &Policy) {
        view.remove_node(split(key).1);
    }
    fn keys(view: &View) -> Vec<String> {
        view.node_names().map(|n| format!("/{n}")).collect()
    }
}

impl Applies for PdbKind {
    fn apply(view: &mut View, model: Self::Model, _: &Policy) {
        view.apply_pdb(model);
    }
    fn remove(view: &mut View, key: &str, _: &Policy) {
        let (ns, name) = split(key);
        view.remove_pdb(ns, name);
    }
    fn keys(view: &View) -> Vec<String> {
        view.pdb_keys().collect()
    }
}

impl Applies for JobKind {
    fn apply(view: &mut View, model: Self::Model, _: &Policy) {
        view.apply_job(model);
    }
    fn remove(view: &mut View, key: &str, _: &Policy) {
        let (ns, name) = split(key);
        view.remove_job(ns, name);
    }
    fn keys(view: &View) -> Vec<String> {
        view.jobs().keys().cloned().collect()
    }
}

impl Applies for PriorityClassKind {
    fn apply(view: &mut View, model: Self::Model, _: &Policy) {
        view.apply_priority_class(model);
    }
    fn remove(view: &mut View, key: &str, _: &Policy) {
        view.remove_priority_class(split(key).1);
    }
    fn keys(view: &View) -> Vec<String> {
        view.priority_class_names().map(|n| format!("/{n}")).collect()
    }
}

// Namespaces are required: a view without them would copy into namespaces that never
// opted in, or (admission refusing those copies) lose their pods.
impl Applies for NamespaceKind {
    fn apply(view: &mut View, model: Self::Model, _: &Policy) {
        view.apply_namespace(model);
    }
    fn remove(view: &mut View, key: &str, _: &Policy) {
        view.remove_namespace(split(key).1);
    }
    fn keys(view: &View) -> Vec<String> {
        view.namespace_names().map(|n| format!("/{n}")).collect()
    }
}

impl<A: PodGroupApi> Applies for PodGroupKind<A> {
    fn apply(view: &mut View, model: Self::Model, _: &Policy) {
        view.apply_pod_group(model);
    }
    fn remove(view: &mut View, key: &str, _: &Policy) {
        let (ns, name) = split(key);
        view.remove_pod_group(A::SOURCE, ns, name);
    }
    fn keys(view: &View) -> Vec<String> {
        view.pod_groups(A::SOURCE).map(|g| format!("{}/{}", g.namespace, g.name)).collect()
    }
}

/// Applies one object: its model, or, if it could not be converted, its removal (a pod
/// the view cannot read is never offered as a victim), logged and counted. `clock_ms`:
/// when it was received (0 where that is not when it changed: a re-list's objects).
fn apply_one<K: Applies>(cell: &ViewCell, policy: &Policy, obj: Lean<K>, clock_ms: i64) {
    if let Err(e) = &obj.model {
        let key = obj.key();
        metrics::counter!("coloc_watch_conversion_errors_total", "kind" => K::LABEL).increment(1);
        tracing::warn!(kind = K::LABEL, object = %key, error = %e, "cannot read object; left out of the cluster view");
        return cell.change(|view| {
            // Left out for being unreadable, not for having stopped.
            view.set_clock_ms(0);
            K::remove(view, &key, policy)
        });
    }
    if let Ok(model) = obj.model {
        cell.change(|view| {
            view.set_clock_ms(clock_ms);
            K::apply(view, model, policy)
        });
    }
}

fn handle<K: Applies>(shared: &Shared, event: Event<Lean<K>>) {
    let mut m = shared.lock();
    let policy = m.policy.clone();
    match event {
        Event::Init => {
            let held = shared.cell.read_staged(K::holds_any);
            m.relisting.insert(K::LABEL, Relist { keys: held.then(HashSet::new), objects: 0 });
            return;
        }
        Event::InitApply(obj) => {
            let relist =
                m.relisting.entry(K::LABEL).or_insert_with(|| Relist { keys: Some(HashSet::new()), objects: 0 });
            relist.objects += 1;
            if let Some(keys) = &mut relist.keys {
                keys.insert(obj.key());
            }
            // Listed, not watched: a pod gone terminal while the watch was down went at no
            // known time, and teaches nothing of how long pods take to stop.
            apply_one(&shared.cell, &policy, obj, 0);
            // Until the first sync readers see nothing; during a later re-list, upserts
            // are current state and are seen as they come.
        }
        Event::InitDone => {
            let listed = m.relisting.remove(K::LABEL).unwrap_or_default();
            let removed = match listed.keys {
                // O(objects of the kind): a re-list of every pod must not hold readers up.
                Some(keys) => shared.cell.change_long(|view| {
                    let gone: Vec<String> = K::keys(view).into_iter().filter(|k| !keys.contains(k)).collect();
                    for key in &gone {
                        K::unseen(view, key, &policy);
                    }
                    gone.len()
                }),
                None => 0,
            };
            shared.fresh.synced(K::LABEL);
            tracing::info!(kind = K::LABEL, objects = listed.objects, removed, "watch listed");
        }
        Event::Apply(obj) => apply_one(&shared.cell, &policy, obj, crate::clock::system_now_ms()),
        Event::Delete(obj) => {
            let now = crate::clock::system_now_ms();
            shared.cell.change(|view| {
                view.set_clock_ms(now);
                K::deleted(view, &obj.key(), obj.model.as_ref().ok(), &policy)
            })
        }
    }
    shared.open_when_synced(&mut m);
}

/// kube-rs' watcher of every object of `K` (`follow` adds its back-off).
fn watcher_of<K: LeanKind>(
    client: Client,
) -> impl Stream<Item = Result<Event<Lean<K>>, watcher::Error>> + Send + 'static {
    watcher::watcher(Api::<Lean<K>>::all(client), Default::default())
}

/// Applies a kind's events to the view, and keeps its health, until the stream ends; after
/// an error the stream is polled again after kube-rs' default back-off.
async fn follow<K: Applies>(
    events: impl Stream<Item = Result<Event<Lean<K>>, watcher::Error>> + Send + 'static,
    shared: Arc<Shared>,
) {
    let mut stream = events.default_backoff().boxed();
    // Registered once: every bind comes through here.
    let events_seen = metrics::counter!("coloc_view_events_total", "kind" => K::LABEL);
    // Only this loop marks the kind failing, so it knows when there is anything to clear.
    let mut failing = false;
    while let Some(event) = stream.next().await {
        match event {
            Ok(event) => {
                // kube-rs starts every (re)list with `Init` before it asks anything: only
                // what the API server sent shows the watch works again. (Clearing on
                // `Init` kept a watch whose re-list kept failing from ever going stale.)
                if failing && !matches!(event, Event::Init) {
                    shared.fresh.succeeded(K::LABEL);
                    failing = false;
                }
                events_seen.increment(1);
                handle(&shared, event);
            }
            Err(e) => {
                failing = true;
                shared.fresh.failed(K::LABEL, crate::clock::system_now());
                metrics::counter!("coloc_watch_errors_total", "kind" => K::LABEL).increment(1);
                tracing::warn!(kind = K::LABEL, error = %e, "watch failed; retrying with backoff");
            }
        }
    }
}

/// A watch that reconnects after a failure yields nothing until the next change, so a
/// quiet kind would look failing forever: probe each failing kind with a one-item list and
/// clear it when the API server answers (kube-rs keeps re-watching meanwhile).
async fn probe_failing(client: &Client, fresh: &Freshness) {
    for kind in fresh.failing_kinds() {
        let path = match kind {
            k if k == PodKind::KIND => probe_path::<PodKind>(),
            k if k == NodeKind::KIND => probe_path::<NodeKind>(),
            k if k == PdbKind::KIND => probe_path::<PdbKind>(),
            k if k == PriorityClassKind::KIND => probe_path::<PriorityClassKind>(),
            k if k == JobKind::KIND => probe_path::<JobKind>(),
            k if k == NamespaceKind::KIND => probe_path::<NamespaceKind>(),
            k => match optional::probe_path_of(k) {
                Some(path) => path,
                None => continue,
            },
        };
        let Ok(request) = axum::http::Request::get(path).body(Vec::new()) else { continue };
        let probe = tokio::time::timeout(Duration::from_secs(2), client.request_text(request)).await;
        if matches!(probe, Ok(Ok(_))) {
            fresh.succeeded(kind);
            tracing::info!(kind, "watch source answers again");
        }
    }
}

fn probe_path<K: LeanKind>() -> String {
    format!("{}?limit=1", <Lean<K> as kube::Resource>::url_path(&(), None))
}

/// Runs the watches until the process ends. Install the metrics recorder first: each
/// watch registers its counters once, as it starts. Readers see the view once every kind has
/// synced; after that every event, at their next read. A policy change re-indexes the view off
/// the async runtime. Staleness is checked every `tick`; gang kinds are discovered every
/// `DISCOVERY_EVERY`. Pods are kept for requeue too (`PodsKept::ForRequeue`).
pub async fn run(
    client: Client,
    cell: Arc<ViewCell>,
    policy: Arc<ArcSwap<Policy>>,
    fresh: Arc<Freshness>,
    tick: Duration,
) {
    run_keeping(client, cell, policy, fresh, tick, PodsKept::ForRequeue).await
}

/// `run`, keeping of each pod what `kept` says.
pub async fn run_keeping(
    client: Client,
    cell: Arc<ViewCell>,
    policy: Arc<ArcSwap<Policy>>,
    fresh: Arc<Freshness>,
    tick: Duration,
    kept: PodsKept,
) {
    run_with(client, cell, policy, fresh, tick, DISCOVERY_EVERY, kept).await
}

/// `run_keeping`, with the interval between gang-kind discoveries.
pub async fn run_with(
    client: Client,
    cell: Arc<ViewCell>,
    policy: Arc<ArcSwap<Policy>>,
    fresh: Arc<Freshness>,
    tick: Duration,
    discovery_every: Duration,
    kept: PodsKept,
) {
    let mut policy_seen = policy.load_full();
    cell.change(|view| {
        *view = View::empty(&policy_seen);
        view.watch_namespaces();
    });
    let shared = Arc::new(Shared {
        master: Mutex::new(Master { policy: policy_seen.clone(), relisting: BTreeMap::new(), published: false }),
        cell: cell.clone(),
        fresh: fresh.clone(),
    });
    // Gang kinds served now hold the first view back until they have listed too: they are
    // registered before any required kind can finish its list and publish.
    let mut gang_kinds = optional::GangKinds::default();
    gang_kinds.discover(&client, &shared, policy_seen.gangs.sources).await;
    let mut discovered_at = tokio::time::Instant::now();
    // Terminal pods never hold resources in kube-scheduler's cache either.
    let (relist_pods, relist) = tokio::sync::watch::channel(());
    let running = Some("status.phase!=Succeeded,status.phase!=Failed");
    match kept {
        PodsKept::ForRequeue => {
            tokio::spawn(follow(cached::list_watch::<PodKind>(client.clone(), running, relist), shared.clone()))
        }
        PodsKept::ForDecisions => {
            tokio::spawn(follow(cached::list_watch::<DecisionPodKind>(client.clone(), running, relist), shared.clone()))
        }
    };
    tokio::spawn(follow(watcher_of::<NodeKind>(client.clone()), shared.clone()));
    tokio::spawn(follow(watcher_of::<PdbKind>(client.clone()), shared.clone()));
    tokio::spawn(follow(watcher_of::<PriorityClassKind>(client.clone()), shared.clone()));
    tokio::spawn(follow(watcher_of::<JobKind>(client.clone()), shared.clone()));
    tokio::spawn(follow(watcher_of::<NamespaceKind>(client.clone()), shared.clone()));

    loop {
        tokio::time::sleep(tick).await;
        if discovered_at.elapsed() >= discovery_every {
            gang_kinds.discover(&client, &shared, policy.load().gangs.sources).await;
            discovered_at = tokio::time::Instant::now();
        }
        probe_failing(&client, &fresh).await;
        let now = crate::clock::system_now();
        cell.set_stale(fresh.is_stale(now, STALE_AFTER_SECS));
        cell.read_latest(|v| {
            metrics::gauge!("coloc_view_nodes").set(v.node_count() as f64);
            metrics::gauge!("coloc_view_pods").set(v.pod_count() as f64);
            metrics::gauge!("coloc_view_generation").set(v.generation() as f64);
            optional::record_pod_groups(v);
        });
        let current = policy.load_full();
        if Arc::ptr_eq(&current, &policy_seen) {
            continue;
        }
        let before = std::mem::replace(&mut policy_seen, current.clone());
        // The view keeps of each pod only the annotations the policy reads: one that reads
        // a key the view left out needs every pod read again, once re-indexed.
        let relist = AnnotationsRead::of(&current.gangs).reads_more_than(&AnnotationsRead::of(&before.gangs));
        let sources = current.gangs.sources;
        let shared_now = shared.clone();
        // O(cluster): keep it off the threads that answer requests.
        let _ = tokio::task::spawn_blocking(move || {
            let mut m = shared_now.lock();
            let (nodes, pods) = shared_now.cell.change_long(|view| {
                *view = view.rebuild(&current);
                (view.node_count(), view.pod_count())
            });
            m.policy = current;
            tracing::info!(nodes, pods, "cluster view re-indexed for the new policy");
        })
        .await;
        if relist {
            tracing::info!("pods listed again: the policy reads annotations the view did not keep");
            relist_pods.send_replace(());
        }
        // A gang source switched on or off takes effect now, not at the next discovery.
        gang_kinds.discover(&client, &shared, sources).await;
    }
}
