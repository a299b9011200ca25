//! ApplicationDefinition client helpers: find a definition by its tenant-facing kind, and the
//! canonical config hash that the apidef-restarter writes onto `cozy-system/cozystack-api`.
//!
//! ```text
//!  find_by_kind(client, "HTTPCache") ──LIST cozystack.io/v1alpha1/applicationdefinitions (untyped)──►
//!      match spec.application.kind exactly ──► whole DynamicObject   (KindCache: cached list)
//!
//!  config_hash([(name, spec)]) ──sort by name──► Go-shaped views ──Go json.Marshal bytes──► SHA-256 hex
//! ```
//!
//! Invariants: a lookup never derives `metadata.name` from the kind; items with a missing or
//! non-string kind are skipped, never matched; the hash depends only on each definition's name and
//! spec, never on the order of the input or on metadata such as labels or resourceVersion.

pub mod canonical;
pub mod lookup;

pub use canonical::{HashError, canonical_json, config_hash, config_hash_of};
pub use lookup::{FindError, KindCache, api_resource, find_by_kind, list_all, select_by_kind};
