//! The object bodies, one function per chart template.

use serde_json::{Value, json};

use crate::config::RenderConfig;
use crate::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use api::contract::{groups, names};

/// Literal Go-template placeholders the drivers expand per job (Helm writes them with `printf`).
const NS: &str = "{{ .Application.metadata.namespace }}";
const APP: &str = "{{ .Application.metadata.name }}";

const STRATEGY_API_VERSION: &str = "strategy.backups.cozystack.io/v1alpha1";

/// Storage coordinates every gated strategy uses.
pub(crate) struct Storage<'a> {
    pub(crate) bucket: &'a str,
    pub(crate) endpoint: &'a str,
    pub(crate) host: &'a str,
    pub(crate) secure: bool,
    pub(crate) region: &'a str,
    pub(crate) force_path_style: bool,
}

fn metadata(name: &str, namespace: Option<&str>) -> Value {
    let mut m = json!({
        "name": name,
        "labels": { MANAGED_BY_LABEL: MANAGED_BY_VALUE },
    });
    if let Some(ns) = namespace {
        m["namespace"] = json!(ns);
    }
    m
}

fn strategy(kind: &str, name: &str, template: Value) -> Value {
    json!({
        "apiVersion": STRATEGY_API_VERSION,
        "kind": kind,
        "metadata": metadata(name, None),
        "spec": { "template": template },
    })
}

/// `apps.cozystack.io/v1alpha1` Bucket (rendered whenever `provisionBucket` is true).
pub(crate) fn bucket(c: &RenderConfig) -> Value {
    json!({
        "apiVersion": "apps.cozystack.io/v1alpha1",
        "kind": "Bucket",
        "metadata": metadata(&c.backup_storage.bucket_name, Some(&c.backup_storage.namespace)),
        "spec": { "users": { "system": { "readonly": false } } },
    })
}

/// The routes of `cozy-default` in upstream order: (application kind, strategy kind, strategy name).
pub(crate) fn routes(c: &RenderConfig) -> Vec<(&'static str, &'static str, &'static str)> {
    let mut r = vec![
        ("Postgres", "CNPG", "cozy-default-cnpg"),
        ("MariaDB", "MariaDB", "cozy-default-mariadb"),
        ("Etcd", "Etcd", "cozy-default-etcd"),
        ("ClickHouse", "Altinity", "cozy-default-altinity"),
        ("MongoDB", "MongoDB", "cozy-default-mongodb"),
        ("VMInstance", "Velero", "cozy-default-velero-vminstance"),
        ("VMDisk", "Velero", "cozy-default-velero-vmdisk"),
    ];
    if c.bind_foundationdb {
        r.push(("FoundationDB", "FoundationDB", "cozy-default-foundationdb"));
    }
    r
}

/// BackupClass `cozy-default` (always rendered; no route has `parameters`).
pub(crate) fn backup_class(c: &RenderConfig) -> Value {
    let strategies: Vec<Value> = routes(c)
        .into_iter()
        .map(|(app_kind, kind, name)| {
            json!({
                "application": { "apiGroup": groups::APPS, "kind": app_kind },
                "strategyRef": { "apiGroup": groups::STRATEGY, "kind": kind, "name": name },
            })
        })
        .collect();
    json!({
        "apiVersion": "backups.cozystack.io/v1alpha1",
        "kind": "BackupClass",
        "metadata": metadata(names::DEFAULT_BACKUP_CLASS, None),
        "spec": { "strategies": strategies },
    })
}

pub(crate) fn cnpg(s: &Storage<'_>) -> Value {
    strategy(
        "CNPG",
        "cozy-default-cnpg",
        json!({
            "serverName": format!("{NS}-{APP}"),
            "barmanObjectStore": {
                "destinationPath": format!("s3://{}/{NS}/{APP}/", s.bucket),
                "endpointURL": s.endpoint,
                "retentionPolicy": "30d",
                "s3Credentials": { "secretRef": { "name": names::CREDENTIALS_SECRET } },
                "data": { "compression": "gzip" },
                "wal": { "compression": "gzip" },
            },
        }),
    )
}

pub(crate) fn etcd(s: &Storage<'_>) -> Value {
    strategy(
        "Etcd",
        "cozy-default-etcd",
        json!({
            "destination": { "s3": {
                "bucket": s.bucket,
                "endpoint": s.endpoint,
                "key": format!("{NS}/{APP}/"),
                "region": s.region,
                "forcePathStyle": s.force_path_style,
                "credentialsSecretRef": { "name": names::CREDENTIALS_SECRET },
            }},
        }),
    )
}

