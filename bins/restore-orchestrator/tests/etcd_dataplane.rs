//! End to end on the real data plane, Etcd: the simulated etcd-operator runs a real etcd member
//! per EtcdCluster, saves snapshots with `etcdctl snapshot save` into the S3 server (TLS, dev CA)
//! and restores `bootstrap.restore` sources with `etcdctl snapshot restore`; the real
//! `strategy-renderer`, `credentials-projector`, `backup-runner` and `restore-orchestrator`
//! binaries drive it through `cozy-default`.
//!
//! A tenant's key is backed up, changed, and restored in place: `etcdctl get` on the recreated
//! member shows the backed-up value, and the Backup's artifact is the object in the bucket (its
//! size and SHA-256). An upload with keys the S3 server does not know fails the snapshot with S3's
//! words; a snapshot corrupted in the bucket makes the restore fail with etcdctl's own words in the
//! RestoreJob's message, and no member comes up empty; a snapshot missing from the bucket fails the
//! same way.

use std::path::PathBuf;

use crate::dataplane::{READY, bin, condition, phase};

use api::backups::{Backup, RestoreJob};
use api::thirdparty::{apps, etcd, flux};
use harness::dataplane::{DATAPLANE_DEADLINE, DataPlane, apply};
use harness::{DaemonSpec, Harness, eventually_within};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

const NS: &str = "tenant-etcd";
const ENDPOINT: &str = "operator-sims.cozy-backups.io/endpoint";

struct Platform {
    h: Harness,
    dp: DataPlane,
}

impl Platform {
    /// Emulator, the data plane with the etcd-operator simulator, renderer, projector, runner,
    /// orchestrator; the tenant's Etcd application, its HelmRelease and its EtcdCluster.
    async fn start() -> Platform {
        let mut h = Harness::start().await.unwrap();
        h.create_namespaces(&["tenant-root", "cozy-velero", "cozy-backup-controller", NS])
            .await
            .unwrap();
        let crds: Api<CustomResourceDefinition> = Api::all(h.client());
        for crd in [
            api::thirdparty::permissive_crd::<apps::Etcd>(true),
            api::thirdparty::permissive_crd::<flux::HelmRelease>(true),
        ] {
            crds.create(&PostParams::default(), &crd).await.unwrap();
        }
        let dp = h
            .spawn_dataplane("s3,cosi,etcd", &["--cosi-delay-ms=10"])
            .await
            .unwrap();
        h.spawn_renderer_and_projector(&dp, READY).await.unwrap();
        for daemon in ["backup-runner", "restore-orchestrator"] {
            h.spawn_ready(DaemonSpec::new(daemon, bin(daemon)), READY)
                .await
                .unwrap();
        }
        apply(
            &h.dynamic::<apps::Etcd>(NS),
            json!({"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Etcd",
                   "metadata": {"name": "etcd", "namespace": NS}, "spec": {"replicas": 1}}),
        )
        .await;
        apply(
            &h.dynamic::<flux::HelmRelease>(NS),
            json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
                   "metadata": {"name": "etcd", "namespace": NS},
                   "spec": {"chart": {"spec": {"chart": "etcd"}}}}),
        )
        .await;
        apply(
            &h.dynamic::<etcd::EtcdCluster>(NS),
            json!({"apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdCluster",
                   "metadata": {"name": "etcd", "namespace": NS},
                   "spec": {"replicas": 1, "storage": {"size": "1Gi"}}}),
        )
        .await;
        Platform { h, dp }
    }

    /// The live EtcdCluster.
    async fn cluster(&self) -> Option<Value> {
        let c = self
            .h
            .dynamic::<etcd::EtcdCluster>(NS)
            .get_opt("etcd")
            .await
            .ok()??;
        serde_json::to_value(c).ok()
    }

    /// Waits for the live EtcdCluster to be Available and returns where its member listens (the
    /// annotation on its client Service, owned by this very cluster).
    async fn member(&self) -> String {
        let services: Api<Service> = Api::namespaced(self.h.client(), NS);
        eventually_within("EtcdCluster etcd Available", DATAPLANE_DEADLINE, || {
            let services = services.clone();
            async move {
                let c = self.cluster().await?;
                let available = c["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .any(|c| c["type"] == "Available" && c["status"] == "True");
                let svc = services.get_opt("etcd-client").await.ok()??;
                let owned = svc
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| Some(o.uid.as_str()) == c["metadata"]["uid"].as_str());
                (available && owned).then_some(())?;
                svc.metadata.annotations?.get(ENDPOINT).cloned()
            }
        })
        .await
    }

    /// Backs the application up through `cozy-default`; returns the catalog Backup.
    async fn backup(&self, name: &str) -> Backup {
        self.h
            .backup_succeeded(
                NS,
                name,
                ("Etcd", "etcd"),
                "cozy-default",
                DATAPLANE_DEADLINE,
            )
            .await
    }

    /// The file of an `s3://bucket/key` object in the S3 server's directory.
    fn object_file(&self, uri: &str) -> PathBuf {
        let rest = uri.strip_prefix("s3://").expect("an s3:// URI");
        self.dp.data_dir.join("s3").join("buckets").join(rest)
    }

    /// Restores Backup `backup` in place; waits for a terminal phase.
    async fn restore(&self, name: &str, backup: &str, options: Value) -> RestoreJob {
        let job: RestoreJob = serde_json::from_value(json!({
            "apiVersion": "backups.cozystack.io/v1alpha1", "kind": "RestoreJob",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"backupRef": {"name": backup}, "options": options}}))
        .unwrap();
        let api: Api<RestoreJob> = Api::namespaced(self.h.client(), NS);
        api.create(&PostParams::default(), &job).await.unwrap();
        eventually_within(
            &format!("RestoreJob {name} finished"),
            DATAPLANE_DEADLINE,
            || {
                let api = api.clone();
                async move {
                    let j = api.get(name).await.ok()?;
                    j.is_terminal().then_some(j)
                }
            },
        )
        .await
    }
}

