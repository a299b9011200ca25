//! Table-driven tests of [`render`] over the configuration matrix, comparing whole
//! rendered objects with a literal YAML specification of the chart's output.

use super::*;
use pretty_assertions::assert_eq;

/// The chart's output, one YAML document per object, with the
/// inputs as tokens: `$B` bucket, `$E` full endpoint, `$H` host form, `$S` tls boolean, `$SC`
/// secure_connection digit, `$R` region, `$FPS` forcePathStyle boolean, `$VNS` Velero namespace,
/// `$BNS`/`$BNAME` Bucket namespace/name.
const SPEC: &str = r#"
apiVersion: apps.cozystack.io/v1alpha1
kind: Bucket
metadata: {name: $BNAME, namespace: $BNS, labels: {app.kubernetes.io/managed-by: strategy-renderer}}
spec: {users: {system: {readonly: false}}}
---
apiVersion: backups.cozystack.io/v1alpha1
kind: BackupClass
metadata: {name: cozy-default, labels: {app.kubernetes.io/managed-by: strategy-renderer}}
spec:
  strategies:
  - application: {apiGroup: apps.cozystack.io, kind: Postgres}
    strategyRef: {apiGroup: strategy.backups.cozystack.io, kind: CNPG, name: cozy-default-cnpg}
  - application: {apiGroup: apps.cozystack.io, kind: MariaDB}
    strategyRef: {apiGroup: strategy.backups.cozystack.io, kind: MariaDB, name: cozy-default-mariadb}
  - application: {apiGroup: apps.cozystack.io, kind: Etcd}
    strategyRef: {apiGroup: strategy.backups.cozystack.io, kind: Etcd, name: cozy-default-etcd}
  - application: {apiGroup: apps.cozystack.io, kind: ClickHouse}
    strategyRef: {apiGroup: strategy.backups.cozystack.io, kind: Altinity, name: cozy-default-altinity}
  - application: {apiGroup: apps.cozystack.io, kind: MongoDB}
    strategyRef: {apiGroup: strategy.backups.cozystack.io, kind: MongoDB, name: cozy-default-mongodb}
  - application: {apiGroup: apps.cozystack.io, kind: VMInstance}
    strategyRef: {apiGroup: strategy.backups.cozystack.io, kind: Velero, name: cozy-default-velero-vminstance}
  - application: {apiGroup: apps.cozystack.io, kind: VMDisk}
    strategyRef: {apiGroup: strategy.backups.cozystack.io, kind: Velero, name: cozy-default-velero-vmdisk}
---
apiVersion: strategy.backups.cozystack.io/v1alpha1
kind: CNPG
metadata: {name: cozy-default-cnpg, labels: {app.kubernetes.io/managed-by: strategy-renderer}}
spec:
  template:
    serverName: "{{ .Application.metadata.namespace }}-{{ .Application.metadata.name }}"
    barmanObjectStore:
      destinationPath: "s3://$B/{{ .Application.metadata.namespace }}/{{ .Application.metadata.name }}/"
      endpointURL: "$E"
      retentionPolicy: 30d
      s3Credentials: {secretRef: {name: cozy-backups-creds}}
      data: {compression: gzip}
      wal: {compression: gzip}
---
apiVersion: strategy.backups.cozystack.io/v1alpha1
kind: Etcd
metadata: {name: cozy-default-etcd, labels: {app.kubernetes.io/managed-by: strategy-renderer}}
spec:
  template:
    destination:
      s3:
        bucket: "$B"
        endpoint: "$E"
        key: "{{ .Application.metadata.namespace }}/{{ .Application.metadata.name }}/"
        region: "$R"
        forcePathStyle: $FPS
        credentialsSecretRef: {name: cozy-backups-creds}
