//! OpenAPI v3 and v2 documents with real schemas, for `kubectl explain` and kubectl's client-side checks
//! (`create -f`/`apply -f` look up whether the server supports `fieldValidation`; kubectl up to 1.28 asks
//! `/openapi/v2`, as protobuf, newer ones `/openapi/v3`).
//!
//! ```text
//! built-in kinds ──k8s-openapi schemas (schemars)──► definitions (built once per process, on first use)
//! CRDs ──openAPIV3Schema──► one definition per served version (com.example.v1.Widget)
//!        └► /openapi/v3 root (a hash per group-version) ─► /openapi/v3/apis/g/v  (paths + components)
//!        └► /openapi/v2 (every path and definition; JSON, or gnostic protobuf when asked for)
//! ```
//! Documents are built lazily and cached per group-version; a cache entry is keyed by the generations of
//! the CRDs it covers, so it is rebuilt only when one of them changes, and the v3 root's hashes change
//! with it (kubectl caches documents by hash). PATCH operations carry `x-kubernetes-group-version-kind`
//! and the `fieldValidation` parameter, and do not advertise strategic merge patch: the schemas carry no
//! patch-merge keys, so kubectl keeps computing strategic merge patches from its compiled-in types.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, LazyLock};

use k8s_openapi::schemars::{self, JsonSchema, generate::SchemaSettings};
use serde_json::{Map, Value, json};
use sha2::Digest;

use crate::kinds::Kind;

const V3_REF: &str = "#/components/schemas/";
const V2_REF: &str = "#/definitions/";

