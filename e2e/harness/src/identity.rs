//! Daemons under test authenticate as their own ServiceAccounts, with the RBAC they ship with.
//!
//! ```text
//!  spawn(spec) ─► spec.component()            binary file name with deploy/<name>/rbac.yaml, or
//!                                              DaemonSpec::identity(c); DaemonSpec::as_admin() opts out
//!              ─► once per harness and component:
//!                   namespaces of deploy/<c>/{serviceaccount,rbac}.yaml created when missing
//!                   every object of both files server-side applied (as the admin)
//!                   TokenRequest serviceaccounts/<sa>/token (the API audience, 7 days)
//!              ─► <work dir>/kubeconfig.<daemon name>: the admin kubeconfig with that token and the
//!                 ServiceAccount's namespace as the context namespace
//! ```
//!
//! The kube calls run on a thread of their own with its own runtime, so [`Harness::spawn`] stays
//! synchronous whatever runtime flavour the test uses (the in-process emulator serves from the
//! harness's own runtime, never the test's, so it answers while the test thread waits).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

use crate::{Error, Harness};

/// How long a daemon's token lives: longer than any test.
const TOKEN_SECONDS: i64 = 7 * 24 * 3600;

/// A component's identity in one harness.
#[derive(Debug, Clone)]
pub(crate) struct ComponentIdentity {
    /// `system:serviceaccount:<namespace>:<name>`.
    pub(crate) user: String,
    /// Its bearer token.
    pub(crate) token: String,
}

/// The objects of `deploy/<component>/serviceaccount.yaml` and `rbac.yaml`, as JSON.
pub fn component_manifests(component: &str) -> Vec<Value> {
    ["serviceaccount.yaml", "rbac.yaml"]
        .into_iter()
        .flat_map(|f| crate::rbac::manifests(component, f))
        .filter(|d| !d.is_null())
        .map(|d| serde_json::to_value(d).expect("YAML manifests convert to JSON"))
        .collect()
}

/// `(namespace, name)` of the component's ServiceAccount.
pub fn service_account(component: &str) -> (String, String) {
    let sa = component_manifests(component)
        .into_iter()
        .find(|d| d["kind"] == "ServiceAccount")
        .unwrap_or_else(|| panic!("deploy/{component}/serviceaccount.yaml has a ServiceAccount"));
    (
        sa["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_owned(),
        sa["metadata"]["name"]
            .as_str()
            .unwrap_or(component)
            .to_owned(),
    )
}

/// The user name the component's requests are made as.
pub fn user_of(component: &str) -> String {
    let (ns, name) = service_account(component);
    format!("system:serviceaccount:{ns}:{name}")
}

fn api_resource(doc: &Value) -> Option<ApiResource> {
    let api_version = doc["apiVersion"].as_str()?;
    let kind = doc["kind"].as_str()?;
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let plural = match kind {
        "ServiceAccount" => "serviceaccounts",
        "ClusterRole" => "clusterroles",
        "ClusterRoleBinding" => "clusterrolebindings",
        "Role" => "roles",
        "RoleBinding" => "rolebindings",
        _ => return None,
    };
    Some(ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, version, kind),
        plural,
    ))
}

/// Applies `deploy/<component>/serviceaccount.yaml` and `rbac.yaml` with the admin `client`
/// (creating the namespaces they name when missing) and issues a token of the ServiceAccount
/// through TokenRequest; answers `(user name, token)`. The dev control plane uses it too.
pub async fn provision_component(
    client: kube::Client,
    component: &str,
) -> Result<(String, String), Error> {
    let i = provision(client, component.to_owned()).await?;
    Ok((i.user, i.token))
}

/// Writes a kubeconfig for a component (see [`provision_component`]): the admin kubeconfig at
/// `admin` with `token` as the user's token and the component ServiceAccount's namespace as the
/// context's, at `path` (mode 0600).
pub fn write_component_kubeconfig(
    admin: &Path,
    path: &Path,
    component: &str,
    token: &str,
) -> Result<(), Error> {
    let (ns, _) = service_account(component);
    write_kubeconfig(admin, path, token, &ns)
}

