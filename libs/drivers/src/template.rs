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
//!   `ternary`, `quote`, `squote`, `upper`, `lower`, `title`, `trim`, `trimPrefix`,
//!   `trimSuffix`, `trimAll`, `replace`, `contains`, `hasPrefix`, `hasSuffix`, `toString`, `toJson`,
//!   `join`, `list`, `dict`, `b64enc`, `b64dec`, `trunc`, `indent`, `nindent`, `splitList`. A template
//!   using another Sprig function does not parse and is therefore left as written (upstream would
//!   render it): see `docs/go-compatibility.md`, which also lists what the differential run
//!   against Go found.
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
    let trimmed = range_else_as_if(&apply_trim_markers(text));
    let mut tmpl = Template::default();
    tmpl.add_funcs(SPRIG);
    if tmpl.parse(&trimmed).is_err() {
        return text.to_owned();
    }
    tmpl.render(&Context::from(ctx.clone()))
        .unwrap_or_else(|_| text.to_owned())
}

/// Go's whitespace trimming done before the engine sees the text: `{{- ` drops the white space
/// (space, tab, CR, LF) before the action and ` -}}` the white space after it; each marker (the
/// dash and the one white-space byte beside it) is removed, as Go's lexer removes it. The `gtmpl` engine trims by byte offsets that can fall inside a multi-byte
/// character before the action (`é{{- x }}`) and then panics, so it is never given a marker.
/// Quoted strings, raw strings, character constants and comments inside actions are skipped when
/// looking for the action's end, as Go's lexer skips them. Text with an action that does not end
/// is returned unchanged (it does not parse either way).
fn apply_trim_markers(text: &str) -> String {
    let is_space = |c: char| matches!(c, ' ' | '\t' | '\r' | '\n');
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut trim_next_text = false;
    while let Some(open) = rest.find("{{") {
        let mut before = &rest[..open];
        if trim_next_text {
            before = before.trim_start_matches(is_space);
        }
        let mut body = &rest[open + 2..];
        let left_trim = body.starts_with('-') && body[1..].starts_with(is_space);
        if left_trim {
            before = before.trim_end_matches(is_space);
            // The marker is the dash and one white-space byte, as in Go's lexer.
            body = &body[2..];
        }
        let Some(end) = action_end(body) else {
            return text.to_owned();
        };
        // `end` is where `}}` starts; a ` -` just before it is the right trim marker.
        let inner = &body[..end];
        let right_trim = inner.ends_with('-')
            && inner[..inner.len() - 1].ends_with(is_space)
            && inner.len() >= 2;
        // A `{` left just before the action would make the engine see `{{{`; Go's lexer has
        // already decided where the action starts, so the brace is written as an action.
        match before.strip_suffix('{') {
            Some(head) => {
                out.push_str(head);
                out.push_str("{{\"{\"}}");
            }
            None => out.push_str(before),
        }
        out.push_str("{{");
        out.push_str(if right_trim {
            &inner[..inner.len() - 2]
        } else {
            inner
        });
        out.push_str("}}");
        trim_next_text = right_trim;
        rest = &body[end + 2..];
    }
    if trim_next_text {
        rest = rest.trim_start_matches(is_space);
    }
    out.push_str(rest);
    out
}