---
apiVersion: strategy.backups.cozystack.io/v1alpha1
kind: MariaDB
metadata: {name: cozy-default-mariadb, labels: {app.kubernetes.io/managed-by: strategy-renderer}}
spec:
  template:
    storage:
      s3:
        bucket: "$B"
        endpoint: "$H"
        prefix: "{{ .Application.metadata.namespace }}/{{ .Application.metadata.name }}/"
        region: "$R"
        accessKeyIdSecretKeyRef: {name: cozy-backups-creds, key: AWS_ACCESS_KEY_ID}
        secretAccessKeySecretKeyRef: {name: cozy-backups-creds, key: AWS_SECRET_ACCESS_KEY}
        tls: {enabled: $S}
    compression: gzip
---
apiVersion: strategy.backups.cozystack.io/v1alpha1
kind: Altinity
metadata: {name: cozy-default-altinity, labels: {app.kubernetes.io/managed-by: strategy-renderer}}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: ch-backup-client
        image: ghcr.io/cozystack/cozystack/platform-migrations:v1.6.0
        imagePullPolicy: IfNotPresent
        command: [/bin/sh, -c]
        args: [@SCRIPT@]
        env:
        - name: API_USERNAME
          valueFrom: {secretKeyRef: {name: "clickhouse-{{ .Release.Name }}-backup-api-auth", key: username}}
        - name: API_PASSWORD
          valueFrom: {secretKeyRef: {name: "clickhouse-{{ .Release.Name }}-backup-api-auth", key: password}}
        resources:
          requests: {cpu: 10m, memory: 32Mi}
          limits: {cpu: 200m, memory: 128Mi}
        securityContext:
          allowPrivilegeEscalation: false
          capabilities: {drop: [ALL]}
          seccompProfile: {type: RuntimeDefault}
---
apiVersion: strategy.backups.cozystack.io/v1alpha1
kind: MongoDB
metadata: {name: cozy-default-mongodb, labels: {app.kubernetes.io/managed-by: strategy-renderer}}
spec:
  template: {storageName: s3-storage, type: logical, compressionType: gzip}
---
apiVersion: strategy.backups.cozystack.io/v1alpha1
kind: FoundationDB
metadata: {name: cozy-default-foundationdb, labels: {app.kubernetes.io/managed-by: strategy-renderer}}
spec:
  template:
    blobStoreConfiguration:
      accountName: "$H"
      bucket: "$B"
      urlParameters:
      - secure_connection=$SC
      - region=$R
      - "bucket_path={{ .Application.metadata.namespace }}/{{ .Application.metadata.name }}"
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
---
apiVersion: strategy.backups.cozystack.io/v1alpha1
kind: Velero
metadata: {name: cozy-default-velero-vminstance, labels: {app.kubernetes.io/managed-by: strategy-renderer}}
spec:
  template:
    spec:
      includedNamespaces: ["{{ .Application.metadata.namespace }}"]
      orLabelSelectors:
      - matchLabels: {app.kubernetes.io/instance: "vm-instance-{{ .Application.metadata.name }}"}
      - matchLabels:
          apps.cozystack.io/application.kind: "{{ .Application.kind }}"
          apps.cozystack.io/application.name: "{{ .Application.metadata.name }}"
      includedResources: [helmreleases.helm.toolkit.fluxcd.io, virtualmachines.kubevirt.io, virtualmachineinstances.kubevirt.io, pods, datavolumes.cdi.kubevirt.io, persistentvolumeclaims, configmaps, secrets, controllerrevisions.apps]
      includeClusterResources: false
      storageLocation: cozy-default
      snapshotVolumes: true
      snapshotMoveData: true
      ttl: 720h0m0s
      itemOperationTimeout: 24h0m0s
    restoreSpec:
      includedNamespaces: ["{{ .Application.metadata.namespace }}"]
      orLabelSelectors:
      - matchLabels: {app.kubernetes.io/instance: "vm-instance-{{ .Application.metadata.name }}"}
      - matchLabels:
          apps.cozystack.io/application.kind: "{{ .Application.kind }}"
          apps.cozystack.io/application.name: "{{ .Application.metadata.name }}"
      includedResources: [helmreleases.helm.toolkit.fluxcd.io, virtualmachines.kubevirt.io, virtualmachineinstances.kubevirt.io, pods, persistentvolumeclaims, configmaps, secrets, controllerrevisions.apps]
      excludedResources: [datavolumes.cdi.kubevirt.io]
      includeClusterResources: false
      existingResourcePolicy: update
