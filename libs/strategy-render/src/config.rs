//! The renderer's configuration: upstream's `backupStorage` and `velero` value blocks plus our two
//! renderer options, parsed from a ConfigMap's `values.yaml` key laid over the flag/env defaults.

use api::platform::{BackupStorageValues, VeleroValues};
use serde::{Deserialize, Serialize};

/// The ConfigMap key holding `{backupStorage: …, velero: …}` as YAML.
pub const VALUES_KEY: &str = "values.yaml";

/// Default `chBackupClientImage` (upstream `backupStrategyController.chBackupClientImage`, v1.6.0;
/// the digest is not known here, so the tag alone is used).
pub const DEFAULT_CH_BACKUP_CLIENT_IMAGE: &str =
    "ghcr.io/cozystack/cozystack/platform-migrations:v1.6.0";

/// Everything [`crate::render`] needs besides live cluster state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RenderConfig {
    /// Upstream `backupStorage` block.
    pub backup_storage: BackupStorageValues,
    /// Upstream `velero` block.
    pub velero: VeleroValues,
    /// Add the FoundationDB route to `cozy-default` (upstream ships the strategy unbound).
    pub bind_foundationdb: bool,
    /// Image of the Altinity strategy's client container.
    pub ch_backup_client_image: String,
}

impl Default for RenderConfig {
    fn default() -> Self {
        Self {
            backup_storage: BackupStorageValues::default(),
            velero: VeleroValues::default(),
            bind_foundationdb: false,
            ch_backup_client_image: DEFAULT_CH_BACKUP_CLIENT_IMAGE.into(),
        }
    }
}

