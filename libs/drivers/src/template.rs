//! Rendering strategy templates: every string anywhere in a template (map keys excluded) is a Go
//! `text/template` executed against the job's context (`.Application`, `.Parameters`, and for the
//! Job/Altinity drivers `.Release`, `.Mode` and, on restore, `.Backup`).
//!
//! Semantics follow upstream's renderer:
//! * a string that fails to parse or to execute is left **as written** (no error);
//! * a missing map key prints `<no value>` (Go's default `missingkey` behaviour), e.g.
//!   `{{ .Parameters.absent }}`; `index` on a string map (`.Parameters`) yields `""` for a missing key,
//!   as Go's `index` yields the element type's zero value;
//! * the Sprig helpers strategy authors use are available: `default`, `empty`, `coalesce`,
//!   `required`, `ternary`, `quote`, `squote`, `upper`, `lower`, `title`, `trim`, `trimPrefix`,
//!   `trimSuffix`, `trimAll`, `replace`, `contains`, `hasPrefix`, `hasSuffix`, `toString`, `toJson`,
//!   `join`, `list`, `dict`, `b64enc`, `b64dec`, `trunc`, `indent`, `nindent`, `splitList`. A template
//!   using another Sprig function does not parse and is therefore left as written (upstream would
//!   render it): see `docs/backup-runner.md`.
//!
//! The engine is the `gtmpl` crate, a Rust implementation of Go's `text/template`.

use std::collections::{BTreeMap, HashMap};

use gtmpl::{Context, Template};
use gtmpl_value::{Func, FuncError, Value};
use serde_json::Value as Json;

/// Renders every string of `template` against `context`.
pub fn render(template: &Json, context: &Json) -> Json {
    let ctx = to_value(context);
    map_strings(template, &|s| render_str(s, &ctx))
}

/// Renders every string of `template` against what an application's strategy sees:
/// `.Application` (`app`, as the driver presents it) and `.Parameters` (the route's parameters).
pub fn render_for_app(template: &Json, app: &Json, parameters: &BTreeMap<String, String>) -> Json {
    render(
        template,
        &serde_json::json!({"Application": app, "Parameters": parameters}),
    )
}

/// Renders one string; on any error it comes back unchanged.
pub fn render_string(text: &str, context: &Json) -> String {
    render_str(text, &to_value(context))
}

fn render_str(text: &str, ctx: &Value) -> String {
    if !text.contains("{{") {
        return text.to_owned();
    }
    if unclosed_action(text) {
        return text.to_owned();
    }
    let mut tmpl = Template::default();
    tmpl.add_funcs(SPRIG);
    if tmpl.parse(text).is_err() {
        return text.to_owned();
    }
    tmpl.render(&Context::from(ctx.clone()))
        .unwrap_or_else(|_| text.to_owned())
}

