//! Strategy templates: Go `text/template` with slim-sprig's `FuncMap()` (what upstream's
//! renderer registers), against `drivers::template::render_string`. A string that fails to parse
//! or to execute is used as written on both sides (upstream's renderer returns the input on any
//! error), so an error answer of Go means "the text, unchanged".
//!
//! Cases are strings the way strategies write them (`s3://{{ .Parameters.bucket }}/…`, a
//! `default` with a `printf` fallback, `toJson` of a map) plus the nasty ones: nested pipelines,
//! `if`/`with`/`range` with `else`, `{{-`/`-}}` trimming, variables, missing keys
//! (`<no value>`), iteration over maps, `printf` verbs, integers and floats from JSON, wrong
//! arities and types, unknown functions and unclosed actions.

use serde_json::{Value as Json, json};

use crate::rng::Rng;
use crate::{Case, Verdict, go_error, size_of};

/// The render context of one case: an application as the API server returns it, the route's
/// parameters (a string map upstream), the release and the mode.
fn context(rng: &mut Rng) -> Json {
    let name = rng
        .pick(&["orders-db", "pg", "a<b>&c", "ünï", "x y"])
        .to_string();
    json!({
        "Application": {
            "apiVersion": "apps.cozystack.io/v1alpha1",
            "kind": "Postgres",
            "metadata": {
                "name": name,
                "namespace": "tenant-acme",
                "labels": {"app": "db", "tier": "gold", "z": ""},
                "annotations": {},
            },
            "spec": {
                "replicas": 2, "size": "10Gi", "storageClass": "", "enabled": true, "disabled": false,
                "ratio": 1.5, "whole": 3.0, "big": 9_007_199_254_740_993_u64, "neg": -4, "zero": 0,
                "tiny": 1e-7, "huge": 1e21, "fzero": 0.0,
                "users": {"alice": {"password": "p@ss"}, "bob": {}},
                "databases": ["app", "audit"], "empty": [], "nothing": null,
                "html": "<a href=\"x\">&amp;</a>", "multi": "l1\nl2", "spaces": "  pad  ",
                "b64": "aGVsbG8=", "path": "/var/lib/pg/data.tar.gz", "csv": "a,b,,c",
            },
        },
        "Parameters": {"bucket": "b1", "prefix": "pg/", "region": "", "endpoint": "https://s3.example:9000"},
        "Release": {"Name": name, "Namespace": "tenant-acme"},
        "Mode": rng.pick(&["backup", "restore"]).to_string(),
    })
}

const FIELDS: [&str; 44] = [
    ".Application.metadata.name",
    ".Application.metadata.namespace",
    ".Application.metadata.labels",
    ".Application.metadata.labels.app",
    ".Application.metadata.labels.absent",
    ".Application.metadata.annotations",
    ".Application.spec.replicas",
    ".Application.spec.size",
    ".Application.spec.storageClass",
    ".Application.spec.enabled",
    ".Application.spec.disabled",
    ".Application.spec.ratio",
    ".Application.spec.whole",
    ".Application.spec.big",
    ".Application.spec.neg",
    ".Application.spec.zero",
    ".Application.spec.tiny",
    ".Application.spec.huge",
    ".Application.spec.fzero",
    ".Application.spec.users",
    ".Application.spec.users.alice",
    ".Application.spec.users.alice.password",
    ".Application.spec.databases",
    ".Application.spec.empty",
    ".Application.spec.nothing",
    ".Application.spec.html",
    ".Application.spec.multi",
    ".Application.spec.spaces",
    ".Application.spec.b64",
    ".Application.spec.path",
    ".Application.spec.csv",
    ".Application.spec.absent",
    ".Application.spec.absent.deeper",
    ".Parameters",
    ".Parameters.bucket",
    ".Parameters.prefix",
    ".Parameters.region",
    ".Parameters.absent",
    ".Release.Name",
    ".Release.Namespace",
    ".Release.Absent",
    ".Mode",
    ".",
    "$",
];

const LITERALS: [&str; 22] = [
    "\"x\"",
    "\"\"",
    "\"a-b\"",
    "\"<&>\"",
    "\"%d\"",
    "\"/\"",
    "\",\"",
    "\"-\"",
    "\"ünï\"",
    "\"a\\tb\"",
    "`raw`",
    "3",
    "0",
    "-1",
    "1.5",
    "true",
    "false",
    "nil",
    "'a'",
    "1e3",
    "0x10",
    "2",
];

