//! Bad input, end to end: malformed but schema-valid RestoreJobs and catalog Backups, all applied
//! at once to one orchestrator (with the real runner and projector and the simulated
//! mariadb-operator and Percona operator). Each case is a row of [`cases`]: the objects, and the
//! named end it must reach (a failure whose message names the problem, or a Warning Event naming
//! the option before the restore goes ahead). A well-formed restore in another namespace, created
//! in the middle of them, must still succeed, and the orchestrator must neither panic nor restart.

use crate::support;

use std::fmt;

use api::backups::{Backup, RestoreJob};
use api::thirdparty::{apps, mariadb, percona};
use kube::core::ApiResource;
use serde_json::{Value, json};
use support::{Platform, TENANT, WAIT, ready};

const GOOD: &str = "tenant-good";

/// What a case must end in.
enum Expect {
    /// Phase `Failed`, `Ready=False RestoreFailed`, the message containing the fragment.
    Failed(String),
    /// An Event about the job with this reason and a note containing the fragment, and the
    /// restore then succeeding (the defaults apply).
    Warned(&'static str, String),
    /// Phase `Succeeded`.
    Succeeded,
}

impl fmt::Display for Expect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expect::Failed(m) => write!(f, "Failed RestoreFailed with {m:.200}"),
            Expect::Warned(r, m) => write!(f, "Event {r} with {m:.200}, then Succeeded"),
            Expect::Succeeded => write!(f, "Succeeded"),
        }
    }
}

/// One row: what is wrong, the objects to apply (the last one is the RestoreJob the expectation
/// is about), the expectation.
struct Case {
    what: &'static str,
    objects: Vec<Value>,
    expect: Expect,
}

fn restore_job(name: &str, backup: &str, target: Option<Value>, options: Option<Value>) -> Value {
    let mut spec = json!({"backupRef": {"name": backup}});
    if let Some(t) = target {
        spec["targetApplicationRef"] = t;
    }
    if let Some(o) = options {
        spec["options"] = o;
    }
    json!({"apiVersion": "backups.cozystack.io/v1alpha1", "kind": "RestoreJob",
           "metadata": {"name": name, "namespace": TENANT}, "spec": spec})
}

/// A MariaDB restore in place from the real Backup `nightly` with these options.
fn mariadb_with(name: &str, options: Value) -> Value {
    restore_job(name, "nightly", None, Some(options))
}

/// A MongoDB restore in place from the real Backup `mongo-nightly` with these options.
fn mongodb_with(name: &str, options: Value) -> Value {
    restore_job(name, "mongo-nightly", None, Some(options))
}

fn failed(fragment: impl Into<String>) -> Expect {
    Expect::Failed(fragment.into())
}

/// A hand-made catalog Backup `name` in `namespace`: the real Backup `real` (as JSON) with `edit`
/// applied. The catalog has no status subresource, so the status is written as given.
fn backup_like(real: &Value, namespace: &str, name: &str, edit: impl FnOnce(&mut Value)) -> Value {
    let mut b = json!({"apiVersion": "backups.cozystack.io/v1alpha1", "kind": "Backup",
                       "metadata": {"name": name, "namespace": namespace},
                       "spec": real["spec"].clone(), "status": real["status"].clone()});
    edit(&mut b);
    b
}

