//! Caller authentication through the Kubernetes TokenReview API, and the default authorization
//! map: each daemon's ServiceAccount may touch the leases of its own component.
//!
//! ```text
//!  bearer token ─► POST authentication.k8s.io/v1 tokenreviews {token, audiences: [--token-audience]}
//!                    ├ authenticated, audience returned, user name set ─► Authenticated (expiry
//!                    │                                                    from the JWT's `exp`)
//!                    ├ not authenticated / other audience ─► Rejected (the API server's reason)
//!                    └ request failed ─► ReviewError (the caller gets UNAVAILABLE)
//! ```

use base64::Engine as _;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use kube::Api;
use kube::api::PostParams;
use lease::{Authorization, Review, ReviewError, TokenReviewer};

/// The daemons that hold leases, and whether each runs in the platform's namespace
/// (`--platform-namespace`: apidef-restarter) rather than the lease server's own. Lease names are
/// `<component>/leader` and `<component>/<kind>/<namespace>/<name>`.
pub const COMPONENTS: [(&str, bool); 6] = [
    ("strategy-renderer", false),
    ("credentials-projector", false),
    ("backup-runner", false),
    ("restore-orchestrator", false),
    ("retention-cleaner", false),
    ("apidef-restarter", true),
];

/// The default map: `system:serviceaccount:<namespace>:<component>` may touch `<component>/`,
/// with `namespace` the server's own, or `platform_namespace` for apidef-restarter.
pub fn default_authorization(namespace: &str, platform_namespace: &str) -> Authorization {
    let mut map = Authorization::new();
    for (component, in_platform) in COMPONENTS {
        let ns = if in_platform {
            platform_namespace
        } else {
            namespace
        };
        map.allow(
            format!("system:serviceaccount:{ns}:{component}"),
            format!("{component}/"),
        );
    }
    map
}

/// How long one TokenReview may take, retries included. The kube client retries a 429/503/504
/// answer with a growing backoff (minutes in all); a caller's call times out after a quarter of
/// its TTL (3.75 s for the daemons' 15 s), so the server gives up first and answers `UNAVAILABLE`
/// itself (logged and counted) rather than leaving the caller to time out.
pub const REVIEW_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Reviews tokens with the API server, for one audience.
pub struct KubeReviewer {
    api: Api<TokenReview>,
    audience: String,
}

impl KubeReviewer {
    /// A reviewer through `client` accepting tokens issued for `audience`.
    pub fn new(client: kube::Client, audience: impl Into<String>) -> Self {
        Self {
            api: Api::all(client),
            audience: audience.into(),
        }
    }
}

#[tonic::async_trait]
impl TokenReviewer for KubeReviewer {
    async fn review(&self, token: &str) -> Result<Review, ReviewError> {
        let request = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: Some(vec![self.audience.clone()]),
            },
            ..Default::default()
        };
        // The error of a failed request describes the request, never its body (the token).
        let answer = tokio::time::timeout(
            REVIEW_TIMEOUT,
            self.api.create(&PostParams::default(), &request),
        )
        .await
        .map_err(|_| {
            ReviewError(format!(
                "TokenReview: no answer within {} ms",
                REVIEW_TIMEOUT.as_millis()
            ))
        })?
        .map_err(|e| ReviewError(format!("TokenReview: {e}")))?;
        Ok(judge(answer, &self.audience, token))
    }
}

/// The verdict on a TokenReview answer: authenticated only with a user name and our audience
/// among the audiences the API server confirmed.
fn judge(answer: TokenReview, audience: &str, token: &str) -> Review {
    let status = answer.status.unwrap_or_default();
    if status.authenticated != Some(true) {
        let reason = status
            .error
            .filter(|e| !e.is_empty())
            .unwrap_or_else(|| "the API server did not authenticate the token".into());
        return Review::Rejected { reason };
    }
    if !status
        .audiences
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|a| a == audience)
    {
        return Review::Rejected {
            reason: format!("the token is not meant for the audience {audience:?}"),
        };
    }
    match status
        .user
        .and_then(|u| u.username)
        .filter(|u| !u.is_empty())
    {
        Some(username) => Review::Authenticated {
            username,
            expires_unix_ms: jwt_expiry_unix_ms(token),
        },
        None => Review::Rejected {
            reason: "the API server named no user".into(),
        },
    }
}

