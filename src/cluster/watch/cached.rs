//! A kind listed from the API server's watch cache in one streamed body, then watched:
//! what kube-rs' watcher does, with two differences that matter at 150,000 pods.
//!
//! - **The list comes from the watch cache.** kube-rs lists either consistently
//!   (`resourceVersion` unset), which the API server reads from etcd page by page when etcd
//!   lacks `RequestWatchProgress` (below 3.4.31, and 3.5.0–3.5.12; etcd then walks the
//!   remaining keys for every page), or with `resourceVersion=0`, which the API server serves
//!   from its watch cache in one unpaginated body. Pages from the cache cost the API server
//!   more for every page (measured at 150,000 pods: 7.7 CPU-s in pages of 2,000, 14 in pages
//!   of 500, 4.2–4.7 unpaginated), and their continue tokens were refused (410) once the
//!   cluster was older than etcd's compaction. `resourceVersion=0` is also what kube-scheduler's own
//!   informers list with: the view is exactly as fresh as its cache.
//! - **The body is decoded as it arrives, item by item** (`wire::list_items`), while the API
//!   server is still encoding the rest, and is never held whole (260 MB of JSON at 150,000
//!   pods).
//!
//! Events and errors are kube-rs' (`watcher::Event`, `watcher::Error`), so the same
//! `follow`, with kube-rs' back-off, consumes either stream.

use std::collections::VecDeque;
use std::time::Duration;

use futures::io::{AsyncBufRead, AsyncBufReadExt};
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::runtime::watcher::{Error, Event};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Deserialize;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::super::lean::{Lean, LeanKind};
use crate::wire::list_items::{ListSplitter, Piece};

/// Seconds the API server keeps one watch open (kube-rs' default); a watch silent for
/// longer than this and `IDLE_GRACE` is taken for a dropped connection.
const WATCH_TIMEOUT_SECS: u32 = 290;
const IDLE_GRACE: Duration = Duration::from_secs(5);

/// The largest single object accepted in a list (etcd's default limit is 1.5 MiB).
const MAX_OBJECT_BYTES: usize = 16 << 20;

/// Batches of decoded objects in flight between the reader and the view (one batch per
/// chunk of the body, tens of objects): bounds memory when the view falls behind, and
/// makes the API server wait rather than the extender buffer.
const BATCHES_IN_FLIGHT: usize = 8;

type Watch<K> = BoxStream<'static, kube::Result<WatchEvent<Lean<K>>>>;

/// What the list reader hands over, in order.
enum Listed<K: LeanKind> {
    Objects(Vec<Lean<K>>),
    Done { rv: Option<String> },
    Failed(kube::Error),
}

/// Where the list-and-watch stands.
enum Stage<K: LeanKind> {
    /// Nothing listed (or the watch expired): list.
    Unlisted,
    /// The list is being read; what it decoded so far comes through `objects`.
    Listing {
        objects: mpsc::Receiver<Listed<K>>,
        reader: JoinHandle<()>,
    },
    /// Listed up to `rv`: open a watch from there.
    Listed {
        rv: String,
    },
    Watching {
        rv: String,
        stream: Watch<K>,
    },
}

struct State<K: LeanKind> {
    client: Client,
    api: Api<Lean<K>>,
    fields: Option<String>,
    stage: Stage<K>,
    /// Asks for the whole list again: the view now keeps more of each object than it
    /// kept of those it has.
    relist: watch::Receiver<()>,
    /// Events ready to hand out (a batch's objects, then `InitDone`).
    ready: VecDeque<Event<Lean<K>>>,
}

/// Every object of `K` matching the field selector `fields`, then every change, as kube-rs'
/// `watcher(…)` would yield them (`follow` adds its back-off); all of them again from a
/// new list whenever `relist` is sent to.
pub fn list_watch<K: LeanKind>(
    client: Client,
    fields: Option<&str>,
    relist: watch::Receiver<()>,
) -> impl Stream<Item = Result<Event<Lean<K>>, Error>> + Send {
    let state = State {
        api: Api::all(client.clone()),
        client,
        fields: fields.map(str::to_string),
        stage: Stage::Unlisted,
        relist,
        ready: VecDeque::new(),
    };
    futures::stream::unfold(state, |mut state| async move {
        let item = state.advance().await;
        Some((item, state))
    })
}

/// `GET …?resourceVersion=0`: the whole list from the watch cache, decoded as it comes.
async fn read_list<K: LeanKind>(client: Client, request: axum::http::Request<Vec<u8>>, out: mpsc::Sender<Listed<K>>) {
    let end = match read_list_into(&client, request, &out).await {
        Ok(rv) => Listed::Done { rv },
        Err(e) => Listed::Failed(e),
    };
    let _ = out.send(end).await;
}

#[derive(Deserialize)]
struct ListMeta {
    #[serde(default, rename = "resourceVersion")]
    resource_version: Option<String>,
}