/// `etcdctl <args>` against `endpoint`; its stdout, trimmed.
fn etcdctl(endpoint: &str, args: &[&str]) -> String {
    let out = std::process::Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", endpoint])
        .args(args)
        .output()
        .expect("etcdctl runs");
    assert!(
        out.status.success(),
        "etcdctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn get(endpoint: &str, key: &str) -> String {
    etcdctl(endpoint, &["get", key, "--print-value-only"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_dataplane_backs_up_to_s3_and_restores_in_place() {
    let mut p = Platform::start().await;
    let before = p.member().await;
    etcdctl(&before, &["put", "greeting", "hello"]);

    // The artifact is the object in the bucket: its size and SHA-256.
    let backup = p.backup("nightly").await;
    let artifact = backup.status.unwrap().artifact.unwrap();
    let bytes = std::fs::read(p.object_file(&artifact.uri)).expect("the snapshot object");
    assert_eq!(artifact.size_bytes, Some(bytes.len() as i64));
    assert_eq!(
        artifact.checksum.as_deref(),
        Some(operator_sims::etcd_plane::checksum(&bytes).as_str())
    );
    assert!(
        artifact.uri.ends_with(".db") && artifact.uri.contains(&format!("/{NS}/etcd/")),
        "{}",
        artifact.uri
    );

    etcdctl(&before, &["put", "greeting", "changed"]);
    etcdctl(&before, &["put", "later", "x"]);
    let job = p.restore("back", "nightly", json!(null)).await;
    assert_eq!(phase(&job), "Succeeded", "{:?}", job.status);
    assert_eq!(condition(&job, "TargetPurged").1, "ClusterPurged");

    // A new member (the client Service of the new cluster uid) with the backed-up data.
    let after = p.member().await;
    assert_eq!(get(&after, "greeting"), "hello");
    assert_eq!(get(&after, "later"), "", "written after the backup");
    let cluster = p.cluster().await.unwrap();
    assert_eq!(
        cluster["spec"]["bootstrap"]["restore"]["source"]["s3"]["key"]
            .as_str()
            .map(|k| artifact.uri.ends_with(k)),
        Some(true)
    );
    p.h.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_dataplane_refused_uploads_and_corrupt_snapshots_fail_with_the_tools_words() {
    let mut p = Platform::start().await;
    let before = p.member().await;
    etcdctl(&before, &["put", "greeting", "hello"]);
    let backup = p.backup("nightly").await;
    let uri = backup.status.unwrap().artifact.unwrap().uri;

    // An upload the S3 server refuses (keys it does not know) fails the snapshot with its words.
    p.h.create(
        NS,
        &api::test_util::source_secret(
            "wrong-creds",
            NS,
            &[
                ("AWS_ACCESS_KEY_ID", "AKIAUNKNOWN"),
                ("AWS_SECRET_ACCESS_KEY", "not-the-secret"),
            ],
        ),
    )
    .await;
    let snapshots = p.h.dynamic::<etcd::EtcdSnapshot>(NS);
    let listed = snapshots.list(&Default::default()).await.unwrap();
    let mut destination = listed.items[0].data["spec"]["destination"].clone();
    destination["s3"]["credentialsSecretRef"] = json!({"name": "wrong-creds"});
    apply(
        &snapshots,
        json!({"apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdSnapshot",
               "metadata": {"name": "forged", "namespace": NS},
               "spec": {"clusterRef": {"name": "etcd"}, "destination": destination}}),
    )
    .await;
    let failed = eventually_within("EtcdSnapshot forged Failed", DATAPLANE_DEADLINE, || {
        let snapshots = snapshots.clone();
        async move {
            let s = snapshots.get("forged").await.ok()?;
            (s.data["status"]["phase"] == "Failed").then_some(s.data)
        }
    })
    .await;
    let ready = &failed["status"]["conditions"][0];
    assert_eq!(ready["reason"], "JobFailed");
    let message = ready["message"].as_str().unwrap();
    assert!(
        message.starts_with("snapshot job failed: uploading the snapshot: S3 put ")
            && message.ends_with("HTTP 403 InvalidAccessKeyId"),
        "{message}"
    );
    assert!(!message.contains("not-the-secret"));

    // Flip the last bytes of the object, where `snapshot save` appended the SHA-256 of the rest:
    // the file keeps its size and still opens as a database, but no longer matches its hash.
    let file = p.object_file(&uri);
    let mut bytes = std::fs::read(&file).unwrap();
    let end = bytes.len();
    for b in &mut bytes[end - 8..] {
        *b = !*b;
    }
    std::fs::write(&file, &bytes).unwrap();

    let job = p
        .restore("back", "nightly", json!({"restoreTimeoutSeconds": 15}))
        .await;
    assert_eq!(phase(&job), "Failed", "{:?}", job.status);
    let (_, reason, message) = condition(&job, "Ready");
    assert_eq!(reason, "RestoreFailed");
    assert!(
        message.contains(
            "(current Available condition: Available=False/etcdctl snapshot restore failed: Error: expected sha256"
        ),
        "{message}"
    );
    // The cluster says so, and no member came up empty.
    let cluster = p.cluster().await.unwrap();
    let available = &cluster["status"]["conditions"][0];
    assert_eq!(available["reason"], "RestoreFailed");
    let services: Api<Service> = Api::namespaced(p.h.client(), NS);
    let svc = services.get_opt("etcd-client").await.unwrap();
    assert!(
        svc.is_none_or(|s| s
            .metadata
            .owner_references
            .iter()
            .flatten()
            .all(|o| Some(o.uid.as_str()) != cluster["metadata"]["uid"].as_str())),
        "no client Service for the failed cluster"
    );

    // The object gone from the bucket: the next restore fails the same way, with S3's answer.
    std::fs::remove_file(&file).unwrap();
    let job = p
        .restore("again", "nightly", json!({"restoreTimeoutSeconds": 15}))
        .await;
    assert_eq!(phase(&job), "Failed", "{:?}", job.status);
    let message = condition(&job, "Ready").2;
    assert!(
        message.contains(&format!(
            "(current Available condition: Available=False/snapshot {uri} not found)"
        )),
        "{message}"
    );
    let cluster = p.cluster().await.unwrap();
    assert_eq!(
        cluster["status"]["conditions"][0]["reason"],
        "RestoreFailed"
    );
    p.h.cleanup().await.unwrap();
}

/// Sets `annotations` on object `name` of `api` (a merge patch, so the spec stays as it is).
async fn annotate(api: &Api<kube::api::DynamicObject>, name: &str, annotations: Value) {
    api.patch(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"metadata": {"annotations": annotations}})),
    )
    .await
    .unwrap_or_else(|e| panic!("annotating {name}: {e}"));
}

/// Successful deletes of EtcdCluster `etcd`, and creates of EtcdClusters, by the orchestrator.
fn orchestrator_writes(p: &Platform) -> (usize, usize) {
    let audit = p.h.audit();
    let ours = |r: &&harness::audit::Request| {
        r.group == "etcd-operator.cozystack.io" && r.user_agent.starts_with("restore-orchestrator/")
    };
    let deletes = audit
        .writes(Some("delete"), "etcdclusters", Some(NS), Some("etcd"))
        .filter(ours)
        .count();
    let creates = audit
        .writes(Some("create"), "etcdclusters", Some(NS), None)
        .filter(ours)
        .count();
    (deletes, creates)
}

/// The restore-orchestrator SIGKILLed while the recreated cluster is `Restoring` (held there by
/// the hang-restore control on the source snapshot, while the member restores underneath) and
/// restarted: the restore converges on that very cluster (same uid), purged and created once, and
/// `etcdctl get` shows the backed-up value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_dataplane_orchestrator_killed_mid_restore_converges_to_one_cluster() {
    let mut p = Platform::start().await;
    let before = p.member().await;
    etcdctl(&before, &["put", "greeting", "hello"]);
    p.backup("nightly").await;
    etcdctl(&before, &["put", "greeting", "changed"]);
    let snapshots = p.h.dynamic::<etcd::EtcdSnapshot>(NS);
    let snapshot = snapshots.list(&Default::default()).await.unwrap().items[0]
        .metadata
        .name
        .clone()
        .unwrap();
    annotate(
        &snapshots,
        &snapshot,
        json!({crate::support::HANG_RESTORE: "true"}),
    )
    .await;
    let old_uid = p.cluster().await.unwrap()["metadata"]["uid"].clone();

    let job: RestoreJob = serde_json::from_value(json!({
        "apiVersion": "backups.cozystack.io/v1alpha1", "kind": "RestoreJob",
        "metadata": {"name": "back", "namespace": NS},
        "spec": {"backupRef": {"name": "nightly"}}}))
    .unwrap();
    let jobs: Api<RestoreJob> = Api::namespaced(p.h.client(), NS);
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let restoring = eventually_within(
        "the new EtcdCluster Restoring",
        DATAPLANE_DEADLINE,
        || async {
            let c = p.cluster().await?;
            (c["metadata"]["uid"] != old_uid
                && c["status"]["conditions"][0]["reason"] == "Restoring")
                .then(|| c["metadata"]["uid"].clone())
        },
    )
    .await;
    p.h.kill("restore-orchestrator").await.unwrap();
    p.h.restart("restore-orchestrator", READY).await.unwrap();
    annotate(
        &snapshots,
        &snapshot,
        json!({crate::support::HANG_RESTORE: null}),
    )
    .await;

    let job = eventually_within("RestoreJob back finished", DATAPLANE_DEADLINE, || async {
        let j = jobs.get("back").await.ok()?;
        j.is_terminal().then_some(j)
    })
    .await;
    assert_eq!(phase(&job), "Succeeded", "{:?}", job.status);
    let after = p.member().await;
    assert_eq!(get(&after, "greeting"), "hello");
    assert_eq!(
        p.cluster().await.unwrap()["metadata"]["uid"],
        restoring,
        "the cluster the first orchestrator created"
    );
    assert_eq!(orchestrator_writes(&p), (1, 1), "one purge, one create");
    p.h.cleanup().await.unwrap();
}

/// The backup-runner SIGKILLed while its EtcdSnapshot is `Started` (held there by the hang
/// control on the cluster) and restarted: it adopts the snapshot, `etcdctl snapshot save` runs
/// once when released, and the bucket holds exactly one snapshot object, the Backup's artifact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_dataplane_runner_killed_mid_snapshot_leaves_exactly_one_object() {
    let mut p = Platform::start().await;
    let member = p.member().await;
    etcdctl(&member, &["put", "greeting", "hello"]);
    let clusters = p.h.dynamic::<etcd::EtcdCluster>(NS);
    annotate(&clusters, "etcd", json!({crate::support::HANG: "true"})).await;
    let job = api::backups::BackupJob::test("killed")
        .for_app("Etcd", "etcd")
        .class("cozy-default")
        .build();
    p.h.create(NS, &job).await;
    let snapshots = p.h.dynamic::<etcd::EtcdSnapshot>(NS);
    eventually_within("the EtcdSnapshot Started", DATAPLANE_DEADLINE, || async {
        let list = snapshots.list(&Default::default()).await.ok()?.items;
        list.iter()
            .any(|s| s.data["status"]["phase"] == "Started")
            .then_some(())
    })
    .await;
    p.h.kill("backup-runner").await.unwrap();
    p.h.restart("backup-runner", READY).await.unwrap();
    annotate(&clusters, "etcd", json!({crate::support::HANG: null})).await;

    let jobs: Api<api::backups::BackupJob> = Api::namespaced(p.h.client(), NS);
    let done = eventually_within("BackupJob killed done", DATAPLANE_DEADLINE, || async {
        let j = jobs.get("killed").await.ok()?;
        j.status.as_ref()?.completed_at.as_ref()?;
        Some(j)
    })
    .await;
    let status = done.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Succeeded"), "{status:?}");
    assert_eq!(
        snapshots
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .len(),
        1,
        "one EtcdSnapshot"
    );
    let mut files = Vec::new();
    let mut dirs = vec![p.dp.data_dir.join("s3").join("buckets")];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = e.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|x| x == "db") {
                files.push(path);
            }
        }
    }
    assert_eq!(files.len(), 1, "{files:?}");
    let backup = Api::<Backup>::namespaced(p.h.client(), NS)
        .get("killed")
        .await
        .unwrap();
    let uri = backup.status.unwrap().artifact.unwrap().uri;
    assert_eq!(files[0], p.object_file(&uri));
    p.h.cleanup().await.unwrap();
}

