//! The S3 server against the clients the data plane uses: boto3 (what barman-cloud is built on)
//! over HTTPS trusting the development CA — multipart upload, list, head, get, delete — and the
//! refusals a real S3 gives: a wrong secret key (403 SignatureDoesNotMatch), an unknown access key
//! (403 InvalidAccessKeyId), another user's bucket (403 AccessDenied), and a client that does not
//! trust the CA (certificate verification failure). Then the COSI simulator's keys against it:
//! they authenticate, and rotated (stale) keys are refused.

use std::process::Command;

use std::time::{Duration, Instant};

use operator_sims::s3::{FaultMode, Faults, Options, S3Server, put_faults};

/// Debian's Python, which carries the `python3-boto3` package barman-cli-cloud depends on.
const PYTHON: &str = "/usr/bin/python3";

/// A boto3 script: exercises the calls barman-cloud makes and prints one result line per step.
const BOTO3_SCRIPT: &str = r#"
import os, sys, boto3, botocore
endpoint, bucket, ak, sk, ca = sys.argv[1:6]
s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=ak, aws_secret_access_key=sk,
                  region_name="us-east-1", verify=(ca if ca != "-" else None),
                  config=botocore.config.Config(s3={"addressing_style": "path"},
                                                retries={"total_max_attempts": 1}))
mode = sys.argv[6]
try:
    if mode == "roundtrip":
        part = os.urandom(5 * 1024 * 1024)
        up = s3.create_multipart_upload(Bucket=bucket, Key="dir/big.bin")
        parts = []
        for n, body in ((1, part), (2, part), (3, b"tail")):
            r = s3.upload_part(Bucket=bucket, Key="dir/big.bin", PartNumber=n, UploadId=up["UploadId"], Body=body)
            parts.append({"PartNumber": n, "ETag": r["ETag"]})
        s3.complete_multipart_upload(Bucket=bucket, Key="dir/big.bin", UploadId=up["UploadId"], MultipartUpload={"Parts": parts})
        print("head", s3.head_object(Bucket=bucket, Key="dir/big.bin")["ContentLength"])
        body = s3.get_object(Bucket=bucket, Key="dir/big.bin")["Body"].read()
        print("get", len(body), body[:5 * 1024 * 1024] == part, body[-4:] == b"tail")
        print("list", [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="dir/")["Contents"]])
        s3.delete_object(Bucket=bucket, Key="dir/big.bin")
        print("after-delete", s3.list_objects_v2(Bucket=bucket, Prefix="dir/").get("KeyCount"))
    else:
        s3.list_objects_v2(Bucket=bucket)
        print("listed")
except botocore.exceptions.ClientError as e:
    print("client-error", e.response["ResponseMetadata"]["HTTPStatusCode"], e.response["Error"]["Code"])
except botocore.exceptions.SSLError as e:
    print("ssl-error", "CERTIFICATE_VERIFY_FAILED" in str(e))
except botocore.exceptions.EndpointConnectionError as e:
    print("connection-error")
"#;