async fn read_list_into<K: LeanKind>(
    client: &Client,
    request: axum::http::Request<Vec<u8>>,
    out: &mpsc::Sender<Listed<K>>,
) -> kube::Result<Option<String>> {
    let mut body = Box::pin(client.request_stream(request).await?);
    let mut splitter = ListSplitter::new(MAX_OBJECT_BYTES);
    let mut rv = None;
    loop {
        let chunk = body.fill_buf().await.map_err(kube::Error::ReadEvents)?;
        if chunk.is_empty() {
            break;
        }
        let mut batch = Vec::new();
        splitter.push::<kube::Error>(chunk, |piece| {
            match piece {
                Piece::Metadata(bytes) => {
                    rv = serde_json::from_slice::<ListMeta>(bytes).map_err(kube::Error::SerdeError)?.resource_version
                }
                Piece::Item(bytes) => {
                    batch.push(serde_json::from_slice::<Lean<K>>(bytes).map_err(kube::Error::SerdeError)?)
                }
            }
            Ok(())
        })?;
        let read = chunk.len();
        body.as_mut().consume(read);
        if !batch.is_empty() && out.send(Listed::Objects(batch)).await.is_err() {
            // Nobody reads any more.
            return Ok(None);
        }
    }
    splitter.finish()?;
    Ok(rv)
}

impl From<crate::wire::list_items::SplitError> for kube::Error {
    fn from(e: crate::wire::list_items::SplitError) -> Self {
        kube::Error::ReadEvents(std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }
}

impl<K: LeanKind> State<K> {
    fn list_request(&self) -> kube::Result<axum::http::Request<Vec<u8>>> {
        // No limit: with one, the API server would ignore `resourceVersion=0` (kube-rs drops it).
        let lp = ListParams {
            field_selector: self.fields.clone(),
            resource_version: Some("0".into()),
            ..Default::default()
        };
        kube::core::Request::new(Lean::<K>::url_path(&(), None)).list(&lp).map_err(kube::Error::BuildRequest)
    }

    fn watch_params(&self) -> WatchParams {
        WatchParams {
            field_selector: self.fields.clone(),
            timeout: Some(WATCH_TIMEOUT_SECS),
            bookmarks: true,
            ..Default::default()
        }
    }

    async fn advance(&mut self) -> Result<Event<Lean<K>>, Error> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Ok(event);
            }
            match std::mem::replace(&mut self.stage, Stage::Unlisted) {
                Stage::Unlisted => {
                    // This list reads everything: a new one asked for until now is this one.
                    self.relist.borrow_and_update();
                    let request = self.list_request().map_err(Error::InitialListFailed)?;
                    let (tx, objects) = mpsc::channel(BATCHES_IN_FLIGHT);
                    let reader = tokio::spawn(read_list(self.client.clone(), request, tx));
                    self.stage = Stage::Listing { objects, reader };
                    return Ok(Event::Init);
                }
                Stage::Listing { mut objects, reader } => {
                    // Asked to list again: this list goes (what it read is read again).
                    let Some(listed) = next_or_relist(objects.recv(), &mut self.relist).await else {
                        reader.abort();
                        continue;
                    };
                    match listed {
                        Some(Listed::Objects(batch)) => {
                            self.ready.extend(batch.into_iter().map(Event::InitApply));
                            self.stage = Stage::Listing { objects, reader };
                        }
                        Some(Listed::Done { rv: Some(rv) }) if !rv.is_empty() => {
                            self.stage = Stage::Listed { rv };
                            return Ok(Event::InitDone);
                        }
                        Some(Listed::Done { .. }) => return Err(Error::NoResourceVersion),
                        Some(Listed::Failed(e)) => return Err(Error::InitialListFailed(e)),
                        None => {
                            return Err(Error::InitialListFailed(kube::Error::Service(
                                "the list reader stopped".into(),
                            )))
                        }
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
                    let within = Duration::from_secs(WATCH_TIMEOUT_SECS.into()) + IDLE_GRACE;
                    // Asked to list again: the watch goes, and a new list begins.
                    let Some(next) =
                        next_or_relist(tokio::time::timeout(within, stream.next()), &mut self.relist).await
                    else {
                        continue;
                    };
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

/// `next`'s output, or `None` once a new list is asked for (never, if nobody can ask).
async fn next_or_relist<T>(next: impl std::future::Future<Output = T>, relist: &mut watch::Receiver<()>) -> Option<T> {
    tokio::pin!(next);
    tokio::select! {
        out = &mut next => Some(out),
        // A closed channel disables this branch: `next` alone is awaited.
        Ok(()) = relist.changed() => None,
    }
}

impl<K: LeanKind> Drop for State<K> {
    fn drop(&mut self) {
        // A list read for a stream nobody reads any more.
        if let Stage::Listing { reader, .. } = &self.stage {
            reader.abort();
        }
    }
}

fn current_rv<K: LeanKind>(obj: &Lean<K>, last: String) -> String {
    obj.resource_version().filter(|v| !v.is_empty()).unwrap_or(last)
}