fn map_strings(v: &Json, f: &dyn Fn(&str) -> String) -> Json {
    match v {
        Json::String(s) => Json::String(f(s)),
        Json::Array(items) => Json::Array(items.iter().map(|i| map_strings(i, f)).collect()),
        Json::Object(map) => Json::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), map_strings(v, f)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// What is wrong with a strategy template, string by string, before it is rendered: each entry is
/// `(path, problem)` where `path` names the string inside the template (`storage.s3.bucket`,
/// `spec.containers[0].args[2]`). Two problems are found: a string that does not parse as a Go
/// template (upstream's renderer then uses it as written), and a reference to
/// `.Parameters.<name>` that `parameters` (the BackupClass route's) does not set (Go prints
/// `<no value>` there). Rendering itself is unchanged; this only lets a driver say so.
pub fn problems(template: &Json, parameters: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    walk_strings(template, String::new(), &mut |path, text| {
        if !text.contains("{{") {
            return;
        }
        if unclosed_action(text) {
            out.push((
                path.to_owned(),
                "does not parse as a Go template (unclosed action: a \"{{\" without \"}}\"); it is used as written".into(),
            ));
            return;
        }
        let mut tmpl = Template::default();
        tmpl.add_funcs(SPRIG);
        if let Err(e) = tmpl.parse(text) {
            out.push((
                path.to_owned(),
                format!("does not parse as a Go template ({e}); it is used as written"),
            ));
            return;
        }
        for name in parameter_refs(text) {
            if !parameters.contains_key(&name) {
                out.push((
                    path.to_owned(),
                    format!(
                        "refers to .Parameters.{name}, which the BackupClass route does not set; it renders as \"<no value>\""
                    ),
                ));
            }
        }
    });
    out
}

/// Whether the last `{{` of `text` has no `}}` after it. Go's parser reports "unclosed action";
/// the `gtmpl` engine never returns on such text, so it is recognised before the engine sees it.
fn unclosed_action(text: &str) -> bool {
    text.rfind("{{")
        .is_some_and(|at| !text[at + 2..].contains("}}"))
}

/// The names `x` of every `.Parameters.x` in `text`.
fn parameter_refs(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(".Parameters.") {
        rest = &rest[at + ".Parameters.".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() && !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

fn walk_strings(v: &Json, path: String, f: &mut dyn FnMut(&str, &str)) {
    match v {
        Json::String(s) => f(&path, s),
        Json::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                walk_strings(item, format!("{path}[{i}]"), f);
            }
        }
        Json::Object(map) => {
            for (k, item) in map {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                walk_strings(item, p, f);
            }
        }
        _ => {}
    }
}

/// JSON objects become Go maps (missing keys print `<no value>`), except the top-level context
/// entries the caller marks as structs by giving them a `$struct` key: those become objects whose
/// missing fields are an error, like Go struct fields.
fn to_value(v: &Json) -> Value {
    match v {
        Json::Null => Value::Nil,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => {
            if let Some(u) = n.as_u64() {
                Value::from(u)
            } else if let Some(i) = n.as_i64() {
                Value::from(i)
            } else {
                Value::from(n.as_f64().unwrap_or_default())
            }
        }
        Json::String(s) => Value::String(s.clone()),
        Json::Array(items) => Value::Array(items.iter().map(to_value).collect()),
        Json::Object(map) => {
            let is_struct = map.contains_key(STRUCT_MARK);
            let fields: HashMap<String, Value> = map
                .iter()
                .filter(|(k, _)| k.as_str() != STRUCT_MARK)
                .map(|(k, v)| (k.clone(), to_value(v)))
                .collect();
            if is_struct {
                Value::Object(fields)
            } else {
                Value::Map(fields)
            }
        }
    }
}

/// Key that marks a JSON object as a Go struct in a template context (see [`context_struct`]).
const STRUCT_MARK: &str = "$struct";

/// A context entry that behaves like a Go struct: a missing field is an error (so the template is
/// left as written), not `<no value>`. (Upstream passes `.Release` and `.Backup` as Go maps, see
/// [`crate::job::context`].)
pub fn context_struct(fields: Json) -> Json {
    let mut fields = fields;
    if let Json::Object(map) = &mut fields {
        map.insert(STRUCT_MARK.into(), Json::Bool(true));
    }
    fields
}

static SPRIG: &[(&str, Func)] = &[
    ("index", index as Func),
    ("default", default as Func),
    ("empty", empty as Func),
    ("coalesce", coalesce as Func),
    ("required", required as Func),
    ("ternary", ternary as Func),
    ("quote", quote as Func),
    ("squote", squote as Func),
    ("upper", upper as Func),
    ("lower", lower as Func),
    ("title", title as Func),
    ("trim", trim as Func),
    ("trimPrefix", trim_prefix as Func),
    ("trimSuffix", trim_suffix as Func),
    ("trimAll", trim_all as Func),
    ("replace", replace as Func),
    ("contains", contains as Func),
    ("hasPrefix", has_prefix as Func),
    ("hasSuffix", has_suffix as Func),
    ("toString", to_string as Func),
    ("toJson", to_json as Func),
    ("join", join as Func),
    ("list", list as Func),
    ("dict", dict as Func),
    ("b64enc", b64enc as Func),
    ("b64dec", b64dec as Func),
    ("trunc", trunc as Func),
    ("indent", indent as Func),
    ("nindent", nindent as Func),
    ("splitList", split_list as Func),
];

fn is_empty(v: &Value) -> bool {
    match v {
        Value::NoValue | Value::Nil => true,
        Value::Bool(b) => !b,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) | Value::Map(o) => o.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Function(_) => false,
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::NoValue | Value::Nil => String::new(),
        other => other.to_string(),
    }
}

fn arg<'a>(args: &'a [Value], i: usize, name: &str, n: usize) -> Result<&'a Value, FuncError> {
    args.get(i)
        .ok_or_else(|| FuncError::ExactlyXArgs(name.into(), n))
}