fn boto3(endpoint: &str, bucket: &str, ak: &str, sk: &str, ca: &str, mode: &str) -> String {
    let out = Command::new(PYTHON)
        .args(["-c", BOTO3_SCRIPT, endpoint, bucket, ak, sk, ca, mode])
        .env_remove("AWS_CA_BUNDLE")
        .output()
        .expect("running python3 (install barman-cli-cloud, which brings python3-boto3)");
    assert!(
        out.status.success(),
        "boto3 script failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boto3_round_trip_and_real_refusals() {
    let dir = std::env::temp_dir().join(format!("s3-test-{}", std::process::id()));
    let server = S3Server::start(&Options {
        dir: dir.clone(),
        http_addr: "127.0.0.1:0".parse().unwrap(),
        https_addr: "127.0.0.1:0".parse().unwrap(),
        admin_addr: "127.0.0.1:0".parse().unwrap(),
    })
    .await
    .unwrap();
    server.ensure_bucket("bucket-one").unwrap();
    server.ensure_bucket("bucket-two").unwrap();
    server.registry().grant("AKONE", "secret-one", "bucket-one");
    server.registry().grant("AKTWO", "secret-two", "bucket-two");
    let e = server.endpoints().clone();
    let ca = e.ca_file.display().to_string();
    // The call runs a blocking child process; keep the server's runtime free to answer it.
    let run = |endpoint: String,
               bucket: &'static str,
               ak: &'static str,
               sk: &'static str,
               ca: String,
               mode: &'static str| {
        tokio::task::spawn_blocking(move || boto3(&endpoint, bucket, ak, sk, &ca, mode))
    };

    let out = run(
        e.https.clone(),
        "bucket-one",
        "AKONE",
        "secret-one",
        ca.clone(),
        "roundtrip",
    )
    .await
    .unwrap();
    assert_eq!(
        out,
        "head 10485764\nget 10485764 True True\nlist ['dir/big.bin']\nafter-delete 0"
    );
    // The plain-HTTP endpoint serves the same store.
    let out = run(
        e.http.clone(),
        "bucket-one",
        "AKONE",
        "secret-one",
        "-".into(),
        "list",
    )
    .await
    .unwrap();
    assert_eq!(out, "listed");

    let refusals = [
        (
            "bucket-one",
            "AKONE",
            "wrong-secret",
            "client-error 403 SignatureDoesNotMatch",
        ),
        (
            "bucket-one",
            "AKNOBODY",
            "secret-one",
            "client-error 403 InvalidAccessKeyId",
        ),
        (
            "bucket-two",
            "AKONE",
            "secret-one",
            "client-error 403 AccessDenied",
        ),
    ];
    for (bucket, ak, sk, want) in refusals {
        let out = run(e.https.clone(), bucket, ak, sk, ca.clone(), "list")
            .await
            .unwrap();
        assert_eq!(out, want, "{bucket} {ak}");
    }
    // A client with only the public trust store refuses the development certificate.
    let out = run(
        e.https.clone(),
        "bucket-one",
        "AKONE",
        "secret-one",
        "-".into(),
        "list",
    )
    .await
    .unwrap();
    assert_eq!(out, "ssl-error True");

    // A revoked (rotated) key stops working at once.
    server.registry().revoke("AKTWO");
    let out = run(
        e.https.clone(),
        "bucket-two",
        "AKTWO",
        "secret-two",
        ca.clone(),
        "list",
    )
    .await
    .unwrap();
    assert_eq!(out, "client-error 403 InvalidAccessKeyId");
    let _ = std::fs::remove_dir_all(&dir);
}

