//! Authentication: who sent a request.
//!
//! Three kinds of caller, as a kube-apiserver configured with a static admin token, ServiceAccount
//! tokens and path-limited anonymous access sees them:
//! * the admin: a random bearer token made at start (written into the kubeconfig), user
//!   `kube-emulator-admin` in group `system:masters`;
//! * ServiceAccounts: tokens issued by `POST …/serviceaccounts/{name}/token` (TokenRequest), opaque random
//!   strings looked up server-side, valid until they expire, their ServiceAccount (by uid) is deleted, or
//!   the object they are bound to is;
//! * anonymous (no `Authorization` header): `system:anonymous` in `system:unauthenticated`, which RBAC lets
//!   read only the public-info paths; anything else is answered 401, as is an unknown or expired token.
//!
//! Impersonation (`Impersonate-User`, `Impersonate-Group`, `Impersonate-Uid`) replaces the identity after
//! the caller was authorised to `impersonate` each of them ([`rbac`]).

pub(crate) mod rbac;
pub(crate) mod reviews;

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::store::State;

/// The audience the emulator's own API accepts, as kube-apiserver's default `--api-audiences`.
pub(crate) const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";
/// The user name of the admin token.
pub const ADMIN_USER: &str = "kube-emulator-admin";
/// The group that bypasses authorisation.
pub(crate) const MASTERS: &str = "system:masters";

/// An authenticated (or anonymous) user, as kube's `user.Info`.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Identity {
    pub(crate) name: String,
    pub(crate) uid: String,
    pub(crate) groups: Vec<String>,
    pub(crate) extra: BTreeMap<String, Vec<String>>,
}

impl Identity {
    pub(crate) fn admin() -> Self {
        Identity {
            name: ADMIN_USER.into(),
            uid: String::new(),
            groups: vec![MASTERS.into(), "system:authenticated".into()],
            extra: BTreeMap::new(),
        }
    }

    pub(crate) fn anonymous() -> Self {
        Identity {
            name: "system:anonymous".into(),
            uid: String::new(),
            groups: vec!["system:unauthenticated".into()],
            extra: BTreeMap::new(),
        }
    }

    pub(crate) fn service_account(ns: &str, name: &str, uid: &str) -> Self {
        Identity {
            name: format!("system:serviceaccount:{ns}:{name}"),
            uid: uid.into(),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{ns}"),
                "system:authenticated".into(),
            ],
            extra: BTreeMap::new(),
        }
    }

    pub(crate) fn is_anonymous(&self) -> bool {
        self.name == "system:anonymous"
    }

    pub(crate) fn is_master(&self) -> bool {
        self.groups.iter().any(|g| g == MASTERS)
    }

    /// `(namespace, name)` when this is a ServiceAccount user name.
    pub(crate) fn service_account_of(user: &str) -> Option<(&str, &str)> {
        let rest = user.strip_prefix("system:serviceaccount:")?;
        let (ns, name) = rest.split_once(':')?;
        (!ns.is_empty() && !name.is_empty() && !name.contains(':')).then_some((ns, name))
    }

    /// The `UserInfo` JSON of reviews (empty fields omitted).
    pub(crate) fn to_json(&self) -> Value {
        let mut v = json!({"username": self.name});
        if !self.uid.is_empty() {
            v["uid"] = json!(self.uid);
        }
        if !self.groups.is_empty() {
            v["groups"] = json!(self.groups);
        }
        if !self.extra.is_empty() {
            v["extra"] = json!(self.extra);
        }
        v
    }
}

/// What the server remembers of an issued ServiceAccount token.
#[derive(Debug, Clone)]
pub(crate) struct IssuedToken {
    pub(crate) namespace: String,
    pub(crate) service_account: String,
    pub(crate) service_account_uid: String,
    pub(crate) issued_at: DateTime<Utc>,
    pub(crate) expires_at: DateTime<Utc>,
    pub(crate) audiences: Vec<String>,
    /// `(kind, name, uid)` of the bound Pod or Secret.
    pub(crate) bound: Option<(String, String, String)>,
    /// Random id reported as `authentication.kubernetes.io/credential-id` (`JTI=…`).
    pub(crate) id: String,
}

/// Authentication state: the switch, the admin token, issued tokens and the test clock.
pub(crate) struct Authenticator {
    /// False: every request is the admin (no 401/403 for permissions).
    pub(crate) enabled: bool,
    admin_token: String,
    tokens: Mutex<HashMap<String, IssuedToken>>,
    /// Seconds added to the wall clock when checking expiry (a test hook).
    clock_offset: Mutex<i64>,
}

/// Why a token did not authenticate (the text TokenReview reports in `status.error`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AuthFailure(pub(crate) String);

impl Authenticator {
    pub(crate) fn new(enabled: bool) -> Self {
        Authenticator {
            enabled,
            admin_token: random_token(),
            tokens: Mutex::new(HashMap::new()),
            clock_offset: Mutex::new(0),
        }
    }

