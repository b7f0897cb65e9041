//! Who may read /metrics when it is served with `--metrics-secure`: as controller-runtime's
//! `WithAuthenticationAndAuthorization` filter decides, the caller's bearer token must pass a TokenReview
//! and the user it names a SubjectAccessReview for `get` on the non-resource URL `/metrics`. Decisions are
//! kept for a minute, so a scraper every 15 s costs the API server two requests a minute, not eight.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::Client;
use kube::api::PostParams;

use crate::cluster::scope;

const REMEMBER: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    /// No token, or one the API server does not accept: 401.
    Unauthenticated,
    /// A known user without `get` on /metrics: 403, naming the user.
    Forbidden(String),
}

pub struct MetricsAccess {
    client: Client,
    /// By a hash of the token, so that tokens are not kept in memory longer than a request.
    decided: Mutex<HashMap<u64, (Instant, Decision)>>,
}

fn token_key(token: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    token.hash(&mut hasher);
    hasher.finish()
}

/// The token of an `Authorization: Bearer <token>` header.
pub fn bearer(header: Option<&str>) -> Option<&str> {
    let value = header?.trim();
    let (scheme, token) = value.split_once(' ')?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty()).then(|| token.trim())
}

impl MetricsAccess {
    pub fn new(client: Client) -> Self {
        MetricsAccess { client, decided: Mutex::new(HashMap::new()) }
    }

    pub async fn decide(&self, token: Option<&str>) -> Result<Decision, kube::Error> {
        let Some(token) = token else { return Ok(Decision::Unauthenticated) };
        let key = token_key(token);
        {
            let mut decided = self.decided.lock().unwrap_or_else(|e| e.into_inner());
            decided.retain(|_, (at, _)| at.elapsed() < REMEMBER);
            if let Some((_, decision)) = decided.get(&key) {
                return Ok(decision.clone());
            }
        }
        let decision = self.ask(token).await?;
        self.decided.lock().unwrap_or_else(|e| e.into_inner()).insert(key, (Instant::now(), decision.clone()));
        Ok(decision)
    }

    async fn ask(&self, token: &str) -> Result<Decision, kube::Error> {
        let review = TokenReview {
            spec: TokenReviewSpec { token: Some(token.to_owned()), ..TokenReviewSpec::default() },
            ..TokenReview::default()
        };
        let reviewed =
            scope::cluster::<TokenReview>(self.client.clone()).create(&PostParams::default(), &review).await?;
        let status = reviewed.status.unwrap_or_default();
        let user = match (status.authenticated, status.user) {
            (Some(true), Some(user)) => user,
            _ => return Ok(Decision::Unauthenticated),
        };
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username.clone(),
                uid: user.uid,
                groups: user.groups,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some("/metrics".into()),
                    verb: Some("get".into()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let answered =
            scope::cluster::<SubjectAccessReview>(self.client.clone()).create(&PostParams::default(), &access).await?;
        Ok(match answered.status.is_some_and(|s| s.allowed) {
            true => Decision::Allowed,
            false => Decision::Forbidden(user.username.unwrap_or_default()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_taken_from_the_header() {
        assert_eq!(bearer(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer(Some("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(Some("Basic abc")), None);
        assert_eq!(bearer(Some("Bearer ")), None);
        assert_eq!(bearer(Some("Bearer")), None);
        assert_eq!(bearer(None), None);
    }
}