pub(crate) fn mariadb(s: &Storage<'_>) -> Value {
    strategy(
        "MariaDB",
        "cozy-default-mariadb",
        json!({
            "storage": { "s3": {
                "bucket": s.bucket,
                "endpoint": s.host,
                "prefix": format!("{NS}/{APP}/"),
                "region": s.region,
                "accessKeyIdSecretKeyRef": { "name": names::CREDENTIALS_SECRET, "key": "AWS_ACCESS_KEY_ID" },
                "secretAccessKeySecretKeyRef": { "name": names::CREDENTIALS_SECRET, "key": "AWS_SECRET_ACCESS_KEY" },
                "tls": { "enabled": s.secure },
            }},
            "compression": "gzip",
        }),
    )
}

/// The Altinity client script, as the chart renders it. It is a Go template: the driver renders `.Release`,
/// `.Mode` and, on restore, `.Backup` before the pod runs it. The mode branch is a template
/// conditional so that `.Backup` (nil on backup) is only evaluated on restore.
pub const ALTINITY_SCRIPT: &str = r#"set -eu
HOST="chi-clickhouse-{{ .Release.Name }}-clickhouse-0-0.{{ .Release.Namespace }}.svc"
API="http://${HOST}:7171"
AUTH="${API_USERNAME}:${API_PASSWORD}"
tries=0
until curl -fsS -m 2 -u "$AUTH" "$API/backup/status" >/dev/null; do
  tries=$((tries + 1))
  if [ "$tries" -ge 60 ]; then
    echo "clickhouse-backup API $API did not answer after 60 tries" >&2
    exit 1
  fi
  sleep 5
done
{{- if eq .Mode "backup" }}
TARGET="clickhouse-{{ .Release.Name }}-$(date -u +%Y%m%dT%H%M%SZ)"
curl -fsS -u "$AUTH" -X POST "$API/backup/create_remote?name=$TARGET"
{{- else }}
TARGET="$(curl -fsS -u "$AUTH" "$API/backup/list/remote" \
  | jq -rs --arg p "clickhouse-{{ .Backup.ApplicationRef.Name }}-" \
      '[.[] | select(.name | startswith($p))] | sort_by(.created) | last | .name // empty')"
if [ -z "$TARGET" ]; then
  echo "no remote backup found" >&2
  exit 1
fi
curl -fsS -u "$AUTH" -X POST "$API/backup/restore_remote/$TARGET"
{{- end }}
while true; do
  ACTION="$(curl -fsS -u "$AUTH" "$API/backup/actions" \
    | jq -cs --arg t "$TARGET" '[.[] | select(.command | endswith($t))] | last')"
  STATUS="$(printf '%s' "$ACTION" | jq -r '.status // empty')"
  case "$STATUS" in
    success) echo "$TARGET: success"; exit 0 ;;
    error) echo "$TARGET: $(printf '%s' "$ACTION" | jq -r '.error')" >&2; exit 1 ;;
  esac
  sleep 5
done
"#;

pub(crate) fn altinity(c: &RenderConfig) -> Value {
    let auth_secret = "clickhouse-{{ .Release.Name }}-backup-api-auth";
    strategy(
        "Altinity",
        "cozy-default-altinity",
        json!({
            "spec": {
                "restartPolicy": "Never",
                "containers": [{
                    "name": "ch-backup-client",
                    "image": c.ch_backup_client_image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["/bin/sh", "-c"],
                    "args": [ALTINITY_SCRIPT],
                    "env": [
                        { "name": "API_USERNAME", "valueFrom": { "secretKeyRef": { "name": auth_secret, "key": "username" } } },
                        { "name": "API_PASSWORD", "valueFrom": { "secretKeyRef": { "name": auth_secret, "key": "password" } } },
                    ],
                    "resources": {
                        "requests": { "cpu": "10m", "memory": "32Mi" },
                        "limits": { "cpu": "200m", "memory": "128Mi" },
                    },
                    "securityContext": {
                        "allowPrivilegeEscalation": false,
                        "capabilities": { "drop": ["ALL"] },
                        "seccompProfile": { "type": "RuntimeDefault" },
                    },
                }],
            },
        }),
    )
}

pub(crate) fn mongodb() -> Value {
    strategy(
        "MongoDB",
        "cozy-default-mongodb",
        json!({ "storageName": "s3-storage", "type": "logical", "compressionType": "gzip" }),
    )
}

