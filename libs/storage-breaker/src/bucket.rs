//! The system bucket's client, from its credentials Secret read by name: what a daemon probes the
//! store with while a breaker is open, and what the backup-runner's catalog mirror writes through.

use std::collections::BTreeMap;
use std::path::Path;

use backup_storage::s3::{S3Client, S3Config, S3Error};
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};

/// Why the system bucket's client could not be made (names the Secret, never its values).
#[derive(Debug, thiserror::Error)]
pub enum BucketError {
    /// Reading the Secret failed.
    #[error("get Secret {secret}: {source}")]
    Api {
        /// `<namespace>/<name>`.
        secret: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// The Secret does not hold what it must.
    #[error("Secret {secret}: {problem}")]
    Secret {
        /// `<namespace>/<name>`.
        secret: String,
        /// What is wrong.
        problem: String,
    },
    /// The S3 client refused its configuration.
    #[error(transparent)]
    S3(#[from] S3Error),
}

/// Where the system bucket is and how to reach it.
#[derive(Debug, Clone)]
pub struct SystemBucket<'a> {
    /// The credentials Secret's namespace.
    pub namespace: &'a str,
    /// Its name.
    pub name: &'a str,
    /// The S3 endpoint URL; empty: `https://` + the Secret's endpoint.
    pub endpoint: &'a str,
    /// The flag that sets `endpoint` (named when neither it nor the Secret gives one).
    pub endpoint_flag: &'a str,
    /// A PEM bundle of CAs trusted for the endpoint (besides the public roots).
    pub ca_file: Option<&'a Path>,
}

impl SystemBucket<'_> {
    /// `<namespace>/<name>` of the Secret.
    pub fn secret(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The client of the bucket; `None` while the Secret does not exist.
    pub async fn client(&self, client: &Client) -> Result<Option<S3Client>, BucketError> {
        let shown = self.secret();
        let secret = Api::<Secret>::namespaced(client.clone(), self.namespace)
            .get_opt(self.name)
            .await
            .map_err(|source| BucketError::Api {
                secret: shown.clone(),
                source,
            })?;
        let Some(secret) = secret else {
            return Ok(None);
        };
        let data: BTreeMap<String, Vec<u8>> = secret
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
        let problem = |problem: String| BucketError::Secret {
            secret: shown.clone(),
            problem,
        };
        let creds = backup_storage::credentials::parse_source(self.namespace, self.name, &data)
            .map_err(|e| problem(e.message.clone()))?;
        let endpoint = if !self.endpoint.is_empty() {
            self.endpoint.to_owned()
        } else if !creds.endpoint.is_empty() {
            backup_storage::endpoint::resolve(true, "", Some(creds.endpoint.as_bytes()))
        } else {
            return Err(problem(format!(
                "no endpoint (and no {})",
                self.endpoint_flag
            )));
        };
        if creds.bucket_name.is_empty() {
            return Err(problem("no bucketName (flat key or BucketInfo)".into()));
        }
        let ca_pem = match self.ca_file {
            Some(path) => Some(
                std::fs::read(path)
                    .map_err(|e| problem(format!("CA file {}: {e}", path.display())))?,
            ),
            None => None,
        };
        Ok(Some(S3Client::new(S3Config::for_source(
            &creds, endpoint, ca_pem,
        ))?))
    }
}
