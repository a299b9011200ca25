//! Bad input, end to end: ApplicationDefinitions in every odd shape the CRD accepts (schemas that
//! cozystack-api cannot read, a schema near the 1 MiB object limit, unicode kinds, a name at the
//! 253-character limit, a definition with only its required fields, absurd dashboard values), all
//! created at once against one `apidef-restarter` run, with a `cozystack-api` Deployment in an odd
//! shape (a garbage hash, a 250 KiB unrelated pod-template annotation). Each row of [`cases`] must
//! end in the one roll whose hash covers it, and a schema cozystack-api cannot serve in a log line
//! naming the definition and the field. The Deployment's other annotation is kept, exactly one
//! patch is made, and the daemon neither panics nor restarts.

use harness::{DaemonSpec, Harness};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};
use std::time::Duration;

const BIN: &str = "apidef-restarter";
const DEPLOYMENT: &str = "cozystack-api";
const KEY: &str = "cozystack.io/config-hash";
const DEADLINE: Duration = Duration::from_secs(30);

/// One odd definition and the log fragment it must produce (`None`: it is hashed without a word).
struct Case {
    what: &'static str,
    definition: Value,
    log: Option<String>,
}

fn definition(name: &str, kind: &str, schema: &str) -> Value {
    json!({
        "apiVersion": "cozystack.io/v1alpha1", "kind": "ApplicationDefinition",
        "metadata": {"name": name},
        "spec": {
            "application": {"kind": kind, "openAPISchema": schema,
                            "plural": format!("{}s", kind.to_lowercase()), "singular": kind.to_lowercase()},
            "release": {"prefix": format!("{:.40}-", name),
                        "chartRef": {"kind": "ExternalArtifact", "name": "chart", "namespace": "cozy-public"}}
        }
    })
}

