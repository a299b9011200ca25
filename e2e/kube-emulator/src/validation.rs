//! Validation kube-apiserver applies to every write after defaulting, with its field paths and messages
//! (apimachinery's `util/validation`, `api/validation/objectmeta.go`, and the core, apps and batch
//! validators), for the kinds the emulator serves:
//!
//! * object metadata of every kind, custom resources included: the name by the kind's rule (DNS-1123
//!   subdomain; DNS-1123 label for Namespaces; DNS-1035 label for Services; path segment for RBAC
//!   objects), `generateName` as a prefix, label keys and values, annotation keys and total size,
//!   owner references and finalizers;
//! * ConfigMap and Secret keys, Secret types' required keys, `immutable` ConfigMaps and Secrets;
//! * Deployments and Jobs: selector present and matching the pod template's labels, the restart policy
//!   their controllers accept; pod specs (containers present, named, unique, with an image).
//!
//! [`decode_errors`] covers what fails earlier, while decoding the body into its Go type (a Secret value
//! that is not base64 is a 400, not a 422). Everything here is pure: values in, field errors out.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value};

use crate::error::{ApiError, FieldError, go_quote};
use crate::kinds::Kind;

/// The total size of all annotations of an object.
const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;
/// The largest ConfigMap or Secret payload.
const MAX_SECRET_SIZE: usize = 1024 * 1024;

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_SUBDOMAIN_FMT: &str =
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const CONFIG_MAP_KEY_FMT: &str = "[-._a-zA-Z0-9]+";

fn anchored(fmt: &str) -> Regex {
    Regex::new(&format!("^{fmt}$")).expect("valid regex")
}

static DNS1123_LABEL: LazyLock<Regex> = LazyLock::new(|| anchored(DNS1123_LABEL_FMT));
static DNS1123_SUBDOMAIN: LazyLock<Regex> = LazyLock::new(|| anchored(DNS1123_SUBDOMAIN_FMT));
static DNS1035_LABEL: LazyLock<Regex> = LazyLock::new(|| anchored(DNS1035_LABEL_FMT));
static QUALIFIED_NAME: LazyLock<Regex> = LazyLock::new(|| anchored(QUALIFIED_NAME_FMT));
static LABEL_VALUE: LazyLock<Regex> = LazyLock::new(|| anchored(LABEL_VALUE_FMT));
static CONFIG_MAP_KEY: LazyLock<Regex> = LazyLock::new(|| anchored(CONFIG_MAP_KEY_FMT));

/// apimachinery's `RegexError`: the message, the examples and the regex.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let mut s = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            s.push_str(" or ");
        }
        s.push_str(&format!("'{e}', "));
    }
    s.push_str(&format!("regex used for validation is '{fmt}')"));
    s
}

fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

