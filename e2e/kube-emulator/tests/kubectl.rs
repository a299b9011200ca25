//! kubectl conformance suite: the installed kubectl (the dispatcher at /usr/bin/kubectl) and the pinned
//! 1.31 and 1.33 binaries, each with its own fresh KUBECACHEDIR, against a fresh emulator. A binary that is
//! not installed is reported and skipped.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
    cache: PathBuf,
    dir: PathBuf,
}

struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Kubectl {
    fn new(bin: &str, emu: &kube_emulator::Running) -> Option<Self> {
        let bin = PathBuf::from(bin);
        if !bin.exists() {
            println!("skipping: {} is not installed", bin.display());
            return None;
        }
        let dir = emu.kubeconfig_path().parent().unwrap().join("kubectl-work");
        std::fs::create_dir_all(&dir).unwrap();
        let cache = dir.join("cache");
        Some(Kubectl {
            bin,
            kubeconfig: emu.kubeconfig_path().into(),
            cache,
            dir,
        })
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("KUBECACHEDIR", &self.cache)
            .env("HOME", &self.dir)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        c
    }

    async fn run(&self, args: &[&str]) -> Out {
        let out = self.cmd(args).output().await.expect("kubectl runs");
        Out {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into(),
            stderr: String::from_utf8_lossy(&out.stderr).into(),
        }
    }

    /// Runs and requires success.
    async fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args).await;
        assert!(
            o.ok,
            "kubectl {} failed:\nstdout: {}\nstderr: {}",
            args.join(" "),
            o.stdout,
            o.stderr
        );
        o.stdout
    }

    fn file(&self, name: &str, text: &str) -> String {
        let p = self.dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    }
}

const W1: &str = "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  size: 3\n  color: blue\n";
const W2: &str =
    "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w2\nspec:\n  size: 1\n";
const W3: &str =
    "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w3\nspec:\n  size: 1\n";
const DEPLOY_V1: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: a
        image: img:1
        env: [{name: X, value: "1"}, {name: Z, value: "2"}]
      - name: b
        image: other:1
"#;
const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p1\nspec:\n  containers:\n  - name: c\n    image: busybox:1\n";

