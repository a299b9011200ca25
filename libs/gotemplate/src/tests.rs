//! Each construct and each Go quirk the engine matches; expected values are Go's (checked with
//! `text/template` and slim-sprig v3.0.0). Long because it is a list of small tables, one per
//! construct; the generated differential cases live in `e2e/go-differential`.

use serde_json::json;

use crate::{Error, Template, Value, render};

fn ctx() -> Value {
    let mut v = Value::from_json(&json!({
        "Application": {
            "metadata": {"name": "pg", "labels": {"b": "2", "a": "1"}},
            "spec": {
                "replicas": 2, "ratio": 1.5, "whole": 3.0, "tiny": 1e-7, "huge": 1e21,
                "big": 9_007_199_254_740_993_u64, "dbs": ["app", "audit"], "empty": [],
                "nothing": null, "users": {"bob": {}, "alice": {"password": "p"}},
            },
        },
        "Mode": "backup",
    }));
    if let Value::Map(_, Some(m)) = &mut v {
        std::sync::Arc::make_mut(m).insert(
            b"Parameters".to_vec(),
            Value::string_map([("bucket", "b1"), ("region", "")]),
        );
    }
    v
}

fn r(text: &str) -> String {
    match render(text, &ctx()) {
        Ok(s) => s,
        Err(e) => format!("ERR {e}"),
    }
}

fn fails(text: &str) -> bool {
    render(text, &ctx()).is_err()
}

fn parse_fails(text: &str) -> bool {
    matches!(Template::parse(text), Err(Error::Parse(_)))
}

#[test]
fn text_actions_and_missing_keys() {
    assert_eq!(
        r("s3://{{ .Parameters.bucket }}/{{ .Application.metadata.name }}"),
        "s3://b1/pg"
    );
    assert_eq!(r("{{ .Parameters.absent }}"), "<no value>");
    assert_eq!(r("{{ .Application.spec.absent.deeper }}"), "<no value>");
    assert_eq!(r("{{ .Application.spec.nothing }}"), "<no value>");
    // A field of a null (a nil interface) is an error; of a missing key it is no value.
    assert!(fails("{{ .Application.spec.nothing.x }}"));
    assert!(fails("{{ .Mode.x }}"));
    assert!(fails("{{ .Application.spec.replicas.x }}"));
    assert_eq!(
        r("{{ index .Parameters \"absent\" }}|{{ index .Application.spec \"absent\" }}"),
        "|<no value>"
    );
}

#[test]
fn trim_markers_and_comments() {
    assert_eq!(r("a  {{- .Mode -}}  b"), "abackupb");
    assert_eq!(r("é {{- .Mode -}} ü"), "ébackupü");
    assert_eq!(r("a {{- /* c */ -}} b"), "ab");
    assert_eq!(r("a{{/* c */}}b"), "ab");
    assert_eq!(r("{{ \"}}\" -}}  x"), "}}x");
    assert_eq!(r("{{-3}}"), "-3");
    assert!(parse_fails("{{/* c */ .Mode }}"));
}

#[test]
fn composite_values_and_floats_print_as_go_fmt() {
    assert_eq!(r("{{ .Application.metadata.labels }}"), "map[a:1 b:2]");
    assert_eq!(r("{{ .Application.spec.dbs }}"), "[app audit]");
    assert_eq!(
        r("{{ .Application.spec.users }}"),
        "map[alice:map[password:p] bob:map[]]"
    );
    assert_eq!(r("{{ list 1 \"a\" nil 1.5 }}"), "[1 a <nil> 1.5]");
    assert_eq!(
        r("{{ .Application.spec.tiny }}|{{ .Application.spec.huge }}"),
        "1e-07|1e+21"
    );
    assert_eq!(
        r("{{ .Application.spec.whole }}|{{ .Application.spec.big }}"),
        "3|9007199254740993"
    );
    assert_eq!(
        r("{{ 1e3 }}|{{ 0x10 }}|{{ 'a' }}|{{ 1.0 }}"),
        "1000|16|97|1"
    );
}

#[test]
fn control_structures() {
    assert_eq!(r("{{ if .Mode }}y{{ else }}n{{ end }}"), "y");
    assert_eq!(
        r("{{ if .Parameters.region }}y{{ else if .Mode }}m{{ else }}n{{ end }}"),
        "m"
    );
    assert_eq!(r("{{ with .Parameters.bucket }}{{ . }}{{ end }}"), "b1");
    assert_eq!(
        r("{{ with .Parameters.region }}x{{ else with .Mode }}{{ . }}{{ end }}"),
        "backup"
    );
    assert_eq!(
        r("{{ range .Application.spec.dbs }}<{{ . }}>{{ end }}"),
        "<app><audit>"
    );
    assert_eq!(
        r("{{ range $i, $d := .Application.spec.dbs }}{{ $i }}={{ $d }} {{ end }}"),
        "0=app 1=audit "
    );
    // Maps range in key order.
    assert_eq!(
        r("{{ range $k, $v := .Application.metadata.labels }}{{ $k }}{{ $v }}{{ end }}"),
        "a1b2"
    );
    assert_eq!(
        r("{{ range .Application.spec.empty }}x{{ else }}none{{ end }}"),
        "none"
    );
    assert_eq!(
        r("{{ range .Application.spec.nothing }}x{{ else }}none{{ end }}"),
        "none"
    );
    // Go 1.22+: range over an integer.
    assert_eq!(
        r("{{ range .Application.spec.replicas }}{{ . }}{{ end }}"),
        "01"
    );
    assert_eq!(
        r("{{ range 3 }}{{ if eq . 1 }}{{ continue }}{{ end }}{{ . }}{{ end }}"),
        "02"
    );
    assert_eq!(
        r("{{ range 5 }}{{ if eq . 2 }}{{ break }}{{ end }}{{ . }}{{ end }}"),
        "01"
    );
    assert!(fails("{{ range .Mode }}x{{ end }}"));
    assert!(fails("{{ range $k, $v := 3 }}x{{ end }}"));
    // A huge integer range stops at the first error, as Go's does.
    assert!(fails(
        "{{ range .Application.spec.big }}{{ lower 1 }}{{ end }}"
    ));
    assert_eq!(
        r("{{ define \"t\" }}[{{ . }}]{{ end }}{{ template \"t\" .Mode }}"),
        "[backup]"
    );
    assert_eq!(r("{{ block \"b\" .Mode }}<{{ . }}>{{ end }}"), "<backup>");
}

#[test]
fn variables_are_scoped_as_in_go() {
    assert_eq!(r("{{ $x := .Mode }}{{ $x }}"), "backup");
    assert_eq!(
        r("{{ $x := 1 }}{{ if true }}{{ $x = 2 }}{{ end }}{{ $x }}"),
        "2"
    );
    assert!(parse_fails("{{ if true }}{{ $x := 1 }}{{ end }}{{ $x }}"));
    assert!(parse_fails(
        "{{ range $k, $v := .Application.spec.dbs }}{{ end }}{{ $k }}"
    ));
    assert!(parse_fails("{{ $undefined }}"));
    assert_eq!(
        r("{{ range .Application.spec.dbs }}{{ $.Mode }}{{ end }}"),
        "backupbackup"
    );
}

#[test]
fn and_or_stop_at_the_first_deciding_argument() {
    assert_eq!(r("{{ or .Parameters.region .Mode }}"), "backup");
    assert_eq!(r("{{ and .Parameters.region (lower 1) }}"), "");
    assert_eq!(r("{{ or .Mode (lower 1) }}"), "backup");
    assert!(fails("{{ and .Mode (lower 1) }}"));
    assert_eq!(r("{{ and 1 0 }}|{{ or 0 \"\" }}"), "0|");
    assert!(fails("{{ and }}"));
}

#[test]
fn builtins() {
    assert_eq!(
        r("{{ len .Application.metadata.labels }}|{{ len .Mode }}|{{ len .Application.spec.dbs }}"),
        "2|6|2"
    );
    assert!(fails("{{ len 3 }}"));
    assert!(fails("{{ len .Parameters.absent }}"));
    assert_eq!(
        r("{{ index .Application.spec.dbs 1 }}|{{ index .Mode 0 }}"),
        "audit|98"
    );
    assert!(fails("{{ index .Application.spec.dbs 2 }}"));
    assert_eq!(
        r("{{ print .Parameters.absent 1 2 \"a\" \"b\" }}"),
        "<nil> 1 2ab"
    );
    assert_eq!(r("{{ println 1 \"a\" }}"), "1 a\n");
    assert_eq!(
        r("{{ html \"<a&'\" }}|{{ js \"a'<\" }}|{{ urlquery \"a b&\" }}"),
        "&lt;a&amp;&#39;|a\\'\\u003C|a+b%26"
    );
    assert_eq!(r("{{ html .Parameters.absent }}"), "&lt;no value&gt;");
    assert!(fails("{{ call .Mode }}"));
    assert_eq!(r("{{ not 0 }}|{{ not .Mode }}"), "true|false");
}