/// A BackupJob whose snapshot upload the S3 server refuses (a strategy naming keys it does not
/// know) fails with the tool's words; the real retention-cleaner's failed-job TTL deletes the job
/// and its EtcdSnapshot, while the good job, its snapshot, its catalog Backup and its object in
/// the bucket stay as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_dataplane_failed_snapshot_expires_with_its_etcdsnapshot_and_the_bucket_untouched() {
    let mut p = Platform::start().await;
    let member = p.member().await;
    etcdctl(&member, &["put", "greeting", "hello"]);
    let good = p.backup("nightly").await;
    let file = p.object_file(&good.status.unwrap().artifact.unwrap().uri);
    let bytes = std::fs::read(&file).unwrap();

    // A strategy like the platform's, with credentials the S3 server does not know.
    p.h.create(
        NS,
        &api::test_util::source_secret(
            "wrong-creds",
            NS,
            &[
                ("AWS_ACCESS_KEY_ID", "AKIAUNKNOWN"),
                ("AWS_SECRET_ACCESS_KEY", "not-the-secret"),
            ],
        ),
    )
    .await;
    let resource = kube::core::ApiResource::erase::<api::strategy::Etcd>(&());
    let strategies = Api::<kube::api::DynamicObject>::all_with(p.h.client(), &resource);
    let platform = eventually_within("cozy-default-etcd", READY, || {
        let strategies = strategies.clone();
        async move { strategies.get_opt("cozy-default-etcd").await.ok()? }
    })
    .await;
    let mut template = platform.data["spec"]["template"].clone();
    template["destination"]["s3"]["credentialsSecretRef"] = json!({"name": "wrong-creds"});
    apply(
        &strategies,
        json!({"apiVersion": "strategy.backups.cozystack.io/v1alpha1", "kind": "Etcd",
               "metadata": {"name": "wrong-key"}, "spec": {"template": template}}),
    )
    .await;
    p.h.backup_class("wrong-key", "Etcd", "Etcd", "wrong-key", &[])
        .await;
    let job = api::backups::BackupJob::test("bad-key")
        .for_app("Etcd", "etcd")
        .class("wrong-key")
        .build();
    p.h.create(NS, &job).await;
    let jobs: Api<api::backups::BackupJob> = Api::namespaced(p.h.client(), NS);
    let failed = eventually_within("BackupJob bad-key finished", DATAPLANE_DEADLINE, || {
        let jobs = jobs.clone();
        async move {
            let j = jobs.get_opt("bad-key").await.ok()??;
            j.status.as_ref()?.completed_at.as_ref()?;
            j.status
        }
    })
    .await;
    assert_eq!(failed.phase.as_deref(), Some("Failed"), "{failed:?}");
    let message = failed.message.unwrap_or_default();
    assert!(
        message.contains("HTTP 403 InvalidAccessKeyId") && !message.contains("not-the-secret"),
        "{message}"
    );
    let snapshots = p.h.dynamic::<etcd::EtcdSnapshot>(NS);
    let names = || async {
        let mut names: Vec<String> = snapshots
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|s| s.metadata.name)
            .collect();
        names.sort();
        names
    };
    let before = names().await;
    assert_eq!(
        before.len(),
        2,
        "the failed job's EtcdSnapshot is left: {before:?}"
    );
    let kept = good
        .spec
        .driver_metadata
        .as_ref()
        .map(|m| m.values().cloned().collect::<Vec<_>>());

    crate::dataplane::spawn_failed_job_cleaner(&mut p.h).await;
    eventually_within(
        "the failed BackupJob and its EtcdSnapshot deleted",
        DATAPLANE_DEADLINE,
        || async {
            let gone = jobs.get_opt("bad-key").await.ok()?.is_none();
            (gone && names().await.len() == 1).then_some(())
        },
    )
    .await;
    let left = names().await;
    assert!(
        kept.iter().flatten().any(|v| left.contains(v)),
        "the good job's EtcdSnapshot stays: {left:?} (driverMetadata {kept:?})"
    );
    assert!(jobs.get_opt("nightly").await.unwrap().is_some());
    let catalog: Vec<String> = Api::<Backup>::namespaced(p.h.client(), NS)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|b| b.metadata.name)
        .collect();
    assert_eq!(catalog, ["nightly"], "no catalog Backup of the failed job");
    assert_eq!(std::fs::read(&file).unwrap(), bytes, "the object untouched");
    harness::rbac::assert_allowed(&p.h.audit(), "retention-cleaner");
    p.h.cleanup().await.unwrap();
}