async fn scenario(bin: &str) {
    let emu = emulator().await;
    let Some(k) = Kubectl::new(bin, &emu) else {
        return;
    };
    let version = k.ok(&["version", "-o", "json"]).await;
    assert!(version.contains("\"gitVersion\": \"v1.33.0\""), "{version}");

    // CRDs: the project's own directory, and the inline test CRD.
    let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
    let has_project_crds = std::fs::read_dir(&crds).is_ok_and(|mut d| d.next().is_some());
    if has_project_crds {
        // Server-side: a client-side apply keeps the whole manifest in an annotation, which the largest
        // project CRDs would push past the 256 KiB annotation limit (see `client_side_apply_limit`).
        k.ok(&["apply", "--server-side", "-f", crds.to_str().unwrap()])
            .await;
    }
    let crd = k.file("crd.yaml", WIDGET_CRD);
    assert!(
        k.ok(&["apply", "-f", &crd])
            .await
            .contains("widgets.example.com created")
    );
    k.ok(&[
        "wait",
        "--for=condition=Established",
        "crd",
        "--all",
        "--timeout=20s",
    ])
    .await;
    if has_project_crds {
        k.ok(&["get", "backupclasses"]).await;
    }

    // create -f, get in every output form
    let w1 = k.file("w1.yaml", W1);
    k.ok(&["create", "-f", &w1]).await;
    let table = k.ok(&["get", "wd"]).await;
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, vec!["NAME", "SIZE", "READY", "AGE"], "{table}");
    assert!(table.lines().nth(1).unwrap().starts_with("w1 "), "{table}");
    let wide = k.ok(&["get", "widgets", "-o", "wide"]).await;
    assert!(wide.contains("COLOR") && wide.contains("blue"), "{wide}");
    assert!(
        k.ok(&["get", "wd", "w1", "-o", "yaml"])
            .await
            .contains("size: 3")
    );
    let json: serde_json::Value =
        serde_json::from_str(&k.ok(&["get", "wd", "w1", "-o", "json"]).await).unwrap();
    assert_eq!(json["spec"]["size"], 3);
    assert_eq!(
        k.ok(&["get", "wd", "w1", "-o", "jsonpath={.spec.size}"])
            .await,
        "3"
    );
    assert!(
        k.ok(&["get", "all"])
            .await
            .contains("widget.example.com/w1")
    );

    // client-side apply twice: strategic merge keeps both containers
    let d1 = k.file("deploy.yaml", DEPLOY_V1);
    k.ok(&["apply", "-f", &d1]).await;
    let d2 = k.file(
        "deploy2.yaml",
        &DEPLOY_V1.replace("img:1", "img:2").replace(
            r#"env: [{name: X, value: "1"}, {name: Z, value: "2"}]"#,
            r#"env: [{name: Z, value: "3"}]"#,
        ),
    );
    assert!(k.ok(&["apply", "-f", &d2]).await.contains("configured"));
    let containers = k
        .ok(&[
            "get",
            "deploy",
            "web",
            "-o",
            "jsonpath={.spec.template.spec.containers}",
        ])
        .await;
    let containers: serde_json::Value = serde_json::from_str(&containers).unwrap();
    assert_eq!(
        containers,
        serde_json::json!([{"name": "a", "image": "img:2", "env": [{"name": "Z", "value": "3"}],
                            "imagePullPolicy": "IfNotPresent", "terminationMessagePath": "/dev/termination-log",
                            "terminationMessagePolicy": "File"},
                           {"name": "b", "image": "other:1", "imagePullPolicy": "IfNotPresent",
                            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}])
    );

    // server-side apply, then a conflicting field manager
    let w2 = k.file("w2.yaml", W2);
    assert!(
        k.ok(&["apply", "--server-side", "-f", &w2])
            .await
            .contains("serverside-applied")
    );
    k.ok(&[
        "patch",
        "wd",
        "w2",
        "--type=merge",
        "-p",
        r#"{"spec":{"size":2}}"#,
    ])
    .await;
    let conflict = k.run(&["apply", "--server-side", "-f", &w2]).await;
    assert!(
        !conflict.ok && conflict.stderr.contains("conflict with \"kubectl-patch\""),
        "{}",
        conflict.stderr
    );
    k.ok(&["apply", "--server-side", "--force-conflicts", "-f", &w2])
        .await;

    // patches
    k.ok(&[
        "patch",
        "wd",
        "w1",
        "--type=merge",
        "-p",
        r#"{"spec":{"size":5}}"#,
    ])
    .await;
    k.ok(&[
        "patch",
        "wd",
        "w1",
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/spec/size","value":7}]"#,
    ])
    .await;
    let smp = k
        .run(&["patch", "wd", "w1", "-p", r#"{"spec":{"size":8}}"#])
        .await;
    assert!(
        !smp.ok
            && smp
                .stderr
                .contains("the body of the request was in an unknown format"),
        "{}",
        smp.stderr
    );
    k.ok(&[
        "wait",
        "--for=jsonpath={.spec.size}=7",
        "wd/w1",
        "--timeout=20s",
    ])
    .await;

    // labels and selectors
    k.ok(&["label", "wd", "w1", "tier=gold"]).await;
    assert_eq!(
        k.ok(&["get", "wd", "-l", "tier=gold", "-o", "name"])
            .await
            .trim(),
        "widget.example.com/w1"
    );

    // server-side dry run persists nothing
    let w3 = k.file("w3.yaml", W3);
    k.ok(&["create", "-f", &w3, "--dry-run=server"]).await;
    assert!(!k.run(&["get", "wd", "w3"]).await.ok);

    // logs through the admin hook
    let pod = k.file("pod.yaml", POD);
    k.ok(&["create", "-f", &pod]).await;
    emu.set_pod_log("default", "p1", Some("c"), "hello\nworld\n", false)
        .unwrap();
    assert_eq!(k.ok(&["logs", "p1"]).await, "hello\nworld\n");
    assert_eq!(
        k.ok(&["logs", "p1", "-c", "c", "--tail=1"]).await,
        "world\n"
    );

    // get --watch sees a change, then is stopped
    let mut watch = k
        .cmd(&["get", "wd", "w1", "--watch", "--no-headers"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(first.starts_with("w1 ") && first.contains(" 7 "), "{first}");
    k.ok(&[
        "patch",
        "wd",
        "w1",
        "--type=merge",
        "-p",
        r#"{"spec":{"size":9}}"#,
    ])
    .await;
    let next = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(next.starts_with("w1 ") && next.contains(" 9 "), "{next}");
    watch.kill().await.unwrap();

    // delete --wait, then it is gone
    k.ok(&["delete", "wd", "w1", "--wait=true", "--timeout=20s"])
        .await;
    let gone = k.run(&["get", "wd", "w1"]).await;
    assert!(
        !gone.ok && gone.stderr.contains("NotFound"),
        "{}",
        gone.stderr
    );

    // Generator commands: kubectl versions that send protobuf bodies get a 415 naming the JSON
    // workaround; versions that send JSON simply succeed.
    let pb = k
        .run(&["create", "configmap", "pb", "--from-literal=a=b"])
        .await;
    if pb.ok {
        assert!(
            k.ok(&["get", "configmap", "pb", "-o", "jsonpath={.data.a}"])
                .await
                == "b"
        );
    } else {
        assert!(
            pb.stderr
                .contains("--dry-run=client -o yaml | kubectl apply -f -"),
            "{}",
            pb.stderr
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installed_kubectl() {
    scenario("/usr/bin/kubectl").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_kubectl_1_31() {
    scenario("/usr/lib/google-cloud-sdk/bin/kubectl.1.31").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_kubectl_1_33() {
    scenario("/usr/lib/google-cloud-sdk/bin/kubectl.1.33").await;
}

/// Server-side apply fidelity with the installed kubectl: identical re-applies are not conflicts (a CRD
/// preloaded from `deploy/crds`, then applied with `--server-side`; a Deployment applied twice), and a
/// changed value of a field another manager owns still is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_reapply_and_real_conflict() {
    let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
    let emu = emulator_with(kube_emulator::Config::default().with_crds(&crds)).await;
    let Some(k) = Kubectl::new("/usr/bin/kubectl", &emu) else {
        return;
    };
    let crd = crds.join("backupjobs.backups.cozystack.io.yaml");
    let crd = crd.to_str().unwrap();
    for _ in 0..2 {
        assert_eq!(
            k.ok(&["apply", "--server-side", "-f", crd]).await,
            "customresourcedefinition.apiextensions.k8s.io/backupjobs.backups.cozystack.io serverside-applied\n"
        );
    }
    let managers = k
        .ok(&[
            "get",
            "crd",
            "backupjobs.backups.cozystack.io",
            "--show-managed-fields",
            "-o",
            "jsonpath={range .metadata.managedFields[*]}{.manager}/{.operation} {end}",
        ])
        .await;
    assert_eq!(managers, "kube-emulator/Update kubectl/Apply ");

    let deploy = k.file("ssa-deploy.yaml", DEPLOY_V1);
    let rv_args = [
        "get",
        "deploy",
        "web",
        "-o",
        "jsonpath={.metadata.resourceVersion}",
    ];
    assert_eq!(
        k.ok(&["apply", "--server-side", "-f", &deploy]).await,
        "deployment.apps/web serverside-applied\n"
    );
    let first = k.ok(&rv_args).await;
    assert_eq!(
        k.ok(&["apply", "--server-side", "-f", &deploy]).await,
        "deployment.apps/web serverside-applied\n"
    );
    assert_eq!(
        k.ok(&rv_args).await,
        first,
        "an identical re-apply is a no-op"
    );

    // Another manager changes a field kubectl applied; re-applying the old value is a real conflict.
    k.ok(&[
        "patch",
        "deploy",
        "web",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"a","image":"img:9"}]}}}}"#,
    ])
    .await;
    let conflict = k.run(&["apply", "--server-side", "-f", &deploy]).await;
    assert!(!conflict.ok);
    assert_eq!(
        conflict.stderr.lines().next().unwrap(),
        r#"error: Apply failed with 1 conflict: conflict with "kubectl-patch" using apps/v1: .spec.template.spec.containers[name="a"].image"#
    );
    // Several conflicts are grouped under their manager, one field per line.
    k.ok(&[
        "patch",
        "deploy",
        "web",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"b","image":"other:9"}]}}}}"#,
    ])
    .await;
    let conflict = k.run(&["apply", "--server-side", "-f", &deploy]).await;
    assert!(!conflict.ok);
    assert_eq!(
        conflict.stderr.lines().take(3).collect::<Vec<_>>(),
        vec![
            r#"error: Apply failed with 2 conflicts: conflicts with "kubectl-patch" using apps/v1:"#,
            r#"- .spec.template.spec.containers[name="a"].image"#,
            r#"- .spec.template.spec.containers[name="b"].image"#,
        ]
    );
    k.ok(&["apply", "--server-side", "--force-conflicts", "-f", &deploy])
        .await;
    assert_eq!(
        k.ok(&[
            "get",
            "deploy",
            "web",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}"
        ])
        .await,
        "img:1"
    );
}

