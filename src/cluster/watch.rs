//! The cluster views from the Kubernetes API: one watch per kind (pods listed from the
//! watch cache by `cached`, the others by kube-rs' watcher), decoded once into the lean
//! model (`lean`), each event handed at once to the view's `Writer`, which applies it to
//! the view staged in its cell, and the very next read gets it. No debounce: a deleted or
//! terminating pod must not be offered as a victim a moment after kube-scheduler's cache
//! dropped it.
//!
//! Each process watches the kinds of the one view it reads. The extender's (`run`): pods as
//! decisions read them, Nodes, PDBs, PriorityClasses, Jobs (required like PDBs: a Job
//! victim is costed by what its preemption does to the Job, and a view without Jobs would
//! cost every Job pod as merely recreated) and Namespaces; gang kinds (PodGroups) while the
//! API server serves them (`optional`). The requeue controller's (`run_requeue`): pods with
//! what requeue copies from, PriorityClasses and Namespaces.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use futures::{Stream, StreamExt};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};

use super::lean::{
    DecisionPodKind, JobKind, Lean, LeanKind, NamespaceKind, NodeKind, PdbKind, PodKind, PriorityClassKind,
};
use super::writer::{Store, Takes, Writer};
use super::{RequeueCell, ViewCell};
use crate::policy::{AnnotationsRead, GangSources, Policy};

/// Seconds a watch may fail before the view counts as stale: `/readyz` turns 503 and
/// decisions fall back to each class's `withoutView` behaviour.
pub const STALE_AFTER_SECS: i64 = 30;

mod cached;
mod optional;

/// How often the API server is asked again which gang kinds it serves (a CRD installed
/// later is picked up, one removed is dropped).
pub const DISCOVERY_EVERY: Duration = Duration::from_secs(180);

/// The kinds the decisions' view is built from; it is published once every one has synced
/// (and the gang kinds served at start-up).
pub const KINDS: [&str; 6] =
    [PodKind::KIND, NodeKind::KIND, PdbKind::KIND, PriorityClassKind::KIND, JobKind::KIND, NamespaceKind::KIND];

/// The kinds the requeue controller's view is built from.
pub const REQUEUE_KINDS: [&str; 3] = [PodKind::KIND, PriorityClassKind::KIND, NamespaceKind::KIND];

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
    /// The kinds the view needs (`KINDS` until a watch says otherwise).
    required: Mutex<Option<&'static [&'static str]>>,
}

impl Freshness {
    /// The view being watched needs `kinds` (besides the gang kinds it watches).
    fn require(&self, kinds: &'static [&'static str]) {
        *self.required.lock().unwrap_or_else(|e| e.into_inner()) = Some(kinds);
    }

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

    /// Kinds the view needs (`KINDS` for the decisions' view), and gang kinds being
    /// watched, that have not completed their first list.
    pub fn unsynced_kinds(&self) -> Vec<&'static str> {
        let required = self.required.lock().unwrap_or_else(|e| e.into_inner()).unwrap_or(&KINDS);
        let kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        let optional = kinds.iter().filter(|(_, h)| h.optional).map(|(k, _)| *k);
        required.iter().copied().chain(optional).filter(|k| !kinds.get(k).is_some_and(|h| h.synced)).collect()
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