/// Rewrites `{{range P}}A{{else}}B{{end}}` as `{{if X}}{{range P}}A{{end}}{{else}}B{{end}}`
/// (`X` is `P` without its variable declaration). In Go the else branch runs only when the range
/// has nothing to iterate; the engine runs it after every range, so it is given an `if` that
/// decides the same way (an empty list or map, nil and a missing value are false for both).
/// Text without trim markers is expected (see [`apply_trim_markers`]); text whose actions do not
/// nest is returned unchanged (it does not parse either way).
fn range_else_as_if(text: &str) -> String {
    if !text.contains("range") || !text.contains("else") {
        return text.to_owned();
    }
    // Split into text and actions (the inside of each `{{ }}`).
    let mut pieces: Vec<(bool, String)> = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find("{{") {
        pieces.push((false, rest[..open].to_owned()));
        let body = &rest[open + 2..];
        let Some(end) = action_end(body) else {
            return text.to_owned();
        };
        pieces.push((true, body[..end].to_owned()));
        rest = &body[end + 2..];
    }
    pieces.push((false, rest.to_owned()));
    // Blocks: (the opening keyword, the index of its action, the index of an else at its level).
    let mut open: Vec<(String, usize, Option<usize>)> = Vec::new();
    let mut rewrites: Vec<(usize, usize)> = Vec::new(); // (range action, its else)
    for (i, (is_action, inner)) in pieces.iter().enumerate() {
        if !is_action {
            continue;
        }
        let keyword = inner.split_whitespace().next().unwrap_or_default();
        match keyword {
            "if" | "with" | "range" | "define" | "block" => {
                open.push((keyword.to_owned(), i, None));
            }
            "else" => match open.last_mut() {
                Some((_, _, first_else)) if first_else.is_none() => *first_else = Some(i),
                Some(_) => {}
                None => return text.to_owned(),
            },
            "end" => match open.pop() {
                Some((kind, at, Some(first_else))) if kind == "range" => {
                    rewrites.push((at, first_else));
                }
                Some(_) => {}
                None => return text.to_owned(),
            },
            _ => {}
        }
    }
    if rewrites.is_empty() {
        return text.to_owned();
    }
    for (at, first_else) in rewrites {
        let head = pieces[at].1.trim_start()["range".len()..].to_owned();
        let collection = head.split_once(":=").map_or(head.as_str(), |(_, c)| c);
        pieces[at].1 = format!("if {collection}}}}}{{{{range{head}");
        pieces[first_else].1 = format!("end}}}}{{{{{}", pieces[first_else].1);
    }
    let mut out = String::with_capacity(text.len() + 32);
    for (is_action, piece) in pieces {
        if is_action {
            out.push_str("{{");
            out.push_str(&piece);
            out.push_str("}}");
        } else {
            out.push_str(&piece);
        }
    }
    out
}

/// The byte offset of the `}}` that ends the action whose text starts at `body`, skipping
/// quoted strings, raw strings, character constants and comments; `None` if it never ends.
fn action_end(body: &str) -> Option<usize> {
    let bytes = body.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'}' if bytes.get(i + 1) == Some(&b'}') => return Some(i),
            quote @ (b'"' | b'\'') => {
                i += 1;
                while i < bytes.len() && bytes[i] != quote {
                    if bytes[i] == b'\\' {
                        i += 1;
                    }
                    if bytes.get(i) == Some(&b'\n') {
                        return None;
                    }
                    i += 1;
                }
            }
            b'`' => {
                i += 1 + body[i + 1..].find('`')?;
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i += 2 + body[i + 2..].find("*/")? + 1;
            }
            _ => {}
        }
        i += 1;
    }
    None
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
        if let Err(e) = tmpl.parse(range_else_as_if(&apply_trim_markers(text))) {
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
        // Go prints a nil interface (a JSON null in the application) as `<no value>`, as it prints
        // a missing key; the engine prints its `Nil` as `nil`.
        Json::Null => Value::NoValue,
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

/// The most padding `indent`/`nindent` add per line. Go refuses a negative count and one whose
/// result cannot be allocated; a result of gigabytes is refused here too rather than exhausting
/// the daemon's memory.
const MAX_PAD: i64 = 1 << 20;

static SPRIG: &[(&str, Func)] = &[
    ("index", index as Func),
    ("printf", printf as Func),
    ("eq", eq as Func),
    ("ne", ne as Func),
    ("default", default as Func),
    ("empty", empty as Func),
    ("coalesce", coalesce as Func),
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

/// Argument `i` of a function Go declares with exactly `n` parameters: a call with another
/// number of arguments is an error in Go (`wrong number of args for <name>`).
fn arg<'a>(args: &'a [Value], i: usize, name: &str, n: usize) -> Result<&'a Value, FuncError> {
    if args.len() != n {
        return Err(FuncError::ExactlyXArgs(name.into(), n));
    }
    Ok(&args[i])
}

/// Argument `i` of a Go `string` parameter: Go accepts only a string there (a missing key, nil,
/// a number or a bool is an error: `expected string`).
fn str_arg(args: &[Value], i: usize, name: &str, n: usize) -> Result<String, FuncError> {
    match arg(args, i, name, n)? {
        Value::String(s) => Ok(s.clone()),
        other => Err(FuncError::Generic(format!(
            "{name}: wrong type for value; expected string; got {}",
            go_type(other)
        ))),
    }
}