/// COSI with the S3 server: the credentials Secret's keys work against its bucket; deleting the
/// Secret rotates them, and the stale pair is refused from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cosi_keys_authenticate_and_rotated_keys_fail() {
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
    use kube::core::ApiResource;

    let mut h = harness::Harness::start().await.unwrap();
    let ns = h.temp_namespace("cosi-s3").await.unwrap();
    let plane = h
        .spawn_dataplane("s3,cosi", &["--cosi-delay-ms=10"])
        .await
        .unwrap();
    let buckets: Api<DynamicObject> = Api::namespaced_with(
        h.client(),
        &ns,
        &ApiResource::erase::<api::thirdparty::apps::Bucket>(&()),
    );
    buckets
        .patch(
            "b",
            &PatchParams::apply("test").force(),
            &Patch::Apply(serde_json::json!({
                "apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Bucket",
                "metadata": {"name": "b"}, "spec": {"users": {"system": {}}},
            })),
        )
        .await
        .unwrap();
    let secrets: Api<Secret> = Api::namespaced(h.client(), &ns);
    let read = |secrets: Api<Secret>| async move {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            if let Some(s) = secrets
                .get_opt("bucket-b-system-credentials")
                .await
                .unwrap()
            {
                let d = s.data.unwrap();
                let get = |k: &str| String::from_utf8(d[k].0.clone()).unwrap();
                return (
                    get("accessKey"),
                    get("secretKey"),
                    get("endpoint"),
                    get("bucketName"),
                );
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no credentials Secret"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    let (ak, sk, endpoint, bucket) = read(secrets.clone()).await;
    assert_eq!(format!("https://{endpoint}"), plane.https);
    let ca = plane.ca_file.display().to_string();
    let list = |ak: String, sk: String| {
        let (endpoint, bucket, ca) = (plane.https.clone(), bucket.clone(), ca.clone());
        tokio::task::spawn_blocking(move || boto3(&endpoint, &bucket, &ak, &sk, &ca, "list"))
    };
    assert_eq!(list(ak.clone(), sk.clone()).await.unwrap(), "listed");

    secrets
        .delete("bucket-b-system-credentials", &DeleteParams::default())
        .await
        .unwrap();
    let (new_ak, new_sk) = loop {
        let (a, s, _, _) = read(secrets.clone()).await;
        if a != ak {
            break (a, s);
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(list(new_ak, new_sk).await.unwrap(), "listed");
    assert_eq!(
        list(ak, sk.clone()).await.unwrap(),
        "client-error 403 InvalidAccessKeyId"
    );
    let log = h.daemon("operator-sims").unwrap().log();
    assert!(!log.contains(&sk), "a secret key reached the log");
    h.cleanup().await.unwrap();
}

/// One raw HTTP/1.1 request over loopback: (status line, headers, body).
async fn raw(addr: &str, request: &str) -> std::io::Result<(String, String, String)> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(request.as_bytes()).await?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await?;
    let text = String::from_utf8_lossy(&buf).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    Ok((
        status.to_owned(),
        headers.to_ascii_lowercase(),
        body.to_owned(),
    ))
}

fn host(url: &str) -> String {
    url.split_once("://")
        .map(|(_, h)| h)
        .unwrap_or(url)
        .to_owned()
}

/// The fault switches, each set through the admin endpoint and switched back: `unavailable` gets
/// boto3 (and a raw request) S3's 503 `ServiceUnavailable` XML; `stop` refuses connections on both
/// listeners and cuts an open one, and switching back serves on the same ports again; `delayMs`
/// holds each request that long. A malformed switch is refused with what is wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_switches_refuse_delay_and_come_back() {
    let dir = std::env::temp_dir().join(format!("s3-faults-{}", std::process::id()));
    let server = S3Server::start(&Options {
        dir: dir.clone(),
        http_addr: "127.0.0.1:0".parse().unwrap(),
        https_addr: "127.0.0.1:0".parse().unwrap(),
        admin_addr: "127.0.0.1:0".parse().unwrap(),
    })
    .await
    .unwrap();
    server.ensure_bucket("bucket-f").unwrap();
    server.registry().grant("AKF", "secret-f", "bucket-f");
    let e = server.endpoints().clone();
    assert!(e.admin.starts_with("http://127.0.0.1:"), "{}", e.admin);
    assert_eq!(
        operator_sims::s3::Endpoints::read(&dir).unwrap().admin,
        e.admin,
        "endpoints.json names the admin endpoint"
    );
    let ca = e.ca_file.display().to_string();
    let list = |endpoint: String, ca: String| {
        tokio::task::spawn_blocking(move || {
            boto3(&endpoint, "bucket-f", "AKF", "secret-f", &ca, "list")
        })
    };
    let set = |f: Faults| {
        let admin = e.admin.clone();
        async move { put_faults(&admin, f).await.unwrap() }
    };
    assert_eq!(list(e.https.clone(), ca.clone()).await.unwrap(), "listed");

    // 503 for every request, with S3's error document.
    let unavailable = Faults {
        mode: FaultMode::Unavailable,
        delay_ms: 0,
    };
    assert_eq!(set(unavailable).await, unavailable);
    assert_eq!(server.faults(), unavailable);
    assert_eq!(
        list(e.https.clone(), ca.clone()).await.unwrap(),
        "client-error 503 ServiceUnavailable"
    );
    assert_eq!(
        list(e.http.clone(), "-".into()).await.unwrap(),
        "client-error 503 ServiceUnavailable"
    );
    let http = host(&e.http);
    let (status, headers, body) = raw(
        &http,
        &format!("GET /bucket-f HTTP/1.1\r\nHost: {http}\r\nConnection: close\r\n\r\n"),
    )
    .await
    .unwrap();
    assert_eq!(status, "HTTP/1.1 503 Service Unavailable");
    assert!(
        headers.contains("content-type: application/xml"),
        "{headers}"
    );
    assert!(
        body.contains("<Error><Code>ServiceUnavailable</Code>"),
        "{body}"
    );
    set(Faults::default()).await;
    assert_eq!(list(e.https.clone(), ca.clone()).await.unwrap(), "listed");

    // Stop: both listeners refuse connections and an open connection is cut.
    let https = host(&e.https);
    let mut open = tokio::net::TcpStream::connect(&http).await.unwrap();
    set(Faults {
        mode: FaultMode::Stop,
        delay_ms: 0,
    })
    .await;
    for addr in [&http, &https] {
        harness::until(&format!("{addr} refuses connections"), || async {
            matches!(
                tokio::net::TcpStream::connect(addr).await,
                Err(err) if err.kind() == std::io::ErrorKind::ConnectionRefused
            )
        })
        .await;
    }
    {
        use tokio::io::AsyncReadExt as _;
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(10), open.read(&mut byte))
            .await
            .expect("the open connection was cut");
        assert!(
            matches!(read, Ok(0) | Err(_)),
            "the open connection still delivers data: {read:?}"
        );
    }
    assert_eq!(
        list(e.https.clone(), ca.clone()).await.unwrap(),
        "connection-error"
    );
    set(Faults::default()).await;
    assert_eq!(
        list(e.https.clone(), ca.clone()).await.unwrap(),
        "listed",
        "the same HTTPS port serves again"
    );
    assert_eq!(list(e.http.clone(), "-".into()).await.unwrap(), "listed");

    // A delay before every request.
    set(Faults {
        mode: FaultMode::None,
        delay_ms: 1500,
    })
    .await;
    let t = Instant::now();
    assert_eq!(list(e.https.clone(), ca.clone()).await.unwrap(), "listed");
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(1500), "took {took:?}");
    set(Faults::default()).await;
    let t = Instant::now();
    assert_eq!(list(e.https.clone(), ca.clone()).await.unwrap(), "listed");
    println!(
        "list with delayMs=1500: {took:?}; after switching back: {:?}",
        t.elapsed()
    );

    // A malformed switch is refused, naming what is wrong, and changes nothing.
    let admin = host(&e.admin);
    let body = r#"{"mode":"broken"}"#;
    let (status, _, answer) = raw(
        &admin,
        &format!(
            "PUT /faults HTTP/1.1\r\nHost: {admin}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
    .await
    .unwrap();
    assert_eq!(status, "HTTP/1.1 400 Bad Request");
    assert!(answer.contains("unknown variant `broken`"), "{answer}");
    assert_eq!(server.faults(), Faults::default());
    let (status, _, answer) = raw(
        &admin,
        &format!("GET /faults HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n"),
    )
    .await
    .unwrap();
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(answer.trim(), r#"{"mode":"none","delayMs":0}"#);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The fault switches under real WAL archiving (the CNPG simulator's PostgreSQL and
/// barman-cloud): a completed plugin Backup has archived the segment holding every commit before
/// it (its `pg_backup_stop()` switched and waited); with the server answering 503, or stopped,
/// archiving fails with barman's words on `ContinuousArchiving` and catches up once switched
/// back; with `delayMs` a segment takes at least that long to archive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wal_archiving_fails_under_each_fault_and_catches_up_when_switched_back() {
    use crate::common::*;
    use kube::api::PostParams;
    use serde_json::json;

    let mut h = harness::Harness::start().await.unwrap();
    let ns = h.temp_namespace("s3-faults").await.unwrap();
    let data_dir = spawn_sims(&mut h, "s3,cosi,cnpg", &[]).await;
    let admin_url = operator_sims::s3::Endpoints::read(&data_dir.join("s3"))
        .unwrap()
        .admin;
    let set = |f: Faults| {
        let admin_url = admin_url.clone();
        async move { put_faults(&admin_url, f).await.unwrap() }
    };
    let creds = bucket_credentials(&h, &ns, "pg").await;
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(h.client(), &ns);
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "pg-s3"},
                "stringData": {"AWS_ACCESS_KEY_ID": creds["accessKey"],
                               "AWS_SECRET_ACCESS_KEY": creds["secretKey"]},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    apply(
        &api::<api::thirdparty::barman::ObjectStore>(&h, &ns),
        json!({"apiVersion": "barmancloud.cnpg.io/v1", "kind": "ObjectStore",
               "metadata": {"name": "postgres-f"},
               "spec": {"configuration": {
                   "destinationPath": format!("s3://{}/{ns}/", creds["bucketName"]),
                   "endpointURL": format!("https://{}", creds["endpoint"]),
                   "s3Credentials": {
                       "accessKeyId": {"name": "pg-s3", "key": "AWS_ACCESS_KEY_ID"},
                       "secretAccessKey": {"name": "pg-s3", "key": "AWS_SECRET_ACCESS_KEY"}}}}}),
    )
    .await;
    let clusters = api::<api::thirdparty::cnpg::Cluster>(&h, &ns);
    apply(
        &clusters,
        json!({"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
               "metadata": {"name": "postgres-f"},
               "spec": {"instances": 1, "storage": {"size": "1Gi"}, "plugins": [{
                   "name": "barman-cloud.cloudnative-pg.io", "isWALArchiver": true,
                   "parameters": {"barmanObjectName": "postgres-f", "serverName": "postgres-f"}}]}}),
    )
    .await;
    wait_healthy(&h, &ns, "postgres-f").await;
    let app = cluster_uri(&h, &ns, "postgres-f-app").await;
    let admin = cluster_uri(&h, &ns, "postgres-f-superuser")
        .await
        .replace("/*", "/postgres");
    psql(&app, "CREATE TABLE t (id int)");
    archive_current_wal("the first segment archived", &admin).await;

    // A completed Backup has archived the segment of every commit before it.
    psql(&app, "INSERT INTO t VALUES (1)");
    let segment = psql(&admin, "SELECT pg_walfile_name(pg_current_wal_lsn())");
    let backups = api::<api::thirdparty::cnpg::Backup>(&h, &ns);
    apply(
        &backups,
        json!({"apiVersion": "postgresql.cnpg.io/v1", "kind": "Backup",
               "metadata": {"name": "switch"},
               "spec": {"method": "plugin", "cluster": {"name": "postgres-f"},
                        "pluginConfiguration": {"name": "barman-cloud.cloudnative-pg.io"}}}),
    )
    .await;
    assert_eq!(
        backup_finished(&backups, "switch").await["phase"],
        "completed"
    );
    let archived = psql(
        &admin,
        "SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver",
    );
    assert!(
        archived.as_str() >= segment.as_str(),
        "the backup's end archived {segment} (last archived: {archived})"
    );

    let archiving = |want: &'static str| {
        let clusters = clusters.clone();
        async move {
            eventually(&format!("ContinuousArchiving={want}"), || {
                let clusters = clusters.clone();
                async move {
                    let c = get(&clusters, "postgres-f").await?;
                    c["status"]["conditions"]
                        .as_array()?
                        .iter()
                        .find(|c| c["type"] == "ContinuousArchiving" && c["status"] == want)
                        .map(|c| c["message"].as_str().unwrap_or_default().to_owned())
                }
            })
            .await
        }
    };
    for (mode, words) in [
        (FaultMode::Unavailable, "An error occurred (503)"),
        (FaultMode::Stop, "Could not connect to the endpoint URL"),
    ] {
        set(Faults { mode, delay_ms: 0 }).await;
        psql(&app, "INSERT INTO t VALUES (2)");
        let failing = psql(&admin, "SELECT pg_walfile_name(pg_switch_wal())");
        let message = archiving("False").await;
        println!("{mode:?}: {message}");
        assert!(message.contains(words), "{mode:?}: {message}");
        set(Faults::default()).await;
        eventually(&format!("{failing} archived after {mode:?}"), || async {
            let last = psql(
                &admin,
                "SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver",
            );
            (last.as_str() >= failing.as_str()).then_some(())
        })
        .await;
        archiving("True").await;
    }

    // Slowed down: a segment takes at least the delay to reach the bucket.
    set(Faults {
        mode: FaultMode::None,
        delay_ms: 1500,
    })
    .await;
    psql(&app, "INSERT INTO t VALUES (3)");
    let t = Instant::now();
    archive_current_wal("a segment archived through the delay", &admin).await;
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(1500), "took {took:?}");
    set(Faults::default()).await;
    println!("archiving one segment with delayMs=1500: {took:?}");
    h.cleanup().await.unwrap();
}
