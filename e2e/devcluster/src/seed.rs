//! Stage two: the objects the plane seeds before the demos — the platform's own (`cozy-system`),
//! the application CRDs cozystack-api would serve, and the example tenant's applications with
//! their sample data (Postgres here; MariaDB in [`crate::mariadb`], Etcd in [`crate::etcd`]).

use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;

use crate::{TENANT, etcd, mariadb};

/// Sample data seeded into `orders-db` (idempotent: only into an empty table).
pub const SAMPLE_SQL: &str = "CREATE TABLE IF NOT EXISTS orders (id serial PRIMARY KEY, customer text NOT NULL, \
     amount numeric(10,2) NOT NULL, created_at timestamptz NOT NULL DEFAULT now()); \
     INSERT INTO orders (customer, amount) SELECT * FROM (VALUES ('alice', 19.99), ('bob', 5.00), \
     ('carol', 42.50)) v WHERE NOT EXISTS (SELECT 1 FROM orders);";

/// The example tenant's applications: Postgres `orders-db` (gets sample rows) and `orders-db-copy`
/// (stays empty: the target of the documentation's point-in-time RestoreJob), MariaDB `shop-db` and
/// `shop-db-copy` ([`mariadb::create`]) and Etcd `etcd` ([`etcd::create`]). Existing ones are kept.
pub async fn seed_tenant(client: &kube::Client) -> anyhow::Result<()> {
    use api::thirdparty::apps::Postgres;
    use kube::api::{DynamicObject, PostParams};
    let ar = kube::core::ApiResource::erase::<Postgres>(&());
    let apps: Api<DynamicObject> = Api::namespaced_with(client.clone(), TENANT, &ar);
    for name in ["orders-db", "orders-db-copy"] {
        let app: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Postgres",
            "metadata": {"name": name, "namespace": TENANT},
            "spec": {"size": "1Gi", "replicas": 1},
        }))?;
        match apps.create(&PostParams::default(), &app).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e).with_context(|| format!("creating Postgres {name}")),
        }
    }
    mariadb::create(client).await?;
    etcd::create(client).await?;
    Ok(())
}

/// Waits for `orders-db`'s Cluster to be healthy, then inserts the sample rows (once) through the
/// `-app` Secret, as a user would; returns the connection URI.
pub async fn seed_sample_rows(
    client: &kube::Client,
    pg_bin_dir: &std::path::Path,
) -> anyhow::Result<String> {
    use api::thirdparty::cnpg::Cluster;
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::DynamicObject;
    let clusters: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        TENANT,
        &kube::core::ApiResource::erase::<Cluster>(&()),
    );
    let secrets: Api<Secret> = Api::namespaced(client.clone(), TENANT);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    let uri = loop {
        let healthy = clusters
            .get_opt("postgres-orders-db")
            .await?
            .and_then(|c| c.data["status"]["phase"].as_str().map(str::to_owned))
            .is_some_and(|p| p == "Cluster in healthy state");
        if healthy
            && let Some(secret) = secrets.get_opt("postgres-orders-db-app").await?
            && let Some(uri) = secret.data.as_ref().and_then(|d| d.get("uri"))
        {
            break String::from_utf8(uri.0.clone())?;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "Cluster {TENANT}/postgres-orders-db did not become healthy within 90s (see .dev/logs/operator-sims.log)"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let out = tokio::process::Command::new(pg_bin_dir.join("psql"))
        .args([
            uri.as_str(),
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            SAMPLE_SQL,
        ])
        .output()
        .await
        .with_context(|| format!("running {}", pg_bin_dir.join("psql").display()))?;
    anyhow::ensure!(
        out.status.success(),
        "psql: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(uri)
}

pub(crate) async fn psql_count(pg_bin_dir: &std::path::Path, uri: &str) -> anyhow::Result<String> {
    let out = tokio::process::Command::new(pg_bin_dir.join("psql"))
        .args([uri, "-X", "-A", "-t", "-c", "SELECT count(*) FROM orders"])
        .output()
        .await?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Objects of the Cozystack platform that daemons act on but that no daemon creates: the
/// `cozy-system` namespace and the `cozystack-api` Deployment that apidef-restarter rolls (the
/// emulator runs no pods, so rolling it only changes its pod template). Existing objects (from a
/// `--persist` snapshot) are kept.
pub async fn seed_platform_objects(client: &kube::Client) -> anyhow::Result<()> {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::PostParams;

    let namespace: Namespace = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "cozy-system"}
    }))?;
    let deployment: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "cozystack-api", "namespace": "cozy-system"},
        "spec": {
            "selector": {"matchLabels": {"app": "cozystack-api"}},
            "template": {
                "metadata": {"labels": {"app": "cozystack-api"}},
                "spec": {"containers": [{"name": "cozystack-api", "image": "cozystack-api:dev"}]}
            }
        }
    }))?;
    fn created<T>(r: Result<T, kube::Error>) -> Result<(), kube::Error> {
        match r {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e),
        }
    }
    created(
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await,
    )
    .context("namespace cozy-system")?;
    created(
        Api::<Deployment>::namespaced(client.clone(), "cozy-system")
            .create(&PostParams::default(), &deployment)
            .await,
    )
    .context("deployment cozy-system/cozystack-api")?;
    Ok(())
}

/// The permissive CRDs of the MariaDB and Etcd applications (served by cozystack-api in a
/// cluster; the simulators serve the Postgres one), before the daemons start.
pub async fn install_app_crds(client: &kube::Client) -> anyhow::Result<()> {
    use api::thirdparty::{apps, permissive_crd};
    use kube::api::PostParams;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in [
        permissive_crd::<apps::MariaDB>(true),
        permissive_crd::<apps::Etcd>(true),
    ] {
        match crds.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e).context("creating a CRD"),
        }
    }
    Ok(())
}

/// An API of the namespaced kind `K` in the example tenant, as dynamic objects.
pub(crate) fn dynamic<K>(client: &kube::Client) -> Api<kube::api::DynamicObject>
where
    K: kube::Resource<DynamicType = ()>,
{
    Api::namespaced_with(
        client.clone(),
        TENANT,
        &kube::core::ApiResource::erase::<K>(&()),
    )
}

/// Creates `body` unless it exists (answers whether it created it); retries for 30 s while the
/// kind is not served yet (a CRD just created on kube-apiserver).
pub(crate) async fn created<K>(api: &Api<K>, body: serde_json::Value) -> anyhow::Result<bool>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(body)?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match api.create(&Default::default(), &obj).await {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => return Ok(false),
            Err(kube::Error::Api(e)) if e.code == 404 && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}
