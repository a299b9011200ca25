//! One projection (upstream `ProjectBackupCredentials`): read the source Secret uncached, compute the
//! desired keys, and create or update the target only when its data, labels or type differ.
//!
//! ```text
//!  read_source ──► parse_source ──► desired_keys ──► plan_target(existing?) ──► Create | Replace | Unchanged
//!   (Get, no cache)   (backup-storage, pure)            (pure: ownership guard,     (POST / PUT with the read
//!                                                        merge, compare)             resourceVersion / nothing)
//! ```
//!
//! Invariants: an existing target without `apps.cozystack.io/managed-by=cozystack-backups` is never
//! written; foreign data keys and other labels survive; an unchanged source causes no write (no
//! resourceVersion bump); no error message carries a credential value.

use std::collections::BTreeMap;

use api::contract::labels;
use backup_storage::credentials::{
    DesiredKeys, ProjectionConfig, ProjectionError, desired_keys, parse_source,
};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, ObjectMeta, PostParams};

/// The field manager of every write this daemon makes.
pub const FIELD_MANAGER: &str = "credentials-projector";

/// What a projection did to the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The target did not exist and was created.
    Created,
    /// The target differed and was updated.
    Updated,
    /// The target already held exactly the desired content; nothing was written.
    Unchanged,
}

/// The write a projection needs.
#[derive(Clone, Debug, PartialEq)]
pub enum TargetPlan {
    /// Create this Secret.
    Create(Secret),
    /// Replace the existing Secret with this one (carries the read resourceVersion).
    Replace(Secret),
    /// Nothing to write.
    Unchanged,
}

/// Decides the write for `namespace/name` given the existing target (pure).
pub fn plan_target(
    namespace: &str,
    name: &str,
    existing: Option<&Secret>,
    desired: &DesiredKeys,
) -> Result<TargetPlan, ProjectionError> {
    let Some(existing) = existing else {
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(namespace.into()),
                labels: Some(BTreeMap::from([(
                    labels::MANAGED_BY.into(),
                    labels::MANAGED_BY_VALUE.into(),
                )])),
                ..Default::default()
            },
            type_: Some("Opaque".into()),
            data: Some(to_data(desired.apply_to(&BTreeMap::new()))),
            ..Default::default()
        };
        return Ok(TargetPlan::Create(secret));
    };
    if !is_owned(existing) {
        return Err(ProjectionError::target_not_owned(namespace, name));
    }
    let current = from_data(existing.data.as_ref());
    let data = desired.apply_to(&current);
    let type_ok = existing.type_.as_deref() == Some("Opaque");
    if data == current && type_ok {
        return Ok(TargetPlan::Unchanged);
    }
    let mut updated = existing.clone();
    updated.data = Some(to_data(data));
    updated.type_ = Some("Opaque".into());
    // The ownership label is already there (the guard passed); every other label is kept.
    Ok(TargetPlan::Replace(updated))
}

/// True when the Secret carries our ownership label.
pub fn is_owned(secret: &Secret) -> bool {
    secret
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::MANAGED_BY))
        .is_some_and(|v| v == labels::MANAGED_BY_VALUE)
}

fn from_data(data: Option<&BTreeMap<String, ByteString>>) -> BTreeMap<String, Vec<u8>> {
    data.into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect()
}

fn to_data(data: BTreeMap<String, Vec<u8>>) -> BTreeMap<String, ByteString> {
    data.into_iter().map(|(k, v)| (k, ByteString(v))).collect()
}

/// Reads the source Secret (never cached) and computes the desired keys.
pub async fn read_source(
    client: &kube::Client,
    config: &ProjectionConfig,
) -> Result<DesiredKeys, ProjectionError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &config.source_namespace);
    let source = match api.get_opt(&config.source_name).await {
        Ok(Some(s)) => s,
        Ok(None) => {
            return Err(ProjectionError::source_missing(
                &config.source_namespace,
                &config.source_name,
            ));
        }
        Err(err) => return Err(ProjectionError::source_read(err)),
    };
    let parsed = parse_source(
        &config.source_namespace,
        &config.source_name,
        &from_data(source.data.as_ref()),
    )?;
    desired_keys(config, &parsed)
}

/// Writes `desired` into `namespace`, reading the target first.
pub async fn write_target(
    client: &kube::Client,
    config: &ProjectionConfig,
    namespace: &str,
    desired: &DesiredKeys,
) -> Result<Outcome, ProjectionError> {
    let name = &config.target_name;
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let existing = api
        .get_opt(name)
        .await
        .map_err(|e| ProjectionError::target_write(namespace, name, e))?;
    apply_plan(&api, namespace, name, existing.as_ref(), desired).await
}

/// Writes `desired` given an already-read target (the rotation path lists targets instead of
/// reading them one by one).
pub async fn apply_plan(
    api: &Api<Secret>,
    namespace: &str,
    name: &str,
    existing: Option<&Secret>,
    desired: &DesiredKeys,
) -> Result<Outcome, ProjectionError> {
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    match plan_target(namespace, name, existing, desired)? {
        TargetPlan::Unchanged => Ok(Outcome::Unchanged),
        // A create that races another writer fails with AlreadyExists: a transient APIError, as
        // upstream; the next attempt sees the object and either updates it or trips the guard.
        TargetPlan::Create(secret) => api
            .create(&pp, &secret)
            .await
            .map(|_| Outcome::Created)
            .map_err(|e| ProjectionError::target_write(namespace, name, e)),
        TargetPlan::Replace(secret) => api
            .replace(name, &pp, &secret)
            .await
            .map(|_| Outcome::Updated)
            .map_err(|e| ProjectionError::target_write(namespace, name, e)),
    }
}