/// Functions and how many arguments they usually take (min, max); `go` ones are Go's builtins.
const FUNCS: &[(&str, usize, usize)] = &[
    // Go's builtins.
    ("printf", 1, 4),
    ("print", 0, 3),
    ("println", 0, 2),
    ("len", 1, 1),
    ("index", 1, 3),
    ("eq", 2, 3),
    ("ne", 2, 2),
    ("lt", 2, 2),
    ("le", 2, 2),
    ("gt", 2, 2),
    ("ge", 2, 2),
    ("and", 1, 3),
    ("or", 1, 3),
    ("not", 1, 1),
    ("html", 1, 2),
    ("js", 1, 1),
    ("urlquery", 1, 2),
    ("slice", 1, 3),
    // Sprig.
    ("default", 1, 2),
    ("empty", 1, 1),
    ("coalesce", 1, 3),
    ("ternary", 3, 3),
    ("quote", 1, 2),
    ("squote", 1, 2),
    ("upper", 1, 1),
    ("lower", 1, 1),
    ("title", 1, 1),
    ("trim", 1, 1),
    ("trimPrefix", 2, 2),
    ("trimSuffix", 2, 2),
    ("trimAll", 2, 2),
    ("trimall", 2, 2),
    ("replace", 3, 3),
    ("contains", 2, 2),
    ("hasPrefix", 2, 2),
    ("hasSuffix", 2, 2),
    ("toString", 1, 1),
    ("toJson", 1, 1),
    ("toPrettyJson", 1, 1),
    ("toRawJson", 1, 1),
    ("join", 2, 2),
    ("list", 0, 3),
    ("dict", 0, 4),
    ("b64enc", 1, 1),
    ("b64dec", 1, 1),
    ("b32enc", 1, 1),
    ("trunc", 2, 2),
    ("indent", 2, 2),
    ("nindent", 2, 2),
    ("splitList", 2, 2),
    ("split", 2, 2),
    ("sha256sum", 1, 1),
    ("sha1sum", 1, 1),
    ("int", 1, 1),
    ("int64", 1, 1),
    ("atoi", 1, 1),
    ("float64", 1, 1),
    ("add", 1, 3),
    ("add1", 1, 1),
    ("sub", 2, 2),
    ("mul", 1, 3),
    ("div", 2, 2),
    ("mod", 2, 2),
    ("max", 1, 3),
    ("min", 1, 3),
    ("hasKey", 2, 2),
    ("get", 2, 2),
    ("first", 1, 1),
    ("last", 1, 1),
    ("rest", 1, 1),
    ("initial", 1, 1),
    ("cat", 0, 3),
    ("repeat", 2, 2),
    ("substr", 3, 3),
    ("has", 2, 2),
    ("base", 1, 1),
    ("dir", 1, 1),
    ("ext", 1, 1),
    ("clean", 1, 1),
    ("typeOf", 1, 1),
    ("kindOf", 1, 1),
    ("required", 2, 2),
    ("fail", 1, 1),
    ("dig", 2, 4),
    ("uniq", 1, 1),
    ("compact", 1, 1),
    ("reverse", 1, 1),
    ("sortAlpha", 1, 1),
    ("regexMatch", 2, 2),
    ("regexReplaceAll", 3, 3),
    ("plural", 3, 3),
    ("until", 1, 1),
    ("concat", 1, 2),
    ("append", 2, 2),
    ("prepend", 2, 2),
    ("without", 2, 3),
    ("toStrings", 1, 1),
    ("all", 0, 3),
    ("any", 0, 3),
    ("deepEqual", 2, 2),
    ("nosuchfunc", 0, 1),
    // The rest of slim-sprig's deterministic map (not `keys`/`values`, whose order is Go's random
    // map order, nor `set`/`unset`, which change a map in place: both documented deviations).
    ("seq", 0, 3),
    ("chunk", 2, 2),
    ("pluck", 1, 3),
    ("pick", 1, 3),
    ("omit", 1, 3),
    ("regexFind", 2, 2),
    ("regexFindAll", 3, 3),
    ("regexSplit", 3, 3),
    ("regexReplaceAllLiteral", 3, 3),
    ("regexQuoteMeta", 1, 1),
    ("mustRegexMatch", 2, 2),
    ("b32dec", 1, 1),
    ("fromJson", 1, 1),
    ("mustFromJson", 1, 1),
    ("mustToJson", 1, 1),
    ("round", 2, 3),
    ("ceil", 1, 1),
    ("floor", 1, 1),
    ("maxf", 1, 3),
    ("minf", 1, 3),
    ("biggest", 1, 3),
    ("untilStep", 3, 3),
    ("splitn", 3, 3),
    ("typeIs", 2, 2),
    ("typeIsLike", 2, 2),
    ("kindIs", 2, 2),
    ("adler32sum", 1, 1),
    ("toDecimal", 1, 1),
    ("tuple", 0, 3),
    ("mustFirst", 1, 1),
    ("mustLast", 1, 1),
    ("mustRest", 1, 1),
    ("mustInitial", 1, 1),
    ("mustAppend", 2, 2),
    ("mustPrepend", 2, 2),
    ("mustReverse", 1, 1),
    ("mustUniq", 1, 1),
    ("mustWithout", 2, 3),
    ("mustHas", 2, 2),
    ("mustSlice", 1, 3),
    ("mustCompact", 1, 1),
    ("mustChunk", 2, 2),
    ("isAbs", 1, 1),
    ("osBase", 1, 1),
    ("hello", 0, 0),
    ("call", 1, 2),
    ("duration", 1, 1),
    ("durationRound", 1, 1),
    ("toDate", 2, 2),
    ("mustToDate", 2, 2),
    ("date", 2, 2),
    ("dateInZone", 3, 3),
    ("date_in_zone", 3, 3),
    ("htmlDate", 1, 1),
    ("htmlDateInZone", 2, 2),
    ("unixEpoch", 1, 1),
    ("dateModify", 2, 2),
    ("mustDateModify", 2, 2),
    ("urlParse", 1, 1),
    ("urlJoin", 1, 1),
];

