//! The ApplicationDefinition config hash: upstream's `json.Marshal` of the typed definitions
//! (declaration order, `omitempty`, pointers, Go's escaping) against
//! `appdef::canonical::canonical_json` and `config_hash`.
//!
//! Cases are definition sets the way Cozystack ships them (an OpenAPI schema as a string, a
//! chart reference, release labels, selectors, a dashboard block) plus the nasty ones: unicode,
//! HTML-sensitive characters and U+2028/U+2029, control characters, `null` everywhere, unknown
//! fields, big and fractional numbers, wrong types, and names that sort differently by bytes.

use serde_json::{Map, Value as Json, json};

use crate::rng::Rng;
use crate::{Case, Verdict, go_error, size_of};

const WORDS: [&str; 24] = [
    "postgres",
    "Postgres",
    "mysql",
    "kafka",
    "tenant",
    "",
    "a<b>&c",
    "line\u{2028}sep\u{2029}",
    "ünïcödé",
    "日本語",
    "emoji 🙂",
    "tab\there",
    "nl\nx",
    "quote\"back\\slash",
    "\u{0}\u{1f}\u{7f}",
    "\u{fffd}",
    "</script>",
    "x&amp;y",
    "a",
    "aa",
    "A",
    "_",
    "ß",
    "\u{10ffff}",
];

fn word(rng: &mut Rng) -> String {
    rng.pick(&WORDS).to_string()
}

fn maybe_null(v: Json, rng: &mut Rng) -> Json {
    if rng.chance(5) { Json::Null } else { v }
}

fn string_map(rng: &mut Rng, size: usize) -> Json {
    let mut m = Map::new();
    for _ in 0..rng.below(size.min(4) + 1) {
        let v = if rng.chance(5) {
            Json::Null
        } else {
            json!(word(rng))
        };
        m.insert(word(rng), v);
    }
    Json::Object(m)
}

fn string_list(rng: &mut Rng, size: usize) -> Json {
    Json::Array(
        (0..rng.below(size.min(4) + 1))
            .map(|_| {
                if rng.chance(5) {
                    Json::Null
                } else {
                    json!(word(rng))
                }
            })
            .collect(),
    )
}

fn number(rng: &mut Rng) -> Json {
    let text = rng.pick(&[
        "0",
        "1",
        "-1",
        "10",
        "9007199254740993",
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775808",
        "1.5",
        "1e3",
        "2.0",
        "-0",
        "1E2",
    ]);
    serde_json::from_str(text).expect("valid JSON numbers")
}

fn schema(rng: &mut Rng, size: usize) -> Json {
    // The schema is a JSON document in a string; upstream hashes the string as is.
    let mut props = Map::new();
    for _ in 0..1 + rng.below(size.min(5)) {
        props.insert(
            word(rng),
            json!({"type": "string", "default": word(rng), "description": "<b>size</b> & more"}),
        );
    }
    json!(json!({"type": "object", "properties": props}).to_string())
}

fn selector(rng: &mut Rng, size: usize) -> Json {
    if rng.chance(5) {
        return Json::Null;
    }
    let mut m = Map::new();
    if rng.chance(60) {
        m.insert("matchLabels".into(), maybe_null(string_map(rng, size), rng));
    }
    if rng.chance(30) {
        let exprs: Vec<Json> = (0..rng.below(3))
            .map(|_| {
                maybe_null(json!({"key": word(rng), "operator": rng.pick(&["In", "NotIn", "Exists"]).to_string(), "values": string_list(rng, size)}), rng)
            })
            .collect();
        m.insert("matchExpressions".into(), json!(exprs));
    }
    if rng.chance(50) {
        m.insert(
            "resourceNames".into(),
            maybe_null(string_list(rng, size), rng),
        );
    }
    if rng.chance(5) {
        m.insert("unknownField".into(), json!(1));
    }
    Json::Object(m)
}

fn resources(rng: &mut Rng, size: usize) -> Json {
    let mut m = Map::new();
    for key in ["include", "exclude"] {
        if rng.chance(50) {
            let list: Vec<Json> = (0..rng.below(size.min(3) + 1))
                .map(|_| selector(rng, size))
                .collect();
            m.insert(key.into(), maybe_null(json!(list), rng));
        }
    }
    Json::Object(m)
}