/// Every case, given the real MariaDB and MongoDB Backups (as JSON) and now.
fn cases(maria: &Value, mongo: &Value) -> Vec<Case> {
    let name_253 = format!("r{}", "x".repeat(252));
    let name_63 = format!("r{}", "y".repeat(62));
    let backup_253 = format!("b{}", "z".repeat(252));
    let huge = "ü".repeat(125 * 1024); // 250 KiB of UTF-8, under the 256 KiB annotation limit
    let mut annotated = mariadb_with("huge-annotation", json!({}));
    annotated["metadata"]["annotations"] =
        json!({"example.com/blob": huge, "example.com/unicode": "ünïcödé 值 🚀 \u{202e}rtl"});
    let in_100_years = k8s_openapi::jiff::Timestamp::from_second(
        k8s_openapi::jiff::Timestamp::now().as_second() + 36525 * 86400,
    )
    .unwrap()
    .to_string();
    let apps_ref = |kind: &str, name: &str| json!({"apiGroup": "apps.cozystack.io", "kind": kind, "name": name});
    vec![
        Case {
            what: "names a Backup that does not exist",
            objects: vec![restore_job("backup-missing", "ghost", None, None)],
            expect: failed(r#"failed to get Backup: backups.backups.cozystack.io "ghost" not found"#),
        },
        Case {
            what: "names a Backup that exists only in another namespace",
            objects: vec![
                backup_like(maria, GOOD, "elsewhere", |_| {}),
                restore_job("backup-elsewhere", "elsewhere", None, None),
            ],
            expect: failed(r#"backups.backups.cozystack.io "elsewhere" not found"#),
        },
        Case {
            what: "backupRef name at the 253-character limit, not existing",
            objects: vec![restore_job("backup-253", &backup_253, None, None)],
            expect: failed(format!("failed to get Backup: backups.backups.cozystack.io {backup_253:?} not found")),
        },
        Case {
            what: "backupRef name in unicode",
            objects: vec![restore_job("backup-unicode", "données-数据-🚀", None, None)],
            expect: failed("failed to get Backup: "),
        },
        Case {
            what: "Backup of another application kind than its strategy's",
            objects: vec![
                backup_like(maria, TENANT, "other-kind", |b| {
                    b["spec"]["applicationRef"]["kind"] = json!("Postgres");
                }),
                restore_job("other-kind", "other-kind", None, None),
            ],
            expect: failed(r#"got "Postgres""#),
        },
        Case {
            what: "Backup whose strategy is in a foreign group",
            objects: vec![
                backup_like(maria, TENANT, "foreign-group", |b| {
                    b["spec"]["strategyRef"]["apiGroup"] = json!("example.org");
                }),
                restore_job("foreign-group", "foreign-group", None, None),
            ],
            expect: failed("StrategyRef.APIGroup doesn't match: example.org"),
        },
        Case {
            what: "Backup whose strategy is of an unknown kind",
            objects: vec![
                backup_like(maria, TENANT, "unknown-strategy", |b| {
                    b["spec"]["strategyRef"]["kind"] = json!("Frobnicator");
                }),
                restore_job("unknown-strategy", "unknown-strategy", None, None),
            ],
            expect: failed("StrategyRef.Kind not supported: Frobnicator"),
        },
        Case {
            what: "Backup not Ready (phase Failed)",
            objects: vec![
                backup_like(maria, TENANT, "not-ready", |b| {
                    b["status"]["phase"] = json!("Failed");
                }),
                restore_job("not-ready", "not-ready", None, None),
            ],
            expect: failed(format!(
                r#"Backup {TENANT}/not-ready is not Ready (status.phase "Failed")"#
            )),
        },
        Case {
            what: "Backup without the operator backup's name in driverMetadata",
            objects: vec![
                backup_like(maria, TENANT, "no-metadata", |b| {
                    b["spec"]["driverMetadata"] = json!({"ключ": "значение"});
                }),
                restore_job("no-metadata", "no-metadata", None, None),
            ],
            expect: failed("Backup driverMetadata is missing k8s.mariadb.com/backup-name"),
        },
        Case {
            what: "Backup whose operator backup is gone",
            objects: vec![
                backup_like(maria, TENANT, "reaped", |b| {
                    b["spec"]["driverMetadata"]["k8s.mariadb.com/backup-name"] = json!("reaped");
                }),
                restore_job("reaped", "reaped", None, None),
            ],
            expect: failed(format!("k8s.mariadb.com/Backup {TENANT}/reaped not found")),
        },
        Case {
            what: "target application missing (short deadline)",
            objects: vec![restore_job(
                "target-missing",
                "nightly",
                Some(apps_ref("MariaDB", "ghost")),
                Some(json!({"restoreTimeoutSeconds": 2})),
            )],
            expect: failed(format!(
                "target k8s.mariadb.com/MariaDB {TENANT}/mariadb-ghost not found within 2s"
            )),
        },
        Case {
            what: "target of another application kind",
            objects: vec![restore_job(
                "target-kind",
                "nightly",
                Some(apps_ref("Redis", "cache")),
                None,
            )],
            expect: failed(r#"target applicationRef.kind="Redis" is not supported by the MariaDB driver"#),
        },
        Case {
            what: "target in a foreign API group",
            objects: vec![restore_job(
                "target-group",
                "nightly",
                Some(json!({"apiGroup": "example.com", "kind": "MariaDB", "name": "shop"})),
                None,
            )],
            expect: failed(r#"target applicationRef.apiGroup="example.com" is not supported"#),
        },
        Case {
            what: "restoreTimeoutSeconds a boolean",
            objects: vec![mariadb_with("timeout-bool", json!({"restoreTimeoutSeconds": true}))],
            expect: Expect::Warned(
                "MalformedOptions",
                "restoreTimeoutSeconds: expected an integer, got a boolean".into(),
            ),
        },
        Case {
            what: "restoreTimeoutSeconds a string",
            objects: vec![mariadb_with("timeout-string", json!({"restoreTimeoutSeconds": "30"}))],
            expect: Expect::Warned(
                "MalformedOptions",
                "restoreTimeoutSeconds: expected an integer, got a string".into(),
            ),
        },
        Case {
            what: "restoreTimeoutSeconds negative",
            objects: vec![mariadb_with("timeout-negative", json!({"restoreTimeoutSeconds": -5}))],
            expect: Expect::Warned(
                "RestoreOptionIgnored",
                "spec.options.restoreTimeoutSeconds is -5, not a positive number of seconds; the default 30m0s applies".into(),
            ),
        },
        Case {
            what: "restoreTimeoutSeconds zero",
            objects: vec![mariadb_with("timeout-zero", json!({"restoreTimeoutSeconds": 0}))],
            expect: Expect::Warned(
                "RestoreOptionIgnored",
                "spec.options.restoreTimeoutSeconds is 0".into(),
            ),
        },
        Case {
            what: "restoreTimeoutSeconds 1e30 (a number that is no integer)",
            objects: vec![mariadb_with("timeout-float", json!({"restoreTimeoutSeconds": 1e30}))],
            expect: Expect::Warned(
                "MalformedOptions",
                "restoreTimeoutSeconds: expected an integer, got a number".into(),
            ),
        },
        Case {
            what: "restoreTimeoutSeconds above the 64-bit signed range",
            objects: vec![mariadb_with(
                "timeout-u64",
                json!({"restoreTimeoutSeconds": u64::MAX}),
            )],
            expect: Expect::Warned(
                "MalformedOptions",
                "restoreTimeoutSeconds: expected an integer, got a number".into(),
            ),
        },
        Case {
            what: "restoreTimeoutSeconds the largest 64-bit integer (works)",
            objects: vec![mariadb_with(
                "timeout-max",
                json!({"restoreTimeoutSeconds": i64::MAX}),
            )],
            expect: Expect::Succeeded,
        },
        Case {
            what: "an option key MariaDB does not know",
            objects: vec![mariadb_with("unknown-key", json!({"retries": 3}))],
            expect: Expect::Warned(
                "UnknownRestoreOption",
                "spec.options.retries is not a recognised MariaDB restore option".into(),
            ),
        },
        Case {
            what: "a unicode option key with a 200 KiB value",
            objects: vec![mariadb_with(
                "unicode-key",
                json!({"ключ🚀": "v".repeat(200 * 1024)}),
            )],
            expect: Expect::Warned(
                "UnknownRestoreOption",
                "spec.options.ключ🚀 is not a recognised MariaDB restore option".into(),
            ),
        },
        Case {
            what: "MongoDB recoveryTime not a time",
            objects: vec![mongodb_with("pitr-words", json!({"recoveryTime": "yesterday"}))],
            expect: failed(r#"invalid restoreJob.spec.options.recoveryTime: recoveryTime "yesterday" is not a valid RFC3339 timestamp"#),
        },
        Case {
            what: "MongoDB recoveryTime with a space instead of T (not RFC 3339)",
            objects: vec![mongodb_with(
                "pitr-space",
                json!({"recoveryTime": "2026-01-02 03:04:05Z"}),
            )],
            expect: failed("is not a valid RFC3339 timestamp"),
        },
        Case {
            what: "MongoDB recoveryTime an object",
            objects: vec![mongodb_with(
                "pitr-object",
                json!({"recoveryTime": {"at": "2026-01-02T03:04:05Z"}}),
            )],
            expect: failed("restoreJob.spec.options carries a recoveryTime but is malformed (decode restoreJob.spec.options: recoveryTime: expected a string, got an object)"),
        },
        Case {
            what: "MongoDB recoveryTime 100 years in the future",
            objects: vec![mongodb_with("pitr-future", json!({"recoveryTime": in_100_years}))],
            expect: failed(format!(
                "invalid restoreJob.spec.options.recoveryTime: recoveryTime {in_100_years} is in the future"
            )),
        },
        Case {
            what: "MongoDB recoveryTime before the Unix epoch",
            objects: vec![mongodb_with(
                "pitr-1969",
                json!({"recoveryTime": "1969-12-31T23:59:59Z"}),
            )],
            expect: failed(format!(
                "recoveryTime 1969-12-31T23:59:59Z is before the Backup's takenAt {}",
                mongo["spec"]["takenAt"].as_str().unwrap()
            )),
        },
        Case {
            what: "MongoDB restoreTimeoutSeconds negative, with an unknown key",
            objects: vec![mongodb_with(
                "mongo-negative",
                json!({"restoreTimeoutSeconds": -1, "zeta": true}),
            )],
            expect: Expect::Warned(
                "RestoreOptionIgnored",
                "spec.options.restoreTimeoutSeconds is -1".into(),
            ),
        },
        Case {
            what: "RestoreJob name at the 253-character limit (too long for the owned-by label)",
            objects: vec![restore_job(&name_253, "nightly", None, None)],
            expect: failed("metadata.name is 253 characters long; the objects a restore creates carry it in the label backups.cozystack.io/owned-by.BackupJobName"),
        },
        Case {
            what: "RestoreJob name at the 63-character label limit (works)",
            objects: vec![restore_job(&name_63, "nightly", None, None)],
            expect: Expect::Succeeded,
        },
        Case {
            what: "250 KiB unicode annotation and a bidi-control annotation on a job (works)",
            objects: vec![annotated],
            expect: Expect::Succeeded,
        },
    ]
}

fn resource(body: &Value) -> ApiResource {
    match body["kind"].as_str().unwrap() {
        "Backup" => ApiResource::erase::<Backup>(&()),
        "RestoreJob" => ApiResource::erase::<RestoreJob>(&()),
        other => panic!("no resource for {other}"),
    }
}

/// Whether the case's expectation holds now; `Err` says what is there instead.
async fn check(p: &Platform, case: &Case) -> Result<(), String> {
    let target = case.objects.last().unwrap();
    let name = target["metadata"]["name"].as_str().unwrap();
    let job = p
        .restores(TENANT)
        .get(name)
        .await
        .map_err(|e| e.to_string())?;
    let phase = job
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default();
    let now = format!("phase {phase:?}, Ready {:.300?}", ready(&job));
    let ok = match &case.expect {
        Expect::Failed(fragment) => {
            phase == "Failed"
                && ready(&job)
                    .is_some_and(|(r, m)| r == "RestoreFailed" && m.contains(fragment.as_str()))
        }
        Expect::Succeeded => phase == "Succeeded",
        Expect::Warned(reason, fragment) => {
            let events = p.events(TENANT, name).await;
            let warned = events
                .iter()
                .any(|(t, r, n)| t == "Warning" && r == reason && n.contains(fragment.as_str()));
            if !warned {
                return Err(format!("{now}; Events: {events:.600?}"));
            }
            phase == "Succeeded"
        }
    };
    ok.then_some(()).ok_or(now)
}

/// The MariaDB application `name` in `namespace` and the operator MariaDB its chart renders.
async fn mariadb_app(p: &Platform, namespace: &str, name: &str) {
    p.app_of(
        &ApiResource::erase::<apps::MariaDB>(&()),
        namespace,
        name,
        json!({"replicas": 1}),
    )
    .await;
    p.apply(
        &ApiResource::erase::<mariadb::MariaDB>(&()),
        json!({"apiVersion": "k8s.mariadb.com/v1alpha1", "kind": "MariaDB",
               "metadata": {"name": format!("mariadb-{name}"), "namespace": namespace},
               "spec": {"replicas": 1}}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_restores_end_in_named_reasons_and_spare_other_tenants() {
    let mut p = Platform::start(
        "mariadb,psmdb",
        &[GOOD],
        vec![api::thirdparty::permissive_crd::<apps::MariaDB>(true)],
    )
    .await;
    p.strategy(
        &ApiResource::erase::<api::strategy::MariaDB>(&()),
        "mariadb",
        json!({"storage": {"s3": {
            "bucket": "bucket-cozy-backups", "endpoint": "seaweedfs-s3.tenant-root.svc:8333",
            "prefix": "{{ .Application.metadata.namespace }}/{{ .Application.metadata.name }}/",
            "accessKeyIdSecretKeyRef": {"name": "cozy-backups-creds", "key": "AWS_ACCESS_KEY_ID"},
            "secretAccessKeySecretKeyRef": {"name": "cozy-backups-creds", "key": "AWS_SECRET_ACCESS_KEY"},
            "tls": {"enabled": false}}}, "compression": "gzip"}),
    )
    .await;
    p.class("mariadb", "MariaDB", "MariaDB", "mariadb", &[])
        .await;
    p.strategy(
        &ApiResource::erase::<api::strategy::MongoDB>(&()),
        "mongo",
        json!({"storageName": "s3-storage", "type": "logical", "compressionType": "gzip"}),
    )
    .await;
    p.class("mongo", "MongoDB", "MongoDB", "mongo", &[]).await;
    mariadb_app(&p, TENANT, "shop").await;
    mariadb_app(&p, GOOD, "shop").await;
    p.app::<apps::MongoDB>(
        "orders",
        json!({"replicas": 3, "backup": {"enabled": true}}),
    )
    .await;
    let s3 = json!({"bucket": "bucket-cozy-backups", "prefix": format!("{TENANT}/orders"),
                    "region": "us-east-1", "endpointUrl": "http://seaweedfs-s3.tenant-root.svc:8333",
                    "credentialsSecret": "mongodb-orders-s3-creds"});
    p.apply(
        &ApiResource::erase::<percona::PerconaServerMongoDB>(&()),
        json!({"apiVersion": "psmdb.percona.com/v1", "kind": "PerconaServerMongoDB",
               "metadata": {"name": "mongodb-orders", "namespace": TENANT},
               "spec": {"crVersion": "1.20.1", "backup": {"enabled": true,
                        "storages": {"s3-storage": {"type": "s3", "s3": s3}}}}}),
    )
    .await;
    let maria = p
        .backup(TENANT, "nightly", "MariaDB", "shop", "mariadb")
        .await;
    let mongo = p
        .backup(TENANT, "mongo-nightly", "MongoDB", "orders", "mongo")
        .await;
    p.backup(GOOD, "nightly", "MariaDB", "shop", "mariadb")
        .await;
    let cases = cases(
        &serde_json::to_value(&maria).unwrap(),
        &serde_json::to_value(&mongo).unwrap(),
    );
    assert!(cases.len() >= 30, "{}", cases.len());

    // Everything at once, the well-formed restore of another tenant in the middle of it.
    let (first, rest) = cases.split_at(cases.len() / 2);
    for case in first {
        for o in &case.objects {
            p.apply(&resource(o), o.clone()).await;
        }
    }
    p.restore(GOOD, "good", "nightly", None, json!(null)).await;
    for case in rest {
        for o in &case.objects {
            p.apply(&resource(o), o.clone()).await;
        }
    }

    p.succeeded(GOOD, "good").await;
    for case in &cases {
        harness::bad_input::settle(case.what, &case.expect, WAIT, || check(&p, case)).await;
    }

    // Nothing was created for a refused point in time.
    let restores = ApiResource::erase::<percona::PerconaServerMongoDBRestore>(&());
    for job in ["pitr-future", "pitr-1969", "pitr-words"] {
        assert!(
            p.restored_by(&restores, TENANT, job).await.is_empty(),
            "{job}"
        );
    }
    // A well-formed job records no option Warning.
    let good_events = p.events(GOOD, "good").await;
    assert!(
        good_events.iter().all(|(t, _, _)| t != "Warning"),
        "{good_events:?}"
    );

    p.h.daemon("restore-orchestrator")
        .unwrap()
        .assert_unharmed();
    p.finish(&[TENANT, GOOD]).await;
}