/// URLs for `urlParse`: real-looking ones and nasty ones (escapes, IPv6 zones, colons, opaque
/// forms, control characters, bad ports).
const URLS: &[&str] = &[
    "\"https://s3.eu-central-1.amazonaws.com/bucket/prefix/?versionId=3&x=%zz#top\"",
    "\"s3://backups/cozy/ns-1/app?region=eu\"",
    "\"https://user:p%40ss@Example.COM:8443/a%2Fb/c%20d;p?q=a+b#frag%20x\"",
    "\"HTTP://h/ü/%C3%BC\"",
    "\"mailto:ops@example.com\"",
    "\"file:///var/lib/x\"",
    "\"//host.only/p\"",
    "\"///triple/slash\"",
    "\"/rel/path?\"",
    "\"rel/a:b\"",
    "\"a:b/c:d\"",
    "\"1x:y\"",
    "\":nothing\"",
    "\"*\"",
    "\"\"",
    "\"?only=query\"",
    "\"#only-fragment\"",
    "\"http://[fe80::1%25en0]:80/x\"",
    "\"http://[::1]/\"",
    "\"http://[1.2.3.4]/\"",
    "\"http://[::1/\"",
    "\"http://h[::1]/\"",
    "\"http://a:b:c/\"",
    "\"foo://a:b:c/\"",
    "\"http://h:8a/\"",
    "\"http://h:/\"",
    "\"http://a b/\"",
    "\"http://%41/\"",
    "\"http://a%2Fb/\"",
    "\"http://a%25b/\"",
    "\"http://u@s@h/\"",
    "\"http://u/s@h/\"",
    "\"http://u s@h/\"",
    "\"x:y/%zz\"",
    "\"http://h/%zz\"",
    "\"http://h/p#%zz\"",
    "\"http://h/\\tx\"",
    "\"http://h/a?b?c#d#e\"",
    "\"HtTpS://H/P/../Q/./R\"",
    "\"http://h/a%2fb%2F\"",
    ".Parameters.endpoint",
    ".Application.spec.path",
];

/// Dictionaries for `urlJoin`.
const URL_DICTS: &[&str] = &[
    "(dict \"scheme\" \"https\" \"host\" \"h.example:8443\" \"path\" \"/a b/ü\" \"query\" \"x=1\" \"fragment\" \"f g\" \"userinfo\" \"u:p@ss\")",
    "(dict \"path\" \"a:b\")",
    "(dict \"path\" \"a/b:c\")",
    "(dict \"scheme\" \"s3\" \"opaque\" \"x/y\" \"path\" \"/ignored\")",
    "(dict)",
    "(dict \"host\" \"h\" \"path\" \"p\")",
    "(dict \"host\" \"[fe80::1%en0]:80\" \"scheme\" \"http\")",
    "(dict \"host\" \"a b\" \"userinfo\" \"u\")",
    "(dict \"userinfo\" \"a/b\" \"host\" \"h\")",
    "(dict \"userinfo\" \"a b\" \"host\" \"h\")",
    "(dict \"userinfo\" \"user:\" \"host\" \"h\")",
    "(dict \"host\" 3)",
    "(dict \"path\" nil)",
    "(dict \"query\" \"\" \"fragment\" \"#?\" \"path\" \"*\")",
    "(dict \"scheme\" \"HTTP\" \"path\" \"%zz\")",
];