fn cases() -> Vec<Case> {
    let schema_problem = |name: &str, problem: &str| {
        Some(format!(
            "ApplicationDefinition {name}: spec.application.openAPISchema {problem}"
        ))
    };
    // About 900 KiB of schema: a property per key, under the API server's 1.5 MiB request limit.
    let props: serde_json::Map<String, Value> = (0..12_000)
        .map(|i| {
            (
                format!("field{i:05}"),
                json!({"type": "string", "description": "ü"}),
            )
        })
        .collect();
    let huge = json!({"type": "object", "properties": props}).to_string();
    let long_name = format!("d{}", "n".repeat(252));
    let mut minimal = definition("minimal", "Minimal", "{}");
    minimal["spec"] = json!({"application": {"kind": "Minimal", "openAPISchema": "{}",
                                             "plural": "minimals", "singular": "minimal"},
                              "release": {"prefix": "", "chartRef": {"kind": "HelmChart", "name": "c"}}});
    let mut dashboard = definition("dash", "Dash", "{}");
    dashboard["spec"]["dashboard"] = json!({"category": "🚀", "plural": "Ω", "singular": "ω",
                                            "weight": i64::MAX, "tags": ["x".repeat(10_000)],
                                            "keysOrder": [[], ["ключ"]]});
    vec![
        Case {
            what: "openAPISchema empty",
            definition: definition("empty-schema", "EmptySchema", ""),
            log: schema_problem("empty-schema", "is empty"),
        },
        Case {
            what: "openAPISchema not JSON",
            definition: definition("broken-schema", "BrokenSchema", "{not json"),
            log: schema_problem("broken-schema", "is not valid JSON: "),
        },
        Case {
            what: "openAPISchema JSON but an array",
            definition: definition("array-schema", "ArraySchema", "[1, 2, 3]"),
            log: schema_problem("array-schema", "is JSON but not an object (an array)"),
        },
        Case {
            what: "openAPISchema of about 900 KiB",
            definition: definition("huge-schema", "HugeSchema", &huge),
            log: None,
        },
        Case {
            what: "unicode kind, plural and singular, and a schema with control characters",
            definition: definition(
                "unicode",
                "Données🚀",
                "{\"description\":\"<é>\\u2028&\\u0001\"}",
            ),
            log: None,
        },
        Case {
            what: "name at the 253-character limit",
            definition: definition(&long_name, "LongName", "{}"),
            log: None,
        },
        Case {
            what: "only the required fields (an empty prefix, no dashboard, no selectors)",
            definition: minimal,
            log: None,
        },
        Case {
            what: "dashboard with unicode, the largest weight, a 10,000-character tag and an empty keysOrder entry",
            definition: dashboard,
            log: None,
        },
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_definitions_roll_once_and_name_unservable_schemas() {
    let mut h = Harness::start().await.expect("harness");
    // The namespace deploy/apidef-restarter/rbac.yaml grants the daemon its Deployment in: it runs as
    // its own ServiceAccount.
    let ns = "cozy-system".to_owned();
    h.create_namespaces(&[&ns]).await.expect("namespace");
    let client = h.client();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    // The Deployment in an odd shape: a garbage hash, a 250 KiB unrelated annotation.
    let blob = "b".repeat(250 * 1024);
    let d: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": DEPLOYMENT, "namespace": ns},
        "spec": {
            "selector": {"matchLabels": {"app": DEPLOYMENT}},
            "template": {
                "metadata": {"labels": {"app": DEPLOYMENT},
                             "annotations": {KEY: "🚀 not a hash", "example.com/blob": blob}},
                "spec": {"containers": [{"name": "api", "image": "cozystack-api:dev"}]}
            }
        }
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    let defs: Api<DynamicObject> = Api::all_with(client.clone(), &appdef::api_resource());
    let cases = cases();
    for c in &cases {
        let obj: DynamicObject = serde_json::from_value(c.definition.clone()).unwrap();
        defs.create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("the API server must accept {:?}: {e}", c.what));
    }
    let bin = harness::locate_binary(BIN).expect("apidef-restarter is built");
    h.spawn_ready(
        DaemonSpec::new(BIN, bin).args([
            "--namespace",
            &ns,
            "--debounce",
            "300ms",
            "--lease-endpoint",
            "none",
        ]),
        DEADLINE,
    )
    .await
    .expect("daemon ready");

    // One roll whose hash covers every definition as the library computes it.
    let items = appdef::list_all(&client).await.unwrap();
    assert_eq!(items.len(), cases.len());
    let expected = appdef::config_hash_of(&items).unwrap();
    let annotation = || async {
        let d = deployments.get(DEPLOYMENT).await.unwrap();
        d.spec
            .unwrap()
            .template
            .metadata
            .unwrap()
            .annotations
            .unwrap()
    };
    harness::until("the Deployment to carry the hash of the set", || async {
        annotation().await.get(KEY) == Some(&expected)
    })
    .await;
    let log_path = h.daemon(BIN).unwrap().log_path.clone();
    for c in &cases {
        let Some(fragment) = &c.log else { continue };
        harness::bad_input::settle(
            c.what,
            &format!("a log line with {fragment}"),
            DEADLINE,
            || async {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                log.contains(fragment.as_str())
                    .then_some(())
                    .ok_or_else(|| "no such line".to_owned())
            },
        )
        .await;
    }
    assert_eq!(
        annotation().await.get("example.com/blob").map(String::len),
        Some(250 * 1024),
        "the Deployment's other annotation is kept"
    );
    // Exactly one patch (a settled window, one evaluation of the whole set), and each schema
    // problem is logged once.
    let patches = h
        .audit()
        .writes(Some("patch"), "deployments", Some(&ns), Some(DEPLOYMENT))
        .count();
    assert_eq!(patches, 1);
    let log = h.daemon(BIN).unwrap().log();
    for c in cases.iter().filter(|c| c.log.is_some()) {
        let fragment = c.log.as_deref().unwrap();
        assert_eq!(log.matches(fragment).count(), 1, "{}", c.what);
    }

    h.daemon(BIN).unwrap().assert_unharmed();
    h.cleanup().await.unwrap();
}