#[test]
fn comparisons_follow_gos_basic_kinds() {
    assert_eq!(r("{{ eq .Application.spec.replicas 2 }}"), "true");
    assert_eq!(r("{{ eq .Mode \"x\" \"backup\" }}"), "true");
    assert_eq!(
        r("{{ eq .Parameters.absent \"x\" }}|{{ eq .Parameters.absent .Parameters.none }}"),
        "false|true"
    );
    assert!(fails("{{ eq .Mode 1 }}"));
    assert!(fails("{{ eq 1 1.0 }}"));
    assert!(fails(
        "{{ eq .Application.spec.dbs .Application.spec.dbs }}"
    ));
    assert_eq!(
        r("{{ lt 1 2 }}|{{ le \"a\" \"a\" }}|{{ gt 1.5 .Application.spec.ratio }}|{{ ge 2 2 }}"),
        "true|true|false|true"
    );
    assert!(fails("{{ lt true false }}"));
    assert!(fails("{{ lt .Parameters.absent 1 }}"));
}

#[test]
fn printf_as_go_fmt() {
    assert_eq!(r("{{ printf \"%s\" 3 }}"), "%!s(int=3)");
    assert_eq!(
        r("{{ printf \"%s\" .Application.spec.replicas }}"),
        "%!s(int64=2)"
    );
    assert_eq!(
        r("{{ printf \"%T %T %T\" 1 .Application.spec.replicas 1.5 }}"),
        "int int64 float64"
    );
    assert_eq!(
        r("{{ printf \"%05d|%-4d|%8s|%x\" 42 7 \"ab\" 255 }}"),
        "00042|7   |      ab|ff"
    );
    assert_eq!(
        r("{{ printf \"%.2f|%e|%g\" 1.5 1.5 1e21 }}"),
        "1.50|1.500000e+00|1e+21"
    );
    assert_eq!(
        r("{{ printf \"%v\" .Application.metadata.labels }}"),
        "map[a:1 b:2]"
    );
    assert_eq!(
        r("{{ printf \"%#v\" .Application.spec.dbs }}"),
        "[]interface {}{\"app\", \"audit\"}"
    );
    assert_eq!(
        r("{{ printf \"%q\" .Application.spec.dbs }}"),
        "[\"app\" \"audit\"]"
    );
    assert_eq!(r("{{ printf \"%d\" .Mode }}"), "%!d(string=backup)");
    assert_eq!(r("{{ printf \"%s %s\" .Mode }}"), "backup %!s(MISSING)");
    assert_eq!(
        r("{{ printf \"x\" .Mode 1 }}"),
        "x%!(EXTRA string=backup, int=1)"
    );
}

#[test]
fn argument_types_are_checked_as_go_checks_them() {
    // An int64 from the application is not an int; a number literal is not a string.
    assert!(fails("{{ repeat .Application.spec.replicas \"x\" }}"));
    assert_eq!(r("{{ repeat 2 \"x\" }}"), "xx");
    assert!(fails("{{ upper 1 }}"));
    assert!(fails("{{ lower .Parameters.absent }}"));
    assert!(fails("{{ trunc \"2\" .Mode }}"));
    assert!(fails("{{ ternary 1 2 .Mode }}"));
    // A missing map is a nil map; a null in the application is a nil interface, refused.
    assert_eq!(r("{{ hasKey .Parameters.absent \"x\" }}"), "false");
    assert!(fails("{{ hasKey .Application.spec.nothing \"x\" }}"));
    assert!(fails("{{ hasKey .Parameters \"bucket\" }}"));
    // Wrong arity, unknown functions, nil as a command.
    assert!(fails("{{ .Mode | lower .Mode }}"));
    assert!(parse_fails("{{ required \"x\" .Mode }}"));
    assert!(fails("{{ nil }}"));
    assert!(parse_fails("{{ .Mode | \"x\" }}"));
}

#[test]
fn slim_sprig_functions() {
    assert_eq!(
        r(
            "{{ add 1 2 .Application.spec.replicas }}|{{ add1 \"5\" }}|{{ sub 1 3 }}|{{ mul 2 3 4 }}"
        ),
        "5|6|-2|24"
    );
    assert_eq!(
        r("{{ div 7 2 }}|{{ mod 7 2 }}|{{ max 1 5 3 }}|{{ min 1 5 -3 }}"),
        "3|1|5|-3"
    );
    assert!(fails("{{ div 1 0 }}"));
    assert_eq!(
        r("{{ int \"12\" }}|{{ int64 1.9 }}|{{ float64 \"1e3\" }}|{{ atoi \"x\" }}"),
        "12|1|1000|0"
    );
    assert_eq!(
        r("{{ int64 .Application.spec.huge }}"),
        "-9223372036854775808"
    );
    assert_eq!(
        r(
            "{{ first .Application.spec.dbs }}|{{ rest .Application.spec.dbs }}|{{ last .Application.spec.dbs }}"
        ),
        "app|[audit]|audit"
    );
    assert_eq!(
        r("{{ first .Application.spec.empty }}|{{ rest .Application.spec.empty }}"),
        "<no value>|[]"
    );
    assert!(fails("{{ first .Mode }}"));
    assert!(fails("{{ first .Parameters.absent }}"));
    assert_eq!(
        r("{{ append .Application.spec.dbs 1 }}|{{ prepend .Application.spec.dbs 1 }}"),
        "[app audit 1]|[1 app audit]"
    );
    assert_eq!(
        r("{{ sortAlpha (list \"b\" \"a\" 1) }}|{{ until 3 }}|{{ until -2 }}"),
        "[1 a b]|[0 1 2]|[0 -1]"
    );
    assert_eq!(
        r("{{ has \"app\" .Application.spec.dbs }}|{{ has 1 .Parameters.absent }}"),
        "true|false"
    );
    assert_eq!(
        r("{{ cat \"a\" nil 1 }}|{{ repeat 3 \"ab\" }}|{{ substr 1 3 \"hello\" }}"),
        "a 1|ababab|el"
    );
    assert_eq!(
        r("{{ split \",\" \"a,b\" }}|{{ splitList \",\" \"a,b\" }}"),
        "map[_0:a _1:b]|[a b]"
    );
    assert_eq!(
        r(
            "{{ all 1 \"\" }}|{{ any 0 \"x\" }}|{{ deepEqual 1 1 }}|{{ deepEqual 1 .Application.spec.replicas }}"
        ),
        "false|true|true|false"
    );
    assert_eq!(
        r(
            "{{ hasKey .Application.metadata.labels \"a\" }}|{{ dig \"users\" \"alice\" \"password\" \"d\" .Application.spec }}"
        ),
        "true|p"
    );
    assert_eq!(
        r(
            "{{ typeOf .Application.spec.dbs }}|{{ kindOf .Application.spec.replicas }}|{{ typeOf .Parameters.absent }}"
        ),
        "[]interface {}|int64|<nil>"
    );
    assert_eq!(
        r("{{ toJson .Application.metadata.labels }}|{{ toJson \"<a>\" }}|{{ toRawJson \"<a>\" }}"),
        "{\"a\":\"1\",\"b\":\"2\"}|\"\\u003ca\\u003e\"|\"<a>\""
    );
    assert_eq!(
        r("{{ toJson .Application.spec.tiny }}|{{ toJson .Application.spec.huge }}"),
        "1e-7|1e+21"
    );
    assert_eq!(
        r("{{ toPrettyJson (dict \"a\" (list 1) \"b\" (dict)) }}"),
        "{\n  \"a\": [\n    1\n  ],\n  \"b\": {}\n}"
    );
    assert_eq!(
        r("{{ b32enc \"hi\" }}|{{ sha1sum \"x\" }}"),
        "NBUQ====|11f6ad8ec52a2984abaafd7c3b516503785c2072"
    );
    assert_eq!(
        r("{{ sha256sum \"x\" }}"),
        "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"
    );
    assert_eq!(
        r("{{ b64dec \"aGk=\" }}|{{ b64dec \"a\" }}|{{ b64dec \"ab!c\" }}"),
        "hi|illegal base64 data at input byte 0|illegal base64 data at input byte 2"
    );
    assert_eq!(
        r(
            "{{ regexMatch \"^a.c$\" \"abc\" }}|{{ regexReplaceAll \"a(x*)b\" \"-ab-axxb-\" \"${1}W\" }}"
        ),
        "true|-W-xxW-"
    );
    assert_eq!(r("{{ regexMatch \"(\" \"x\" }}"), "false");
    assert!(fails("{{ regexReplaceAll \"(\" \"x\" \"y\" }}"));
    assert_eq!(
        r(
            "{{ base \"/a/b.tar.gz\" }}|{{ dir \"/a/b\" }}|{{ ext \"b.tar.gz\" }}|{{ clean \"a//b/../c/.\" }}"
        ),
        "b.tar.gz|/a|.gz|a/c"
    );
    assert!(fails("{{ fail \"no\" }}"));
    assert_eq!(
        r("{{ title \"a,b-c_d e%d\" }}|{{ upper \"ünï\" }}|{{ trunc 1 \"ünï\" }}"),
        "A,B-C_d E%D|ÜNÏ|\u{FFFD}"
    );
    assert_eq!(
        r("{{ replace \"\" \"-\" \"ab\" }}|{{ trimAll \"-\" \"--a--\" }}|{{ trim \"  a \" }}"),
        "-a-b-|a|a"
    );
    assert_eq!(
        r("{{ quote \"a\" nil 1 }}|{{ squote \"a\" 1 }}|{{ toString nil }}"),
        "\"a\" \"1\"|'a' '1'|<nil>"
    );
    assert_eq!(
        r(
            "{{ default \"d\" .Parameters.region }}|{{ empty .Application.spec.empty }}|{{ coalesce 0 \"\" \"c\" }}"
        ),
        "d|true|c"
    );
    assert_eq!(
        r(
            "{{ ternary \"y\" \"n\" true }}|{{ plural \"one\" \"many\" 2 }}|{{ join \"-\" (list 1 nil \"a\") }}"
        ),
        "y|many|1-a"
    );
    assert_eq!(
        r("{{ slice (list 1 2 3) 1 }}|{{ slice (list) }}|{{ concat (list 1) (list 2) }}"),
        "[2 3]|<no value>|[1 2]"
    );
    assert_eq!(
        r(
            "{{ uniq (list 1 1 \"1\") }}|{{ without (list 1 2 1) 1 }}|{{ compact (list 0 1 \"\") }}|{{ reverse (list 1 2) }}"
        ),
        "[1 1]|[2]|[1]|[2 1]"
    );
    assert_eq!(
        r(
            "{{ toStrings (list 1 nil \"a\") }}|{{ initial (list 1 2) }}|{{ get (dict \"a\" 1) \"b\" }}"
        ),
        "[1 a]|[1]|"
    );
    assert_eq!(
        r("{{ indent 2 \"a\\nb\" }}|{{ nindent 1 \"a\" }}"),
        "  a\n  b|\n a"
    );
    assert!(fails("{{ indent -1 \"a\" }}"));
}

