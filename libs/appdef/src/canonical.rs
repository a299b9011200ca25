//! The canonical form of the ApplicationDefinition set and its SHA-256 config hash.
//!
//! ```text
//!  [(metadata.name, spec JSON)] ──sort by name (bytes)──► Go-shaped views (decode like encoding/json)
//!        ──encode like Go's json.Marshal──► bytes ──SHA-256──► lower-case hex
//! ```
//!
//! Upstream (`applicationdefinition_controller.go`) hashes `json.Marshal([]crdHashView{{Name, Spec}})`
//! where `Spec` is the typed Go `ApplicationDefinitionSpec`. To produce the same bytes we decode each
//! spec into structs that mirror the Go types field by field (declaration order, `omitempty` exactly
//! where Go has it, non-pointer structs that can never be omitted, pointers that encode as `null`),
//! and encode them with a formatter that escapes like Go (`<`, `>`, `&`, U+2028, U+2029 as `\uXXXX`).
//!
//! Invariants: only `metadata.name` and `spec` are hashed (labels, annotations, resourceVersion,
//! generation and status never are); the input order does not matter; unknown spec fields are
//! dropped, as Go's decoder drops them. `docs/apidef-restarter.md` lists where this can still differ
//! from upstream's bytes.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io;

/// Errors of the canonical serialisation.
#[derive(Debug, thiserror::Error)]
pub enum HashError {
    /// A definition's spec does not have the shape of the Go type (Go's decoder would fail too;
    /// a real API server's schema validation prevents it).
    #[error(
        "ApplicationDefinition {name:?}: spec does not match the ApplicationDefinitionSpec shape"
    )]
    InvalidSpec {
        /// `metadata.name` of the definition.
        name: String,
        /// The decoding error.
        #[source]
        source: serde_json::Error,
    },
    /// Encoding failed (cannot happen for these types; kept rather than panicking).
    #[error("encoding the canonical form")]
    Encode(#[source] serde_json::Error),
}

/// The canonical bytes: Go `encoding/json` of `[{"name": …, "spec": …}]` sorted by name.
///
/// `defs` yields `(metadata.name, spec)`; a missing spec (`None`) is the Go zero value.
pub fn canonical_json<'a, I>(defs: I) -> Result<Vec<u8>, HashError>
where
    I: IntoIterator<Item = (&'a str, Option<&'a Value>)>,
{
    let mut out = Vec::with_capacity(4096);
    write_canonical(defs, &mut out)?;
    Ok(out)
}

/// SHA-256 (lower-case hex) of [`canonical_json`]: the value of `cozystack.io/config-hash`.
///
/// The canonical bytes are streamed into the digest one definition at a time, never held whole:
/// with a thousand definitions carrying large schemas they would be tens of megabytes.
pub fn config_hash<'a, I>(defs: I) -> Result<String, HashError>
where
    I: IntoIterator<Item = (&'a str, Option<&'a Value>)>,
{
    let mut digest = DigestWriter(Sha256::new());
    write_canonical(defs, &mut digest)?;
    Ok(hex::encode(digest.0.finalize()))
}

/// Writes the canonical bytes to `out`, one definition at a time: `[`, the elements separated by
/// `,`, `]` — exactly what encoding the whole slice at once writes (the compact form has no state
/// carried between elements), while only one Go-shaped view exists at any moment.
fn write_canonical<'a, I, W>(defs: I, out: &mut W) -> Result<(), HashError>
where
    I: IntoIterator<Item = (&'a str, Option<&'a Value>)>,
    W: io::Write,
{
    let mut defs: Vec<(&str, Option<&Value>)> = defs.into_iter().collect();
    // Upstream sorts with a byte-wise string compare; `str::cmp` is byte-wise too.
    defs.sort_by(|a, b| a.0.cmp(b.0));
    let io = |e: io::Error| HashError::Encode(serde_json::Error::io(e));
    out.write_all(b"[").map_err(io)?;
    for (i, (name, spec)) in defs.into_iter().enumerate() {
        let spec = match spec {
            None | Some(Value::Null) => GoSpec::default(),
            Some(v) => S::<GoSpec>::deserialize(v).map(|s| s.0).map_err(|source| {
                HashError::InvalidSpec {
                    name: name.to_owned(),
                    source,
                }
            })?,
        };
        if i > 0 {
            out.write_all(b",").map_err(io)?;
        }
        let mut ser = serde_json::Serializer::with_formatter(&mut *out, GoFormatter);
        HashView { name, spec }
            .serialize(&mut ser)
            .map_err(HashError::Encode)?;
    }
    out.write_all(b"]").map_err(io)
}

