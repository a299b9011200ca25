//! Altinity clickhouse-backup (ClickHouse applications): the Job strategy's mechanics
//! ([`crate::job`] with the [`crate::job::ALTINITY`] flavor) behind a gate on the application
//! kind.
//!
//! ```text
//!  applicationRef must be apps.cozystack.io/ClickHouse ─► batch/v1 Job <job>-backup rendered from
//!  the Altinity strategy's pod template (.Release.Name = the application's name)
//! ```

/// The ClickHouse application kind.
pub const APP_KIND: &str = "ClickHouse";

/// Upstream's gate on the application reference (raw, not normalised).
pub fn validate_app_ref(r: &api::TypedLocalObjectReference) -> Result<(), String> {
    crate::app_ref::validate("altinity", APP_KIND, r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn app_refs_in_upstream_words() {
        assert_eq!(
            validate_app_ref(&api::TypedLocalObjectReference::new("", "ClickHouse", "ch")),
            Ok(())
        );
        assert_eq!(
            validate_app_ref(&api::TypedLocalObjectReference::new(
                "apps.cozystack.io",
                "Postgres",
                "db"
            )),
            Err(
                "altinity strategy supports applicationRef.kind=\"ClickHouse\", got \"Postgres\""
                    .into()
            )
        );
        assert_eq!(
            validate_app_ref(&api::TypedLocalObjectReference::new(
                "other.io",
                "ClickHouse",
                "ch"
            )),
            Err("altinity strategy supports applicationRef.apiGroup=\"apps.cozystack.io\", got \"other.io\"".into())
        );
    }
}
