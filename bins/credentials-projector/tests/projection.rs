//! End to end, real binary against the emulator: every source format and edge of the projection —
//! a missing source that appears later, flat keys, BucketInfo only, partial flat keys merged per
//! field, garbled JSON (ignored and fatal), endpoint fallback with scheme stripping, missing endpoint
//! everywhere, stale optional keys removed, foreign keys and labels kept, an unowned target refused
//! and untouched, and no write on an unchanged source — then the leak check.

use crate::common;

use common::*;
use harness::Harness;

const AK: &str = "AKIA-E2E-ACCESS-7f3a91";
const SK: &str = "e2e-secret-key-b6d2c8e4";
const AK2: &str = "AKIA-E2E-ACCESS-INFO-55c1";
const SK2: &str = "e2e-secret-key-info-09ae";
const OWNED: (&str, &str) = ("apps.cozystack.io/managed-by", "cozystack-backups");

/// The projector watching `src` (system namespace `velero`) with the fallback endpoint
/// `http://seaweedfs-s3.tenant-root.svc:8333`, region `us-east-1`, and `cozy-default` routing
/// Postgres to CNPG.
struct Env {
    h: Harness,
    src: String,
    velero: String,
}

impl Env {
    async fn start() -> Env {
        let mut h = Harness::start().await.unwrap();
        let src = h.temp_namespace("src").await.unwrap();
        let velero = h.temp_namespace("velero").await.unwrap();
        backup_class(&h, "cozy-default", &[]).await;
        spawn(
            &mut h,
            &Setup {
                source_ns: src.clone(),
                endpoint: "http://seaweedfs-s3.tenant-root.svc:8333".into(),
                region: "us-east-1".into(),
                force_path_style: "true".into(),
                system_namespaces: velero.clone(),
            },
        )
        .await;
        Env { h, src, velero }
    }

    /// The flat source of `AK`/`SK` with an explicit endpoint.
    async fn flat_source(&self) {
        set_source(
            &self.h,
            &self.src,
            &[
                ("accessKey", AK),
                ("secretKey", SK),
                ("endpoint", "s3.example.com"),
            ],
        )
        .await;
    }

    /// A job in a new namespace; returns the namespace.
    async fn projected_job(&mut self, prefix: &str, reason: &str) -> String {
        let ns = self.h.temp_namespace(prefix).await.unwrap();
        backup_job(&self.h, &ns, "job", "cozy-default", "Postgres").await;
        wait_bj(&self.h, &ns, "job", reason).await;
        ns
    }

    /// No credential value reached a log, Event, status or metric; then cleanup.
    async fn finish(mut self) {
        assert_no_leak(&mut self.h, &[AK, SK, AK2, SK2]).await;
        self.h.cleanup().await.unwrap();
    }
}

