//! Every kind reads the upstream-shaped manifests (as the Cozystack documentation writes them) and writes them back
//! unchanged; third-party views keep fields they do not model.

use api::backups::{Backup, BackupClass, BackupJob, Plan, RestoreJob};
use api::strategy;
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

/// Parses `yaml` as `K`, serialises it back and compares with the input as JSON values.
fn round_trip<K: DeserializeOwned + Serialize>(yaml: &str) -> K {
    let input: Value = serde_yaml::from_str(yaml).expect("test YAML parses");
    let typed: K = serde_json::from_value(input.clone()).expect("manifest deserialises");
    let output = serde_json::to_value(&typed).unwrap();
    pretty_assertions::assert_eq!(input, output);
    typed
}

/// The BackupJob example of seed 000 ("Рабочий процесс арендатора").
#[test]
fn seed_backupjob() {
    let job: BackupJob = round_trip(
        r#"
apiVersion: backups.cozystack.io/v1alpha1
kind: BackupJob
metadata:
  name: ad-hoc
  namespace: tenant-acme
spec:
  backupClassName: cozy-default
  applicationRef:
    apiGroup: apps.cozystack.io
    kind: Postgres
    name: orders-db
"#,
    );
    assert_eq!(
        job.spec.application_ref.normalized_group(),
        "apps.cozystack.io"
    );
    assert!(!job.is_terminal());
}

/// The PITR RestoreJob example of seed 000.
#[test]
fn seed_restorejob() {
    let rj: RestoreJob = round_trip(
        r#"
apiVersion: backups.cozystack.io/v1alpha1
kind: RestoreJob
metadata:
  name: orders-db-pitr
  namespace: tenant-acme
spec:
  backupRef:
    name: orders-db-adhoc
  targetApplicationRef:
    apiGroup: apps.cozystack.io
    kind: Postgres
    name: orders-db-copy
  options:
    recoveryTime: "2026-07-21T09:30:00Z"
"#,
    );
    assert_eq!(
        rj.spec.options.unwrap()["recoveryTime"],
        "2026-07-21T09:30:00Z"
    );
}

/// The Package/backupStorage override example of seed 000.
#[test]
fn seed_package_backup_storage() {
    let pkg: api::platform::Package = round_trip(
        r#"
apiVersion: cozystack.io/v1alpha1
kind: Package
metadata:
  name: cozystack.cozystack-platform
spec:
  components:
    platform:
      values:
        backupStorage:
          provisionBucket: true
          bucketName: cozy-backups
          endpoint: http://seaweedfs-s3.tenant-root.svc.cozy.local:8333
          region: us-east-1
          forcePathStyle: true
          systemSecretName: bucket-cozy-backups-system-credentials
          systemNamespaces:
            - cozy-velero
"#,
    );
    let values = pkg
        .backup_storage()
        .expect("block present")
        .expect("block valid");
    assert_eq!(values, api::platform::BackupStorageValues::default());
}

#[test]
fn backup_storage_rejects_unknown_keys_by_name() {
    let err = serde_json::from_value::<api::platform::BackupStorageValues>(
        serde_json::json!({"bucketNme": "x"}),
    )
    .unwrap_err();
    assert!(err.to_string().contains("bucketNme"), "{err}");
}

#[test]
fn upstream_status_shapes() {
    let job: BackupJob = round_trip(
        r#"
apiVersion: backups.cozystack.io/v1alpha1
kind: BackupJob
metadata: {name: daily-28401240, namespace: tenant-a}
spec:
  planRef: {name: daily}
  applicationRef: {kind: Postgres, name: db}
  backupClassName: cozy-default
status:
  phase: Failed
  startedAt: "2024-01-01T02:00:00Z"
  completedAt: "2024-01-01T02:00:05Z"
  message: 'failed to project backup credentials: target Secret tenant-a/cozy-backups-creds exists without label apps.cozystack.io/managed-by=cozystack-backups; refusing to overwrite'
  conditions:
  - type: Ready
    status: "False"
    reason: BackupFailed
    message: boom
    lastTransitionTime: "2024-01-01T02:00:05Z"
    observedGeneration: 1
"#,
    );
    assert!(job.is_terminal());
    let backup: Backup = round_trip(
        r#"
apiVersion: backups.cozystack.io/v1alpha1
kind: Backup
metadata: {name: ad-hoc, namespace: tenant-acme, finalizers: [backups.cozystack.io/cleanup]}
spec:
  applicationRef: {apiGroup: apps.cozystack.io, kind: Postgres, name: orders-db}
  strategyRef: {apiGroup: strategy.backups.cozystack.io, kind: CNPG, name: cozy-default-cnpg}
  takenAt: "2026-07-21T09:00:00Z"
  driverMetadata:
    cnpg.io/backup-name: ad-hoc-x7k2p
    cnpg.io/server-name: tenant-acme-orders-db
    cnpg.io/endpoint-url: ""
status:
  phase: Ready
  artifact: {uri: "cnpg://tenant-acme-orders-db/ad-hoc-x7k2p", sizeBytes: 1024, checksum: "sha256:00"}
  underlyingResources:
    kind: CNPGBackupSnapshot
    apiVersion: backups.cozystack.io/v1alpha1
    databases: {app: {roles: [app]}}
    users: {app: {password: secret}}
"#,
    );
    assert_eq!(
        backup.status.unwrap().underlying_resources.unwrap()["kind"],
        "CNPGBackupSnapshot"
    );
    let plan: Plan = round_trip(
        r#"
apiVersion: backups.cozystack.io/v1alpha1
kind: Plan
metadata: {name: pg-src-daily, namespace: tenant-root}
spec:
  applicationRef: {apiGroup: apps.cozystack.io, kind: Postgres, name: pg-src}
  backupClassName: postgres-cnpg
  schedule: {type: cron, cron: "0 */6 * * *"}
  retentionPolicy: {keepLast: 3, keepDaily: 7, keepWeekly: 4, keepMonthly: 6, maxAge: 2160h, keepFailed: 2}
"#,
    );
    assert_eq!(plan.spec.retention_policy.unwrap().keep_daily, Some(7));
}

