//! Who may read the admin port (`serve --admin-auth kube`): `/metrics` and `/decisions`
//! want `Authorization: Bearer <token>`; the API server says whose token it is
//! (TokenReview) and whether they may GET the path (SubjectAccessReview), as
//! kube-rbac-proxy and controller-runtime's secure metrics do. No token or a rejected one
//! is 401, a user without the grant 403, an API server that cannot answer 503: never an
//! open door. Verdicts are kept briefly (`cache`).

mod cache;
pub mod reviews;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

pub use cache::{CacheLimits, VerdictCache};

use super::error::ApiError;
use super::prometheus;

/// The ClusterRoles that grant each path (manifests/clusterrole-diagnosis.yaml), named in
/// refusals so that whoever is refused knows what to ask for.
pub const METRICS_READER: &str = "coloc-extender-metrics-reader";
pub const DECISIONS_READER: &str = "coloc-extender-decisions-reader";

/// Longest wait for the API server's two answers, a free review slot included.
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);
/// Reviews in flight at once: a flood of distinct tokens waits here rather than on the
/// API server.
const REVIEWS_AT_ONCE: usize = 4;

/// What the API server said of one token and path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allowed {
        user: String,
    },
    /// The API server does not accept the token (expired, revoked, not a Kubernetes token).
    Unauthenticated,
    /// Authenticated, but no grant lets the user GET the path.
    Forbidden {
        user: String,
        reason: String,
    },
}

impl Verdict {
    pub fn is_allowed(&self) -> bool {
        matches!(self, Verdict::Allowed { .. })
    }

    /// The label of `coloc_admin_requests_total{outcome}`.
    pub fn outcome(&self) -> &'static str {
        match self {
            Verdict::Allowed { .. } => "allowed",
            Verdict::Unauthenticated => "unauthenticated",
            Verdict::Forbidden { .. } => "forbidden",
        }
    }
}

/// Why the API server gave no verdict: the request is refused with 503, and nothing is
/// kept, so the next request asks again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReviewError {
    #[error("the API server did not answer within {} s", REVIEW_TIMEOUT.as_secs())]
    TimedOut,
    #[error("this replica may not create {0}: its ClusterRole needs tokenreviews and subjectaccessreviews create")]
    NotPermitted(&'static str),
    #[error("the {review} failed: {message}")]
    Failed { review: &'static str, message: String },
}

/// The paths the admin port serves, each with the ClusterRole that grants it.
pub const ADMIN_PATHS: [(&str, &str); 2] = [("/metrics", METRICS_READER), ("/decisions", DECISIONS_READER)];

/// Asks the API server, through the cache.
pub struct Guard {
    client: kube::Client,
    cache: VerdictCache,
    slots: tokio::sync::Semaphore,
}

/// The guard cannot start.
#[derive(Debug, thiserror::Error)]
#[error("no randomness for the admin port's token cache key")]
pub struct NoRandomness;

impl Guard {
    pub fn new(client: kube::Client, limits: CacheLimits) -> Result<Guard, NoRandomness> {
        let cache = VerdictCache::new(limits).ok_or(NoRandomness)?;
        Ok(Guard { client, cache, slots: tokio::sync::Semaphore::new(REVIEWS_AT_ONCE) })
    }

    /// The verdict on `token` for GET `path`: kept, or asked of the API server.
    pub async fn check(&self, token: &str, path: &'static str) -> Result<Verdict, ReviewError> {
        if let Some(kept) = self.cache.get(token, path, Instant::now()) {
            return Ok(kept);
        }
        let verdict = tokio::time::timeout(REVIEW_TIMEOUT, self.review(token, path))
            .await
            .map_err(|_| ReviewError::TimedOut)??;
        self.cache.put(token, path, verdict.clone(), Instant::now());
        Ok(verdict)
    }

    async fn review(&self, token: &str, path: &'static str) -> Result<Verdict, ReviewError> {
        let _slot = self.slots.acquire().await.map_err(|_| ReviewError::TimedOut)?;
        let Some(user) = reviews::review_token(&self.client, token).await? else {
            return Ok(Verdict::Unauthenticated);
        };
        let access = reviews::review_access(&self.client, &user, path).await?;
        Ok(if access.allowed {
            Verdict::Allowed { user: user.name }
        } else {
            Verdict::Forbidden { user: user.name, reason: access.reason }
        })
    }
}

/// The bearer token of `Authorization`, or why there is none.
pub fn bearer_token(headers: &HeaderMap) -> Result<&str, &'static str> {
    let value = headers.get(header::AUTHORIZATION).ok_or("no Authorization header")?;
    let value = value.to_str().map_err(|_| "the Authorization header is not text")?;
    let (scheme, token) = value.trim().split_once(' ').ok_or("Authorization is not `Bearer <token>`")?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err("Authorization is not `Bearer <token>`");
    }
    match token.trim() {
        "" => Err("the bearer token is empty"),
        token => Ok(token),
    }
}