/// The object as `kubectl get -o json` shows it, without the fields the server assigns per object (the
/// uid also where the server copied it, e.g. into a Job's generated selector).
fn without_server_fields(mut v: serde_json::Value, rename: Option<&str>) -> serde_json::Value {
    let meta = v["metadata"].as_object_mut().unwrap();
    let uid = meta["uid"].as_str().unwrap().to_string();
    for k in ["uid", "resourceVersion", "creationTimestamp"] {
        meta.remove(k);
    }
    if let Some(n) = rename {
        meta.insert("name".into(), serde_json::json!(n));
    }
    serde_json::from_str(&v.to_string().replace(&uid, "UID")).unwrap()
}

/// kubectl's generator commands send protobuf bodies (`k8s\0` + runtime.Unknown). Each one succeeds, and the
/// object it creates equals the one created from the same command's JSON (`--dry-run=client -o json` piped
/// through `create -f`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_generator_commands() {
    let emu = emulator().await;
    let Some(k) = Kubectl::new("/usr/bin/kubectl", &emu) else {
        return;
    };
    let cases: &[(&str, &[&str], &str)] = &[
        (
            "namespace",
            &["create", "namespace", "NAME"],
            "namespace/NAME created\n",
        ),
        (
            "configmap",
            &[
                "create",
                "configmap",
                "NAME",
                "--from-literal=a=b",
                "--from-literal=c=d",
            ],
            "configmap/NAME created\n",
        ),
        (
            "secret",
            &[
                "create",
                "secret",
                "generic",
                "NAME",
                "--from-literal=user=pw",
            ],
            "secret/NAME created\n",
        ),
        (
            "serviceaccount",
            &["create", "serviceaccount", "NAME"],
            "serviceaccount/NAME created\n",
        ),
        (
            "deployment",
            &[
                "create",
                "deployment",
                "NAME",
                "--image=nginx:1",
                "--port=80",
                "--replicas=2",
            ],
            "deployment.apps/NAME created\n",
        ),
        (
            "job",
            &[
                "create",
                "job",
                "NAME",
                "--image=busybox:1",
                "--",
                "echo",
                "hi",
            ],
            "job.batch/NAME created\n",
        ),
    ];
    for (resource, args, created) in cases {
        let with =
            |name: &str| -> Vec<String> { args.iter().map(|a| a.replace("NAME", name)).collect() };
        let pb_args = with("pb");
        let pb_args: Vec<&str> = pb_args.iter().map(String::as_str).collect();
        assert_eq!(k.ok(&pb_args).await, created.replace("NAME", "pb"));

        let mut json_args = with("js");
        json_args.splice(
            1..1,
            ["--dry-run=client".to_string(), "-o".into(), "json".into()],
        );
        let json_args: Vec<&str> = json_args.iter().map(String::as_str).collect();
        let manifest = k.file(&format!("{resource}.json"), &k.ok(&json_args).await);
        k.ok(&["create", "-f", &manifest]).await;

        let get = |name: &'static str| {
            let k = &k;
            async move {
                let out = k.ok(&["get", resource, name, "-o", "json"]).await;
                serde_json::from_str::<serde_json::Value>(&out).unwrap()
            }
        };
        let pb = without_server_fields(get("pb").await, None);
        let js = without_server_fields(get("js").await, Some("pb"));
        let js = serde_json::to_string(&js)
            .unwrap()
            .replace("\"js\"", "\"pb\"");
        assert_eq!(
            pb,
            serde_json::from_str::<serde_json::Value>(&js).unwrap(),
            "{resource}"
        );
    }

    // The stored objects, whole.
    let yaml = |args: &'static [&'static str]| {
        let k = &k;
        async move {
            let out = k.ok(args).await;
            out.lines()
                .filter(|l| {
                    !["  creationTimestamp:", "  resourceVersion:", "  uid:"]
                        .iter()
                        .any(|p| l.starts_with(p))
                })
                .collect::<Vec<_>>()
                .join("\n")
        }
    };
    assert_eq!(
        yaml(&["get", "configmap", "pb", "-o", "yaml"]).await,
        "apiVersion: v1\ndata:\n  a: b\n  c: d\nkind: ConfigMap\nmetadata:\n  name: pb\n  namespace: default"
    );
    assert_eq!(
        yaml(&["get", "secret", "pb", "-o", "yaml"]).await,
        "apiVersion: v1\ndata:\n  user: cHc=\nkind: Secret\nmetadata:\n  name: pb\n  namespace: default\ntype: Opaque"
    );
    assert_eq!(
        yaml(&["get", "namespace", "pb", "-o", "yaml"]).await,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: pb\nspec:\n  finalizers:\n  - kubernetes\nstatus:\n  phase: Active"
    );
    assert_eq!(
        yaml(&["get", "serviceaccount", "pb", "-o", "yaml"]).await,
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: pb\n  namespace: default"
    );
    let deploy: serde_json::Value = serde_json::from_str(
        &k.ok(&["get", "deployment", "pb", "-o", "jsonpath={.spec}"])
            .await,
    )
    .unwrap();
    assert_eq!(deploy["replicas"], 2);
    assert_eq!(
        deploy["selector"],
        serde_json::json!({"matchLabels": {"app": "pb"}})
    );
    assert_eq!(
        deploy["template"]["spec"]["containers"][0]["ports"],
        serde_json::json!([{"containerPort": 80, "protocol": "TCP"}])
    );
    let job: serde_json::Value = serde_json::from_str(
        &k.ok(&["get", "job", "pb", "-o", "jsonpath={.spec.template.spec}"])
            .await,
    )
    .unwrap();
    assert_eq!(job["restartPolicy"], "Never");
    assert_eq!(
        job["containers"][0]["command"],
        serde_json::json!(["echo", "hi"])
    );

    // A served kind the decoder does not convert keeps the 415 naming the JSON workaround.
    let svc = k
        .run(&["create", "service", "clusterip", "svc", "--tcp=80:8080"])
        .await;
    assert!(!svc.ok);
    assert_eq!(
        svc.stderr,
        "error: failed to create ClusterIP service: the kube-emulator does not decode protobuf request bodies for v1 Service (it decodes Namespace, ConfigMap, Secret, ServiceAccount, apps/v1 Deployment and batch/v1 Job as kubectl's generator commands send them); use `kubectl create ... --dry-run=client -o yaml | kubectl apply -f -` instead, which sends JSON\n"
    );
}

