//! The manifests on kube-apiserver itself (the real-API backend, docs/real-api.md), whatever
//! `COZY_E2E_API` says; skipped with a note when the control plane is not built and
//! `COZY_E2E_API` is not `real`:
//!
//! * each overlay applied server-side: a dry run that stores nothing, the apply, and the same apply
//!   again, which changes no object (every resourceVersion stays);
//! * the CRDs' CEL rules refused with kube-apiserver's own 422 messages (the BackupJob's
//!   `backupClassName` is immutable; a MariaDB strategy names exactly one storage);
//! * `kubectl explain backupjob.spec`, and the oldest supported kubectl (1.27) and a recent one
//!   (1.33) listing, explaining and applying the project's kinds.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use deploy_checks::{PLATFORM_NAMESPACES, Rendered, deploy_dir, overlay_dir, render};
use harness::Harness;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

/// `kubectl` (or another build of it) against the harness's API server, `stdin` piped in.
fn kubectl_with(bin: &str, h: &Harness, args: &[&str], stdin: Option<&str>) -> Output {
    let cache = h.work_dir().join(format!(
        "kube-cache-{}",
        bin.rsplit('/').next().unwrap_or(bin)
    ));
    let mut child = Command::new(bin)
        .arg("--kubeconfig")
        .arg(h.kubeconfig_path())
        .arg("--cache-dir")
        .arg(&cache)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {bin}: {e}"));
    {
        use std::io::Write as _;
        let mut input = child.stdin.take().unwrap();
        input
            .write_all(stdin.unwrap_or_default().as_bytes())
            .unwrap();
    }
    child.wait_with_output().unwrap()
}