/// The platform default BackupClass as upstream renders it (first two of seven routes).
#[test]
fn default_backupclass() {
    let class: BackupClass = round_trip(
        r#"
apiVersion: backups.cozystack.io/v1alpha1
kind: BackupClass
metadata: {name: cozy-default}
spec:
  strategies:
  - strategyRef: {apiGroup: strategy.backups.cozystack.io, kind: CNPG, name: cozy-default-cnpg}
    application: {apiGroup: apps.cozystack.io, kind: Postgres}
  - strategyRef: {apiGroup: strategy.backups.cozystack.io, kind: MariaDB, name: cozy-default-mariadb}
    application: {apiGroup: apps.cozystack.io, kind: MariaDB}
    parameters: {tier: gold}
"#,
    );
    let app = api::TypedLocalObjectReference::new("", "MariaDB", "db");
    let resolved = class.spec.resolve(&app).unwrap();
    assert_eq!(resolved.strategy_ref.name, "cozy-default-mariadb");
    assert_eq!(resolved.parameters["tier"], "gold");
}

#[test]
fn default_strategies_as_upstream_renders_them() {
    round_trip::<strategy::CNPG>(
        r#"
apiVersion: strategy.backups.cozystack.io/v1alpha1
kind: CNPG
metadata: {name: cozy-default-cnpg}
spec:
  template:
    serverName: "{{ .Application.metadata.namespace }}-{{ .Application.metadata.name }}"
    barmanObjectStore:
      destinationPath: "s3://bucket-123/{{ .Application.metadata.namespace }}/{{ .Application.metadata.name }}/"
      endpointURL: https://s3.example.com
      retentionPolicy: 30d
      s3Credentials: {secretRef: {name: cozy-backups-creds}}
      data: {compression: gzip}
      wal: {compression: gzip}
"#,
    );
    round_trip::<strategy::Etcd>(
        r#"
apiVersion: strategy.backups.cozystack.io/v1alpha1
kind: Etcd
metadata: {name: cozy-default-etcd}
spec:
  template:
    destination:
      s3:
        bucket: bucket-123
        endpoint: https://s3.example.com
        key: "{{ .Application.metadata.namespace }}/{{ .Application.metadata.name }}/"
        region: us-east-1
        forcePathStyle: true
        credentialsSecretRef: {name: cozy-backups-creds}
"#,
    );
    round_trip::<strategy::MariaDB>(
        r#"
apiVersion: strategy.backups.cozystack.io/v1alpha1
kind: MariaDB
metadata: {name: cozy-default-mariadb}
spec:
  template:
    compression: gzip
    storage:
      s3:
        bucket: bucket-123
        endpoint: s3.example.com
        prefix: "{{ .Application.metadata.namespace }}/{{ .Application.metadata.name }}/"
        region: us-east-1
        accessKeyIdSecretKeyRef: {name: cozy-backups-creds, key: AWS_ACCESS_KEY_ID}
        secretAccessKeySecretKeyRef: {name: cozy-backups-creds, key: AWS_SECRET_ACCESS_KEY}
        tls: {enabled: true}
"#,
    );
    round_trip::<strategy::MongoDB>(
        r#"
apiVersion: strategy.backups.cozystack.io/v1alpha1
kind: MongoDB
metadata: {name: cozy-default-mongodb}
spec:
  template: {storageName: s3-storage, type: logical, compressionType: gzip}
"#,
    );
    round_trip::<strategy::FoundationDB>(
        r#"
apiVersion: strategy.backups.cozystack.io/v1alpha1
kind: FoundationDB
metadata: {name: cozy-default-foundationdb}
spec:
  template:
    blobStoreConfiguration:
      accountName: s3.example.com
      bucket: bucket-123
      urlParameters: [secure_connection=1, region=us-east-1, "bucket_path={{ .Application.metadata.namespace }}/{{ .Application.metadata.name }}"]
    snapshotPeriodSeconds: 3600
    customParameters: ["--blob_credentials=/var/fdb-blob-credentials/blob_credentials.json"]
    backupDeploymentPodTemplateSpec:
      spec:
        containers:
        - name: foundationdb
          volumeMounts: [{name: blob-credentials, mountPath: /var/fdb-blob-credentials, readOnly: true}]
          resources:
            requests: {cpu: 100m, memory: 128Mi}
            limits: {cpu: 200m, memory: 256Mi}
          securityContext: {runAsUser: 4059, runAsGroup: 4059}
        volumes:
        - name: blob-credentials
          secret:
            secretName: cozy-backups-creds
            items: [{key: blob_credentials.json, path: blob_credentials.json}]
"#,
    );
    round_trip::<strategy::Velero>(
        r#"
apiVersion: strategy.backups.cozystack.io/v1alpha1
kind: Velero
metadata: {name: cozy-default-velero-vmdisk}
spec:
  template:
    spec:
      includedNamespaces: ["{{ .Application.metadata.namespace }}"]
      orLabelSelectors:
      - matchLabels: {app.kubernetes.io/instance: "vm-disk-{{ .Application.metadata.name }}"}
      - matchLabels:
          apps.cozystack.io/application.kind: "{{ .Application.kind }}"
          apps.cozystack.io/application.name: "{{ .Application.metadata.name }}"
      includedResources: [helmreleases.helm.toolkit.fluxcd.io, persistentvolumeclaims, configmaps]
      includeClusterResources: false
      storageLocation: cozy-default
      snapshotVolumes: true
      snapshotMoveData: true
      ttl: 720h0m0s
      itemOperationTimeout: 24h0m0s
    restoreSpec:
      includedNamespaces: ["{{ .Application.metadata.namespace }}"]
      includedResources: [helmreleases.helm.toolkit.fluxcd.io, persistentvolumeclaims, configmaps]
      includeClusterResources: false
      existingResourcePolicy: update
"#,
    );
    round_trip::<strategy::Altinity>(
        r#"
apiVersion: strategy.backups.cozystack.io/v1alpha1
kind: Altinity
metadata: {name: cozy-default-altinity}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: ch-backup-client
        image: ghcr.io/cozystack/cozystack/platform-migrations:v1.6.0
        imagePullPolicy: IfNotPresent
        command: ["/bin/sh", "-c"]
        args: ["echo {{ .Mode }}"]
        env:
        - name: API_USERNAME
          valueFrom: {secretKeyRef: {name: "clickhouse-{{ .Release.Name }}-backup-api-auth", key: username}}
"#,
    );
    round_trip::<strategy::Job>(
        r#"
apiVersion: strategy.backups.cozystack.io/v1alpha1
kind: Job
metadata: {name: nats}
spec:
  template:
    spec:
      containers: [{name: nats-box, image: natsio/nats-box}]
"#,
    );
}