---
apiVersion: strategy.backups.cozystack.io/v1alpha1
kind: Velero
metadata: {name: cozy-default-velero-vmdisk, labels: {app.kubernetes.io/managed-by: strategy-renderer}}
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
      orLabelSelectors:
      - matchLabels: {app.kubernetes.io/instance: "vm-disk-{{ .Application.metadata.name }}"}
      - matchLabels:
          apps.cozystack.io/application.kind: "{{ .Application.kind }}"
          apps.cozystack.io/application.name: "{{ .Application.metadata.name }}"
      includedResources: [helmreleases.helm.toolkit.fluxcd.io, persistentvolumeclaims, configmaps]
      includeClusterResources: false
      existingResourcePolicy: update
---
apiVersion: velero.io/v1
kind: BackupStorageLocation
metadata: {name: cozy-default, namespace: $VNS, labels: {app.kubernetes.io/managed-by: strategy-renderer}}
spec:
  provider: aws
  default: false
  objectStorage: {bucket: "$B", prefix: velero}
  credential: {name: cozy-backups-creds, key: cloud}
  config: {region: "$R", s3ForcePathStyle: "$FPS", s3Url: "$E"}
"#;

/// Expected inputs of one case.
struct Expect<'a> {
    bucket: Option<&'a str>,
    endpoint: &'a str,
    host: &'a str,
    tls: bool,
    region: &'a str,
    fps: bool,
    provision: bool,
    bsl: bool,
    fdb_bound: bool,
}

fn expected(c: &RenderConfig, e: &Expect<'_>) -> Vec<Value> {
    let script = serde_json::to_string(ALTINITY_SCRIPT).unwrap();
    let text = SPEC
        .replace("$BNAME", &c.backup_storage.bucket_name)
        .replace("$BNS", &c.backup_storage.namespace)
        .replace("$VNS", &c.velero.namespace)
        .replace("$B", e.bucket.unwrap_or("-"))
        .replace("$E", e.endpoint)
        .replace("$H", e.host)
        .replace("$SC", if e.tls { "1" } else { "0" })
        .replace("$S", &e.tls.to_string())
        .replace("$R", e.region)
        .replace("$FPS", &e.fps.to_string())
        // Last: the script itself contains `$` shell variables.
        .replace("@SCRIPT@", &script);
    let mut docs: Vec<Value> = serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde_json::to_value(serde_yaml::Value::deserialize(d).unwrap()).unwrap())
        .collect();
    use serde::Deserialize as _;
    if e.fdb_bound {
        docs[1]["spec"]["strategies"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({
                "application": {"apiGroup": "apps.cozystack.io", "kind": "FoundationDB"},
                "strategyRef": {"apiGroup": "strategy.backups.cozystack.io", "kind": "FoundationDB", "name": "cozy-default-foundationdb"},
            }));
    }
    docs.into_iter()
        .filter(|d| match d["kind"].as_str().unwrap() {
            "Bucket" => e.provision,
            "BackupClass" => true,
            "Velero" | "BackupStorageLocation" => e.bucket.is_some() && e.bsl,
            _ => e.bucket.is_some(),
        })
        .collect()
}

const FALLBACK: &str = "http://seaweedfs-s3.tenant-root.svc.cozy.local:8333";

fn cfg(f: impl FnOnce(&mut RenderConfig)) -> RenderConfig {
    let mut c = RenderConfig::default();
    f(&mut c);
    c
}