fn spec(rng: &mut Rng, size: usize) -> Json {
    let mut spec = Map::new();
    let mut app = Map::new();
    for key in ["kind", "plural", "singular"] {
        if rng.chance(90) {
            app.insert(key.into(), maybe_null(json!(word(rng)), rng));
        }
    }
    if rng.chance(90) {
        app.insert("openAPISchema".into(), schema(rng, size));
    }
    spec.insert("application".into(), maybe_null(Json::Object(app), rng));

    let mut release = Map::new();
    match rng.below(10) {
        0 => {}
        1 => {
            release.insert("chartRef".into(), Json::Null);
        }
        _ => {
            let mut c = Map::new();
            c.insert(
                "kind".into(),
                json!(
                    rng.pick(&["ExternalArtifact", "HelmChart", "OCIRepository"])
                        .to_string()
                ),
            );
            c.insert("name".into(), json!(word(rng)));
            if rng.chance(40) {
                c.insert("namespace".into(), maybe_null(json!(word(rng)), rng));
            }
            if rng.chance(30) {
                c.insert("apiVersion".into(), json!("source.toolkit.fluxcd.io/v1"));
            }
            release.insert("chartRef".into(), Json::Object(c));
        }
    }
    if rng.chance(60) {
        release.insert("labels".into(), maybe_null(string_map(rng, size), rng));
    }
    if rng.chance(80) {
        release.insert("prefix".into(), json!(format!("{}-", word(rng))));
    }
    if rng.chance(20) {
        release.insert(
            "waitStrategy".into(),
            json!(rng.pick(&["", "HelmReleaseReady", "poll"]).to_string()),
        );
    }
    if rng.chance(20) {
        let checks: Vec<Json> = (0..1 + rng.below(2))
            .map(|_| {
                let mut h = json!({"apiVersion": "apps/v1", "kind": word(rng), "current": "status.ready == true"});
                if rng.chance(50) {
                    h["inProgress"] = json!(word(rng));
                }
                if rng.chance(50) {
                    h["failed"] = json!("status.phase == \"Failed\" && x < 3");
                }
                maybe_null(h, rng)
            })
            .collect();
        release.insert("healthCheckExprs".into(), json!(checks));
    }
    spec.insert("release".into(), maybe_null(Json::Object(release), rng));

    for key in ["secrets", "services", "ingresses"] {
        match rng.below(4) {
            0 => {}
            1 => {
                spec.insert(key.into(), Json::Null);
            }
            _ => {
                spec.insert(key.into(), resources(rng, size));
            }
        }
    }
    if rng.chance(60) {
        let mut d = Map::new();
        for key in [
            "singular",
            "plural",
            "name",
            "description",
            "icon",
            "category",
        ] {
            if rng.chance(60) {
                d.insert(key.into(), maybe_null(json!(word(rng)), rng));
            }
        }
        for key in ["singularResource", "module"] {
            if rng.chance(40) {
                d.insert(key.into(), maybe_null(json!(rng.chance(50)), rng));
            }
        }
        if rng.chance(50) {
            d.insert("weight".into(), number(rng));
        }
        for key in ["tags", "tabs"] {
            if rng.chance(40) {
                d.insert(key.into(), maybe_null(string_list(rng, size), rng));
            }
        }
        if rng.chance(40) {
            let rows: Vec<Json> = (0..rng.below(3) + 1)
                .map(|_| maybe_null(string_list(rng, size), rng))
                .collect();
            d.insert("keysOrder".into(), json!(rows));
        }
        spec.insert("dashboard".into(), maybe_null(Json::Object(d), rng));
    }
    if rng.chance(10) {
        spec.insert(
            rng.pick(&["Application", "extra", "status"]).to_string(),
            json!({"kind": "x"}),
        );
    }
    if rng.chance(3) {
        // A wrong type somewhere: both decoders must refuse it.
        let (k, v) = rng
            .pick(&[
                ("release", json!({"prefix": 5})),
                ("dashboard", json!({"weight": "5"})),
                ("secrets", json!([])),
                ("application", json!("x")),
            ])
            .clone();
        spec.insert(k.to_owned(), v);
    }
    Json::Object(spec)
}

/// `n` definition sets, growing in the number of definitions and entries.
pub fn generate(rng: &mut Rng, n: usize) -> Vec<Case> {
    (0..n)
        .map(|i| {
            let size = size_of(i, n, 6);
            let mut names: Vec<String> = Vec::new();
            let mut defs = Vec::new();
            for _ in 0..1 + rng.below(size) {
                let name = format!("{}{}", word(rng), rng.pick(&["", "-a", "-b", "1", "ä"]));
                if names.contains(&name) {
                    continue;
                }
                names.push(name.clone());
                let d = match rng.below(20) {
                    0 => json!({"name": name}),
                    1 => json!({"name": name, "spec": null}),
                    _ => json!({"name": name, "spec": spec(rng, size)}),
                };
                defs.push(d);
            }
            Case {
                size,
                input: json!({"defs": defs}),
            }
        })
        .collect()
}

/// Compares one case.
pub fn check(case: &Json, go: &Json) -> Verdict {
    let defs: Vec<(&str, Option<&Json>)> = case["defs"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|d| (d["name"].as_str().unwrap_or_default(), d.get("spec")))
                .collect()
        })
        .unwrap_or_default();
    let bytes = appdef::canonical::canonical_json(defs.iter().copied());
    match (go_error(go), bytes) {
        (Some(_), Err(_)) => Verdict::Same,
        (Some((_, msg)), Ok(b)) => Verdict::Differ {
            go: format!("error {msg}"),
            rust: String::from_utf8_lossy(&b).into_owned(),
        },
        (None, Err(e)) => Verdict::Differ {
            go: go["json"].to_string(),
            rust: format!("error {e}: {:?}", std::error::Error::source(&e)),
        },
        (None, Ok(b)) => {
            let theirs = go["json"].as_str().unwrap_or_default();
            if b != theirs.as_bytes() {
                return Verdict::Differ {
                    go: theirs.to_owned(),
                    rust: String::from_utf8_lossy(&b).into_owned(),
                };
            }
            match appdef::canonical::config_hash(defs.iter().copied()) {
                Ok(h) if h == go["hash"].as_str().unwrap_or_default() => Verdict::Same,
                other => Verdict::Differ {
                    go: go["hash"].to_string(),
                    rust: format!("{other:?}"),
                },
            }
        }
    }
}