/// Documented deviation, on purpose: the functions of slim-sprig that read the controller's
/// environment or make network lookups are not offered (a template that calls one is used as
/// written); the clock and random ones are.
#[test]
fn environment_functions_are_not_offered_clock_ones_are() {
    for name in ["env", "expandenv", "getHostByName"] {
        assert!(!crate::has_function(name), "{name}");
    }
    for name in [
        "now",
        "date",
        "randInt",
        "ago",
        "toDate",
        "duration",
        "durationRound",
    ] {
        assert!(crate::has_function(name), "{name}");
    }
}

/// Documented deviation: Go has no limit on a template's output or its loops (a range over a
/// huge integer runs until the process runs out of memory); here more than 1 MiB of output or
/// 10,000,000 range iterations is an execution error, so the string is used as written.
#[test]
fn runaway_templates_fail_instead_of_exhausting_memory() {
    assert!(fails("{{ range .Application.spec.big }}x{{ end }}"));
    assert!(fails("{{ range .Application.spec.big }}{{ end }}"));
    assert_eq!(r("{{ range 1000 }}{{ end }}"), "");
}

/// Documented deviation: parenthesized pipelines and control structures nest at most 100 deep and
/// `template` calls recurse at most 100 deep (Go: 10,000 parentheses, unbounded control
/// structures, 100,000 calls, on a stack that grows); deeper fails, and the deepest accepted
/// nesting does not overflow the stack.
#[test]
fn deep_nesting_is_bounded() {
    let deep = |n: usize| format!("{{{{ {}1{} }}}}", "(".repeat(n), ")".repeat(n));
    assert_eq!(r(&deep(100)), "1");
    assert!(parse_fails(&deep(101)));
    let calls = |n: usize| format!("{{{{ {}1{} }}}}", "(add1 ".repeat(n), ")".repeat(n));
    assert_eq!(r(&calls(100)), "101");
    let ifs = |n: usize| format!("{}x{}", "{{ if 1 }}".repeat(n), "{{ end }}".repeat(n));
    assert_eq!(r(&ifs(100)), "x");
    assert!(parse_fails(&ifs(101)));
    assert!(fails(
        "{{ define \"t\" }}{{ template \"t\" . }}{{ end }}{{ template \"t\" . }}"
    ));
    let mixed = format!(
        "{}{}{}",
        "{{ range list 1 }}{{ with 1 }}".repeat(25),
        deep(50),
        "{{ end }}{{ end }}".repeat(25)
    );
    assert_eq!(r(&mixed), "1");
}