/// A configuration the renderer refuses; the message names the offending key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `values.yaml` is not YAML or has a wrong type / unknown key.
    #[error("ConfigMap key {VALUES_KEY}: {0}")]
    Parse(String),
    /// A value parses but cannot be used.
    #[error("{key}: {problem}")]
    Invalid {
        /// Dotted path of the bad key, e.g. `backupStorage.namespace`.
        key: &'static str,
        /// What is wrong with it.
        problem: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ValuesFile {
    #[serde(rename = "backupStorage", default)]
    backup_storage: serde_json::Value,
    #[serde(default)]
    velero: serde_json::Value,
}

/// Lays the ConfigMap's `values.yaml` (when present) over `defaults` key by key and validates the
/// result. Keys absent from the file keep their default; unknown keys and wrong types are errors.
pub fn parse_config(
    defaults: &RenderConfig,
    values_yaml: Option<&str>,
) -> Result<RenderConfig, ConfigError> {
    let mut out = defaults.clone();
    if let Some(text) = values_yaml.filter(|t| !t.trim().is_empty()) {
        let file: ValuesFile =
            serde_yaml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        out.backup_storage = overlay(
            "backupStorage",
            &defaults.backup_storage,
            file.backup_storage,
        )?;
        out.velero = overlay("velero", &defaults.velero, file.velero)?;
    }
    validate(&out)?;
    Ok(out)
}

fn overlay<T>(block: &str, base: &T, over: serde_json::Value) -> Result<T, ConfigError>
where
    T: Serialize + serde::de::DeserializeOwned,
{
    let base = serde_json::to_value(base).expect("value blocks serialise");
    let map = match over {
        serde_json::Value::Null => serde_json::Map::new(),
        serde_json::Value::Object(map) => map,
        other => {
            return Err(ConfigError::Parse(format!(
                "{block}: expected a mapping, found {other}"
            )));
        }
    };
    let with = |entries: &mut dyn Iterator<Item = (&String, &serde_json::Value)>| {
        let mut merged = base.clone();
        let target = merged.as_object_mut().expect("value blocks are objects");
        for (k, v) in entries {
            target.insert(k.clone(), v.clone());
        }
        serde_json::from_value::<T>(merged)
    };
    with(&mut map.iter()).map_err(|e| {
        // Name the first key that fails on its own, so the message says which one is wrong
        // (serde's type errors do not carry the field name).
        let culprit = map
            .iter()
            .find(|entry| with(&mut std::iter::once(*entry)).is_err())
            .map(|(k, _)| k.as_str());
        match culprit {
            Some(k) => ConfigError::Parse(format!("{block}.{k}: {e}")),
            None => ConfigError::Parse(format!("{block}: {e}")),
        }
    })
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// An endpoint that can be written into the strategies: not empty and without whitespace. Anything
/// else is passed on verbatim, as upstream's chart does (a value without a scheme included).
fn is_usable_endpoint(s: &str) -> bool {
    !s.is_empty() && !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// A value for a message: at most 200 characters, then `…`.
fn shorten(s: &str) -> String {
    match s.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

fn validate(c: &RenderConfig) -> Result<(), ConfigError> {
    let bs = &c.backup_storage;
    let invalid = |key, problem: &str| {
        Err(ConfigError::Invalid {
            key,
            problem: problem.into(),
        })
    };
    if !is_dns_label(&bs.namespace) {
        return invalid("backupStorage.namespace", "must be a namespace name");
    }
    if bs.provision_bucket && !bs.namespace.starts_with("tenant-") {
        // Upstream's Bucket chart fails to render outside a tenant namespace.
        return invalid(
            "backupStorage.namespace",
            "must be a tenant-* namespace when provisionBucket is true",
        );
    }
    if bs.bucket_name.is_empty() {
        return invalid("backupStorage.bucketName", "must not be empty");
    }
    if bs.provision_bucket && !is_dns_label(&bs.bucket_name) {
        return invalid(
            "backupStorage.bucketName",
            "must be a DNS label when provisionBucket is true (it names the Bucket object)",
        );
    }
    if !is_usable_endpoint(&bs.endpoint) {
        // The endpoint is written into every strategy (CNPG endpointURL, Etcd endpoint, the BSL's
        // s3Url) as it is; upstream does not check it, but an empty value or one with whitespace
        // renders objects no backup can use.
        return Err(ConfigError::Invalid {
            key: "backupStorage.endpoint",
            problem: format!(
                "must be a URL without whitespace, got {:?}",
                shorten(&bs.endpoint)
            ),
        });
    }
    if bs.system_secret_name.is_empty() {
        return invalid("backupStorage.systemSecretName", "must not be empty");
    }
    if !is_dns_label(&c.velero.namespace) {
        return invalid("velero.namespace", "must be a namespace name");
    }
    if c.ch_backup_client_image.is_empty() {
        return invalid("chBackupClientImage", "must not be empty");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_or_empty_file_means_defaults() {
        let d = RenderConfig::default();
        assert_eq!(parse_config(&d, None), Ok(d.clone()));
        assert_eq!(parse_config(&d, Some("  \n")), Ok(d.clone()));
        assert_eq!(parse_config(&d, Some("backupStorage: {}\n")), Ok(d));
    }

    #[test]
    fn keys_overlay_the_defaults() {
        let d = RenderConfig::default();
        let got = parse_config(
            &d,
            Some("backupStorage:\n  region: eu-west-1\n  forcePathStyle: false\nvelero:\n  bslEnabled: false\n"),
        )
        .unwrap();
        let mut want = d.clone();
        want.backup_storage.region = "eu-west-1".into();
        want.backup_storage.force_path_style = false;
        want.velero.bsl_enabled = false;
        assert_eq!(got, want);
    }

    #[test]
    fn errors_name_the_bad_key() {
        let d = RenderConfig::default();
        let err = |y: &str| parse_config(&d, Some(y)).unwrap_err().to_string();
        let e = err("backupStorage:\n  region: ok\n  provisionBucket: maybe\n");
        assert!(
            e.contains("backupStorage.provisionBucket: invalid type"),
            "{e}"
        );
        let e = err("backupStorage:\n  regoin: x\n");
        assert!(e.contains("backupStorage.regoin: unknown field"), "{e}");
        let e = err("velro: {}\n");
        assert!(e.contains("velro"), "{e}");
        let e = err("backupStorage:\n  namespace: default\n");
        assert_eq!(
            e,
            "backupStorage.namespace: must be a tenant-* namespace when provisionBucket is true"
        );
        let e = err("velero:\n  namespace: ''\n");
        assert_eq!(e, "velero.namespace: must be a namespace name");
        let e = err("backupStorage: [1]\n");
        assert!(e.contains("backupStorage: expected a mapping"), "{e}");
        let e = err("backupStorage:\n  endpoint: ''\n");
        assert_eq!(
            e,
            "backupStorage.endpoint: must be a URL without whitespace, got \"\""
        );
        // Verbatim, as upstream: a value without a scheme is accepted.
        assert!(
            parse_config(
                &d,
                Some("backupStorage:\n  endpoint: s3.example.com:8333\n")
            )
            .is_ok()
        );
        for bad in ["https://s3 .example.com", " s3.example.com"] {
            assert!(
                err(&format!("backupStorage:\n  endpoint: '{bad}'\n"))
                    .starts_with("backupStorage.endpoint: "),
                "{bad}"
            );
        }
        let long = err(&format!(
            "backupStorage:\n  endpoint: '{} x'\n",
            "x".repeat(5000)
        ));
        assert!(long.len() < 400 && long.ends_with("…\""), "{long}");
        assert!(
            parse_config(
                &d,
                Some("backupStorage:\n  endpoint: https://s3.example.com:9000/x\n")
            )
            .is_ok()
        );
        // External S3 may use any namespace and any real bucket name.
        assert!(
            parse_config(
                &d,
                Some("backupStorage:\n  provisionBucket: false\n  namespace: s3\n  bucketName: Ext.Bucket\n")
            )
            .is_ok()
        );
    }
}