/// `urlParse`/`urlJoin` with URL-shaped arguments (or none, 20% of the time).
fn url_call(rng: &mut Rng, name: &str) -> Option<String> {
    if !matches!(name, "urlParse" | "urlJoin") || !rng.chance(80) {
        return None;
    }
    let parsed = format!("(urlParse {})", rng.pick_str(URLS));
    Some(match (name, rng.below(4)) {
        ("urlParse", 0) => format!("(urlParse {}).hostname", rng.pick_str(URLS)),
        ("urlParse", _) => format!("urlParse {}", rng.pick_str(URLS)),
        (_, 0 | 1) => format!("urlJoin {parsed}"),
        _ => format!("urlJoin {}", rng.pick_str(URL_DICTS)),
    })
}

const DATE_FUNCS: &[&str] = &[
    "toDate",
    "mustToDate",
    "date",
    "dateInZone",
    "date_in_zone",
    "htmlDate",
    "htmlDateInZone",
    "unixEpoch",
    "dateModify",
    "mustDateModify",
];

/// Go reference layouts (and layouts with odd corners) for `toDate` and `date`.
const LAYOUTS: &[&str] = &[
    "\"2006-01-02\"",
    "\"2006-01-02T15:04:05Z07:00\"",
    "\"2006-01-02T15:04:05.999999999Z07:00\"",
    "\"2006-01-02 15:04:05.000 -0700 MST\"",
    "\"Mon Jan _2 15:04:05 MST 2006\"",
    "\"Monday, 02-Jan-06 15:04:05 MST\"",
    "\"02 Jan 06 15:04 -0700\"",
    "\"January 2, 2006 3:04:05 PM\"",
    "\"3:04pm\"",
    "\"2006-002 __2\"",
    "\"_2006 1/2\"",
    "\"15:04:05,999 Z07\"",
    "\"060102150405\"",
    "\"2006-01-02 15:04:05 -07:00:00\"",
    "\"Jan 2 2006 Z070000\"",
    "\"Janx 2006\"",
    "\"\"",
    "\"unix\"",
];

/// Values for `toDate`: matching one of `LAYOUTS` or not.
const DATE_VALUES: &[&str] = &[
    "\"2024-02-29\"",
    "\"2023-02-29\"",
    "\"2024-13-01\"",
    "\"1999-12-31\"",
    "\"0001-01-01\"",
    "\"2024-03-10T01:02:03Z\"",
    "\"2024-03-10T01:02:03.123456789+05:30\"",
    "\"2024-03-10T01:02:03.5-03:00\"",
    "\"2024-03-10T25:02:03Z\"",
    "\"2024-03-10 01:02:03.000 +0100 CET\"",
    "\"2024-03-10 01:02:03.000 +0000 UTC\"",
    "\"2024-03-10 01:02:03.000 +0000 GMT\"",
    "\"Sun Mar 10 01:02:03 UTC 2024\"",
    "\"Sun Mar  3 01:02:03 CEST 2024\"",
    "\"Sun Mar 10 01:02:03 GMT+3 2024\"",
    "\"sunday, 10-mar-24 01:02:03 PST\"",
    "\"10 Mar 24 13:04 -0700\"",
    "\"March 10, 2024 1:04:05 PM\"",
    "\"march 10, 2024 12:04:05 am\"",
    "\"1:04pm\"",
    "\"13:04pm\"",
    "\"2024-060 _60\"",
    "\"2024-366  1\"",
    "\"_2024 2/29\"",
    "\"01:02:03,12 Z\"",
    "\"01:02:03 +05\"",
    "\"240310010203\"",
    "\"2024-03-10 01:02:03 -07:30:15\"",
    "\"Mar 10 2024 +013015\"",
    "\"\"",
    "\"x\"",
    "\"2024-03-10 \"",
];

/// Zones for `dateInZone` (one that does not exist is UTC).
const ZONES: &[&str] = &[
    "\"UTC\"",
    "\"\"",
    "\"Local\"",
    "\"Europe/Berlin\"",
    "\"America/Sao_Paulo\"",
    "\"Asia/Kolkata\"",
    "\"Australia/Lord_Howe\"",
    "\"Nowhere/Else\"",
];

/// Durations for `dateModify`.
const MODIFY: &[&str] = &[
    "\"1h\"",
    "\"-24h\"",
    "\"1.5h30m\"",
    "\"-0.000000001s\"",
    "\"8760h\"",
    "\"1d\"",
    "\"\"",
];

