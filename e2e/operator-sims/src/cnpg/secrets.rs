//! The application and superuser roles and their `<cluster>-app` / `<cluster>-superuser` Secrets, as
//! CloudNativePG writes them, pointing at the local server.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use super::instance::Instance;
use super::{CLUSTER_LABEL, FIELD_MANAGER};
use crate::pg::Server;

impl Instance {
    /// Database `app` owned by role `app` (created after initdb; kept after a recovery), the
    /// role's password from the `-app` Secret, and the Secrets pointing at this server.
    pub(super) async fn ensure_app_role_and_secrets(&self, server: &Server) -> Result<(), String> {
        let secrets: Api<Secret> = Api::namespaced(self.shared.client.clone(), &self.ns);
        let mut passwords = BTreeMap::new();
        for (suffix, user) in [("app", "app"), ("superuser", "postgres")] {
            let name = format!("{}-{suffix}", self.name);
            let existing = self
                .shared
                .secrets
                .get(&self.ns, &name)
                .filter(|s| s["metadata"]["ownerReferences"][0]["uid"] == self.uid.as_str());
            let password = existing
                .and_then(|s| {
                    use base64::Engine as _;
                    let b = s["data"]["password"].as_str()?;
                    let raw = base64::engine::general_purpose::STANDARD.decode(b).ok()?;
                    String::from_utf8(raw).ok()
                })
                .unwrap_or_else(|| {
                    crate::cosi::random_key(
                        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
                        64,
                    )
                });
            passwords.insert(user, password.clone());
            let dbname = if user == "app" { "app" } else { "*" };
            let body = app_secret(
                &self.ns,
                &name,
                &self.uid,
                &self.name,
                user,
                &password,
                dbname,
                server.port,
            );
            let params = PatchParams::apply(FIELD_MANAGER).force();
            secrets
                .patch(&name, &params, &Patch::Apply(&body))
                .await
                .map_err(|e| format!("writing Secret {name}: {e}"))?;
        }
        let quote = |s: &str| s.replace('\'', "''");
        let sql = format!(
            "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'app') THEN \
             CREATE ROLE app LOGIN; END IF; END $$; \
             ALTER ROLE app WITH LOGIN PASSWORD '{}'; ALTER ROLE postgres WITH PASSWORD '{}';",
            quote(&passwords["app"]),
            quote(&passwords["postgres"])
        );
        server
            .psql(self.tc(), "postgres", &sql)
            .await
            .map_err(|e| e.to_string())?;
        let has_db = server
            .psql(
                self.tc(),
                "postgres",
                "SELECT count(*) FROM pg_database WHERE datname = 'app'",
            )
            .await
            .map_err(|e| e.to_string())?;
        if has_db == "0" {
            server
                .psql(self.tc(), "postgres", "CREATE DATABASE app OWNER app")
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

/// The `<cluster>-app` / `<cluster>-superuser` Secret as CloudNativePG writes it, except that the
/// host is the local server (127.0.0.1 and its port) so that a user can connect from this machine.
#[allow(clippy::too_many_arguments)]
pub fn app_secret(
    ns: &str,
    name: &str,
    cluster_uid: &str,
    cluster: &str,
    user: &str,
    password: &str,
    dbname: &str,
    port: u16,
) -> Value {
    use base64::Engine as _;
    let host = "127.0.0.1";
    let enc = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let pw_url: String = url_encode(password);
    let uri = format!("postgresql://{user}:{pw_url}@{host}:{port}/{dbname}");
    let jdbc = format!("jdbc:postgresql://{host}:{port}/{dbname}?password={pw_url}&user={user}");
    let user_type = if user == "postgres" {
        "superuser"
    } else {
        "app"
    };
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/basic-auth",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {
                "cnpg.io/userType": user_type,
                "cnpg.io/reload": "true",
                "app.kubernetes.io/managed-by": "cloudnative-pg",
                CLUSTER_LABEL: cluster,
            },
            "ownerReferences": [{
                "apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster", "name": cluster,
                "uid": cluster_uid, "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "data": {
            "username": enc(user),
            "user": enc(user),
            "password": enc(password),
            "dbname": enc(dbname),
            "host": enc(host),
            "port": enc(&port.to_string()),
            "pgpass": enc(&format!("{host}:{port}:{dbname}:{user}:{password}\n")),
            "uri": enc(&uri),
            "jdbc-uri": enc(&jdbc),
            "fqdn-uri": enc(&uri),
            "fqdn-jdbc-uri": enc(&jdbc),
        },
    })
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