#[test]
fn configuration_matrix_renders_whole_objects() {
    struct Case<'a> {
        name: &'a str,
        config: RenderConfig,
        claim: Option<&'a str>,
        secret: Option<&'a [u8]>,
        want: Expect<'a>,
    }
    let base = Expect {
        bucket: Some("bucket-uid1"),
        endpoint: "https://s3.example.com",
        host: "s3.example.com",
        tls: true,
        region: "us-east-1",
        fps: true,
        provision: true,
        bsl: true,
        fdb_bound: false,
    };
    let cases = vec![
        Case {
            name: "fresh cluster: no claim status, no secret → Bucket + BackupClass only",
            config: RenderConfig::default(),
            claim: None,
            secret: None,
            want: Expect {
                bucket: None,
                endpoint: FALLBACK,
                host: "seaweedfs-s3.tenant-root.svc.cozy.local:8333",
                tls: false,
                ..base
            },
        },
        Case {
            name: "claim exists but status empty",
            config: RenderConfig::default(),
            claim: Some(""),
            secret: Some(b"s3.example.com"),
            want: Expect {
                bucket: None,
                ..base
            },
        },
        Case {
            name: "lookup present, secret bare host (the bucket chart's form)",
            config: RenderConfig::default(),
            claim: Some("bucket-uid1"),
            secret: Some(b"s3.example.com"),
            want: Expect { ..base },
        },
        Case {
            name: "lookup present, secret absent → fallback endpoint",
            config: RenderConfig::default(),
            claim: Some("bucket-uid1"),
            secret: None,
            want: Expect {
                endpoint: FALLBACK,
                host: "seaweedfs-s3.tenant-root.svc.cozy.local:8333",
                tls: false,
                ..base
            },
        },
        Case {
            name: "secret endpoint empty → fallback endpoint",
            config: RenderConfig::default(),
            claim: Some("bucket-uid1"),
            secret: Some(b""),
            want: Expect {
                endpoint: FALLBACK,
                host: "seaweedfs-s3.tenant-root.svc.cozy.local:8333",
                tls: false,
                ..base
            },
        },
        Case {
            name: "secret endpoint with http scheme and port → https forced, port kept",
            config: RenderConfig::default(),
            claim: Some("bucket-uid1"),
            secret: Some(b"http://s3.example.com:8333"),
            want: Expect {
                endpoint: "https://s3.example.com:8333",
                host: "s3.example.com:8333",
                ..base
            },
        },
        Case {
            name: "secret endpoint with https scheme → no double scheme",
            config: RenderConfig::default(),
            claim: Some("bucket-uid1"),
            secret: Some(b"https://s3.example.com"),
            want: Expect { ..base },
        },
        Case {
            name: "secret endpoint with trailing slash → kept",
            config: RenderConfig::default(),
            claim: Some("bucket-uid1"),
            secret: Some(b"s3.example.com:8333/"),
            want: Expect {
                endpoint: "https://s3.example.com:8333/",
                host: "s3.example.com:8333/",
                ..base
            },
        },
        Case {
            name: "secret endpoint with surrounding whitespace → trimmed",
            config: RenderConfig::default(),
            claim: Some("bucket-uid1"),
            secret: Some(b" s3.example.com\n"),
            want: Expect { ..base },
        },
        Case {
            name: "override set, lookup absent → override",
            config: cfg(|c| c.backup_storage.bucket_name_override = "test-bucket".into()),
            claim: None,
            secret: None,
            want: Expect {
                bucket: Some("test-bucket"),
                endpoint: FALLBACK,
                host: "seaweedfs-s3.tenant-root.svc.cozy.local:8333",
                tls: false,
                ..base
            },
        },
        Case {
            name: "override set, lookup present → lookup wins",
            config: cfg(|c| c.backup_storage.bucket_name_override = "test-bucket".into()),
            claim: Some("bucket-uid1"),
            secret: Some(b"s3.example.com"),
            want: Expect { ..base },
        },
        Case {
            name: "table A1: https fallback endpoint",
            config: cfg(|c| {
                c.backup_storage.bucket_name_override = "test-bucket".into();
                c.backup_storage.endpoint = "https://s3.example.com:8333".into();
            }),
            claim: None,
            secret: None,
            want: Expect {
                bucket: Some("test-bucket"),
                endpoint: "https://s3.example.com:8333",
                host: "s3.example.com:8333",
                ..base
            },
        },
        Case {
            name: "provisionBucket off: bucketName verbatim, override and lookup and secret ignored, no Bucket",
            config: cfg(|c| {
                c.backup_storage.provision_bucket = false;
                c.backup_storage.bucket_name = "ext-bucket".into();
                c.backup_storage.bucket_name_override = "ignored".into();
                c.backup_storage.endpoint = "https://minio.example.internal:9000".into();
            }),
            claim: Some("bucket-uid1"),
            secret: Some(b"s3.example.com"),
            want: Expect {
                bucket: Some("ext-bucket"),
                endpoint: "https://minio.example.internal:9000",
                host: "minio.example.internal:9000",
                provision: false,
                ..base
            },
        },
        Case {
            name: "provisionBucket off with upper-case scheme (table B8): verbatim, insecure",
            config: cfg(|c| {
                c.backup_storage.provision_bucket = false;
                c.backup_storage.bucket_name = "ext".into();
                c.backup_storage.endpoint = "HTTPS://x:1".into();
            }),
            claim: None,
            secret: None,
            want: Expect {
                bucket: Some("ext"),
                endpoint: "HTTPS://x:1",
                host: "HTTPS://x:1",
                tls: false,
                provision: false,
                ..base
            },
        },
        Case {
            name: "bslEnabled off: no Velero strategies, no BSL; routes stay",
            config: cfg(|c| c.velero.bsl_enabled = false),
            claim: Some("bucket-uid1"),
            secret: Some(b"s3.example.com"),
            want: Expect { bsl: false, ..base },
        },
        Case {
            name: "region and forcePathStyle variations; custom Velero namespace",
            config: cfg(|c| {
                c.backup_storage.region = "eu-central-1".into();
                c.backup_storage.force_path_style = false;
                c.velero.namespace = "velero".into();
            }),
            claim: Some("bucket-uid1"),
            secret: Some(b"s3.example.com"),
            want: Expect {
                region: "eu-central-1",
                fps: false,
                ..base
            },
        },
        Case {
            name: "--bind-foundationdb adds the eighth route",
            config: cfg(|c| c.bind_foundationdb = true),
            claim: Some("bucket-uid1"),
            secret: Some(b"s3.example.com"),
            want: Expect {
                fdb_bound: true,
                ..base
            },
        },
        Case {
            name: "custom bucket name and namespace",
            config: cfg(|c| {
                c.backup_storage.bucket_name = "platform".into();
                c.backup_storage.namespace = "tenant-infra".into();
            }),
            claim: Some("bucket-uid9"),
            secret: Some(b"s3.example.com"),
            want: Expect {
                bucket: Some("bucket-uid9"),
                ..base
            },
        },
    ];
    for case in cases {
        let got = render(&case.config, case.claim, case.secret);
        let want = expected(&case.config, &case.want);
        assert_eq!(got.objects, want, "case: {}", case.name);
        assert_eq!(
            got.bucket_name.as_deref(),
            case.want.bucket,
            "case: {}",
            case.name
        );
        assert_eq!(got.endpoint, case.want.endpoint, "case: {}", case.name);
    }
}