/// A time for the date functions: from `toDate`, Unix seconds, or (for `unixEpoch` and
/// `dateModify`) something that is not a time.
fn date_time(rng: &mut Rng) -> String {
    match rng.below(8) {
        0 => format!(
            "(int64 {})",
            rng.pick_str(&["0", "-1", "1709999999", "253402300799"])
        ),
        1 => rng.pick_str(&["86399", "-86400", "1234567890"]).to_owned(),
        2 => format!(
            "(toDate {} {} | dateModify {})",
            rng.pick_str(LAYOUTS),
            rng.pick_str(DATE_VALUES),
            rng.pick_str(MODIFY)
        ),
        _ => format!(
            "(toDate {} {})",
            rng.pick_str(LAYOUTS),
            rng.pick_str(DATE_VALUES)
        ),
    }
}

/// Years, months or days for `AddDate`.
const DATE_DELTAS: &[&str] = &["0", "1", "-1", "13", "-30", "400", "2147483648"];

/// `time.Duration` arguments of the methods of `time.Time` (an integer literal converts).
const DURATION_LITERALS: &[&str] = &[
    "0",
    "1",
    "-1",
    "1000000000",
    "3600000000000",
    "86400000000000",
    "-90000000000",
    "9223372036854775807",
    "-9223372036854775808",
    "1.5",
    "\"1h\"",
];

/// The date functions' arguments; `date`-like functions always get a time or Unix seconds
/// (anything else is the current time, which differs between the two runs).
fn date_call(rng: &mut Rng, name: &str) -> Option<String> {
    if !DATE_FUNCS.contains(&name) {
        return None;
    }
    let forced = matches!(
        name,
        "date" | "dateInZone" | "date_in_zone" | "htmlDate" | "htmlDateInZone"
    );
    if !forced && !rng.chance(80) {
        return None;
    }
    let mut t = date_time(rng);
    if !forced && matches!(name, "unixEpoch" | "dateModify" | "mustDateModify") {
        t = t.replace("(int64 0)", "(toDate \"2006\" \"2024\")");
    }
    Some(match name {
        "toDate" if rng.chance(30) => {
            let method = match rng.pick_str(&[
                "Format",
                "Unix",
                "UnixNano",
                "Year",
                "YearDay",
                "Hour",
                "Nanosecond",
                "IsZero",
                "UTC",
                "Local",
                "String",
                "Before",
                "Nope",
                "Month",
                "Weekday",
                "IsDST",
                "Date",
                "Clock",
                "ISOWeek",
                "Zone",
                "ZoneBounds",
                "AddDate",
                "Add",
                "Sub",
                "Truncate",
                "Round",
                "Month.String",
                "Weekday.String",
                "Location",
                "Location.String",
                "GoString",
                "In",
            ]) {
                "Format" => format!("Format {}", rng.pick_str(LAYOUTS)),
                "Before" => format!("Before {t}"),
                "In" => format!(
                    "In (toDate {} {}){}.Location",
                    rng.pick_str(LAYOUTS),
                    rng.pick_str(DATE_VALUES),
                    rng.pick_str(&["", ".UTC"])
                ),
                "AddDate" => format!(
                    "AddDate {} {} {}",
                    rng.pick_str(DATE_DELTAS),
                    rng.pick_str(DATE_DELTAS),
                    rng.pick_str(DATE_DELTAS)
                ),
                "Sub" => {
                    let sub = format!("Sub {t}");
                    match rng.pick_str(&[
                        "",
                        ".String",
                        ".Hours",
                        ".Seconds",
                        ".Milliseconds",
                        ".Round 3600000000000",
                        ".Truncate 60000000000",
                        ".Abs",
                    ]) {
                        "" => sub,
                        tail => {
                            return Some(format!(
                                "((toDate {} {}).{sub}){tail}",
                                rng.pick_str(LAYOUTS),
                                rng.pick_str(DATE_VALUES)
                            ));
                        }
                    }
                }
                m @ ("Add" | "Truncate" | "Round") => {
                    let d = if rng.chance(30) {
                        format!("({t}.Sub {})", date_time(rng))
                    } else {
                        rng.pick_str(DURATION_LITERALS).to_owned()
                    };
                    format!("{m} {d}")
                }
                m => m.to_owned(),
            };
            format!(
                "(toDate {} {}).{method}",
                rng.pick_str(LAYOUTS),
                rng.pick_str(DATE_VALUES)
            )
        }
        "toDate" | "mustToDate" => format!(
            "{name} {} {}",
            rng.pick_str(LAYOUTS),
            rng.pick_str(DATE_VALUES)
        ),
        "date" => format!("date {} {t}", rng.pick_str(LAYOUTS)),
        "dateInZone" | "date_in_zone" => {
            format!(
                "{name} {} {t} {}",
                rng.pick_str(LAYOUTS),
                rng.pick_str(ZONES)
            )
        }
        "htmlDate" => format!("htmlDate {t}"),
        "htmlDateInZone" => format!("htmlDateInZone {t} {}", rng.pick_str(ZONES)),
        "unixEpoch" => format!("unixEpoch {t}"),
        _ => format!("{name} {} {t}", rng.pick_str(MODIFY)),
    })
}

