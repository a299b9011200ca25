//! Storage coordinates of the platform bucket, computed exactly as upstream does, in one place so the
//! strategy renderer and the credentials projector can never disagree.
//!
//! ```text
//!  backupStorage values ─┐
//!  BucketClaim status ───┼─► bucket::resolve_bucket_name ─► B   (strategies, BSL; "" = not yet)
//!  system Secret endpoint┼─► endpoint::resolve ─► E ─┬─► E  full URL  (CNPG, Etcd, BSL s3Url, env)
//!                        │                           ├─► H  host form (MariaDB, FoundationDB)
//!                        │                           └─► S  https?    (MariaDB tls, FDB secure_connection)
//!  system Secret data ───┴─► credentials::parse_source ─► credentials::desired_keys ─► cozy-backups-creds
//!                                                         (projected endpoint = strip_scheme(...))
//! ```
//!
//! Two scheme-stripping algorithms exist upstream and both are reproduced: the Helm helper strips
//! only literal prefixes ([`endpoint::host_form`]), the Go projector parses the URL
//! ([`endpoint::strip_scheme`]). No I/O and no Kubernetes types by default: callers pass plain
//! values. Feature `s3` adds the catalog records' S3 client, feature `backup` the conversion of a
//! catalog `Backup` to its record and back.

pub mod bucket;
pub mod catalog;
#[cfg(feature = "backup")]
pub mod catalog_backup;
pub mod credentials;
pub mod endpoint;
mod gojson;
#[cfg(feature = "s3")]
pub mod s3;
