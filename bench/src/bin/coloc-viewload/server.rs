//! The fake API server: lists and watches only, rendered from the pod index, nothing
//! stored.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::serve::ListenerExt;
use axum::Router;
use tokio::sync::mpsc;

use crate::cluster::{
    batch_pods_in, write_namespace, write_node, write_pdb, write_pod, write_priority_class, Spec, NAMESPACES,
    PRIORITY_CLASSES,
};

// Lists and watches only, rendered from the pod index: nothing stored (see the top).

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    Pod,
    Node,
    Pdb,
    PriorityClass,
    /// Served empty: the synthetic cluster has no Jobs (the view requires the kind).
    Job,
    /// The pods' namespaces (the view requires the kind).
    Namespace,
}

pub(crate) struct Server {
    pub(crate) spec: Spec,
    pub(crate) current_healthy: bool,
    /// The Pod watch's event feed: taken by the first Pod watch request.
    pub(crate) pod_feed: Mutex<Option<mpsc::Receiver<Bytes>>>,
    pub(crate) pod_watch_open: AtomicBool,
    /// Watch requests beyond the first per kind: reconnects (there should be none).
    pub(crate) rewatches: AtomicUsize,
    pub(crate) watches: Mutex<HashMap<&'static str, usize>>,
    pub(crate) list_requests: AtomicUsize,
    pub(crate) list_bytes: AtomicU64,
    pub(crate) pod_list_bytes: AtomicU64,
    /// Time spent rendering list pages (server side of the initial sync).
    pub(crate) render_ns: AtomicU64,
}

impl Server {
    pub(crate) fn count(&self, kind: Kind) -> usize {
        match kind {
            Kind::Pod => self.spec.pods(),
            Kind::Node => self.spec.nodes,
            Kind::Pdb => NAMESPACES,
            Kind::PriorityClass => PRIORITY_CLASSES.len(),
            Kind::Job => 0,
            Kind::Namespace => NAMESPACES,
        }
    }
}

pub(crate) const LIST_RV: u64 = 1000;

pub(crate) async fn list_or_watch(
    State((server, kind)): State<(Arc<Server>, Kind)>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if matches!(q.get("watch").map(String::as_str), Some("true" | "1")) {
        {
            let name = match kind {
                Kind::Pod => "Pod",
                Kind::Node => "Node",
                Kind::Pdb => "PodDisruptionBudget",
                Kind::PriorityClass => "PriorityClass",
                Kind::Job => "Job",
                Kind::Namespace => "Namespace",
            };
            let mut w = server.watches.lock().unwrap();
            let n = w.entry(name).or_default();
            *n += 1;
            if *n > 1 {
                server.rewatches.fetch_add(1, Ordering::Relaxed);
            }
        }
        let feed = if kind == Kind::Pod { server.pod_feed.lock().unwrap().take() } else { None };
        return match feed {
            Some(rx) => {
                server.pod_watch_open.store(true, Ordering::SeqCst);
                let stream = futures::stream::unfold(rx, |mut rx| async move {
                    rx.recv().await.map(|b| (Ok::<_, std::io::Error>(b), rx))
                });
                Body::from_stream(stream).into_response()
            }
            // Nothing changes: the stream stays open.
            None => Body::from_stream(futures::stream::pending::<Result<Bytes, std::io::Error>>()).into_response(),
        };
    }
    let total = server.count(kind);
    let from: usize = q.get("continue").and_then(|c| c.parse().ok()).unwrap_or(0).min(total);
    let limit: usize = q.get("limit").and_then(|l| l.parse().ok()).filter(|l| *l > 0).unwrap_or(usize::MAX);
    let to = from.saturating_add(limit).min(total);
    let (api_version, list_kind) = match kind {
        Kind::Pod => ("v1", "PodList"),
        Kind::Node => ("v1", "NodeList"),
        Kind::Pdb => ("policy/v1", "PodDisruptionBudgetList"),
        Kind::PriorityClass => ("scheduling.k8s.io/v1", "PriorityClassList"),
        Kind::Job => ("batch/v1", "JobList"),
        Kind::Namespace => ("v1", "NamespaceList"),
    };
    let cont = if to < total { format!(r#","continue":"{to}""#) } else { String::new() };
    let header = format!(
        r#"{{"apiVersion":"{api_version}","kind":"{list_kind}","metadata":{{"resourceVersion":"{LIST_RV}"{cont}}},"items":["#
    );
    server.list_requests.fetch_add(1, Ordering::Relaxed);
    // Streamed a chunk at a time, as the API server streams a list it serves from its
    // watch cache: an unpaginated list of 150,000 pods is never one string here either.
    let chunks = futures::stream::unfold(Some(from), move |next| {
        let (server, header) = (server.clone(), header.clone());
        async move {
            let start = next?;
            let started = Instant::now();
            let end = (start + ITEMS_PER_CHUNK).min(to);
            let mut out = String::with_capacity((end - start) * 3300 + 256);
            if start == from {
                out.push_str(&header);
            }
            for i in start..end {
                if i > from {
                    out.push(',');
                }
                match kind {
                    Kind::Pod => write_pod(&mut out, server.spec, i, 100 + i as u64 % 800, None),
                    Kind::Node => write_node(&mut out, i, 100 + i as u64 % 800),
                    Kind::Pdb => write_pdb(&mut out, i, server.current_healthy.then(|| batch_pods_in(server.spec, i))),
                    Kind::PriorityClass => write_priority_class(&mut out, i),
                    Kind::Job => unreachable!("no Jobs are served"),
                    Kind::Namespace => write_namespace(&mut out, i),
                }
            }
            let next = if end < to {
                Some(end)
            } else {
                out.push_str("]}");
                None
            };
            server.list_bytes.fetch_add(out.len() as u64, Ordering::Relaxed);
            if kind == Kind::Pod {
                server.pod_list_bytes.fetch_add(out.len() as u64, Ordering::Relaxed);
            }
            server.render_ns.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
            Some((Ok::<_, std::io::Error>(Bytes::from(out)), next))
        }
    });
    ([("content-type", "application/json")], Body::from_stream(chunks)).into_response()
}

/// Items rendered per chunk of a streamed list body.
pub(crate) const ITEMS_PER_CHUNK: usize = 500;

pub(crate) async fn start_server(server: Arc<Server>) -> anyhow::Result<SocketAddr> {
    let app = Router::new()
        .route("/api/v1/pods", get(list_or_watch).with_state((server.clone(), Kind::Pod)))
        .route("/api/v1/nodes", get(list_or_watch).with_state((server.clone(), Kind::Node)))
        .route("/apis/policy/v1/poddisruptionbudgets", get(list_or_watch).with_state((server.clone(), Kind::Pdb)))
        .route(
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            get(list_or_watch).with_state((server.clone(), Kind::PriorityClass)),
        )
        .route("/apis/batch/v1/jobs", get(list_or_watch).with_state((server.clone(), Kind::Job)))
        .route("/api/v1/namespaces", get(list_or_watch).with_state((server, Kind::Namespace)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    // Like the real API server (Go sets TCP_NODELAY by default): without it, Nagle's
    // algorithm and the client's delayed ACKs hold small watch events back for up to 40 ms.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(addr)
}
