//! End to end: the real `apidef-restarter` binary against the kube emulator (e2e/harness).
//!
//! Patches are counted exactly from the emulator's audit log (successful `patch` requests on the
//! target Deployment) and cross-checked with the Deployment's `metadata.generation`. "Nothing more
//! happened" is never a sleep: after the expected state is reached, a labels-only edit is made and
//! the test waits for the daemon's skips counter to move, which proves the daemon has evaluated
//! every earlier event; only then are patches counted.

use harness::{DaemonSpec, Harness};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::time::Duration;
use tokio::time::Instant;

const BIN: &str = "apidef-restarter";
const DEPLOYMENT: &str = "cozystack-api";
/// The namespace `deploy/apidef-restarter/rbac.yaml` grants the daemon its Deployment in.
const NAMESPACE: &str = "cozy-system";
const KEY: &str = "cozystack.io/config-hash";
const DEADLINE: Duration = Duration::from_secs(30);

struct Env {
    h: Harness,
    ns: String,
    client: kube::Client,
}

impl Env {
    /// An emulator, the `cozy-system` namespace (where the daemon's Role lets it patch the
    /// Deployment), three definitions and optionally the Deployment (without the annotation).
    async fn start(with_deployment: bool) -> Env {
        let h = Harness::start().await.expect("harness");
        h.create_namespaces(&[NAMESPACE]).await.expect("namespace");
        let ns = NAMESPACE.to_owned();
        let client = h.client();
        let env = Env { h, ns, client };
        for (name, kind) in [
            ("tcp-balancer", "TCPBalancer"),
            ("http-cache", "HTTPCache"),
            ("vm-disk", "VMDisk"),
        ] {
            env.create_definition(name, kind).await;
        }
        if with_deployment {
            env.create_deployment().await;
        }
        env
    }

    async fn spawn(&mut self, debounce: &str) {
        let bin = harness::locate_binary(BIN).expect("apidef-restarter is built");
        let spec = DaemonSpec::new(BIN, bin).args([
            "--namespace",
            &self.ns,
            "--debounce",
            debounce,
            "--lease-endpoint",
            "none",
        ]);
        self.h
            .spawn_ready(spec, DEADLINE)
            .await
            .expect("daemon ready");
    }

    fn defs(&self) -> Api<DynamicObject> {
        Api::all_with(self.client.clone(), &appdef::api_resource())
    }

