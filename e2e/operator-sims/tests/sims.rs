//! The `operator-sims` binary against the kube emulator: it installs its CRDs, and the COSI and
//! Velero simulators make the transitions the real operators make.

use std::path::PathBuf;
use std::time::Duration;

use harness::{DaemonSpec, Harness, eventually};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::ApiResource;
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(20);

fn dynamic<K: kube::Resource<DynamicType = ()>>(
    client: &kube::Client,
    ns: &str,
) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<K>(&()))
}

async fn create(api: &Api<DynamicObject>, body: Value) {
    api.create(
        &PostParams::default(),
        &serde_json::from_value(body).unwrap(),
    )
    .await
    .unwrap();
}

async fn bsl_phase(api: &Api<DynamicObject>) -> Option<String> {
    let o = api.get_opt("cozy-default").await.unwrap()?;
    serde_json::to_value(o).unwrap()["status"]["phase"]
        .as_str()
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cosi_provisions_buckets_and_velero_validates_locations() {
    let mut h = Harness::start().await.unwrap();
    let client = h.client();
    h.create_namespaces(&["tenant-root", "cozy-velero"])
        .await
        .unwrap();
    h.spawn_ready(
        DaemonSpec::new(
            "operator-sims",
            PathBuf::from(env!("CARGO_BIN_EXE_operator-sims")),
        )
        .args([
            "--sims=cosi,velero",
            "--cosi-delay-ms=50",
            "--cosi-endpoint=s3.example.com",
        ]),
        TIMEOUT,
    )
    .await
    .unwrap();

    // COSI: Bucket → BucketClaim → bound → system credentials Secret.
    let buckets = dynamic::<api::thirdparty::apps::Bucket>(&client, "tenant-root");
    create(
        &buckets,
        json!({
            "apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Bucket",
            "metadata": {"name": "cozy-backups"},
            "spec": {"users": {"system": {"readonly": false}}},
        }),
    )
    .await;
    let claims = dynamic::<api::thirdparty::cosi::BucketClaim>(&client, "tenant-root");
    let claim = eventually("the claim is bound", || {
        let claims = claims.clone();
        async move {
            let c = claims.get_opt("bucket-cozy-backups").await.unwrap()?;
            let v = serde_json::to_value(c).unwrap();
            (v["status"]["bucketReady"] == true).then_some(v)
        }
    })
    .await;
    let uid = claim["metadata"]["uid"].as_str().unwrap();
    assert_eq!(claim["status"]["bucketName"], format!("bucket-{uid}"));
    assert_eq!(
        claim["metadata"]["ownerReferences"][0]["name"],
        "cozy-backups"
    );
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "tenant-root");
    let secret = eventually("the credentials Secret", || {
        let secrets = secrets.clone();
        async move {
            secrets
                .get_opt("bucket-cozy-backups-system-credentials")
                .await
                .unwrap()
        }
    })
    .await;
    let data = secret.data.unwrap();
    assert_eq!(
        data.keys().map(String::as_str).collect::<Vec<_>>(),
        ["accessKey", "bucketName", "endpoint", "secretKey"]
    );
    assert_eq!(data["endpoint"].0, b"s3.example.com");
    assert_eq!(data["bucketName"].0, format!("bucket-{uid}").as_bytes());
    assert_eq!(secret.type_.as_deref(), Some("Opaque"));

    // Velero: Unavailable without the credentials key, Available with it, and back.
    let bsls = dynamic::<api::thirdparty::velero::BackupStorageLocation>(&client, "cozy-velero");
    create(
        &bsls,
        json!({
            "apiVersion": "velero.io/v1", "kind": "BackupStorageLocation",
            "metadata": {"name": "cozy-default"},
            "spec": {"provider": "aws", "objectStorage": {"bucket": "b"},
                     "credential": {"name": "cozy-backups-creds", "key": "cloud"}},
        }),
    )
    .await;
    eventually("Unavailable", || {
        let bsls = bsls.clone();
        async move { (bsl_phase(&bsls).await.as_deref() == Some("Unavailable")).then_some(()) }
    })
    .await;
    let creds: Api<Secret> = Api::namespaced(client.clone(), "cozy-velero");
    creds
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "cozy-backups-creds"},
                "stringData": {"cloud": "[default]\n"},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    eventually("Available", || {
        let bsls = bsls.clone();
        async move { (bsl_phase(&bsls).await.as_deref() == Some("Available")).then_some(()) }
    })
    .await;
    creds
        .delete("cozy-backups-creds", &DeleteParams::default())
        .await
        .unwrap();
    eventually("Unavailable again", || {
        let bsls = bsls.clone();
        async move { (bsl_phase(&bsls).await.as_deref() == Some("Unavailable")).then_some(()) }
    })
    .await;
    let log = h.daemon("operator-sims").unwrap().log();
    let secret_key = String::from_utf8(data["secretKey"].0.clone()).unwrap();
    assert_eq!(secret_key.len(), 40);
    assert!(!log.contains(&secret_key), "a secret value reached the log");
    h.cleanup().await.unwrap();
}
