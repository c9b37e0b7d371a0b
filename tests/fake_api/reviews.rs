//! TokenReview (authentication.k8s.io/v1) and SubjectAccessReview (authorization.k8s.io/v1):
//! who presents a token, and whether a user may GET a non-resource path. The test says
//! which tokens are whose (`accept_token`) and who may get what (`allow`); every other token
//! is rejected and every other access denied, as an API server with RBAC does. Faults and
//! delays apply as to any write: verb "create", kinds "TokenReview", "SubjectAccessReview".

use std::collections::{BTreeSet, HashMap};

use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::{FakeApi, Shared};

const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
const ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

#[derive(Default)]
pub struct Reviews {
    /// token → (user name, groups)
    tokens: HashMap<String, (String, Vec<String>)>,
    /// (user name or group, non-resource path) allowed `get`
    grants: BTreeSet<(String, String)>,
    /// The spec of every SubjectAccessReview answered, in order.
    asked: Vec<Value>,
}

/// The review kind a request creates, if it is one.
pub fn kind_of(method: &Method, path: &str) -> Option<&'static str> {
    match (method, path.trim_end_matches('/')) {
        (&Method::POST, TOKEN_REVIEWS) => Some("TokenReview"),
        (&Method::POST, ACCESS_REVIEWS) => Some("SubjectAccessReview"),
        _ => None,
    }
}

/// The review answered: the request with its `status` filled in.
pub fn answer(sh: &Shared, kind: &str, body: &[u8]) -> Response {
    let Ok(mut review) = serde_json::from_slice::<Value>(body) else {
        return respond(StatusCode::BAD_REQUEST, json!({"kind": "Status", "status": "Failure", "code": 400}));
    };
    let mut reviews = sh.reviews.lock().unwrap();
    let spec = review["spec"].clone();
    review["status"] = if kind == "TokenReview" {
        match reviews.tokens.get(spec["token"].as_str().unwrap_or_default()) {
            Some((user, groups)) => json!({
                "authenticated": true,
                "user": {"username": user, "uid": format!("uid-{user}"), "groups": groups},
            }),
            // What kube-apiserver says of a token no authenticator accepts.
            None => json!({"user": {}, "error": "[invalid bearer token, token lookup failed]"}),
        }
    } else {
        reviews.asked.push(spec.clone());
        let path = spec["nonResourceAttributes"]["path"].as_str().unwrap_or_default().to_string();
        let get = spec["nonResourceAttributes"]["verb"] == "get";
        let subjects = std::iter::once(spec["user"].clone())
            .chain(spec["groups"].as_array().cloned().unwrap_or_default())
            .filter_map(|s| s.as_str().map(str::to_string));
        let allowed = get && subjects.into_iter().any(|s| reviews.grants.contains(&(s, path.clone())));
        if allowed {
            json!({"allowed": true, "reason": "RBAC: allowed by the fake's grant"})
        } else {
            json!({"allowed": false})
        }
    };
    respond(StatusCode::CREATED, review)
}

fn respond(status: StatusCode, v: Value) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], serde_json::to_vec(&v).expect("JSON values serialize"))
        .into_response()
}

impl FakeApi {
    /// TokenReviews of `token` say it is `user`, in `groups`.
    pub fn accept_token(&self, token: &str, user: &str, groups: &[&str]) {
        let groups = groups.iter().map(|g| g.to_string()).collect();
        self.shared.reviews.lock().unwrap().tokens.insert(token.to_string(), (user.to_string(), groups));
    }

    /// `subject` (a user name or a group) may GET the non-resource `path`.
    pub fn allow(&self, subject: &str, path: &str) {
        self.shared.reviews.lock().unwrap().grants.insert((subject.to_string(), path.to_string()));
    }

    /// Takes back what `allow` gave.
    pub fn revoke(&self, subject: &str, path: &str) {
        self.shared.reviews.lock().unwrap().grants.remove(&(subject.to_string(), path.to_string()));
    }

    /// The spec of every SubjectAccessReview answered so far.
    pub fn access_reviews(&self) -> Vec<Value> {
        self.shared.reviews.lock().unwrap().asked.clone()
    }
}
