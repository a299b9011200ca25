//! Bad input, end to end: malformed but schema-valid BackupJobs, BackupClasses, strategy templates
//! and Plans, all applied at once to one runner (with the real renderer and projector and the
//! simulated mariadb-operator). Each case is a row of [`cases`]: the objects, and the named reason
//! it must end in (a Ready reason, a Plan `Error` condition or an Event). A well-formed BackupJob in
//! another namespace, created in the same moment, must still succeed, and the runner must neither
//! panic nor restart.

use crate::operators;
use crate::support;

use std::time::Duration;

use api::backups::{BackupClass, BackupJob, Plan};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use operators::Platform;
use serde_json::{Value, json};

const TENANT: &str = "tenant-bad";
const GOOD: &str = "tenant-good";
const WAIT: Duration = Duration::from_secs(90);

/// What a case must end in.
enum Expect {
    /// The BackupJob's Ready condition has this reason and its message contains the fragment.
    Ready(&'static str, String),
    /// The Plan's `Error` condition is True with reason `CronSpecInvalid`; its message contains
    /// the fragment.
    PlanError(String),
    /// An Event about the object (namespaced, named as the case's object) with this reason and a
    /// note containing the fragment.
    Event(&'static str, String),
}

/// One row: a name for the report, what is wrong, the objects to apply (the last one is the object
/// the expectation is about), the expectation.
struct Case {
    what: &'static str,
    objects: Vec<Value>,
    expect: Expect,
}

fn job(name: &str, kind: &str, app: &str, class: &str) -> Value {
    json!({"apiVersion": "backups.cozystack.io/v1alpha1", "kind": "BackupJob",
           "metadata": {"name": name, "namespace": TENANT},
           "spec": {"applicationRef": {"apiGroup": "apps.cozystack.io", "kind": kind, "name": app},
                    "backupClassName": class}})
}

fn class(
    name: &str,
    app_kind: &str,
    group: &str,
    kind: &str,
    strategy: &str,
    params: Value,
) -> Value {
    json!({"apiVersion": "backups.cozystack.io/v1alpha1", "kind": "BackupClass",
           "metadata": {"name": name},
           "spec": {"strategies": [{"application": {"kind": app_kind},
                                    "strategyRef": {"apiGroup": group, "kind": kind, "name": strategy},
                                    "parameters": params}]}})
}

const GROUP: &str = "strategy.backups.cozystack.io";

fn mariadb_strategy(name: &str, template: Value) -> Value {
    json!({"apiVersion": "strategy.backups.cozystack.io/v1alpha1", "kind": "MariaDB",
           "metadata": {"name": name}, "spec": {"template": template}})
}

fn plan(name: &str, cron: Option<&str>, class: &str) -> Value {
    let schedule = match cron {
        Some(c) => json!({"cron": c}),
        None => json!({}),
    };
    json!({"apiVersion": "backups.cozystack.io/v1alpha1", "kind": "Plan",
           "metadata": {"name": name, "namespace": TENANT},
           "spec": {"applicationRef": {"kind": "MariaDB", "name": "shop"},
                    "backupClassName": class, "schedule": schedule}})
}

fn failed(fragment: impl Into<String>) -> Expect {
    Expect::Ready("BackupFailed", fragment.into())
}

/// Every case, given the platform's MariaDB strategy template.
fn cases(platform_template: &Value) -> Vec<Case> {
    let with = |path: &[&str], value: Value| {
        let mut t = platform_template.clone();
        let mut at = &mut t;
        for p in &path[..path.len() - 1] {
            at = &mut at[*p];
        }
        at[path[path.len() - 1]] = value;
        t
    };
    let long_app = "a".repeat(40_000);
    let huge = "ü".repeat(125 * 1024); // 250 KiB of UTF-8, under the 256 KiB annotation limit
    let name_253 = format!("j{}", "x".repeat(252));
    let name_63 = format!("j{}", "y".repeat(62));
    let class_253 = format!("c{}", "z".repeat(252));
    let plan_253 = format!("p{}", "q".repeat(252));
    let mut huge_job = job("huge-annotation", "MariaDB", "ghost-huge", "cozy-default");
    huge_job["metadata"]["annotations"] =
        json!({"example.com/blob": huge, "example.com/unicode": "ünïcödé 值 🚀 \u{202e}rtl"});
    let mut foreign_app = job("foreign-app-group", "MariaDB", "shop", "cozy-default");
    foreign_app["spec"]["applicationRef"]["apiGroup"] = json!("example.com");
    vec![
        Case {
            what: "BackupJob names a BackupClass that does not exist",
            objects: vec![job("class-missing", "MariaDB", "shop", "does-not-exist")],
            expect: Expect::Ready(
                "BackupClassNotFound",
                "BackupClass \"does-not-exist\" not found".into(),
            ),
        },
        Case {
            what: "BackupClass name at the 253-character limit, not existing",
            objects: vec![job("class-253", "MariaDB", "shop", &class_253)],
            expect: Expect::Ready("BackupClassNotFound", format!("BackupClass {class_253:?}")),
        },
        Case {
            what: "application kind the class does not map",
            objects: vec![job("no-route", "Redis", "cache", "cozy-default")],
            expect: failed("does not bind a strategy for Kind \"Redis\""),
        },
        Case {
            what: "applicationRef in a foreign API group (no route matches)",
            objects: vec![foreign_app],
            expect: failed("does not bind a strategy for Kind \"MariaDB\""),
        },
        Case {
            what: "class routes to a foreign strategy group (left to its controller)",
            objects: vec![
                class(
                    "bad-foreign",
                    "MariaDB",
                    "example.org",
                    "Custom",
                    "x",
                    json!({}),
                ),
                job("foreign-strategy", "MariaDB", "shop", "bad-foreign"),
            ],
            expect: Expect::Event("StrategyNotHandled", "group \"example.org\"".into()),
        },
        Case {
            what: "strategy of an unknown kind",
            objects: vec![
                class("bad-kind", "MariaDB", GROUP, "Frobnicator", "x", json!({})),
                job("unknown-kind", "MariaDB", "shop", "bad-kind"),
            ],
            expect: failed("strategy Kind \"Frobnicator\" is not supported"),
        },
        Case {
            what: "strategy object missing (MariaDB: waits in the bootstrap window)",
            objects: vec![
                class(
                    "bad-absent",
                    "MariaDB",
                    GROUP,
                    "MariaDB",
                    "absent",
                    json!({}),
                ),
                job("missing-strategy", "MariaDB", "shop", "bad-absent"),
            ],
            expect: Expect::Ready("StrategyNotReady", "Strategy \"absent\"".into()),
        },
        Case {
            what: "strategy object missing (Job: fails at once)",
            objects: vec![
                class(
                    "bad-absent-job",
                    "MariaDB",
                    GROUP,
                    "Job",
                    "absent",
                    json!({}),
                ),
                job("missing-job-strategy", "MariaDB", "shop", "bad-absent-job"),
            ],
            expect: failed("Job strategy not found: absent"),
        },
        Case {
            what: "class maps an application kind to a driver of another kind",
            objects: vec![
                class(
                    "bad-wrong-kind",
                    "Postgres",
                    GROUP,
                    "MariaDB",
                    "cozy-default-mariadb",
                    json!({}),
                ),
                job("wrong-kind", "Postgres", "pg", "bad-wrong-kind"),
            ],
            expect: failed(
                "MariaDB strategy supports applicationRef.kind=\"MariaDB\", got \"Postgres\"",
            ),
        },
        Case {
            what: "application missing",
            objects: vec![job("ghost", "MariaDB", "ghost", "cozy-default")],
            expect: failed("MariaDB application not found: tenant-bad/ghost"),
        },
        Case {
            what: "unicode application name",
            objects: vec![job(
                "unicode-app",
                "MariaDB",
                "données-数据库-🚀",
                "cozy-default",
            )],
            expect: failed("MariaDB application not found: tenant-bad/données-数据库-🚀"),
        },
        Case {
            what: "application name of 40,000 characters (message over the condition limit)",
            objects: vec![job("long-app", "MariaDB", &long_app, "cozy-default")],
            expect: failed("MariaDB application not found: tenant-bad/aaaa"),
        },
        Case {
            what: "250 KiB unicode annotation and a bidi-control annotation on a job",
            objects: vec![huge_job],
            expect: failed("MariaDB application not found: tenant-bad/ghost-huge"),
        },
        Case {
            what: "BackupJob name at the 253-character limit (too long for the owned-by label)",
            objects: vec![job(&name_253, "MariaDB", "shop", "cozy-default")],
            expect: failed("failed to ensure k8s.mariadb.com/Backup"),
        },
        Case {
            what: "BackupJob name at the 63-character label limit (works)",
            objects: vec![job(&name_63, "MariaDB", "shop", "cozy-default")],
            expect: Expect::Ready("BackupCompleted", "k8s.mariadb.com Backup completed".into()),
        },
        Case {
            what: "route parameter backupDeadline not a duration",
            objects: vec![
                class(
                    "bad-deadline",
                    "MariaDB",
                    GROUP,
                    "MariaDB",
                    "cozy-default-mariadb",
                    json!({"backupDeadline": "forever"}),
                ),
                job("deadline-forever", "MariaDB", "shop", "bad-deadline"),
            ],
            expect: failed("parameter backupDeadline \"forever\" is not a positive duration"),
        },
        Case {
            what: "route parameter backupDeadline zero",
            objects: vec![
                class(
                    "bad-deadline-zero",
                    "MariaDB",
                    GROUP,
                    "MariaDB",
                    "cozy-default-mariadb",
                    json!({"backupDeadline": "0s"}),
                ),
                job("deadline-zero", "MariaDB", "shop", "bad-deadline-zero"),
            ],
            expect: failed("parameter backupDeadline \"0s\" is not a positive duration"),
        },
        Case {
            what: "strategy template string does not parse (unknown function)",
            objects: vec![
                mariadb_strategy(
                    "broken-parse",
                    with(&["compression"], json!("{{ .Parameters.c | nosuchfunc }}")),
                ),
                class(
                    "bad-parse",
                    "MariaDB",
                    GROUP,
                    "MariaDB",
                    "broken-parse",
                    json!({"c": "gzip"}),
                ),
                job("template-parse", "MariaDB", "shop", "bad-parse"),
            ],
            expect: Expect::Event(
                "StrategyTemplateInvalid",
                "spec.template.compression does not parse as a Go template".into(),
            ),
        },
        Case {
            what: "strategy template string with an unclosed action (used to hang the renderer)",
            objects: vec![
                mariadb_strategy(
                    "unclosed",
                    with(&["compression"], json!("{{ .Parameters.c ")),
                ),
                class(
                    "bad-unclosed",
                    "MariaDB",
                    GROUP,
                    "MariaDB",
                    "unclosed",
                    json!({"c": "gzip"}),
                ),
                job("template-unclosed", "MariaDB", "shop", "bad-unclosed"),
            ],
            expect: Expect::Event(
                "StrategyTemplateInvalid",
                "spec.template.compression does not parse as a Go template (unclosed action".into(),
            ),
        },
        Case {
            what: "strategy template refers to a parameter the route does not set",
            objects: vec![
                mariadb_strategy(
                    "missing-value",
                    with(
                        &["storage", "s3", "prefix"],
                        json!("{{ .Parameters.tenantPrefix }}/"),
                    ),
                ),
                class(
                    "bad-missing-value",
                    "MariaDB",
                    GROUP,
                    "MariaDB",
                    "missing-value",
                    json!({}),
                ),
                job("template-missing", "MariaDB", "shop", "bad-missing-value"),
            ],
            expect: Expect::Event(
                "StrategyTemplateInvalid",
                "spec.template.storage.s3.prefix refers to .Parameters.tenantPrefix".into(),
            ),
        },
        Case {
            what: "strategy template renders maxRetention that is not a duration",
            objects: vec![
                mariadb_strategy(
                    "bad-retention",
                    with(&["maxRetention"], json!("{{ .Parameters.keep }}")),
                ),
                class(
                    "bad-retention",
                    "MariaDB",
                    GROUP,
                    "MariaDB",
                    "bad-retention",
                    json!({"keep": "a fortnight"}),
                ),
                job("template-retention", "MariaDB", "shop", "bad-retention"),
            ],
            expect: failed("failed to template MariaDB strategy: time: invalid duration"),
        },
        Case {
            what: "applicationRef with an empty kind",
            objects: vec![job("empty-kind", "", "shop", "cozy-default")],
            expect: failed("does not bind a strategy for Kind \"\""),
        },
        Case {
            what: "route parameters with unicode keys and values and a 100 KiB value (works)",
            objects: vec![
                class(
                    "odd-params",
                    "MariaDB",
                    GROUP,
                    "MariaDB",
                    "cozy-default-mariadb",
                    json!({"ключ": "значение 🚀", "blob": "b".repeat(100 * 1024)}),
                ),
                job("odd-params", "MariaDB", "shop", "odd-params"),
            ],
            expect: Expect::Ready("BackupCompleted", "k8s.mariadb.com Backup completed".into()),
        },
        Case {
            what: "Plan cron with six fields (seconds are not in the dialect)",
            objects: vec![plan("cron-six", Some("0 * * * * *"), "cozy-default")],
            expect: Expect::PlanError("could not parse cron 0 * * * * *".into()),
        },
        Case {
            what: "Plan cron @reboot (not a robfig descriptor)",
            objects: vec![plan("cron-reboot", Some("@reboot"), "cozy-default")],
            expect: Expect::PlanError("could not parse cron @reboot".into()),
        },
        Case {
            what: "Plan cron that never fires (30 February)",
            objects: vec![plan("cron-feb-30", Some("0 0 30 2 *"), "cozy-default")],
            expect: Expect::PlanError("never occurs".into()),
        },
        Case {
            what: "Plan cron with an empty CRON_TZ",
            objects: vec![plan(
                "cron-empty-tz",
                Some("CRON_TZ= 0 2 * * *"),
                "cozy-default",
            )],
            expect: Expect::PlanError("could not parse cron CRON_TZ=".into()),
        },
        Case {
            what: "Plan cron that never fires (31 February)",
            objects: vec![plan("cron-feb-31", Some("0 0 31 2 *"), "cozy-default")],
            expect: Expect::PlanError("never occurs".into()),
        },
        Case {
            what: "Plan cron minute out of range",
            objects: vec![plan("cron-minute-61", Some("61 * * * *"), "cozy-default")],
            expect: Expect::PlanError("above the maximum 59".into()),
        },
        Case {
            what: "Plan cron with an unknown time zone",
            objects: vec![plan(
                "cron-mars",
                Some("CRON_TZ=Mars/Base 0 2 * * *"),
                "cozy-default",
            )],
            expect: Expect::PlanError("unknown time zone \"Mars/Base\"".into()),
        },
        Case {
            what: "Plan cron that is only a time-zone prefix",
            objects: vec![plan(
                "cron-tz-only",
                Some("TZ=Europe/Berlin"),
                "cozy-default",
            )],
            expect: Expect::PlanError("could not parse cron TZ=Europe/Berlin".into()),
        },
        Case {
            what: "Plan @every without a unit",
            objects: vec![plan("cron-every-5", Some("@every 5"), "cozy-default")],
            expect: Expect::PlanError("has no unit".into()),
        },
        Case {
            what: "Plan cron in full-width unicode digits",
            objects: vec![plan("cron-fullwidth", Some("０ ２ * * *"), "cozy-default")],
            expect: Expect::PlanError("could not parse cron ０ ２ * * *".into()),
        },
        Case {
            what: "Plan without a cron",
            objects: vec![plan("cron-missing", None, "cozy-default")],
            expect: Expect::PlanError("could not parse cron".into()),
        },
        Case {
            what: "Plan cron of 60,000 characters (message over the condition limit)",
            objects: vec![plan(
                "cron-huge",
                Some(&format!("0 0 {} * *", "32,".repeat(20_000))),
                "cozy-default",
            )],
            expect: Expect::PlanError("could not parse cron 0 0 32,32,".into()),
        },
        Case {
            what: "Plan name at the 253-character limit (job names are shortened with a hash, as upstream's)",
            objects: vec![plan(&plan_253, Some("@every 2s"), "cozy-default")],
            expect: Expect::Event(
                "BackupJobCreated",
                format!("created BackupJob {}-", &plan_253[..45]),
            ),
        },
        Case {
            what: "Plan with an empty backupClassName (its jobs fail validation)",
            objects: vec![plan("empty-class", Some("@every 2s"), "")],
            expect: Expect::Event("BackupJobCreateRefused", "backupClassName".into()),
        },
    ]
}

fn resource(body: &Value) -> (ApiResource, bool) {
    let kind = body["kind"].as_str().unwrap();
    let api_version = body["apiVersion"].as_str().unwrap();
    let (group, version) = api_version.split_once('/').unwrap();
    let plural = match kind {
        "BackupClass" => "backupclasses".to_owned(),
        "MariaDB" => "mariadbs".to_owned(),
        other => format!("{}s", other.to_lowercase()),
    };
    let namespaced = body["metadata"]["namespace"].is_string();
    (
        ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: api_version.into(),
            kind: kind.into(),
            plural,
        },
        namespaced,
    )
}

async fn put(p: &Platform, body: &Value) {
    let (ar, namespaced) = resource(body);
    let api: Api<DynamicObject> = if namespaced {
        Api::namespaced_with(
            p.h.client(),
            body["metadata"]["namespace"].as_str().unwrap(),
            &ar,
        )
    } else {
        Api::all_with(p.h.client(), &ar)
    };
    let name = body["metadata"]["name"].as_str().unwrap();
    api.patch(
        name,
        &PatchParams::apply("bad-input").force(),
        &Patch::Apply(body),
    )
    .await
    .unwrap_or_else(|e| panic!("the API server must accept {} {name:.40}: {e}", ar.kind));
}

/// Whether the case's expectation holds now; `Err` explains what is there instead.
async fn check(p: &Platform, case: &Case) -> Result<(), String> {
    let target = case.objects.last().unwrap();
    let name = target["metadata"]["name"].as_str().unwrap();
    match &case.expect {
        Expect::Ready(reason, fragment) => {
            let j = Api::<BackupJob>::namespaced(p.h.client(), TENANT)
                .get(name)
                .await
                .map_err(|e| e.to_string())?;
            let Some(r) = support::ready(&j) else {
                return Err("no Ready condition".into());
            };
            if r.reason == *reason && r.message.contains(fragment.as_str()) {
                Ok(())
            } else {
                Err(format!("Ready {}: {:.300}", r.reason, r.message))
            }
        }
        Expect::PlanError(fragment) => {
            let plan = Api::<Plan>::namespaced(p.h.client(), TENANT)
                .get(name)
                .await
                .map_err(|e| e.to_string())?;
            let c = plan
                .status
                .as_ref()
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Error").cloned())
                .ok_or("no Error condition")?;
            let ok = c.reason == "CronSpecInvalid"
                && c.status == api::ConditionStatus::True
                && c.message.contains(fragment.as_str());
            ok.then_some(())
                .ok_or_else(|| format!("Error {}: {:.300}", c.reason, c.message))
        }
        Expect::Event(reason, fragment) => {
            let events = p.h.events_about(TENANT, name).await;
            events
                .iter()
                .any(|(_, r, note)| r == reason && note.contains(fragment.as_str()))
                .then_some(())
                .ok_or_else(|| format!("Events: {events:?}"))
        }
    }
}

/// Waits for the case's expectation, panicking with the case and what is there instead.
async fn settle(p: &Platform, case: &Case) {
    harness::bad_input::settle(case.what, &case.expect, WAIT, || check(p, case)).await;
}

impl std::fmt::Display for Expect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expect::Ready(r, m) => write!(f, "Ready reason {r} with {m:.200}"),
            Expect::PlanError(m) => write!(f, "Plan Error CronSpecInvalid with {m:.200}"),
            Expect::Event(r, m) => write!(f, "Event {r} with {m:.200}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_objects_end_in_named_reasons_and_spare_other_tenants() {
    let mut p = Platform::start(&[TENANT, GOOD], "mariadb", &["--projection-grace=1s"], true).await;
    let platform = p
        .platform_strategy::<api::strategy::MariaDB>("cozy-default-mariadb")
        .await;
    p.mariadb(TENANT, "shop", json!({})).await;
    p.mariadb(GOOD, "shop", json!({})).await;
    let cases = cases(&platform["spec"]["template"]);
    assert!(cases.len() >= 37, "{}", cases.len());

    // Everything at once, the well-formed job of another tenant in the middle of it.
    let (first, rest) = cases.split_at(cases.len() / 2);
    for case in first {
        for o in &case.objects {
            put(&p, o).await;
        }
    }
    p.backup(GOOD, "good", "MariaDB", "shop", "cozy-default")
        .await;
    for case in rest {
        for o in &case.objects {
            put(&p, o).await;
        }
    }

    p.succeeded(GOOD, "good", "k8s.mariadb.com Backup completed")
        .await;
    for case in &cases {
        settle(&p, case).await;
    }

    // Condition messages stay within the API server's limit even when they quote huge fields.
    let long = Api::<BackupJob>::namespaced(p.h.client(), TENANT)
        .get("long-app")
        .await
        .unwrap();
    let msg = support::ready(&long).unwrap().message;
    assert!(msg.len() <= 32768 && msg.ends_with('…'), "{}", msg.len());
    let huge_plan = Api::<Plan>::namespaced(p.h.client(), TENANT)
        .get("cron-huge")
        .await
        .unwrap();
    let c = &huge_plan.status.unwrap().conditions[0];
    assert!(c.message.len() <= 32768, "{}", c.message.len());

    // The classes of the cases exist as written (the API server accepted every object).
    assert!(
        Api::<BackupClass>::all(p.h.client())
            .get_opt("bad-foreign")
            .await
            .unwrap()
            .is_some()
    );
    // The foreign-strategy job is left alone: no status written.
    let foreign = Api::<BackupJob>::namespaced(p.h.client(), TENANT)
        .get("foreign-strategy")
        .await
        .unwrap();
    assert!(foreign.status.is_none(), "{:?}", foreign.status);

    p.h.daemon("backup-runner").unwrap().assert_unharmed();
    harness::rbac::assert_allowed(&p.h.audit(), "backup-runner");
    p.h.cleanup().await.unwrap();
}
