//! The HTTP surface: path routing, verbs, the request log, faults, and responses.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::resources::{self, RESOURCES};
use super::selectors::{FieldSelector, LabelSelector};
use super::store::{ApiError, Recorded};
use super::watch::{expired_event, initial_events_end, Filter, Watch};
use super::Shared;

/// A resource path: `/api/v1/...` or `/apis/{group}/{version}/...`.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub res: usize,
    pub ns: Option<String>,
    pub name: Option<String>,
    pub sub: Option<String>,
}

pub fn parse_path(path: &str) -> Option<Target> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return None,
    };
    let owned = |s: &&str| s.to_string();
    if let ["namespaces", ns, plural, tail @ ..] = rest {
        if let Some(res) = resources::by_path(group, version, plural).filter(|&r| RESOURCES[r].namespaced) {
            if tail.len() <= 2 {
                return Some(Target {
                    res,
                    ns: Some(ns.to_string()),
                    name: tail.first().map(owned),
                    sub: tail.get(1).map(owned),
                });
            }
            return None;
        }
    }
    match rest {
        [plural, tail @ ..] if tail.len() <= 2 => {
            let res = resources::by_path(group, version, plural)?;
            if RESOURCES[res].namespaced && !tail.is_empty() {
                return None;
            }
            Some(Target { res, ns: None, name: tail.first().map(owned), sub: tail.get(1).map(owned) })
        }
        _ => None,
    }
}

fn percent_decode(s: &str) -> String {
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h * 16 + l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn verb_of(method: &Method, t: &Target, watch: bool) -> &'static str {
    match (method.as_str(), &t.name, t.sub.as_deref()) {
        ("GET", None, _) if watch => "watch",
        ("GET", None, _) => "list",
        ("GET", Some(_), _) => "get",
        ("POST", None, _) => "create",
        ("POST", Some(_), Some("eviction")) => "evict",
        ("POST", Some(_), Some("binding")) => "bind",
        ("PATCH", Some(_), _) => "patch",
        ("PUT", Some(_), _) => "update",
        ("DELETE", Some(_), _) => "delete",
        ("DELETE", None, _) => "deletecollection",
        _ => "unsupported",
    }
}

fn filter_of(t: &Target, labels: Option<&str>, fields: Option<&str>) -> Result<Filter, ApiError> {
    let labels = LabelSelector::parse(labels.unwrap_or("")).map_err(|e| ApiError::new(400, e))?;
    let fields = FieldSelector::parse(fields.unwrap_or("")).map_err(|e| ApiError::new(400, e))?;
    Ok(Filter { res: t.res, ns: t.ns.clone(), labels, fields })
}

fn json_response(code: u16, v: &Value) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, [(header::CONTENT_TYPE, "application/json")], serde_json::to_vec(v).expect("JSON values serialize"))
        .into_response()
}

fn error_response(e: &ApiError) -> Response {
    json_response(e.code, &e.status())
}

fn result_response(code: u16, r: Result<Value, ApiError>) -> Response {
    match r {
        Ok(v) => json_response(code, &v),
        Err(e) => error_response(&e),
    }
}

fn parse_body(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::new(400, format!("invalid JSON body: {e}")))
}