/// The built-in definitions (v3 form) and the definition name of every built-in kind.
struct Builtins {
    defs: Map<String, Value>,
    kinds: HashMap<(&'static str, &'static str, &'static str), String>,
}

fn register<T: JsonSchema>(
    generator: &mut schemars::SchemaGenerator,
    kinds: &mut HashMap<(&'static str, &'static str, &'static str), String>,
    gvk: (&'static str, &'static str, &'static str),
) {
    generator.subschema_for::<T>();
    kinds.insert(gvk, T::schema_name().into_owned());
}

static BUILTINS: LazyLock<Builtins> = LazyLock::new(|| {
    use k8s_openapi::api::{
        apps::v1 as apps, batch::v1 as batch, coordination::v1 as coordination, core::v1 as core,
        events::v1 as events, networking::v1 as networking, policy::v1 as policy, rbac::v1 as rbac,
    };
    use k8s_openapi::api::{authentication::v1 as authn, authorization::v1 as authz};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
    let mut generator = schemars::SchemaGenerator::new(SchemaSettings::openapi3());
    let mut kinds = HashMap::new();
    let g = &mut generator;
    let k = &mut kinds;
    register::<core::Namespace>(g, k, ("", "v1", "Namespace"));
    register::<core::Secret>(g, k, ("", "v1", "Secret"));
    register::<core::ConfigMap>(g, k, ("", "v1", "ConfigMap"));
    register::<core::Pod>(g, k, ("", "v1", "Pod"));
    register::<core::PersistentVolumeClaim>(g, k, ("", "v1", "PersistentVolumeClaim"));
    register::<core::PersistentVolume>(g, k, ("", "v1", "PersistentVolume"));
    register::<core::Service>(g, k, ("", "v1", "Service"));
    register::<core::ServiceAccount>(g, k, ("", "v1", "ServiceAccount"));
    register::<core::Event>(g, k, ("", "v1", "Event"));
    register::<events::Event>(g, k, ("events.k8s.io", "v1", "Event"));
    register::<coordination::Lease>(g, k, ("coordination.k8s.io", "v1", "Lease"));
    register::<apps::Deployment>(g, k, ("apps", "v1", "Deployment"));
    register::<batch::Job>(g, k, ("batch", "v1", "Job"));
    register::<policy::PodDisruptionBudget>(g, k, ("policy", "v1", "PodDisruptionBudget"));
    register::<networking::NetworkPolicy>(g, k, ("networking.k8s.io", "v1", "NetworkPolicy"));
    register::<apiext::CustomResourceDefinition>(
        g,
        k,
        ("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
    );
    register::<rbac::Role>(g, k, ("rbac.authorization.k8s.io", "v1", "Role"));
    register::<rbac::RoleBinding>(g, k, ("rbac.authorization.k8s.io", "v1", "RoleBinding"));
    register::<rbac::ClusterRole>(g, k, ("rbac.authorization.k8s.io", "v1", "ClusterRole"));
    register::<rbac::ClusterRoleBinding>(
        g,
        k,
        ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"),
    );
    register::<authn::TokenReview>(g, k, ("authentication.k8s.io", "v1", "TokenReview"));
    register::<authn::SelfSubjectReview>(
        g,
        k,
        ("authentication.k8s.io", "v1", "SelfSubjectReview"),
    );
    register::<authz::SubjectAccessReview>(
        g,
        k,
        ("authorization.k8s.io", "v1", "SubjectAccessReview"),
    );
    register::<authz::SelfSubjectAccessReview>(
        g,
        k,
        ("authorization.k8s.io", "v1", "SelfSubjectAccessReview"),
    );
    register::<authz::LocalSubjectAccessReview>(
        g,
        k,
        ("authorization.k8s.io", "v1", "LocalSubjectAccessReview"),
    );
    register::<authz::SelfSubjectRulesReview>(
        g,
        k,
        ("authorization.k8s.io", "v1", "SelfSubjectRulesReview"),
    );
    let mut defs = generator.take_definitions(true);
    for ((group, version, kind), name) in &kinds {
        if let Some(d) = defs.get_mut(name).and_then(Value::as_object_mut) {
            d.insert(
                "x-kubernetes-group-version-kind".into(),
                json!([{"group": group, "kind": kind, "version": version}]),
            );
            // The Rust types make metadata required; the API does not.
            if let Some(req) = d.get_mut("required").and_then(Value::as_array_mut) {
                req.retain(|r| r != "metadata");
                if req.is_empty() {
                    d.remove("required");
                }
            }
        }
    }
    Builtins { defs, kinds }
});

/// The definition name upstream gives a custom resource: reversed group, version, kind.
fn crd_definition_name(kind: &Kind) -> String {
    let mut group: Vec<&str> = kind.group.split('.').collect();
    group.reverse();
    format!("{}.{}.{}", group.join("."), kind.version, kind.kind)
}

/// The definition of a custom resource version: its schema with the standard object fields.
fn crd_definition(kind: &Kind) -> Value {
    let mut d = kind
        .schema
        .clone()
        .unwrap_or_else(|| json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
    let props = d["properties"].as_object().cloned().unwrap_or_default();
    let mut p = Map::new();
    p.insert("apiVersion".into(), json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"}));
    p.insert("kind".into(), json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"}));
    p.insert(
        "metadata".into(),
        json!({"allOf": [{"$ref": format!("{V3_REF}io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")}],
            "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"}),
    );
    for (k, v) in props {
        if !matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
            p.insert(k, v);
        }
    }
    d["properties"] = Value::Object(p);
    d["type"] = json!("object");
    d["x-kubernetes-group-version-kind"] =
        json!([{"group": kind.group, "kind": kind.kind, "version": kind.version}]);
    d
}

/// The definition name of a served kind.
fn definition_name(kind: &Kind) -> Option<String> {
    if kind.custom {
        Some(crd_definition_name(kind))
    } else {
        BUILTINS
            .kinds
            .get(&(
                kind.group.as_str(),
                kind.version.as_str(),
                kind.kind.as_str(),
            ))
            .cloned()
    }
}

fn collect_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == "$ref" {
                    if let Some(r) = x.as_str().and_then(|r| r.strip_prefix(V3_REF)) {
                        out.push(r.to_string());
                    }
                } else {
                    collect_refs(x, out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_refs(x, out)),
        _ => {}
    }
}

/// `roots` and every built-in definition they reference, transitively.
fn closure(roots: BTreeMap<String, Value>) -> BTreeMap<String, Value> {
    let mut out = roots;
    let mut todo: Vec<String> = Vec::new();
    for v in out.values() {
        collect_refs(v, &mut todo);
    }
    while let Some(name) = todo.pop() {
        if out.contains_key(&name) {
            continue;
        }
        if let Some(d) = BUILTINS.defs.get(&name) {
            collect_refs(d, &mut todo);
            out.insert(name, d.clone());
        }
    }
    out
}

fn base_path(kind: &Kind) -> String {
    if kind.group.is_empty() {
        format!("/api/{}", kind.version)
    } else {
        format!("/apis/{}/{}", kind.group, kind.version)
    }
}

fn query(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": "string", "uniqueItems": true}})
}

/// The operations of one kind: collection (list, create) and item (get, replace, patch, delete) paths.
fn paths_of(kind: &Kind, def: &str, out: &mut Map<String, Value>) {
    let gvk = json!({"group": kind.group, "version": kind.version, "kind": kind.kind});
    let body_ref = json!({"$ref": format!("{V3_REF}{def}")});
    let ok = |code: &str| json!({code: {"description": "OK", "content": {"application/json": {"schema": body_ref}}}});
    let dry_run = query(
        "dryRun",
        "When present, indicates that modifications should not be persisted. Valid values are: - All: all dry run stages will be processed",
    );
    let field_manager = query(
        "fieldManager",
        "fieldManager is a name associated with the actor or entity that is making these changes.",
    );
    let field_validation = query(
        "fieldValidation",
        "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore - Warn - Strict",
    );
    let op = |action: &str, id: &str, params: Vec<Value>, body: Option<Value>, responses: Value| {
        let mut o = json!({"operationId": id, "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk, "parameters": params, "responses": responses});
        if let Some(b) = body {
            o["requestBody"] = b;
        }
        o
    };
    let json_body =
        json!({"content": {"application/json": {"schema": body_ref}}, "required": true});
    let patch_body = json!({"content": {
        "application/apply-patch+yaml": {"schema": {"type": "object"}},
        "application/json-patch+json": {"schema": {"type": "object"}},
        "application/merge-patch+json": {"schema": {"type": "object"}}}, "required": true});
    let base = base_path(kind);
    let collection = if kind.namespaced {
        format!("{base}/namespaces/{{namespace}}/{}", kind.plural)
    } else {
        format!("{base}/{}", kind.plural)
    };
    let id = format!("{}{}", kind.kind, kind.version);
    if kind.create_only {
        out.insert(
            collection,
            json!({"post": op("post", &format!("create{id}"), vec![dry_run, field_manager, field_validation], Some(json_body), ok("201"))}),
        );
        return;
    }
    out.insert(
        collection.clone(),
        json!({
            "get": op("list", &format!("list{id}"), vec![query("labelSelector", "A selector to restrict the list of returned objects by their labels."), query("fieldSelector", "A selector to restrict the list of returned objects by their fields."), query("limit", "limit is a maximum number of responses to return for a list call."), query("continue", "The continue option should be set when retrieving more results from the server.")], None, json!({"200": {"description": "OK"}})),
            "post": op("post", &format!("create{id}"), vec![dry_run.clone(), field_manager.clone(), field_validation.clone()], Some(json_body.clone()), ok("201")),
        }),
    );
    out.insert(
        format!("{collection}/{{name}}"),
        json!({
            "get": op("get", &format!("read{id}"), vec![], None, ok("200")),
            "put": op("put", &format!("replace{id}"), vec![dry_run.clone(), field_manager.clone(), field_validation.clone()], Some(json_body), ok("200")),
            "patch": op("patch", &format!("patch{id}"), vec![dry_run.clone(), field_manager, field_validation, query("force", "Force is going to \"force\" Apply requests.")], Some(patch_body), ok("200")),
            "delete": op("delete", &format!("delete{id}"), vec![dry_run], None, json!({"200": {"description": "OK"}})),
        }),
    );
}

/// One OpenAPI v3 document, ready to serve.
#[derive(Debug)]
pub(crate) struct Doc {
    /// The JSON text.
    pub(crate) json: String,
    /// Its content hash (upper-case hex SHA-256), as in the root's `serverRelativeURL`.
    pub(crate) hash: String,
}

/// The v2 document in both encodings.
#[derive(Debug)]
pub(crate) struct V2 {
    /// JSON text.
    pub(crate) json: String,
    /// gnostic `openapi_v2.Document` protobuf.
    pub(crate) proto: Vec<u8>,
}

/// Documents built so far, keyed by group-version, each with the fingerprint it was built for.
#[derive(Default)]
pub(crate) struct Cache {
    v3: HashMap<(String, String), (String, Arc<Doc>)>,
    v2: Option<(String, Arc<V2>)>,
}

/// What a document depends on: the kinds it covers and, for custom resources, their CRD generations.
fn fingerprint<'a>(kinds: impl Iterator<Item = &'a Arc<Kind>>) -> String {
    kinds
        .map(|k| {
            format!(
                "{}/{}/{}@{}",
                k.group, k.version, k.kind, k.source_generation
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn group_versions(kinds: &[Arc<Kind>]) -> BTreeSet<(String, String)> {
    kinds
        .iter()
        .map(|k| (k.group.clone(), k.version.clone()))
        .collect()
}

fn build_v3(kinds: &[&Arc<Kind>]) -> Doc {
    let mut paths = Map::new();
    let mut roots = BTreeMap::new();
    for k in kinds {
        let Some(def) = definition_name(k) else {
            continue;
        };
        if k.custom {
            roots.insert(def.clone(), crd_definition(k));
        } else if let Some(d) = BUILTINS.defs.get(&def) {
            roots.insert(def.clone(), d.clone());
        }
        paths_of(k, &def, &mut paths);
    }
    let schemas: Map<String, Value> = closure(roots).into_iter().collect();
    let doc = json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": paths, "components": {"schemas": schemas}});
    let json = doc.to_string();
    let hash = hex::encode(sha2::Sha256::digest(json.as_bytes())).to_uppercase();
    Doc { json, hash }
}

impl Cache {
    /// The v3 document of one group-version, or None when it is not served.
    pub(crate) fn v3(
        &mut self,
        kinds: &[Arc<Kind>],
        group: &str,
        version: &str,
    ) -> Option<Arc<Doc>> {
        let of: Vec<&Arc<Kind>> = kinds
            .iter()
            .filter(|k| k.group == group && k.version == version)
            .collect();
        if of.is_empty() {
            return None;
        }
        let fp = fingerprint(of.iter().copied());
        let key = (group.to_string(), version.to_string());
        if let Some((f, d)) = self.v3.get(&key)
            && *f == fp
        {
            return Some(d.clone());
        }
        let doc = Arc::new(build_v3(&of));
        self.v3.insert(key, (fp, doc.clone()));
        Some(doc)
    }

    /// `GET /openapi/v3`: every served group-version with its document's hash.
    pub(crate) fn root(&mut self, kinds: &[Arc<Kind>]) -> Value {
        let mut paths = Map::new();
        for (g, v) in group_versions(kinds) {
            let key = if g.is_empty() {
                format!("api/{v}")
            } else {
                format!("apis/{g}/{v}")
            };
            if let Some(doc) = self.v3(kinds, &g, &v) {
                paths.insert(
                    key.clone(),
                    json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={}", doc.hash)}),
                );
            }
        }
        // Drop documents of group-versions that are no longer served.
        let served = group_versions(kinds);
        self.v3.retain(|k, _| served.contains(k));
        json!({"paths": paths})
    }

    /// `GET /openapi/v2`.
    pub(crate) fn v2(&mut self, kinds: &[Arc<Kind>]) -> Arc<V2> {
        let fp = fingerprint(kinds.iter());
        if let Some((f, d)) = &self.v2
            && *f == fp
        {
            return d.clone();
        }
        let mut paths = Map::new();
        let mut roots = BTreeMap::new();
        for k in kinds {
            let Some(def) = definition_name(k) else {
                continue;
            };
            if k.custom {
                roots.insert(def.clone(), crd_definition(k));
            } else if let Some(d) = BUILTINS.defs.get(&def) {
                roots.insert(def.clone(), d.clone());
            }
            paths_of(k, &def, &mut paths);
        }
        let defs: Map<String, Value> = closure(roots)
            .into_iter()
            .map(|(k, v)| (k, to_v2_schema(&v)))
            .collect();
        let paths: Map<String, Value> = paths
            .into_iter()
            .map(|(p, item)| (p, to_v2_path(&item)))
            .collect();
        let doc = json!({"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.33.0"},
            "paths": paths, "definitions": defs});
        let v2 = Arc::new(V2 {
            json: doc.to_string(),
            proto: gnostic::document(&doc),
        });
        self.v2 = Some((fp, v2.clone()));
        v2
    }
}

/// A v3 schema as v2 writes it: `#/definitions/` references, a single `allOf` reference inlined as `$ref`
/// next to its description, no `nullable`.
fn to_v2_schema(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, x) in m {
                match k.as_str() {
                    "$ref" => {
                        let r = x.as_str().unwrap_or_default().replace(V3_REF, V2_REF);
                        out.insert(k.clone(), json!(r));
                    }
                    "allOf"
                        if x.as_array()
                            .is_some_and(|a| a.len() == 1 && a[0].get("$ref").is_some()) =>
                    {
                        out.insert(
                            "$ref".into(),
                            json!(
                                x[0]["$ref"]
                                    .as_str()
                                    .unwrap_or_default()
                                    .replace(V3_REF, V2_REF)
                            ),
                        );
                    }
                    "nullable" => {}
                    _ => {
                        out.insert(k.clone(), to_v2_schema(x));
                    }
                }
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(to_v2_schema).collect()),
        other => other.clone(),
    }
}

/// A v3 path item as v2 writes it: `consumes`/`produces` instead of request bodies, parameters with their
/// type inline, the body as a `body` parameter.
fn to_v2_path(item: &Value) -> Value {
    let mut out = Map::new();
    for (method, op) in item.as_object().into_iter().flatten() {
        let mut o = op.clone();
        let mut params: Vec<Value> = op["parameters"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|p| json!({"name": p["name"], "in": p["in"], "description": p["description"], "type": "string", "uniqueItems": true}))
            .collect();
        if let Some(content) = op["requestBody"]["content"].as_object() {
            o["consumes"] = json!(content.keys().collect::<Vec<_>>());
            let schema = content
                .values()
                .next()
                .map(|c| to_v2_schema(&c["schema"]))
                .unwrap_or(json!({"type": "object"}));
            params.insert(
                0,
                json!({"name": "body", "in": "body", "required": true, "schema": schema}),
            );
        }
        let mut responses = Map::new();
        for (code, r) in op["responses"].as_object().into_iter().flatten() {
            let mut resp = json!({"description": r["description"]});
            if let Some(s) = r["content"]["application/json"].get("schema") {
                resp["schema"] = to_v2_schema(s);
            }
            responses.insert(code.clone(), resp);
        }
        if let Some(m) = o.as_object_mut() {
            m.remove("requestBody");
            m.insert("parameters".into(), Value::Array(params));
            m.insert("responses".into(), Value::Object(responses));
            m.insert("produces".into(), json!(["application/json"]));
        }
        out.insert(method.clone(), o);
    }
    Value::Object(out)
}

/// The gnostic `openapi_v2.Document` protobuf encoding of a v2 document (what client-go's
/// `OpenAPISchema()` decodes), written with prost's wire primitives. Only the message fields the
/// documents above use are encoded; the field numbers are those of gnostic's `OpenAPIv2.proto`.
mod gnostic {
    use prost::encoding::{WireType, encode_key, encode_varint};
    use serde_json::Value;

    fn bytes(buf: &mut Vec<u8>, tag: u32, data: &[u8]) {
        encode_key(tag, WireType::LengthDelimited, buf);
        encode_varint(data.len() as u64, buf);
        buf.extend_from_slice(data);
    }

    fn string(buf: &mut Vec<u8>, tag: u32, s: &str) {
        if !s.is_empty() {
            bytes(buf, tag, s.as_bytes());
        }
    }

    fn boolean(buf: &mut Vec<u8>, tag: u32, b: bool) {
        if b {
            encode_key(tag, WireType::Varint, buf);
            encode_varint(1, buf);
        }
    }

    fn int(buf: &mut Vec<u8>, tag: u32, n: i64) {
        encode_key(tag, WireType::Varint, buf);
        encode_varint(n as u64, buf);
    }

    fn double(buf: &mut Vec<u8>, tag: u32, f: f64) {
        encode_key(tag, WireType::SixtyFourBit, buf);
        buf.extend_from_slice(&f.to_le_bytes());
    }

    fn message(buf: &mut Vec<u8>, tag: u32, f: impl FnOnce(&mut Vec<u8>)) {
        let mut inner = Vec::new();
        f(&mut inner);
        bytes(buf, tag, &inner);
    }

    /// `Any { yaml = 2 }` (JSON is YAML).
    fn any(buf: &mut Vec<u8>, tag: u32, v: &Value) {
        message(buf, tag, |b| string(b, 2, &v.to_string()));
    }

    /// `NamedAny { name = 1, value = 2 }` for every `x-` key.
    fn extensions(buf: &mut Vec<u8>, tag: u32, m: &serde_json::Map<String, Value>) {
        for (k, v) in m.iter().filter(|(k, _)| k.starts_with("x-")) {
            message(buf, tag, |b| {
                string(b, 1, k);
                any(b, 2, v);
            });
        }
    }

    fn schema(buf: &mut Vec<u8>, s: &Value) {
        let Some(m) = s.as_object() else {
            return;
        };
        let st = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or_default();
        string(buf, 1, st("$ref"));
        string(buf, 2, st("format"));
        string(buf, 3, st("title"));
        string(buf, 4, st("description"));
        if let Some(d) = m.get("default") {
            any(buf, 5, d);
        }
        let num = |k: &str| m.get(k).and_then(Value::as_f64);
        if let Some(x) = num("multipleOf") {
            double(buf, 6, x);
        }
        if let Some(x) = num("maximum") {
            double(buf, 7, x);
        }
        boolean(
            buf,
            8,
            m.get("exclusiveMaximum") == Some(&Value::Bool(true)),
        );
        if let Some(x) = num("minimum") {
            double(buf, 9, x);
        }
        boolean(
            buf,
            10,
            m.get("exclusiveMinimum") == Some(&Value::Bool(true)),
        );
        for (tag, k) in [
            (11, "maxLength"),
            (12, "minLength"),
            (14, "maxItems"),
            (15, "minItems"),
            (17, "maxProperties"),
            (18, "minProperties"),
        ] {
            if let Some(n) = m.get(k).and_then(Value::as_i64) {
                int(buf, tag, n);
            }
        }
        string(buf, 13, st("pattern"));
        boolean(buf, 16, m.get("uniqueItems") == Some(&Value::Bool(true)));
        for r in m
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            string(buf, 19, r.as_str().unwrap_or_default());
        }
        for e in m
            .get("enum")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            any(buf, 20, e);
        }
        match m.get("additionalProperties") {
            Some(Value::Bool(b)) => message(buf, 21, |x| boolean(x, 2, *b)),
            Some(a @ Value::Object(_)) => message(buf, 21, |x| message(x, 1, |y| schema(y, a))),
            _ => {}
        }
        if let Some(t) = m.get("type").and_then(Value::as_str) {
            message(buf, 22, |x| string(x, 1, t));
        }
        if let Some(items) = m.get("items").filter(|i| i.is_object()) {
            message(buf, 23, |x| message(x, 1, |y| schema(y, items)));
        }
        for a in m
            .get("allOf")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            message(buf, 24, |x| schema(x, a));
        }
        if let Some(props) = m.get("properties").and_then(Value::as_object) {
            message(buf, 25, |x| {
                for (k, v) in props {
                    message(x, 1, |y| {
                        string(y, 1, k);
                        message(y, 2, |z| schema(z, v));
                    });
                }
            });
        }
        extensions(buf, 31, m);
    }

    fn parameter(buf: &mut Vec<u8>, p: &Value) {
        let st = |k: &str| p[k].as_str().unwrap_or_default();
        // ParametersItem { parameter = 1: Parameter { body_parameter = 1 | non_body_parameter = 2 } }
        message(buf, 8, |item| {
            message(item, 1, |param| {
                if st("in") == "body" {
                    message(param, 1, |b| {
                        string(b, 1, st("description"));
                        string(b, 2, st("name"));
                        string(b, 3, "body");
                        boolean(b, 4, p["required"] == true);
                        message(b, 5, |s| schema(s, &p["schema"]));
                    });
                } else {
                    // NonBodyParameter { query_parameter_sub_schema = 3 }
                    message(param, 2, |nb| {
                        message(nb, 3, |q| {
                            boolean(q, 1, p["required"] == true);
                            string(q, 2, st("in"));
                            string(q, 3, st("description"));
                            string(q, 4, st("name"));
                            string(q, 6, st("type"));
                            boolean(q, 20, p["uniqueItems"] == true);
                        });
                    });
                }
            });
        });
    }

    fn operation(buf: &mut Vec<u8>, op: &Value) {
        let st = |k: &str| op[k].as_str().unwrap_or_default();
        string(buf, 3, st("description"));
        string(buf, 5, st("operationId"));
        for p in op["produces"].as_array().into_iter().flatten() {
            string(buf, 6, p.as_str().unwrap_or_default());
        }
        for c in op["consumes"].as_array().into_iter().flatten() {
            string(buf, 7, c.as_str().unwrap_or_default());
        }
        for p in op["parameters"].as_array().into_iter().flatten() {
            parameter(buf, p);
        }
        if let Some(rs) = op["responses"].as_object() {
            message(buf, 9, |responses| {
                for (code, r) in rs {
                    // NamedResponseValue { name = 1, value = 2: ResponseValue { response = 1 } }
                    message(responses, 1, |named| {
                        string(named, 1, code);
                        message(named, 2, |value| {
                            message(value, 1, |resp| {
                                string(resp, 1, r["description"].as_str().unwrap_or_default());
                                if r["schema"].is_object() {
                                    message(resp, 2, |si| {
                                        message(si, 1, |s| schema(s, &r["schema"]))
                                    });
                                }
                            });
                        });
                    });
                }
            });
        }
        if let Some(m) = op.as_object() {
            extensions(buf, 13, m);
        }
    }

    /// Encodes a swagger 2.0 document.
    pub(super) fn document(doc: &Value) -> Vec<u8> {
        let mut buf = Vec::new();
        string(&mut buf, 1, doc["swagger"].as_str().unwrap_or_default());
        message(&mut buf, 2, |info| {
            string(info, 1, doc["info"]["title"].as_str().unwrap_or_default());
            string(info, 2, doc["info"]["version"].as_str().unwrap_or_default());
        });
        message(&mut buf, 8, |paths| {
            for (p, item) in doc["paths"].as_object().into_iter().flatten() {
                // NamedPathItem { name = 1, value = 2: PathItem { get 2, put 3, post 4, delete 5, patch 8 } }
                message(paths, 2, |named| {
                    string(named, 1, p);
                    message(named, 2, |pi| {
                        for (method, tag) in [
                            ("get", 2),
                            ("put", 3),
                            ("post", 4),
                            ("delete", 5),
                            ("patch", 8),
                        ] {
                            if item[method].is_object() {
                                message(pi, tag, |o| operation(o, &item[method]));
                            }
                        }
                    });
                });
            }
        });
        message(&mut buf, 9, |defs| {
            for (name, s) in doc["definitions"].as_object().into_iter().flatten() {
                message(defs, 1, |named| {
                    string(named, 1, name);
                    message(named, 2, |x| schema(x, s));
                });
            }
        });
        buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_kinds_have_definitions_with_their_gvk() {
        let d = &BUILTINS.defs["io.k8s.api.apps.v1.Deployment"];
        assert_eq!(
            d["x-kubernetes-group-version-kind"],
            json!([{"group": "apps", "kind": "Deployment", "version": "v1"}])
        );
        assert!(d.get("required").is_none(), "metadata is not required");
        // References resolve within the definitions.
        let mut refs = Vec::new();
        for v in BUILTINS.defs.values() {
            collect_refs(v, &mut refs);
        }
        assert!(
            refs.iter().all(|r| BUILTINS.defs.contains_key(r)),
            "{refs:?}"
        );
        for k in crate::kinds::builtins() {
            assert!(definition_name(&k).is_some(), "{}", k.kind);
        }
    }

    #[test]
    fn v2_inlines_single_allof_references() {
        let v3 = json!({"properties": {"metadata": {"allOf": [{"$ref": "#/components/schemas/X"}], "description": "d"}}});
        assert_eq!(
            to_v2_schema(&v3),
            json!({"properties": {"metadata": {"$ref": "#/definitions/X", "description": "d"}}})
        );
    }
}
