//! A kind listed from the API server's watch cache, page by page, then watched: what
//! kube-rs' watcher does, with two differences that matter at 150,000 pods.
//!
//! - **Pages come from the watch cache.** kube-rs lists either consistently
//!   (`resourceVersion` unset), which the API server reads from etcd page by page when etcd
//!   lacks `RequestWatchProgress` (below 3.4.31, and 3.5.0–3.5.12; etcd then walks the
//!   remaining keys for every page), or with `resourceVersion=0`, which the API server answers
//!   in one unpaginated body. `resourceVersion=1&resourceVersionMatch=NotOlderThan&limit=N`
//!   is served from the watch cache, page by page (continue tokens too): the same freshness as
//!   kube-scheduler's own informers, which list at `resourceVersion=0`.
//! - **The next page is fetched while the current one is applied**, so the API server
//!   encodes one page while the extender decodes and indexes the one before.
//!
//! Events, errors and back-off are kube-rs' (`watcher::Event`, `watcher::Error`), so the
//! same `follow` consumes either stream.

use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::api::{ListParams, ObjectList, VersionMatch, WatchEvent, WatchParams};
use kube::runtime::watcher::{Error, Event};
use kube::{Api, ResourceExt};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::super::lean::{Lean, LeanKind};

/// Seconds the API server keeps one watch open (kube-rs' default); a watch silent for
/// longer than this and `IDLE_GRACE` is taken for a dropped connection.
const WATCH_TIMEOUT_SECS: u32 = 290;
const IDLE_GRACE: Duration = Duration::from_secs(5);

type Page<K> = Result<ObjectList<Lean<K>>, kube::Error>;
type Watch<K> = BoxStream<'static, kube::Result<WatchEvent<Lean<K>>>>;

/// Where the list-and-watch stands.
enum Stage<K: LeanKind> {
    /// Nothing listed (or the watch expired): list from the first page.
    Unlisted,
    /// A page is on its way; the pages before it have been handed out.
    Listing(JoinHandle<Page<K>>),
    /// Listed up to `rv`: open a watch from there.
    Listed { rv: String },
    Watching { rv: String, stream: Watch<K> },
}

struct State<K: LeanKind> {
    api: Api<Lean<K>>,
    fields: Option<String>,
    page: u32,
    stage: Stage<K>,
    /// Events ready to hand out (a page's objects, then `InitDone`).
    ready: VecDeque<Event<Lean<K>>>,
    backoff: Backoff,
}

/// Every object of `api` matching the field selector `fields`, listed `page` at a time,
/// then every change, as kube-rs' `watcher(…).default_backoff()` would yield them.
pub fn list_watch<K: LeanKind>(api: Api<Lean<K>>, fields: Option<&str>, page: u32) -> impl Stream<Item = Result<Event<Lean<K>>, Error>> + Send {
    let state = State { api, fields: fields.map(str::to_string), page: page.max(1), stage: Stage::Unlisted, ready: VecDeque::new(), backoff: Backoff::default() };
    futures::stream::unfold(state, |mut state| async move {
        let item = state.step().await;
        Some((item, state))
    })
}

impl<K: LeanKind> State<K> {
    fn list_params(&self, continue_token: Option<String>) -> ListParams {
        let mut lp = ListParams { field_selector: self.fields.clone(), limit: Some(self.page), ..Default::default() };
        match continue_token {
            // A continue token carries the list's resourceVersion; the API server refuses both.
            Some(token) => lp.continue_token = Some(token),
            None => {
                lp.resource_version = Some("1".into());
                lp.version_match = Some(VersionMatch::NotOlderThan);
            }
        }
        lp
    }

    fn fetch(&self, continue_token: Option<String>) -> JoinHandle<Page<K>> {
        let api = self.api.clone();
        let lp = self.list_params(continue_token);
        tokio::spawn(async move { api.list(&lp).await })
    }

    fn watch_params(&self) -> WatchParams {
        WatchParams { field_selector: self.fields.clone(), timeout: Some(WATCH_TIMEOUT_SECS), bookmarks: true, ..Default::default() }
    }

    /// The next event or error, after the back-off an error before it asks for.
    async fn step(&mut self) -> Result<Event<Lean<K>>, Error> {
        self.backoff.wait().await;
        let result = self.advance().await;
        if result.is_err() {
            self.backoff.failed();
        }
        result
    }