/// The first line of each listing, split into column names.
fn header(table: &str) -> Vec<String> {
    table
        .lines()
        .next()
        .unwrap_or_default()
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(str::to_string)
        .collect()
}

/// The row of `name` in a listing, split into cells.
fn row(table: &str, name: &str) -> Vec<String> {
    table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no row {name} in:\n{table}"))
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(str::to_string)
        .collect()
}

const BUILTINS: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: a, image: "nginx:1"}, {name: b, image: "busybox:1"}]}
---
apiVersion: v1
kind: Namespace
metadata: {name: team}
---
apiVersion: v1
kind: Pod
metadata: {name: p1}
spec: {containers: [{name: c, image: "busybox:1"}]}
---
apiVersion: v1
kind: Secret
metadata: {name: s}
stringData: {user: u, password: p}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: c}
data: {a: "1", b: "2", c: "3"}
---
apiVersion: v1
kind: Service
metadata: {name: svc}
spec: {selector: {app: web}, ports: [{port: 80}]}
---
apiVersion: batch/v1
kind: Job
metadata: {name: j}
spec:
  template:
    spec: {restartPolicy: Never, containers: [{name: c, image: "busybox:1"}]}
---
apiVersion: v1
kind: Event
metadata: {name: p1.1}
involvedObject: {kind: Pod, name: p1, namespace: default}
reason: Started
message: "hello there "
type: Normal
source: {component: kubelet, host: node-1}
firstTimestamp: "2026-01-01T00:00:00Z"
lastTimestamp: "2026-01-01T00:00:00Z"
count: 3
"#;