#[test]
fn value_types_are_exact() {
    let got = render(&RenderConfig::default(), Some("b"), Some(b"s3.example.com"));
    let by_kind = |k: &str| got.objects.iter().find(|o| o["kind"] == k).unwrap().clone();
    assert!(
        by_kind("Etcd")["spec"]["template"]["destination"]["s3"]["forcePathStyle"].is_boolean()
    );
    assert!(by_kind("MariaDB")["spec"]["template"]["storage"]["s3"]["tls"]["enabled"].is_boolean());
    assert!(by_kind("BackupStorageLocation")["spec"]["config"]["s3ForcePathStyle"].is_string());
    assert!(by_kind("BackupStorageLocation")["spec"]["default"].is_boolean());
    assert!(by_kind("FoundationDB")["spec"]["template"]["snapshotPeriodSeconds"].is_number());
}

#[test]
fn rendered_objects_deserialize_into_the_api_types() {
    let c = cfg(|c| c.bind_foundationdb = true);
    let got = render(&c, Some("b"), Some(b"s3.example.com"));
    for obj in &got.objects {
        let v = obj.clone();
        let ok = match obj["kind"].as_str().unwrap() {
            "BackupClass" => serde_json::from_value::<api::backups::BackupClass>(v).is_ok(),
            "CNPG" => serde_json::from_value::<api::strategy::CNPG>(v).is_ok(),
            "Etcd" => serde_json::from_value::<api::strategy::Etcd>(v).is_ok(),
            "MariaDB" => serde_json::from_value::<api::strategy::MariaDB>(v).is_ok(),
            "Altinity" => serde_json::from_value::<api::strategy::Altinity>(v).is_ok(),
            "MongoDB" => serde_json::from_value::<api::strategy::MongoDB>(v).is_ok(),
            "FoundationDB" => serde_json::from_value::<api::strategy::FoundationDB>(v).is_ok(),
            "Velero" => serde_json::from_value::<api::strategy::Velero>(v).is_ok(),
            "Bucket" => serde_json::from_value::<api::thirdparty::apps::Bucket>(v).is_ok(),
            "BackupStorageLocation" => {
                serde_json::from_value::<api::thirdparty::velero::BackupStorageLocation>(v).is_ok()
            }
            other => panic!("unexpected kind {other}"),
        };
        assert!(ok, "{} does not match its API type", ObjectKey::of(obj));
        // Round trip through the typed struct loses nothing (no field the type does not know).
    }
    assert_eq!(got.objects.len(), 11);
}