/// What the watches of one view share: their bookkeeping, and the view's writer.
struct Shared<S> {
    master: Mutex<Master>,
    writer: Writer<S>,
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

impl<S: Store> Shared<S> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Master> {
        self.master.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens the staged view to readers once every kind has synced.
    fn open_when_synced(&self, m: &mut Master) {
        if !m.published && self.fresh.all_synced() {
            m.published = true;
            self.writer.open();
        }
    }
}

/// Applies one object: its model, or, if it could not be converted, its removal (a pod
/// the view cannot read is never offered as a victim), logged and counted. `clock_ms`:
/// when it was received (0 where that is not when it changed: a re-list's objects).
fn apply_one<S: Takes<K>, K: LeanKind>(writer: &Writer<S>, policy: &Policy, obj: Lean<K>, clock_ms: i64) {
    match obj.model {
        Ok(model) => writer.apply::<K>(model, clock_ms, policy),
        Err(ref e) => {
            let key = obj.key();
            metrics::counter!("coloc_watch_conversion_errors_total", "kind" => K::LABEL).increment(1);
            tracing::warn!(kind = K::LABEL, object = %key, error = %e, "cannot read object; left out of the cluster view");
            writer.leave_out::<K>(&key, policy);
        }
    }
}

fn handle<S: Takes<K>, K: LeanKind>(shared: &Shared<S>, event: Event<Lean<K>>) {
    let mut m = shared.lock();
    let policy = m.policy.clone();
    match event {
        Event::Init => {
            let held = shared.writer.holds_any::<K>();
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
            apply_one(&shared.writer, &policy, obj, 0);
            // Until the first sync readers see nothing; during a later re-list, upserts
            // are current state and are seen as they come.
        }
        Event::InitDone => {
            let listed = m.relisting.remove(K::LABEL).unwrap_or_default();
            let removed = match listed.keys {
                // O(objects of the kind): a re-list of every pod must not hold readers up.
                Some(keys) => shared.writer.remove_unlisted::<K>(&keys, &policy),
                None => 0,
            };
            shared.fresh.synced(K::LABEL);
            tracing::info!(kind = K::LABEL, objects = listed.objects, removed, "watch listed");
        }
        Event::Apply(obj) => apply_one(&shared.writer, &policy, obj, crate::clock::system_now_ms()),
        Event::Delete(obj) => {
            let now = crate::clock::system_now_ms();
            shared.writer.delete::<K>(&obj.key(), obj.model.as_ref().ok(), now, &policy)
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
async fn follow<S: Takes<K>, K: LeanKind>(
    events: impl Stream<Item = Result<Event<Lean<K>>, watcher::Error>> + Send + 'static,
    shared: Arc<Shared<S>>,
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

/// Kinds a view watches only while the API server serves them: the decisions' gang kinds
/// (`optional::GangKinds`); none for the requeue controller's view (`Required`).
trait Optional<S> {
    /// Starts watching the kinds now served (and enabled), stops the others.
    async fn discover(&mut self, client: &Client, shared: &Arc<Shared<S>>, sources: GangSources);
}

/// A view built from required kinds alone.
struct Required;

impl<S> Optional<S> for Required {
    async fn discover(&mut self, _: &Client, _: &Arc<Shared<S>>, _: GangSources) {}
}

/// The watches of one view, their bookkeeping started from an empty view for `policy`.
fn start<S: Store>(cell: Arc<super::StoreCell<S>>, policy: &Arc<Policy>, fresh: &Arc<Freshness>) -> Arc<Shared<S>> {
    let writer = Writer::new(cell);
    writer.reset(policy);
    Arc::new(Shared {
        master: Mutex::new(Master { policy: policy.clone(), relisting: BTreeMap::new(), published: false }),
        writer,
        fresh: fresh.clone(),
    })
}

/// Runs the watches of the decisions' view until the process ends. Install the metrics
/// recorder first: each watch registers its counters once, as it starts. Readers see the
/// view once every kind has synced; after that every event, at their next read. A policy
/// change re-indexes the view off the async runtime. Staleness is checked every `tick`;
/// gang kinds are discovered every `DISCOVERY_EVERY`.
pub async fn run(
    client: Client,
    cell: Arc<ViewCell>,
    policy: Arc<ArcSwap<Policy>>,
    fresh: Arc<Freshness>,
    tick: Duration,
) {
    run_with(client, cell, policy, fresh, tick, DISCOVERY_EVERY).await
}

/// `run`, with the interval between gang-kind discoveries.
pub async fn run_with(
    client: Client,
    cell: Arc<ViewCell>,
    policy: Arc<ArcSwap<Policy>>,
    fresh: Arc<Freshness>,
    tick: Duration,
    discovery_every: Duration,
) {
    let policy_seen = policy.load_full();
    fresh.require(&KINDS);
    let shared = start(cell, &policy_seen, &fresh);
    // Gang kinds served now hold the first view back until they have listed too: they are
    // registered before any required kind can finish its list and publish.
    let mut gang_kinds = optional::GangKinds::default();
    gang_kinds.discover(&client, &shared, policy_seen.gangs.sources).await;
    let (relist_pods, relist) = tokio::sync::watch::channel(());
    // Terminal pods never hold resources in kube-scheduler's cache either.
    tokio::spawn(follow(cached::list_watch::<DecisionPodKind>(client.clone(), RUNNING, relist), shared.clone()));
    tokio::spawn(follow(watcher_of::<NodeKind>(client.clone()), shared.clone()));
    tokio::spawn(follow(watcher_of::<PdbKind>(client.clone()), shared.clone()));
    tokio::spawn(follow(watcher_of::<PriorityClassKind>(client.clone()), shared.clone()));
    tokio::spawn(follow(watcher_of::<JobKind>(client.clone()), shared.clone()));
    tokio::spawn(follow(watcher_of::<NamespaceKind>(client.clone()), shared.clone()));
    let watches = Watches { client, shared, policy, policy_seen, tick, discovery_every, relist_pods };
    watches.keep_current(gang_kinds).await
}

/// Runs the watches of the requeue controller's view until the process ends: pods, kept
/// with what requeue copies a marked pod from (its bytes, its spec's digest),
/// PriorityClasses and Namespaces. As `run` otherwise.
pub async fn run_requeue(
    client: Client,
    cell: Arc<RequeueCell>,
    policy: Arc<ArcSwap<Policy>>,
    fresh: Arc<Freshness>,
    tick: Duration,
) {
    let policy_seen = policy.load_full();
    fresh.require(&REQUEUE_KINDS);
    let shared = start(cell, &policy_seen, &fresh);
    let (relist_pods, relist) = tokio::sync::watch::channel(());
    tokio::spawn(follow(cached::list_watch::<PodKind>(client.clone(), RUNNING, relist), shared.clone()));
    tokio::spawn(follow(watcher_of::<PriorityClassKind>(client.clone()), shared.clone()));
    tokio::spawn(follow(watcher_of::<NamespaceKind>(client.clone()), shared.clone()));
    let watches = Watches { client, shared, policy, policy_seen, tick, discovery_every: DISCOVERY_EVERY, relist_pods };
    watches.keep_current(Required).await
}

/// Pods that still run or wait: a terminal pod leaves both views.
const RUNNING: Option<&str> = Some("status.phase!=Succeeded,status.phase!=Failed");

/// What keeps a view's watches current once they run.
struct Watches<S> {
    client: Client,
    shared: Arc<Shared<S>>,
    policy: Arc<ArcSwap<Policy>>,
    /// The policy the view is indexed under.
    policy_seen: Arc<Policy>,
    tick: Duration,
    discovery_every: Duration,
    /// Asks the pod watch for a new list.
    relist_pods: tokio::sync::watch::Sender<()>,
}

impl<S: Store> Watches<S> {
    /// Every `tick`: the optional kinds discovered when due, failing kinds probed,
    /// staleness and gauges set, and the view re-indexed for a new policy.
    async fn keep_current(mut self, mut optional: impl Optional<S>) {
        let mut discovered_at = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.tick).await;
            if discovered_at.elapsed() >= self.discovery_every {
                optional.discover(&self.client, &self.shared, self.policy.load().gangs.sources).await;
                discovered_at = tokio::time::Instant::now();
            }
            let fresh = &self.shared.fresh;
            probe_failing(&self.client, fresh).await;
            self.shared.writer.set_stale(fresh.is_stale(crate::clock::system_now(), STALE_AFTER_SECS));
            self.shared.writer.record();
            let current = self.policy.load_full();
            if Arc::ptr_eq(&current, &self.policy_seen) {
                continue;
            }
            let before = std::mem::replace(&mut self.policy_seen, current.clone());
            self.reindex(current.clone()).await;
            // The view keeps of each pod only the annotations the policy reads: one that
            // reads a key the view left out needs every pod read again, once re-indexed.
            if AnnotationsRead::of(&current.gangs).reads_more_than(&AnnotationsRead::of(&before.gangs)) {
                tracing::info!("pods listed again: the policy reads annotations the view did not keep");
                self.relist_pods.send_replace(());
            }
            // A gang source switched on or off takes effect now, not at the next discovery.
            optional.discover(&self.client, &self.shared, current.gangs.sources).await;
        }
    }

    /// Re-indexes the view under `policy`: O(cluster), kept off the threads that answer
    /// requests.
    async fn reindex(&self, policy: Arc<Policy>) {
        let shared = self.shared.clone();
        let _ = tokio::task::spawn_blocking(move || {
            let mut m = shared.lock();
            shared.writer.rebuild(&policy);
            m.policy = policy;
            tracing::info!("cluster view re-indexed for the new policy");
        })
        .await;
    }
}