fn str_arg(args: &[Value], i: usize, name: &str, n: usize) -> Result<String, FuncError> {
    arg(args, i, name, n).map(text)
}

/// Go's `index`, with the zero value `""` for a missing key of a map whose values are all strings
/// (a `map[string]string` such as `.Parameters`), and `<no value>` for other maps.
fn index(args: &[Value]) -> Result<Value, FuncError> {
    if args.len() < 2 {
        return Err(FuncError::AtLeastXArgs("index".into(), 2));
    }
    let mut col = args[0].clone();
    for key in &args[1..] {
        col = match (&col, key) {
            (Value::Array(a), Value::Number(n)) => n
                .as_u64()
                .and_then(|i| a.get(i as usize).cloned())
                .ok_or_else(|| FuncError::Generic(format!("index out of range: {n}")))?,
            (Value::Map(m), k) => match m.get(&text(k)) {
                Some(v) => v.clone(),
                None if m.values().all(|v| matches!(v, Value::String(_))) => {
                    Value::String(String::new())
                }
                None => Value::NoValue,
            },
            (Value::Object(o), k) => o.get(&text(k)).cloned().ok_or_else(|| {
                FuncError::Generic(format!("can't index item of type object with {k}"))
            })?,
            (Value::NoValue | Value::Nil, _) => {
                return Err(FuncError::Generic("index of untyped nil".into()));
            }
            (c, _) => return Err(FuncError::Generic(format!("can't index item {c}"))),
        };
    }
    Ok(col)
}

fn default(args: &[Value]) -> Result<Value, FuncError> {
    let fallback = arg(args, 0, "default", 2)?;
    match args.get(1) {
        Some(v) if !is_empty(v) => Ok(v.clone()),
        _ => Ok(fallback.clone()),
    }
}

fn empty(args: &[Value]) -> Result<Value, FuncError> {
    Ok(Value::Bool(args.first().is_none_or(is_empty)))
}

fn coalesce(args: &[Value]) -> Result<Value, FuncError> {
    Ok(args
        .iter()
        .find(|v| !is_empty(v))
        .cloned()
        .unwrap_or(Value::Nil))
}

fn required(args: &[Value]) -> Result<Value, FuncError> {
    let message = str_arg(args, 0, "required", 2)?;
    match args.get(1) {
        Some(v) if !is_empty(v) => Ok(v.clone()),
        _ => Err(FuncError::Generic(message)),
    }
}

fn ternary(args: &[Value]) -> Result<Value, FuncError> {
    let yes = arg(args, 0, "ternary", 3)?;
    let no = arg(args, 1, "ternary", 3)?;
    let cond = arg(args, 2, "ternary", 3)?;
    Ok(if is_empty(cond) {
        no.clone()
    } else {
        yes.clone()
    })
}

fn quote(args: &[Value]) -> Result<Value, FuncError> {
    let parts: Vec<String> = args
        .iter()
        .filter(|v| !matches!(v, Value::NoValue | Value::Nil))
        .map(|v| format!("{:?}", text(v)))
        .collect();
    Ok(Value::String(parts.join(" ")))
}

fn squote(args: &[Value]) -> Result<Value, FuncError> {
    let parts: Vec<String> = args
        .iter()
        .filter(|v| !matches!(v, Value::NoValue | Value::Nil))
        .map(|v| format!("'{}'", text(v)))
        .collect();
    Ok(Value::String(parts.join(" ")))
}

fn upper(args: &[Value]) -> Result<Value, FuncError> {
    Ok(Value::String(str_arg(args, 0, "upper", 1)?.to_uppercase()))
}

fn lower(args: &[Value]) -> Result<Value, FuncError> {
    Ok(Value::String(str_arg(args, 0, "lower", 1)?.to_lowercase()))
}

fn title(args: &[Value]) -> Result<Value, FuncError> {
    let s = str_arg(args, 0, "title", 1)?;
    let mut out = String::with_capacity(s.len());
    let mut start = true;
    for c in s.chars() {
        if start && c.is_alphabetic() {
            out.extend(c.to_uppercase());
        } else {
            out.push(c);
        }
        start = c.is_whitespace();
    }
    Ok(Value::String(out))
}

