//! Fidelity to kube-apiserver where it is easy to get subtly wrong, through kube-rs against a fresh
//! emulator: validation (status codes, reasons, messages and `details.causes` in upstream's format),
//! server-side apply conflicts, Status details, per-kind generation, garbage collection with several
//! owners, time normalisation, pagination and CRD selectable fields.

use crate::common;

use std::collections::BTreeMap;

use common::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const CMS: &str = "/api/v1/namespaces/default/configmaps";

fn invalid(message: &str, name: &str, group: Option<&str>, kind: &str, causes: Value) -> Value {
    let mut details = json!({"name": name, "kind": kind, "causes": causes});
    if let Some(g) = group {
        details["group"] = json!(g);
    }
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": "Invalid", "details": details, "code": 422})
}

async fn post(client: &Client, uri: &str, body: Value) -> (u16, Value) {
    let (code, _, v) = raw(client, "POST", uri, "application/json", &body).await;
    (code, v)
}

const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

#[tokio::test]
async fn label_values_are_validated_on_every_kind() {
    let emu = emulator().await;
    let client = emu.client();
    // A label whose value is derived from a long object name fails as it does in production.
    let long_name = format!("{}.example", "n".repeat(60));
    let (code, body) = post(
        &client,
        CMS,
        json!({"metadata": {"name": "c", "labels": {"app.kubernetes.io/instance": long_name}}}),
    )
    .await;
    assert_eq!(code, 422);
    let detail = format!("Invalid value: \"{long_name}\": must be no more than 63 characters");
    assert_eq!(
        body,
        invalid(
            &format!("ConfigMap \"c\" is invalid: metadata.labels: {detail}"),
            "c",
            None,
            "ConfigMap",
            json!([{"reason": "FieldValueInvalid", "message": detail, "field": "metadata.labels"}])
        )
    );

    // Custom resources too, with the group in the message; bad characters and a bad key at once.
    install_widgets(&client).await;
    let (code, body) = post(
        &client,
        "/apis/example.com/v1/namespaces/default/widgets",
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "labels": {"tier": "gold silver", "bad/key/x": "v"}}, "spec": {"size": 1}}),
    )
    .await;
    assert_eq!(code, 422);
    let key_msg = "Invalid value: \"bad/key/x\": a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')";
    let value_msg = format!("Invalid value: \"gold silver\": {LABEL_VALUE_MSG}");
    assert_eq!(
        body,
        invalid(
            &format!(
                "Widget.example.com \"w\" is invalid: [metadata.labels: {key_msg}, metadata.labels: {value_msg}]"
            ),
            "w",
            Some("example.com"),
            "Widget",
            json!([{"reason": "FieldValueInvalid", "message": key_msg, "field": "metadata.labels"},
                   {"reason": "FieldValueInvalid", "message": value_msg, "field": "metadata.labels"}])
        )
    );
    // The same object with valid labels is accepted.
    let (code, _) = post(
        &client,
        "/apis/example.com/v1/namespaces/default/widgets",
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "labels": {"tier": "gold"}}, "spec": {"size": 1}}),
    )
    .await;
    assert_eq!(code, 201);
}