    fn deployments(&self) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    async fn create_definition(&self, name: &str, kind: &str) {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cozystack.io/v1alpha1", "kind": "ApplicationDefinition",
            "metadata": {"name": name},
            "spec": {
                "application": {"kind": kind, "openAPISchema": schema(0),
                                "plural": format!("{}s", kind.to_lowercase()), "singular": kind.to_lowercase()},
                "release": {"prefix": format!("{name}-"),
                            "chartRef": {"kind": "ExternalArtifact", "name": name, "namespace": "cozy-public"}}
            }
        }))
        .unwrap();
        self.defs()
            .create(&PostParams::default(), &obj)
            .await
            .unwrap();
    }

    async fn create_deployment(&self) {
        let d: Deployment = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": DEPLOYMENT, "namespace": self.ns},
            "spec": {
                "selector": {"matchLabels": {"app": DEPLOYMENT}},
                "template": {
                    "metadata": {"labels": {"app": DEPLOYMENT}},
                    "spec": {"containers": [{"name": "api", "image": "cozystack-api:dev"}]}
                }
            }
        }))
        .unwrap();
        self.deployments()
            .create(&PostParams::default(), &d)
            .await
            .unwrap();
    }

    /// A spec change: a new schema revision.
    async fn edit_spec(&self, name: &str, revision: u32) {
        let patch = json!({"spec": {"application": {"openAPISchema": schema(revision)}}});
        self.defs()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// A change outside the spec: labels and annotations only.
    async fn edit_metadata(&self, name: &str, n: u64) {
        let patch = json!({"metadata": {"labels": {"touch": n.to_string()},
                                        "annotations": {"note": format!("edit {n}")}}});
        self.defs()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// The hash of the definitions as they are now, computed by the library.
    async fn expected_hash(&self) -> String {
        let items = appdef::list_all(&self.client).await.unwrap();
        appdef::config_hash_of(&items).unwrap()
    }

    async fn deployment(&self) -> Option<Deployment> {
        self.deployments().get_opt(DEPLOYMENT).await.unwrap()
    }

    async fn annotation(&self) -> Option<String> {
        let d = self.deployment().await?;
        d.spec?.template.metadata?.annotations?.get(KEY).cloned()
    }

    async fn generation(&self) -> i64 {
        self.deployment()
            .await
            .and_then(|d| d.metadata.generation)
            .unwrap_or(0)
    }

    /// Successful patches of the Deployment, from the emulator's audit log.
    fn patches(&self) -> usize {
        self.h
            .audit_log()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| {
                e["verb"] == "patch"
                    && e["resource"] == "deployments"
                    && e["namespace"] == self.ns.as_str()
                    && e["name"] == DEPLOYMENT
                    && e["code"] == 200
            })
            .count()
    }

    /// An unlabelled counter or gauge of the daemon (0 when absent).
    async fn metric(&mut self, name: &str) -> f64 {
        let admin = self.h.daemon(BIN).unwrap().admin().await.unwrap();
        let name = name.to_owned();
        tokio::task::spawn_blocking(move || admin.metrics().value(&name, &[]))
            .await
            .unwrap()
    }

    /// Waits until the annotation equals the hash of the current definitions.
    async fn wait_for_annotation(&self, hash: &str) {
        harness::until(&format!("the annotation to become {hash}"), || async {
            self.annotation().await.as_deref() == Some(hash)
        })
        .await;
    }

    async fn wait_for_metric(&mut self, name: &str, pred: impl Fn(f64) -> bool) -> f64 {
        let admin = self.h.daemon(BIN).unwrap().admin().await.unwrap();
        harness::eventually(&format!("{name} to move"), || {
            let admin = admin.clone();
            let v = admin.metrics().value(name, &[]);
            let ok = pred(v);
            async move { ok.then_some(v) }
        })
        .await
    }

    /// Proves the daemon has evaluated everything that happened so far: a metadata-only edit
    /// (which never patches once the annotation is current) must come back as one more skip.
    async fn quiesce(&mut self, n: u64) {
        let skips = self.metric(SKIPS).await;
        self.edit_metadata("vm-disk", n).await;
        self.wait_for_metric(SKIPS, |v| v > skips).await;
    }

    /// Starts the daemon and waits for the initial roll (no annotation → exactly one patch).
    async fn settled(&mut self, debounce: &str) -> String {
        self.spawn(debounce).await;
        let hash = self.expected_hash().await;
        self.wait_for_annotation(&hash).await;
        self.quiesce(1_000).await;
        assert_eq!(
            self.patches(),
            1,
            "the first evaluation writes the missing annotation once"
        );
        hash
    }
}

const SKIPS: &str = "cozy_backups_apidef_restarter_skips_total";
const PATCHES: &str = "cozy_backups_apidef_restarter_patches_total";
const COALESCED: &str = "cozy_backups_apidef_restarter_debounce_coalesced_events_total";
const EVENTS: &str = "cozy_backups_apidef_restarter_definition_events_total";
const MISSING: &str = "cozy_backups_apidef_restarter_deployment_missing";

fn schema(revision: u32) -> String {
    json!({"type": "object", "properties": {"size": {"type": "string", "description": format!("revision {revision} <b>&</b>")}}})
        .to_string()
}

#[tokio::test]
async fn one_edit_patches_exactly_once_after_the_debounce() {
    let mut env = Env::start(true).await;
    let before = env.settled("1s").await;
    let generation = env.generation().await;

    let edited = Instant::now();
    env.edit_spec("http-cache", 1).await;
    let after = env.expected_hash().await;
    assert_ne!(before, after);
    env.wait_for_annotation(&after).await;
    // The daemon saw the edit after we made it, so it cannot have patched sooner than the window.
    assert!(edited.elapsed() >= Duration::from_secs(1));
    env.quiesce(1).await;

    assert_eq!(env.patches(), 2, "one patch for the edit");
    assert_eq!(env.generation().await, generation + 1, "one roll");
    assert_eq!(env.metric(PATCHES).await, 2.0);
    env.h.cleanup().await.unwrap();
}

