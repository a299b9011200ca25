//! Who may call the lease server: bearer-token authentication through a [`TokenReviewer`] (the
//! Kubernetes TokenReview API in the server binary), a cache of review results, and authorization
//! by lease-name prefix.
//!
//! ```text
//!  request ─ metadata "authorization: Bearer <token>" ── none/malformed ─► UNAUTHENTICATED
//!     │
//!     ▼ SHA-256(token) ─► cache hit (valid until min(token expiry, cache TTL)) ─► identity
//!     │ miss                                                     (or the cached rejection)
//!     ▼ one review per token at a time (concurrent callers share it)
//!  TokenReviewer::review ─ authenticated ─► cache, identity ─► Authorization::allows(name)
//!     │                  └ rejected ──────► cache briefly ─► UNAUTHENTICATED      │ no
//!     └ error (API server unreachable) ─► UNAVAILABLE, nothing cached             ▼
//!                                                                       PERMISSION_DENIED
//! ```
//!
//! Invariants: a token itself is never stored, logged or put into an error message (the cache is
//! keyed by its SHA-256); a review that could not be made never grants anything; an identity only
//! reaches lease names under one of its configured prefixes.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt as _;
use futures::future::{BoxFuture, Shared};
use sha2::{Digest, Sha256};
use tonic::Status;

use crate::state::{Clock, Now};

/// The answer of a token review that could be made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Review {
    /// The token is genuine, unexpired and meant for the configured audience.
    Authenticated {
        /// The authenticated user name, e.g. `system:serviceaccount:<namespace>:<name>`.
        username: String,
        /// When the token expires (wall clock, Unix milliseconds), if the reviewer could tell;
        /// the result is not cached beyond it.
        expires_unix_ms: Option<i64>,
    },
    /// The token is not valid (forged, expired, revoked, for another audience).
    Rejected {
        /// Why, as the reviewer put it (never contains the token).
        reason: String,
    },
}

/// A review could not be made (the API server is unreachable or answered with an error).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("token review failed: {0}")]
pub struct ReviewError(pub String);

/// Checks a bearer token. The server binary implements it with the Kubernetes TokenReview API;
/// tests use a fake.
#[tonic::async_trait]
pub trait TokenReviewer: Send + Sync + 'static {
    /// Reviews `token`. `Err` only when no answer could be had; an invalid token is
    /// `Ok(Review::Rejected)`.
    async fn review(&self, token: &str) -> Result<Review, ReviewError>;
}

/// How long review results are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheSettings {
    /// The longest an authenticated result is reused (shorter when the token expires sooner).
    pub ttl: Duration,
    /// How long a rejection is reused, so a caller retrying with a bad token does not cause one
    /// review per call.
    pub rejected_ttl: Duration,
    /// Entries kept at most; when full, expired entries are dropped first, then everything.
    pub max_entries: usize,
}

impl Default for CacheSettings {
    /// 60 s for authenticated tokens, 5 s for rejections, 10,000 entries.
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(60),
            rejected_ttl: Duration::from_secs(5),
            max_entries: 10_000,
        }
    }
}

/// Metric names of authentication.
pub mod metric {
    /// Counter `{result}`: token reviews made (`authenticated`, `rejected`, `error`); cache hits
    /// are not counted.
    pub const TOKEN_REVIEWS: &str = "cozy_backups_lease_server_token_reviews_total";
    /// Counter `{reason}`: requests refused by authentication or authorization
    /// (`unauthenticated`, `permission_denied`, `review_unavailable`).
    pub const AUTH_REFUSALS: &str = "cozy_backups_lease_server_auth_refusals_total";
}

type Key = [u8; 32];
type Pending = Shared<BoxFuture<'static, Result<Review, ReviewError>>>;

struct Cached {
    review: Review,
    valid_until: std::time::Instant,
}