#[tokio::test]
async fn names_generate_name_annotations_and_keys() {
    let emu = emulator().await;
    let client = emu.client();
    // Namespaces are DNS labels: no dots.
    let (code, body) = post(
        &client,
        "/api/v1/namespaces",
        json!({"metadata": {"name": "a.b"}}),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        "Namespace \"a.b\" is invalid: metadata.name: Invalid value: \"a.b\": must not contain dots"
    );
    // Services are DNS-1035 labels: they start with a letter.
    let (code, body) = post(
        &client,
        "/api/v1/namespaces/default/services",
        json!({"metadata": {"name": "1svc"}, "spec": {"ports": [{"port": 80}]}}),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        body["details"]["causes"],
        json!([{"reason": "FieldValueInvalid", "field": "metadata.name",
            "message": "Invalid value: \"1svc\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"}])
    );
    // RBAC names are path segments: colons are fine.
    let (code, _) = post(
        &client,
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        json!({"metadata": {"name": "system:reader"}, "rules": []}),
    )
    .await;
    assert_eq!(code, 201);
    // A CRD's name is its plural and group.
    let (code, body) = post(
        &client,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        json!({"metadata": {"name": "gadgets.example.com"}, "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}}]}}),
    )
    .await;
    assert_eq!(
        (code, body["message"].as_str().unwrap()),
        (
            422,
            "CustomResourceDefinition.apiextensions.k8s.io \"gadgets.example.com\" is invalid: metadata.name: Invalid value: \"gadgets.example.com\": must be spec.names.plural+\".\"+spec.group"
        )
    );
    // A long generateName keeps 58 characters of the prefix, so the name fits in 63.
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let prefix = "p".repeat(70);
    let mut gen_cm = ConfigMap::default();
    gen_cm.metadata.generate_name = Some(prefix.clone());
    let created = cms.create(&PostParams::default(), &gen_cm).await.unwrap();
    let name = created.name_any();
    assert_eq!((name.len(), &name[..58]), (63, &prefix[..58]));
    // A bad generateName is reported on generateName and on the generated name.
    let (code, body) = post(&client, CMS, json!({"metadata": {"generateName": "Bad-"}})).await;
    assert_eq!(code, 422);
    let fields: Vec<&str> = body["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, vec!["metadata.generateName", "metadata.name"]);
    // Annotations: 256 KiB in total.
    let (code, body) = post(
        &client,
        CMS,
        json!({"metadata": {"name": "big", "annotations": {"a": "x".repeat(256 * 1024)}}}),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        body["details"]["causes"],
        json!([{"reason": "FieldValueTooLong", "field": "metadata.annotations",
            "message": "Too long: may not be more than 262144 bytes"}])
    );
    // ConfigMap keys.
    let (code, body) = post(
        &client,
        CMS,
        json!({"metadata": {"name": "keys"}, "data": {"bad key": "v", "good.key": "v"}}),
    )
    .await;
    assert_eq!(code, 422);
    let msg = "Invalid value: \"bad key\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";
    assert_eq!(
        body,
        invalid(
            &format!("ConfigMap \"keys\" is invalid: data[bad key]: {msg}"),
            "keys",
            None,
            "ConfigMap",
            json!([{"reason": "FieldValueInvalid", "message": msg, "field": "data[bad key]"}])
        )
    );
}

#[tokio::test]
async fn secrets_deployments_and_jobs() {
    let emu = emulator().await;
    let client = emu.client();
    // Secret data that is not base64 fails while decoding: 400, not 422.
    let (code, body) = post(
        &client,
        "/api/v1/namespaces/default/secrets",
        json!({"metadata": {"name": "s"}, "data": {"password": "not base64"}}),
    )
    .await;
    assert_eq!(
        (code, body),
        (
            400,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "Secret in version \"v1\" cannot be handled as a Secret: illegal base64 data at input byte 3",
                "reason": "BadRequest", "code": 400})
        )
    );
    // A TLS Secret needs both keys.
    let (code, body) = post(
        &client,
        "/api/v1/namespaces/default/secrets",
        json!({"metadata": {"name": "tls"}, "type": "kubernetes.io/tls", "data": {"tls.crt": "Y2VydA=="}}),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        "Secret \"tls\" is invalid: data[tls.key]: Required value"
    );

    // A Deployment whose selector does not select its template.
    let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
          "template": {"metadata": {"labels": {"app": "api", "tier": "fe"}},
            "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}}});
    let (code, body) = post(
        &client,
        "/apis/apps/v1/namespaces/default/deployments",
        deploy.clone(),
    )
    .await;
    let msg = "Invalid value: map[string]string{\"app\":\"api\", \"tier\":\"fe\"}: `selector` does not match template `labels`";
    assert_eq!(
        (code, body),
        (
            422,
            invalid(
                &format!(
                    "Deployment.apps \"web\" is invalid: spec.template.metadata.labels: {msg}"
                ),
                "web",
                Some("apps"),
                "Deployment",
                json!([{"reason": "FieldValueInvalid", "message": msg, "field": "spec.template.metadata.labels"}])
            )
        )
    );
    // A Job's restart policy must be OnFailure or Never (the pod default, Always, is not).
    let (code, body) = post(
        &client,
        "/apis/batch/v1/namespaces/default/jobs",
        json!({"metadata": {"name": "j"}, "spec": {"template": {"spec": {
            "containers": [{"name": "c", "image": "busybox:1"}]}}}}),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        "Job.batch \"j\" is invalid: spec.template.spec.restartPolicy: Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\""
    );
    // A valid Job gets upstream's generated selector and labels, and the pod template defaults.
    let jobs: Api<Job> = Api::default_namespaced(client.clone());
    let job: Job = serde_json::from_value(
        json!({"metadata": {"name": "j"}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}),
    )
    .unwrap();
    let job = jobs.create(&PostParams::default(), &job).await.unwrap();
    let uid = job.uid().unwrap();
    let spec = serde_json::to_value(job.spec.unwrap()).unwrap();
    assert_eq!(
        spec,
        json!({"backoffLimit": 6, "completionMode": "NonIndexed", "completions": 1, "parallelism": 1,
            "podReplacementPolicy": "TerminatingOrFailed", "suspend": false,
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}},
            "template": {"metadata": {"labels": {"batch.kubernetes.io/controller-uid": uid,
                "batch.kubernetes.io/job-name": "j", "controller-uid": uid, "job-name": "j"}},
              "spec": {"containers": [{"name": "c", "image": "busybox", "imagePullPolicy": "Always",
                  "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}],
                "dnsPolicy": "ClusterFirst", "restartPolicy": "Never", "schedulerName": "default-scheduler",
                "securityContext": {}, "terminationGracePeriodSeconds": 30}}})
    );
}

#[tokio::test]
async fn apply_conflicts_and_status_details() {
    let emu = emulator().await;
    let client = emu.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let apply = |data: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": data});
    cms.patch(
        "c",
        &PatchParams::apply("owner"),
        &Patch::Apply(apply(json!({"a": "1", "b": "1"}))),
    )
    .await
    .unwrap();
    let editor = PatchParams {
        field_manager: Some("editor".into()),
        ..Default::default()
    };
    cms.patch("c", &editor, &Patch::Merge(json!({"data": {"c": "1"}})))
        .await
        .unwrap();
    // One conflict: on one line, cause reason FieldManagerConflict, no name/kind in details.
    let (code, _, body) = raw(
        &client,
        "PATCH",
        &format!("{CMS}/c?fieldManager=intruder"),
        "application/apply-patch+yaml",
        &apply(json!({"a": "2"})),
    )
    .await;
    assert_eq!(
        (code, body),
        (
            409,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "Apply failed with 1 conflict: conflict with \"owner\": .data.a",
                "reason": "Conflict", "code": 409,
                "details": {"causes": [{"reason": "FieldManagerConflict", "message": "conflict with \"owner\"", "field": ".data.a"}]}})
        )
    );
    // Several conflicts with two managers: grouped per manager, managers sorted.
    let (code, _, body) = raw(
        &client,
        "PATCH",
        &format!("{CMS}/c?fieldManager=intruder"),
        "application/apply-patch+yaml",
        &apply(json!({"a": "2", "b": "2", "c": "2"})),
    )
    .await;
    assert_eq!(code, 409);
    assert_eq!(
        body["message"],
        "Apply failed with 3 conflicts: conflicts with \"editor\" using v1:\n- .data.c\nconflicts with \"owner\":\n- .data.a\n- .data.b"
    );
    assert_eq!(
        body["details"]["causes"][2],
        json!({"reason": "FieldManagerConflict", "message": "conflict with \"editor\" using v1", "field": ".data.c"})
    );

    // An unsupported dryRun value is a 422 about the verb's options.
    let (code, body) = post(
        &client,
        &format!("{CMS}?dryRun=Yes"),
        json!({"metadata": {"name": "d"}}),
    )
    .await;
    let msg = "Unsupported value: []string{\"Yes\"}: supported values: \"All\"";
    assert_eq!(
        (code, body),
        (
            422,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": format!("CreateOptions.meta.k8s.io \"\" is invalid: dryRun: {msg}"),
                "reason": "Invalid", "code": 422,
                "details": {"group": "meta.k8s.io", "kind": "CreateOptions",
                    "causes": [{"reason": "FieldValueNotSupported", "message": msg, "field": "dryRun"}]}})
        )
    );
    // The options of a patch are validated together: force on a non-apply patch, a bad fieldValidation.
    let (code, _, body) = raw(
        &client,
        "PATCH",
        &format!("{CMS}/c?force=true&fieldValidation=Loud"),
        "application/merge-patch+json",
        &json!({"data": {"x": "y"}}),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: [force: Forbidden: may not be specified for non-apply patch, fieldValidation: Unsupported value: \"Loud\": supported values: \"\", \"Ignore\", \"Strict\", \"Warn\"]"
    );
    // An apply needs a field manager.
    let (code, _, body) = raw(
        &client,
        "PATCH",
        &format!("{CMS}/c"),
        "application/apply-patch+yaml",
        &apply(json!({"a": "1"})),
    )
    .await;
    assert_eq!(
        (code, body["details"]["causes"].clone()),
        (
            422,
            json!([{"reason": "FieldValueRequired", "message": "Required value: is required for apply patch", "field": "fieldManager"}])
        )
    );
    // details.kind of a 422 is the Kind; of a 404 it is the resource, as upstream.
    let (_, body) = post(&client, CMS, json!({"metadata": {"name": "Bad"}})).await;
    assert_eq!(body["details"]["kind"], "ConfigMap");
    let err = status(cms.get("missing").await.unwrap_err());
    assert_eq!(
        err.details.unwrap().kind,
        "configmaps",
        "NotFound names the resource"
    );
}

