//! Bad input, end to end: one projector run walks the source Secret through every broken shape of
//! the table in [`cases`] (missing, empty values, wrong key names, garbled or mistyped BucketInfo,
//! bytes that are not text, a Secret of another type, values near the 1 MiB limit); for each, a new
//! BackupJob must get `CredentialsProjected=False` with the named reason and a message naming the
//! key. Alongside, a copy owned by someone else is refused in its own namespace, and the
//! well-formed copy of another tenant projected before the source broke keeps its good data
//! throughout; once the source is fixed, that tenant's next job is projected again. The projector
//! never panics or restarts, and no credential value reaches its log or the conditions.

use crate::common;

use std::collections::BTreeMap;

use common::*;
use harness::Harness;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, PostParams};

const AK: &str = "AKIA-E2E-BAD-INPUT-7f1";
const SK: &str = "e2e-bad-input-secret-90ab";

/// One broken shape of the source Secret: its type and data (`None`: the Secret is deleted), and
/// the reason and message fragment the next job's condition must carry.
struct Case {
    what: &'static str,
    type_: &'static str,
    data: Option<Vec<(&'static str, Vec<u8>)>>,
    reason: &'static str,
    fragment: &'static str,
}

fn text(pairs: &[(&'static str, &str)]) -> Option<Vec<(&'static str, Vec<u8>)>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| (*k, v.as_bytes().to_vec()))
            .collect(),
    )
}

fn cases() -> Vec<Case> {
    let malformed = "SourceSecretMalformed";
    let huge = "A".repeat(700 * 1024);
    vec![
        Case {
            what: "source Secret missing",
            type_: "Opaque",
            data: None,
            reason: "SourceSecretMissing",
            fragment: "not found",
        },
        Case {
            what: "accessKey empty",
            type_: "Opaque",
            data: text(&[
                ("accessKey", ""),
                ("secretKey", SK),
                ("endpoint", "s3.example.com"),
            ]),
            reason: malformed,
            fragment: "missing accessKey",
        },
        Case {
            what: "secretKey key missing",
            type_: "Opaque",
            data: text(&[("accessKey", AK), ("endpoint", "s3.example.com")]),
            reason: malformed,
            fragment: "missing secretKey",
        },
        Case {
            what: "wrong key names (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)",
            type_: "Opaque",
            data: text(&[("AWS_ACCESS_KEY_ID", AK), ("AWS_SECRET_ACCESS_KEY", SK)]),
            reason: malformed,
            fragment: "missing accessKey",
        },
        Case {
            what: "BucketInfo not JSON, no flat keys",
            type_: "Opaque",
            data: text(&[("BucketInfo", "{not json")]),
            reason: malformed,
            fragment: "parse BucketInfo: ",
        },
        Case {
            what: "BucketInfo accessKeyID a number",
            type_: "Opaque",
            data: text(&[(
                "BucketInfo",
                r#"{"spec":{"bucketName":"b","secretS3":{"accessKeyID":42,"accessSecretKey":"x"}}}"#,
            )]),
            reason: malformed,
            fragment: "parse BucketInfo: accessKeyID is not a JSON string",
        },
        Case {
            what: "BucketInfo an array",
            type_: "Opaque",
            data: text(&[("BucketInfo", "[1,2,3]")]),
            reason: malformed,
            fragment: "parse BucketInfo: BucketInfo is not a JSON object",
        },
        Case {
            what: "accessKey bytes not UTF-8",
            type_: "Opaque",
            data: Some(vec![
                ("accessKey", vec![0xff, 0xfe, 0x41]),
                ("secretKey", SK.as_bytes().to_vec()),
                ("endpoint", b"s3.example.com".to_vec()),
            ]),
            reason: malformed,
            fragment: "key accessKey is not valid UTF-8",
        },
        Case {
            what: "endpoint bytes not UTF-8",
            type_: "Opaque",
            data: Some(vec![
                ("accessKey", AK.as_bytes().to_vec()),
                ("secretKey", SK.as_bytes().to_vec()),
                ("endpoint", vec![b's', b'3', 0xc3, 0x28]),
            ]),
            reason: malformed,
            fragment: "key endpoint is not valid UTF-8",
        },
        Case {
            what: "a Secret of type kubernetes.io/basic-auth",
            type_: "kubernetes.io/basic-auth",
            data: text(&[("username", AK), ("password", SK)]),
            reason: malformed,
            fragment: "missing accessKey",
        },
        Case {
            what: "endpoint empty in the Secret and in BACKUP_STORAGE_ENDPOINT",
            type_: "Opaque",
            data: text(&[("accessKey", AK), ("secretKey", SK), ("endpoint", "")]),
            reason: malformed,
            fragment: "endpoint is empty in both source Secret",
        },
        Case {
            what: "accessKey of 700 KiB (the copy, with every key format, exceeds 1 MiB)",
            type_: "Opaque",
            data: text(&[
                ("accessKey", &huge),
                ("secretKey", SK),
                ("endpoint", "s3.example.com"),
            ]),
            reason: malformed,
            fragment: "larger than the 1 MiB",
        },
    ]
}

