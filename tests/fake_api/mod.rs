//! An in-memory, loopback-only fake Kubernetes API server for integration tests.
//!
//! It speaks the subset of the API that kube-rs uses: list (with label and field selectors),
//! watch (resumable from any resourceVersion, with the selector transitions of the real watch
//! cache), get, create, patch (merge, strategic merge treated as merge, JSON patch, server-side
//! apply treated as merge), update, delete (with preconditions), and the pod `status`,
//! `eviction` and `binding` subresources, TokenReviews and SubjectAccessReviews
//! (`reviews.rs`). Faults, delays, broken and expired watches can be
//! injected, and every request is recorded.
//!
//! Use it from a test file with `mod fake_api;`. Add kinds in `resources.rs`, one line each.
//!
//! It is for correctness: it keeps every object and its history, so that writes, resumed
//! watches and faults behave as the API server's. `coloc-viewload` (bench/) has a fake of
//! its own for size: it stores nothing and renders a cluster of any size on the fly,
//! because it runs in the process it measures, where all this one holds would be counted.
#![allow(dead_code)]

pub mod patch;
pub mod resources;
pub mod reviews;
pub mod selectors;
pub mod server;
pub mod store;
pub mod watch;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use store::{Fault, Store};

/// State shared by the handle and the server: the store, and a tick bumped on every change
/// that watch streams wait on.
pub struct Shared {
    pub store: Mutex<Store>,
    pub tick: tokio::sync::watch::Sender<u64>,
    /// Who tokens are and what they may get (`reviews.rs`).
    pub reviews: Mutex<reviews::Reviews>,
}

impl Shared {
    /// Wakes watch streams; call after changing the store (outside or inside its lock).
    pub fn notify(&self) {
        self.tick.send_modify(|t| *t = t.wrapping_add(1));
    }

    fn with<T>(&self, f: impl FnOnce(&mut Store) -> T) -> T {
        let out = f(&mut self.store.lock().unwrap());
        self.notify();
        out
    }
}

/// A fake API server on 127.0.0.1. Dropping it closes open watches and stops the server.
pub struct FakeApi {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl FakeApi {
    /// Binds 127.0.0.1:0 and spawns the server on the current tokio runtime.
    pub async fn start() -> FakeApi {
        let shared = Arc::new(Shared {
            store: Mutex::new(Store::default()),
            tick: tokio::sync::watch::channel(0).0,
            reviews: Mutex::default(),
        });
        let app = axum::Router::new().fallback(server::handle).with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local address");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = rx.await;
                })
                .await;
        });
        FakeApi { addr, shared, shutdown: Some(tx) }
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kube client for this server.
    pub fn client(&self) -> kube::Client {
        kube::Client::try_from(kube::Config::new(self.url().parse().expect("a valid URL"))).expect("a kube client")
    }

    /// Seeds objects, e.g. the `items` of a `kubectl get ... -o json` List (each with `kind`
    /// and `apiVersion`). Fills uid and creationTimestamp when missing; keeps a numeric
    /// resourceVersion when it is newer than every write so far, else assigns the next one.
    /// Watchers see ADDED (or MODIFIED when replacing).
    pub fn seed(&self, items: &[Value]) {
        self.shared.with(|st| {
            for item in items {
                st.seed(item.clone());
            }
        });
    }

    /// Creates or replaces an object (by kind, namespace, name; namespaced objects without a
    /// namespace go to "default") at the next resourceVersion, emitting ADDED or MODIFIED.
    /// Returns the stored object.
    pub fn apply(&self, obj: Value) -> Value {
        self.shared.with(|st| st.put(obj))
    }

    /// Removes an object (namespace is ignored for cluster-scoped kinds), emitting DELETED.
    pub fn remove(&self, kind: &str, namespace: &str, name: &str) -> bool {
        self.shared.with(|st| st.remove(kind, namespace, name))
    }

    pub fn get(&self, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        self.shared.store.lock().unwrap().get(kind, namespace, name)
    }

    /// Every stored object of this kind, ordered by namespace and name.
    pub fn list(&self, kind: &str) -> Vec<Value> {
        self.shared.store.lock().unwrap().list_kind(kind)
    }

    /// Stops serving `group/version` (a CRD uninstalled, an API version switched off):
    /// discovery and its paths answer 404. Stored objects stay, for when it is served again.
    pub fn unserve(&self, api_version: &str) {
        self.shared.store.lock().unwrap().unserved.insert(api_version.to_string());
        self.break_watches();
    }

    /// Serves `group/version` again (a CRD installed).
    pub fn serve(&self, api_version: &str) {
        self.shared.store.lock().unwrap().unserved.remove(api_version);
    }

    /// Makes the next `times` matching requests (u32::MAX: until cleared) fail with `status`
    /// and a Status body whose reason derives from it. `verb` is "list", "watch", "get",
    /// "create", "patch", "update", "delete" (or "evict", "bind", "deletecollection");
    /// either argument may be "*" to match anything.
    pub fn fail(&self, verb: &str, kind: &str, status: u16, times: u32) {
        if times > 0 {
            self.shared.store.lock().unwrap().faults.push(Fault {
                verb: verb.into(),
                kind: kind.into(),
                status,
                remaining: times,
            });
        }
    }

    /// Delays matching requests (after recording them, before answering). A later call for
    /// the same verb and kind replaces the delay; Duration::ZERO removes it. "*" matches anything.
    pub fn delay(&self, verb: &str, kind: &str, by: Duration) {
        let mut st = self.shared.store.lock().unwrap();
        st.delays.retain(|(v, k, _)| !(v == verb && k == kind));
        if by > Duration::ZERO {
            st.delays.push((verb.into(), kind.into(), by));
        }
    }

    /// Removes every fault and delay.
    pub fn clear_faults(&self) {
        let mut st = self.shared.store.lock().unwrap();
        st.faults.clear();
        st.delays.clear();
    }

    /// Ends every open watch stream cleanly; clients re-watch from their last resourceVersion.
    pub fn break_watches(&self) {
        self.shared.with(|st| st.break_gen += 1);
    }

    /// Sends every open watch an ERROR event with code 410 (Expired) and ends it, and makes
    /// later watches that resume from a resourceVersion get the same until that kind is listed
    /// again (or watched from "now"), so clients re-list.
    pub fn expire_watches(&self) {
        self.shared.with(|st| {
            st.expire_gen += 1;
            st.expired = (0..resources::RESOURCES.len()).collect();
        });
    }

    /// Every request so far: (method, path, query), the query percent-decoded.
    pub fn requests(&self) -> Vec<(String, String, String)> {
        self.shared
            .store
            .lock()
            .unwrap()
            .requests
            .iter()
            .map(|r| (r.method.clone(), r.path.clone(), r.query.clone()))
            .collect()
    }

    /// Requests so far with this verb on this kind ("*" matches anything), faulted ones included.
    pub fn count(&self, verb: &str, kind: &str) -> usize {
        let hit = |p: &str, v: &str| p == "*" || p == v;
        self.shared.store.lock().unwrap().requests.iter().filter(|r| hit(verb, &r.verb) && hit(kind, &r.kind)).count()
    }

    /// The current (latest) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.store.lock().unwrap().rv
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        if let Ok(mut st) = self.shared.store.lock() {
            st.closed = true;
        }
        self.shared.notify();
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Polls `ok` every 25 ms for up to 5 s; true once it holds.
pub async fn wait_until(mut ok: impl FnMut() -> bool) -> bool {
    for _ in 0..200 {
        if ok() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    false
}