/// Argument `i` of a Go `int` parameter: an integer (a float, a string or a bool is an error).
fn int_arg(args: &[Value], i: usize, name: &str, n: usize) -> Result<i64, FuncError> {
    match arg(args, i, name, n)? {
        Value::Number(x) if x.as_f64().is_none() => x
            .as_i64()
            .ok_or_else(|| FuncError::Generic(format!("{name}: {x} overflows int"))),
        other => Err(FuncError::Generic(format!(
            "{name}: wrong type for value; expected int; got {}",
            go_type(other)
        ))),
    }
}

/// The Go type a context value has, as Go's messages name it.
fn go_type(v: &Value) -> &'static str {
    match v {
        Value::NoValue | Value::Nil => "<nil>",
        Value::Bool(_) => "bool",
        Value::String(_) => "string",
        Value::Number(n) if n.as_f64().is_some() => "float64",
        Value::Number(_) => "int64",
        Value::Array(_) => "[]interface {}",
        Value::Map(_) | Value::Object(_) => "map[string]interface {}",
        Value::Function(_) => "func",
    }
}

/// Go's `eq`: arguments of the same basic kind are compared; a string against a bool (or any two
/// kinds that differ, both present) is an error; a missing value equals only a missing value.
fn eq(args: &[Value]) -> Result<Value, FuncError> {
    let Some((first, rest)) = args.split_first() else {
        return Err(FuncError::AtLeastXArgs("eq".into(), 2));
    };
    if rest.is_empty() {
        return Err(FuncError::Generic("missing argument for comparison".into()));
    }
    for other in rest {
        if go_equal(first, other)? {
            return Ok(Value::Bool(true));
        }
    }
    Ok(Value::Bool(false))
}

/// Go's `ne`: exactly two arguments, the negation of `eq`.
fn ne(args: &[Value]) -> Result<Value, FuncError> {
    if args.len() != 2 {
        return Err(FuncError::ExactlyXArgs("ne".into(), 2));
    }
    Ok(Value::Bool(!go_equal(&args[0], &args[1])?))
}

fn go_equal(a: &Value, b: &Value) -> Result<bool, FuncError> {
    let missing = |v: &Value| matches!(v, Value::NoValue | Value::Nil);
    match (a, b) {
        (Value::String(x), Value::String(y)) => Ok(x == y),
        (Value::Bool(x), Value::Bool(y)) => Ok(x == y),
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(f), Some(g)) => Ok(f == g),
            (None, None) => Ok(x.as_i64() == y.as_i64() && x.as_u64() == y.as_u64()),
            _ => Err(FuncError::Generic(
                "incompatible types for comparison".into(),
            )),
        },
        (x, y) if missing(x) && missing(y) => Ok(true),
        (x, y) if missing(x) || missing(y) => Ok(false),
        _ => Err(FuncError::Generic(
            "incompatible types for comparison".into(),
        )),
    }
}

/// Go's `printf` (`fmt.Sprintf`) for the verbs strategy templates use: `%s`, `%v`, `%d`, `%q`,
/// `%t` and `%%` over strings, booleans, missing values and (`%d`, `%v`) numbers, with Go's in-band reports of a missing argument (`%!s(MISSING)`), an argument
/// of the wrong kind (`%!d(string=x)`) and arguments left over (`%!(EXTRA string=x)`). Anything
/// else (widths, other verbs, composite values) is refused, so the string is used as written.
fn printf(args: &[Value]) -> Result<Value, FuncError> {
    let Some((Value::String(format), rest)) = args.split_first() else {
        return Err(FuncError::Generic("printf needs a format string".into()));
    };
    let unsupported = || FuncError::Generic(format!("printf {format:?}: unsupported"));
    let mut out = String::new();
    let mut next = rest.iter();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let verb = chars.next().ok_or_else(unsupported)?;
        if verb == '%' {
            out.push('%');
            continue;
        }
        let Some(v) = next.next() else {
            out.push_str(&format!("%!{verb}(MISSING)"));
            continue;
        };
        // Numbers: an integer prints in decimal for %d and %v, a float as Go's %v does; which Go
        // type a number has (int, int64, float64) is not known here, so a report that would name
        // it is refused rather than guessed.
        if let Value::Number(n) = v {
            match (verb, n.as_f64()) {
                ('d' | 'v', None) => out.push_str(&n.to_string()),
                ('v', Some(f)) => out.push_str(&go_float_v(f)),
                _ => return Err(unsupported()),
            }
            continue;
        }
        let scalar = match v {
            Value::String(x) => Some(x.clone()),
            Value::Bool(b) => Some(b.to_string()),
            Value::NoValue | Value::Nil => None,
            _ => return Err(unsupported()),
        };
        let wrong = |scalar: &Option<String>| match scalar {
            Some(x) => format!("%!{verb}({}={x})", go_type(v)),
            None => format!("%!{verb}(<nil>)"),
        };
        match (verb, v) {
            ('s' | 'v', Value::String(x)) => out.push_str(x),
            ('v' | 't', Value::Bool(b)) => out.push_str(&b.to_string()),
            ('v', _) => out.push_str("<nil>"),
            ('q', Value::String(x)) => out.push_str(&go_strconv_quote(x)),
            ('s' | 'd' | 'q' | 't', _) => out.push_str(&wrong(&scalar)),
            _ => return Err(unsupported()),
        }
    }
    let extra: Vec<String> = next
        .map(|v| match v {
            Value::String(x) => Ok(format!("string={x}")),
            Value::Bool(b) => Ok(format!("bool={b}")),
            Value::NoValue | Value::Nil => Ok("<nil>".to_owned()),
            _ => Err(unsupported()),
        })
        .collect::<Result<_, _>>()?;
    if !extra.is_empty() {
        out.push_str(&format!("%!(EXTRA {})", extra.join(", ")));
    }
    Ok(Value::String(out))
}