/// Authenticates bearer tokens through a [`TokenReviewer`], caching the results.
pub struct Authenticator {
    reviewer: Arc<dyn TokenReviewer>,
    settings: CacheSettings,
    clock: Clock,
    cache: Mutex<HashMap<Key, Cached>>,
    pending: Mutex<HashMap<Key, Pending>>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Authenticator {
    /// An authenticator on the system clock.
    pub fn new(reviewer: Arc<dyn TokenReviewer>, settings: CacheSettings) -> Self {
        Self::with_clock(reviewer, settings, Arc::new(Now::system))
    }

    /// An authenticator with an injected clock (tests step it).
    pub fn with_clock(
        reviewer: Arc<dyn TokenReviewer>,
        settings: CacheSettings,
        clock: Clock,
    ) -> Self {
        describe_metrics();
        Self {
            reviewer,
            settings,
            clock,
            cache: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
        }
    }

    /// The authenticated user name of `token`: `UNAUTHENTICATED` for an invalid token,
    /// `UNAVAILABLE` when it could not be reviewed.
    pub async fn authenticate(&self, token: &str) -> Result<String, Status> {
        let key: Key = Sha256::digest(token.as_bytes()).into();
        let review = match self.cached(&key) {
            Some(review) => review,
            None => self.review(key, token).await?,
        };
        match review {
            Review::Authenticated { username, .. } => Ok(username),
            Review::Rejected { reason } => {
                refused("unauthenticated");
                Err(Status::unauthenticated(format!(
                    "the bearer token was not accepted: {reason}"
                )))
            }
        }
    }

    fn cached(&self, key: &Key) -> Option<Review> {
        let now = (self.clock)().mono;
        let mut cache = lock(&self.cache);
        match cache.get(key) {
            Some(c) if now < c.valid_until => Some(c.review.clone()),
            Some(_) => {
                cache.remove(key);
                None
            }
            None => None,
        }
    }

    /// Reviews `token`, sharing one review among concurrent callers with the same token. The
    /// first caller to see the result (whichever, so a cancelled caller leaves nothing stuck)
    /// records it.
    async fn review(&self, key: Key, token: &str) -> Result<Review, Status> {
        let pending = {
            let mut pending = lock(&self.pending);
            pending
                .entry(key)
                .or_insert_with(|| {
                    let reviewer = self.reviewer.clone();
                    let token = token.to_owned();
                    let fut: BoxFuture<'static, _> =
                        async move { reviewer.review(&token).await }.boxed();
                    fut.shared()
                })
                .clone()
        };
        let result = pending.clone().await;
        // Recorded in the cache before leaving the pending map, so that no caller in between
        // finds neither and reviews again.
        let first = {
            let mut map = lock(&self.pending);
            let ours = map.get(&key).is_some_and(|p| p.ptr_eq(&pending));
            if ours {
                if let Ok(review) = &result {
                    self.remember(key, review.clone());
                }
                map.remove(&key);
            }
            ours
        };
        if first {
            let label = match &result {
                Ok(Review::Authenticated { .. }) => "authenticated",
                Ok(Review::Rejected { .. }) => "rejected",
                Err(_) => "error",
            };
            metrics::counter!(metric::TOKEN_REVIEWS, "result" => label).increment(1);
            if let Err(e) = &result {
                tracing::warn!(error = %e.0, "a token review failed; answering UNAVAILABLE");
            }
        }
        result.map_err(|e| {
            refused("review_unavailable");
            Status::unavailable(format!("cannot authenticate the caller now: {}", e.0))
        })
    }

    fn remember(&self, key: Key, review: Review) {
        let now = (self.clock)();
        let keep = match &review {
            Review::Authenticated {
                expires_unix_ms, ..
            } => {
                let until_expiry = expires_unix_ms.map(|exp| {
                    Duration::from_millis(u64::try_from(exp - now.unix_ms).unwrap_or(0))
                });
                until_expiry.map_or(self.settings.ttl, |d| d.min(self.settings.ttl))
            }
            Review::Rejected { .. } => self.settings.rejected_ttl,
        };
        if keep.is_zero() {
            return;
        }
        let mut cache = lock(&self.cache);
        if cache.len() >= self.settings.max_entries {
            cache.retain(|_, c| now.mono < c.valid_until);
            if cache.len() >= self.settings.max_entries {
                cache.clear();
            }
        }
        cache.insert(
            key,
            Cached {
                review,
                valid_until: now.mono + keep,
            },
        );
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock only means a panic elsewhere while holding it; the map stays usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn refused(reason: &'static str) {
    metrics::counter!(metric::AUTH_REFUSALS, "reason" => reason).increment(1);
}

fn describe_metrics() {
    metrics::describe_counter!(
        metric::TOKEN_REVIEWS,
        "Token reviews made, by result (authenticated, rejected, error); cache hits not counted."
    );
    metrics::describe_counter!(
        metric::AUTH_REFUSALS,
        "Requests refused by authentication or authorization, by reason."
    );
}

/// The bearer token of a request's `authorization` metadata.
pub fn bearer_token(metadata: &tonic::metadata::MetadataMap) -> Result<&str, Status> {
    let missing = || {
        refused("unauthenticated");
        Status::unauthenticated(
            "no bearer token: send the metadata `authorization: Bearer <token>`",
        )
    };
    let value = metadata.get("authorization").ok_or_else(missing)?;
    let value = value.to_str().map_err(|_| missing())?;
    let (scheme, token) = value.split_once(' ').ok_or_else(missing)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(missing());
    }
    Ok(token)
}

/// Which lease names each authenticated identity may touch: a map from user name to name
/// prefixes. A request for a name (or, for `List`/`Watch`, a prefix) outside every prefix of its
/// identity is refused with `PERMISSION_DENIED`; an identity that is not in the map may touch
/// nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Authorization {
    prefixes: BTreeMap<String, Vec<String>>,
}

/// A malformed authorization rule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("authorization rule {rule:?}: {problem}")]
pub struct RuleError {
    /// The rule as given.
    pub rule: String,
    /// What is wrong with it.
    pub problem: String,
}

impl Authorization {
    /// An empty map (nobody may touch anything).
    pub fn new() -> Self {
        Self::default()
    }

