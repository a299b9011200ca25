//! The projector's Secret access, as the API server's authorizer sees it (on the emulator, and on
//! kube-apiserver with `COZY_E2E_API=real`): its token reads the source and the copies by name, and
//! lists them only with a `metadata.name` field selector; a plain list of Secrets and any other
//! Secret are refused with the API server's 403.

use harness::Harness;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, ObjectMeta, PostParams};

use crate::common::{NAME, SOURCE, TARGET};

fn secret(name: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some([("password".to_owned(), ByteString(b"hunter2".to_vec()))].into()),
        ..Default::default()
    }
}

/// The 403 message of a refused request, or a panic naming what was allowed.
fn forbidden<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(s)) if s.code == 403 => s.message,
        other => panic!("expected 403 Forbidden, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_projector_reads_only_the_source_and_its_copies() {
    let mut h = Harness::start().await.unwrap();
    let ns = h.temp_namespace("tenant").await.unwrap();
    let admin: Api<Secret> = Api::namespaced(h.client(), &ns);
    for name in [SOURCE, TARGET, "orders-db-app"] {
        admin
            .create(&PostParams::default(), &secret(name))
            .await
            .unwrap();
    }
    let user = "system:serviceaccount:cozy-backup-controller:credentials-projector";
    let client = h.component_client(NAME).unwrap();
    let all: Api<Secret> = Api::all(client.clone());
    let here: Api<Secret> = Api::namespaced(client, &ns);

    // Allowed: the two names, read by name and listed with the name selector.
    for name in [SOURCE, TARGET] {
        here.get(name).await.unwrap();
        let by_name = ListParams::default().fields(&format!("metadata.name={name}"));
        let listed = all.list(&by_name).await.unwrap();
        assert!(
            listed
                .items
                .iter()
                .any(|s| s.metadata.namespace.as_deref() == Some(&ns)),
            "{name} listed by name"
        );
    }

    // Refused: every other Secret, and any list without the name selector.
    assert_eq!(
        forbidden(here.get("orders-db-app").await),
        format!(
            "secrets \"orders-db-app\" is forbidden: User \"{user}\" cannot get resource \"secrets\" in API group \"\" in the namespace \"{ns}\""
        )
    );
    assert_eq!(
        forbidden(all.list(&ListParams::default()).await),
        format!(
            "secrets is forbidden: User \"{user}\" cannot list resource \"secrets\" in API group \"\" at the cluster scope"
        )
    );
    assert_eq!(
        forbidden(
            here.list(
                &ListParams::default().labels("apps.cozystack.io/managed-by=cozystack-backups")
            )
            .await
        ),
        format!(
            "secrets is forbidden: User \"{user}\" cannot list resource \"secrets\" in API group \"\" in the namespace \"{ns}\""
        )
    );
    assert_eq!(
        forbidden(
            all.list(&ListParams::default().fields("metadata.name=orders-db-app"))
                .await
        ),
        format!(
            "secrets \"orders-db-app\" is forbidden: User \"{user}\" cannot list resource \"secrets\" in API group \"\" at the cluster scope"
        )
    );
    let mut other = here.get_opt(TARGET).await.unwrap().unwrap();
    other.metadata.name = Some("orders-db-app".into());
    other.metadata.resource_version = None;
    forbidden(
        here.replace("orders-db-app", &PostParams::default(), &other)
            .await,
    );
    h.cleanup().await.unwrap();
}
