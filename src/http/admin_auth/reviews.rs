//! The two questions put to the API server, as kube-rbac-proxy and controller-runtime's
//! secure metrics put them: a TokenReview (who presents this token?) and a
//! SubjectAccessReview (may they GET this path?).

use std::collections::BTreeMap;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::PostParams;

use super::ReviewError;
use crate::wire::error::clip;

/// Who the API server says a token belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: Option<String>,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// Whether a user may GET a path, and the authorizer's reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    pub allowed: bool,
    pub reason: String,
}

/// The token's user, or `None` where the API server does not accept it.
pub async fn review_token(client: &kube::Client, token: &str) -> Result<Option<User>, ReviewError> {
    metrics::counter!("coloc_admin_reviews_total", "review" => "token").increment(1);
    let reviews: kube::Api<TokenReview> = kube::Api::all(client.clone());
    // No audiences: the API server's own, which a ServiceAccount token from
    // `kubectl create token` or a token Secret carries.
    let review =
        TokenReview { spec: TokenReviewSpec { token: token.to_string(), audiences: None }, ..Default::default() };
    let answer = reviews.create(&PostParams::default(), &review).await.map_err(|e| failed("tokenreviews", e))?;
    let status = answer.status.unwrap_or_default();
    if status.authenticated != Some(true) {
        // The API server's reason names no token; kept to debug, as a client can make
        // as many of them as it likes.
        tracing::debug!(
            error = status.error.as_deref().map(|e| clip(e, 200).into_owned()),
            "admin port: a bearer token was not accepted"
        );
        return Ok(None);
    }
    let Some(user) = status.user.filter(|u| u.username.as_deref().is_some_and(|n| !n.is_empty())) else {
        return Ok(None);
    };
    Ok(Some(User {
        name: user.username.unwrap_or_default(),
        uid: user.uid,
        groups: user.groups.unwrap_or_default(),
        extra: user.extra.unwrap_or_default(),
    }))
}

/// May `user` GET `path` (a non-resource URL)?
pub async fn review_access(client: &kube::Client, user: &User, path: &str) -> Result<Access, ReviewError> {
    metrics::counter!("coloc_admin_reviews_total", "review" => "access").increment(1);
    let reviews: kube::Api<SubjectAccessReview> = kube::Api::all(client.clone());
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.name.clone()),
            uid: user.uid.clone(),
            groups: Some(user.groups.clone()),
            extra: Some(user.extra.clone()),
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(path.to_string()),
                verb: Some("get".into()),
            }),
            resource_attributes: None,
        },
        ..Default::default()
    };
    let answer =
        reviews.create(&PostParams::default(), &review).await.map_err(|e| failed("subjectaccessreviews", e))?;
    let status = answer.status.unwrap_or_default();
    // An evaluation error with no allow is a refusal: never an open door.
    let reason = [status.reason, status.evaluation_error]
        .into_iter()
        .flatten()
        .filter(|r| !r.is_empty())
        .map(|r| clip(&r, 300).into_owned())
        .collect::<Vec<_>>()
        .join("; ");
    Ok(Access { allowed: status.allowed && status.denied != Some(true), reason })
}

fn failed(review: &'static str, e: kube::Error) -> ReviewError {
    match &e {
        kube::Error::Api(status) if status.code == 403 => ReviewError::NotPermitted(review),
        _ => ReviewError::Failed { review, message: clip(&e.to_string(), 300).into_owned() },
    }
}