fn bucket_info() -> String {
    format!(
        r#"{{"metadata":{{"name":"bc"}},"spec":{{"bucketName":"bucket-2","authenticationType":"KEY","secretS3":{{"endpoint":"https://s3.example.com","region":"eu-1","accessKeyID":"{AK2}","accessSecretKey":"{SK2}"}}}}}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_source_is_transient_until_it_appears() {
    let mut env = Env::start().await;
    // No source yet: transient SourceSecretMissing, and no Secret anywhere.
    let a = env.h.temp_namespace("flat").await.unwrap();
    backup_job(&env.h, &a, "job", "cozy-default", "Postgres").await;
    let missing = wait_bj(&env.h, &a, "job", "SourceSecretMissing").await;
    assert_eq!(
        missing.message,
        format!("source credentials Secret {}/{SOURCE} not found", env.src)
    );
    assert_eq!(missing.observed_generation, Some(1));
    assert!(target(&env.h, &a).await.is_none());

    // The source appears: the watch on it re-evaluates the job (no new job, no timer needed), and
    // the system namespace gets its copy. Flat keys; the endpoint's scheme is stripped.
    set_source(
        &env.h,
        &env.src,
        &[
            ("accessKey", AK),
            ("secretKey", SK),
            ("endpoint", "http://s3.example.com:8333"),
            ("bucketName", "bucket-1"),
        ],
    )
    .await;
    let ok = wait_bj(&env.h, &a, "job", "Projected").await;
    assert_eq!(
        ok.message,
        format!("credentials Secret {a}/{TARGET} is up to date")
    );
    let want = ten_keys(
        AK,
        SK,
        "s3.example.com:8333",
        Some("bucket-1"),
        Some("us-east-1"),
        Some("true"),
    );
    let flat = target(&env.h, &a).await.unwrap();
    assert_eq!(data_of(&flat), want);
    assert_eq!(flat.type_.as_deref(), Some("Opaque"));
    assert_eq!(
        flat.metadata
            .labels
            .as_ref()
            .unwrap()
            .get(OWNED.0)
            .map(String::as_str),
        Some(OWNED.1)
    );
    let sys = eventually("the system copy", || async {
        target(&env.h, &env.velero)
            .await
            .filter(|s| data_of(s) == want)
    })
    .await;
    assert_eq!(data_of(&sys), want);

    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bucket_info_alone_and_partial_flat_keys_merge_per_field() {
    let mut env = Env::start().await;
    let info = bucket_info();
    // BucketInfo only (COSI form): every field from the JSON, https:// stripped.
    set_source(&env.h, &env.src, &[("BucketInfo", &info)]).await;
    let b = env.h.temp_namespace("info").await.unwrap();
    backup_job(&env.h, &b, "job", "cozy-default", "Postgres").await;
    wait_bj(&env.h, &b, "job", "Projected").await;
    assert_eq!(
        data_of(&target(&env.h, &b).await.unwrap()),
        ten_keys(
            AK2,
            SK2,
            "s3.example.com",
            Some("bucket-2"),
            Some("eu-1"),
            Some("true")
        )
    );

    // Partial flat keys: a flat value wins per field, BucketInfo fills the rest, "" counts as absent.
    set_source(
        &env.h,
        &env.src,
        &[("accessKey", AK), ("secretKey", ""), ("BucketInfo", &info)],
    )
    .await;
    let c = env.h.temp_namespace("partial").await.unwrap();
    backup_job(&env.h, &c, "job", "cozy-default", "Postgres").await;
    wait_bj(&env.h, &c, "job", "Projected").await;
    assert_eq!(
        data_of(&target(&env.h, &c).await.unwrap()),
        ten_keys(
            AK,
            SK2,
            "s3.example.com",
            Some("bucket-2"),
            Some("eu-1"),
            Some("true")
        )
    );

    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbled_bucket_info_is_ignored_with_flat_keys_and_fatal_without() {
    let mut env = Env::start().await;
    // Garbled JSON with both flat credentials: ignored entirely (no backfill), so the endpoint
    // falls back to BACKUP_STORAGE_ENDPOINT with its scheme stripped and there is no bucketName.
    set_source(
        &env.h,
        &env.src,
        &[
            ("accessKey", AK),
            ("secretKey", SK),
            ("BucketInfo", "{\"spec\": garbled"),
        ],
    )
    .await;
    let d = env.h.temp_namespace("garbled").await.unwrap();
    backup_job(&env.h, &d, "job", "cozy-default", "Postgres").await;
    wait_bj(&env.h, &d, "job", "Projected").await;
    assert_eq!(
        data_of(&target(&env.h, &d).await.unwrap()),
        ten_keys(
            AK,
            SK,
            "seaweedfs-s3.tenant-root.svc:8333",
            None,
            Some("us-east-1"),
            Some("true")
        )
    );

    // Garbled JSON with a flat credential missing: terminal SourceSecretMalformed, no Secret. The
    // garbled text embeds the secret key to prove the parser's message does not echo input.
    let garbled = format!("{{\"spec\": {{\"secretS3\": {{\"accessSecretKey\": \"{SK}\" oops");
    set_source(
        &env.h,
        &env.src,
        &[("accessKey", AK), ("BucketInfo", &garbled)],
    )
    .await;
    let e = env.h.temp_namespace("fatal").await.unwrap();
    backup_job(&env.h, &e, "job", "cozy-default", "Postgres").await;
    let bad = wait_bj(&env.h, &e, "job", "SourceSecretMalformed").await;
    assert!(
        bad.message.starts_with("parse BucketInfo: "),
        "{}",
        bad.message
    );
    assert!(target(&env.h, &e).await.is_none());

    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_keys_go_foreign_keys_stay_and_an_unchanged_source_writes_nothing() {
    let mut env = Env::start().await;
    // Stale optional keys removed, foreign keys and labels kept: an owned copy with an old
    // bucketName, a foreign key and a foreign label; the source has no bucketName now.
    set_source(
        &env.h,
        &env.src,
        &[
            ("accessKey", AK),
            ("secretKey", SK),
            ("endpoint", "s3.example.com"),
        ],
    )
    .await;
    let f = env.h.temp_namespace("stale").await.unwrap();
    put_target(
        &env.h,
        &f,
        &[OWNED, ("team", "a")],
        &[
            ("bucketName", "old-bucket"),
            ("accessKey", "old"),
            ("foreign", "kept"),
        ],
    )
    .await;
    backup_job(&env.h, &f, "job", "cozy-default", "Postgres").await;
    wait_bj(&env.h, &f, "job", "Projected").await;
    let stale = target(&env.h, &f).await.unwrap();
    let mut want = ten_keys(
        AK,
        SK,
        "s3.example.com",
        None,
        Some("us-east-1"),
        Some("true"),
    );
    want.insert("foreign".into(), "kept".into());
    assert_eq!(data_of(&stale), want);
    assert_eq!(stale.metadata.labels.as_ref().unwrap()["team"], "a");

    // No write on an unchanged source: a second job in the same namespace is projected (True)
    // without touching the Secret.
    let rv = stale.metadata.resource_version.clone();
    backup_job(&env.h, &f, "second", "cozy-default", "Postgres").await;
    wait_bj(&env.h, &f, "second", "Projected").await;
    assert_eq!(
        target(&env.h, &f).await.unwrap().metadata.resource_version,
        rv
    );

    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unowned_target_is_refused_and_left_untouched() {
    let mut env = Env::start().await;
    env.flat_source().await;
    // Unowned target: refused (terminal TargetSecretNotOwned) and left exactly as it was.
    let u = env.h.temp_namespace("unowned").await.unwrap();
    put_target(&env.h, &u, &[("team", "b")], &[("accessKey", "theirs")]).await;
    let before = target(&env.h, &u).await.unwrap();
    backup_job(&env.h, &u, "job", "cozy-default", "Postgres").await;
    let refused = wait_bj(&env.h, &u, "job", "TargetSecretNotOwned").await;
    assert_eq!(
        refused.message,
        format!(
            "target Secret {u}/{TARGET} exists without label apps.cozystack.io/managed-by=cozystack-backups; refusing to overwrite"
        )
    );
    assert_eq!(target(&env.h, &u).await.unwrap(), before);

    env.finish().await;
}

/// A source change that does not change the keys (a label edit) runs a round — the system
/// namespace's success counter moves — and writes nothing anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_change_without_new_keys_writes_nothing() {
    let mut env = Env::start().await;
    env.flat_source().await;
    let a = env.projected_job("a", "Projected").await;
    let f = env.projected_job("f", "Projected").await;
    eventually("the system copy", || async {
        target(&env.h, &env.velero).await
    })
    .await;
    // A source change that does not change the keys (a label edit) runs a round — the system
    // namespace's success counter moves — and writes nothing anywhere.
    let rvs = |h: &Harness, namespaces: Vec<String>| {
        let client = h.client();
        async move {
            let mut out = Vec::new();
            for ns in namespaces {
                let s = kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(
                    client.clone(),
                    &ns,
                )
                .get(TARGET)
                .await
                .unwrap();
                out.push(s.metadata.resource_version);
            }
            out
        }
    };
    let copies = vec![a.clone(), f.clone(), env.velero.clone()];
    let before_rvs = rvs(&env.h, copies.clone()).await;
    let before_successes = successes(&metrics_text(&mut env.h), &env.velero);
    {
        let api: kube::Api<k8s_openapi::api::core::v1::Secret> =
            kube::Api::namespaced(env.h.client(), &env.src);
        api.patch(
            SOURCE,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                serde_json::json!({"metadata": {"labels": {"touched": "yes"}}}),
            ),
        )
        .await
        .unwrap();
    }
    eventually("a round after the no-op source change", || {
        let moved = successes(&metrics_text(&mut env.h), &env.velero) > before_successes;
        async move { moved.then_some(()) }
    })
    .await;
    assert_eq!(
        rvs(&env.h, copies).await,
        before_rvs,
        "an unchanged source writes nothing"
    );

    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_endpoint_everywhere_and_optional_keys_removed() {
    let mut h = Harness::start().await.unwrap();
    let src = h.temp_namespace("src").await.unwrap();
    backup_class(&h, "cozy-default", &[]).await;
    spawn(
        &mut h,
        &Setup {
            source_ns: src.clone(),
            endpoint: String::new(),
            region: String::new(),
            force_path_style: String::new(),
            system_namespaces: String::new(),
        },
    )
    .await;

    // No endpoint in the source and none configured: SourceSecretMalformed, no Secret written.
    set_source(&h, &src, &[("accessKey", AK), ("secretKey", SK)]).await;
    let a = h.temp_namespace("noendpoint").await.unwrap();
    backup_job(&h, &a, "job", "cozy-default", "Postgres").await;
    let bad = wait_bj(&h, &a, "job", "SourceSecretMalformed").await;
    assert_eq!(
        bad.message,
        format!(
            "endpoint is empty in both source Secret {src}/{SOURCE} and BACKUP_STORAGE_ENDPOINT"
        )
    );
    assert!(target(&h, &a).await.is_none());

    // With an endpoint but no region and no forcePathStyle anywhere: those keys are deleted from
    // an existing owned copy (set-or-delete), the rest is written.
    set_source(
        &h,
        &src,
        &[
            ("accessKey", AK),
            ("secretKey", SK),
            ("endpoint", "https://example.com/"),
        ],
    )
    .await;
    let b = h.temp_namespace("optional").await.unwrap();
    put_target(
        &h,
        &b,
        &[OWNED],
        &[
            ("region", "old"),
            ("forcePathStyle", "false"),
            ("bucketName", "old"),
        ],
    )
    .await;
    backup_job(&h, &b, "job", "cozy-default", "Postgres").await;
    wait_bj(&h, &b, "job", "Projected").await;
    assert_eq!(
        data_of(&target(&h, &b).await.unwrap()),
        ten_keys(AK, SK, "example.com", None, None, None)
    );
    // The earlier malformed job recovered on the source change, without being touched.
    wait_bj(&h, &a, "job", "Projected").await;

    assert_no_leak(&mut h, &[AK, SK]).await;
    h.cleanup().await.unwrap();
}
