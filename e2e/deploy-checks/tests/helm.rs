//! The Helm chart `deploy/helm/cozy-backups` (docs/helm.md), with the helm that
//! `hack/install-helm.sh` builds; every test that runs helm skips with a note when it is not built
//! (and fails instead with `HELM_REQUIRED=1`, as in CI).
//!
//! * `helm lint --strict` over the values matrix;
//! * with its defaults the chart renders exactly the objects of `kubectl kustomize
//!   deploy/overlays/ha` (and with `mode: single-replica` those of that overlay), compared as parsed
//!   objects, apart from the Helm labels and the `helm.sh/resource-policy: keep` annotation that
//!   docs/helm.md lists; with monitoring on, it adds exactly the objects of deploy/monitoring;
//! * every case of the values matrix (defaults, external S3, ha, single replica, monitoring on and
//!   off, generated lease TLS) renders and passes the checks the overlays pass
//!   (`deploy_checks::checks`);
//! * a values file with upstream's backupstrategy-controller defaults renders the defaults;
//! * the chart's copies of the CRDs and of deploy/monitoring are the files under deploy/;
//! * the values of examples/helmrelease.yaml (Flux) render and pass the checks;
//! * on kube-apiserver (the real-API backend): install, upgrades with changed values (the
//!   chart-issued lease TLS kept), uninstall, and what the uninstall leaves (the CRDs, the Backups,
//!   the namespace).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use deploy_checks::{
    DAEMONS, NAMESPACE, PLATFORM_NAMESPACES, Rendered, chart_dir, checks, deploy_dir, env_value,
    helm_bin, helm_template, overlay_dir, render,
};
use harness::Harness;
use serde_json::{Value, json};

/// The labels the chart adds to the top-level metadata of every object.
const HELM_LABELS: [&str; 4] = [
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
];

/// The helm binary, or `None` after a note saying why the test skips.
fn helm_or_skip(test: &str) -> Option<PathBuf> {
    match helm_bin() {
        Ok(bin) => Some(bin),
        Err(why) if std::env::var("HELM_REQUIRED").as_deref() == Ok("1") => {
            panic!("{test}: HELM_REQUIRED=1 but {why}")
        }
        Err(why) => {
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "skipping {test}: {why}");
            None
        }
    }
}

fn template(helm: &Path, extra: &[&str]) -> Rendered {
    helm_template(helm, extra).unwrap_or_else(|e| panic!("{e}"))
}

/// A values file in a temporary directory, for `-f`.
fn values_file(name: &str, yaml: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cozy-backups-helm-values-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, yaml).unwrap();
    path
}

