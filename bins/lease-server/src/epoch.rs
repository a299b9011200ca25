//! The persisted epoch: one ConfigMap in the server's namespace holds the epoch counter and the
//! restart-proof key. Every start reads it, writes `epoch + 1` back with the read
//! `resourceVersion` (optimistic concurrency: a concurrent writer makes the write fail with 409 and
//! the start re-reads), and only then serves. Tokens of this process are built from the new epoch,
//! so they are higher than every token any earlier process handed out.
//!
//! ```text
//!  GET cm ──absent──► CREATE {epoch: 1, proofKey: random}   (409 AlreadyExists → retry)
//!     └─present─► PUT {epoch: n+1} with resourceVersion    (409 Conflict → retry)
//! ```
//!
//! Invariant: a malformed epoch object is an error, never a reset to 1 (that would let tokens go
//! backwards).

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};
use lease::Epoch;
use std::collections::BTreeMap;

/// The data key of the epoch counter.
pub const EPOCH_KEY: &str = "epoch";
/// The data key of the hex-encoded restart-proof key.
pub const PROOF_KEY: &str = "proofKey";

const ATTEMPTS: usize = 10;

/// Reads the epoch object, persists the next epoch and returns it.
pub async fn advance(client: kube::Client, namespace: &str, name: &str) -> anyhow::Result<Epoch> {
    let api: Api<ConfigMap> = Api::namespaced(client, namespace);
    for _ in 0..ATTEMPTS {
        let current = api
            .get_opt(name)
            .await
            .with_context(|| format!("read ConfigMap {namespace}/{name}"))?;
        let result = match current {
            None => {
                let key = random_key().context("read /dev/urandom for the proof key")?;
                let cm = ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(name.into()),
                        namespace: Some(namespace.into()),
                        labels: Some(BTreeMap::from([(
                            "app.kubernetes.io/name".to_owned(),
                            "lease-server".to_owned(),
                        )])),
                        ..Default::default()
                    },
                    data: Some(BTreeMap::from([
                        (EPOCH_KEY.to_owned(), "1".to_owned()),
                        (PROOF_KEY.to_owned(), hex::encode(&key)),
                    ])),
                    ..Default::default()
                };
                api.create(&PostParams::default(), &cm)
                    .await
                    .map(|_| Epoch {
                        number: 1,
                        proof_key: key,
                    })
            }
            Some(mut cm) => {
                let data = cm.data.get_or_insert_with(BTreeMap::new);
                let previous: u64 = data
                    .get(EPOCH_KEY)
                    .with_context(|| format!("ConfigMap {namespace}/{name} has no {EPOCH_KEY}"))?
                    .parse()
                    .with_context(|| {
                        format!("ConfigMap {namespace}/{name}: {EPOCH_KEY} is not a number")
                    })?;
                let key = hex::decode(data.get(PROOF_KEY).map(String::as_str).unwrap_or_default())
                    .ok()
                    .filter(|k| k.len() >= 16)
                    .with_context(|| {
                        format!("ConfigMap {namespace}/{name}: {PROOF_KEY} is missing or malformed")
                    })?;
                let next = previous + 1;
                if next > lease::state::MAX_EPOCH {
                    bail!(
                        "epoch {next} exceeds the token space ({})",
                        lease::state::MAX_EPOCH
                    );
                }
                data.insert(EPOCH_KEY.into(), next.to_string());
                // `replace` sends the resourceVersion we read: a concurrent writer makes it fail.
                api.replace(name, &PostParams::default(), &cm)
                    .await
                    .map(|_| Epoch {
                        number: next,
                        proof_key: key,
                    })
            }
        };
        match result {
            Ok(epoch) => return Ok(epoch),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                tracing::info!(reason = %s.reason, "epoch object changed concurrently; re-reading");
            }
            Err(e) => return Err(e).with_context(|| format!("write ConfigMap {namespace}/{name}")),
        }
    }
    bail!("ConfigMap {namespace}/{name} kept changing concurrently ({ATTEMPTS} attempts)")
}

fn random_key() -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut key = vec![0; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut key)?;
    Ok(key)
}