fn trim(args: &[Value]) -> Result<Value, FuncError> {
    Ok(Value::String(
        str_arg(args, 0, "trim", 1)?.trim().to_owned(),
    ))
}

fn trim_prefix(args: &[Value]) -> Result<Value, FuncError> {
    let prefix = str_arg(args, 0, "trimPrefix", 2)?;
    let s = str_arg(args, 1, "trimPrefix", 2)?;
    Ok(Value::String(
        s.strip_prefix(prefix.as_str()).unwrap_or(&s).to_owned(),
    ))
}

fn trim_suffix(args: &[Value]) -> Result<Value, FuncError> {
    let suffix = str_arg(args, 0, "trimSuffix", 2)?;
    let s = str_arg(args, 1, "trimSuffix", 2)?;
    Ok(Value::String(
        s.strip_suffix(suffix.as_str()).unwrap_or(&s).to_owned(),
    ))
}

fn trim_all(args: &[Value]) -> Result<Value, FuncError> {
    let cut = str_arg(args, 0, "trimAll", 2)?;
    let s = str_arg(args, 1, "trimAll", 2)?;
    Ok(Value::String(
        s.trim_matches(|c| cut.contains(c)).to_owned(),
    ))
}

fn replace(args: &[Value]) -> Result<Value, FuncError> {
    let old = str_arg(args, 0, "replace", 3)?;
    let new = str_arg(args, 1, "replace", 3)?;
    let s = str_arg(args, 2, "replace", 3)?;
    Ok(Value::String(s.replace(&old, &new)))
}

fn contains(args: &[Value]) -> Result<Value, FuncError> {
    let needle = str_arg(args, 0, "contains", 2)?;
    Ok(Value::Bool(
        str_arg(args, 1, "contains", 2)?.contains(&needle),
    ))
}

fn has_prefix(args: &[Value]) -> Result<Value, FuncError> {
    let p = str_arg(args, 0, "hasPrefix", 2)?;
    Ok(Value::Bool(
        str_arg(args, 1, "hasPrefix", 2)?.starts_with(&p),
    ))
}

fn has_suffix(args: &[Value]) -> Result<Value, FuncError> {
    let p = str_arg(args, 0, "hasSuffix", 2)?;
    Ok(Value::Bool(str_arg(args, 1, "hasSuffix", 2)?.ends_with(&p)))
}

fn to_string(args: &[Value]) -> Result<Value, FuncError> {
    Ok(Value::String(str_arg(args, 0, "toString", 1)?))
}

fn to_json(args: &[Value]) -> Result<Value, FuncError> {
    fn json(v: &Value) -> Json {
        match v {
            Value::NoValue | Value::Nil | Value::Function(_) => Json::Null,
            Value::Bool(b) => Json::Bool(*b),
            Value::String(s) => Json::String(s.clone()),
            Value::Number(n) => serde_json::from_str(&n.to_string()).unwrap_or(Json::Null),
            Value::Array(a) => Json::Array(a.iter().map(json).collect()),
            Value::Object(o) | Value::Map(o) => {
                let sorted: std::collections::BTreeMap<_, _> =
                    o.iter().map(|(k, v)| (k.clone(), json(v))).collect();
                Json::Object(sorted.into_iter().collect())
            }
        }
    }
    let v = arg(args, 0, "toJson", 1)?;
    Ok(Value::String(json(v).to_string()))
}

fn join(args: &[Value]) -> Result<Value, FuncError> {
    let sep = str_arg(args, 0, "join", 2)?;
    match arg(args, 1, "join", 2)? {
        Value::Array(items) => Ok(Value::String(
            items.iter().map(text).collect::<Vec<_>>().join(&sep),
        )),
        other => Ok(Value::String(text(other))),
    }
}

fn list(args: &[Value]) -> Result<Value, FuncError> {
    Ok(Value::Array(args.to_vec()))
}

fn dict(args: &[Value]) -> Result<Value, FuncError> {
    let mut map = HashMap::new();
    for pair in args.chunks(2) {
        let key = text(&pair[0]);
        let value = pair.get(1).cloned().unwrap_or(Value::String(String::new()));
        map.insert(key, value);
    }
    Ok(Value::Map(map))
}

fn b64enc(args: &[Value]) -> Result<Value, FuncError> {
    use base64::Engine as _;
    Ok(Value::String(
        base64::engine::general_purpose::STANDARD.encode(str_arg(args, 0, "b64enc", 1)?),
    ))
}

