//! Each overlay, as rendered, applied to the emulator with server-side apply (first
//! `--dry-run=server`, then for real), and the real binaries started from the rendered
//! Deployments until `/ready`.
//!
//! The one deviation from the manifests: `ADMIN_ADDR` (the manifests say `0.0.0.0:8080`) is
//! `127.0.0.1:0`, so that processes on one machine do not collide; the harness sets it. For the
//! ha overlay the lease server is started from its own rendered Deployment (its `GRPC_ADDR`
//! likewise on `127.0.0.1:0`), and its address replaces the in-cluster Service address in the
//! daemons' `LEASE_ENDPOINT`. `valueFrom.fieldRef` `metadata.name` becomes `<deployment>-<n>`.

use std::collections::BTreeMap;
use std::process::Output;
use std::time::Duration;

use deploy_checks::{
    Container, DAEMONS, Local, NAMESPACE, PLATFORM_NAMESPACES, Rendered, deploy_dir, overlay_dir,
    render,
};
use harness::{DaemonSpec, EmulatorMode, Harness};

const READY: Duration = Duration::from_secs(90);
const LEASE_ENDPOINT: &str = "lease-server.cozy-backup-controller.svc:9090";

/// `kubectl --kubeconfig <emulator> <args>` with its own discovery cache, `stdin` piped in.
fn kubectl(h: &Harness, args: &[&str], stdin: Option<&str>) -> Output {
    let cache = h.work_dir().join("kube-cache");
    let mut all = vec!["--cache-dir", cache.to_str().expect("a UTF-8 work dir")];
    all.extend_from_slice(args);
    h.kubectl_output(&all, stdin)
}