    /// Lets `username` touch names starting with `prefix`.
    pub fn allow(&mut self, username: impl Into<String>, prefix: impl Into<String>) {
        let list = self.prefixes.entry(username.into()).or_default();
        let prefix = prefix.into();
        if !list.contains(&prefix) {
            list.push(prefix);
        }
    }

    /// Parses a rule `<user name>=<prefix>`, e.g.
    /// `system:serviceaccount:cozy-backup-controller:backup-runner=backup-runner/`. The prefix must
    /// end with `/`, so that `a/` does not also cover `ab/…`.
    pub fn parse_rule(rule: &str) -> Result<(String, String), RuleError> {
        let error = |problem: &str| RuleError {
            rule: rule.to_owned(),
            problem: problem.to_owned(),
        };
        let (user, prefix) = rule
            .rsplit_once('=')
            .ok_or_else(|| error("expected <user name>=<lease-name prefix>"))?;
        let (user, prefix) = (user.trim(), prefix.trim());
        if user.is_empty() {
            return Err(error("the user name is empty"));
        }
        if prefix.is_empty() || !prefix.ends_with('/') {
            return Err(error("the prefix must be non-empty and end with '/'"));
        }
        Ok((user.to_owned(), prefix.to_owned()))
    }

    /// Parses rules (as [`Authorization::parse_rule`]) into a map.
    pub fn from_rules<S: AsRef<str>>(rules: &[S]) -> Result<Self, RuleError> {
        let mut map = Self::new();
        for rule in rules {
            let (user, prefix) = Self::parse_rule(rule.as_ref())?;
            map.allow(user, prefix);
        }
        Ok(map)
    }

    /// True when `username` may touch the lease `name`.
    pub fn allows(&self, username: &str, name: &str) -> bool {
        self.prefixes
            .get(username)
            .is_some_and(|ps| ps.iter().any(|p| name.starts_with(p.as_str())))
    }

    /// Every rule, as `(user name, prefix)`, by user name.
    pub fn rules(&self) -> impl Iterator<Item = (&str, &str)> {
        self.prefixes
            .iter()
            .flat_map(|(u, ps)| ps.iter().map(move |p| (u.as_str(), p.as_str())))
    }

    /// True when no identity may touch anything.
    pub fn is_empty(&self) -> bool {
        self.prefixes.is_empty()
    }
}

/// Authentication and authorization of a server.
pub struct Guard {
    /// Authenticates bearer tokens.
    pub authenticator: Authenticator,
    /// Who may touch which lease names.
    pub authorization: Authorization,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("authorization", &self.authorization)
            .finish_non_exhaustive()
    }
}