pub async fn handle(
    State(sh): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    let query = parse_query(uri.query().unwrap_or(""));
    let q = |k: &str| query.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let watch = matches!(q("watch"), Some("true" | "1"));
    let target = parse_path(&path);
    let review = super::reviews::kind_of(&method, &path);
    let verb = target.as_ref().map_or(if review.is_some() { "create" } else { "" }, |t| verb_of(&method, t, watch));
    let kind = target.as_ref().map_or(review.unwrap_or(""), |t| RESOURCES[t.res].kind);

    let delay = {
        let mut st = sh.store.lock().unwrap();
        let query_text = query.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&");
        st.requests.push(Recorded {
            method: method.to_string(),
            path: path.clone(),
            query: query_text,
            verb: verb.to_string(),
            kind: kind.to_string(),
        });
        st.delay_for(verb, kind)
    };
    if delay > Duration::ZERO {
        tokio::time::sleep(delay).await;
    }
    if let Some(code) = sh.store.lock().unwrap().fault_for(verb, kind) {
        return error_response(&ApiError::new(code, format!("injected fault: {verb} {kind}")));
    }
    if let Some(kind) = review {
        return super::reviews::answer(&sh, kind, &body);
    }

    let unserved = |api_version: &str| sh.store.lock().unwrap().unserved.contains(api_version);
    let target = target.filter(|t| !unserved(&RESOURCES[t.res].api_version()));
    let Some(t) = target else {
        if let (&Method::GET, ["apis", group, version]) =
            (&method, path.trim_matches('/').split('/').collect::<Vec<_>>().as_slice())
        {
            let api_version = format!("{group}/{version}");
            if let Some(list) = resources::api_resource_list(&api_version).filter(|_| !unserved(&api_version)) {
                return json_response(200, &list);
            }
        }
        if method == Method::GET && path == "/version" {
            return json_response(
                200,
                &json!({"major": "1", "minor": "35", "gitVersion": "v1.35.0-fake", "platform": "linux/amd64"}),
            );
        }
        return error_response(&ApiError::new(404, "the server could not find the requested resource"));
    };
    let ns = t.ns.clone().unwrap_or_default();
    let dry = q("dryRun") == Some("All");

    match verb {
        "list" | "watch" => {
            let filter = match filter_of(&t, q("labelSelector"), q("fieldSelector")) {
                Ok(f) => f,
                Err(e) => return error_response(&e),
            };
            if verb == "list" {
                let mut st = sh.store.lock().unwrap();
                st.expired.remove(&t.res);
                return json_response(200, &st.list(&filter));
            }
            start_watch(&sh, filter, &q)
        }
        "get" => result_response(200, sh.store.lock().unwrap().read(t.res, &ns, t.name.as_deref().unwrap_or_default())),
        "create" => {
            let r = parse_body(&body).and_then(|obj| sh.store.lock().unwrap().create(t.res, &ns, obj, dry));
            sh.notify();
            result_response(201, r)
        }
        "patch" => {
            let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
            let ct = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
            let r = sh.store.lock().unwrap().patch(t.res, &ns, t.name.as_deref().unwrap_or_default(), &ct, &body, dry);
            sh.notify();
            match r {
                Ok((code, v)) => json_response(code, &v),
                Err(e) => error_response(&e),
            }
        }
        "update" => {
            let r = parse_body(&body).and_then(|obj| {
                sh.store.lock().unwrap().update(t.res, &ns, t.name.as_deref().unwrap_or_default(), obj, dry)
            });
            sh.notify();
            result_response(200, r)
        }
        "delete" => {
            let r = sh.store.lock().unwrap().delete(t.res, &ns, t.name.as_deref().unwrap_or_default(), &body, dry);
            sh.notify();
            result_response(200, r)
        }
        "deletecollection" => {
            let filter = match filter_of(&t, q("labelSelector"), q("fieldSelector")) {
                Ok(f) => f,
                Err(e) => return error_response(&e),
            };
            let list = {
                let mut st = sh.store.lock().unwrap();
                let mut list = st.list(&filter);
                let mut deleted = Vec::new();
                for o in list["items"].as_array().cloned().unwrap_or_default() {
                    let ns = o["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
                    let name = o["metadata"]["name"].as_str().unwrap_or_default().to_string();
                    if let Ok(d) = st.delete(t.res, &ns, &name, &body, dry) {
                        deleted.push(d);
                    }
                }
                list["items"] = json!(deleted);
                list["metadata"]["resourceVersion"] = json!(st.rv.to_string());
                list
            };
            sh.notify();
            json_response(200, &list)
        }
        "evict" => {
            let r = parse_body(&body).and_then(|ev| {
                let opts = serde_json::to_vec(&ev["deleteOptions"]).expect("JSON values serialize");
                sh.store.lock().unwrap().delete(t.res, &ns, t.name.as_deref().unwrap_or_default(), &opts, dry)
            });
            sh.notify();
            result_response(
                201,
                r.map(
                    |_| json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
                ),
            )
        }
        "bind" => {
            let r = parse_body(&body).and_then(|b| {
                sh.store.lock().unwrap().bind(t.res, &ns, t.name.as_deref().unwrap_or_default(), &b, dry)
            });
            sh.notify();
            result_response(201, r)
        }
        _ => error_response(&ApiError::new(405, format!("{method} is not supported on {path}"))),
    }
}

fn start_watch<'a>(sh: &Arc<Shared>, filter: Filter, q: &impl Fn(&str) -> Option<&'a str>) -> Response {
    let rv = q("resourceVersion").unwrap_or("");
    let cursor = match rv {
        "" | "0" => None,
        s => match s.parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => return error_response(&ApiError::new(400, format!("invalid resourceVersion {s:?}"))),
        },
    };
    let deadline = q("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .map(|s| tokio::time::Instant::now() + Duration::from_secs(s));
    let rx = sh.tick.subscribe();
    let mut st = sh.store.lock().unwrap();
    if cursor.is_none() {
        // Like a list, a watch from "now" (with or without initial events) is never too old.
        st.expired.remove(&filter.res);
    }
    let mut pending = VecDeque::new();
    let mut done = false;
    if cursor.is_some() && st.expired.contains(&filter.res) {
        pending.push_back(expired_event());
        done = true;
    } else if cursor.is_none() {
        // No RV: the current state as synthetic ADDED events, then changes.
        pending.extend(st.matching(&filter).into_iter().map(|o| json!({"type": "ADDED", "object": o})));
        if q("sendInitialEvents") == Some("true") {
            pending.push_back(initial_events_end(filter.res, st.rv));
        }
    }
    let w = Watch {
        shared: sh.clone(),
        rx,
        cursor: cursor.unwrap_or(st.rv),
        break_gen: st.break_gen,
        expire_gen: st.expire_gen,
        filter,
        deadline,
        pending,
        done,
    };
    drop(st);
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], Body::from_stream(w.into_stream())).into_response()
}