pub(crate) fn foundationdb(s: &Storage<'_>) -> Value {
    strategy(
        "FoundationDB",
        "cozy-default-foundationdb",
        json!({
            "blobStoreConfiguration": {
                "accountName": s.host,
                "bucket": s.bucket,
                "urlParameters": [
                    format!("secure_connection={}", if s.secure { 1 } else { 0 }),
                    format!("region={}", s.region),
                    format!("bucket_path={NS}/{APP}"),
                ],
            },
            "snapshotPeriodSeconds": 3600,
            "customParameters": ["--blob_credentials=/var/fdb-blob-credentials/blob_credentials.json"],
            "backupDeploymentPodTemplateSpec": { "spec": {
                "containers": [{
                    "name": "foundationdb",
                    "volumeMounts": [{ "name": "blob-credentials", "mountPath": "/var/fdb-blob-credentials", "readOnly": true }],
                    "resources": {
                        "requests": { "cpu": "100m", "memory": "128Mi" },
                        "limits": { "cpu": "200m", "memory": "256Mi" },
                    },
                    "securityContext": { "runAsUser": 4059, "runAsGroup": 4059 },
                }],
                "volumes": [{
                    "name": "blob-credentials",
                    "secret": {
                        "secretName": names::CREDENTIALS_SECRET,
                        "items": [{ "key": "blob_credentials.json", "path": "blob_credentials.json" }],
                    },
                }],
            }},
        }),
    )
}

fn velero_selectors(instance_prefix: &str) -> Value {
    json!([
        { "matchLabels": { "app.kubernetes.io/instance": format!("{instance_prefix}-{APP}") } },
        { "matchLabels": {
            "apps.cozystack.io/application.kind": "{{ .Application.kind }}",
            "apps.cozystack.io/application.name": APP,
        }},
    ])
}

pub(crate) fn velero_vminstance() -> Value {
    let backup_resources = json!([
        "helmreleases.helm.toolkit.fluxcd.io",
        "virtualmachines.kubevirt.io",
        "virtualmachineinstances.kubevirt.io",
        "pods",
        "datavolumes.cdi.kubevirt.io",
        "persistentvolumeclaims",
        "configmaps",
        "secrets",
        "controllerrevisions.apps",
    ]);
    let restore_resources = json!([
        "helmreleases.helm.toolkit.fluxcd.io",
        "virtualmachines.kubevirt.io",
        "virtualmachineinstances.kubevirt.io",
        "pods",
        "persistentvolumeclaims",
        "configmaps",
        "secrets",
        "controllerrevisions.apps",
    ]);
    strategy(
        "Velero",
        "cozy-default-velero-vminstance",
        json!({
            "spec": {
                "includedNamespaces": [NS],
                "orLabelSelectors": velero_selectors("vm-instance"),
                "includedResources": backup_resources,
                "includeClusterResources": false,
                "storageLocation": names::DEFAULT_BSL,
                "snapshotVolumes": true,
                "snapshotMoveData": true,
                "ttl": "720h0m0s",
                "itemOperationTimeout": "24h0m0s",
            },
            "restoreSpec": {
                "includedNamespaces": [NS],
                "orLabelSelectors": velero_selectors("vm-instance"),
                "includedResources": restore_resources,
                "excludedResources": ["datavolumes.cdi.kubevirt.io"],
                "includeClusterResources": false,
                "existingResourcePolicy": "update",
            },
        }),
    )
}

pub(crate) fn velero_vmdisk() -> Value {
    let resources = json!([
        "helmreleases.helm.toolkit.fluxcd.io",
        "persistentvolumeclaims",
        "configmaps",
    ]);
    strategy(
        "Velero",
        "cozy-default-velero-vmdisk",
        json!({
            "spec": {
                "includedNamespaces": [NS],
                "orLabelSelectors": velero_selectors("vm-disk"),
                "includedResources": resources,
                "includeClusterResources": false,
                "storageLocation": names::DEFAULT_BSL,
                "snapshotVolumes": true,
                "snapshotMoveData": true,
                "ttl": "720h0m0s",
                "itemOperationTimeout": "24h0m0s",
            },
            "restoreSpec": {
                "includedNamespaces": [NS],
                "orLabelSelectors": velero_selectors("vm-disk"),
                "includedResources": resources,
                "includeClusterResources": false,
                "existingResourcePolicy": "update",
            },
        }),
    )
}

/// Velero BackupStorageLocation `cozy-default`. `s3ForcePathStyle` is `backupStorage.forcePathStyle`
/// as a quoted string (`"true"`/`"false"`): the chart renders the value through `quote`.
pub(crate) fn bsl(c: &RenderConfig, s: &Storage<'_>) -> Value {
    json!({
        "apiVersion": "velero.io/v1",
        "kind": "BackupStorageLocation",
        "metadata": metadata(names::DEFAULT_BSL, Some(&c.velero.namespace)),
        "spec": {
            "provider": "aws",
            "default": false,
            "objectStorage": { "bucket": s.bucket, "prefix": "velero" },
            "credential": { "name": names::CREDENTIALS_SECRET, "key": "cloud" },
            "config": {
                "region": s.region,
                "s3ForcePathStyle": if s.force_path_style { "true" } else { "false" },
                "s3Url": s.endpoint,
            },
        },
    })
}