fn id(o: &Value) -> String {
    format!(
        "{}/{}/{}",
        o["kind"].as_str().unwrap_or_default(),
        o["metadata"]["namespace"].as_str().unwrap_or_default(),
        o["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// The objects by `kind/namespace/name`, with what the chart adds on purpose taken out (after
/// checking it is there): the Helm labels on every object, `helm.sh/resource-policy: keep` on the
/// CRDs and the Namespace; the renderer's configuration parsed, so comments and layout do not count.
fn comparable(r: &Rendered, from_helm: bool) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for o in &r.objects {
        let mut o = o.clone();
        let key = id(&o);
        if from_helm {
            let labels = o["metadata"]["labels"]
                .as_object_mut()
                .unwrap_or_else(|| panic!("{key}: no labels"));
            for l in HELM_LABELS {
                assert!(labels.remove(l).is_some(), "{key}: no label {l}");
            }
            if labels.is_empty() {
                o["metadata"].as_object_mut().unwrap().remove("labels");
            }
            if matches!(
                o["kind"].as_str(),
                Some("CustomResourceDefinition" | "Namespace")
            ) {
                let annotations = o["metadata"]["annotations"].as_object_mut().unwrap();
                assert_eq!(
                    annotations.remove("helm.sh/resource-policy"),
                    Some(json!("keep")),
                    "{key}"
                );
                if annotations.is_empty() {
                    o["metadata"].as_object_mut().unwrap().remove("annotations");
                }
            }
        }
        // kustomize's patches of deploy/overlays/single-replica move the env entry they set to
        // the front; no value refers to another ($(NAME)), so the order carries no meaning.
        if let Some(containers) = o["spec"]["template"]["spec"]["containers"].as_array_mut() {
            for c in containers {
                if let Some(env) = c["env"].as_array_mut() {
                    assert!(!env.iter().any(|e| e.to_string().contains("$(")), "{key}");
                    env.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
                }
            }
        }
        if let Some(config) = o["data"]["values.yaml"].as_str() {
            let parsed: Value = serde_yaml::from_str(config).unwrap();
            o["data"]["values.yaml"] = parsed;
        }
        assert!(out.insert(key.clone(), o).is_none(), "{key} rendered twice");
    }
    out
}

/// Asserts the chart's rendering equals the overlay's, naming each object that differs.
fn assert_same_objects(chart: &Rendered, overlay: &Rendered, what: &str) {
    let chart = comparable(chart, true);
    let overlay = comparable(overlay, false);
    let only_chart: Vec<&String> = chart.keys().filter(|k| !overlay.contains_key(*k)).collect();
    let only_overlay: Vec<&String> = overlay.keys().filter(|k| !chart.contains_key(*k)).collect();
    assert!(
        only_chart.is_empty() && only_overlay.is_empty(),
        "{what}: only in the chart: {only_chart:?}; only in the overlay: {only_overlay:?}"
    );
    for (key, o) in &overlay {
        assert_eq!(
            &chart[key], o,
            "{what}: {key} differs (left: chart, right: overlay)"
        );
    }
}

#[test]
fn the_chart_passes_helm_lint_strict() {
    let Some(helm) = helm_or_skip("the_chart_passes_helm_lint_strict") else {
        return;
    };
    let chart = chart_dir().display().to_string();
    for set in [
        "mode=ha",
        "mode=single-replica",
        "monitoring.enabled=true",
        "leaseServer.tls.generate=true",
        "backupStorage.provisionBucket=false",
    ] {
        let out = deploy_checks::helm(&helm, &["lint", "--strict", &chart, "--set", set])
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(out.contains("0 chart(s) failed"), "--set {set}: {out}");
    }
}

#[test]
fn the_defaults_render_the_ha_overlay_and_single_replica_its_overlay() {
    let Some(helm) = helm_or_skip("the_defaults_render_the_ha_overlay") else {
        return;
    };
    let ha = render(&overlay_dir("ha")).unwrap();
    assert_same_objects(&template(&helm, &[]), &ha, "defaults vs deploy/overlays/ha");
    assert_same_objects(
        &template(&helm, &["--set", "mode=ha"]),
        &ha,
        "mode=ha vs deploy/overlays/ha",
    );
    assert_same_objects(
        &template(&helm, &["--set", "mode=single-replica"]),
        &render(&overlay_dir("single-replica")).unwrap(),
        "mode=single-replica vs deploy/overlays/single-replica",
    );
}

#[test]
fn monitoring_renders_the_objects_of_deploy_monitoring() {
    let Some(helm) = helm_or_skip("monitoring_renders_the_objects_of_deploy_monitoring") else {
        return;
    };
    let on = template(&helm, &["--set", "monitoring.enabled=true"]);
    let monitoring = Rendered {
        yaml: String::new(),
        objects: on
            .objects
            .iter()
            .filter(|o| {
                matches!(o["kind"].as_str(), Some("PodMonitor" | "PrometheusRule"))
                    || o["metadata"]["name"] == "cozy-backups-dashboard"
            })
            .cloned()
            .collect(),
    };
    assert_same_objects(
        &monitoring,
        &render(&deploy_dir().join("monitoring")).unwrap(),
        "monitoring.enabled=true vs deploy/monitoring",
    );
}

/// The strategy-renderer's configuration as the chart rendered it.
fn renderer_config(r: &Rendered) -> Value {
    let cm = r.find("ConfigMap", "strategy-renderer-config").unwrap();
    serde_yaml::from_str(cm["data"]["values.yaml"].as_str().unwrap()).unwrap()
}

#[test]
fn every_case_of_the_values_matrix_passes_the_overlay_checks() {
    let Some(helm) = helm_or_skip("every_case_of_the_values_matrix_passes_the_overlay_checks")
    else {
        return;
    };
    let external = values_file(
        "external-s3.yaml",
        "backupStorage:\n  provisionBucket: false\n  namespace: cozy-backups-s3\n  \
         bucketName: ext-bucket\n  endpoint: https://minio.example.internal:9000\n  \
         region: eu-central-1\n  forcePathStyle: false\n  systemSecretName: ext-s3-credentials\n  \
         systemNamespaces: [cozy-velero, cozy-extra]\n",
    );
    let external = external.display().to_string();
    let cases: [(&str, Vec<&str>); 7] = [
        ("defaults", vec![]),
        ("external S3", vec!["-f", &external]),
        ("ha", vec!["--set", "mode=ha"]),
        ("single replica", vec!["--set", "mode=single-replica"]),
        ("monitoring on", vec!["--set", "monitoring.enabled=true"]),
        ("monitoring off", vec!["--set", "monitoring.enabled=false"]),
        (
            "generated lease TLS",
            vec!["--set", "leaseServer.tls.generate=true"],
        ),
    ];
    for (case, args) in &cases {
        let r = template(&helm, args);
        checks::installation(&r, case);
        checks::hardened_pods(&r, case);
        if *case == "single replica" {
            checks::single_replica(&r, case);
        } else {
            checks::ha(&r, case);
            checks::ha_network_policy(&r, case);
        }
        let monitoring: Vec<String> = ["PodMonitor", "PrometheusRule"]
            .iter()
            .flat_map(|k| r.objects(k))
            .chain(r.find("ConfigMap", "cozy-backups-dashboard"))
            .map(id)
            .collect();
        if *case == "monitoring on" {
            assert_eq!(
                monitoring,
                [
                    "PodMonitor/cozy-backup-controller/cozy-backups",
                    "PrometheusRule/cozy-backup-controller/cozy-backups",
                    "ConfigMap/cozy-backup-controller/cozy-backups-dashboard"
                ],
                "{case}"
            );
            let dashboard = r.find("ConfigMap", "cozy-backups-dashboard").unwrap();
            assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
            serde_json::from_str::<Value>(dashboard["data"]["dashboard.json"].as_str().unwrap())
                .unwrap();
        } else {
            assert!(monitoring.is_empty(), "{case}: {monitoring:?}");
        }
    }

    // External S3: the whole block reaches the renderer, the projector, the catalog and the RBAC.
    let r = template(&helm, &["-f", &external]);
    let config = renderer_config(&r);
    assert_eq!(config["backupStorage"]["provisionBucket"], false);
    assert_eq!(config["backupStorage"]["bucketName"], "ext-bucket");
    assert_eq!(
        config["backupStorage"]["endpoint"],
        "https://minio.example.internal:9000"
    );
    assert_eq!(
        config["backupStorage"]["bucketNameOverride"], "",
        "an unset key keeps upstream's default"
    );
    assert_eq!(
        config["velero"],
        json!({"bslEnabled": true, "namespace": "cozy-velero"})
    );
    let projector = r.find("Deployment", "credentials-projector").unwrap();
    for (name, value) in [
        ("BACKUP_STORAGE_SECRET_NAMESPACE", "cozy-backups-s3"),
        ("BACKUP_STORAGE_SECRET_NAME", "ext-s3-credentials"),
        (
            "BACKUP_STORAGE_ENDPOINT",
            "https://minio.example.internal:9000",
        ),
        ("BACKUP_STORAGE_REGION", "eu-central-1"),
        ("BACKUP_STORAGE_FORCE_PATH_STYLE", "false"),
        ("BACKUP_STORAGE_SYSTEM_NAMESPACES", "cozy-velero,cozy-extra"),
    ] {
        assert_eq!(env_value(projector, name), Some(value), "{name}");
    }
    let runner = r.find("Deployment", "backup-runner").unwrap();
    assert_eq!(
        env_value(runner, "CATALOG_BUCKET_SECRET"),
        Some("cozy-backups-s3/ext-s3-credentials")
    );
    let mut roles: Vec<String> = r
        .objects("Role")
        .iter()
        .map(|o| id(o))
        .filter(|id| id.contains("cozy-backups-s3"))
        .collect();
    roles.sort();
    assert_eq!(
        roles,
        [
            "Role/cozy-backups-s3/cozy-backups:backup-runner:catalog-bucket",
            "Role/cozy-backups-s3/strategy-renderer-inputs",
        ],
        "the Roles follow backupStorage.namespace"
    );
    let named_tenant_root: Vec<String> = r
        .objects
        .iter()
        .filter(|o| {
            o["kind"] != "CustomResourceDefinition" && o.to_string().contains("tenant-root")
        })
        .map(id)
        .collect();
    assert!(
        named_tenant_root.is_empty(),
        "nothing names tenant-root once backupStorage.namespace is elsewhere: {named_tenant_root:?}"
    );

    // Generated lease TLS: a certificate for the Service's names, and the CA where the daemons are.
    let r = template(&helm, &["--set", "leaseServer.tls.generate=true"]);
    let secret = r.find("Secret", "lease-server-tls").unwrap();
    assert_eq!(secret["type"], "kubernetes.io/tls");
    for key in ["tls.crt", "tls.key", "ca.crt"] {
        assert!(secret["data"][key].is_string(), "{key}");
    }
    let cas: Vec<String> = r
        .objects("ConfigMap")
        .iter()
        .filter(|o| o["metadata"]["name"] == "lease-server-ca")
        .map(|o| id(o))
        .collect();
    assert_eq!(
        cas,
        [
            "ConfigMap/cozy-backup-controller/lease-server-ca",
            "ConfigMap/cozy-system/lease-server-ca"
        ]
    );
    let ca = r
        .objects("ConfigMap")
        .iter()
        .find(|o| o["metadata"]["name"] == "lease-server-ca")
        .unwrap()["data"]["ca.crt"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"), "{ca}");
    // Not in single-replica mode, where nothing uses a lease server.
    let r = template(
        &helm,
        &[
            "--set",
            "leaseServer.tls.generate=true",
            "--set",
            "mode=single-replica",
        ],
    );
    assert!(r.find("Secret", "lease-server-tls").is_none());

    // Per-daemon values: replicas, image, resources; a bad mode is refused by name.
    let r = template(
        &helm,
        &[
            "--set",
            "backupRunner.replicas=3",
            "--set",
            "image.registry=registry.example/cozy",
            "--set",
            "image.tag=0.2.0",
            "--set",
            "retentionCleaner.digest=sha256:0123",
            "--set",
            "strategyRenderer.resources.limits.memory=1Gi",
        ],
    );
    let d = |name: &str| r.find("Deployment", name).unwrap().clone();
    assert_eq!(d("backup-runner")["spec"]["replicas"], 3);
    assert_eq!(d("restore-orchestrator")["spec"]["replicas"], 2);
    assert_eq!(
        d("restore-orchestrator")["spec"]["template"]["spec"]["containers"][0]["image"],
        "registry.example/cozy/restore-orchestrator:0.2.0"
    );
    assert_eq!(
        d("retention-cleaner")["spec"]["template"]["spec"]["containers"][0]["image"],
        "registry.example/cozy/retention-cleaner:0.2.0@sha256:0123"
    );
    assert_eq!(
        d("strategy-renderer")["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
            ["memory"],
        "1Gi"
    );
    let err = helm_template(&helm, &["--set", "mode=triple"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("mode must be ha or single-replica"), "{err}");
    assert_eq!(DAEMONS.len(), 6);
}

/// upstream's backupstrategy-controller chart defaults, as a Cozystack values file carries them
/// (the images' digests shortened: this chart does not read that block).
const UPSTREAM_DEFAULTS: &str = "\
backupStrategyController:
  image: ghcr.io/cozystack/cozystack/backupstrategy-controller:v1.6.0
  chBackupClientImage: ghcr.io/cozystack/cozystack/platform-migrations:v1.6.0
  replicas: 2
  debug: false
  metrics:
    enabled: true
    bindAddress: \":8443\"
  resources:
    requests: {cpu: 10m, memory: 64Mi}
    limits: {cpu: 500m, memory: 128Mi}
backupStorage:
  provisionBucket: true
  namespace: tenant-root
  bucketName: cozy-backups
  bucketNameOverride: \"\"
  endpoint: http://seaweedfs-s3.tenant-root.svc.cozy.local:8333
  region: us-east-1
  forcePathStyle: true
  systemSecretName: bucket-cozy-backups-system-credentials
  systemNamespaces:
    - cozy-velero
  reconcileDefaultObjects: true
velero:
  bslEnabled: true
  namespace: cozy-velero
";

#[test]
fn upstreams_default_values_file_renders_the_defaults() {
    let Some(helm) = helm_or_skip("upstreams_default_values_file_renders_the_defaults") else {
        return;
    };
    let file = values_file("upstream-defaults.yaml", UPSTREAM_DEFAULTS);
    let with_file = template(&helm, &["-f", &file.display().to_string()]);
    let defaults = template(&helm, &[]);
    assert_eq!(comparable(&with_file, true), comparable(&defaults, true));
    // And only the backupStorage block, as the platform forwards it.
    let block = UPSTREAM_DEFAULTS
        .split("velero:\n")
        .next()
        .unwrap()
        .split("backupStorage:\n")
        .nth(1)
        .unwrap();
    let file = values_file(
        "upstream-backupstorage.yaml",
        &format!("backupStorage:\n{block}"),
    );
    let with_block = template(&helm, &["-f", &file.display().to_string()]);
    assert_eq!(comparable(&with_block, true), comparable(&defaults, true));
}

#[test]
fn the_charts_copies_are_the_files_under_deploy() {
    let chart = chart_dir();
    let listed: Vec<String> = std::fs::read_to_string(deploy_dir().join("crds/Kustomization"))
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- ").map(str::to_owned))
        .collect();
    let mut copied: Vec<String> = std::fs::read_dir(chart.join("files/crds"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    copied.sort();
    let mut want = listed.clone();
    want.sort();
    assert_eq!(
        copied, want,
        "files/crds holds exactly deploy/crds/Kustomization's CRDs"
    );
    let pairs = listed
        .iter()
        .map(|f| (format!("files/crds/{f}"), format!("crds/{f}")))
        .chain(
            ["podmonitor.yaml", "prometheusrule.yaml", "dashboard.json"]
                .iter()
                .map(|f| (format!("files/monitoring/{f}"), format!("monitoring/{f}"))),
        );
    for (copy, original) in pairs {
        assert!(
            std::fs::read(chart.join(&copy)).unwrap()
                == std::fs::read(deploy_dir().join(&original)).unwrap(),
            "deploy/helm/cozy-backups/{copy} differs from deploy/{original}: cp deploy/{original} deploy/helm/cozy-backups/{copy}"
        );
    }
}

// ---- on kube-apiserver ----

fn helm_on(h: &Harness, helm: &Path, args: &[&str]) -> String {
    let kubeconfig = h.kubeconfig_path().display().to_string();
    let mut all = vec!["--kubeconfig", kubeconfig.as_str()];
    all.extend_from_slice(args);
    deploy_checks::helm(helm, &all).unwrap_or_else(|e| panic!("{e}"))
}

fn kubectl(h: &Harness, args: &[&str], stdin: Option<&str>) -> String {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(h.kubeconfig_path())
        .arg("--cache-dir")
        .arg(h.work_dir().join("kube-cache-helm"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.unwrap_or_default().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kubectl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `kind/namespace/name` of each of these objects that exists.
fn existing(h: &Harness, r: &Rendered) -> Vec<String> {
    let out = kubectl(
        h,
        &["get", "-f", "-", "--ignore-not-found", "-o", "json"],
        Some(&r.yaml),
    );
    crate::platform::stored(&out)
        .into_iter()
        .map(|(id, _)| id)
        .collect()
}

fn get(h: &Harness, args: &[&str]) -> Value {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    serde_json::from_str(&kubectl(h, &all, None)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_installs_upgrades_and_uninstalls_on_kube_apiserver() {
    let Some(helm) = helm_or_skip("helm_installs_upgrades_and_uninstalls_on_kube_apiserver") else {
        return;
    };
    let Some(h) = Harness::start_real_or_skip("helm").await else {
        return;
    };
    // The platform's namespaces and the operators' CRDs, as on a Cozystack cluster.
    let namespaces: Vec<String> = PLATFORM_NAMESPACES
        .iter()
        .map(|ns| format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n"))
        .collect();
    kubectl(
        &h,
        &["apply", "--server-side", "-f", "-"],
        Some(&namespaces.join("---\n")),
    );
    crate::platform::install_operator_crds(&h).await;

    let chart = chart_dir().display().to_string();
    // As Flux installs it in Cozystack: the release in cozy-backup-controller, created for it.
    // The harness applied the CRDs already (as another owner would have): the release adopts them.
    // The lease server's TLS issued by the chart: issued once, kept by every upgrade.
    let base = [
        "--namespace",
        NAMESPACE,
        "--set",
        "namespace.create=false",
        "--set",
        "leaseServer.tls.generate=true",
    ];
    // With a Cozystack values file as it is: upstream's chart defaults.
    let upstream = values_file("upstream-defaults.yaml", UPSTREAM_DEFAULTS)
        .display()
        .to_string();
    let mut install = vec![
        "install",
        "cozy-backups",
        chart.as_str(),
        "--create-namespace",
        "--take-ownership",
        "-f",
        upstream.as_str(),
    ];
    install.extend_from_slice(&base);
    helm_on(&h, &helm, &install);
    let installed = template(&helm, &base[2..]);
    let mut want: Vec<String> = installed.objects.iter().map(id).collect();
    want.sort();
    let mut have = existing(&h, &installed);
    have.sort();
    assert_eq!(have, want, "every rendered object is stored");
    let runner = get(&h, &["-n", NAMESPACE, "deployment", "backup-runner"]);
    assert_eq!(
        runner["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "Helm"
    );
    assert_eq!(
        runner["metadata"]["annotations"]["meta.helm.sh/release-name"],
        "cozy-backups"
    );
    assert_eq!(runner["spec"]["replicas"], 2);
    let crd = get(&h, &["crd", "backups.backups.cozystack.io"]);
    assert_eq!(
        crd["metadata"]["annotations"]["meta.helm.sh/release-name"],
        "cozy-backups"
    );

    // A catalog entry, as the backup-runner records one: it must outlive the release.
    kubectl(
        &h,
        &["apply", "--server-side", "-f", "-"],
        Some(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: tenant-acme\n---\n\
             apiVersion: backups.cozystack.io/v1alpha1\nkind: Backup\nmetadata:\n  name: orders-db-1\n  namespace: tenant-acme\n\
             spec:\n  applicationRef:\n    kind: Postgres\n    name: orders-db\n  \
             strategyRef:\n    apiGroup: strategy.backups.cozystack.io\n    kind: CNPG\n    name: cozy-default-cnpg\n  \
             takenAt: \"2026-07-21T09:30:00Z\"\n",
        ),
    );

    // Upgrade with another region: the generated certificate and CA stay as they were.
    let tls = |h: &Harness| {
        let secret = get(h, &["-n", NAMESPACE, "secret", "lease-server-tls"]);
        let ca = get(h, &["-n", "cozy-system", "configmap", "lease-server-ca"]);
        (secret["data"].clone(), ca["data"]["ca.crt"].clone())
    };
    let issued = tls(&h);
    assert!(
        issued.0["tls.crt"].is_string() && issued.1.is_string(),
        "{issued:?}"
    );
    let mut upgrade = vec![
        "upgrade",
        "cozy-backups",
        chart.as_str(),
        "--set",
        "backupStorage.region=eu-west-1",
    ];
    upgrade.extend_from_slice(&base);
    helm_on(&h, &helm, &upgrade);
    assert_eq!(tls(&h), issued, "an upgrade keeps the issued TLS");
    let projector = get(
        &h,
        &["-n", NAMESPACE, "deployment", "credentials-projector"],
    );
    assert_eq!(
        env_value(&projector, "BACKUP_STORAGE_REGION"),
        Some("eu-west-1")
    );

    // Upgrade again: three runners, and single-replica mode (the lease server goes).
    let mut upgrade = vec![
        "upgrade",
        "cozy-backups",
        chart.as_str(),
        "--set",
        "backupStorage.region=eu-west-1",
        "--set",
        "backupRunner.replicas=3",
        "--set",
        "mode=single-replica",
    ];
    upgrade.extend_from_slice(&base);
    helm_on(&h, &helm, &upgrade);
    let runner = get(&h, &["-n", NAMESPACE, "deployment", "backup-runner"]);
    assert_eq!(runner["spec"]["replicas"], 3);
    assert_eq!(runner["spec"]["strategy"], json!({"type": "Recreate"}));
    assert_eq!(env_value(&runner, "LEASE_ENDPOINT"), Some("none"));
    let projector = get(
        &h,
        &["-n", NAMESPACE, "deployment", "credentials-projector"],
    );
    assert_eq!(
        env_value(&projector, "BACKUP_STORAGE_REGION"),
        Some("eu-west-1")
    );
    let cm = get(
        &h,
        &["-n", NAMESPACE, "configmap", "strategy-renderer-config"],
    );
    let config: Value = serde_yaml::from_str(cm["data"]["values.yaml"].as_str().unwrap()).unwrap();
    assert_eq!(config["backupStorage"]["region"], "eu-west-1");
    let leftover: Vec<String> = existing(&h, &installed)
        .into_iter()
        .filter(|id| id.contains("lease-server"))
        .collect();
    assert_eq!(
        leftover,
        Vec::<String>::new(),
        "single-replica removes the lease server"
    );
    let history = helm_on(
        &h,
        &helm,
        &["history", "cozy-backups", "--namespace", NAMESPACE],
    );
    assert_eq!(
        history.lines().count(),
        4,
        "a header and three revisions: {history}"
    );

    // Uninstall: the daemons and their RBAC go; the CRDs (and so the Backups) and the namespace stay.
    helm_on(
        &h,
        &helm,
        &["uninstall", "cozy-backups", "--namespace", NAMESPACE],
    );
    let mut left = existing(&h, &installed);
    left.sort();
    let crds: Vec<String> = installed
        .objects("CustomResourceDefinition")
        .iter()
        .map(|o| id(o))
        .collect();
    let mut want_left = crds.clone();
    want_left.sort();
    assert_eq!(
        left, want_left,
        "only the CRDs (helm.sh/resource-policy: keep) stay"
    );
    let backup = get(&h, &["-n", "tenant-acme", "backup", "orders-db-1"]);
    assert_eq!(backup["spec"]["applicationRef"]["name"], "orders-db");
    get(&h, &["namespace", NAMESPACE]);
    let releases = helm_on(&h, &helm, &["list", "--namespace", NAMESPACE, "-q"]);
    assert_eq!(releases.trim(), "", "no release record left");
    assert_eq!(
        kubectl(
            &h,
            &[
                "get",
                "clusterroles",
                "-l",
                "app.kubernetes.io/part-of=cozy-backups",
                "-o",
                "name"
            ],
            None
        )
        .trim(),
        "",
        "no ClusterRole left"
    );
}

#[test]
fn the_flux_example_installs_into_the_control_planes_namespace_and_its_values_render() {
    let Some(helm) = helm_or_skip("the_flux_example_values_render") else {
        return;
    };
    let example = harness::workspace_root().join("examples/helmrelease.yaml");
    let release: Value = serde_yaml::from_str(&std::fs::read_to_string(&example).unwrap()).unwrap();
    assert_eq!(release["kind"], "HelmRelease");
    assert_eq!(release["metadata"]["namespace"], NAMESPACE);
    assert_eq!(release["spec"]["targetNamespace"], NAMESPACE);
    let values = values_file(
        "flux-example.yaml",
        &serde_yaml::to_string(&release["spec"]["values"]).unwrap(),
    );
    let r = template(&helm, &["-f", &values.display().to_string()]);
    checks::hardened_pods(&r, "the Flux example");
    checks::ha(&r, "the Flux example");
    checks::ha_network_policy(&r, "the Flux example");
    assert!(
        r.objects("CustomResourceDefinition").is_empty(),
        "crds.install: false"
    );
    assert!(r.objects("Namespace").is_empty(), "namespace.create: false");
    assert!(r.find("Secret", "lease-server-tls").is_some());
    assert!(r.find("PodMonitor", "cozy-backups").is_some());
    assert_eq!(
        renderer_config(&r),
        renderer_config(&template(&helm, &[])),
        "the example carries upstream's defaults"
    );
}
