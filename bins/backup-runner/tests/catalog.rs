//! The Backup catalog's records in the system bucket (docs/disaster-recovery.md), end to end: the
//! real `backup-runner` (as its ServiceAccount, `--catalog=true`) and `strategy-renderer` against
//! the emulator, `operator-sims` with the S3 server and the COSI provisioner (the bucket and its
//! credentials Secret). A record follows its Backup (written, deleted with it, caught up for
//! Backups made before the runner started); records a tenant could write with the bucket keys it
//! holds (unsigned, signed with its own key, moved to another namespace's path, tampered,
//! truncated, not JSON, too large, 10,000 junk keys) are refused, counted and reported, and nothing
//! is created from them; a runner killed while writing or while re-creating converges without
//! duplicates.

use crate::support::{WAIT, bin};

use std::time::{Duration, Instant};

use api::backups::{Backup, BackupArtifact, BackupStatus};
use backup_runner::records::{Bucket, RECORD_ANNOTATION, RESTORED_LABEL};
use backup_storage::catalog::{self as record};
use backup_storage::s3::{Got, S3Client, S3Config};
use futures::StreamExt;
use harness::dataplane::DataPlane;
use harness::{Admin, DaemonSpec, Harness, eventually_within};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};

const A: &str = "tenant-a";
const B: &str = "tenant-b";
const CONTROLLER_NS: &str = "cozy-backup-controller";
const KEY_SECRET: &str = "cozy-backups-catalog-key";
const REJECTED: &str = "cozy_backups_backup_runner_catalog_records_rejected_total";

/// The platform of these tests.
pub(crate) struct Dr {
    pub(crate) h: Harness,
    pub(crate) dp: DataPlane,
}

/// The runner with the catalog on, trusting the data plane's CA, syncing every second.
pub(crate) fn runner_spec(dp: &DataPlane) -> DaemonSpec {
    DaemonSpec::new("backup-runner", bin("backup-runner")).args([
        "--catalog=true".to_owned(),
        format!("--catalog-ca-file={}", dp.ca_file.display()),
        "--catalog-sync-interval=1s".to_owned(),
    ])
}

impl Dr {
    /// Emulator, data plane (`sims`), renderer (the bucket claim); the runner only when `runner`.
    pub(crate) async fn start(namespaces: &[&str], sims: &str, runner: bool) -> Dr {
        let mut h = Harness::start().await.unwrap();
        let mut all = vec!["tenant-root", "cozy-velero", CONTROLLER_NS];
        all.extend_from_slice(namespaces);
        h.create_namespaces(&all).await.unwrap();
        let dp = h
            .spawn_dataplane(sims, &["--cosi-delay-ms=10"])
            .await
            .unwrap();
        h.spawn_ready(
            DaemonSpec::new("strategy-renderer", bin("strategy-renderer"))
                .args([format!("--endpoint={}", dp.http)]),
            WAIT,
        )
        .await
        .unwrap();
        let mut dr = Dr { h, dp };
        if runner {
            dr.spawn_runner().await;
        }
        dr
    }

    pub(crate) async fn spawn_runner(&mut self) -> Admin {
        let spec = runner_spec(&self.dp);
        self.h
            .spawn_ready(spec, WAIT)
            .await
            .unwrap()
            .admin()
            .await
            .unwrap()
    }

    pub(crate) async fn runner(&mut self) -> Admin {
        self.h
            .daemon("backup-runner")
            .unwrap()
            .admin()
            .await
            .unwrap()
    }

    /// The bucket with the system credentials, as anyone holding the bucket keys reaches it (the
    /// projected `cozy-backups-creds` of every tenant namespace carries the same keys).
    pub(crate) async fn s3(&self) -> S3Client {
        let creds = eventually_within("the system bucket's credentials", WAIT, || async {
            self.h
                .secret_data("tenant-root", "bucket-cozy-backups-system-credentials")
                .await
        })
        .await;
        S3Client::new(S3Config {
            endpoint: self.dp.https.clone(),
            bucket: creds["bucketName"].clone(),
            region: String::new(),
            access_key: creds["accessKey"].clone(),
            secret_key: creds["secretKey"].clone(),
            ca_pem: Some(std::fs::read(&self.dp.ca_file).unwrap()),
        })
        .unwrap()
    }