/// The admin path a request asks for, and the role that grants it.
fn admin_path(path: &str) -> Option<(&'static str, &'static str)> {
    ADMIN_PATHS.into_iter().find(|(p, _)| *p == path)
}

/// Middleware of the guarded admin routes: the request goes on only if allowed.
pub async fn require(State(guard): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    let Some((path, role)) = admin_path(req.uri().path()) else {
        // Only the admin routes carry this layer; anything else is refused, not served.
        return ApiError::new(StatusCode::NOT_FOUND, "unknown_path", "this port serves /metrics, /decisions")
            .into_response();
    };
    let token = match bearer_token(req.headers()) {
        Ok(token) => token,
        Err(why) => {
            prometheus::record_admin_request(path, "unauthenticated");
            return unauthenticated(format!(
                "GET {path} needs `Authorization: Bearer <token>` (serve --admin-auth kube): {why}; use the token of a ServiceAccount bound to ClusterRole {role} (kubectl create token)"
            ));
        }
    };
    let verdict = guard.check(token, path).await;
    let outcome = verdict.as_ref().map_or("unavailable", Verdict::outcome);
    prometheus::record_admin_request(path, outcome);
    match verdict {
        Ok(Verdict::Allowed { .. }) => next.run(req).await,
        Ok(Verdict::Unauthenticated) => unauthenticated(format!(
            "the API server does not accept the bearer token (expired, revoked, or not a Kubernetes token); GET {path} needs the token of a ServiceAccount bound to ClusterRole {role}"
        )),
        Ok(Verdict::Forbidden { user, reason }) => {
            let why = if reason.is_empty() { String::new() } else { format!(" ({reason})") };
            ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("{user} may not GET {path}{why}: bind it to ClusterRole {role}"),
            )
            .into_response()
        }
        Err(e) => {
            tracing::warn!(path, error = %e, "admin port: cannot check a bearer token with the API server; refused");
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "auth_unavailable",
                format!("cannot check the bearer token with the API server: {e}"),
            )
            .into_response()
        }
    }
}

/// Middleware of the open admin routes (`--admin-auth none`): counted, nothing asked.
pub async fn open(req: Request, next: Next) -> Response {
    if let Some((path, _)) = admin_path(req.uri().path()) {
        prometheus::record_admin_request(path, "open");
    }
    next.run(req).await
}

fn unauthenticated(message: String) -> Response {
    let mut response = ApiError::new(StatusCode::UNAUTHORIZED, "unauthenticated", message).into_response();
    response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(authorization: &[u8]) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_bytes(authorization).unwrap());
        h
    }

    #[test]
    fn a_bearer_token_is_read_from_authorization_and_nothing_else_passes_for_one() {
        assert_eq!(bearer_token(&headers(b"Bearer abc.def")), Ok("abc.def"));
        assert_eq!(bearer_token(&headers(b"bearer  abc ")), Ok("abc"), "the scheme is case-insensitive");
        assert_eq!(bearer_token(&HeaderMap::new()), Err("no Authorization header"));
        assert_eq!(bearer_token(&headers(b"Basic YWxpY2U6cHc=")), Err("Authorization is not `Bearer <token>`"));
        assert_eq!(bearer_token(&headers(b"Bearer")), Err("Authorization is not `Bearer <token>`"));
        assert_eq!(bearer_token(&headers(b"Bearer   ")), Err("Authorization is not `Bearer <token>`"));
        assert_eq!(bearer_token(&headers(b"abc")), Err("Authorization is not `Bearer <token>`"));
        assert_eq!(bearer_token(&headers(b"Bearer \xff")), Err("the Authorization header is not text"));
    }

    #[test]
    fn each_admin_path_names_the_role_that_grants_it() {
        assert_eq!(admin_path("/metrics"), Some(("/metrics", METRICS_READER)));
        assert_eq!(admin_path("/decisions"), Some(("/decisions", DECISIONS_READER)));
        assert_eq!(admin_path("/healthz"), None);
        assert_eq!(admin_path("/metrics/"), None);
    }
}