/// Functions and forms outside the differential generator's lists, each line's expected value
/// Go's answer (a string Go refuses is expected as written), with `{"Mode": "backup"}` as dot.
#[test]
fn more_of_slim_sprig_and_fmt_as_go() {
    let dot = Value::from_json(&json!({"Mode": "backup"}));
    let cases: &[(&str, &str)] = &[
        (
            "{{ seq 3 }}|{{ seq 2 5 }}|{{ seq 5 2 }}|{{ seq 1 2 7 }}|{{ seq 0 }}",
            "1 2 3|2 3 4 5|5 4 3 2|1 3 5 7|1 0",
        ),
        (
            "{{ chunk 2 (list 1 2 3) }}|{{ pluck \"a\" (dict \"a\" 1) (dict \"b\" 2) (dict \"a\" 3) }}",
            "[[1 2] [3]]|[1 3]",
        ),
        (
            "{{ pick (dict \"a\" 1 \"b\" 2) \"a\" \"c\" }}|{{ omit (dict \"a\" 1 \"b\" 2) \"a\" }}|{{ values (dict \"a\" 1) }}|{{ keys (dict \"a\" 1) }}",
            "map[a:1]|map[b:2]|[1]|[a]",
        ),
        (
            "{{ regexFind \"a+\" \"baaac\" }}|{{ regexFindAll \"a\" \"banana\" -1 }}|{{ regexFindAll \"a\" \"banana\" 2 }}|{{ regexFindAll \"x\" \"banana\" -1 }}",
            "aaa|[a a a]|[a a]|[]",
        ),
        (
            "{{ regexSplit \"a\" \"banana\" -1 }}|{{ regexSplit \"a\" \"banana\" 2 }}|{{ regexSplit \"\" \"abc\" -1 }}|{{ regexSplit \"x*\" \"abc\" -1 }}",
            "[b n n ]|[b nana]|[a b c]|[a b c]",
        ),
        (
            "{{ regexQuoteMeta \"a.b*c\" }}|{{ regexReplaceAllLiteral \"a\" \"banana\" \"$1\" }}",
            "a\\.b\\*c|b$1n$1n$1",
        ),
        (
            "{{ b32dec \"NBUQ====\" }}|{{ b32dec \"x\" }}|{{ b32dec \"NBUQ===\" }}",
            "hi|illegal base32 data at input byte 0|illegal base32 data at input byte 7",
        ),
        (
            "{{ fromJson \"{\\\"a\\\":1,\\\"b\\\":[true,null]}\" }}|{{ fromJson \"x\" }}|{{ toJson (fromJson \"1e3\") }}",
            "map[a:1 b:[true <nil>]]|<no value>|1000",
        ),
        (
            "{{ round 1.2345 2 }}|{{ round 1.5 0 }}|{{ round 2.5 0 0.6 }}|{{ ceil 1.2 }}|{{ floor \"-1.5\" }}",
            "1.23|2|2|2|-2",
        ),
        (
            "{{ maxf 1 2.5 \"3\" }}|{{ minf 1 -2.5 }}|{{ biggest 1 9 }}|{{ toDecimal \"777\" }}|{{ toDecimal 10 }}",
            "3|-2.5|9|511|8",
        ),
        (
            "{{ adler32sum \"hello\" }}|{{ hello }}|{{ isAbs \"/a\" }}|{{ osBase \"a/b\" }}",
            "103547413|Hello!|true|b",
        ),
        (
            "{{ splitn \",\" 2 \"a,b,c\" }}|{{ untilStep 0 10 3 }}|{{ untilStep 5 0 -2 }}",
            "map[_0:a _1:b,c]|[0 3 6 9]|[5 3 1]",
        ),
        (
            "{{ typeIs \"string\" \"a\" }}|{{ typeIsLike \"int\" 1 }}|{{ kindIs \"slice\" (list) }}",
            "true|true|true",
        ),
        (
            "{{ tuple 1 2 }}|{{ set (dict \"a\" 1) \"b\" 2 }}|{{ unset (dict \"a\" 1) \"a\" }}",
            "[1 2]|map[a:1 b:2]|map[]",
        ),
        (
            "{{ mustRegexMatch \"a\" \"a\" }}|{{ mustToJson (list 1) }}|{{ mustFirst (list 1) }}|{{ mustLast (list) }}",
            "true|[1]|1|<no value>",
        ),
        (
            "{{ printf \"%+d|% d|%#x|%#o|%X|%o|%b|%c|%U\" 5 5 255 8 255 8 5 65 65 }}",
            "+5| 5|0xff|010|FF|10|101|A|U+0041",
        ),
        (
            "{{ printf \"%6.2f|%-8.3e|%G|%E|%x|%10.4v|%.0f\" 3.14159 1234.5 1e-7 1.5 1.5 3.14159 2.5 }}",
            "  3.14|1.234e+03|1E-07|1.500000E+00|0x1.8p+00|     3.142|2",
        ),
        (
            "{{ printf \"%v %v\" (list 1 (dict \"a\" nil)) (dict) }}|{{ printf \"%#v\" (dict \"a\" 1 \"b\" (list \"x\")) }}",
            "[1 map[a:<nil>]] map[]|map[string]interface {}{\"a\":1, \"b\":[]interface {}{\"x\"}}",
        ),
        (
            "{{ printf \"%q|%x|%X|% x\" \"héllo\\x01\" \"hi\" \"hi\" \"hi\" }}|{{ printf \"%.1q\" \"abc\" }}",
            "\"héllo\\x01\"|6869|6869|68 69|\"a\"",
        ),
        (
            "{{ printf \"%[2]s %[1]s\" \"a\" \"b\" }}|{{ printf \"%*d\" 5 1 }}|{{ printf \"%-*d|\" 5 1 }}|{{ printf \"%[3]s\" 1 }}",
            "b a|    1|1    ||%!s(BADINDEX)",
        ),
        (
            "{{ printf \"%!\" }}|{{ printf \"%\" }}|{{ printf \"%z\" 1 }}|{{ printf \"%d %d\" 1 }}|{{ printf \"%.3s\" \"héllo\" }}",
            "%!!(MISSING)|%!(NOVERB)|%!z(int=1)|1 %!d(MISSING)|hél",
        ),
        (
            "{{ printf \"%t %v %s\" true nil nil }}|{{ printf \"%08.3f\" -3.14159 }}|{{ printf \"%+.2e\" 12345.678 }}",
            "true <nil> %!s(<nil>)|-003.142|+1.23e+04",
        ),
        (
            "{{ printf \"%v\" 1e20 }}|{{ printf \"%v\" 123456789.0 }}|{{ printf \"%v\" 0.000012 }}|{{ 100000.0 }}|{{ 1e6 }}|{{ -0.0 }}",
            "1e+20|1.23456789e+08|1.2e-05|100000|1e+06|-0",
        ),
        (
            "{{ printf \"%5t|%-6v|%05s\" true false \"ab\" }}|{{ printf \"%x\" -255 }}|{{ printf \"%x\" 1e21 }}",
            " true|false |000ab|-ff|0x1.b1ae4d6e2ef5p+69",
        ),
        (
            "{{ len (list) }}|{{ index (dict \"a\" (list 1 2)) \"a\" 1 }}|{{ slice (list 1 2 3) 1 2 }}|{{ slice \"abc\" 1 }}",
            "{{ len (list) }}|{{ index (dict \"a\" (list 1 2)) \"a\" 1 }}|{{ slice (list 1 2 3) 1 2 }}|{{ slice \"abc\" 1 }}",
        ),
        (
            "{{ urlquery \"a/b?c=d\" 1 }}|{{ js \"<é\\u2028>\" }}|{{ html \"a\" 1 nil }}|{{ print nil }}|{{ println }}",
            "a%2Fb%3Fc%3Dd1|\\u003Cé\\u2028\\u003E|a1&lt;no value&gt;|<nil>|\n",
        ),
        (
            "{{ eq 1 2 3 1 }}|{{ ne \"a\" \"b\" }}|{{ lt 1 2.0 }}",
            "{{ eq 1 2 3 1 }}|{{ ne \"a\" \"b\" }}|{{ lt 1 2.0 }}",
        ),
        (
            "{{ $x := list 1 2 }}{{ range $i, $e := $x }}{{ $i }}{{ $e }}{{ end }}{{ $x }}",
            "0112[1 2]",
        ),
        (
            "{{ with $y := \"a\" }}{{ $y }}{{ end }}|{{ range $v := list 3 4 }}{{ $v }}{{ end }}|{{ range $i, $v := dict \"b\" 1 \"a\" 2 }}{{ $i }}{{ $v }}{{ end }}",
            "a|34|a2b1",
        ),
        (
            "{{ if and 1 (list) }}t{{ else }}f{{ end }}|{{ or nil 0 \"\" }}|{{ and 1 2 }}|{{ not nil }}",
            "f||2|true",
        ),
        (
            "{{ 'a' }}|{{ '\\n' }}|{{ 0o17 }}|{{ 0b101 }}|{{ 1_000 }}|{{ 017 }}|{{ 0x1p4 }}|{{ .5 }}|{{ 5. }}|{{ +3 }}",
            "97|10|15|5|1000|15|16|0.5|5|3",
        ),
        (
            "{{ \"a\\x41\\u00e9\\101\" }}|{{ `a\\nb` }}|{{ printf \"%T\" 'a' }}|{{ printf \"%T\" 1e3 }}|{{ printf \"%T\" 0x10 }}",
            "aAéA|a\\nb|int|float64|int",
        ),
        (
            "{{ dict 1 2 true 3 nil 4 }}|{{ dict \"a\" }}|{{ list }}|{{ toJson (list) }}|{{ toJson nil }}|{{ toJson (rest (list)) }}",
            "map[1:2 <nil>:4 true:3]|map[a:]|[]|[]|null|null",
        ),
        (
            "{{ toPrettyJson (list) }}|{{ toPrettyJson (dict \"a\" (dict)) }}|{{ toJson \"\\u2028<>&\\x7f\\x01\" }}|{{ toJson 1.0 }}|{{ toJson 0.0000001 }}|{{ toJson 123456789012345678901234.0 }}",
            "[]|{\n  \"a\": {}\n}|\"\\u2028\\u003c\\u003e\\u0026\u{7f}\\u0001\"|1|1e-7|1.2345678901234569e+23",
        ),
        (
            "{{ upper \"ßé\" }}|{{ lower \"ÀÉ\" }}|{{ title \"élan vital ñ\" }}|{{ trim \"\\u00a0x\\u3000\" }}|{{ trimAll \"ab\" \"abxba\" }}",
            "ßÉ|àé|Élan Vital Ñ|x|x",
        ),
        (
            "{{ substr -1 2 \"hello\" }}|{{ substr 2 -1 \"hello\" }}|{{ substr 3 1 \"hello\" }}|{{ trunc -2 \"hello\" }}|{{ trunc -9 \"hello\" }}",
            "{{ substr -1 2 \"hello\" }}|{{ substr 2 -1 \"hello\" }}|{{ substr 3 1 \"hello\" }}|{{ trunc -2 \"hello\" }}|{{ trunc -9 \"hello\" }}",
        ),
        (
            "{{ splitList \"\" \"aé\" }}|{{ split \"\" \"ab\" }}|{{ join \",\" (list) }}|{{ join \",\" \"ab\" }}|{{ join \",\" nil }}|{{ join \",\" (dict \"a\" 1) }}",
            "[a é]|map[_0:a _1:b]||ab||map[a:1]",
        ),
        (
            "{{ sortAlpha \"b\" }}|{{ sortAlpha nil }}|{{ toStrings \"a\" }}|{{ toStrings nil }}|{{ toStrings (dict) }}",
            "[b]|[<nil>]|[a]|[]|[map[]]",
        ),
        (
            "{{ empty (dict) }}|{{ empty 0.0 }}|{{ empty false }}|{{ coalesce }}|{{ default 1 }}|{{ ternary 1 2 false }}",
            "true|true|true|<no value>|1|2",
        ),
        (
            "{{ int \"0x10\" }}|{{ int64 \"-5\" }}|{{ float64 \"0x1p-2\" }}|{{ float64 \"1_0\" }}|{{ atoi \"+7\" }}|{{ int true }}|{{ add1 1.9 }}|{{ int 1e30 }}",
            "0|-5|0.25|10|7|1|2|-9223372036854775808",
        ),
        (
            "{{ dig \"a\" \"b\" \"d\" (dict \"a\" (dict \"b\" 1)) }}|{{ dig \"x\" \"d\" (dict) }}",
            "1|d",
        ),
        (
            "{{ concat }}|{{ concat (list) }}|{{ has nil (list nil) }}|{{ without (list 1 nil) nil }}|{{ uniq (list nil nil) }}",
            "[]|[]|true|[1]|[<nil>]",
        ),
        (
            "{{ repeat 0 \"x\" }}|{{ indent 0 \"a\" }}|{{ nindent 0 \"\" }}|{{ replace \"a\" \"\" \"banana\" }}|{{ plural \"a\" \"b\" 1 }}",
            "|a|\n|bnn|a",
        ),
        (
            "{{ base \"\" }}|{{ base \"/\" }}|{{ base \"a/\" }}|{{ dir \"\" }}|{{ dir \"a\" }}|{{ dir \"/a/\" }}|{{ clean \"/../a/./b//\" }}|{{ clean \"../../a\" }}|{{ ext \".x\" }}|{{ ext \"a/b\" }}",
            ".|/|a|.|.|/a|/a/b|../../a|.x|",
        ),
        (
            "{{ b64enc \"\" }}|{{ b64dec \"\" }}|{{ b64dec \"aGk\" }}|{{ b64dec \"aG==\" }}|{{ b64dec \"a===\" }}|{{ b64dec \"aGk=\\naGk=\" }}|{{ b64dec \"aGk=x\" }}",
            "||illegal base64 data at input byte 0|h|illegal base64 data at input byte 1|illegal base64 data at input byte 5|illegal base64 data at input byte 4",
        ),
        (
            "{{ cat }}|{{ quote }}|{{ squote nil }}|{{ cat (list 1) (dict \"a\" 1) }}",
            "|||[1] map[a:1]",
        ),
        (
            "{{ define \"a\" }}A{{ . }}{{ end }}{{ template \"a\" 1 }}{{ template \"a\" }}|{{ block \"b\" 2 }}B{{ . }}{{ end }}",
            "A1A<no value>|B2",
        ),
        (
            "{{ range 3 }}{{ . }}{{ else }}e{{ end }}|{{ range 0 }}x{{ else }}e{{ end }}|{{ range -1 }}x{{ else }}e{{ end }}",
            "012|e|e",
        ),
        (
            "{{ len \"héllo\" }}|{{ index \"héllo\" 1 }}|{{ printf \"%c\" (index \"abc\" 0) }}|{{ printf \"%T\" (index \"abc\" 0) }}|{{ eq (index \"abc\" 0) 97 }}",
            "6|195|a|uint8|true",
        ),
    ];
    for (text, want) in cases {
        let got = render(text, &dot).unwrap_or_else(|_| (*text).to_owned());
        assert_eq!(&got, want, "{text}");
    }
}