fn ok(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed:\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn kubectl(h: &Harness, args: &[&str], stdin: Option<&str>) -> String {
    ok(
        kubectl_with("kubectl", h, args, stdin),
        &format!("kubectl {}", args.join(" ")),
    )
}

/// The platform's namespaces and the operators' CRDs, as a Cozystack cluster has them.
async fn platform(h: &Harness) {
    let namespaces: Vec<String> = PLATFORM_NAMESPACES
        .iter()
        .map(|ns| format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n"))
        .collect();
    kubectl(
        h,
        &["apply", "--server-side", "-f", "-"],
        Some(&namespaces.join("---\n")),
    );
    crate::platform::install_operator_crds(h).await;
}

/// `kind/namespace/name` → resourceVersion of each rendered object that exists.
fn versions(h: &Harness, r: &Rendered) -> BTreeMap<String, String> {
    let out = kubectl(
        h,
        &["get", "-f", "-", "--ignore-not-found", "-o", "json"],
        Some(&r.yaml),
    );
    crate::platform::stored(&out)
        .into_iter()
        .map(|(id, o)| {
            let version = o["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .to_owned();
            (id, version)
        })
        .collect()
}

/// Dry run, apply, apply again: the second apply writes nothing.
fn apply_three_times(h: &Harness, r: &Rendered, stored_before: &[&str]) {
    let dry = kubectl(
        h,
        &["apply", "--server-side", "--dry-run=server", "-f", "-"],
        Some(&r.yaml),
    );
    assert_eq!(dry.lines().count(), r.objects.len(), "{dry}");
    assert!(
        dry.lines().all(|l| l.ends_with("(server dry run)")),
        "{dry}"
    );
    let after_dry = versions(h, r);
    assert!(
        after_dry
            .keys()
            .all(|k| stored_before.iter().any(|p| k.starts_with(p))),
        "the dry run stored {after_dry:?}"
    );
    let applied = kubectl(h, &["apply", "--server-side", "-f", "-"], Some(&r.yaml));
    assert_eq!(applied.lines().count(), r.objects.len(), "{applied}");
    let first = versions(h, r);
    assert_eq!(first.len(), r.objects.len(), "every object stored");
    let again = kubectl(h, &["apply", "--server-side", "-f", "-"], Some(&r.yaml));
    assert!(
        again.lines().all(|l| l.ends_with("serverside-applied")),
        "{again}"
    );
    assert_eq!(
        versions(h, r),
        first,
        "applying the same manifests again changed objects"
    );
}

async fn overlay_applies(overlay: &str) {
    let Some(h) = Harness::start_real_or_skip(overlay).await else {
        return;
    };
    platform(&h).await;
    // The CRDs as `kubectl apply -k deploy/crds` sends them (the control plane has them already,
    // applied by the harness with the same content: kubectl's apply shares the fields).
    let crds = render(&deploy_dir().join("crds")).unwrap();
    apply_three_times(&h, &crds, &["CustomResourceDefinition/"]);
    let r = render(&overlay_dir(overlay)).unwrap();
    let namespace: Vec<&Value> = r
        .objects
        .iter()
        .filter(|o| o["kind"] == "Namespace")
        .collect();
    let ns_yaml = namespace
        .iter()
        .map(|o| serde_yaml::to_string(o).unwrap())
        .collect::<Vec<_>>()
        .join("---\n");
    // Objects in a namespace that does not exist fail a server-side dry run: the namespace first.
    kubectl(&h, &["apply", "--server-side", "-f", "-"], Some(&ns_yaml));
    apply_three_times(&h, &r, &["CustomResourceDefinition/", "Namespace/"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_replica_applies_server_side_on_kube_apiserver() {
    overlay_applies("single-replica").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ha_applies_server_side_on_kube_apiserver() {
    overlay_applies("ha").await;
}

fn resource(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1alpha1", kind), plural)
}

/// The 422 of a refused write: (message, causes as `[{reason, field, message}]`).
fn invalid(err: kube::Error) -> (String, Value) {
    match err {
        kube::Error::Api(s) => {
            assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"), "{s:?}");
            let causes: Vec<Value> = s
                .details
                .map(|d| d.causes)
                .unwrap_or_default()
                .into_iter()
                .map(|c| json!({"reason": c.reason, "field": c.field, "message": c.message}))
                .collect();
            (s.message, Value::Array(causes))
        }
        other => panic!("expected a 422, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cel_rules_are_refused_with_kube_apiserver_messages() {
    let Some(mut h) = Harness::start_real_or_skip("cel").await else {
        return;
    };
    let ns = h.temp_namespace("cel").await.unwrap();
    let jobs: Api<DynamicObject> = Api::namespaced_with(
        h.client(),
        &ns,
        &resource("backups.cozystack.io", "BackupJob", "backupjobs"),
    );
    let job: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "backups.cozystack.io/v1alpha1", "kind": "BackupJob",
        "metadata": {"name": "x"},
        "spec": {"applicationRef": {"kind": "MariaDB", "name": "db"}, "backupClassName": "daily"}
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let err = jobs
        .patch(
            "x",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"backupClassName": "weekly"}})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        invalid(err),
        (
            "BackupJob.backups.cozystack.io \"x\" is invalid: spec.backupClassName: Invalid value: \"weekly\": backupClassName is immutable".to_owned(),
            json!([{"reason": "FieldValueInvalid", "field": "spec.backupClassName",
                    "message": "Invalid value: \"weekly\": backupClassName is immutable"}])
        )
    );

    let strategies: Api<DynamicObject> = Api::all_with(
        h.client(),
        &resource("strategy.backups.cozystack.io", "MariaDB", "mariadbs"),
    );
    let s3 = json!({"bucket": "b", "endpoint": "http://s3",
        "accessKeyIdSecretKeyRef": {"name": "s", "key": "id"},
        "secretAccessKeySecretKeyRef": {"name": "s", "key": "secret"}});
    let message = "MariaDB.strategy.backups.cozystack.io \"m\" is invalid: spec.template.storage: Invalid value: exactly one of s3, persistentVolumeClaim or volume must be set";
    for storage in [json!({"s3": s3, "volume": {"emptyDir": {}}}), json!({})] {
        let strategy: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "strategy.backups.cozystack.io/v1alpha1", "kind": "MariaDB",
            "metadata": {"name": "m"}, "spec": {"template": {"storage": storage}}
        }))
        .unwrap();
        let err = strategies
            .create(&PostParams::default(), &strategy)
            .await
            .unwrap_err();
        assert_eq!(
            invalid(err),
            (
                message.to_owned(),
                json!([{"reason": "FieldValueInvalid", "field": "spec.template.storage",
                        "message": "Invalid value: exactly one of s3, persistentVolumeClaim or volume must be set"}])
            ),
            "storage {storage}"
        );
    }
    let one: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "strategy.backups.cozystack.io/v1alpha1", "kind": "MariaDB",
        "metadata": {"name": "m"}, "spec": {"template": {"storage": {"s3": s3}}}
    }))
    .unwrap();
    strategies
        .create(&PostParams::default(), &one)
        .await
        .unwrap();
    let _ = strategies.delete("m", &Default::default()).await;
    h.cleanup().await.unwrap();
}