#[tokio::test]
async fn a_change_during_a_roll_is_not_lost() {
    let mut env = Env::start(true).await;
    env.settled("1s").await;
    env.edit_spec("http-cache", 1).await;
    let first = env.expected_hash().await;
    env.wait_for_annotation(&first).await;
    // The Deployment is rolling for the first change when the second one arrives.
    env.edit_spec("vm-disk", 1).await;
    let second = env.expected_hash().await;
    env.wait_for_annotation(&second).await;
    env.quiesce(1).await;
    assert_eq!(env.patches(), 3, "one patch per settled change");
    env.h.cleanup().await.unwrap();
}

#[tokio::test]
async fn a_burst_of_100_edits_patches_once() {
    let mut env = Env::start(true).await;
    // A window far longer than one API round trip, so the 100 sequential edits form one burst.
    env.settled("3s").await;
    let coalesced = env.metric(COALESCED).await;
    let generation = env.generation().await;

    for revision in 1..=100 {
        env.edit_spec("tcp-balancer", revision).await;
    }
    let last = env.expected_hash().await;
    env.wait_for_annotation(&last).await;
    env.quiesce(1).await;

    assert_eq!(env.patches(), 2, "a settled burst is one patch");
    assert_eq!(env.generation().await, generation + 1);
    let coalesced = env.metric(COALESCED).await - coalesced;
    assert!(
        coalesced >= 99.0,
        "99 of the 100 events join the first window ({coalesced})"
    );
    env.h.cleanup().await.unwrap();
}

#[tokio::test]
async fn a_metadata_only_edit_does_not_patch() {
    let mut env = Env::start(true).await;
    let hash = env.settled("1s").await;
    let skips = env.metric(SKIPS).await;
    let generation = env.generation().await;

    env.edit_metadata("http-cache", 7).await;
    env.wait_for_metric(SKIPS, |v| v > skips).await;

    assert_eq!(env.patches(), 1, "no write for an unchanged hash");
    assert_eq!(env.annotation().await.as_deref(), Some(hash.as_str()));
    assert_eq!(env.generation().await, generation);
    env.h.cleanup().await.unwrap();
}

#[tokio::test]
async fn a_restart_mid_debounce_still_patches_exactly_once() {
    let mut env = Env::start(true).await;
    // A window long enough to observe the event and kill the daemon inside it.
    let before = env.settled("5s").await;
    let events = env.metric(EVENTS).await;

    env.edit_spec("vm-disk", 1).await;
    // The daemon has seen the edit (its window is open) …
    env.wait_for_metric(EVENTS, |v| v > events).await;
    // … and is killed before the window settles.
    env.h.kill(BIN).await.unwrap();
    assert_eq!(env.patches(), 1, "killed before the debounced patch");
    assert_eq!(env.annotation().await.as_deref(), Some(before.as_str()));

    env.h.restart(BIN, DEADLINE).await.unwrap();
    let after = env.expected_hash().await;
    env.wait_for_annotation(&after).await;
    env.quiesce(1).await;
    assert_eq!(
        env.patches(),
        2,
        "the restarted daemon derives the change from the cluster"
    );
    env.h.cleanup().await.unwrap();
}

#[tokio::test]
async fn a_late_deployment_is_patched_once_it_exists() {
    let mut env = Env::start(false).await;
    env.spawn("1s").await;
    // The daemon evaluated and is waiting for the Deployment.
    env.wait_for_metric(MISSING, |v| v == 1.0).await;
    assert_eq!(env.metric(PATCHES).await, 0.0);

    env.create_deployment().await;
    let hash = env.expected_hash().await;
    env.wait_for_annotation(&hash).await;
    env.quiesce(1).await;
    assert_eq!(env.patches(), 1);
    assert_eq!(env.metric(MISSING).await, 0.0);
    env.h.cleanup().await.unwrap();
}