    /// The platform's signing key (created by the runner).
    pub(crate) async fn key(&self) -> Vec<u8> {
        eventually_within("the catalog signing key", WAIT, || async {
            self.h
                .secret_data(CONTROLLER_NS, KEY_SECRET)
                .await
                .map(|d| d[backup_runner::records::KEY_DATA].clone())
        })
        .await;
        let s =
            Api::<k8s_openapi::api::core::v1::Secret>::namespaced(self.h.client(), CONTROLLER_NS)
                .get(KEY_SECRET)
                .await
                .unwrap();
        s.data.unwrap()[backup_runner::records::KEY_DATA].0.clone()
    }

    /// The bucket side as the platform has it (S3 and the real key).
    pub(crate) async fn bucket(&self) -> Bucket {
        Bucket::new(self.s3().await, self.key().await)
    }

    pub(crate) fn backups(&self, ns: &str) -> Api<Backup> {
        Api::namespaced(self.h.client(), ns)
    }

    /// Waits until Backup `ns/name` carries the record annotation, and returns it.
    pub(crate) async fn recorded(&self, ns: &str, name: &str, within: Duration) -> Backup {
        let api = self.backups(ns);
        eventually_within(&format!("the record of {ns}/{name}"), within, || async {
            api.get_opt(name)
                .await
                .ok()
                .flatten()
                .filter(|b| b.annotations().contains_key(RECORD_ANNOTATION))
        })
        .await
    }
}

/// A catalog Backup as a driver records it, with an artifact.
pub(crate) fn backup(ns: &str, name: &str) -> Backup {
    let mut b = Backup::test(name)
        .namespace(ns)
        .for_app("Postgres", "orders-db")
        .driver_metadata(&[("cnpg.io/backup-name", name)])
        .build();
    b.status = Some(BackupStatus {
        phase: Some("Ready".into()),
        artifact: Some(BackupArtifact {
            uri: format!("cnpg://postgres-orders-db/{name}"),
            size_bytes: None,
            checksum: None,
        }),
        ..Default::default()
    });
    b
}

async fn get(s3: &S3Client, key: &str) -> Option<Vec<u8>> {
    match s3.get_capped(key, record::RECORD_MAX_BYTES).await.unwrap() {
        Got::Bytes(b) => Some(b),
        Got::Missing => None,
        Got::TooLarge => panic!("{key} too large"),
    }
}

/// Every key under `prefix`.
async fn keys(s3: &S3Client, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut token = None;
    loop {
        let page = s3.list_page(prefix, token.as_deref()).await.unwrap();
        out.extend(page.objects.into_iter().map(|o| o.key));
        match page.next {
            Some(t) => token = Some(t),
            None => return out,
        }
    }
}

