//! Who may read /metrics when it is served with `--metrics-secure`: as controller-runtime's
//! `WithAuthenticationAndAuthorization` filter decides, the caller's bearer token must pass a TokenReview
//! and the user it names a SubjectAccessReview for `get` on the non-resource URL `/metrics`. Decisions are
//! kept for a minute, so a scraper every 15 s costs the API server two requests a minute, not eight.
//!
//! Anyone who reaches the port may send tokens, so what they cost is bounded: decisions are kept for at
//! most `REMEMBERED` tokens, each by its SHA-256 (so that no token stays in memory, and no crafted set
//! of tokens can collide), and at most `REVIEWS_IN_FLIGHT` TokenReviews are asked at once; a caller
//! who finds no room within `REVIEW_WAIT` is told 429 rather than queued.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::Client;
use kube::api::PostParams;

use crate::cluster::scope;

const REMEMBER: Duration = Duration::from_secs(60);

/// The most tokens whose decisions are kept.
pub const REMEMBERED: usize = 1024;

/// The most reviews of new tokens asked of the API server at once, and how long a caller waits for
/// its turn.
pub const REVIEWS_IN_FLIGHT: usize = 8;
const REVIEW_WAIT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    /// No token, or one the API server does not accept: 401.
    Unauthenticated,
    /// A known user without `get` on /metrics: 403, naming the user.
    Forbidden(String),
    /// Too many new tokens are being reviewed: 429, not kept.
    Busy,
}

pub struct MetricsAccess {
    client: Client,
    decided: Mutex<Remembered>,
    reviews: Arc<Semaphore>,
}

type Key = [u8; 32];

fn token_key(token: &str) -> Key {
    Sha256::digest(token.as_bytes()).into()
}

/// Decisions by token, for `REMEMBER` each, at most `most` of them: past it, the oldest goes.
struct Remembered {
    most: usize,
    decisions: HashMap<Key, (Instant, Decision)>,
}

impl Remembered {
    fn get(&self, key: &Key, now: Instant) -> Option<Decision> {
        self.decisions.get(key).filter(|(at, _)| now.duration_since(*at) < REMEMBER).map(|(_, d)| d.clone())
    }

    fn put(&mut self, key: Key, decision: Decision, now: Instant) {
        if self.decisions.len() >= self.most && !self.decisions.contains_key(&key) {
            self.decisions.retain(|_, (at, _)| now.duration_since(*at) < REMEMBER);
            if self.decisions.len() >= self.most
                && let Some(oldest) = self.decisions.iter().min_by_key(|(_, (at, _))| *at).map(|(k, _)| *k)
            {
                self.decisions.remove(&oldest);
            }
        }
        self.decisions.insert(key, (now, decision));
    }
}

/// The token of an `Authorization: Bearer <token>` header.
pub fn bearer(header: Option<&str>) -> Option<&str> {
    let value = header?.trim();
    let (scheme, token) = value.split_once(' ')?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty()).then(|| token.trim())
}

impl MetricsAccess {
    pub fn new(client: Client) -> Self {
        MetricsAccess {
            client,
            decided: Mutex::new(Remembered { most: REMEMBERED, decisions: HashMap::new() }),
            reviews: Arc::new(Semaphore::new(REVIEWS_IN_FLIGHT)),
        }
    }

    pub async fn decide(&self, token: Option<&str>) -> Result<Decision, kube::Error> {
        let Some(token) = token else { return Ok(Decision::Unauthenticated) };
        let key = token_key(token);
        if let Some(decision) = self.decided.lock().unwrap_or_else(|e| e.into_inner()).get(&key, Instant::now()) {
            return Ok(decision);
        }
        let Ok(Ok(_review)) = tokio::time::timeout(REVIEW_WAIT, self.reviews.acquire()).await else {
            return Ok(Decision::Busy);
        };
        let decision = self.ask(token).await?;
        self.decided.lock().unwrap_or_else(|e| e.into_inner()).put(key, decision.clone(), Instant::now());
        Ok(decision)
    }

    #[allow(clippy::disallowed_methods)] // a TokenReview or SubjectAccessReview is a question, never stored
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
    fn decisions_are_kept_for_a_minute_and_for_so_many_tokens() {
        let mut kept = Remembered { most: 3, decisions: HashMap::new() };
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        for (n, token) in ["a", "b", "c"].into_iter().enumerate() {
            kept.put(token_key(token), Decision::Allowed, at(n as u64));
        }
        assert_eq!(kept.get(&token_key("a"), at(3)), Some(Decision::Allowed));
        kept.put(token_key("d"), Decision::Unauthenticated, at(4));
        assert_eq!(kept.decisions.len(), 3, "never more than the most");
        assert_eq!(kept.get(&token_key("a"), at(4)), None, "the oldest went");
        assert_eq!(kept.get(&token_key("d"), at(4)), Some(Decision::Unauthenticated));
        assert_eq!(kept.get(&token_key("b"), at(61)), None, "a minute at most");
        // A thousand new tokens cost no more than the bound.
        for n in 0..1000 {
            kept.put(token_key(&format!("bogus-{n}")), Decision::Unauthenticated, at(5));
        }
        assert_eq!(kept.decisions.len(), 3);
    }

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