/// Arguments for `duration` and `durationRound` (seconds, Go durations, and values of the wrong
/// type, which slim-sprig takes as zero).
const DURATION_ARGS: &[&str] = &[
    "\"90\"",
    "\"-3601\"",
    "\"+7\"",
    "\"1.5\"",
    "\"\"",
    "\"99999999999999999999\"",
    "\"-99999999999999999999\"",
    "\"9223372036\"",
    "\"1h30m\"",
    "\"-2h45m10.5s\"",
    "\"720h\"",
    "\"8761h\"",
    "\"721h\"",
    "\"25h\"",
    "\"61s\"",
    "\"1s\"",
    "\"1.000000001s\"",
    "\"300ms\"",
    "\"2µs\"",
    "\"3d\"",
    "\"9223372036854775807ns\"",
    "\"-9223372036854775808ns\"",
    "\".5h\"",
    "(int64 86401)",
    "(int64 -59)",
    "(int64 \"9223372036854775807\")",
    "(int64 \"-9223372036854775808\")",
    "(int64 61000000001)",
    "(int64 31536000000000001)",
    "(int 90)",
    "90",
    "1.5",
    ".Application.spec.size",
    ".Application.spec.whole",
    ".Application.spec.big",
    ".Application.spec.neg",
];

/// The `template` subject: strategy-shaped strings, the constructs strategy templates are
/// written with (string fields and parameters, missing keys, `printf "%s"`, `default`, `index`,
/// `quote`, `trimSuffix`…, `if`/`with`/`range`/`else`, trimming, unclosed actions). The
/// `template-full` subject adds everything else (`FUNCS`, `FIELDS`, `LITERALS`).
const BASIC_FUNCS: &[(&str, usize, usize)] = &[
    ("printf", 1, 3),
    ("index", 2, 2),
    ("eq", 2, 2),
    ("ne", 2, 2),
    ("not", 1, 1),
    ("default", 2, 2),
    ("empty", 1, 1),
    ("quote", 1, 1),
    ("squote", 1, 1),
    ("upper", 1, 1),
    ("lower", 1, 1),
    ("trimPrefix", 2, 2),
    ("trimSuffix", 2, 2),
    ("replace", 3, 3),
    ("contains", 2, 2),
    ("hasPrefix", 2, 2),
    ("hasSuffix", 2, 2),
    ("b64enc", 1, 1),
    ("required", 2, 2),
    ("title", 1, 1),
    ("trim", 1, 1),
    ("trimAll", 2, 2),
];

const BASIC_FIELDS: &[&str] = &[
    ".Application.metadata.name",
    ".Application.metadata.namespace",
    ".Application.metadata.labels.app",
    ".Application.metadata.labels.z",
    ".Application.metadata.labels.absent",
    ".Application.spec.size",
    ".Application.spec.storageClass",
    ".Application.spec.nothing",
    ".Application.spec.html",
    ".Application.spec.path",
    ".Parameters.bucket",
    ".Parameters.prefix",
    ".Parameters.region",
    ".Parameters.endpoint",
    ".Parameters.absent",
    ".Release.Name",
    ".Release.Namespace",
    ".Mode",
];

const BASIC_LITERALS: &[&str] = &[
    "\"x\"",
    "\"\"",
    "\"a-b\"",
    "\"<&>\"",
    "\"/\"",
    "\"-\"",
    "\"ünï\"",
    "`raw`",
];

const FULL_FORMATS: &[&str] = &[
    "%s", "%d", "%v", "%q", "%05d", "%x", "%.2f", "%t", "%s-%s", "%s/%v", "%%", "%T", "%+v", "%#v",
    "%8s|", "%-4d|", "%e", "%g",
];