async fn put_source(h: &Harness, ns: &str, case_type: &str, data: &[(&str, Vec<u8>)]) {
    let api: Api<Secret> = Api::namespaced(h.client(), ns);
    // The type of a Secret is immutable: replace it whole.
    if api.get_opt(SOURCE).await.unwrap().is_some() {
        api.delete(SOURCE, &DeleteParams::default()).await.unwrap();
    }
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(SOURCE.into()),
            ..Default::default()
        },
        type_: Some(case_type.into()),
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), ByteString(v.clone())))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..Default::default()
    };
    api.create(&PostParams::default(), &secret)
        .await
        .unwrap_or_else(|e| panic!("the API server must accept the source: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_source_secrets_end_in_named_reasons_and_spare_other_tenants() {
    let mut h = Harness::start().await.unwrap();
    let src = h.temp_namespace("src").await.unwrap();
    let good = h.temp_namespace("good").await.unwrap();
    let bad = h.temp_namespace("bad").await.unwrap();
    let foreign = h.temp_namespace("foreign").await.unwrap();
    backup_class(&h, "cozy-default", &[]).await;
    let good_source = [
        ("accessKey", AK.as_bytes().to_vec()),
        ("secretKey", SK.as_bytes().to_vec()),
        ("endpoint", b"s3.example.com".to_vec()),
    ];
    put_source(&h, &src, "Opaque", &good_source).await;
    put_target(&h, &foreign, &[], &[("mine", "keep")]).await;
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

    backup_job(&h, &good, "before", "cozy-default", "Postgres").await;
    backup_job(&h, &foreign, "job", "cozy-default", "Postgres").await;
    wait_bj(&h, &good, "before", "Projected").await;
    let good_copy = data_of(&target(&h, &good).await.unwrap());
    let refused = wait_bj(&h, &foreign, "job", "TargetSecretNotOwned").await;
    assert!(
        refused
            .message
            .contains("exists without label apps.cozystack.io/managed-by=cozystack-backups"),
        "{refused:?}"
    );

    let cases = cases();
    for (i, case) in cases.iter().enumerate() {
        match &case.data {
            None => {
                Api::<Secret>::namespaced(h.client(), &src)
                    .delete(SOURCE, &DeleteParams::default())
                    .await
                    .unwrap();
            }
            Some(data) => put_source(&h, &src, case.type_, data).await,
        }
        let job = format!("case-{i}");
        backup_job(&h, &bad, &job, "cozy-default", "Postgres").await;
        let c = eventually(case.what, || async {
            bj_condition(&h, &bad, &job)
                .await
                .filter(|c| c.reason == case.reason && c.message.contains(case.fragment))
        })
        .await;
        assert_eq!(c.status, api::ConditionStatus::False, "{}", case.what);
        // The other tenant's copy is untouched by the broken source.
        assert_eq!(
            data_of(&target(&h, &good).await.unwrap()),
            good_copy,
            "{}",
            case.what
        );
    }

    put_source(&h, &src, "Opaque", &good_source).await;
    backup_job(&h, &good, "after", "cozy-default", "Postgres").await;
    wait_bj(&h, &good, "after", "Projected").await;
    assert_eq!(data_of(&target(&h, &good).await.unwrap()), good_copy);
    assert_eq!(
        data_of(&target(&h, &foreign).await.unwrap()),
        expect(&[("mine", "keep")]),
        "a copy owned by someone else is never written"
    );

    h.daemon(NAME).unwrap().assert_unharmed();
    assert_no_leak(&mut h, &[AK, SK]).await;
    h.cleanup().await.unwrap();
}