fn b64dec(args: &[Value]) -> Result<Value, FuncError> {
    use base64::Engine as _;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(str_arg(args, 0, "b64dec", 1)?)
        .map_err(|e| FuncError::Generic(e.to_string()))?;
    Ok(Value::String(
        String::from_utf8_lossy(&decoded).into_owned(),
    ))
}

fn trunc(args: &[Value]) -> Result<Value, FuncError> {
    let n = match arg(args, 0, "trunc", 2)? {
        Value::Number(n) => n.as_i64().unwrap_or(0),
        other => text(other).parse().unwrap_or(0),
    };
    let s = str_arg(args, 1, "trunc", 2)?;
    let chars: Vec<char> = s.chars().collect();
    let len = chars.len() as i64;
    let out: String = if n >= 0 {
        chars[..n.min(len) as usize].iter().collect()
    } else {
        chars[(len + n).max(0) as usize..].iter().collect()
    };
    Ok(Value::String(out))
}

fn indent_by(args: &[Value], name: &str) -> Result<String, FuncError> {
    let n = match arg(args, 0, name, 2)? {
        Value::Number(n) => n.as_u64().unwrap_or(0) as usize,
        other => text(other).parse().unwrap_or(0),
    };
    let pad = " ".repeat(n);
    let s = str_arg(args, 1, name, 2)?;
    Ok(s.split('\n')
        .map(|l| format!("{pad}{l}"))
        .collect::<Vec<_>>()
        .join("\n"))
}

fn indent(args: &[Value]) -> Result<Value, FuncError> {
    Ok(Value::String(indent_by(args, "indent")?))
}

fn nindent(args: &[Value]) -> Result<Value, FuncError> {
    Ok(Value::String(format!("\n{}", indent_by(args, "nindent")?)))
}

fn split_list(args: &[Value]) -> Result<Value, FuncError> {
    let sep = str_arg(args, 0, "splitList", 2)?;
    let s = str_arg(args, 1, "splitList", 2)?;
    Ok(Value::Array(
        s.split(sep.as_str())
            .map(|p| Value::String(p.to_owned()))
            .collect(),
    ))
}

#[cfg(test)]
mod tests {