/// The `exp` claim of a JWT, in Unix milliseconds, read without verifying the signature (the API
/// server did that); only bounds how long a review is cached. `None` for an opaque token.
pub fn jwt_expiry_unix_ms(token: &str) -> Option<i64> {
    let mut parts = token.split('.');
    let (_, payload, _) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    claims["exp"].as_i64()?.checked_mul(1000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::authentication::v1::{TokenReviewStatus, UserInfo};

    fn answer(authenticated: bool, audiences: &[&str], user: Option<&str>) -> TokenReview {
        TokenReview {
            status: Some(TokenReviewStatus {
                authenticated: Some(authenticated),
                audiences: Some(audiences.iter().map(|a| a.to_string()).collect()),
                user: user.map(|u| UserInfo {
                    username: Some(u.into()),
                    ..Default::default()
                }),
                error: (!authenticated).then(|| "token has expired".into()),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn only_an_authenticated_token_for_our_audience_with_a_user_is_accepted() {
        let aud = "cozy-backups-lease";
        assert_eq!(
            judge(
                answer(true, &[aud], Some("system:serviceaccount:ns:a")),
                aud,
                "opaque"
            ),
            Review::Authenticated {
                username: "system:serviceaccount:ns:a".into(),
                expires_unix_ms: None
            }
        );
        assert_eq!(
            judge(answer(false, &[], None), aud, "t"),
            Review::Rejected {
                reason: "token has expired".into()
            }
        );
        assert!(matches!(
            judge(
                answer(true, &["https://kubernetes.default.svc"], Some("u")),
                aud,
                "t"
            ),
            Review::Rejected { .. }
        ));
        assert!(matches!(
            judge(answer(true, &[aud], None), aud, "t"),
            Review::Rejected { .. }
        ));
        assert!(matches!(
            judge(TokenReview::default(), aud, "t"),
            Review::Rejected { .. }
        ));
    }

    #[test]
    fn the_expiry_of_a_jwt_is_read_from_its_claims() {
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let jwt = format!(
            "{}.{}.sig",
            b64(r#"{"alg":"RS256"}"#),
            b64(r#"{"exp":1700000600,"sub":"x"}"#)
        );
        assert_eq!(jwt_expiry_unix_ms(&jwt), Some(1_700_000_600_000));
        assert_eq!(jwt_expiry_unix_ms("opaque-token"), None);
        assert_eq!(jwt_expiry_unix_ms("a.b.c.d"), None);
        assert_eq!(
            jwt_expiry_unix_ms(&format!("{}.{}.s", b64("{}"), b64(r#"{"sub":"x"}"#))),
            None
        );
    }

    #[test]
    fn the_default_map_gives_each_component_its_own_prefix() {
        let map = default_authorization("cozy-backup-controller", "cozy-system");
        let sa = |ns: &str, c: &str| format!("system:serviceaccount:{ns}:{c}");
        assert!(map.allows(
            &sa("cozy-backup-controller", "backup-runner"),
            "backup-runner/leader"
        ));
        assert!(!map.allows(
            &sa("cozy-backup-controller", "backup-runner"),
            "retention-cleaner/leader"
        ));
        assert!(!map.allows(&sa("tenant-a", "backup-runner"), "backup-runner/leader"));
        assert!(map.allows(
            &sa("cozy-system", "apidef-restarter"),
            "apidef-restarter/leader"
        ));
        assert!(!map.allows(
            &sa("cozy-backup-controller", "apidef-restarter"),
            "apidef-restarter/leader"
        ));
        assert!(!map.allows(
            &sa("cozy-backup-controller", "lease-server"),
            "lease-server/x"
        ));
        assert_eq!(map.rules().count(), COMPONENTS.len());
    }
}