/// What a request reaches.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Scope<'a> {
    /// One lease (Acquire, Renew, Release, Get).
    Name(&'a str),
    /// Every lease under a prefix (List, Watch).
    Prefix(&'a str),
}

impl Guard {
    /// The authenticated identity of `metadata`'s bearer token, if it may reach `scope`.
    pub(crate) async fn check(
        &self,
        metadata: &tonic::metadata::MetadataMap,
        scope: Scope<'_>,
    ) -> Result<String, Status> {
        let token = bearer_token(metadata)?;
        let username = self.authenticator.authenticate(token).await?;
        let (what, target) = match scope {
            // An empty name is refused as INVALID_ARGUMENT by the table; it touches nothing.
            Scope::Name("") => return Ok(username),
            Scope::Name(name) => ("lease", name),
            Scope::Prefix(prefix) => ("leases under", prefix),
        };
        if self.authorization.allows(&username, target) {
            Ok(username)
        } else {
            refused("permission_denied");
            Err(Status::permission_denied(format!(
                "{username} may not touch {what} {target:?}"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    /// Answers from a table; counts reviews; can be made to fail or to block until released.
    #[derive(Default)]
    struct Fake {
        users: Mutex<HashMap<String, Review>>,
        calls: AtomicUsize,
        down: std::sync::atomic::AtomicBool,
        gate: Gate,
        gated: std::sync::atomic::AtomicBool,
    }

    struct Gate(tokio::sync::Semaphore);

    impl Default for Gate {
        fn default() -> Self {
            Self(tokio::sync::Semaphore::new(0))
        }
    }

    #[tonic::async_trait]
    impl TokenReviewer for Fake {
        async fn review(&self, token: &str) -> Result<Review, ReviewError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            if self.gated.load(Ordering::SeqCst) {
                self.gate.0.acquire().await.unwrap().forget();
            }
            if self.down.load(Ordering::SeqCst) {
                return Err(ReviewError("connection refused".into()));
            }
            Ok(lock(&self.users)
                .get(token)
                .cloned()
                .unwrap_or(Review::Rejected {
                    reason: "unknown token".into(),
                }))
        }
    }

    struct Setup {
        fake: Arc<Fake>,
        clock: Arc<Mutex<Now>>,
        auth: Authenticator,
    }

    fn setup() -> Setup {
        let fake = Arc::new(Fake::default());
        let clock = Arc::new(Mutex::new(Now {
            mono: Instant::now(),
            unix_ms: 1_700_000_000_000,
        }));
        let read = clock.clone();
        let auth = Authenticator::with_clock(
            fake.clone(),
            CacheSettings::default(),
            Arc::new(move || *read.lock().unwrap()),
        );
        Setup { fake, clock, auth }
    }

    impl Setup {
        fn user(&self, token: &str, username: &str, expires_unix_ms: Option<i64>) {
            lock(&self.fake.users).insert(
                token.into(),
                Review::Authenticated {
                    username: username.into(),
                    expires_unix_ms,
                },
            );
        }
        fn revoke(&self, token: &str) {
            lock(&self.fake.users).remove(token);
        }
        fn step(&self, d: Duration) {
            let mut now = self.clock.lock().unwrap();
            *now = now.after(d);
        }
        fn calls(&self) -> usize {
            self.fake.calls.load(Ordering::SeqCst)
        }
    }

    #[tokio::test]
    async fn results_are_cached_for_the_ttl_then_reviewed_again() {
        let s = setup();
        s.user("t1", "sa:a", None);
        assert_eq!(s.auth.authenticate("t1").await.unwrap(), "sa:a");
        assert_eq!(s.auth.authenticate("t1").await.unwrap(), "sa:a");
        assert_eq!(s.calls(), 1, "the second call is answered from the cache");
        // Revoked: still accepted until the cache entry runs out, then refused.
        s.revoke("t1");
        s.step(Duration::from_secs(59));
        assert_eq!(s.auth.authenticate("t1").await.unwrap(), "sa:a");
        s.step(Duration::from_secs(1));
        let err = s.auth.authenticate("t1").await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unauthenticated);
        assert_eq!(s.calls(), 2);
    }

    #[tokio::test]
    async fn a_token_expiring_before_the_ttl_is_reviewed_again_at_its_expiry() {
        let s = setup();
        let now = s.clock.lock().unwrap().unix_ms;
        s.user("t1", "sa:a", Some(now + 10_000));
        s.auth.authenticate("t1").await.unwrap();
        s.step(Duration::from_secs(9));
        s.auth.authenticate("t1").await.unwrap();
        assert_eq!(s.calls(), 1);
        s.step(Duration::from_secs(1));
        s.auth.authenticate("t1").await.unwrap();
        assert_eq!(s.calls(), 2, "reviewed again at the token's expiry");
        // A token that has already expired by the reviewer's account is not cached at all.
        s.user("t2", "sa:b", Some(now));
        s.auth.authenticate("t2").await.unwrap();
        s.auth.authenticate("t2").await.unwrap();
        assert_eq!(s.calls(), 4);
    }

    #[tokio::test]
    async fn rejections_are_cached_briefly_and_failures_not_at_all() {
        let s = setup();
        for _ in 0..3 {
            let err = s.auth.authenticate("forged").await.unwrap_err();
            assert_eq!(err.code(), tonic::Code::Unauthenticated);
            assert!(!err.message().contains("forged"), "{}", err.message());
        }
        assert_eq!(s.calls(), 1);
        s.step(Duration::from_secs(5));
        s.auth.authenticate("forged").await.unwrap_err();
        assert_eq!(s.calls(), 2);

        s.user("t1", "sa:a", None);
        s.fake.down.store(true, Ordering::SeqCst);
        for _ in 0..2 {
            let err = s.auth.authenticate("t1").await.unwrap_err();
            assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
        }
        assert_eq!(s.calls(), 4, "a failed review is not cached");
        s.fake.down.store(false, Ordering::SeqCst);
        assert_eq!(s.auth.authenticate("t1").await.unwrap(), "sa:a");
    }

    #[tokio::test]
    async fn concurrent_callers_with_one_token_share_one_review() {
        let s = setup();
        s.user("t1", "sa:a", None);
        s.fake.gated.store(true, Ordering::SeqCst);
        let auth = Arc::new(s.auth);
        let tasks: Vec<_> = (0..5)
            .map(|_| {
                let auth = auth.clone();
                tokio::spawn(async move { auth.authenticate("t1").await })
            })
            .collect();
        // Every task is waiting on the one review before it is let through.
        while lock(&auth.pending).is_empty() {
            tokio::task::yield_now().await;
        }
        s.fake.gate.0.add_permits(1);
        for t in tasks {
            assert_eq!(t.await.unwrap().unwrap(), "sa:a");
        }
        assert_eq!(s.fake.calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_full_cache_drops_expired_entries_first() {
        let fake = Arc::new(Fake::default());
        let clock = Arc::new(Mutex::new(Now {
            mono: Instant::now(),
            unix_ms: 0,
        }));
        let read = clock.clone();
        let settings = CacheSettings {
            max_entries: 2,
            ..CacheSettings::default()
        };
        let auth = Authenticator::with_clock(
            fake.clone(),
            settings,
            Arc::new(move || *read.lock().unwrap()),
        );
        for t in ["a", "b", "c"] {
            auth.authenticate(t).await.unwrap_err();
        }
        assert!(lock(&auth.cache).len() <= 2);
    }

    #[test]
    fn bearer_tokens_are_read_from_the_authorization_metadata() {
        let mut md = tonic::metadata::MetadataMap::new();
        assert_eq!(
            bearer_token(&md).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        md.insert("authorization", "Basic abc".parse().unwrap());
        assert!(bearer_token(&md).is_err());
        md.insert("authorization", "Bearer ".parse().unwrap());
        assert!(bearer_token(&md).is_err());
        md.insert("authorization", "Bearer abc.def".parse().unwrap());
        assert_eq!(bearer_token(&md).unwrap(), "abc.def");
        md.insert("authorization", "bearer xyz".parse().unwrap());
        assert_eq!(bearer_token(&md).unwrap(), "xyz");
    }

    #[test]
    fn rules_parse_and_authorize_by_prefix() {
        let map = Authorization::from_rules(&[
            "system:serviceaccount:ns:backup-runner=backup-runner/",
            "system:serviceaccount:ns:ops=backup-runner/",
            "system:serviceaccount:ns:ops=retention-cleaner/",
        ])
        .unwrap();
        let runner = "system:serviceaccount:ns:backup-runner";
        assert!(map.allows(runner, "backup-runner/leader"));
        assert!(map.allows(runner, "backup-runner/BackupJob/t/j"));
        assert!(!map.allows(runner, "backup-runner-x/leader"));
        assert!(!map.allows(runner, "retention-cleaner/leader"));
        assert!(map.allows("system:serviceaccount:ns:ops", "retention-cleaner/leader"));
        assert!(!map.allows(
            "system:serviceaccount:other:backup-runner",
            "backup-runner/leader"
        ));
        assert_eq!(map.rules().count(), 3);

        for (rule, problem) in [
            ("no-equals", "expected <user name>=<lease-name prefix>"),
            ("=x/", "the user name is empty"),
            ("u=", "the prefix must be non-empty and end with '/'"),
            (
                "u=backup-runner",
                "the prefix must be non-empty and end with '/'",
            ),
        ] {
            assert_eq!(
                Authorization::parse_rule(rule).unwrap_err(),
                RuleError {
                    rule: rule.into(),
                    problem: problem.into()
                }
            );
        }
    }
}