/// `kubectl get` of the built-in kinds shows the columns kubectl users know, filled as upstream's
/// printers fill them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builtin_tables_show_kubectls_columns() {
    let emu = emulator().await;
    let Some(k) = Kubectl::new("/usr/bin/kubectl", &emu) else {
        return;
    };
    let f = k.file("builtins.yaml", BUILTINS);
    k.ok(&["create", "-f", &f]).await;
    let cases: &[(&str, &str, &[&str], &[&str])] = &[
        (
            "deployments",
            "web",
            &["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
            &["web", "0/2", "0", "0"],
        ),
        (
            "namespaces",
            "team",
            &["NAME", "STATUS", "AGE"],
            &["team", "Active"],
        ),
        (
            "pods",
            "p1",
            &["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
            &["p1", "0/1", "Pending", "0"],
        ),
        (
            "secrets",
            "s",
            &["NAME", "TYPE", "DATA", "AGE"],
            &["s", "Opaque", "2"],
        ),
        ("configmaps", "c", &["NAME", "DATA", "AGE"], &["c", "3"]),
        (
            "services",
            "svc",
            &[
                "NAME",
                "TYPE",
                "CLUSTER-IP",
                "EXTERNAL-IP",
                "PORT(S)",
                "AGE",
            ],
            &["svc", "ClusterIP", "CLUSTER-IP", "<none>", "80/TCP"],
        ),
        (
            "jobs",
            "j",
            &["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"],
            &["j", "Running", "0/1"],
        ),
    ];
    for (resource, name, want_header, want_cells) in cases {
        let table = k.ok(&["get", resource]).await;
        assert_eq!(header(&table), *want_header, "{resource}:\n{table}");
        let mut cells = row(&table, name);
        if *resource == "services" {
            // The allocated address varies; it is one of the emulator's service range.
            assert!(cells[2].starts_with("10.96."), "{table}");
            cells[2] = "CLUSTER-IP".into();
        }
        assert_eq!(
            &cells[..want_cells.len()],
            *want_cells,
            "{resource}:\n{table}"
        );
    }
    // Events: LAST SEEN comes first, OBJECT is kind/name, the message is trimmed.
    let events = k.ok(&["get", "events"]).await;
    assert_eq!(
        header(&events),
        vec!["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
        "{events}"
    );
    let line = events.lines().nth(1).unwrap();
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        &cells[1..],
        &["Normal", "Started", "pod/p1", "hello", "there"]
    );
    // Wide columns.
    let wide = k.ok(&["get", "deployment", "web", "-o", "wide"]).await;
    assert_eq!(
        header(&wide),
        vec![
            "NAME",
            "READY",
            "UP-TO-DATE",
            "AVAILABLE",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR"
        ]
    );
    assert_eq!(
        &row(&wide, "web")[5..],
        &["a,b", "nginx:1,busybox:1", "app=web"]
    );
    let wide = k.ok(&["get", "events", "-o", "wide"]).await;
    assert!(
        wide.lines().nth(1).unwrap().contains("kubelet, node-1"),
        "{wide}"
    );
}

const WIDGET_SELECTABLE: &str = "    selectableFields: [{jsonPath: .spec.color}]\n";

/// `kubectl explain` reads the served schemas; kubectl 1.27 (which validates through `/openapi/v2` as
/// protobuf) creates and applies with its default validation; `--chunk-size` pages through lists; CRD
/// selectable fields work in `--field-selector`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_old_kubectl_chunks_and_selectable_fields() {
    let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
    let emu = emulator_with(kube_emulator::Config::default().with_crds(&crds)).await;
    let Some(k) = Kubectl::new("/usr/lib/google-cloud-sdk/bin/kubectl.1.33", &emu) else {
        return;
    };
    let explain = k.ok(&["explain", "backupjob.spec"]).await;
    assert!(
        explain.contains("KIND:       BackupJob")
            && explain.contains("backupClassName\t<string> -required-"),
        "{explain}"
    );
    let explain = k.ok(&["explain", "deployment.spec.replicas"]).await;
    assert!(
        explain.contains("FIELD: replicas <integer>")
            && explain.contains("Number of desired pods."),
        "{explain}"
    );

    if let Some(old) = Kubectl::new("/usr/lib/google-cloud-sdk/bin/kubectl.1.27", &emu) {
        let job = old.file(
            "bj.yaml",
            "apiVersion: backups.cozystack.io/v1alpha1\nkind: BackupJob\nmetadata: {name: bj1}\nspec:\n  applicationRef: {kind: MariaDB, name: db}\n  backupClassName: fast\n",
        );
        assert_eq!(
            old.ok(&["create", "-f", &job]).await,
            "backupjob.backups.cozystack.io/bj1 created\n"
        );
        // Its default validation is Strict, enforced by the server.
        let bad = old.file(
            "bad.yaml",
            "apiVersion: backups.cozystack.io/v1alpha1\nkind: BackupJob\nmetadata: {name: bj2}\nspec:\n  applicationRef: {kind: MariaDB, name: db}\n  backupClassName: fast\n  colour: red\n",
        );
        let out = old.run(&["create", "-f", &bad]).await;
        assert!(
            !out.ok && out.stderr.contains("unknown field \"spec.colour\""),
            "{}",
            out.stderr
        );
        let deploy = old.file("d.yaml", DEPLOY_V1);
        old.ok(&["apply", "-f", &deploy]).await;
        let d2 = old.file("d2.yaml", &DEPLOY_V1.replace("img:1", "img:2"));
        assert_eq!(
            old.ok(&["apply", "-f", &d2]).await,
            "deployment.apps/web configured\n"
        );
        assert_eq!(
            old.ok(&[
                "get",
                "deploy",
                "web",
                "-o",
                "jsonpath={.spec.template.spec.containers[*].image}"
            ])
            .await,
            "img:2 other:1"
        );
        let explain = old
            .ok(&[
                "explain",
                "--output",
                "plaintext-openapiv2",
                "backupjob.spec",
            ])
            .await;
        assert!(explain.contains("backupClassName"), "{explain}");
    }

    // --chunk-size pages through a list and prints every object once.
    for i in 0..5 {
        k.ok(&["create", "configmap", &format!("chunk-{i}")]).await;
    }
    let names = k
        .ok(&["get", "configmaps", "--chunk-size=2", "-o", "name"])
        .await;
    assert_eq!(
        names,
        (0..5)
            .map(|i| format!("configmap/chunk-{i}\n"))
            .collect::<String>()
    );
    let table = k.ok(&["get", "configmaps", "--chunk-size=2"]).await;
    assert_eq!(table.lines().count(), 6, "{table}");
    let pages = emu
        .audit_log()
        .lines()
        .filter(|l| {
            l.contains("\"resource\":\"configmaps\"")
                && l.contains("\"verb\":\"list\"")
                && l.contains("limit=2")
        })
        .count();
    assert_eq!(pages, 6, "3 pages for each of the two listings");

    // Selectable fields.
    let crd = k.file(
        "crd.yaml",
        &WIDGET_CRD.replace(
            "    subresources: {status: {}}\n",
            &format!("    subresources: {{status: {{}}}}\n{WIDGET_SELECTABLE}"),
        ),
    );
    k.ok(&["apply", "-f", &crd]).await;
    k.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/widgets.example.com",
        "--timeout=20s",
    ])
    .await;
    let w = k.file("ws.yaml", &format!("{W1}---\n{W2}"));
    k.ok(&["create", "-f", &w]).await;
    assert_eq!(
        k.ok(&[
            "get",
            "wd",
            "--field-selector",
            "spec.color=blue",
            "-o",
            "name"
        ])
        .await,
        "widget.example.com/w1\n"
    );
    let bad = k
        .run(&["get", "wd", "--field-selector", "spec.size=1"])
        .await;
    assert!(
        !bad.ok && bad.stderr.contains("field label not supported: spec.size"),
        "{}",
        bad.stderr
    );
}