thread_local! {
    static FULL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn full() -> bool {
    FULL.with(std::cell::Cell::get)
}

/// `n` strategy-shaped template strings, growing in the number of pieces and nesting.
pub fn generate(rng: &mut Rng, n: usize) -> Vec<Case> {
    FULL.with(|f| f.set(false));
    generate_with(rng, n)
}

/// `n` template strings using any function of slim-sprig's map and Go's builtins, any field of
/// the context and any literal (the `template-full` subject).
pub fn generate_full(rng: &mut Rng, n: usize) -> Vec<Case> {
    FULL.with(|f| f.set(true));
    generate_with(rng, n)
}

fn generate_with(rng: &mut Rng, n: usize) -> Vec<Case> {
    (0..n)
        .map(|i| {
            let size = size_of(i, n, 10);
            let text = template(rng, size, 0, &mut Vec::new());
            Case {
                size,
                input: json!({"text": text, "context": context(rng)}),
            }
        })
        .collect()
}

fn template(rng: &mut Rng, size: usize, depth: usize, vars: &mut Vec<String>) -> String {
    let mut out = String::new();
    let pieces = 1 + rng.below(size.clamp(1, 5));
    for _ in 0..pieces {
        match rng.below(12) {
            0..=2 => out.push_str(rng.pick_str(&[
                "s3://", "/", "-", " ", "\n", "a", "<&>", "é", "{", "}", "x}y", "", "  ", "{ {",
            ])),
            3..=7 => out.push_str(&action(rng, size, vars)),
            8 if depth < 2 => out.push_str(&control(rng, size, depth, vars)),
            9 => {
                let name = format!("$v{}", vars.len());
                out.push_str(&format!(
                    "{{{{ {name} := {} }}}}",
                    pipeline(rng, size, vars)
                ));
                vars.push(name);
            }
            10 => out.push_str(rng.pick_str(&[
                "{{/* comment */}}",
                "{{- /* trimmed */ -}}",
                "{{}}",
                "{{ end }}",
                "{{ else }}",
                "{{ .Mode",
                "{{",
                "}}",
                "{{ .Mode }",
                "{{ \"unterminated }}",
                "{{ .Mode | }}",
                "{{ ( .Mode }}",
                "{{ $undefined }}",
                "{{ .Mode.x }}",
                "{{ 3.x }}",
                "{{ .Application.spec.replicas.x }}",
                "{{ index }}",
            ])),
            // Only in the full subject (the strategy-shaped one keeps its case stream).
            11 if full() && rng.chance(40) => out.push_str(rng.pick_str(&[
                "{{ break }}",
                "{{ continue }}",
                "{{ define \"t\" }}[{{ . }}]{{ end }}{{ template \"t\" .Mode }}",
                "{{ template \"t\" }}",
                "{{ block \"b\" .Parameters }}{{ .bucket }}{{ end }}",
                "{{ $ = 1 }}",
                "{{ 1_000 }}{{ 0x1p4 }}{{ 017 }}{{ 0b11 }}",
            ])),
            _ => out.push_str(&action(rng, size, vars)),
        }
    }
    out
}

fn open(rng: &mut Rng) -> &'static str {
    if rng.chance(15) { "{{- " } else { "{{ " }
}

fn close(rng: &mut Rng) -> &'static str {
    if rng.chance(15) { " -}}" } else { " }}" }
}

fn action(rng: &mut Rng, size: usize, vars: &[String]) -> String {
    let o = open(rng);
    let c = close(rng);
    format!("{o}{}{c}", pipeline(rng, size, vars))
}

fn control(rng: &mut Rng, size: usize, depth: usize, vars: &mut Vec<String>) -> String {
    let keyword = *rng.pick(&["if", "with", "range", "range", "if"]);
    let head = if keyword == "range" && rng.chance(50) {
        let k = format!("$k{depth}");
        let v = format!("$e{depth}");
        let h = format!("{k}, {v} := {}", collection(rng, size, vars));
        vars.push(k);
        vars.push(v);
        h
    } else if keyword == "range" {
        collection(rng, size, vars)
    } else {
        pipeline(rng, size, vars)
    };
    let (o1, c1) = (open(rng), close(rng));
    let body = template(rng, size.saturating_sub(1).max(1), depth + 1, vars);
    let mut s = format!("{o1}{keyword} {head}{c1}{body}");
    if rng.chance(40) {
        let (o, c) = (open(rng), close(rng));
        let other = template(rng, size.saturating_sub(1).max(1), depth + 1, vars);
        s.push_str(&format!("{o}else{c}{other}"));
    }
    let (o, c) = (open(rng), close(rng));
    s.push_str(&format!("{o}end{c}"));
    s
}