fn rejected(admin: &Admin, reason: &str) -> f64 {
    admin
        .metrics()
        .get(REJECTED, &[("reason", reason)])
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_follows_its_backup() {
    let dr = Dr::start(&[A], "s3,cosi", true).await;
    let s3 = dr.s3().await;
    dr.h.create(A, &backup(A, "nightly-1")).await;
    let recorded = dr.recorded(A, "nightly-1", WAIT).await;
    let key = record::object_key(A, "nightly-1");
    let bytes = get(&s3, &key).await.expect("the record is in the bucket");
    // The record verifies under the platform's key and is the Backup as the API has it.
    let bucket = dr.bucket().await;
    let restored = bucket.open(&key, &bytes).unwrap();
    assert_eq!(restored.spec, recorded.spec);
    assert_eq!(restored.status, recorded.status);
    assert_eq!(
        restored.annotations()[RECORD_ANNOTATION],
        recorded.annotations()[RECORD_ANNOTATION]
    );
    // No server metadata, no credential, no key in it.
    let text = String::from_utf8(bytes.clone()).unwrap();
    for absent in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "managedFields",
        "finalizers",
    ] {
        assert!(!text.contains(absent), "{absent} in {text}");
    }
    let creds =
        dr.h.secret_data("tenant-root", "bucket-cozy-backups-system-credentials")
            .await
            .unwrap();
    assert!(!text.contains(&creds["accessKey"]) && !text.contains(&creds["secretKey"]));
    assert!(!text.contains(&hex::encode(dr.key().await)));
    // The key never reaches a tenant namespace.
    assert!(dr.h.secret_data(A, KEY_SECRET).await.is_none());

    // Deleting the Backup deletes its record through the finalizer.
    dr.backups(A)
        .delete("nightly-1", &DeleteParams::default())
        .await
        .unwrap();
    eventually_within("the Backup and its record gone", WAIT, || async {
        let gone = dr.backups(A).get_opt("nightly-1").await.unwrap().is_none();
        (gone && get(&s3, &key).await.is_none()).then_some(())
    })
    .await;
    let mut dr = dr;
    let m = dr.runner().await.metrics();
    assert!(
        m.value(
            "cozy_backups_backup_runner_catalog_records_written_total",
            &[]
        ) >= 1.0
    );
    assert_eq!(
        m.value(
            "cozy_backups_backup_runner_catalog_records_deleted_total",
            &[]
        ),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_records_are_refused_counted_and_create_nothing() {
    let mut dr = Dr::start(&[A, B], "s3,cosi", true).await;
    let tenant = dr.s3().await;
    let bucket = dr.bucket().await;
    dr.h.create(A, &backup(A, "genuine")).await;
    dr.recorded(A, "genuine", WAIT).await;
    let genuine = get(&tenant, &record::object_key(A, "genuine"))
        .await
        .unwrap();

    let tenant_key = b"a key the tenant made up itself!".to_vec();
    let forged = Bucket::new(tenant.clone(), tenant_key);
    let (forged_bytes, _) = forged.seal(&backup(A, "forged"));
    let mut unsigned: serde_json::Value =
        serde_json::from_slice(&bucket.seal(&backup(A, "unsigned")).0).unwrap();
    unsigned.as_object_mut().unwrap().remove("mac");
    let mut tampered: serde_json::Value =
        serde_json::from_slice(&bucket.seal(&backup(A, "tampered")).0).unwrap();
    tampered["payload"]["status"]["artifact"]["uri"] = "cnpg://postgres-other-db/evil".into();
    let truncated = bucket.seal(&backup(A, "truncated")).0;
    let writes: Vec<(String, Vec<u8>)> = vec![
        (record::object_key(A, "forged"), forged_bytes),
        (
            record::object_key(A, "unsigned"),
            serde_json::to_vec(&unsigned).unwrap(),
        ),
        (
            record::object_key(A, "tampered"),
            serde_json::to_vec(&tampered).unwrap(),
        ),
        // tenant-a's genuine record planted at tenant-b's path.
        (record::object_key(B, "genuine"), genuine.clone()),
        (
            record::object_key(A, "truncated"),
            truncated[..truncated.len() / 2].to_vec(),
        ),
        (
            record::object_key(A, "not-json"),
            b"hello, catalog".to_vec(),
        ),
        (
            record::object_key(A, "huge"),
            vec![b' '; record::RECORD_MAX_BYTES as usize + 1],
        ),
        ("catalog/v1/Tenant-A/x.json".into(), genuine.clone()),
        // The positive control: a record the platform signed, whose Backup is missing.
        (
            record::object_key(A, "honest"),
            bucket.seal(&backup(A, "honest")).0,
        ),
    ];
    for (key, body) in writes {
        tenant.put(&key, body).await.unwrap();
    }

    let honest = eventually_within("the honest record restored", WAIT, || async {
        dr.backups(A).get_opt("honest").await.unwrap()
    })
    .await;
    assert_eq!(honest.labels()[RESTORED_LABEL], "true");
    assert_eq!(honest.spec, backup(A, "honest").spec);
    assert_eq!(honest.status, backup(A, "honest").status);
    let admin = dr.runner().await;
    let expected = [
        ("bad_signature", 3.0),
        ("path_mismatch", 1.0),
        ("malformed", 2.0),
        ("too_large", 1.0),
        ("bad_key", 1.0),
    ];
    eventually_within("every forgery counted", WAIT, || async {
        expected
            .iter()
            .all(|(r, n)| rejected(&admin, r) == *n)
            .then_some(())
    })
    .await;
    // Several more passes: each object version is counted (and reported) once.
    let passes = |a: &Admin| {
        a.metrics().value(
            "cozy_backups_backup_runner_catalog_syncs_total",
            &[("result", "ok")],
        )
    };
    let before = passes(&admin);
    eventually_within("three more passes", WAIT, || async {
        (passes(&admin) >= before + 3.0).then_some(())
    })
    .await;
    for (reason, n) in expected {
        assert_eq!(rejected(&admin, reason), n, "{reason}");
    }
    // Nothing but the honest Backup was created.
    let names = |ns: &'static str| {
        let api = dr.backups(ns);
        async move {
            let mut v: Vec<String> = api
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .iter()
                .map(|b| b.name_any())
                .collect();
            v.sort();
            v
        }
    };
    assert_eq!(names(A).await, ["genuine", "honest"]);
    assert!(names(B).await.is_empty());
    // One Warning Event per refusal in the controller namespace; a Normal Event on the restore.
    let events = dr.h.events_about(CONTROLLER_NS, KEY_SECRET).await;
    let refused: Vec<_> = events
        .iter()
        .filter(|(t, r, _)| t == "Warning" && r == "CatalogRecordRefused")
        .collect();
    assert_eq!(refused.len(), 8, "{events:#?}");
    assert!(
        refused
            .iter()
            .any(|(_, _, n)| n.contains("catalog/v1/tenant-b/genuine.json")
                && n.contains("path_mismatch"))
    );
    let restored = dr.h.events_about(A, "honest").await;
    assert!(
        restored
            .iter()
            .any(|(t, r, _)| t == "Normal" && r == "RestoredFromCatalog"),
        "{restored:#?}"
    );
    // No secret in any Event or the runner's log.
    let creds =
        dr.h.secret_data("tenant-root", "bucket-cozy-backups-system-credentials")
            .await
            .unwrap();
    let key_hex = hex::encode(dr.key().await);
    let log = dr.h.daemon("backup-runner").unwrap().log();
    for (_, _, note) in &events {
        assert!(!note.contains(&creds["secretKey"]) && !note.contains(&key_hex));
    }
    assert!(!log.contains(&creds["secretKey"]) && !log.contains(&key_hex));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_junk_keys_are_refused_in_bounded_time_and_memory() {
    let mut dr = Dr::start(&[A], "s3,cosi", false).await;
    let tenant = dr.s3().await;
    let started = Instant::now();
    // Half at record paths of an existing namespace (each one is fetched and refused), half at
    // keys that are not record paths (refused from the listing alone).
    futures::stream::iter(0..10_000)
        .map(|i| {
            let tenant = tenant.clone();
            async move {
                let key = if i % 2 == 0 {
                    record::object_key(A, &format!("junk-{i}"))
                } else {
                    format!("catalog/v1/junk/{i}")
                };
                tenant
                    .put(&key, format!("junk {i}").into_bytes())
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    let written = started.elapsed();
    let admin = dr.spawn_runner().await;
    let started = Instant::now();
    eventually_within("10,000 refusals", Duration::from_secs(600), || async {
        let m = admin.metrics();
        (m.sum(REJECTED, &[]) >= 10_000.0).then_some(())
    })
    .await;
    let refused_in = started.elapsed();
    let pid = dr.h.daemon("backup-runner").unwrap().pid();
    println!(
        "junk keys: 10,000 written in {written:?}; refused in {refused_in:?}; runner {}",
        harness::rss(pid)
    );
    assert_eq!(rejected(&admin, "malformed"), 5_000.0);
    assert_eq!(rejected(&admin, "bad_key"), 5_000.0);
    assert!(
        dr.backups(A)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    // Events stay few: ten per pass and one summary, and a refusal is reported once.
    let events = dr.h.events_about(CONTROLLER_NS, KEY_SECRET).await;
    assert!(events.len() <= 2 * (10 + 1), "{} Events", events.len());
    // Resident memory stays small (a page and a record at a time).
    let status = std::fs::read_to_string(format!("/proc/{}/status", pid.unwrap())).unwrap();
    let hwm_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!(hwm_kb < 256 * 1024, "runner peak RSS {hwm_kb} kB");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_runner_converges_without_duplicates() {
    const N: usize = 150;
    let mut dr = Dr::start(&[A], "s3,cosi", false).await;
    // Backups made before the runner (or the catalog) existed: the catch-up writes their records.
    for i in 0..N {
        dr.h.create(A, &backup(A, &format!("old-{i}"))).await;
    }
    dr.spawn_runner().await;
    let s3 = dr.s3().await;
    eventually_within("some records written", WAIT, || async {
        (keys(&s3, &record::namespace_prefix(A)).await.len() >= N / 5).then_some(())
    })
    .await;
    dr.h.restart("backup-runner", WAIT).await.unwrap();
    for i in 0..N {
        dr.recorded(A, &format!("old-{i}"), WAIT).await;
    }
    assert_eq!(keys(&s3, &record::namespace_prefix(A)).await.len(), N);

    // Records of Backups this cluster lacks (as a previous cluster left them), killed mid-sync.
    let bucket = dr.bucket().await;
    for i in 0..N {
        let (bytes, _) = bucket.seal(&backup(A, &format!("lost-{i}")));
        s3.put(&record::object_key(A, &format!("lost-{i}")), bytes)
            .await
            .unwrap();
    }
    let api = dr.backups(A);
    let restored_count = || async {
        api.list(&ListParams::default().labels(&format!("{RESTORED_LABEL}=true")))
            .await
            .unwrap()
            .items
            .len()
    };
    eventually_within("some Backups re-created", WAIT, || async {
        (restored_count().await >= 1).then_some(())
    })
    .await;
    dr.h.restart("backup-runner", WAIT).await.unwrap();
    eventually_within("every lost Backup re-created", WAIT, || async {
        (restored_count().await == N).then_some(())
    })
    .await;
    let all = dr
        .backups(A)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(all.len(), 2 * N);
    // Each re-created Backup got at most one RestoredFromCatalog Event (a create that found the
    // Backup there says nothing), and the bucket holds one record per Backup.
    for name in ["lost-0", "lost-75", "lost-149"] {
        let n =
            dr.h.events_about(A, name)
                .await
                .iter()
                .filter(|(_, r, _)| r == "RestoredFromCatalog")
                .count();
        assert!(n <= 1, "{name}: {n} Events");
    }
    assert_eq!(keys(&s3, &record::namespace_prefix(A)).await.len(), 2 * N);
}

/// Runs the kubectl plugin's binary against the test's API as the admin.
fn ctl(dr: &Dr, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(bin("cozy-backups-ctl"))
        .arg(format!("--kubeconfig={}", dr.h.kubeconfig_path().display()))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn row<'a>(out: &'a str, first: &str) -> &'a str {
    out.lines()
        .find(|l| l.split_whitespace().next() == Some(first))
        .unwrap_or_else(|| panic!("no row {first} in\n{out}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plugin_shows_status_previews_the_sync_and_exports() {
    let dr = Dr::start(&[A, B], "s3,cosi", true).await;
    let s3 = dr.s3().await;
    let bucket = dr.bucket().await;
    dr.h.create(A, &backup(A, "genuine")).await;
    dr.recorded(A, "genuine", WAIT).await;
    // A Backup whose record was lost, a record whose namespace is gone, a forgery.
    dr.h.create(B, &backup(B, "only-here")).await;
    dr.recorded(B, "only-here", WAIT).await;
    s3.delete(&record::object_key(B, "only-here"))
        .await
        .unwrap();
    s3.put(
        &record::object_key("tenant-gone", "lost"),
        bucket.seal(&backup("tenant-gone", "lost")).0,
    )
    .await
    .unwrap();
    let forged = Bucket::new(s3.clone(), b"a key the tenant made up itself!".to_vec());
    s3.put(
        &record::object_key(A, "forged"),
        forged.seal(&backup(A, "forged")).0,
    )
    .await
    .unwrap();
    let ca = format!("--ca-file={}", dr.dp.ca_file.display());

    let (code, out, err) = ctl(&dr, &["catalog", "status", &ca]);
    assert_eq!(code, 0, "{err}");
    assert!(row(&out, "tenant-a/genuine").contains("in-both"), "{out}");
    assert!(
        row(&out, "tenant-b/only-here").contains("cluster-only"),
        "{out}"
    );
    assert!(
        row(&out, "tenant-gone/lost").contains("bucket-only"),
        "{out}"
    );
    assert!(
        row(&out, "catalog/v1/tenant-a/forged.json").contains("refused:bad_signature"),
        "{out}"
    );

    let (code, _, err) = ctl(&dr, &["catalog", "sync", &ca]);
    assert_eq!(code, 1);
    assert!(err.contains("--dry-run"), "{err}");
    let (code, out, err) = ctl(&dr, &["catalog", "sync", "--dry-run", &ca]);
    assert_eq!(code, 0, "{err}");
    assert!(row(&out, "tenant-a/genuine").contains("keep"), "{out}");
    assert!(
        row(&out, "tenant-gone/lost").contains("namespace tenant-gone does not exist"),
        "{out}"
    );
    assert!(
        row(&out, "tenant-a/forged").contains("refuse (bad_signature)"),
        "{out}"
    );

    let (code, out, err) = ctl(&dr, &["catalog", "export", "-n", A, &ca]);
    assert_eq!(code, 0, "{err}");
    let records: serde_json::Value = serde_json::from_str(&out).unwrap();
    let records = records.as_array().unwrap();
    assert_eq!(records.len(), 2, "{out}");
    let genuine = records
        .iter()
        .find(|r| r["key"] == "catalog/v1/tenant-a/genuine.json")
        .unwrap();
    assert_eq!(
        genuine["payload"]["status"]["artifact"]["uri"],
        "cnpg://postgres-orders-db/genuine"
    );
    // No secret in anything it printed.
    let creds =
        dr.h.secret_data("tenant-root", "bucket-cozy-backups-system-credentials")
            .await
            .unwrap();
    assert!(!out.contains(&creds["secretKey"]) && !out.contains(&hex::encode(dr.key().await)));

    // A missing Secret is named, with the flag that overrides it.
    let (code, _, err) = ctl(
        &dr,
        &[
            "catalog",
            "status",
            &ca,
            "--key-secret=cozy-backup-controller/nope",
        ],
    );
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("Secret cozy-backup-controller/nope not found (--key-secret)"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_re_created_backups_and_their_records_as_the_originals() {
    let mut dr = Dr::start(&[A], "s3,cosi", true).await;
    let s3 = dr.s3().await;
    let bucket = dr.bucket().await;
    // Three Plan-made Backups of a lost cluster, a day apart, only in the bucket.
    let now = chrono::Utc::now();
    let mut names = Vec::new();
    for days in [3i64, 2, 1] {
        let t = now - chrono::Duration::days(days);
        let name = schedule::backup_job_name("nightly", t);
        let mut b = backup(A, &name);
        b.spec.plan_ref = Some(api::LocalObjectReference::new("nightly"));
        b.spec.taken_at =
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t.to_rfc3339().parse().unwrap());
        s3.put(&record::object_key(A, &name), bucket.seal(&b).0)
            .await
            .unwrap();
        names.push(name);
    }
    for name in &names {
        let b = eventually_within(&format!("{name} re-created"), WAIT, || async {
            dr.backups(A).get_opt(name).await.unwrap()
        })
        .await;
        assert_eq!(b.labels()[RESTORED_LABEL], "true");
    }
    // The Plan re-created by the operator, keepLast 1; the retention-cleaner as deployed.
    let mut plan = api::backups::Plan::test("nightly", "0 3 1 1 *")
        .for_app("Postgres", "orders-db")
        .class("cozy-default")
        .build();
    plan.spec.retention_policy = Some(api::backups::RetentionPolicy {
        keep_last: Some(1),
        ..Default::default()
    });
    dr.h.create(A, &plan).await;
    dr.h.spawn_ready(
        DaemonSpec::new("retention-cleaner", bin("retention-cleaner"))
            .args(["--max-delete-percent=100", "--debounce=200ms"]),
        WAIT,
    )
    .await
    .unwrap();
    let newest = names.last().unwrap().clone();
    eventually_within(
        "only the newest Backup and its record left",
        WAIT,
        || async {
            let left: Vec<String> = dr
                .backups(A)
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .iter()
                .map(|b| b.name_any())
                .collect();
            let records = keys(&s3, &record::namespace_prefix(A)).await;
            (left == [newest.clone()] && records == [record::object_key(A, &newest)]).then_some(())
        },
    )
    .await;
    // And the sync does not bring the deleted ones back.
    let admin = dr.runner().await;
    let passes = admin.metrics().value(
        "cozy_backups_backup_runner_catalog_syncs_total",
        &[("result", "ok")],
    );
    eventually_within("two more passes", WAIT, || async {
        (admin.metrics().value(
            "cozy_backups_backup_runner_catalog_syncs_total",
            &[("result", "ok")],
        ) >= passes + 2.0)
            .then_some(())
    })
    .await;
    assert_eq!(
        dr.backups(A)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_after_the_record_write_and_after_a_restore_create_repeats_nothing() {
    let mut dr = Dr::start(&[A], "s3,cosi", false).await;
    let s3 = dr.s3().await;
    let hold = |verb: &str| harness::Hold {
        verb: Some(verb.into()),
        group: Some("backups.cozystack.io".into()),
        resource: Some("backups".into()),
        subresource: Some(String::new()),
        user_agent: Some("backup-runner/".into()),
    };
    // A Backup made before the runner: its writes are the finalizer (patch), the record (PUT),
    // the record annotation (patch). Kill the runner as the finalizer is stored, then as the
    // annotation is, after the record was written.
    dr.h.create(A, &backup(A, "b-0")).await;
    dr.h.emulator().unwrap().hold(hold("patch"));
    dr.spawn_runner().await;
    eventually_within("the finalizer patch held", WAIT, || async {
        (dr.h.emulator().unwrap().held() > 0).then_some(())
    })
    .await;
    dr.h.kill("backup-runner").await.unwrap();
    dr.h.emulator().unwrap().release_holds();
    dr.h.emulator().unwrap().hold(hold("patch"));
    dr.h.restart("backup-runner", WAIT).await.unwrap();
    eventually_within("the annotation patch held", WAIT, || async {
        (dr.h.emulator().unwrap().held() > 1).then_some(())
    })
    .await;
    assert!(
        get(&s3, &record::object_key(A, "b-0")).await.is_some(),
        "the record is written before the annotation"
    );
    dr.h.kill("backup-runner").await.unwrap();
    dr.h.emulator().unwrap().release_holds();
    dr.h.restart("backup-runner", WAIT).await.unwrap();
    let b = dr.recorded(A, "b-0", WAIT).await;
    let bytes = get(&s3, &record::object_key(A, "b-0")).await.unwrap();
    assert_eq!(
        b.annotations()[RECORD_ANNOTATION],
        backup_runner::records::digest(&bytes)
    );
    assert_eq!(keys(&s3, &record::namespace_prefix(A)).await.len(), 1);

    // A record of a Backup this cluster lacks: kill the runner as its create is stored.
    let bucket = dr.bucket().await;
    dr.h.emulator().unwrap().hold(hold("create"));
    s3.put(
        &record::object_key(A, "lost-0"),
        bucket.seal(&backup(A, "lost-0")).0,
    )
    .await
    .unwrap();
    eventually_within("the restore's create held", WAIT, || async {
        (dr.h.emulator().unwrap().held() > 2).then_some(())
    })
    .await;
    dr.h.kill("backup-runner").await.unwrap();
    dr.h.emulator().unwrap().release_holds();
    dr.h.restart("backup-runner", WAIT).await.unwrap();
    let lost = dr.recorded(A, "lost-0", WAIT).await;
    assert_eq!(lost.labels()[RESTORED_LABEL], "true");
    // Let a few passes run: the Backup is never created again, and its record stays one.
    let admin = dr.runner().await;
    eventually_within("two passes after the restart", WAIT, || async {
        (admin.metrics().value(
            "cozy_backups_backup_runner_catalog_syncs_total",
            &[("result", "ok")],
        ) >= 2.0)
            .then_some(())
    })
    .await;
    let audit = dr.h.audit();
    assert_eq!(
        audit.creates_by("backup-runner/", "backups.cozystack.io", "backups"),
        1
    );
    assert_eq!(
        dr.backups(A)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        2
    );
    assert_eq!(keys(&s3, &record::namespace_prefix(A)).await.len(), 2);
}