#[test]
fn required_objects_follow_routes_and_bsl() {
    let names = |c: &RenderConfig| -> Vec<String> {
        render(c, None, None)
            .required
            .iter()
            .map(RequiredObject::display)
            .collect()
    };
    assert_eq!(
        names(&RenderConfig::default()),
        [
            "Altinity/cozy-default-altinity",
            "BackupStorageLocation/cozy-default",
            "CNPG/cozy-default-cnpg",
            "Etcd/cozy-default-etcd",
            "MariaDB/cozy-default-mariadb",
            "MongoDB/cozy-default-mongodb",
            "Velero/cozy-default-velero-vmdisk",
            "Velero/cozy-default-velero-vminstance",
        ]
    );
    assert_eq!(
        names(&cfg(|c| {
            c.velero.bsl_enabled = false;
            c.bind_foundationdb = true;
        })),
        [
            "Altinity/cozy-default-altinity",
            "CNPG/cozy-default-cnpg",
            "Etcd/cozy-default-etcd",
            "FoundationDB/cozy-default-foundationdb",
            "MariaDB/cozy-default-mariadb",
            "MongoDB/cozy-default-mongodb",
        ]
    );
}

#[test]
fn subset_comparison() {
    use serde_json::json;
    let d = json!({"a": {"b": 1, "c": [1, {"x": 1}]}});
    assert!(is_subset(
        &d,
        &json!({"a": {"b": 1, "c": [1, {"x": 1, "y": 2}]}, "z": 0})
    ));
    assert!(!is_subset(&d, &json!({"a": {"b": 2, "c": [1, {"x": 1}]}})));
    assert!(!is_subset(
        &d,
        &json!({"a": {"b": 1, "c": [1, {"x": 1}, 3]}})
    ));
    assert!(!is_subset(&json!({"t": true}), &json!({"t": "true"})));
}
