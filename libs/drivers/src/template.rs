//! Rendering strategy templates: every string anywhere in a template (map keys excluded) is a Go
//! `text/template` executed against the job's context (`.Application`, `.Parameters`, and for the
//! Job/Altinity drivers `.Release`, `.Mode` and, on restore, `.Backup`).
//!
//! Semantics are upstream's renderer's, which uses Go's `text/template` with slim-sprig's
//! `FuncMap()`:
//! * a string that fails to parse or to execute is left **as written** (no error);
//! * the context has Go's types: the application is unstructured JSON (integers `int64`, other
//!   numbers `float64`, objects `map[string]interface{}`), `.Parameters` is a
//!   `map[string]string`; a missing map key prints `<no value>` (Go's default `missingkey`), and
//!   `index` on `.Parameters` yields `""` for a missing key;
//! * every slim-sprig function is available (the date ones with the local zone UTC) except
//!   `env`, `expandenv` and `getHostByName`, kept out so that a tenant's template cannot read the
//!   controller's environment or make network lookups (slim-sprig has no `required` either).
//!
//! The engine is the `gotemplate` crate (this workspace's), which follows Go's sources; see
//! `docs/go-compatibility.md` for the differential run against Go itself.

use std::collections::BTreeMap;
use std::sync::Arc;