fn kubectl_ok(h: &Harness, args: &[&str], stdin: Option<&str>) -> String {
    let out = kubectl(h, args, stdin);
    assert!(
        out.status.success(),
        "kubectl {} failed:\nstdout: {}\nstderr: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What the platform provides before the installation: the namespaces it owns that the manifests
/// put objects into, and the CRDs of the operators the daemons work with (COSI, Velero, CNPG, …;
/// the daemons watch them, and a real Cozystack cluster has them).
async fn platform(h: &Harness) {
    for ns in PLATFORM_NAMESPACES {
        kubectl_ok(h, &["create", "namespace", ns], None);
    }
    use operator_sims::Sim;
    let mut crds = Vec::new();
    for sim in [
        Sim::Cosi,
        Sim::Velero,
        Sim::Cnpg,
        Sim::Flux,
        Sim::Mariadb,
        Sim::Etcd,
        Sim::Fdb,
        Sim::Psmdb,
    ] {
        crds.extend(sim.crds());
    }
    operator_sims::install_crds(&h.client(), &crds)
        .await
        .unwrap();
}

/// The rendered objects whose kind `keep` accepts, as YAML documents.
fn yaml_of(r: &Rendered, keep: impl Fn(&str) -> bool) -> String {
    r.objects
        .iter()
        .filter(|o| keep(o["kind"].as_str().unwrap_or_default()))
        .map(|o| serde_yaml::to_string(o).unwrap())
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Which objects of the rendered set exist: `kind/namespace/name` of each, from one
/// `kubectl get -f - --ignore-not-found`.
fn existing(h: &Harness, r: &Rendered) -> Vec<String> {
    let out = kubectl_ok(
        h,
        &["get", "-f", "-", "--ignore-not-found", "-o", "json"],
        Some(&r.yaml),
    );
    if out.trim().is_empty() {
        return Vec::new();
    }
    let list: serde_json::Value = serde_json::from_str(&out).unwrap();
    let items = match list["kind"].as_str() {
        Some("List") => list["items"].as_array().cloned().unwrap_or_default(),
        _ => vec![list],
    };
    items
        .iter()
        .map(|o| {
            format!(
                "{}/{}/{}",
                o["kind"].as_str().unwrap(),
                o["metadata"]["namespace"].as_str().unwrap_or(""),
                o["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect()
}

/// Server-side apply, dry run first: the CRDs (`kubectl apply -k deploy/crds`), then the overlay.
async fn apply_overlay(overlay: &str) {
    let h = Harness::start_with(EmulatorMode::InProcess, None)
        .await
        .unwrap();
    platform(&h).await;
    let crds = render(&deploy_dir().join("crds")).unwrap();
    let r = render(&overlay_dir(overlay)).unwrap();
    let crd_dir = deploy_dir().join("crds");
    let crd_dir = crd_dir.to_str().unwrap();

    let dry = kubectl_ok(
        &h,
        &["apply", "--server-side", "--dry-run=server", "-k", crd_dir],
        None,
    );
    assert_eq!(
        dry.lines().count(),
        crds.objects.len(),
        "one line per CRD: {dry}"
    );
    assert!(existing(&h, &crds).is_empty(), "a dry run stores nothing");
    kubectl_ok(&h, &["apply", "--server-side", "-k", crd_dir], None);
    assert_eq!(existing(&h, &crds).len(), crds.objects.len());
    // As the README waits: the rendered CRDs on stdin.
    kubectl_ok(
        &h,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=30s",
            "-f",
            "-",
        ],
        Some(&crds.yaml),
    );

    // A server-side dry run of objects in a namespace that does not exist yet fails (NotFound),
    // on a real API server as here: the namespace goes first, as in the README.
    let namespace = yaml_of(&r, |k| k == "Namespace");
    let dry = kubectl_ok(
        &h,
        &["apply", "--server-side", "--dry-run=server", "-f", "-"],
        Some(&namespace),
    );
    assert_eq!(
        dry.trim(),
        format!("namespace/{NAMESPACE} serverside-applied (server dry run)")
    );
    kubectl_ok(&h, &["apply", "--server-side", "-f", "-"], Some(&namespace));
    let dry = kubectl_ok(
        &h,
        &["apply", "--server-side", "--dry-run=server", "-f", "-"],
        Some(&r.yaml),
    );
    assert_eq!(dry.lines().count(), r.objects.len(), "{dry}");
    assert!(
        dry.lines().all(|l| l.ends_with("(server dry run)")),
        "{dry}"
    );
    let before = existing(&h, &r);
    assert!(
        before
            .iter()
            .all(|o| o.starts_with("CustomResourceDefinition/") || o.starts_with("Namespace/")),
        "the dry run stored {before:?}"
    );
    let applied = kubectl_ok(&h, &["apply", "--server-side", "-f", "-"], Some(&r.yaml));
    assert_eq!(
        applied.lines().count(),
        r.objects.len(),
        "every object applied: {applied}"
    );
    let all: Vec<String> = r
        .objects
        .iter()
        .map(|o| {
            format!(
                "{}/{}/{}",
                o["kind"].as_str().unwrap(),
                o["metadata"]["namespace"].as_str().unwrap_or(""),
                o["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(existing(&h, &r), all);

    // Applying the same again (an upgrade without changes) conflicts with nothing.
    let again = kubectl_ok(&h, &["apply", "--server-side", "-f", "-"], Some(&r.yaml));
    assert!(
        again.lines().all(|l| l.ends_with("serverside-applied")),
        "{again}"
    );
    // What a `kubectl apply -k` of the overlay would send is the same set of objects.
    let via_k = kubectl_ok(
        &h,
        &[
            "apply",
            "--server-side",
            "--dry-run=server",
            "-k",
            overlay_dir(overlay).to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(via_k.lines().count(), r.objects.len(), "{via_k}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_replica_applies_server_side() {
    apply_overlay("single-replica").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ha_applies_server_side() {
    apply_overlay("ha").await;
}

/// Applies the overlay (without CRDs: the harness loaded every CRD, the platform's
/// ApplicationDefinition included, which apidef-restarter watches) and starts every replica of
/// every rendered Deployment from its manifest; returns the RSS each reported at `/ready`.
async fn start_overlay(overlay: &str) -> BTreeMap<String, String> {
    let mut h = Harness::start().await.unwrap();
    platform(&h).await;
    let r = render(&overlay_dir(overlay)).unwrap();
    kubectl_ok(
        &h,
        &["apply", "--server-side", "-f", "-"],
        Some(&yaml_of(&r, |k| k != "CustomResourceDefinition")),
    );

    let mut replace = Vec::new();
    if let Some(lease) = r.find("Deployment", "lease-server") {
        let c = Container::of(lease).unwrap();
        let local = Local {
            pod_name: "lease-server-0".into(),
            replace: Vec::new(),
            skip: vec!["ADMIN_ADDR".into()],
        };
        let mut spec =
            DaemonSpec::new("lease-server-0", harness::locate_binary(&c.binary).unwrap())
                .args(c.args.clone());
        for (k, v) in c.env(&local).unwrap() {
            spec = spec.env(&k, &v);
        }
        // spawn_lease_server binds gRPC on 127.0.0.1:0 (`--grpc-addr`, which wins over GRPC_ADDR).
        let grpc = h.spawn_lease_server(spec, READY).await.unwrap();
        replace.push((LEASE_ENDPOINT.to_owned(), grpc));
    }

    let mut names = Vec::new();
    for name in DAEMONS {
        let d = r.find("Deployment", name).unwrap();
        let c = Container::of(d).unwrap();
        let replicas = d["spec"]["replicas"].as_u64().unwrap();
        for i in 0..replicas {
            let pod = format!("{name}-{i}");
            let env = c
                .env(&Local {
                    pod_name: pod.clone(),
                    replace: replace.clone(),
                    skip: vec!["ADMIN_ADDR".into()],
                })
                .unwrap();
            if overlay == "ha" {
                assert_ne!(
                    env["LEASE_ENDPOINT"], LEASE_ENDPOINT,
                    "replaced by the local server"
                );
            }
            let mut spec = DaemonSpec::new(&pod, harness::locate_binary(&c.binary).unwrap())
                .args(c.args.clone());
            for (k, v) in env {
                spec = spec.env(&k, &v);
            }
            h.spawn(spec).unwrap();
            names.push(pod);
        }
    }
    // In ha, `/ready` includes the check `lease`, ready once the lease server answered.
    let lease_check = if replace.is_empty() {
        "ok lease: single-replica mode (--lease-endpoint=none)"
    } else {
        "ok lease"
    };
    let mut rss = BTreeMap::new();
    for pod in &names {
        let d = h.daemon(pod).unwrap();
        if let Err(e) = d.wait_ready(READY).await {
            panic!("{pod}: {e}\n{}", d.log());
        }
        let report = d.admin().await.unwrap().ready_report();
        assert!(
            report.lines().any(|l| l == lease_check),
            "{pod}: no `{lease_check}` in /ready:\n{report}"
        );
        rss.insert(pod.clone(), harness::rss(d.pid()));
    }
    for (pod, mem) in &rss {
        println!("{overlay} {pod}: ready, {mem}");
    }
    assert!(
        r.find("Namespace", NAMESPACE).is_some(),
        "the overlay creates its namespace"
    );
    rss
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_replica_binaries_start_from_the_rendered_manifests() {
    let ready = start_overlay("single-replica").await;
    assert_eq!(ready.len(), DAEMONS.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ha_binaries_start_from_the_rendered_manifests_on_a_lease_server() {
    let ready = start_overlay("ha").await;
    assert_eq!(ready.len(), 2 * DAEMONS.len());
}