/// Found by the differential run once the generator produced `block`, `chunk` and empty
/// regular expressions; expected values are Go's.
#[test]
fn definitions_chunks_and_empty_regex_matches_as_go() {
    // Two non-empty definitions of one name do not parse; an empty one gives way.
    assert!(parse_fails(
        "{{ block \"b\" . }}x{{ end }}{{ block \"b\" . }}y{{ end }}"
    ));
    assert_eq!(
        r("{{ define \"b\" }} {{ end }}{{ block \"b\" .Mode }}[{{ . }}]{{ end }}"),
        "[backup]"
    );
    // chunk of an empty list is an empty list.
    assert_eq!(
        r("{{ chunk 2 .Application.spec.empty }}|{{ chunk 2 (list 1 2 3) }}"),
        "[]|[[1 2] [3]]"
    );
    // slim-sprig's float arithmetic for the chunk count: some negative sizes give no chunk.
    assert_eq!(
        r("{{ chunk -1 (list 1 2) }}|{{ chunk -2 (list 1 2 3) }}"),
        "[]|[]"
    );
    assert!(fails("{{ chunk 0 (list 1 2) }}"));
    assert!(fails("{{ chunk -1 (list 1 2 3) }}"));
    // An empty match never splits a character.
    assert_eq!(r("{{ regexReplaceAll \"\" \"ünï\" \"-\" }}"), "-ü-n-ï-");
    assert_eq!(r("{{ regexFindAll \"\" \"é\" -1 }}"), "[ ]");
}

/// Regular expressions are Go's RE2 syntax (found by the differential run: `{` and `[` that Go
/// reads as literals, `\u` that Go refuses); expected values are Go's answers.
#[test]
fn regular_expressions_in_gos_syntax() {
    let dot = Value::from_json(&json!({"Mode": "backup"}));
    let cases: &[(&str, &str)] = &[
        (
            "{{ typeIs \"<&>\" (float64 .Mode) }}-{{ mustRegexMatch (squote 2 (dict \"alice\" (dict \"password\" \"p@ss\") \"bob\" (dict))) .Mode }}",
            "false-false",
        ),
        (
            "{{ regexReplaceAll (toPrettyJson (dict \"app\" \"db\")) (default \"x\") \"y\" }}",
            "x",
        ),
        (
            "{{ regexReplaceAll \"\\\\u003C\" \"a<b\" \"-\" }}|{{ regexMatch \"\\\\u003C\" \"<\" }}",
            "{{ regexReplaceAll \"\\\\u003C\" \"a<b\" \"-\" }}|{{ regexMatch \"\\\\u003C\" \"<\" }}",
        ),
        (
            "{{ regexReplaceAll \"\\\\d+\" \"a12٣b\" \"#\" }}|{{ regexReplaceAll \"\\\\w\" \"aé_1\" \"#\" }}|{{ regexReplaceAll \"\\\\s\" \"a b\\u00a0c\" \"#\" }}|{{ regexReplaceAll \"\\\\bé\" \"é x\" \"#\" }}",
            "a#٣b|#é##|a#b c|é x",
        ),
        (
            "{{ regexReplaceAll \"a{2}\" \"aaa\" \"#\" }}|{{ regexReplaceAll \"a{,2}\" \"a{,2}\" \"#\" }}|{{ regexReplaceAll \"{\" \"{x}\" \"#\" }}|{{ regexReplaceAll \"x}\" \"{x}\" \"#\" }}|{{ regexReplaceAll \"a{2,}\" \"aaaa\" \"#\" }}",
            "#a|#|#x}|{#|#",
        ),
        (
            "{{ regexReplaceAll \"[[a]\" \"[a\" \"#\" }}|{{ regexReplaceAll \"[a&&b]\" \"a&b\" \"#\" }}|{{ regexReplaceAll \"[~]\" \"~\" \"#\" }}|{{ regexReplaceAll \"[[:digit:]]\" \"a1\" \"#\" }}|{{ regexReplaceAll \"[\\\\d]\" \"a1\" \"#\" }}|{{ regexReplaceAll \"[^\\\\D]\" \"a1\" \"#\" }}",
            "##|###|#|a#|a#|a#",
        ),
        (
            "{{ regexReplaceAll \"\\\\<\" \"<a>\" \"#\" }}|{{ regexReplaceAll \"\\\\.\" \"a.b\" \"#\" }}|{{ regexReplaceAll \"\\\\/\" \"a/b\" \"#\" }}|{{ regexReplaceAll \"\\\\Qa.b\\\\E\" \"a.bxaxb\" \"#\" }}",
            "#a>|a#b|a#b|#xaxb",
        ),
        (
            "{{ regexMatch \"(?x)a\" \"a\" }}|{{ regexMatch \"(?i)A\" \"a\" }}|{{ regexMatch \"(?P<n>a)\" \"a\" }}|{{ regexMatch \"\\\\1\" \"a\" }}|{{ regexMatch \"\\\\012\" \"\\n\" }}|{{ regexMatch \"\\\\x41\" \"A\" }}|{{ regexMatch \"\\\\x{41}\" \"A\" }}",
            "false|true|true|false|true|true|true",
        ),
        (
            "{{ regexReplaceAll \"(a)(b)\" \"ab\" \"$2$1\" }}|{{ regexReplaceAll \"(?P<x>a)\" \"ab\" \"${x}!\" }}|{{ regexReplaceAll \"a\" \"a\" \"$1x\" }}|{{ regexSplit \"[,;]\" \"a,b;c\" -1 }}",
            "ba|a!b||[a b c]",
        ),
        (
            "{{ regexMatch \"\\\\pL\" \"é\" }}|{{ regexMatch \"\\\\p{Greek}\" \"α\" }}|{{ regexMatch \"a|\" \"\" }}|{{ regexMatch \"x*\" \"\" }}|{{ regexMatch \"\\\\z\" \"\" }}|{{ regexMatch \"\\\\Z\" \"\" }}|{{ regexMatch \"(?=a)\" \"a\" }}",
            "true|true|true|true|true|false|false",
        ),
        (
            "{{ regexFind \"[a-\" \"x\" }}|{{ regexMatch \"[]a]\" \"]\" }}|{{ regexMatch \"[^]a]\" \"b\" }}|{{ regexMatch \"a{1001}\" \"a\" }}|{{ regexMatch \"\\\\e\" \"a\" }}",
            "{{ regexFind \"[a-\" \"x\" }}|{{ regexMatch \"[]a]\" \"]\" }}|{{ regexMatch \"[^]a]\" \"b\" }}|{{ regexMatch \"a{1001}\" \"a\" }}|{{ regexMatch \"\\\\e\" \"a\" }}",
        ),
    ];
    for (text, want) in cases {
        let got = render(text, &dot).unwrap_or_else(|_| (*text).to_owned());
        assert_eq!(&got, want, "{text}");
    }
}

/// slim-sprig's `duration` (seconds as an `int64` or a decimal string; anything else is 0) and
/// `durationRound`; expected values are Go's.
#[test]
fn durations_as_go() {
    assert_eq!(
        r(
            "{{ duration \"90\" }}|{{ duration 90 }}|{{ duration (int64 3600) }}|{{ duration \"-1\" }}|{{ duration \"1.5\" }}"
        ),
        "1m30s|0s|1h0m0s|-1s|0s"
    );
    // An out-of-range string saturates, then the multiplication wraps as Go's int64 does.
    assert_eq!(r("{{ duration \"99999999999999999999\" }}"), "-1s");
    assert_eq!(
        r(
            "{{ durationRound \"2h30m\" }}|{{ durationRound \"-49h\" }}|{{ durationRound \"1s\" }}|{{ durationRound \"bad\" }}|{{ durationRound 5 }}|{{ durationRound (int64 61000000000) }}"
        ),
        "2h|2d|0s|0s|0s|1m"
    );
}

/// The functions that would read the controller's environment or make network lookups are not
/// offered: a template that calls one does not parse, and so is used as written.
#[test]
fn environment_and_network_functions_are_not_offered() {
    for text in [
        "{{ env \"HOME\" }}",
        "{{ expandenv \"$HOME\" }}",
        "{{ getHostByName \"localhost\" }}",
    ] {
        assert!(parse_fails(text), "{text}");
    }
}

/// `chunk` returns a `[][]interface {}`, as slim-sprig's does.
#[test]
fn chunk_type_as_go() {
    assert_eq!(
        r("{{ typeOf (chunk 2 (list 1 2 3)) }}|{{ kindOf (chunk 2 (list 1)) }}"),
        "[][]interface {}|slice"
    );
}