    async fn advance(&mut self) -> Result<Event<Lean<K>>, Error> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Ok(event);
            }
            match std::mem::replace(&mut self.stage, Stage::Unlisted) {
                Stage::Unlisted => {
                    self.stage = Stage::Listing(self.fetch(None));
                    return Ok(Event::Init);
                }
                Stage::Listing(page) => {
                    let list = match page.await {
                        Ok(Ok(list)) => list,
                        // An expired continue token (410) or any other failure: list again.
                        Ok(Err(e)) => return Err(Error::InitialListFailed(e)),
                        Err(join) => return Err(Error::InitialListFailed(kube::Error::Service(Box::new(join)))),
                    };
                    let token = list.metadata.continue_.clone().filter(|t| !t.is_empty());
                    let rv = list.metadata.resource_version.clone().filter(|v| !v.is_empty());
                    self.stage = match (token, rv) {
                        (Some(token), _) => Stage::Listing(self.fetch(Some(token))),
                        (None, Some(rv)) => Stage::Listed { rv },
                        (None, None) => return Err(Error::NoResourceVersion),
                    };
                    self.ready.extend(list.items.into_iter().map(Event::InitApply));
                    if matches!(self.stage, Stage::Listed { .. }) {
                        self.ready.push_back(Event::InitDone);
                    }
                }
                Stage::Listed { rv } => match self.api.watch(&self.watch_params(), &rv).await {
                    Ok(stream) => self.stage = Stage::Watching { rv, stream: stream.boxed() },
                    Err(e) => {
                        self.stage = Stage::Listed { rv };
                        return Err(Error::WatchStartFailed(e));
                    }
                },
                Stage::Watching { rv, mut stream } => {
                    let next = tokio::time::timeout(Duration::from_secs(WATCH_TIMEOUT_SECS.into()) + IDLE_GRACE, stream.next()).await;
                    match next {
                        Ok(Some(Ok(WatchEvent::Added(obj) | WatchEvent::Modified(obj)))) => {
                            self.stage = Stage::Watching { rv: current_rv(&obj, rv), stream };
                            return Ok(Event::Apply(obj));
                        }
                        Ok(Some(Ok(WatchEvent::Deleted(obj)))) => {
                            self.stage = Stage::Watching { rv: current_rv(&obj, rv), stream };
                            return Ok(Event::Delete(obj));
                        }
                        Ok(Some(Ok(WatchEvent::Bookmark(mark)))) => {
                            let rv = Some(mark.metadata.resource_version).filter(|v| !v.is_empty()).unwrap_or(rv);
                            self.stage = Stage::Watching { rv, stream };
                        }
                        Ok(Some(Ok(WatchEvent::Error(status)))) => {
                            // 410: the cache no longer holds `rv`; only a new list catches up.
                            self.stage = if status.code == 410 { Stage::Unlisted } else { Stage::Listed { rv } };
                            return Err(Error::WatchError(status.boxed()));
                        }
                        Ok(Some(Err(e))) => {
                            self.stage = Stage::Listed { rv };
                            return Err(Error::WatchFailed(e));
                        }
                        // The API server ended the watch (its timeout), or it went silent.
                        Ok(None) | Err(_) => self.stage = Stage::Listed { rv },
                    }
                }
            }
        }
    }
}

impl<K: LeanKind> Drop for State<K> {
    fn drop(&mut self) {
        // A page fetched for a stream nobody reads any more.
        if let Stage::Listing(page) = &self.stage {
            page.abort();
        }
    }
}

fn current_rv<K: LeanKind>(obj: &Lean<K>, last: String) -> String {
    obj.resource_version().filter(|v| !v.is_empty()).unwrap_or(last)
}

/// kube-rs' default back-off: 0.8 s doubling to 30 s, with jitter, forgotten after 120 s
/// without an error.
#[derive(Default)]
struct Backoff {
    delay: Duration,
    last_error: Option<Instant>,
    pending: bool,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(800);
    const MAX: Duration = Duration::from_secs(30);
    const RESET_AFTER: Duration = Duration::from_secs(120);

    fn failed(&mut self) {
        let recent = self.last_error.is_some_and(|t| t.elapsed() < Self::RESET_AFTER);
        self.delay = if recent { (self.delay * 2).min(Self::MAX) } else { Self::FIRST };
        self.last_error = Some(Instant::now());
        self.pending = true;
    }

    async fn wait(&mut self) {
        if std::mem::take(&mut self.pending) {
            // Between half and all of the delay, so replicas that failed together do not
            // come back together.
            let random = foldhash::fast::RandomState::default().hash_one(Instant::now());
            let share = 0.5 + (random % 1000) as f64 / 2000.0;
            tokio::time::sleep(self.delay.mul_f64(share)).await;
        }
    }
}