#[tokio::test]
async fn deployment_generation_follows_its_strategy() {
    let emu = emulator().await;
    let client = emu.client();
    let deploys: Api<Deployment> = Api::default_namespaced(client.clone());
    let d: Deployment = serde_json::from_value(json!({"metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
          "template": {"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}}}))
    .unwrap();
    let d = deploys.create(&PostParams::default(), &d).await.unwrap();
    assert_eq!(d.metadata.generation, Some(1));
    let annotate = Patch::Merge(json!({"metadata": {"annotations": {"note": "x"}}}));
    let d = deploys
        .patch("web", &PatchParams::default(), &annotate)
        .await
        .unwrap();
    assert_eq!(
        d.metadata.generation,
        Some(2),
        "annotations are copied to ReplicaSets"
    );
    let d = deploys
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(d.metadata.generation, Some(2), "labels are not");
    // A Job's generation ignores annotations.
    let jobs: Api<Job> = Api::default_namespaced(client.clone());
    let j: Job = serde_json::from_value(
        json!({"metadata": {"name": "j"}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1"}]}}}}),
    )
    .unwrap();
    jobs.create(&PostParams::default(), &j).await.unwrap();
    let j = jobs
        .patch("j", &PatchParams::default(), &annotate)
        .await
        .unwrap();
    assert_eq!(j.metadata.generation, Some(1));
}

#[tokio::test]
async fn a_dependent_outlives_one_of_its_two_owners() {
    let emu = emulator().await;
    let client = emu.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let mut owners = Vec::new();
    for n in ["owner-a", "owner-b"] {
        let mut c = ConfigMap::default();
        c.metadata.name = Some(n.into());
        owners.push(cms.create(&PostParams::default(), &c).await.unwrap());
    }
    let reference = |o: &ConfigMap| OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: o.name_any(),
        uid: o.uid().unwrap(),
        ..Default::default()
    };
    let mut child = ConfigMap::default();
    child.metadata.name = Some("child".into());
    child.metadata.owner_references = Some(owners.iter().map(reference).collect());
    cms.create(&PostParams::default(), &child).await.unwrap();
    cms.delete("owner-a", &DeleteParams::default())
        .await
        .unwrap();
    let refs = eventually("the dangling reference removed", || async {
        let c = cms.get("child").await.unwrap();
        let refs = c.metadata.owner_references.unwrap_or_default();
        (refs.len() == 1).then_some(refs)
    })
    .await;
    assert_eq!(refs, vec![reference(&owners[1])]);
    cms.delete("owner-b", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the child collected with its last owner", || async {
        cms.get_opt("child").await.unwrap().is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn times_are_normalised_to_utc_with_z() {
    let emu = emulator().await;
    let client = emu.client();
    let (code, body) = post(
        &client,
        "/apis/coordination.k8s.io/v1/namespaces/default/leases",
        json!({"metadata": {"name": "l"}, "spec": {"holderIdentity": "a",
            "acquireTime": "2026-01-01T12:00:00.000000+02:00",
            "renewTime": "2026-01-01T10:00:05.123456+00:00"}}),
    )
    .await;
    assert_eq!(code, 201);
    assert_eq!(
        body["spec"],
        json!({"holderIdentity": "a", "acquireTime": "2026-01-01T10:00:00.000000Z",
            "renewTime": "2026-01-01T10:00:05.123456Z"})
    );
    let leases: Api<Lease> = Api::default_namespaced(client.clone());
    assert_eq!(
        serde_json::to_value(leases.get("l").await.unwrap().spec).unwrap()["renewTime"],
        "2026-01-01T10:00:05.123456Z"
    );
    // metav1.Time keeps whole seconds.
    let pods = "/api/v1/namespaces/default/pods";
    let (code, body) = post(
        &client,
        pods,
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}}),
    )
    .await;
    assert_eq!(code, 201);
    assert_eq!(body["metadata"]["generation"], 1, "Pods track generation");
    // The pod spec gets upstream's defaults.
    assert_eq!(
        body["spec"],
        json!({"containers": [{"name": "c", "image": "i:1", "imagePullPolicy": "IfNotPresent",
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}],
            "dnsPolicy": "ClusterFirst", "enableServiceLinks": true, "restartPolicy": "Always",
            "schedulerName": "default-scheduler", "securityContext": {}, "terminationGracePeriodSeconds": 30})
    );
    let (code, _, body) = raw(
        &client,
        "PATCH",
        &format!("{pods}/p/status"),
        "application/merge-patch+json",
        &json!({"status": {"startTime": "2026-01-01T10:00:00.75+00:00",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T11:00:00-01:00"}]},
            "metadata": {"resourceVersion": body["metadata"]["resourceVersion"]}}),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(body["status"]["startTime"], "2026-01-01T10:00:00Z");
    assert_eq!(
        body["status"]["conditions"][0]["lastTransitionTime"],
        "2026-01-01T12:00:00Z"
    );
    // A MicroTime without its six fractional digits does not decode.
    let (code, body) = post(
        &client,
        "/apis/coordination.k8s.io/v1/namespaces/default/leases",
        json!({"metadata": {"name": "m"}, "spec": {"renewTime": "2026-01-01T10:00:00Z"}}),
    )
    .await;
    assert_eq!(code, 400);
    assert_eq!(
        body["message"],
        "Lease in version \"v1\" cannot be handled as a Lease: parsing time \"2026-01-01T10:00:00Z\" as \"2006-01-02T15:04:05.000000Z07:00\": cannot parse \"Z\" as \".000000\""
    );
}

async fn named_cms(cms: &Api<ConfigMap>, n: usize) {
    for i in 0..n {
        let mut c = ConfigMap::default();
        c.metadata.name = Some(format!("cm-{i:02}"));
        c.metadata.labels = Some(BTreeMap::from([("i".to_string(), i.to_string())]));
        cms.create(&PostParams::default(), &c).await.unwrap();
    }
}

#[tokio::test]
async fn pagination_is_a_consistent_snapshot() {
    let emu = emulator().await;
    let client = emu.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    named_cms(&cms, 5).await;
    let first = cms.list(&ListParams::default().limit(2)).await.unwrap();
    let names = |l: &kube::core::ObjectList<ConfigMap>| -> Vec<String> {
        l.items.iter().map(|c| c.name_any()).collect()
    };
    assert_eq!(names(&first), vec!["cm-00", "cm-01"]);
    assert_eq!(first.metadata.remaining_item_count, Some(3));
    let token = first.metadata.continue_.clone().unwrap();
    // Changes after the first page do not show in the rest of the list.
    cms.delete("cm-02", &DeleteParams::default()).await.unwrap();
    let mut late = ConfigMap::default();
    late.metadata.name = Some("cm-03a".into());
    cms.create(&PostParams::default(), &late).await.unwrap();
    let second = cms
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(names(&second), vec!["cm-02", "cm-03"]);
    assert_eq!(
        second.metadata.resource_version,
        first.metadata.resource_version
    );
    let third = cms
        .list(
            &ListParams::default()
                .limit(2)
                .continue_token(second.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(names(&third), vec!["cm-04"]);
    assert_eq!(
        (
            third.metadata.continue_,
            third.metadata.remaining_item_count
        ),
        (None, None)
    );
    // With a selector the remaining count is unknown, as upstream.
    let sel = cms
        .list(&ListParams::default().labels("i!=1").limit(1))
        .await
        .unwrap();
    assert_eq!(
        (names(&sel), sel.metadata.remaining_item_count),
        (vec!["cm-00".to_string()], None)
    );
    // A garbage token is a 400.
    let err = status(
        cms.list(&ListParams::default().limit(2).continue_token("garbage"))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (400, "BadRequest"));
}

#[tokio::test]
async fn an_expired_continue_token_is_410_with_a_fresh_token() {
    let emu = emulator_with(kube_emulator::Config::default().with_history_size(3)).await;
    let client = emu.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    named_cms(&cms, 4).await;
    let first = cms.list(&ListParams::default().limit(2)).await.unwrap();
    // Push the snapshot's resourceVersion out of the history.
    for i in 0..4 {
        cms.patch(
            "cm-00",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"n": i.to_string()}})),
        )
        .await
        .unwrap();
    }
    let token = first.metadata.continue_.unwrap();
    let (code, _, body) = raw(
        &client,
        "GET",
        &format!("{CMS}?limit=2&continue={token}"),
        "application/json",
        &Value::Null,
    )
    .await;
    assert_eq!((code, body["reason"].as_str()), (410, Some("Expired")));
    assert_eq!(
        body["message"],
        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list."
    );
    // The token in the 410 continues from the same place, at the current state.
    let fresh = body["metadata"]["continue"].as_str().unwrap();
    let rest = cms
        .list(&ListParams::default().limit(10).continue_token(fresh))
        .await
        .unwrap();
    let names: Vec<String> = rest.items.iter().map(|c| c.name_any()).collect();
    assert_eq!(names, vec!["cm-02", "cm-03"]);
}

#[tokio::test]
async fn the_watcher_lists_in_pages_and_then_watches() {
    let emu = emulator().await;
    let client = emu.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    named_cms(&cms, 7).await;
    let mut stream = watcher::watcher(cms.clone(), watcher::Config::default().page_size(2)).boxed();
    let mut initial = Vec::new();
    loop {
        match stream.try_next().await.unwrap().unwrap() {
            watcher::Event::Init => {}
            watcher::Event::InitApply(c) => initial.push(c.name_any()),
            watcher::Event::InitDone => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(initial.len(), 7);
    let mut late = ConfigMap::default();
    late.metadata.name = Some("late".into());
    cms.create(&PostParams::default(), &late).await.unwrap();
    match stream.try_next().await.unwrap().unwrap() {
        watcher::Event::Apply(c) => assert_eq!(c.name_any(), "late"),
        other => panic!("unexpected {other:?}"),
    }
    let pages = emu
        .audit_log()
        .lines()
        .filter(|l| l.contains("\"verb\":\"list\"") && l.contains("limit=2"))
        .count();
    assert_eq!(pages, 4, "7 objects in pages of 2");
}

#[tokio::test]
async fn selectable_fields_of_a_crd() {
    let emu = emulator().await;
    let client = emu.client();
    let crd = WIDGET_CRD.replace(
        "    subresources: {status: {}}\n",
        "    subresources: {status: {}}\n    selectableFields: [{jsonPath: .spec.color}, {jsonPath: .spec.size}]\n",
    );
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    crds.create(&PostParams::default(), &serde_yaml::from_str(&crd).unwrap())
        .await
        .unwrap();
    let widgets: Api<Widget> = Api::default_namespaced(client.clone());
    eventually("widgets served", || async {
        widgets.list(&ListParams::default()).await.ok().map(|_| ())
    })
    .await;
    for (n, color, size) in [
        ("a", Some("blue"), 1),
        ("b", Some("red"), 2),
        ("c", None, 2),
    ] {
        let w = Widget::new(
            n,
            WidgetSpec {
                size,
                color: color.map(str::to_string),
            },
        );
        widgets.create(&PostParams::default(), &w).await.unwrap();
    }
    let names = |sel: &'static str| {
        let widgets = widgets.clone();
        async move {
            widgets
                .list(&ListParams::default().fields(sel))
                .await
                .unwrap()
                .items
                .iter()
                .map(|w| w.name_any())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(names("spec.color=blue").await, vec!["a"]);
    assert_eq!(names("spec.color!=blue").await, vec!["b", "c"]);
    assert_eq!(names("spec.size=2,spec.color=red").await, vec!["b"]);
    let err = status(
        widgets
            .list(&ListParams::default().fields("spec.shape=round"))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (err.code, err.message.as_str()),
        (400, "field label not supported: spec.shape")
    );
}