/// slim-sprig's date functions on fixed times; expected values are Go's (local zone UTC).
#[test]
fn dates_as_go() {
    let cases = [
        (
            "{{ toDate \"2006-01-02\" \"2024-02-29\" }}",
            "2024-02-29 00:00:00 +0000 UTC",
        ),
        (
            "{{ toDate \"2006-01-02\" \"2023-02-29\" }}",
            "0001-01-01 00:00:00 +0000 UTC",
        ),
        (
            "{{ toDate \"2006-01-02T15:04:05Z07:00\" \"2024-03-10T01:02:03.5+02:00\" }}",
            "2024-03-10 01:02:03.5 +0200 +0200",
        ),
        (
            "{{ toDate \"2006-01-02 15:04 MST\" \"2024-03-10 01:02 CEST\" | unixEpoch }}",
            "1710032520",
        ),
        (
            "{{ dateInZone \"Mon Jan _2 15:04:05 MST 2006\" (toDate \"2006-01-02\" \"2024-07-04\") \"Europe/Berlin\" }}",
            "Thu Jul  4 02:00:00 CEST 2024",
        ),
        (
            "{{ dateInZone \"2006-01-02T15:04:05.000Z07:00 PM __2\" (toDate \"2006-01-02\" \"2024-07-04\") \"America/Sao_Paulo\" }}",
            "2024-07-03T21:00:00.000-03:00 PM 185",
        ),
        ("{{ date \"02/01/06 3pm\" 86399 }}", "01/01/70 11pm"),
        (
            "{{ htmlDateInZone (int64 0) \"Nowhere/Else\" }}",
            "1970-01-01",
        ),
        (
            "{{ toDate \"2006-01-02\" \"2024-01-31\" | dateModify \"-1.5h\" }}",
            "2024-01-30 22:30:00 +0000 UTC",
        ),
        (
            "{{ toDate \"2006-01-02\" \"2024-01-31\" | dateModify \"bad\" | htmlDate }}",
            "2024-01-31",
        ),
        ("{{ typeOf (toDate \"2006\" \"2024\") }}", "time.Time"),
        // Found by the differential run: numeric zone abbreviations, two-digit negative years.
        (
            "{{ dateInZone \"2006-01-02 15:04:05.000 -0700 MST\" -86400 \"America/Sao_Paulo\" }}",
            "1969-12-30 21:00:00.000 -0300 -03",
        ),
        (
            "{{ date_in_zone \"Monday, 02-Jan-06 15:04:05 MST\" (int64 1709999999) \"Australia/Lord_Howe\" }}",
            "Sunday, 10-Mar-24 02:59:59 +11",
        ),
        (
            "{{ dateInZone \"060102150405\" (toDate \"15:04:05,999 Z07\" \"01:02:03,12 Z\" | dateModify \"-24h\") \"Nowhere/Else\" }}",
            "011231010203",
        ),
        (
            "{{ dateInZone \"Mon Jan _2 15:04:05 MST 2006 -0700\" (toDate \"2006\" \"0001\") \"Europe/Berlin\" }}",
            "Mon Jan  1 00:53:28 LMT 0001 +0053",
        ),
        (
            "{{ toDate \"2006-01-02 15:04 MST\" \"2024-03-10 01:02 CEST\" }}|{{ toJson (toDate \"2006\" \"2024\") }}",
            "2024-03-10 01:02:00 +0000 CEST|\"2024-01-01T00:00:00Z\"",
        ),
    ];
    for (text, want) in cases {
        assert_eq!(r(text), want, "{text}");
    }
    assert!(fails("{{ mustToDate \"2006\" \"x\" }}"));
    assert!(fails(
        "{{ mustDateModify \"1d\" (toDate \"2006\" \"2024\") }}"
    ));
    assert!(fails("{{ dateModify \"1h\" \"2024\" }}"));
}

/// The clock and the random source: only the shape of the result is fixed.
#[test]
fn clock_and_random_shapes() {
    let year = chrono::Utc::now().format("%Y").to_string();
    assert_eq!(r("{{ now | date \"2006\" }}"), year);
    assert!(r("{{ now }}").contains(" +0000 UTC m=+"));
    assert_eq!(r("{{ ago now }}"), "0s");
    assert_eq!(r("{{ typeOf now }}"), "time.Time");
    for _ in 0..50 {
        let n: i64 = r("{{ randInt 3 7 }}").parse().unwrap_or(-1);
        assert!((3..7).contains(&n), "{n}");
    }
    assert!(fails("{{ randInt 3 3 }}"));
}

/// slim-sprig's `urlParse` and `urlJoin` with Go's `net/url`; expected values are Go's.
#[test]
fn urls_as_go() {
    assert_eq!(
        r("{{ urlParse \"https://user:p%40ss@Example.com:8443/a%2Fb/c d?x=1&y=%zz#frag%20x\" }}"),
        "map[fragment:frag x host:Example.com:8443 hostname:Example.com opaque: path:/a/b/c d query:x=1&y=%zz scheme:https userinfo:user:p%40ss]"
    );
    assert_eq!(
        r(
            "{{ urlParse \"mailto:joe@example.com\" }}|{{ urlParse \"/rel/path?q\" }}|{{ urlParse \"//host/p\" }}"
        ),
        "map[fragment: host: hostname: opaque:joe@example.com path: query: scheme:mailto userinfo:]|map[fragment: host: hostname: opaque: path:/rel/path query:q scheme: userinfo:]|map[fragment: host:host hostname:host opaque: path:/p query: scheme: userinfo:]"
    );
    assert_eq!(
        r(
            "{{ urlParse \"http://[fe80::1%25en0]:80/x\" }}|{{ urlParse \"s3://bucket/prefix/\" }}|{{ urlParse \"file:///etc/x\" }}"
        ),
        "map[fragment: host:[fe80::1%en0]:80 hostname:fe80::1%en0 opaque: path:/x query: scheme:http userinfo:]|map[fragment: host:bucket hostname:bucket opaque: path:/prefix/ query: scheme:s3 userinfo:]|map[fragment: host: hostname: opaque: path:/etc/x query: scheme:file userinfo:]"
    );
    assert_eq!(
        r(
            "{{ urlJoin (dict \"scheme\" \"https\" \"host\" \"h.example\" \"path\" \"/a b/ü\" \"query\" \"x=1\" \"fragment\" \"f g\" \"userinfo\" \"u:p@ss\") }}"
        ),
        "https://u:p%40ss@h.example/a%20b/%C3%BC?x=1#f%20g"
    );
    assert_eq!(
        r(
            "{{ urlJoin (dict \"path\" \"a:b\") }}|{{ urlJoin (dict \"scheme\" \"s3\" \"opaque\" \"x/y\") }}|{{ urlJoin (dict) }}|{{ urlJoin (dict \"host\" \"h\" \"path\" \"p\") }}"
        ),
        "./a:b|s3:x/y||//h/p"
    );
    assert!(fails(
        "{{ urlParse \"http://a:b:c/\" }}|{{ urlParse \"foo://a:b:c/\" }}"
    ));
    assert!(fails("{{ urlParse \"http://a b/\" }}"));
    assert!(fails("{{ urlParse \":x\" }}"));
    assert_eq!(
        r("{{ urlParse \"a:b/c:d\" }}"),
        "map[fragment: host: hostname: opaque:b/c:d path: query: scheme:a userinfo:]"
    );
    assert_eq!(
        r("{{ urlParse \"x:y/%zz\" }}"),
        "map[fragment: host: hostname: opaque:y/%zz path: query: scheme:x userinfo:]"
    );
    assert!(fails("{{ urlParse \"http://[1.2.3.4]/\" }}"));
    assert!(fails("{{ urlParse \"http://h:8a/\" }}"));
    assert!(fails("{{ urlJoin (dict \"host\" 3) }}"));
    assert_eq!(r("{{ urlJoin (dict \"userinfo\" \"a/b\") }}"), "");
    assert!(fails("{{ urlParse \"1x:y\" }}"));
    assert!(fails("{{ urlParse \"http://a%2Fb/\" }}"));
    assert!(fails("{{ urlParse \"http://%41/\" }}"));
}