    pub(crate) fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// The clock token expiry is checked against.
    pub(crate) fn now(&self) -> DateTime<Utc> {
        let off = *self.clock_offset.lock().unwrap_or_else(|e| e.into_inner());
        Utc::now() + chrono::Duration::seconds(off)
    }

    /// Moves the expiry clock forward.
    pub(crate) fn advance_clock(&self, seconds: i64) {
        *self.clock_offset.lock().unwrap_or_else(|e| e.into_inner()) += seconds;
    }

    /// What is known of every issued token (never the token itself), for the admin API.
    pub(crate) fn issued(&self) -> Vec<Value> {
        let ts = |t: DateTime<Utc>| t.format("%Y-%m-%dT%H:%M:%SZ").to_string();
        let mut v: Vec<(DateTime<Utc>, Value)> = self
            .tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|t| {
                (
                    t.issued_at,
                    json!({"namespace": t.namespace, "serviceAccount": t.service_account,
                        "serviceAccountUID": t.service_account_uid, "issuedAt": ts(t.issued_at),
                        "expiresAt": ts(t.expires_at), "audiences": t.audiences,
                        "credentialID": format!("JTI={}", t.id)}),
                )
            })
            .collect();
        v.sort_by_key(|(t, _)| *t);
        v.into_iter().map(|(_, x)| x).collect()
    }

    /// Remembers a new token and returns it.
    pub(crate) fn issue(&self, t: IssuedToken) -> String {
        let token = random_token();
        self.tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(token.clone(), t);
        token
    }

    /// The identity and audiences of a bearer token, checked against the live state (the
    /// ServiceAccount and any bound object must still exist with the uid seen at issue time).
    pub(crate) fn authenticate_token(
        &self,
        st: &State,
        token: &str,
    ) -> Result<(Identity, Vec<String>), AuthFailure> {
        if constant_time_eq(token.as_bytes(), self.admin_token.as_bytes()) {
            return Ok((Identity::admin(), vec![API_AUDIENCE.to_string()]));
        }
        let issued = self
            .tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(token)
            .cloned()
            .ok_or_else(|| AuthFailure("invalid bearer token".into()))?;
        if self.now() >= issued.expires_at {
            return Err(AuthFailure(
                "invalid bearer token, service account token has expired".into(),
            ));
        }
        let sa = stored(
            st,
            "core/serviceaccounts",
            &issued.namespace,
            &issued.service_account,
        );
        match sa {
            Some(sa) if uid_of(sa) == issued.service_account_uid => {}
            Some(_) => {
                return Err(AuthFailure(format!(
                    "invalid bearer token, service account UID ({}) does not match claim ({})",
                    sa.map(uid_of).unwrap_or_default(),
                    issued.service_account_uid
                )));
            }
            None => {
                return Err(AuthFailure(format!(
                    "invalid bearer token, serviceaccounts \"{}\" not found",
                    issued.service_account
                )));
            }
        }
        if let Some((kind, name, uid)) = &issued.bound {
            let storage = if kind == "Pod" {
                "core/pods"
            } else {
                "core/secrets"
            };
            let live = stored(st, storage, &issued.namespace, name);
            if live.map(uid_of) != Some(uid.as_str()) {
                return Err(AuthFailure(format!(
                    "invalid bearer token, {} \"{name}\" not found",
                    if kind == "Pod" { "pods" } else { "secrets" }
                )));
            }
        }
        let mut id = Identity::service_account(
            &issued.namespace,
            &issued.service_account,
            &issued.service_account_uid,
        );
        id.extra.insert(
            "authentication.kubernetes.io/credential-id".into(),
            vec![format!("JTI={}", issued.id)],
        );
        if let Some((kind, name, uid)) = &issued.bound
            && kind == "Pod"
        {
            id.extra.insert(
                "authentication.kubernetes.io/pod-name".into(),
                vec![name.clone()],
            );
            id.extra.insert(
                "authentication.kubernetes.io/pod-uid".into(),
                vec![uid.clone()],
            );
        }
        Ok((id, issued.audiences))
    }
}

fn stored<'a>(st: &'a State, storage: &str, ns: &str, name: &str) -> Option<&'a Value> {
    st.objects
        .get(storage)?
        .get(&(ns.to_string(), name.to_string()))
}

pub(crate) fn uid_of(v: &Value) -> &str {
    v["metadata"]["uid"].as_str().unwrap_or_default()
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// 32 random bytes, URL-safe base64 without padding.
pub(crate) fn random_token() -> String {
    use base64::Engine as _;
    let bytes: [u8; 32] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The bearer token of a request, if it carries one.
pub(crate) fn bearer(headers: &http::HeaderMap) -> Option<Result<&str, ()>> {
    let h = headers.get(http::header::AUTHORIZATION)?;
    let s = h.to_str().map_err(|_| ());
    Some(s.and_then(|s| {
        let (scheme, tok) = s.trim().split_once(' ').ok_or(())?;
        if scheme.eq_ignore_ascii_case("bearer") && !tok.trim().is_empty() {
            Ok(tok.trim())
        } else {
            Err(())
        }
    }))
}