use gotemplate::{Map, MapElem, Template, Value};
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
    let Ok(tmpl) = Template::parse(text) else {
        return text.to_owned();
    };
    match tmpl.execute(ctx) {
        Ok(out) => gotemplate::lossy(&out),
        Err(_) => text.to_owned(),
    }
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
        if let Err(e) = Template::parse(text) {
            // The parser's own words ("unclosed action"), without the engine's "template: ".
            let why = match e {
                gotemplate::Error::Parse(m) | gotemplate::Error::Exec(m) => m,
            };
            out.push((
                path.to_owned(),
                format!("does not parse as a Go template ({why}); it is used as written"),
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

/// The context with Go's types, as upstream's drivers build it: JSON as the API client decodes
/// it (see [`Value::from_json`]), `.Parameters` (a JSON object of strings) as a
/// `map[string]string`, and objects the caller marks with [`context_struct`] as structs.
fn to_value(context: &Json) -> Value {
    match context {
        Json::Object(map) if !map.contains_key(STRUCT_MARK) => Value::map(
            map.iter()
                .map(|(k, v)| {
                    let value = match v {
                        Json::Object(p) if k == "Parameters" && p.values().all(Json::is_string) => {
                            Value::string_map(
                                p.iter()
                                    .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or(""))),
                            )
                        }
                        other => convert(other),
                    };
                    (k.as_bytes().to_vec(), value)
                })
                .collect(),
        ),
        other => convert(other),
    }
}

fn convert(v: &Json) -> Value {
    match v {
        Json::Object(map) => {
            let fields: Map = map
                .iter()
                .filter(|(k, _)| k.as_str() != STRUCT_MARK)
                .map(|(k, v)| (k.as_bytes().to_vec(), convert(v)))
                .collect();
            if map.contains_key(STRUCT_MARK) {
                Value::structure(fields)
            } else {
                Value::Map(MapElem::Any, Some(Arc::new(fields)))
            }
        }
        Json::Array(items) => Value::list(items.iter().map(convert).collect()),
        other => Value::from_json(other),
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
        assert_eq!(
            found[0].1, "does not parse as a Go template (unclosed action); it is used as written",
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
        // Trimming next to a multi-byte character parses (the engine alone failed on it).
        assert!(
            problems(
                &serde_json::json!({"a": "é {{- .Parameters.bucket -}} ü"}),
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
        assert_eq!(r("{{ nosuchfunc .Mode }}"), "{{ nosuchfunc .Mode }}");
        // slim-sprig has sha256sum (the old engine lacked it and left the string as written).
        assert_eq!(
            r("{{ sha256sum .Mode }}"),
            "54d00d867758cef816bc4685f58e327b949712b07ebd17c3485f3ffc9e9f5133"
        );
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
/// Cases where this renderer differed from Go's `text/template` with slim-sprig, found by the
/// differential run against Go itself (`e2e/go-differential`); each expected value is Go's.
#[cfg(test)]
mod go_differences {
    use super::render_string;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn r(text: &str) -> String {
        let ctx = json!({"Application": {"metadata": {"name": "pg", "labels": {"app": "db"}}},
                         "Parameters": {"bucket": "b1"}, "Mode": "backup"});
        render_string(text, &ctx)
    }

    #[test]
    fn required_is_not_in_slim_sprig_so_the_string_is_used_as_written() {
        assert_eq!(
            r("{{ required \"x\" .Mode }}"),
            "{{ required \"x\" .Mode }}"
        );
    }

    #[test]
    fn arity_and_string_parameters_are_checked_as_go_checks_them() {
        for text in [
            "{{ .Mode | lower .Parameters.bucket }}",
            "{{ \"x\" | trimPrefix \"a\" .Mode }}",
            "{{ lower .Parameters.absent }}",
            "{{ b64enc .Application.metadata.labels.absent }}",
            "{{ lower true }}",
            "{{ upper 1e3 }}",
            "{{ trunc \"2\" .Mode }}",
            "{{ empty .Mode .Mode }}",
            "{{ index .Parameters.absent }}",
        ] {
            assert_eq!(r(text), text);
        }
        assert_eq!(r("{{ \"\" | default .Mode .Parameters.absent }}"), "backup");
        assert_eq!(r("{{ index .Mode }}"), "backup");
    }

    #[test]
    fn printf_reports_missing_and_extra_arguments_in_band() {
        assert_eq!(r("{{ printf \"%%\" }}"), "%");
        assert_eq!(r("{{ printf \"%s/%s\" .Mode }}"), "backup/%!s(MISSING)");
        assert_eq!(r("{{ printf \"%%\" .Mode }}"), "%%!(EXTRA string=backup)");
        assert_eq!(r("{{ printf \"%s\" .Parameters.absent }}"), "%!s(<nil>)");
        assert_eq!(r("{{ printf \"%s\" true }}"), "%!s(bool=true)");
        assert_eq!(r("{{ printf \"%q\" \"a\\tb\" }}"), "\"a\\tb\"");
        assert_eq!(r("{{ printf \"%d-%v-%v\" 3 -4 1.5 }}"), "3--4-1.5");
    }

    #[test]
    fn a_null_in_the_application_prints_as_no_value() {
        let ctx = json!({"Application": {"spec": {"schedule": null}}});
        assert_eq!(
            render_string(
                "{{ .Application.spec.schedule }}|{{ coalesce \"\" .Application.spec.schedule }}|{{ default \"d\" .Application.spec.schedule }}|{{ if .Application.spec.schedule }}y{{ else }}n{{ end }}",
                &ctx
            ),
            "<no value>|<no value>|d|n"
        );
    }

    #[test]
    fn range_else_runs_only_when_there_is_nothing_to_range_over() {
        let ctx = json!({"Application": {"spec": {"dbs": ["a", "b"], "none": [], "nil": null}}});
        let r = |t: &str| render_string(t, &ctx);
        assert_eq!(
            r("{{ range .Application.spec.dbs }}{{ . }}{{ else }}none{{ end }}"),
            "ab"
        );
        assert_eq!(
            r("{{ range $i, $d := .Application.spec.none }}{{ $d }}{{ else }}none{{ end }}"),
            "none"
        );
        // The else branch is not evaluated after a non-empty range (Go does not evaluate it).
        assert_eq!(
            r("{{ range .Application.spec.dbs }}x{{ else }}{{ lower true }}{{ end }}"),
            "xx"
        );
        // An else of an if inside the range body belongs to the if.
        assert_eq!(
            r(
                "{{ range .Application.spec.dbs }}{{ if eq . \"a\" }}A{{ else }}-{{ end }}{{ else }}none{{ end }}"
            ),
            "A-"
        );
    }

    #[test]
    fn title_starts_a_word_after_any_ascii_separator() {
        assert_eq!(r("{{ title \"a,b-c_d e%d 1x\" }}"), "A,B-C_d E%D 1x");
    }

    #[test]
    fn eq_compares_like_go() {
        assert_eq!(r("{{ eq .Mode true }}"), "{{ eq .Mode true }}");
        assert_eq!(r("{{ eq .Parameters.absent \"x\" }}"), "false");
        assert_eq!(r("{{ ne .Parameters.absent .Parameters.none }}"), "false");
        assert_eq!(r("{{ eq .Mode \"x\" \"backup\" }}"), "true");
    }

    #[test]
    fn trim_markers_next_to_multibyte_text_comments_and_braces() {
        // The engine panicked (in its lexer thread) trimming before a multi-byte character.
        assert_eq!(r("é {{- .Mode -}} ü"), "ébackupü");
        assert_eq!(r("a {{- /* note */ -}} b"), "ab");
        assert_eq!(r("{ {{- \"-\" }}"), "{-");
        assert_eq!(r("{{- 3 }}"), "3");
        assert_eq!(r("{{ \"}}\" -}}  x"), "}}x");
    }

    #[test]
    fn indent_refuses_a_negative_or_absurd_width_instead_of_aborting() {
        assert_eq!(r("{{ indent -1 .Mode }}"), "{{ indent -1 .Mode }}");
        assert_eq!(
            r("{{ indent 9007199254740993 .Mode }}"),
            "{{ indent 9007199254740993 .Mode }}"
        );
        assert_eq!(r("{{ nindent 2 .Mode }}"), "\n  backup");
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