/// A `time.Time` everywhere a template can put a value; expected values are Go's (`None`: Go
/// fails). Methods (`.Year`) are in `time_methods_as_go`.
#[test]
fn times_as_go_values() {
    let mut bad = 0;
    let mut check = |text: &str, want: Option<&str>| {
        let got = render(text, &ctx()).ok();
        if got.as_deref() != want {
            bad += 1;
            println!("DIFF {text}\n  go:   {want:?}\n  rust: {got:?}");
        }
    };
    check(
        "{{ eq (toDate \"2006-01-02\" \"2024-02-29\") (toDate \"2006-01-02\" \"2024-02-29\") }}",
        Some("true"),
    );
    check(
        "{{ eq (toDate \"2006-01-02\" \"2024-02-29\") (toDate \"2006\" \"x\") }}",
        Some("false"),
    );
    check("{{ ne (toDate \"2006-01-02\" \"2024-02-29\") 1 }}", None);
    check(
        "{{ lt (toDate \"2006-01-02\" \"2024-02-29\") (toDate \"2006-01-02\" \"2024-02-29\") }}",
        None,
    );
    check("{{ len (toDate \"2006-01-02\" \"2024-02-29\") }}", None);
    check("{{ if (toDate \"2006\" \"x\") }}y{{ end }}", Some("y"));
    check(
        "{{ printf \"%v|%s|%q|%x|%X|%10s\" (toDate \"2006-01-02\" \"2024-02-29\") (toDate \"2006-01-02\" \"2024-02-29\") (toDate \"2006-01-02\" \"2024-02-29\") (toDate \"2006-01-02\" \"2024-02-29\") (toDate \"2006-01-02\" \"2024-02-29\") (toDate \"2006-01-02\" \"2024-02-29\") }}",
        Some(
            "2024-02-29 00:00:00 +0000 UTC|2024-02-29 00:00:00 +0000 UTC|\"2024-02-29 00:00:00 +0000 UTC\"|323032342d30322d32392030303a30303a3030202b3030303020555443|323032342D30322D32392030303A30303A3030202B3030303020555443|2024-02-29 00:00:00 +0000 UTC",
        ),
    );
    check(
        "{{ print (toDate \"2006-01-02\" \"2024-02-29\") 1 (toDate \"2006-01-02\" \"2024-02-29\") }}",
        Some("2024-02-29 00:00:00 +0000 UTC 1 2024-02-29 00:00:00 +0000 UTC"),
    );
    check(
        "{{ toString (toDate \"2006-01-02\" \"2024-02-29\") }}",
        Some("2024-02-29 00:00:00 +0000 UTC"),
    );
    check(
        "{{ list (toDate \"2006-01-02\" \"2024-02-29\") (toDate \"2006\" \"x\") }}",
        Some("[2024-02-29 00:00:00 +0000 UTC 0001-01-01 00:00:00 +0000 UTC]"),
    );
    check(
        "{{ dict \"a\" (toDate \"2006-01-02\" \"2024-02-29\") }}",
        Some("map[a:2024-02-29 00:00:00 +0000 UTC]"),
    );
    check(
        "{{ empty (toDate \"2006-01-02\" \"2024-02-29\") }}|{{ empty (toDate \"2006\" \"x\") }}",
        Some("false|false"),
    );
    check(
        "{{ default \"d\" (toDate \"2006\" \"x\") }}",
        Some("0001-01-01 00:00:00 +0000 UTC"),
    );
    check(
        "{{ kindOf (toDate \"2006-01-02\" \"2024-02-29\") }}|{{ typeIs \"time.Time\" (toDate \"2006-01-02\" \"2024-02-29\") }}|{{ typeIsLike \"time.Time\" (toDate \"2006-01-02\" \"2024-02-29\") }}",
        Some("struct|true|true"),
    );
    check(
        "{{ cat (toDate \"2006-01-02\" \"2024-02-29\") \"x\" }}",
        Some("2024-02-29 00:00:00 +0000 UTC x"),
    );
    check(
        "{{ quote (toDate \"2006-01-02\" \"2024-02-29\") }}|{{ squote (toDate \"2006-01-02\" \"2024-02-29\") }}",
        Some("\"2024-02-29 00:00:00 +0000 UTC\"|'2024-02-29 00:00:00 +0000 UTC'"),
    );
    check(
        "{{ toJson (list (toDate \"2006-01-02\" \"2024-02-29\")) }}|{{ toPrettyJson (dict \"t\" (toDate \"2006-01-02\" \"2024-02-29\")) }}",
        Some("[\"2024-02-29T00:00:00Z\"]|{\n  \"t\": \"2024-02-29T00:00:00Z\"\n}"),
    );
    check(
        "{{ range (toDate \"2006-01-02\" \"2024-02-29\") }}x{{ end }}",
        None,
    );
    check(
        "{{ html (toDate \"2006-01-02\" \"2024-02-29\") }}|{{ js (toDate \"2006-01-02\" \"2024-02-29\") }}|{{ urlquery (toDate \"2006-01-02\" \"2024-02-29\") }}",
        Some(
            "2024-02-29 00:00:00 +0000 UTC|2024-02-29 00:00:00 +0000 UTC|2024-02-29+00%3A00%3A00+%2B0000+UTC",
        ),
    );
    check(
        "{{ deepEqual (toDate \"2006-01-02\" \"2024-02-29\") (toDate \"2006-01-02\" \"2024-02-29\") }}|{{ has (toDate \"2006-01-02\" \"2024-02-29\") (list (toDate \"2006-01-02\" \"2024-02-29\")) }}|{{ uniq (list (toDate \"2006-01-02\" \"2024-02-29\") (toDate \"2006-01-02\" \"2024-02-29\")) }}",
        Some("true|true|[2024-02-29 00:00:00 +0000 UTC]"),
    );
    check(
        "{{ durationRound (toDate \"2006-01-02\" \"2024-02-29\") | len | lt 0 }}",
        Some("true"),
    );
    check(
        "{{ coalesce (toDate \"2006\" \"x\") }}",
        Some("0001-01-01 00:00:00 +0000 UTC"),
    );
    check(
        "{{ toStrings (list (toDate \"2006-01-02\" \"2024-02-29\")) }}",
        Some("[2024-02-29 00:00:00 +0000 UTC]"),
    );
    check(
        "{{ join \",\" (list (toDate \"2006-01-02\" \"2024-02-29\") 1) }}",
        Some("2024-02-29 00:00:00 +0000 UTC,1"),
    );
    check(
        "{{ index (list (toDate \"2006-01-02\" \"2024-02-29\")) 0 }}",
        Some("2024-02-29 00:00:00 +0000 UTC"),
    );
    check(
        "{{ int (toDate \"2006-01-02\" \"2024-02-29\") }}|{{ float64 (toDate \"2006-01-02\" \"2024-02-29\") }}",
        Some("0|0"),
    );
    check("{{ trim (toDate \"2006-01-02\" \"2024-02-29\") }}", None);
    check(
        "{{ and (toDate \"2006-01-02\" \"2024-02-29\") 1 }}",
        Some("1"),
    );
    check("{{ mustToDate \"2006\" \"x\" }}", None);
    check(
        "{{ toJson (toDate \"2006\" \"0000\") }}",
        Some("\"0000-01-01T00:00:00Z\""),
    );
    check(
        "{{ printf \"%T %v\" (toDate \"2006-01-02\" \"2024-02-29\") (dateModify \"1ns\" (toDate \"2006-01-02\" \"2024-02-29\")) }}",
        Some("time.Time 2024-02-29 00:00:00.000000001 +0000 UTC"),
    );
    assert_eq!(bad, 0);
}

/// Go's `Local` and `UTC` are different locations: equal instants in them are not `==`.
#[test]
fn local_and_utc_times_differ_for_eq() {
    assert_eq!(
        r(
            "{{ eq (toDate \"2006\" \"2024\") (toDate \"2006Z07\" \"2024Z\") }}|{{ eq (toDate \"2006\" \"2024\") (toDate \"2006 MST\" \"2024 XYZ\") }}"
        ),
        "false|false"
    );
    assert_eq!(
        r(
            "{{ eq (toDate \"2006\" \"2024\") (toDate \"2006 MST\" \"2024 UTC\") }}|{{ eq (toDate \"2006\" \"2024\") (toDate \"2006-0700\" \"2024+0000\") }}"
        ),
        "false|true"
    );
    // `durationRound` of a time is the time since then.
    let years = r("{{ durationRound (toDate \"2006\" \"2000\") }}");
    assert!(years.ends_with('y') && years.len() == 3, "{years}");
}

/// The methods of `time.Time` a template calls (`(now).Format "2006"`, `$t.Unix`); expected
/// values are Go's.
#[test]
fn time_methods_as_go() {
    assert_eq!(
        r(
            "{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Year }}|{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Day }}|{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Hour }}|{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Minute }}|{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Second }}|{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").YearDay }}|{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Nanosecond }}"
        ),
        "2024|29|13|14|15|60|123000000"
    );
    assert_eq!(
        r(
            "{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Unix }}|{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").UnixMilli }}|{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").UnixMicro }}|{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").UnixNano }}|{{ (toDate \"2006\" \"x\").UnixNano }}|{{ typeOf (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Unix }}|{{ typeOf (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Year }}"
        ),
        "1709192655|1709192655123|1709192655123000|1709192655123000000|-6795364578871345152|int64|int"
    );
    assert_eq!(
        r(
            "{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Format \"Jan 2 2006 15:04 MST\" }}|{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").UTC }}|{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").UTC.Hour }}|{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Local }}|{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").String }}"
        ),
        "Feb 29 2024 13:14 +0530|2024-02-29 07:44:15.123 +0000 UTC|7|2024-02-29 07:44:15.123 +0000 UTC|2024-02-29 13:14:15.123 +0530 +0530"
    );
    assert_eq!(
        r(
            "{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").IsZero }}|{{ (toDate \"2006\" \"x\").IsZero }}|{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Equal (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").UTC }}|{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Before (toDate \"2006\" \"x\") }}|{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").After (toDate \"2006\" \"x\") }}|{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Compare (toDate \"2006\" \"x\") }}"
        ),
        "false|true|true|false|true|1"
    );
    assert_eq!(
        r(
            "{{ \"2006\" | (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Format }}"
        ),
        "2024"
    );
    assert!(
        fails(
            "{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Format }}"
        ),
        "{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Format }}"
    );
    assert!(
        fails(
            "{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Format 1 }}"
        ),
        "{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Format 1 }}"
    );
    assert!(
        fails(
            "{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Nope }}"
        ),
        "{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Nope }}"
    );
    assert!(
        fails(
            "{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Year 1 }}"
        ),
        "{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Year 1 }}"
    );
    assert_eq!(
        r(
            "{{ eq (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\") (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").UTC }}|{{ eq (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").UTC (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").UTC }}"
        ),
        "false|true"
    );
    assert_eq!(r("{{ (now).Format \"2006\" | len }}"), "4");
    assert_eq!(
        r(
            "{{ $t := (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\") }}{{ $t.Year }}"
        ),
        "2024"
    );
    assert_eq!(
        r(
            "{{ with (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\") }}{{ .Hour }}{{ end }}"
        ),
        "13"
    );
    assert!(
        fails(
            "{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Equal \"x\" }}"
        ),
        "{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Equal \"x\" }}"
    );
    assert!(
        fails(
            "{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Year.x }}"
        ),
        "{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Year.x }}"
    );
}