/// Feeds written bytes to a SHA-256 digest.
struct DigestWriter(Sha256);

impl io::Write for DigestWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// [`config_hash`] of listed objects (`metadata.name` and `spec` of each).
pub fn config_hash_of(objects: &[kube::api::DynamicObject]) -> Result<String, HashError> {
    config_hash(
        objects
            .iter()
            .map(|o| (o.metadata.name.as_deref().unwrap_or(""), o.data.get("spec"))),
    )
}

/// Lower-case hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A serde_json formatter that escapes strings exactly like Go's `json.Marshal` (Go ≥ 1.22):
/// serde_json already writes `\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t` and `\u00XX` (lower-case hex)
/// for the other control characters, as Go does; Go additionally escapes the HTML-sensitive `<`,
/// `>`, `&` and the JavaScript line terminators U+2028 and U+2029.
#[derive(Debug, Clone, Copy, Default)]
pub struct GoFormatter;

impl serde_json::ser::Formatter for GoFormatter {
    fn write_string_fragment<W>(&mut self, writer: &mut W, fragment: &str) -> io::Result<()>
    where
        W: ?Sized + io::Write,
    {
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            let escaped = match c {
                '<' => "\\u003c",
                '>' => "\\u003e",
                '&' => "\\u0026",
                '\u{2028}' => "\\u2028",
                '\u{2029}' => "\\u2029",
                _ => continue,
            };
            writer.write_all(&fragment.as_bytes()[start..i])?;
            writer.write_all(escaped.as_bytes())?;
            start = i + c.len_utf8();
        }
        writer.write_all(&fragment.as_bytes()[start..])
    }
}

/// Decodes like Go does for a non-pointer field: JSON `null` (or absence) leaves the zero value.
fn zero_if_null<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A map value or slice element of a non-pointer Go type: `null` decodes to the zero value.
#[derive(Debug, Default, Serialize)]
#[serde(transparent)]
struct Z<T>(T);

impl<'de, T: Deserialize<'de> + Default> Deserialize<'de> for Z<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        zero_if_null(d).map(Z)
    }
}

/// A Go struct: decoded only from a JSON object (or `null`, handled by the field around it).
/// serde's derived struct decoding also takes an array of the fields in order; Go's decoder
/// refuses that (`cannot unmarshal array into Go struct field …`), so this does too.
#[derive(Debug, Default, Serialize)]
#[serde(transparent)]
struct S<T>(T);

impl<'de, T: serde::de::DeserializeOwned> Deserialize<'de> for S<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        match Value::deserialize(d)? {
            v @ Value::Object(_) => T::deserialize(v).map(S).map_err(D::Error::custom),
            other => Err(D::Error::custom(format!(
                "expected an object for a Go struct, got {other}"
            ))),
        }
    }
}

fn is_empty_str(s: &str) -> bool {
    s.is_empty()
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// `crdHashView{Name string "name"; Spec ApplicationDefinitionSpec "spec"}`.
#[derive(Serialize)]
struct HashView<'a> {
    name: &'a str,
    spec: GoSpec,
}

/// `ApplicationDefinitionSpec`: the three selector blocks are non-pointer structs, so `omitempty`
/// never drops them (an unset one is `{}`); `dashboard` is a pointer with `omitempty`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
struct GoSpec {
    #[serde(deserialize_with = "zero_if_null")]
    application: S<GoApplication>,
    #[serde(deserialize_with = "zero_if_null")]
    release: S<GoRelease>,
    #[serde(deserialize_with = "zero_if_null")]
    secrets: S<GoResources>,
    #[serde(deserialize_with = "zero_if_null")]
    services: S<GoResources>,
    #[serde(deserialize_with = "zero_if_null")]
    ingresses: S<GoResources>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dashboard: Option<S<GoDashboard>>,
}

/// `ApplicationDefinitionApplication`: four strings, none `omitempty`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
struct GoApplication {
    #[serde(deserialize_with = "zero_if_null")]
    kind: String,
    #[serde(rename = "openAPISchema", deserialize_with = "zero_if_null")]
    open_api_schema: String,
    #[serde(deserialize_with = "zero_if_null")]
    plural: String,
    #[serde(deserialize_with = "zero_if_null")]
    singular: String,
}