/// A float64 as Go's `%v` prints it: the shortest decimal that reads back as the same value,
/// in exponent form (`1e+21`, `1e-07`) when the decimal exponent is below -4 or at least 21.
fn go_float_v(f: f64) -> String {
    if !f.is_finite() {
        return if f.is_nan() {
            "NaN".into()
        } else if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if f != 0.0 && !(-4..21).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    } else {
        format!("{f}")
    }
}

/// Go's `strconv.Quote`: double quotes, `\"` and `\\` escaped, the usual short escapes for
/// control characters and `\xNN` for the other ASCII controls; printable Unicode as is.
fn go_strconv_quote(s: &str) -> String {
    let mut out = String::from('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `index`, with the zero value `""` for a missing key of a map whose values are all strings
/// (a `map[string]string` such as `.Parameters`), and `<no value>` for other maps.
fn index(args: &[Value]) -> Result<Value, FuncError> {
    match args {
        [] => return Err(FuncError::AtLeastXArgs("index".into(), 1)),
        // Go: `index x` is x itself.
        [Value::NoValue | Value::Nil] => {
            return Err(FuncError::Generic("index of untyped nil".into()));
        }
        [only] => return Ok(only.clone()),
        _ => {}
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

/// Sprig's `default d given...`: `given[0]` unless it is missing or empty; later arguments are
/// accepted and ignored.
fn default(args: &[Value]) -> Result<Value, FuncError> {
    let fallback = args
        .first()
        .ok_or_else(|| FuncError::AtLeastXArgs("default".into(), 1))?;
    match args.get(1) {
        Some(v) if !is_empty(v) => Ok(v.clone()),
        _ => Ok(fallback.clone()),
    }
}

fn empty(args: &[Value]) -> Result<Value, FuncError> {
    Ok(Value::Bool(is_empty(arg(args, 0, "empty", 1)?)))
}

fn coalesce(args: &[Value]) -> Result<Value, FuncError> {
    Ok(args
        .iter()
        .find(|v| !is_empty(v))
        .cloned()
        .unwrap_or(Value::NoValue))
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
        .map(|v| go_strconv_quote(&text(v)))
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
    // Go's `strings.Title`: a letter starts a word when it follows a separator, and a separator
    // is any ASCII character but a letter, a digit or `_`, or a non-ASCII white space.
    let separator = |c: char| {
        if c.is_ascii() {
            !(c.is_ascii_alphanumeric() || c == '_')
        } else {
            !c.is_alphanumeric() && c.is_whitespace()
        }
    };
    let mut start = true;
    for c in s.chars() {
        if start {
            out.extend(c.to_uppercase());
        } else {
            out.push(c);
        }
        start = separator(c);
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
    let n = int_arg(args, 0, "trunc", 2)?;
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
    let n = int_arg(args, 0, name, 2)?;
    if !(0..=MAX_PAD).contains(&n) {
        return Err(FuncError::Generic(format!("{name}: {n} spaces")));
    }
    let pad = " ".repeat(n as usize);
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