/// One full projection into `namespace`: source, keys, target.
pub async fn project(
    client: &kube::Client,
    config: &ProjectionConfig,
    namespace: &str,
) -> Result<Outcome, ProjectionError> {
    let desired = read_source(client, config).await?;
    write_target(client, config, namespace, &desired).await
}

/// Every projected copy in the cluster: Secrets named like the target carrying the ownership label.
/// The list carries a `metadata.name` field selector, which kube-apiserver authorizes as a request
/// for that name: the projector's RBAC grants list only on Secrets of the target's name
/// (`resourceNames`), never on every Secret. The label selector keeps the answer to our copies.
pub async fn list_copies(
    client: &kube::Client,
    config: &ProjectionConfig,
) -> Result<Vec<Secret>, kube::Error> {
    let api: Api<Secret> = Api::all(client.clone());
    let selector = format!("{}={}", labels::MANAGED_BY, labels::MANAGED_BY_VALUE);
    let list = api
        .list(
            &ListParams::default()
                .labels(&selector)
                .fields(&format!("metadata.name={}", config.target_name)),
        )
        .await?;
    Ok(list
        .items
        .into_iter()
        .filter(|s| s.metadata.name.as_deref() == Some(config.target_name.as_str()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use backup_storage::credentials::Reason;

    fn desired() -> DesiredKeys {
        let config = ProjectionConfig {
            source_namespace: "tenant-root".into(),
            source_name: "src".into(),
            target_name: "cozy-backups-creds".into(),
            endpoint: String::new(),
            region: String::new(),
            force_path_style: "true".into(),
        };
        let data = BTreeMap::from([
            ("accessKey".to_owned(), b"AK".to_vec()),
            ("secretKey".to_owned(), b"SK".to_vec()),
            ("endpoint".to_owned(), b"https://s3.example.com".to_vec()),
        ]);
        desired_keys(&config, &parse_source("tenant-root", "src", &data).unwrap()).unwrap()
    }

    fn secret(labels: &[(&str, &str)], data: &[(&str, &str)], type_: &str) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("cozy-backups-creds".into()),
                namespace: Some("t".into()),
                resource_version: Some("7".into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| ((*k).into(), (*v).into()))
                        .collect(),
                ),
                ..Default::default()
            },
            type_: Some(type_.into()),
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).into(), ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    const OWNED: (&str, &str) = ("apps.cozystack.io/managed-by", "cozystack-backups");

    #[test]
    fn a_missing_target_is_created_with_the_label_type_and_all_keys() {
        let TargetPlan::Create(s) =
            plan_target("t", "cozy-backups-creds", None, &desired()).unwrap()
        else {
            panic!("expected a create");
        };
        assert_eq!(s.type_.as_deref(), Some("Opaque"));
        assert!(is_owned(&s));
        let keys: Vec<&str> = s
            .data
            .as_ref()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "AWS_ACCESS_KEY_ID",
                "AWS_SECRET_ACCESS_KEY",
                "accessKey",
                "blob_credentials.json",
                "cloud",
                "endpoint",
                "forcePathStyle",
                "secretKey"
            ]
        );
    }

    #[test]
    fn an_unowned_target_is_refused() {
        for labels in [
            &[][..],
            &[("apps.cozystack.io/managed-by", "someone-else")][..],
        ] {
            let existing = secret(labels, &[("accessKey", "theirs")], "Opaque");
            let err =
                plan_target("t", "cozy-backups-creds", Some(&existing), &desired()).unwrap_err();
            assert_eq!(err.reason, Reason::TargetSecretNotOwned);
            assert_eq!(
                err.message,
                "target Secret t/cozy-backups-creds exists without label apps.cozystack.io/managed-by=cozystack-backups; refusing to overwrite"
            );
        }
    }

    #[test]
    fn an_up_to_date_target_needs_no_write_and_a_changed_one_keeps_foreign_keys_and_labels() {
        let TargetPlan::Create(created) =
            plan_target("t", "cozy-backups-creds", None, &desired()).unwrap()
        else {
            panic!("expected a create");
        };
        let mut current = created.clone();
        current.metadata.resource_version = Some("9".into());
        assert_eq!(
            plan_target("t", "cozy-backups-creds", Some(&current), &desired()).unwrap(),
            TargetPlan::Unchanged
        );
        let stale = secret(
            &[OWNED, ("team", "a")],
            &[
                ("accessKey", "OLD"),
                ("bucketName", "old"),
                ("foreign", "kept"),
            ],
            "Opaque",
        );
        let TargetPlan::Replace(s) =
            plan_target("t", "cozy-backups-creds", Some(&stale), &desired()).unwrap()
        else {
            panic!("expected a replace");
        };
        let data = s.data.unwrap();
        assert_eq!(data["accessKey"].0, b"AK");
        assert_eq!(data["foreign"].0, b"kept");
        assert!(
            !data.contains_key("bucketName"),
            "stale optional key removed"
        );
        assert_eq!(s.metadata.labels.unwrap()["team"], "a");
        assert_eq!(s.metadata.resource_version.as_deref(), Some("7"));
        // A wrong type alone forces a write (which the API server then rejects: type is immutable).
        let mut typed = current;
        typed.type_ = Some("kubernetes.io/basic-auth".into());
        assert!(matches!(
            plan_target("t", "cozy-backups-creds", Some(&typed), &desired()).unwrap(),
            TargetPlan::Replace(_)
        ));
    }
}