    #[test]
    fn problems_name_the_string_and_what_is_wrong() {
        let params: BTreeMap<String, String> = [("bucket".to_owned(), "b".to_owned())].into();
        let template = serde_json::json!({
            "storage": {"s3": {"bucket": "{{ .Parameters.bucket }}", "prefix": "{{ .Parameters.nope }}/x"}},
            "args": ["plain", "{{ .Release.Name "],
        });
        let mut found = problems(&template, &params);
        found.sort();
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].0, "args[1]");
        assert!(
            found[0].1.starts_with("does not parse as a Go template ("),
            "{found:?}"
        );
        assert_eq!(
            found[1],
            (
                "storage.s3.prefix".to_owned(),
                "refers to .Parameters.nope, which the BackupClass route does not set; it renders as \"<no value>\"".to_owned()
            )
        );
        assert!(
            problems(
                &serde_json::json!({"a": "{{ .Parameters.bucket }}"}),
                &params
            )
            .is_empty()
        );
    }
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn ctx() -> Json {
        json!({
            "Application": {"metadata": {"name": "orders-db", "namespace": "tenant-acme"},
                            "kind": "Postgres", "spec": {"replicas": 2}},
            "Parameters": {"bucket": "b1"},
            "Release": context_struct(json!({"Name": "orders-db", "Namespace": "tenant-acme"})),
            "Mode": "backup",
        })
    }

    #[test]
    fn every_string_of_a_template_is_rendered_keys_are_not() {
        let template = json!({
            "barmanObjectStore": {
                "destinationPath": "s3://{{ .Parameters.bucket }}/{{ .Application.metadata.namespace }}/{{ .Application.metadata.name }}/",
                "{{ not.a.key }}": ["{{ .Mode }}", 3, true, null],
            },
            "serverName": "",
        });
        assert_eq!(
            render(&template, &ctx()),
            json!({
                "barmanObjectStore": {
                    "destinationPath": "s3://b1/tenant-acme/orders-db/",
                    "{{ not.a.key }}": ["backup", 3, true, null],
                },
                "serverName": "",
            })
        );
    }

    #[test]
    fn go_template_semantics() {
        let r = |t: &str| render_string(t, &ctx());
        // Missing map keys print <no value>; index on the string map gives "".
        assert_eq!(r("x{{ .Parameters.absent }}y"), "x<no value>y");
        assert_eq!(r("x{{ index .Parameters \"absent\" }}y"), "xy");
        assert_eq!(r("{{ .Application.spec.replicas }}"), "2");
        // A missing struct field is an execution error: the string stays as written.
        assert_eq!(r("{{ .Release.Absent }}"), "{{ .Release.Absent }}");
        // Parse errors and unknown functions too.
        assert_eq!(r("{{ .Mode"), "{{ .Mode");
        assert_eq!(r("{{ sha256sum .Mode }}"), "{{ sha256sum .Mode }}");
        assert_eq!(r("{{ if eq .Mode \"backup\" }}B{{ else }}R{{ end }}"), "B");
        assert_eq!(r("{{ printf \"%s-%d\" .Mode 3 }}"), "backup-3");
    }

    #[test]
    fn sprig_helpers_strategy_authors_use() {
        let r = |t: &str| render_string(t, &ctx());
        // Upstream's own test: a default with a printf fallback and an index override.
        let c = json!({"Release": context_struct(json!({"Name": "demo"})),
                       "Parameters": {}, "ParametersOverride": {"s3SecretName": "tenant-managed-creds"}});
        assert_eq!(
            render_string(
                r#"{{ default (printf "%s-backup-s3" .Release.Name) (index .Parameters "s3SecretName") }}"#,
                &c
            ),
            "demo-backup-s3"
        );
        assert_eq!(
            render_string(
                r#"{{ default (printf "%s-backup-s3" .Release.Name) (index .ParametersOverride "s3SecretName") }}"#,
                &c
            ),
            "tenant-managed-creds"
        );
        assert_eq!(r("{{ .Parameters.absent | default \"d\" }}"), "d");
        assert_eq!(
            r("{{ upper .Mode }}/{{ quote .Mode }}/{{ squote .Mode }}"),
            "BACKUP/\"backup\"/'backup'"
        );
        assert_eq!(
            r("{{ trimSuffix \"/\" \"s3://b/\" }}{{ trimPrefix \"s3://\" \"s3://b\" }}"),
            "s3://bb"
        );
        assert_eq!(
            r("{{ replace \"-\" \"_\" .Application.metadata.name }}"),
            "orders_db"
        );
        assert_eq!(
            r("{{ ternary \"y\" \"n\" (hasPrefix \"orders\" .Application.metadata.name) }}"),
            "y"
        );
        assert_eq!(r("{{ join \",\" (list \"a\" \"b\") }}"), "a,b");
        assert_eq!(r("{{ b64enc \"hi\" }}/{{ b64dec \"aGk=\" }}"), "aGk=/hi");
        assert_eq!(r("{{ trunc 3 .Mode }}"), "bac");
        assert_eq!(r("{{ coalesce .Parameters.absent \"\" \"c\" }}"), "c");
        assert_eq!(
            r("{{ required \"need bucket\" .Parameters.absent }}"),
            "{{ required \"need bucket\" .Parameters.absent }}"
        );
        assert_eq!(r("{{ toJson .Parameters }}"), r#"{"bucket":"b1"}"#);
    }
}
#[cfg(test)]
mod unclosed {
    /// The engine never returns on an action left open at the end of the text; the guard must
    /// answer first (run on a thread so that a regression fails instead of hanging the suite).
    #[test]
    fn an_unclosed_action_is_left_as_written_without_hanging() {
        for input in ["{{ .Release.Name ", "a {{ .A }} {{ .B", "{{ x", "{{"] {
            let (tx, rx) = std::sync::mpsc::channel();
            let owned = input.to_owned();
            std::thread::spawn(move || {
                let out = super::render_string(&owned, &serde_json::json!({"A": 1}));
                let _ = tx.send(out);
            });
            let out = rx
                .recv_timeout(std::time::Duration::from_secs(5))
                .unwrap_or_else(|_| panic!("rendering {input:?} did not return"));
            assert_eq!(out, input);
            let found = super::problems(&serde_json::json!({"k": input}), &Default::default());
            assert_eq!(found.len(), 1, "{input:?}: {found:?}");
            assert!(found[0].1.contains("unclosed action"), "{found:?}");
        }
    }
}