/// `ApplicationDefinitionRelease`: `chartRef` is a pointer without `omitempty` (→ `null`).
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default, rename_all = "camelCase")]
struct GoRelease {
    chart_ref: Option<S<GoChartRef>>,
    #[serde(
        deserialize_with = "zero_if_null",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    labels: BTreeMap<String, Z<String>>,
    #[serde(deserialize_with = "zero_if_null")]
    prefix: String,
    #[serde(
        deserialize_with = "zero_if_null",
        skip_serializing_if = "is_empty_str"
    )]
    wait_strategy: String,
    #[serde(
        deserialize_with = "zero_if_null",
        skip_serializing_if = "Vec::is_empty"
    )]
    health_check_exprs: Vec<Z<S<GoHealthCheck>>>,
}

/// helm-controller v2 `CrossNamespaceSourceReference`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default, rename_all = "camelCase")]
struct GoChartRef {
    #[serde(
        deserialize_with = "zero_if_null",
        skip_serializing_if = "is_empty_str"
    )]
    api_version: String,
    #[serde(deserialize_with = "zero_if_null")]
    kind: String,
    #[serde(deserialize_with = "zero_if_null")]
    name: String,
    #[serde(
        deserialize_with = "zero_if_null",
        skip_serializing_if = "is_empty_str"
    )]
    namespace: String,
}

/// fluxcd `pkg/apis/kustomize` v1.15.0 `CustomHealthCheck` with the inlined
/// `HealthCheckExpressions` (`current`, `inProgress,omitempty`, `failed,omitempty`).
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default, rename_all = "camelCase")]
struct GoHealthCheck {
    #[serde(deserialize_with = "zero_if_null")]
    api_version: String,
    #[serde(deserialize_with = "zero_if_null")]
    kind: String,
    #[serde(deserialize_with = "zero_if_null")]
    current: String,
    #[serde(
        deserialize_with = "zero_if_null",
        skip_serializing_if = "is_empty_str"
    )]
    in_progress: String,
    #[serde(
        deserialize_with = "zero_if_null",
        skip_serializing_if = "is_empty_str"
    )]
    failed: String,
}

/// `ApplicationDefinitionResources`: slices of pointers (a `null` element encodes as `null`).
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
struct GoResources {
    #[serde(
        deserialize_with = "zero_if_null",
        skip_serializing_if = "Vec::is_empty"
    )]
    exclude: Vec<Option<S<GoSelector>>>,
    #[serde(
        deserialize_with = "zero_if_null",
        skip_serializing_if = "Vec::is_empty"
    )]
    include: Vec<Option<S<GoSelector>>>,
}

/// `ApplicationDefinitionResourceSelector`: the inlined `metav1.LabelSelector` then `resourceNames`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default, rename_all = "camelCase")]
struct GoSelector {
    #[serde(
        deserialize_with = "zero_if_null",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    match_labels: BTreeMap<String, Z<String>>,
    #[serde(
        deserialize_with = "zero_if_null",
        skip_serializing_if = "Vec::is_empty"
    )]
    match_expressions: Vec<Z<S<GoRequirement>>>,
    #[serde(
        deserialize_with = "zero_if_null",
        skip_serializing_if = "Vec::is_empty"
    )]
    resource_names: Vec<Z<String>>,
}

/// `metav1.LabelSelectorRequirement`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
struct GoRequirement {
    #[serde(deserialize_with = "zero_if_null")]
    key: String,
    #[serde(deserialize_with = "zero_if_null")]
    operator: String,
    #[serde(
        deserialize_with = "zero_if_null",
        skip_serializing_if = "Vec::is_empty"
    )]
    values: Vec<Z<String>>,
}