/// Applies the component's manifests and issues its token (run on the admin `client`).
async fn provision(client: kube::Client, component: String) -> Result<ComponentIdentity, Error> {
    let docs = component_manifests(&component);
    let namespaces: BTreeSet<String> = docs
        .iter()
        .filter_map(|d| d["metadata"]["namespace"].as_str().map(str::to_owned))
        .collect();
    let ns_api: Api<Namespace> = Api::all(client.clone());
    for ns in namespaces {
        if ns_api.get_opt(&ns).await?.is_some() {
            continue;
        }
        let obj = Namespace {
            metadata: ObjectMeta {
                name: Some(ns),
                ..Default::default()
            },
            ..Default::default()
        };
        match ns_api.create(&PostParams::default(), &obj).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    let apply = PatchParams::apply("e2e-harness").force();
    for doc in &docs {
        let ar = api_resource(doc).unwrap_or_else(|| {
            panic!(
                "deploy/{component}: no mapping for kind {} in the harness",
                doc["kind"]
            )
        });
        let name = doc["metadata"]["name"].as_str().unwrap_or_default();
        let api: Api<DynamicObject> = match doc["metadata"]["namespace"].as_str() {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
            None => Api::all_with(client.clone(), &ar),
        };
        api.patch(name, &apply, &Patch::Apply(doc)).await?;
    }
    let (ns, name) = service_account(&component);
    let accounts: Api<ServiceAccount> = Api::namespaced(client, &ns);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            // No audiences: the API server's own.
            audiences: Vec::new(),
            expiration_seconds: Some(TOKEN_SECONDS),
            bound_object_ref: None,
        },
        ..Default::default()
    };
    let issued = accounts
        .create_token_request(&name, &PostParams::default(), &request)
        .await?;
    let token = issued.status.map(|s| s.token).unwrap_or_default();
    if token.is_empty() {
        return Err(Error::Timeout(format!(
            "a token for {ns}/{name} (the TokenRequest answer had none)"
        )));
    }
    Ok(ComponentIdentity {
        user: format!("system:serviceaccount:{ns}:{name}"),
        token,
    })
}

/// Writes `admin`'s kubeconfig with `token` as the user's token and `namespace` as the
/// context's namespace to `path` (mode 0600).
fn write_kubeconfig(admin: &Path, path: &Path, token: &str, namespace: &str) -> Result<(), Error> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let io = |what: String| move |source| Error::Process { what, source };
    let text =
        std::fs::read_to_string(admin).map_err(io(format!("reading {}", admin.display())))?;
    let mut cfg: serde_yaml::Value = serde_yaml::from_str(&text).map_err(|e| Error::Process {
        what: format!("parsing {}", admin.display()),
        source: std::io::Error::other(e.to_string()),
    })?;
    for user in cfg["users"].as_sequence_mut().into_iter().flatten() {
        user["user"] = serde_yaml::to_value(serde_json::json!({ "token": token }))
            .expect("a mapping converts");
    }
    for ctx in cfg["contexts"].as_sequence_mut().into_iter().flatten() {
        if let Some(m) = ctx["context"].as_mapping_mut() {
            m.insert("namespace".into(), namespace.into());
        }
    }
    let out = serde_yaml::to_string(&cfg).expect("a kubeconfig serialises");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(io(format!("writing {}", path.display())))?;
    f.write_all(out.as_bytes())
        .map_err(io(format!("writing {}", path.display())))
}

impl Harness {
    /// The kubeconfig a daemon runs with: its component's own (provisioned on first use), or the
    /// admin's for anything else.
    pub(crate) fn kubeconfig_for(&mut self, spec: &crate::DaemonSpec) -> Result<PathBuf, Error> {
        let Some(component) = spec.component() else {
            return Ok(self.kubeconfig_path().to_path_buf());
        };
        let identity = self.component_identity(&component)?;
        let (ns, _) = service_account(&component);
        let path = self
            .work_dir()
            .join(format!("kubeconfig.{}", sanitize(&spec.name)));
        write_kubeconfig(self.kubeconfig_path(), &path, &identity.token, &ns)?;
        Ok(path)
    }

    /// The component's identity in this harness, provisioning it the first time (blocking the
    /// calling thread; the kube calls run on a thread of their own).
    pub(crate) fn component_identity(
        &mut self,
        component: &str,
    ) -> Result<ComponentIdentity, Error> {
        if let Some(i) = self.identities.get(component) {
            return Ok(i.clone());
        }
        let ((url, ca), admin) = (self.endpoint(), self.admin_token().to_owned());
        let client = move || crate::real::client(&url, ca.as_deref(), &admin);
        let name = component.to_owned();
        let identity = std::thread::scope(|s| {
            s.spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|source| Error::Process {
                        what: "starting a runtime for the identity setup".into(),
                        source,
                    })?;
                rt.block_on(async move { provision(client(), name).await })
            })
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })?;
        self.identities
            .insert(component.to_owned(), identity.clone());
        Ok(identity)
    }

    /// A token of `component`'s ServiceAccount (the API audience), provisioning its manifests
    /// first; for a test that makes requests as the daemon itself.
    pub fn component_token(&mut self, component: &str) -> Result<String, Error> {
        Ok(self.component_identity(component)?.token)
    }

    /// A kube client that authenticates as `component`'s ServiceAccount.
    pub fn component_client(&mut self, component: &str) -> Result<kube::Client, Error> {
        let token = self.component_token(component)?;
        Ok(self.client_with_token(&token))
    }
}

fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
