//! coloc-echo: the cheapest extender that still speaks the protocol, the floor that
//! `coloc-loop` measures coloc-extender against.
//!
//!     coloc-echo serve --listen 127.0.0.1:8888 --health-listen 127.0.0.1:8889
//!
//! `filter` keeps every node: it echoes `NodeNames` (nodeCacheCapable: true) or the
//! `Nodes` list (false) without decoding them; `prioritize` answers `[]`; `preempt`
//! echoes `NodeNameToMetaVictims` (or, for full victims, their UIDs). The health port
//! answers `/readyz` and `/healthz`. The same `serve --listen --health-listen
//! --admin-listen` as coloc-extender, so the test bed starts either the same way.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use clap::Parser;
use serde::Deserialize;
use serde_json::value::RawValue;

#[derive(Parser, Debug)]
#[command(name = "coloc-echo", about = "An extender that keeps every node (the protocol's floor cost)")]
struct Args {
    /// Only `serve` (as coloc-extender's command line).
    #[arg(value_parser = ["serve"])]
    command: String,
    #[arg(long, default_value = "127.0.0.1:8888")]
    listen: SocketAddr,
    #[arg(long)]
    health_listen: Option<SocketAddr>,
    /// Accepted for the same command line, and ignored: no metrics or decisions to serve.
    #[arg(long)]
    admin_listen: Option<String>,
}

#[derive(Deserialize)]
struct FilterArgs<'a> {
    #[serde(rename = "NodeNames", borrow, default)]
    node_names: Option<&'a RawValue>,
    #[serde(rename = "Nodes", borrow, default)]
    nodes: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct PreemptArgs<'a> {
    #[serde(rename = "NodeNameToMetaVictims", borrow, default)]
    meta: Option<&'a RawValue>,
    #[serde(rename = "NodeNameToVictims", default)]
    full: Option<BTreeMap<String, Victims>>,
}

#[derive(Deserialize)]
struct Victims {
    #[serde(rename = "Pods", default)]
    pods: Vec<VictimPod>,
    #[serde(rename = "NumPDBViolations", default)]
    pdb_violations: i64,
}

#[derive(Deserialize)]
struct VictimPod {
    metadata: VictimMeta,
}

#[derive(Deserialize)]
struct VictimMeta {
    #[serde(default)]
    uid: String,
}

fn json(body: String) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn bad(e: serde_json::Error) -> Response {
    (StatusCode::BAD_REQUEST, e.to_string()).into_response()
}

async fn filter(body: Bytes) -> Response {
    let args: FilterArgs = match serde_json::from_slice(&body) {
        Ok(a) => a,
        Err(e) => return bad(e),
    };
    let kept = match (args.node_names, args.nodes) {
        (Some(names), _) => format!("\"NodeNames\":{}", names.get()),
        (None, Some(nodes)) => format!("\"Nodes\":{}", nodes.get()),
        (None, None) => "\"NodeNames\":[]".to_string(),
    };
    json(format!("{{{kept},\"FailedNodes\":{{}},\"Error\":\"\"}}"))
}

async fn prioritize() -> Response {
    json("[]".to_string())
}

async fn preempt(body: Bytes) -> Response {
    let args: PreemptArgs = match serde_json::from_slice(&body) {
        Ok(a) => a,
        Err(e) => return bad(e),
    };
    let meta = match (args.meta, args.full) {
        (Some(meta), _) => meta.get().to_string(),
        (None, Some(full)) => {
            let meta: BTreeMap<_, _> = full
                .into_iter()
                .map(|(node, v)| {
                    let pods: Vec<_> = v.pods.into_iter().map(|p| serde_json::json!({"UID": p.metadata.uid})).collect();
                    (node, serde_json::json!({"Pods": pods, "NumPDBViolations": v.pdb_violations}))
                })
                .collect();
            serde_json::to_string(&meta).expect("a map of JSON values encodes")
        }
        (None, None) => "{}".to_string(),
    };
    json(format!("{{\"NodeNameToMetaVictims\":{meta}}}"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // Objects-mode filter bodies are several MB at 1,000 nodes: no body limit.
    let verbs = Router::new()
        .route("/filter", post(filter))
        .route("/prioritize", post(prioritize))
        .route("/preempt", post(preempt))
        .layer(DefaultBodyLimit::disable());
    let health = Router::new().route("/readyz", get(|| async { "ok" })).route("/healthz", get(|| async { "ok" }));
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    match args.health_listen {
        Some(addr) => {
            let health_listener = tokio::net::TcpListener::bind(addr).await?;
            tokio::try_join!(axum::serve(listener, verbs), axum::serve(health_listener, health))?;
        }
        None => axum::serve(listener, verbs.merge(health)).await?,
    }
    Ok(())
}