#[test]
fn application_definition() {
    let ad: api::appdef::ApplicationDefinition = round_trip(
        r#"
apiVersion: cozystack.io/v1alpha1
kind: ApplicationDefinition
metadata: {name: http-cache}
spec:
  application: {kind: HTTPCache, openAPISchema: '{"type":"object"}', plural: httpcaches, singular: httpcache}
  release:
    chartRef: {kind: OCIRepository, name: cozystack-apps, namespace: cozy-public}
    labels: {cozystack.io/ui: "true"}
    prefix: http-cache-
  secrets:
    include: [{resourceNames: ["{{ .name }}-auth"]}]
  dashboard: {category: PaaS, plural: HTTP Caches, singular: HTTP Cache, tabs: [workloads, yaml]}
"#,
    );
    assert_eq!(ad.spec.application.kind, "HTTPCache");
}

#[test]
fn third_party_views_keep_unknown_fields() {
    use api::thirdparty::*;
    let cluster: cnpg::Cluster = round_trip(
        r#"
apiVersion: postgresql.cnpg.io/v1
kind: Cluster
metadata: {name: postgres-db, namespace: tenant-a}
spec:
  instances: 2
  imageName: ghcr.io/cloudnative-pg/postgresql:17
  storage: {size: 5Gi}
  plugins:
  - name: barman-cloud.cloudnative-pg.io
    isWALArchiver: true
    parameters: {barmanObjectName: postgres-db, serverName: tenant-a-db}
    futureField: 1
  bootstrap: {recovery: {source: old}}
status:
  phase: Cluster in healthy state
  readyInstances: 2
"#,
    );
    assert!(cluster.has_recovery_bootstrap());
    assert_eq!(
        cluster.spec.extra["imageName"],
        "ghcr.io/cloudnative-pg/postgresql:17"
    );
    let hr: flux::HelmRelease = round_trip(
        r#"
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: {name: postgres-db, namespace: tenant-a}
spec:
  suspend: "yes"
  interval: 5m
  install: {remediation: {retries: -1}}
"#,
    );
    assert!(!hr.is_suspended(), "a non-boolean suspend is not suspended");
    round_trip::<velero::Backup>(
        r#"
apiVersion: velero.io/v1
kind: Backup
metadata: {name: tenant-a.bj-x, namespace: cozy-velero}
spec:
  storageLocation: cozy-default
  includedNamespaces: [tenant-a]
  newVeleroField: {a: 1}
status:
  phase: Completed
  progress: {itemsBackedUp: 3}
"#,
    );
    round_trip::<velero::BackupStorageLocation>(
        r#"
apiVersion: velero.io/v1
kind: BackupStorageLocation
metadata: {name: cozy-default, namespace: cozy-velero}
spec:
  provider: aws
  default: false
  objectStorage: {bucket: bucket-123, prefix: velero}
  credential: {name: cozy-backups-creds, key: cloud}
  config: {region: us-east-1, s3ForcePathStyle: "true", s3Url: https://s3.example.com}
  accessMode: ReadWrite
status: {phase: Available}
"#,
    );
    round_trip::<cosi::BucketClaim>(
        r#"
apiVersion: objectstorage.k8s.io/v1alpha1
kind: BucketClaim
metadata: {name: bucket-cozy-backups, namespace: tenant-root}
spec: {bucketClassName: seaweedfs, protocols: [s3]}
status: {bucketReady: true, bucketName: bucket-5f0c}
"#,
    );
    round_trip::<apps::Bucket>(
        r#"
apiVersion: apps.cozystack.io/v1alpha1
kind: Bucket
metadata: {name: cozy-backups, namespace: tenant-root}
spec:
  users: {system: {readonly: false}}
"#,
    );
    round_trip::<barman::ObjectStore>(
        r#"
apiVersion: barmancloud.cnpg.io/v1
kind: ObjectStore
metadata: {name: postgres-db, namespace: tenant-a}
spec:
  configuration: {destinationPath: "s3://b/tenant-a/db/", s3Credentials: {accessKeyId: {name: cozy-backups-creds, key: AWS_ACCESS_KEY_ID}}}
  retentionPolicy: 30d
  instanceSidecarConfiguration: {env: [{name: AWS_REQUEST_CHECKSUM_CALCULATION, value: when_required}]}
"#,
    );
    round_trip::<mariadb::Backup>(
        r#"
apiVersion: k8s.mariadb.com/v1alpha1
kind: Backup
metadata: {generateName: bj-, namespace: tenant-a}
spec:
  mariaDbRef: {name: mariadb-db}
  storage: {s3: {bucket: b}}
  compression: gzip
status:
  conditions: [{type: Complete, status: "True", reason: JobComplete, message: done, lastTransitionTime: "2026-01-01T00:00:00Z"}]
"#,
    );
    round_trip::<etcd::EtcdSnapshot>(
        r#"
apiVersion: etcd-operator.cozystack.io/v1alpha2
kind: EtcdSnapshot
metadata: {name: bj-abc, namespace: tenant-a}
spec: {clusterRef: {name: etcd}, destination: {s3: {bucket: b}}}
status: {phase: Complete, artifact: {uri: "s3://b/k"}}
"#,
    );
    round_trip::<fdb::FoundationDBBackup>(
        r#"
apiVersion: apps.foundationdb.org/v1beta2
kind: FoundationDBBackup
metadata: {name: bj-abc, namespace: tenant-a}
spec: {clusterName: foundationdb-db, backupState: Running, blobStoreConfiguration: {accountName: host}}
status: {backupDetails: {running: true, snapshotTime: 42}}
"#,
    );
    round_trip::<percona::PerconaServerMongoDBBackup>(
        r#"
apiVersion: psmdb.percona.com/v1
kind: PerconaServerMongoDBBackup
metadata: {name: bj-abc, namespace: tenant-a}
spec: {clusterName: mongodb-db, storageName: s3-storage, type: logical}
status: {state: ready, destination: "s3://b/x", pbmName: "2026"}
"#,
    );
}