/// `ApplicationDefinitionDashboard`, in Go declaration order (which differs from the CRD's
/// alphabetical schema order): zero strings, `false` and `0` are omitted where Go says `omitempty`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default, rename_all = "camelCase")]
struct GoDashboard {
    #[serde(deserialize_with = "zero_if_null")]
    singular: String,
    #[serde(deserialize_with = "zero_if_null")]
    plural: String,
    #[serde(
        deserialize_with = "zero_if_null",
        skip_serializing_if = "is_empty_str"
    )]
    name: String,
    #[serde(deserialize_with = "zero_if_null", skip_serializing_if = "is_false")]
    singular_resource: bool,
    #[serde(deserialize_with = "zero_if_null", skip_serializing_if = "is_zero")]
    weight: i64,
    #[serde(
        deserialize_with = "zero_if_null",
        skip_serializing_if = "is_empty_str"
    )]
    description: String,
    #[serde(
        deserialize_with = "zero_if_null",
        skip_serializing_if = "is_empty_str"
    )]
    icon: String,
    #[serde(deserialize_with = "zero_if_null")]
    category: String,
    #[serde(
        deserialize_with = "zero_if_null",
        skip_serializing_if = "Vec::is_empty"
    )]
    tags: Vec<Z<String>>,
    #[serde(
        deserialize_with = "zero_if_null",
        skip_serializing_if = "Vec::is_empty"
    )]
    tabs: Vec<Z<String>>,
    /// `[][]string`: an inner `null` stays `null`, an inner `[]` stays `[]`.
    #[serde(
        deserialize_with = "zero_if_null",
        skip_serializing_if = "Vec::is_empty"
    )]
    keys_order: Vec<Option<Vec<Z<String>>>>,
    #[serde(deserialize_with = "zero_if_null", skip_serializing_if = "is_false")]
    module: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The schema string of the vector: HTML-sensitive characters, control characters, the two
    /// JavaScript line terminators and a non-ASCII letter.
    const SCHEMA: &str =
        "{\"properties\":{\"x\":{\"pattern\":\"^<a>&$\"}}}\n\t\u{1}\u{2028}\u{2029}é";

    fn http_cache_spec() -> Value {
        // Keys deliberately out of Go order, an unknown field, zero values Go omits, a null pointer
        // element and a null inner slice.
        json!({
            "unknownField": "dropped",
            "dashboard": {
                "category": "Networking", "weight": 0, "module": false, "tags": ["cache", "http"],
                "singular": "HTTP Cache", "plural": "HTTP Caches", "icon": "<svg a=\"1\">&</svg>",
                "keysOrder": [["spec", "size"], [], null], "tabs": ["workloads", "yaml"],
                "singularResource": true, "description": null
            },
            "ingresses": {"include": [{"resourceNames": ["{{ .name }}-ingress"]}]},
            "secrets": {
                "exclude": [],
                "include": [
                    {
                        "resourceNames": ["{{ .kind }}-{{ .name }}-tls"],
                        "matchExpressions": [{"operator": "DoesNotExist", "key": "bad"}],
                        "matchLabels": {"z": "1", "a": "2"}
                    },
                    null
                ]
            },
            "release": {
                "prefix": "http-cache-", "labels": {"b": "2", "a": "1"}, "waitStrategy": "poller",
                "chartRef": {"namespace": "cozy-public", "name": "http-cache", "kind": "ExternalArtifact"},
                "healthCheckExprs": [{
                    "failed": "self.status.phase == 'Failed'", "current": "self.status.ready",
                    "kind": "HTTPCache", "apiVersion": "apps.cozystack.io/v1alpha1"
                }]
            },
            "application": {
                "singular": "httpcache", "plural": "httpcaches", "openAPISchema": SCHEMA,
                "kind": "HTTPCache"
            }
        })
    }

    fn minimal_spec(kind: &str) -> Value {
        json!({
            "application": {"kind": kind, "openAPISchema": "{}", "plural": "ps", "singular": "p"},
            "release": {"prefix": ""}
        })
    }

    /// The bytes Go's `json.Marshal` produces for the vector, written out by hand from the Go
    /// types and encoder rules: declaration order, `omitempty` drops `exclude: []`, `weight: 0`,
    /// `module: false` and the null `description`; the non-pointer `services` is `{}`; a missing
    /// `chartRef` is `null`; map keys are sorted; `<`, `>`, `&`, U+2028, U+2029 are `\u`-escaped,
    /// U+0001 is `\u0001`, `\n` and `\t` are short escapes, `é` and `'` are written as they are.
    const EXPECTED: &str = concat!(
        r#"[{"name":"a-minimal","spec":{"application":{"kind":"Minimal","openAPISchema":"{}","plural":"ps","singular":"p"},"#,
        r#""release":{"chartRef":null,"prefix":""},"secrets":{},"services":{},"ingresses":{}}},"#,
        r#"{"name":"b-nospec","spec":{"application":{"kind":"","openAPISchema":"","plural":"","singular":""},"#,
        r#""release":{"chartRef":null,"prefix":""},"secrets":{},"services":{},"ingresses":{}}},"#,
        r#"{"name":"http-cache","spec":{"application":{"kind":"HTTPCache","#,
        r#""openAPISchema":"{\"properties\":{\"x\":{\"pattern\":\"^\u003ca\u003e\u0026$\"}}}\n\t\u0001\u2028\u2029é","#,
        r#""plural":"httpcaches","singular":"httpcache"},"#,
        r#""release":{"chartRef":{"kind":"ExternalArtifact","name":"http-cache","namespace":"cozy-public"},"#,
        r#""labels":{"a":"1","b":"2"},"prefix":"http-cache-","waitStrategy":"poller","#,
        r#""healthCheckExprs":[{"apiVersion":"apps.cozystack.io/v1alpha1","kind":"HTTPCache","current":"self.status.ready","failed":"self.status.phase == 'Failed'"}]},"#,
        r#""secrets":{"include":[{"matchLabels":{"a":"2","z":"1"},"matchExpressions":[{"key":"bad","operator":"DoesNotExist"}],"resourceNames":["{{ .kind }}-{{ .name }}-tls"]},null]},"#,
        r#""services":{},"ingresses":{"include":[{"resourceNames":["{{ .name }}-ingress"]}]},"#,
        r#""dashboard":{"singular":"HTTP Cache","plural":"HTTP Caches","singularResource":true,"#,
        r#""icon":"\u003csvg a=\"1\"\u003e\u0026\u003c/svg\u003e","category":"Networking","#,
        r#""tags":["cache","http"],"tabs":["workloads","yaml"],"keysOrder":[["spec","size"],[],null]}}}]"#,
    );

    /// SHA-256 of [`EXPECTED`], computed outside Rust (`printf '%s' … | sha256sum`).
    const EXPECTED_HASH: &str = "682b48310e944ef0c2f41baf37227496c2be134e64397dca52580504dcea87c8";

    #[test]
    fn reproduces_go_encoding_of_the_vector() {
        let cache = http_cache_spec();
        let minimal = minimal_spec("Minimal");
        let defs = [
            ("http-cache", Some(&cache)),
            ("b-nospec", None),
            ("a-minimal", Some(&minimal)),
        ];
        let bytes = canonical_json(defs).unwrap();
        assert_eq!(String::from_utf8(bytes).unwrap(), EXPECTED);
        assert_eq!(config_hash(defs).unwrap(), EXPECTED_HASH);
        assert_eq!(sha256_hex(EXPECTED.as_bytes()), EXPECTED_HASH);
    }

    #[test]
    fn control_characters_use_go_short_escapes() {
        // Go >= 1.22 writes \b and \f; other C0 controls as \u00XX with lower-case hex; DEL and
        // '/' are written as they are.
        let spec = json!({"application": {"kind": "\u{8}\u{c}\u{1f}\u{7f}\"\\/"}});
        let json = String::from_utf8(canonical_json([("x", Some(&spec))]).unwrap()).unwrap();
        let expected = "{\"kind\":\"\\b\\f\\u001f\u{7f}\\\"\\\\/\",\"openAPISchema\":\"\",";
        assert!(json.contains(expected), "{json}");
    }

    #[test]
    fn hash_ignores_input_order() {
        let a = minimal_spec("A");
        let b = minimal_spec("B");
        let c = http_cache_spec();
        let orders = [
            [("a", Some(&a)), ("b", Some(&b)), ("c", Some(&c))],
            [("c", Some(&c)), ("a", Some(&a)), ("b", Some(&b))],
            [("b", Some(&b)), ("c", Some(&c)), ("a", Some(&a))],
        ];
        let hashes: Vec<String> = orders.iter().map(|o| config_hash(*o).unwrap()).collect();
        assert_eq!(hashes[0], hashes[1]);
        assert_eq!(hashes[0], hashes[2]);
    }

    #[test]
    fn hash_ignores_metadata_and_status_but_not_spec() {
        fn object(
            labels: Value,
            annotations: Value,
            rv: &str,
            spec: Value,
        ) -> kube::api::DynamicObject {
            serde_json::from_value(json!({
                "apiVersion": "cozystack.io/v1alpha1", "kind": "ApplicationDefinition",
                "metadata": {"name": "postgres", "labels": labels, "annotations": annotations,
                             "resourceVersion": rv, "generation": 3, "uid": rv},
                "spec": spec, "status": {"anything": rv}
            }))
            .unwrap()
        }
        let base =
            config_hash_of(&[object(json!({}), json!({}), "1", minimal_spec("Postgres"))]).unwrap();
        let relabelled = config_hash_of(&[object(
            json!({"team": "db"}),
            json!({"note": "x"}),
            "99",
            minimal_spec("Postgres"),
        )])
        .unwrap();
        assert_eq!(
            base, relabelled,
            "labels, annotations, resourceVersion and status are not hashed"
        );
        // Key order and unknown fields of the spec do not matter either.
        let mut reordered = json!({"release": {"prefix": ""}, "extra": 1});
        reordered["application"] =
            json!({"singular": "p", "plural": "ps", "openAPISchema": "{}", "kind": "Postgres"});
        assert_eq!(
            base,
            config_hash_of(&[object(json!({}), json!({}), "1", reordered)]).unwrap()
        );

        let mut changed = minimal_spec("Postgres");
        changed["application"]["openAPISchema"] = json!("{\"type\":\"object\"}");
        assert_ne!(
            base,
            config_hash_of(&[object(json!({}), json!({}), "1", changed)]).unwrap()
        );
        assert_ne!(
            base,
            config_hash_of(&[object(json!({}), json!({}), "1", minimal_spec("Postgres2"))])
                .unwrap()
        );
    }

    #[test]
    fn the_set_matters_not_only_each_spec() {
        let a = minimal_spec("A");
        let one = config_hash([("a", Some(&a))]).unwrap();
        let renamed = config_hash([("a2", Some(&a))]).unwrap();
        let two = config_hash([("a", Some(&a)), ("b", Some(&a))]).unwrap();
        let empty = config_hash([]).unwrap();
        assert_eq!(empty, sha256_hex(b"[]"));
        let all = [one, renamed, two, empty];
        for (i, x) in all.iter().enumerate() {
            assert_eq!(x.len(), 64);
            assert!(
                x.chars()
                    .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
            );
            for y in &all[i + 1..] {
                assert_ne!(x, y);
            }
        }
    }

    #[test]
    fn the_streamed_hash_is_the_hash_of_the_whole_bytes() {
        let (a, b, c) = (minimal_spec("A"), minimal_spec("B"), json!(null));
        let defs = [
            ("zeta", Some(&a)),
            ("alpha", Some(&b)),
            ("mid", Some(&c)),
            ("bare", None),
        ];
        let bytes = canonical_json(defs).unwrap();
        assert!(
            bytes.starts_with(br#"[{"name":"alpha","spec":"#),
            "{bytes:?}"
        );
        let parsed: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(parsed.as_array().map(Vec::len), Some(4));
        assert_eq!(config_hash(defs).unwrap(), sha256_hex(&bytes));
    }

    #[test]
    fn a_spec_of_the_wrong_shape_is_a_typed_error() {
        let bad = json!({"dashboard": {"weight": "heavy"}});
        let err = config_hash([("broken", Some(&bad))]).unwrap_err();
        assert!(
            matches!(&err, HashError::InvalidSpec { name, .. } if name == "broken"),
            "{err:?}"
        );
    }

    /// serde's derived decoding takes an array for a struct (its fields in order); Go's decoder
    /// refuses it, so the hash must fail rather than hash `{}` (found by the differential run
    /// against Go, `e2e/go-differential`).
    #[test]
    fn an_array_where_go_has_a_struct_is_an_error_as_in_go() {
        for bad in [
            json!({"secrets": []}),
            json!({"application": ["Postgres", "{}", "postgreses", "postgres"]}),
            json!({"release": {"chartRef": ["HelmChart", "x"]}}),
            json!({"services": {"include": [["a"]]}}),
            json!({"dashboard": []}),
            json!([]),
        ] {
            let err = canonical_json([("d", Some(&bad))]).unwrap_err();
            assert!(
                matches!(&err, HashError::InvalidSpec { .. }),
                "{bad}: {err:?}"
            );
        }
        // null stays the zero value, as in Go.
        let null_blocks =
            json!({"secrets": null, "dashboard": null, "release": {"chartRef": null}});
        assert_eq!(
            String::from_utf8(canonical_json([("d", Some(&null_blocks))]).unwrap()).unwrap(),
            r#"[{"name":"d","spec":{"application":{"kind":"","openAPISchema":"","plural":"","singular":""},"release":{"chartRef":null,"prefix":""},"secrets":{},"services":{},"ingresses":{}}}]"#
        );
    }
}