fn collection(rng: &mut Rng, size: usize, vars: &[String]) -> String {
    if !full() {
        return rng
            .pick(&[
                ".Application.spec.databases",
                ".Application.spec.empty",
                ".Application.metadata.labels",
            ])
            .to_string();
    }
    if rng.chance(80) {
        rng.pick(&[
            ".Application.spec.databases",
            ".Application.metadata.labels",
            ".Parameters",
            ".Application.spec.users",
            ".Application.spec.empty",
            ".Application.spec.nothing",
            "(list 1 2 3)",
            "(splitList \",\" .Application.spec.csv)",
            ".Application.spec.replicas",
            ".Application.spec.absent",
            "(dict \"b\" 2 \"a\" 1)",
            ".Mode",
        ])
        .to_string()
    } else {
        pipeline(rng, size, vars)
    }
}

fn operand(rng: &mut Rng, size: usize, vars: &[String], depth: usize) -> String {
    if !full() {
        return match rng.below(10) {
            0..=5 => rng.pick(BASIC_FIELDS).to_string(),
            6..=7 => rng.pick(BASIC_LITERALS).to_string(),
            8 if depth < 3 => format!("({})", call(rng, size, vars, depth + 1)),
            _ => rng.pick(BASIC_FIELDS).to_string(),
        };
    }
    match rng.below(10) {
        0..=4 => rng.pick(&FIELDS).to_string(),
        5..=6 => rng.pick(&LITERALS).to_string(),
        7 if !vars.is_empty() => {
            let v = rng.pick(vars).clone();
            if rng.chance(30) {
                format!("{v}.name")
            } else {
                v
            }
        }
        8 if depth < 3 => format!("({})", call(rng, size, vars, depth + 1)),
        _ => rng.pick(&FIELDS).to_string(),
    }
}

fn call(rng: &mut Rng, size: usize, vars: &[String], depth: usize) -> String {
    let (name, min, max) = if full() {
        *rng.pick(FUNCS)
    } else {
        *rng.pick(BASIC_FUNCS)
    };
    let mut n = min + rng.below(max - min + 1);
    if rng.chance(5) {
        n = rng.below(4);
    }
    let mut s = name.to_owned();
    if let Some(c) = date_call(rng, name) {
        return c;
    }
    if let Some(c) = url_call(rng, name) {
        return c;
    }
    if matches!(name, "duration" | "durationRound") && rng.chance(70) {
        s.push(' ');
        s.push_str(rng.pick_str(DURATION_ARGS));
        return s;
    }
    if name == "printf" && n > 0 {
        s.push(' ');
        let formats: &[&str] = if full() {
            FULL_FORMATS
        } else {
            &["%s", "%s-%s", "%s/%s", "s3://%s/%s", "%%", "x"]
        };
        s.push_str(&format!("{:?}", rng.pick(formats)));
        n -= 1;
    }
    for _ in 0..n {
        s.push(' ');
        s.push_str(&operand(rng, size, vars, depth));
    }
    s
}

fn pipeline(rng: &mut Rng, size: usize, vars: &[String]) -> String {
    let mut s = if rng.chance(45) {
        operand(rng, size, vars, 0)
    } else {
        call(rng, size, vars, 0)
    };
    let stages = rng.below(size.min(3) + 1);
    for _ in 0..stages {
        if rng.chance(50) {
            break;
        }
        s.push_str(" | ");
        s.push_str(&call(rng, size, vars, 1));
    }
    s
}

/// Compares one case.
pub fn check(case: &Json, go: &Json) -> Verdict {
    let text = case["text"].as_str().unwrap_or_default();
    let ours = drivers::template::render_string(text, &case["context"]);
    if let Some(("limit", _)) = go_error(go) {
        // Go has no limit: past 1 MiB of output (a range over a huge integer) it runs until
        // the process runs out of memory, without output practically forever (the reference
        // gives up after 10 s). Here the execution fails and the string is used as written
        // (pinned by gotemplate's runaway_templates_fail_instead_of_exhausting_memory).
        return if ours == text {
            Verdict::Deviation("runaway output: Go exhausts memory, here used as written")
        } else {
            Verdict::Differ {
                go: "output past 1 MiB (Go runs out of memory)".into(),
                rust: format!("{:?}", ours.chars().take(200).collect::<String>()),
            }
        };
    }
    let (theirs, how) = match go_error(go) {
        Some((class, msg)) => (
            text.to_owned(),
            format!("{class} error, used as written: {msg}"),
        ),
        None => (
            go["out"].as_str().unwrap_or_default().to_owned(),
            String::new(),
        ),
    };
    if ours == theirs {
        Verdict::Same
    } else {
        Verdict::Differ {
            go: format!("{theirs:?} {how}"),
            rust: format!("{ours:?}"),
        }
    }
}