/// What a real API server rejects fails through kubectl with upstream's wording: an invalid label value,
/// a Deployment whose selector misses its template, and a client-side apply whose last-applied annotation
/// would exceed the 256 KiB annotation limit (the largest project CRDs need `--server-side`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_objects_fail_through_kubectl() {
    let emu = emulator().await;
    let Some(k) = Kubectl::new("/usr/bin/kubectl", &emu) else {
        return;
    };
    let long = "x".repeat(64);
    let cm = k.file(
        "cm.yaml",
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  labels: {{owner: {long}}}\n"
        ),
    );
    let out = k.run(&["create", "-f", &cm]).await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains(&format!(
            "The ConfigMap \"c\" is invalid: metadata.labels: Invalid value: \"{long}\": must be no more than 63 characters"
        )),
        "{}",
        out.stderr
    );
    let deploy = k.file(
        "d.yaml",
        &DEPLOY_V1.replace(
            "metadata: {labels: {app: web}}",
            "metadata: {labels: {app: api}}",
        ),
    );
    let out = k.run(&["apply", "-f", &deploy]).await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains("The Deployment \"web\" is invalid: spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"api\"}: `selector` does not match template `labels`"),
        "{}",
        out.stderr
    );
    let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
    let big = crds.join("foundationdbs.strategy.backups.cozystack.io.yaml");
    if big.exists() {
        let big = big.to_str().unwrap();
        let out = k.run(&["apply", "-f", big]).await;
        assert!(
            !out.ok
                && out
                    .stderr
                    .contains("metadata.annotations: Too long: may not be more than 262144 bytes"),
            "{}",
            out.stderr
        );
        assert_eq!(
            k.ok(&["apply", "--server-side", "-f", big]).await,
            "customresourcedefinition.apiextensions.k8s.io/foundationdbs.strategy.backups.cozystack.io serverside-applied\n"
        );
    }
}