/// The methods of `time.Time` returning `time.Month`, `time.Weekday`, `time.Duration` or another
/// time, the methods of those types, and the methods with several results (an error in a
/// template); expected values and failures are Go's.
#[test]
fn time_methods_with_named_results_as_go() {
    assert_eq!(
        r("{{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Month }}"),
        "February"
    );
    assert_eq!(
        r(
            "{{ printf \"%d %v %s %q %x %f %#v\" (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Month (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Month (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Month (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Month (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Month (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Month (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Month }}"
        ),
        "2 February February \"February\" 4665627275617279 %!f(time.Month=2) 2"
    );
    assert_eq!(
        r(
            "{{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Weekday }} {{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Weekday.String }} {{ eq (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Month 2 }} {{ lt (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Weekday 5 }}"
        ),
        "Thursday Thursday true true"
    );
    assert!(fails(
        "{{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Date }}"
    ));
    assert!(fails(
        "{{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Clock }}"
    ));
    assert!(fails(
        "{{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").ISOWeek }}"
    ));
    assert!(fails(
        "{{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Zone }}"
    ));
    assert!(fails(
        "{{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").ZoneBounds }}"
    ));
    assert!(fails(
        "{{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Date 1 }}"
    ));
    assert_eq!(
        r(
            "{{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Sub (toDate \"2006-01-02\" \"2023-12-31\") }} {{ ((toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Sub (toDate \"2006-01-02\" \"2023-12-31\")).Hours }} {{ ((toDate \"2006-01-02\" \"2023-12-31\").Sub (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\")).Round 3600000000000 }} {{ printf \"%d %v\" ((toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Sub (toDate \"2006-01-02\" \"2023-12-31\")) ((toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Sub (toDate \"2006-01-02\" \"2023-12-31\")) }}"
        ),
        "1453h47m59s 1453.7997222222223 -1454h0m0s 5233679000000000 1453h47m59s"
    );
    assert!(fails(
        "{{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Add 90000000000 }} {{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Add ((toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Sub (toDate \"2006-01-02\" \"2023-12-31\")) }} {{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Add 1.5 }}"
    ));
    assert_eq!(
        r(
            "{{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").AddDate 1 0 0 }} {{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").AddDate 0 12 -29 }} {{ (toDate \"2006-01-02\" \"2023-12-31\").AddDate 0 2 0 }} {{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").AddDate -2024 0 0 }}"
        ),
        "2025-03-01 13:47:59 +0000 UTC 2025-01-31 13:47:59 +0000 UTC 2024-03-02 00:00:00 +0000 UTC 0000-02-29 13:47:59 +0000 UTC"
    );
    assert_eq!(
        r(
            "{{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Truncate 3600000000000 }} {{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Round 86400000000000 }} {{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Round 604800000000000 }} {{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Truncate -1 }}"
        ),
        "2024-02-29 13:00:00 +0000 UTC 2024-03-01 00:00:00 +0000 UTC 2024-03-04 00:00:00 +0000 UTC 2024-02-29 13:47:59 +0000 UTC"
    );
    assert!(fails(
        "{{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").IsDST }} {{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Month | printf \"%v\" }} {{ toJson (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Month }} {{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Month.Nope }}"
    ));
    assert_eq!(
        r(
            "{{ ((toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Sub (toDate \"2006-01-02\" \"2023-12-31\")).Minutes }} {{ ((toDate \"2006-01-02\" \"2023-12-31\").Sub (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\")).Seconds }} {{ ((toDate \"2006-01-02\" \"2023-12-31\").Sub (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\")).Abs }} {{ ((toDate \"2006-01-02\" \"2023-12-31\").Sub (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\")).Milliseconds }} {{ ((toDate \"2006-01-02\" \"2023-12-31\").Sub (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\")).Truncate 7 }}"
        ),
        "87227.98333333334 -5.233679e+06 1453h47m59s -5233679000 -1453h47m58.999999996s"
    );
    assert!(fails(
        "{{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Add (int64 5) }}"
    ));
    assert!(fails(
        "{{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").AddDate 0 (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Month 0 }}"
    ));
    assert_eq!(
        r(
            "{{ if (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Month }}y{{ end }} {{ (toDate \"2006\" \"x\").Weekday }} {{ (toDate \"2006\" \"x\").Round 7 }}"
        ),
        "y Monday 0001-01-01 00:00:00 +0000 UTC"
    );
}

/// `Location`, `In` and `GoString` of a `time.Time`; `*time.Location` prints its name (Go's
/// `Local` is named "UTC" when it is UTC). Expected values and failures are Go's.
#[test]
fn time_locations_as_go() {
    assert_eq!(
        r(
            "{{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Location }} {{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Location }}|{{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Location.String }}|{{ printf \"%s %q %v\" (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").UTC.Location (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Location (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Location }}"
        ),
        "UTC |UTC|UTC \"\" "
    );
    assert_eq!(
        r(
            "{{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").GoString }}|{{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").UTC.GoString }}|{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").GoString }}|{{ (toDate \"2006\" \"x\").GoString }}"
        ),
        "time.Date(2024, time.February, 29, 13, 47, 59, 0, time.Local)|time.Date(2024, time.February, 29, 13, 47, 59, 0, time.UTC)|time.Date(2024, time.February, 29, 13, 14, 15, 123000000, time.Location(\"\"))|time.Date(1, time.January, 1, 0, 0, 0, 0, time.UTC)"
    );
    assert_eq!(
        r(
            "{{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").In (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Location }}|{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").In (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Location }}|{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").In (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").UTC.Location }}|{{ (toDate \"2006-01-02T15:04:05.999Z07:00\" \"2024-02-29T13:14:15.123+05:30\").Location | (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").In }}"
        ),
        "2024-02-29 19:17:59 +0530 +0530|2024-02-29 07:44:15.123 +0000 UTC|2024-02-29 07:44:15.123 +0000 UTC|2024-02-29 19:17:59 +0530 +0530"
    );
    assert!(fails(
        "{{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").In \"UTC\" }}"
    ));
    assert!(fails(
        "{{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").In nil }}"
    ));
    assert_eq!(
        r("{{ toJson (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Location }}"),
        "{}"
    );
    assert!(fails(
        "{{ (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Location.Nope }}"
    ));
}

/// slim-sprig's conversions take `time.Month`, `time.Weekday` and `time.Duration` as the integers
/// they are; expected values are Go's.
#[test]
fn named_time_integers_in_sprig_as_go() {
    assert_eq!(
        r("{{ add (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Month 1 }}"),
        "3"
    );
    assert_eq!(
        r("{{ toString (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Month }}"),
        "February"
    );
    assert_eq!(
        r("{{ int (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Month }}"),
        "2"
    );
    assert_eq!(
        r(
            "{{ add (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Month 1 }}|{{ int (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Month }}|{{ float64 ((toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Sub (toDate \"2006-01-02\" \"2023-12-31\")) }}|{{ int64 ((toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Sub (toDate \"2006-01-02\" \"2023-12-31\")) }}|{{ max (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Month 1 }}|{{ toString ((toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Sub (toDate \"2006-01-02\" \"2023-12-31\")) }}|{{ mul (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Weekday 2 }}"
        ),
        "3|2|5.233679e+15|5233679000000000|2|1453h47m59s|8"
    );
    assert!(fails(
        "{{ atoi (toDate \"2006-01-02 15:04:05\" \"2024-02-29 13:47:59\").Month }}"
    ));
}

/// `AddDate` reaches years past chrono's range; they print as Go prints them. Expected values are
/// Go's.
#[test]
fn far_years_from_add_date_as_go() {
    assert_eq!(
        r("{{ (toDate \"_2006 1/2\" \"1:04pm\").AddDate 2147483648 1 1 }}"),
        "2147483649-02-02 00:00:00 +0000 UTC"
    );
    assert_eq!(
        r(
            "{{ (toDate \"2006-01-02T15:04:05.999999999Z07:00\" \"2024-03-10 01:02:03 -07:30:15\").AddDate 2147483648 -30 0 }}"
        ),
        "2147483646-07-01 00:00:00 +0000 UTC"
    );
    assert_eq!(
        r(
            "{{ ((toDate \"2006-01-02\" \"2024-02-29\").AddDate -2147483648 0 400).Format \"Mon Jan _2 2006 002 15:04:05\" }}|{{ ((toDate \"2006-01-02\" \"2024-02-29\").AddDate 300000 0 0).YearDay }}|{{ ((toDate \"2006-01-02\" \"2024-02-29\").AddDate 300000 0 0).Weekday }}|{{ ((toDate \"2006-01-02\" \"2024-02-29\").AddDate 0 0 2147483648).Month }}|{{ toJson ((toDate \"2006-01-02\" \"2024-02-29\").AddDate 300000 0 0) }}"
        ),
        "Mon Apr  4 -2147481623 094 00:00:00|60|Thursday|September|"
    );
}

/// Two deliberate deviations (docs/go-compatibility.md, "Documented deviations"): a time's
/// byte-slice methods and `eq` of two locations fail here, so the string is used as written.
/// Go prints the bytes of `MarshalJSON` as a list of numbers, which no object field wants, and
/// answers `eq` of locations by pointer identity, which depends on Go's zone caching.
#[test]
fn byte_slice_methods_and_location_identity_are_not_offered() {
    let t = "(toDate \"2006-01-02\" \"2024-02-29\")";
    for method in [
        "MarshalJSON",
        "MarshalText",
        "MarshalBinary",
        "GobEncode",
        "AppendFormat",
        "AppendText",
        "AppendBinary",
    ] {
        let text = format!("{{{{ {t}.{method} }}}}");
        assert!(fails(&text), "{text}");
    }
    let text = format!("{{{{ eq {t}.Location {t}.Location }}}}");
    assert!(fails(&text), "{text}");
}