/// `IsDNS1123Label`.
pub(crate) fn dns1123_label(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !DNS1123_LABEL.is_match(v) {
        if DNS1123_SUBDOMAIN.is_match(v) {
            errs.push("must not contain dots".into());
        } else {
            errs.push(regex_error(
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// `IsDNS1123Subdomain`.
pub(crate) fn dns1123_subdomain(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 253 {
        errs.push(max_len_error(253));
    }
    if !DNS1123_SUBDOMAIN.is_match(v) {
        errs.push(regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// `IsDNS1035Label`.
fn dns1035_label(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !DNS1035_LABEL.is_match(v) {
        errs.push(regex_error(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character",
            DNS1035_LABEL_FMT,
            &["my-name", "abc-123"],
        ));
    }
    errs
}

const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// `IsQualifiedName` (label keys, annotation keys, finalizers).
fn qualified_name(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = v.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".into());
            } else {
                errs.extend(
                    dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            return vec![format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    QUALIFIED_NAME_MSG,
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            )];
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".into());
    } else if name.len() > 63 {
        errs.push(format!("name part {}", max_len_error(63)));
    }
    if !QUALIFIED_NAME.is_match(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_MSG,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// `IsValidLabelValue`.
fn label_value(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !LABEL_VALUE.is_match(v) {
        errs.push(regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// `IsConfigMapKey` (ConfigMap and Secret keys).
fn config_map_key(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 253 {
        errs.push(max_len_error(253));
    }
    if !CONFIG_MAP_KEY.is_match(v) {
        errs.push(regex_error(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
            CONFIG_MAP_KEY_FMT,
            &["key.name", "KEY_NAME", "key-name"],
        ));
    }
    if v == "." {
        errs.push("must not be '.'".into());
    } else if v == ".." {
        errs.push("must not be '..'".into());
    } else if v.starts_with("..") {
        errs.push("must not start with '..'".into());
    }
    errs
}

/// `IsValidPathSegmentName` (and its prefix form for `generateName`).
fn path_segment_name(v: &str, prefix: bool) -> Vec<String> {
    if !prefix {
        for bad in [".", ".."] {
            if v == bad {
                return vec![format!("may not be '{bad}'")];
            }
        }
    }
    ["/", "%"]
        .iter()
        .filter(|c| v.contains(*c))
        .map(|c| format!("may not contain '{c}'"))
        .collect()
}

/// `maskTrailingDash`: a generateName prefix may end in '-', since characters are appended to it.
fn mask_trailing_dash(name: &str) -> String {
    if name.len() > 1 && name.ends_with('-') {
        format!("{}a", &name[..name.len() - 2])
    } else {
        name.to_string()
    }
}

/// The name rule of a kind (`prefix` for generateName).
fn name_errors(kind: &Kind, name: &str, prefix: bool) -> Vec<String> {
    let masked = if prefix {
        mask_trailing_dash(name)
    } else {
        name.to_string()
    };
    match (kind.group.as_str(), kind.kind.as_str()) {
        ("", "Namespace") => dns1123_label(&masked),
        ("", "Service") => dns1035_label(&masked),
        ("rbac.authorization.k8s.io", _) => path_segment_name(name, prefix),
        _ => dns1123_subdomain(&masked),
    }
}

/// A map of strings as Go's `%#v` prints a `map[string]string`.
pub(crate) fn go_string_map(m: Option<&Map<String, Value>>) -> String {
    let Some(m) = m else {
        return "map[string]string(nil)".into();
    };
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort();
    let body: Vec<String> = keys
        .iter()
        .map(|k| {
            format!(
                "{}:{}",
                go_quote(k),
                go_quote(m[*k].as_str().unwrap_or_default())
            )
        })
        .collect();
    format!("map[string]string{{{}}}", body.join(", "))
}

/// A list of strings as Go's `%#v` prints a `[]string`.
pub(crate) fn go_strings<S: AsRef<str>>(v: &[S]) -> String {
    let body: Vec<String> = v.iter().map(|s| go_quote(s.as_ref())).collect();
    format!("[]string{{{}}}", body.join(", "))
}

fn strings_of(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn sorted_entries(m: &Map<String, Value>) -> Vec<(&String, &Value)> {
    let mut v: Vec<(&String, &Value)> = m.iter().collect();
    v.sort_by(|a, b| a.0.cmp(b.0));
    v
}

/// `ValidateLabels` at `path`.
fn labels(v: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let Some(m) = v.as_object() else {
        return;
    };
    for (k, val) in sorted_entries(m) {
        for msg in qualified_name(k) {
            errs.push(FieldError::invalid(path, &go_quote(k), &msg));
        }
        let val = val.as_str().unwrap_or_default();
        for msg in label_value(val) {
            errs.push(FieldError::invalid(path, &go_quote(val), &msg));
        }
    }
}

/// `ValidateAnnotations` at `path`: keys are qualified names compared case-insensitively, and all of them
/// together stay within 256 KiB.
fn annotations(v: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let Some(m) = v.as_object() else {
        return;
    };
    let mut total = 0;
    for (k, val) in sorted_entries(m) {
        for msg in qualified_name(&k.to_lowercase()) {
            errs.push(FieldError::invalid(path, &go_quote(k), &msg));
        }
        total += k.len() + val.as_str().map(str::len).unwrap_or_default();
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        errs.push(FieldError::too_long(path, TOTAL_ANNOTATION_SIZE_LIMIT));
    }
}

fn owner_references(v: &Value, errs: &mut Vec<FieldError>) {
    let Some(refs) = v.as_array() else {
        return;
    };
    let path = "metadata.ownerReferences";
    for r in refs {
        let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
        let api_version = s("apiVersion");
        let version = api_version.rsplit('/').next().unwrap_or_default();
        if version.is_empty() {
            errs.push(FieldError::invalid(
                format!("{path}.apiVersion"),
                &go_quote(&api_version),
                "version must not be empty",
            ));
        }
        for k in ["kind", "name", "uid"] {
            if s(k).is_empty() {
                errs.push(FieldError::invalid(
                    format!("{path}.{k}"),
                    "\"\"",
                    "must not be empty",
                ));
            }
        }
    }
}

fn finalizers(v: &Value, errs: &mut Vec<FieldError>) {
    let fins = strings_of(v);
    let path = "metadata.finalizers";
    for f in &fins {
        for msg in qualified_name(f) {
            errs.push(FieldError::invalid(path, &go_quote(f), &msg));
        }
    }
    if fins.iter().any(|f| f == "orphan") && fins.iter().any(|f| f == "foregroundDeletion") {
        errs.push(FieldError::invalid(
            path,
            &go_strings(&fins),
            "finalizer orphan and foregroundDeletion cannot be both set",
        ));
    }
}

/// `ValidateObjectMeta` for an object of `kind` (name generation has already happened).
fn object_meta(kind: &Kind, meta: &Value, errs: &mut Vec<FieldError>) {
    let generate_name = meta["generateName"].as_str().unwrap_or_default();
    if !generate_name.is_empty() {
        for msg in name_errors(kind, generate_name, true) {
            errs.push(FieldError::invalid(
                "metadata.generateName",
                &go_quote(generate_name),
                &msg,
            ));
        }
    }
    let name = meta["name"].as_str().unwrap_or_default();
    if name.is_empty() {
        errs.push(FieldError::required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else {
        for msg in name_errors(kind, name, false) {
            errs.push(FieldError::invalid("metadata.name", &go_quote(name), &msg));
        }
    }
    labels(&meta["labels"], "metadata.labels", errs);
    annotations(&meta["annotations"], "metadata.annotations", errs);
    owner_references(&meta["ownerReferences"], errs);
    finalizers(&meta["finalizers"], errs);
}

/// Every validation error of `obj` (the request after defaulting) for `kind`; `old` is the stored object on
/// updates. `status_only` writes (the `/status` subresource) are checked for metadata only, since the rest
/// of the object is carried over from the stored one.
pub(crate) fn validate(
    kind: &Kind,
    obj: &Value,
    old: Option<&Value>,
    status_only: bool,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    object_meta(kind, &obj["metadata"], &mut errs);
    if status_only || kind.custom {
        return errs;
    }
    match (kind.group.as_str(), kind.kind.as_str()) {
        ("", "ConfigMap") => config_map(obj, old, &mut errs),
        ("", "Secret") => secret(obj, old, &mut errs),
        ("", "Pod") => pod_spec(&obj["spec"], "spec", &mut errs),
        ("apps", "Deployment") => deployment(obj, &mut errs),
        ("batch", "Job") => job(obj, &mut errs),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => crd(obj, &mut errs),
        _ => {}
    }
    errs
}

fn data_keys(obj: &Value, field: &str, errs: &mut Vec<FieldError>) -> usize {
    let mut size = 0;
    if let Some(m) = obj[field].as_object() {
        for (k, v) in sorted_entries(m) {
            for msg in config_map_key(k) {
                errs.push(FieldError::invalid(
                    format!("{field}[{k}]"),
                    &go_quote(k),
                    &msg,
                ));
            }
            size += v.as_str().map(str::len).unwrap_or_default();
        }
    }
    size
}

/// `immutable: true` ConfigMaps and Secrets keep their data.
fn immutable_data(obj: &Value, old: Option<&Value>, errs: &mut Vec<FieldError>) {
    let Some(old) = old.filter(|o| o["immutable"] == true) else {
        return;
    };
    if obj["immutable"] != true {
        errs.push(FieldError::forbidden(
            "immutable",
            "field is immutable when `immutable` is set",
        ));
    }
    for f in ["data", "binaryData"] {
        let norm = |v: &Value| v.as_object().filter(|m| !m.is_empty()).cloned();
        if norm(&obj[f]) != norm(&old[f]) {
            errs.push(FieldError::forbidden(
                f,
                "field is immutable when `immutable` is set",
            ));
        }
    }
}

fn config_map(obj: &Value, old: Option<&Value>, errs: &mut Vec<FieldError>) {
    let mut size = data_keys(obj, "data", errs);
    if let (Some(d), Some(b)) = (obj["data"].as_object(), obj["binaryData"].as_object()) {
        for k in d.keys().filter(|k| b.contains_key(*k)) {
            errs.push(FieldError::invalid(
                format!("data[{k}]"),
                &go_quote(k),
                "duplicate of key present in binaryData",
            ));
        }
    }
    size += data_keys(obj, "binaryData", errs);
    if size > MAX_SECRET_SIZE {
        errs.push(FieldError::too_long("", MAX_SECRET_SIZE));
    }
    immutable_data(obj, old, errs);
}

fn secret(obj: &Value, old: Option<&Value>, errs: &mut Vec<FieldError>) {
    let size = data_keys(obj, "data", errs);
    if size > MAX_SECRET_SIZE {
        errs.push(FieldError::too_long("data", MAX_SECRET_SIZE));
    }
    let has = |k: &str| obj["data"].get(k).is_some();
    let required = |k: &str| FieldError::required(format!("data[{k}]"), "");
    match obj["type"].as_str().unwrap_or_default() {
        "kubernetes.io/service-account-token"
            if obj["metadata"]["annotations"]["kubernetes.io/service-account.name"]
                .as_str()
                .is_none_or(str::is_empty) =>
        {
            errs.push(FieldError::required(
                "metadata.annotations[kubernetes.io/service-account.name]",
                "",
            ));
        }
        "kubernetes.io/dockercfg" if !has(".dockercfg") => errs.push(required(".dockercfg")),
        "kubernetes.io/dockerconfigjson" if !has(".dockerconfigjson") => {
            errs.push(required(".dockerconfigjson"))
        }
        "kubernetes.io/basic-auth" if !has("username") && !has("password") => {
            errs.push(required("username"));
            errs.push(required("password"));
        }
        "kubernetes.io/ssh-auth"
            if obj["data"]["ssh-privatekey"]
                .as_str()
                .is_none_or(str::is_empty) =>
        {
            errs.push(required("ssh-privatekey"))
        }
        "kubernetes.io/tls" => {
            for k in ["tls.crt", "tls.key"] {
                if !has(k) {
                    errs.push(required(k));
                }
            }
        }
        _ => {}
    }
    if let Some(old) = old
        && old["type"] != obj["type"]
    {
        errs.push(FieldError::invalid(
            "type",
            &go_quote(obj["type"].as_str().unwrap_or_default()),
            "field is immutable",
        ));
    }
    immutable_data(obj, old, errs);
}

/// A `metav1.LabelSelector` as its generated `String()` prints it.
fn go_label_selector(sel: &Value) -> String {
    let mut ml = String::from("map[string]string{");
    if let Some(m) = sel["matchLabels"].as_object() {
        for (k, v) in sorted_entries(m) {
            ml.push_str(&format!("{k}: {},", v.as_str().unwrap_or_default()));
        }
    }
    ml.push('}');
    let mut me = String::from("[]LabelSelectorRequirement{");
    if let Some(a) = sel["matchExpressions"].as_array() {
        for r in a {
            me.push_str(&format!(
                "LabelSelectorRequirement{{Key:{},Operator:{},Values:[{}],}},",
                r["key"].as_str().unwrap_or_default(),
                r["operator"].as_str().unwrap_or_default(),
                strings_of(&r["values"]).join(" ")
            ));
        }
    }
    me.push('}');
    format!("&LabelSelector{{MatchLabels:{ml},MatchExpressions:{me},}}")
}

/// Whether a `metav1.LabelSelector` selects `labels`; None when the selector is malformed.
pub(crate) fn selector_matches(sel: &Value, labels: &Value) -> Option<bool> {
    let get = |k: &str| labels.get(k).and_then(Value::as_str);
    if let Some(m) = sel["matchLabels"].as_object() {
        for (k, v) in m {
            if get(k) != Some(v.as_str()?) {
                return Some(false);
            }
        }
    }
    for r in sel["matchExpressions"].as_array().into_iter().flatten() {
        let key = r["key"].as_str()?;
        let values = strings_of(&r["values"]);
        let ok = match r["operator"].as_str()? {
            "In" if !values.is_empty() => get(key).is_some_and(|v| values.iter().any(|x| x == v)),
            "NotIn" if !values.is_empty() => {
                !get(key).is_some_and(|v| values.iter().any(|x| x == v))
            }
            "Exists" if values.is_empty() => get(key).is_some(),
            "DoesNotExist" if values.is_empty() => get(key).is_none(),
            _ => return None,
        };
        if !ok {
            return Some(false);
        }
    }
    Some(true)
}

fn selector_is_empty(sel: &Value) -> bool {
    sel["matchLabels"].as_object().is_none_or(Map::is_empty)
        && sel["matchExpressions"].as_array().is_none_or(Vec::is_empty)
}

/// The template part shared by Deployments and Jobs: the selector must select the template's labels.
fn template_selected(spec: &Value, errs: &mut Vec<FieldError>) {
    let sel = &spec["selector"];
    let tlabels = &spec["template"]["metadata"]["labels"];
    match selector_matches(sel, tlabels) {
        None => errs.push(FieldError::invalid(
            "spec.selector",
            &go_label_selector(sel),
            "invalid label selector",
        )),
        Some(false) if !selector_is_empty(sel) => errs.push(FieldError::invalid(
            "spec.template.metadata.labels",
            &go_string_map(tlabels.as_object()),
            "`selector` does not match template `labels`",
        )),
        _ => {}
    }
}

fn pod_template(spec: &Value, errs: &mut Vec<FieldError>) {
    let t = &spec["template"];
    labels(&t["metadata"]["labels"], "spec.template.labels", errs);
    annotations(
        &t["metadata"]["annotations"],
        "spec.template.annotations",
        errs,
    );
    pod_spec(&t["spec"], "spec.template.spec", errs);
}

fn deployment(obj: &Value, errs: &mut Vec<FieldError>) {
    let spec = &obj["spec"];
    if spec["replicas"].as_i64().is_some_and(|r| r < 0) {
        errs.push(FieldError::invalid(
            "spec.replicas",
            &spec["replicas"].to_string(),
            "must be greater than or equal to 0",
        ));
    }
    let sel = &spec["selector"];
    if sel.is_null() {
        errs.push(FieldError::required("spec.selector", ""));
    } else if selector_is_empty(sel) {
        errs.push(FieldError::invalid(
            "spec.selector",
            &go_label_selector(sel),
            "empty selector is invalid for deployment",
        ));
    }
    template_selected(spec, errs);
    pod_template(spec, errs);
    let policy = spec["template"]["spec"]["restartPolicy"]
        .as_str()
        .unwrap_or_default();
    if policy != "Always" {
        errs.push(FieldError::not_supported(
            "spec.template.spec.restartPolicy",
            &go_quote(policy),
            &["Always"],
        ));
    }
}

fn job(obj: &Value, errs: &mut Vec<FieldError>) {
    let spec = &obj["spec"];
    for f in ["parallelism", "completions", "backoffLimit"] {
        if spec[f].as_i64().is_some_and(|n| n < 0) {
            errs.push(FieldError::invalid(
                format!("spec.{f}"),
                &spec[f].to_string(),
                "must be greater than or equal to 0",
            ));
        }
    }
    if spec["selector"].is_null() {
        errs.push(FieldError::required("spec.selector", ""));
    } else {
        template_selected(spec, errs);
    }
    pod_template(spec, errs);
    let policy = spec["template"]["spec"]["restartPolicy"]
        .as_str()
        .unwrap_or_default();
    if policy != "OnFailure" && policy != "Never" {
        errs.push(FieldError::not_supported(
            "spec.template.spec.restartPolicy",
            &go_quote(policy),
            &["OnFailure", "Never"],
        ));
    }
}

/// The CRD rules the emulator relies on to serve a CRD: group and names present, the name
/// `<plural>.<group>`, a known scope, exactly one storage version.
fn crd(obj: &Value, errs: &mut Vec<FieldError>) {
    let spec = &obj["spec"];
    let st = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let (group, plural) = (st(&spec["group"]), st(&spec["names"]["plural"]));
    for (path, v) in [
        ("spec.group", &group),
        ("spec.names.plural", &plural),
        ("spec.names.kind", &st(&spec["names"]["kind"])),
    ] {
        if v.is_empty() {
            errs.push(FieldError::required(path, ""));
        }
    }
    let name = st(&obj["metadata"]["name"]);
    if name != format!("{plural}.{group}") {
        errs.push(FieldError::invalid(
            "metadata.name",
            &go_quote(&name),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    match spec["scope"].as_str().unwrap_or_default() {
        "" => errs.push(FieldError::required("spec.scope", "")),
        "Cluster" | "Namespaced" => {}
        other => errs.push(FieldError::not_supported(
            "spec.scope",
            &go_quote(other),
            &["Cluster", "Namespaced"],
        )),
    }
    let versions: Vec<&Value> = spec["versions"].as_array().into_iter().flatten().collect();
    let storage = versions.iter().filter(|v| v["storage"] == true).count();
    if storage != 1 {
        // Upstream prints the whole versions slice with Go's %#v; the version names stand in for it.
        let names: Vec<String> = versions.iter().map(|v| st(&v["name"])).collect();
        errs.push(FieldError::invalid(
            "spec.versions",
            &format!(
                "[]apiextensions.CustomResourceDefinitionVersion{{{}}}",
                names.join(", ")
            ),
            "must have exactly one version marked as storage version",
        ));
    }
}

/// The parts of `ValidatePodSpec` that catch real mistakes: containers present, named (DNS-1123 label,
/// unique across init and regular containers) and with an image; a known restart policy.
fn pod_spec(spec: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let mut names = BTreeSet::new();
    if spec["containers"].as_array().is_none_or(Vec::is_empty) {
        errs.push(FieldError::required(format!("{path}.containers"), ""));
    }
    for list in ["initContainers", "containers"] {
        for (i, c) in spec[list].as_array().into_iter().flatten().enumerate() {
            let p = format!("{path}.{list}[{i}]");
            let name = c["name"].as_str().unwrap_or_default();
            if name.is_empty() {
                errs.push(FieldError::required(format!("{p}.name"), ""));
            } else {
                for msg in dns1123_label(name) {
                    errs.push(FieldError::invalid(
                        format!("{p}.name"),
                        &go_quote(name),
                        &msg,
                    ));
                }
                if !names.insert(name.to_string()) {
                    errs.push(FieldError::duplicate(format!("{p}.name"), &go_quote(name)));
                }
            }
            if c["image"].as_str().is_none_or(str::is_empty) {
                errs.push(FieldError::required(format!("{p}.image"), ""));
            }
        }
    }
    let policy = spec["restartPolicy"].as_str().unwrap_or_default();
    if !matches!(policy, "Always" | "OnFailure" | "Never") {
        errs.push(FieldError::not_supported(
            format!("{path}.restartPolicy"),
            &go_quote(policy),
            &["Always", "OnFailure", "Never"],
        ));
    }
}

/// What kube-apiserver does while decoding the body into the kind's Go type, before any validation:
/// `metav1.Time`/`MicroTime` values are rewritten as the Go types serialise them, and values the Go type
/// cannot hold are a 400 BadRequest (a time that does not parse, Secret `data` that is not base64,
/// non-string ConfigMap/Secret data values).
pub(crate) fn decode(kind: &Kind, obj: &mut Value) -> Result<(), ApiError> {
    crate::json::normalize_times(obj, !kind.custom).map_err(|e| decode_error(kind, e))?;
    decode_errors(kind, obj)
}

fn decode_error(kind: &Kind, detail: String) -> ApiError {
    ApiError::bad_request(format!(
        "{k} in version \"{v}\" cannot be handled as a {k}: {detail}",
        k = kind.kind,
        v = kind.version
    ))
}

fn decode_errors(kind: &Kind, obj: &Value) -> Result<(), ApiError> {
    let decode_error = |detail: String| decode_error(kind, detail);
    if kind.custom || !kind.group.is_empty() {
        return Ok(());
    }
    let fields: &[&str] = match kind.kind.as_str() {
        "Secret" => &["data", "stringData"],
        "ConfigMap" => &["data", "binaryData"],
        _ => return Ok(()),
    };
    for f in fields {
        let Some(m) = obj[*f].as_object() else {
            continue;
        };
        for (_, v) in sorted_entries(m) {
            let Some(s) = v.as_str() else {
                if v.is_null() {
                    continue;
                }
                let go_type = if *f == "data" && kind.kind == "ConfigMap" || *f == "stringData" {
                    "string"
                } else {
                    "[]uint8"
                };
                return Err(decode_error(format!(
                    "json: cannot unmarshal {} into Go struct field {}.{f} of type {go_type}",
                    json_type(v),
                    kind.kind
                )));
            };
            let bytes_field = (kind.kind == "Secret" && *f == "data") || *f == "binaryData";
            if bytes_field && let Some(at) = go_base64_error(s.as_bytes()) {
                return Err(decode_error(format!(
                    "illegal base64 data at input byte {at}"
                )));
            }
        }
    }
    Ok(())
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
        _ => "string",
    }
}

/// The offset Go's `base64.StdEncoding.Decode` reports as `illegal base64 data at input byte N`, or None
/// when `src` decodes. Go skips `\r` and `\n`, requires padding, and reports trailing garbage after it.
pub(crate) fn go_base64_error(src: &[u8]) -> Option<usize> {
    let decodes = |c: u8| c.is_ascii_alphanumeric() || c == b'+' || c == b'/';
    let mut si = 0;
    while si < src.len() {
        // One quantum of up to four symbols, as Go's `decodeQuantum`.
        let mut j = 0;
        while j < 4 {
            if si == src.len() {
                if j == 0 {
                    return None;
                }
                return Some(si - j);
            }
            let c = src[si];
            si += 1;
            if decodes(c) {
                j += 1;
                continue;
            }
            if c == b'\n' || c == b'\r' {
                continue;
            }
            if c != b'=' {
                return Some(si - 1);
            }
            match j {
                0 | 1 => return Some(si - 1),
                2 => {
                    while si < src.len() && (src[si] == b'\n' || src[si] == b'\r') {
                        si += 1;
                    }
                    if si == src.len() {
                        return Some(src.len());
                    }
                    if src[si] != b'=' {
                        return Some(si - 1);
                    }
                    si += 1;
                }
                _ => {}
            }
            while si < src.len() && (src[si] == b'\n' || src[si] == b'\r') {
                si += 1;
            }
            if si < src.len() {
                return Some(si);
            }
            return None;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kind(k: &str) -> Kind {
        crate::kinds::builtins()
            .into_iter()
            .find(|x| x.kind == k)
            .unwrap()
    }

    #[test]
    fn go_base64_offsets() {
        for (s, want) in [
            ("aGVsbG8=", None),
            ("aGVsbG8", Some(4)),
            ("abc", Some(0)),
            ("a!bc", Some(1)),
            ("aGVs\nbG8=", None),
            ("aGVsbA==", None),
            ("aGVsbA=", Some(7)),
            ("aGVsbA==x", Some(8)),
            ("not base64", Some(3)),
            ("", None),
        ] {
            assert_eq!(go_base64_error(s.as_bytes()), want, "{s:?}");
        }
    }

    #[test]
    fn label_value_too_long_and_bad_characters() {
        let long = "a".repeat(64);
        let obj = json!({"metadata": {"name": "c", "labels": {"ok": "fine", "x": long, "bad key": "v w"}}});
        let errs = validate(&kind("ConfigMap"), &obj, None, false);
        let fields: Vec<(&str, &str)> = errs
            .iter()
            .map(|e| (e.field.as_str(), e.body.split(':').next().unwrap()))
            .collect();
        assert_eq!(
            fields,
            vec![
                ("metadata.labels", "Invalid value"),
                ("metadata.labels", "Invalid value"),
                ("metadata.labels", "Invalid value"),
            ]
        );
        assert_eq!(
            errs[2].body,
            format!("Invalid value: \"{long}\": must be no more than 63 characters")
        );
    }

    #[test]
    fn names_by_kind() {
        assert!(name_errors(&kind("Namespace"), "a.b", false)[0] == "must not contain dots");
        assert!(!name_errors(&kind("Service"), "1abc", false).is_empty());
        assert!(name_errors(&kind("ClusterRole"), "system:admin", false).is_empty());
        assert!(name_errors(&kind("ConfigMap"), "gen-", true).is_empty());
        assert!(!name_errors(&kind("ConfigMap"), "gen-", false).is_empty());
    }

    #[test]
    fn selectors() {
        let labels = json!({"app": "web", "tier": "fe"});
        let sel = json!({"matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe", "be"]}]});
        assert_eq!(selector_matches(&sel, &labels), Some(true));
        let sel =
            json!({"matchExpressions": [{"key": "tier", "operator": "Exists", "values": ["x"]}]});
        assert_eq!(selector_matches(&sel, &labels), None);
        assert_eq!(
            go_string_map(labels.as_object()),
            r#"map[string]string{"app":"web", "tier":"fe"}"#
        );
    }
}