/// `kubectl.<minor>` beside the `kubectl` on PATH (or in the Google Cloud SDK's directory, where
/// the Debian package puts its versioned builds).
fn versioned_kubectl(minor: &str) -> PathBuf {
    let name = format!("kubectl.{minor}");
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.push("/usr/lib/google-cloud-sdk/bin".into());
    dirs.into_iter()
        .map(|d| d.join(&name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} is not installed (the kubectl package has it)"))
}

/// kube-apiserver publishes a CRD's schema to `/openapi/v3` a moment after the CRD is
/// `Established`, and `kubectl explain` reads it from there: wait until the group's document
/// describes the BackupJob's spec, or fail after 60 s naming what was served.
async fn backupjob_schema_published(h: &Harness) {
    let path = "/openapi/v3/apis/backups.cozystack.io/v1alpha1";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut last: String;
    loop {
        let request = http::Request::get(path).body(Vec::new()).unwrap();
        match h.client().request_text(request).await {
            Ok(doc) if doc.contains("backupClassName") => return,
            Ok(doc) => last = doc.chars().take(300).collect(),
            Err(e) => last = e.to_string(),
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{path} did not describe the BackupJob within 60 s; last answer: {last}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_27_and_1_33_list_explain_and_apply_the_project_kinds() {
    let Some(mut h) = Harness::start_real_or_skip("kubectl").await else {
        return;
    };
    let ns = h.temp_namespace("kubectl").await.unwrap();
    backupjob_schema_published(&h).await;
    // The documentation's BackupJob, in the test's namespace.
    let example =
        std::fs::read_to_string(harness::workspace_root().join("examples/backupjob.yaml"))
            .unwrap()
            .replace("namespace: tenant-acme", &format!("namespace: {ns}"));
    for bin in [
        PathBuf::from("kubectl"),
        versioned_kubectl("1.27"),
        versioned_kubectl("1.33"),
    ] {
        let bin = bin.to_str().unwrap().to_owned();
        let run = |args: &[&str], stdin: Option<&str>| {
            ok(
                kubectl_with(&bin, &h, args, stdin),
                &format!("{bin} {}", args.join(" ")),
            )
        };
        let explain = run(&["explain", "backupjob.spec"], None);
        assert!(
            explain.contains("backupClassName") && explain.contains("applicationRef"),
            "{bin}: {explain}"
        );
        let explain = run(&["explain", "backupjob.spec.backupClassName"], None);
        assert!(
            explain.contains("FIELD: backupClassName")
                || explain.contains("FIELD:    backupClassName"),
            "{bin}: {explain}"
        );
        let applied = run(
            &[
                "apply",
                "--server-side",
                "--dry-run=server",
                "-n",
                &ns,
                "-f",
                "-",
            ],
            Some(&example),
        );
        assert!(
            applied.contains("serverside-applied (server dry run)"),
            "{bin}: {applied}"
        );
        run(
            &[
                "get",
                "backupjobs,backupclasses,plans,restorejobs",
                "-n",
                &ns,
            ],
            None,
        );
        let version = run(&["version", "-o", "json"], None);
        let v: Value = serde_json::from_str(&version).unwrap();
        assert_eq!(
            v["serverVersion"]["gitVersion"],
            h.control_plane().unwrap().version,
            "{bin}"
        );
    }
    h.cleanup().await.unwrap();
}
