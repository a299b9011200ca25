//! The installation manifests under `deploy/`, as a cluster would receive them.
//!
//! ```text
//! deploy/overlays/<overlay> ──kubectl kustomize──► Rendered (every object, parsed)
//!      ├─ objects(kind), deployments()            what the tests assert on
//!      └─ Container::process(pod, endpoints)      the command line and env a pod would run with:
//!                                                 fieldRefs resolved for one pod name, the
//!                                                 in-cluster lease endpoint replaced by a local one
//! ```
//! The tests in `tests/` render every overlay, apply it to the emulator with server-side apply and
//! start the real binaries from the rendered Deployments until `/ready`. Those need `kubectl` and
//! the daemons' binaries built (`cargo build --bins`; `hack/test.sh` builds everything).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

pub mod checks;

/// The overlays an installation chooses from.
pub const OVERLAYS: [&str; 2] = ["single-replica", "ha"];

/// The namespace of the control plane.
pub const NAMESPACE: &str = "cozy-backup-controller";

/// Namespaces the manifests name that belong to the platform, not to this installation.
pub const PLATFORM_NAMESPACES: [&str; 2] = ["cozy-system", "tenant-root"];

/// Every daemon Deployment (the lease server aside), by name.
pub const DAEMONS: [&str; 6] = [
    "strategy-renderer",
    "credentials-projector",
    "backup-runner",
    "restore-orchestrator",
    "retention-cleaner",
    "apidef-restarter",
];

/// The registry and tag of every image.
pub const IMAGE_PREFIX: &str = "ghcr.io/cozy-backups/";
/// The version tag of every image.
pub const IMAGE_TAG: &str = "0.1.0";

/// Why a manifest could not be rendered or turned into a process.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `kubectl kustomize` failed.
    #[error("kubectl kustomize {dir}: {message}")]
    Render {
        /// The kustomization directory.
        dir: String,
        /// kubectl's error output.
        message: String,
    },
    /// The rendered YAML did not parse.
    #[error("parsing the output of kubectl kustomize {dir}: {message}")]
    Parse {
        /// The kustomization directory.
        dir: String,
        /// The parser's message.
        message: String,
    },
    /// `helm` failed or could not be run.
    #[error("helm {args}: {message}")]
    Helm {
        /// helm's arguments.
        args: String,
        /// helm's error output.
        message: String,
    },
    /// A field of a Deployment is missing or of the wrong type.
    #[error("Deployment {deployment}: {field}: {problem}")]
    Field {
        /// The Deployment's name.
        deployment: String,
        /// The field path.
        field: String,
        /// What is wrong with it.
        problem: String,
    },
}

/// The `deploy/` directory of the workspace.
pub fn deploy_dir() -> PathBuf {
    harness::workspace_root().join("deploy")
}

/// The directory of an overlay.
pub fn overlay_dir(overlay: &str) -> PathBuf {
    deploy_dir().join("overlays").join(overlay)
}

/// Every object a kustomization renders to.
#[derive(Debug, Clone)]
pub struct Rendered {
    /// The rendered YAML, exactly as kubectl printed it.
    pub yaml: String,
    /// The objects, in order.
    pub objects: Vec<Value>,
}

/// Runs `kubectl kustomize <dir>` and parses its output.
pub fn render(dir: &Path) -> Result<Rendered, Error> {
    let shown = dir.display().to_string();
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .map_err(|e| Error::Render {
            dir: shown.clone(),
            message: format!("running kubectl: {e}"),
        })?;
    if !out.status.success() {
        return Err(Error::Render {
            dir: shown,
            message: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    parse(String::from_utf8_lossy(&out.stdout).into_owned(), &shown)
}

/// Parses a stream of YAML documents (empty documents left out); `source` names it in errors.
pub fn parse(yaml: String, source: &str) -> Result<Rendered, Error> {
    let mut objects = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&yaml) {
        let v: Value = serde::Deserialize::deserialize(doc).map_err(|e| Error::Parse {
            dir: source.to_owned(),
            message: e.to_string(),
        })?;
        if !v.is_null() {
            objects.push(v);
        }
    }
    Ok(Rendered { yaml, objects })
}

/// The Helm chart, `deploy/helm/cozy-backups`.
pub fn chart_dir() -> PathBuf {
    deploy_dir().join("helm").join("cozy-backups")
}

/// The helm version `hack/helm/go.mod` pins (`helm.sh/helm/v4`).
pub fn helm_version() -> Option<String> {
    let go_mod =
        std::fs::read_to_string(harness::workspace_root().join("hack/helm/go.mod")).ok()?;
    go_mod.lines().find_map(|l| {
        let mut words = l.split_whitespace();
        let first = words.next()?;
        let module = if first == "require" {
            words.next()?
        } else {
            first
        };
        let version = words.next()?;
        (module == "helm.sh/helm/v4" && version.starts_with('v')).then(|| version.to_owned())
    })
}

/// The `helm` that `hack/install-helm.sh` built: `$COZY_HELM_BIN`, else
/// `${COZY_HELM_CACHE:-~/.cache/cozy-backups/helm}/<version>/bin/helm`; `Err` says why there is
/// none (the tests skip with that note).
pub fn helm_bin() -> Result<PathBuf, String> {
    if let Some(bin) = std::env::var_os("COZY_HELM_BIN") {
        return Ok(PathBuf::from(bin));
    }
    let version = helm_version().ok_or("hack/helm/go.mod pins no helm.sh/helm/v4 version")?;
    let cache = match std::env::var_os("COZY_HELM_CACHE") {
        Some(c) => PathBuf::from(c),
        None => PathBuf::from(std::env::var_os("HOME").ok_or("HOME is not set")?)
            .join(".cache/cozy-backups/helm"),
    };
    let bin = cache.join(version).join("bin/helm");
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(format!(
            "{} is not built (hack/install-helm.sh builds it)",
            bin.display()
        ))
    }
}

/// Runs `helm <args>` and returns its standard output.
pub fn helm(bin: &Path, args: &[&str]) -> Result<String, Error> {
    let shown = args.join(" ");
    let out = Command::new(bin)
        .args(args)
        .env(
            "HELM_CACHE_HOME",
            std::env::temp_dir().join("cozy-backups-helm/cache"),
        )
        .env(
            "HELM_CONFIG_HOME",
            std::env::temp_dir().join("cozy-backups-helm/config"),
        )
        .env(
            "HELM_DATA_HOME",
            std::env::temp_dir().join("cozy-backups-helm/data"),
        )
        .output()
        .map_err(|e| Error::Helm {
            args: shown.clone(),
            message: format!("running {}: {e}", bin.display()),
        })?;
    if !out.status.success() {
        return Err(Error::Helm {
            args: shown,
            message: format!(
                "{}{}",
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&out.stdout)
            ),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `helm template` of the chart with these extra arguments (`-f <file>`, `--set k=v`), parsed.
pub fn helm_template(bin: &Path, extra: &[&str]) -> Result<Rendered, Error> {
    let chart = chart_dir().display().to_string();
    let mut args = vec![
        "template",
        "cozy-backups",
        chart.as_str(),
        "--namespace",
        NAMESPACE,
    ];
    args.extend_from_slice(extra);
    let yaml = helm(bin, &args)?;
    parse(yaml, &format!("helm {}", args.join(" ")))
}

impl Rendered {
    /// The objects of one kind.
    pub fn objects(&self, kind: &str) -> Vec<&Value> {
        self.objects.iter().filter(|o| o["kind"] == kind).collect()
    }

    /// The object of this kind and name, if rendered.
    pub fn find(&self, kind: &str, name: &str) -> Option<&Value> {
        self.objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
    }
}

/// One container of a Deployment, read from the rendered manifest.
#[derive(Debug, Clone)]
pub struct Container {
    /// The Deployment's name.
    pub deployment: String,
    /// The Deployment's namespace.
    pub namespace: String,
    /// The binary: the last path segment of the image name, without the tag.
    pub binary: String,
    /// `command` after its first element, then `args` (what the binary receives as arguments).
    pub args: Vec<String>,
    /// The env entries, as written.
    pub env: Vec<Value>,
}

/// Where the process of a pod runs, in place of the cluster.
#[derive(Debug, Clone, Default)]
pub struct Local {
    /// The pod's name, for `fieldRef: metadata.name`.
    pub pod_name: String,
    /// Values that replace in-cluster ones: `(the manifest's value, the local value)`, e.g. the
    /// lease server's Service address and the address of a lease server the test started.
    pub replace: Vec<(String, String)>,
    /// Env names left out (the harness sets them itself, e.g. `ADMIN_ADDR`).
    pub skip: Vec<String>,
}

impl Container {
    /// The first container of a rendered Deployment.
    pub fn of(deployment: &Value) -> Result<Self, Error> {
        let name = deployment["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let field = |field: &str, problem: &str| Error::Field {
            deployment: name.clone(),
            field: field.into(),
            problem: problem.into(),
        };
        let c = &deployment["spec"]["template"]["spec"]["containers"][0];
        let image = c["image"]
            .as_str()
            .ok_or_else(|| field("spec.template.spec.containers[0].image", "missing"))?;
        let binary = image
            .rsplit('/')
            .next()
            .and_then(|last| last.split(':').next())
            .filter(|b| !b.is_empty())
            .ok_or_else(|| field("spec.template.spec.containers[0].image", "no image name"))?
            .to_owned();
        let strings = |path: &str, v: &Value| -> Result<Vec<String>, Error> {
            match v {
                Value::Null => Ok(Vec::new()),
                Value::Array(items) => items
                    .iter()
                    .map(|s| {
                        s.as_str()
                            .map(str::to_owned)
                            .ok_or_else(|| field(path, "not a list of strings"))
                    })
                    .collect(),
                _ => Err(field(path, "not a list")),
            }
        };
        let command = strings("spec.template.spec.containers[0].command", &c["command"])?;
        let mut args: Vec<String> = command.into_iter().skip(1).collect();
        args.extend(strings(
            "spec.template.spec.containers[0].args",
            &c["args"],
        )?);
        Ok(Container {
            namespace: deployment["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_owned(),
            deployment: name,
            binary,
            args,
            env: c["env"].as_array().cloned().unwrap_or_default(),
        })
    }

    /// The environment a pod of this Deployment runs with, resolved for `local`: plain values,
    /// `fieldRef` `metadata.name` (the pod name) and `metadata.namespace`; any other source is an
    /// error naming the variable, so a manifest cannot depend on something this check ignores.
    pub fn env(&self, local: &Local) -> Result<BTreeMap<String, String>, Error> {
        let mut out = BTreeMap::new();
        for (i, e) in self.env.iter().enumerate() {
            let name = e["name"].as_str().ok_or_else(|| Error::Field {
                deployment: self.deployment.clone(),
                field: format!("env[{i}].name"),
                problem: "missing".into(),
            })?;
            if local.skip.iter().any(|s| s == name) {
                continue;
            }
            let value = if let Some(v) = e.get("value") {
                v.as_str()
                    .ok_or_else(|| Error::Field {
                        deployment: self.deployment.clone(),
                        field: format!("env[{name}].value"),
                        problem: "not a string (quote it)".into(),
                    })?
                    .to_owned()
            } else {
                match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                    Some("metadata.name") => local.pod_name.clone(),
                    Some("metadata.namespace") => self.namespace.clone(),
                    _ => {
                        return Err(Error::Field {
                            deployment: self.deployment.clone(),
                            field: format!("env[{name}].valueFrom"),
                            problem: format!("unsupported source {}", e["valueFrom"]),
                        });
                    }
                }
            };
            let value = local
                .replace
                .iter()
                .find(|(cluster, _)| *cluster == value)
                .map(|(_, here)| here.clone())
                .unwrap_or(value);
            out.insert(name.to_owned(), value);
        }
        Ok(out)
    }
}

/// The value of an env var as the rendered Deployment sets it (`None` if unset or not a plain value).
pub fn env_value<'a>(deployment: &'a Value, name: &str) -> Option<&'a str> {
    deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)?["value"]
        .as_str()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(env: Value) -> Value {
        json!({
            "metadata": {"name": "d", "namespace": "ns"},
            "spec": {"template": {"spec": {"containers": [{
                "name": "d",
                "image": "ghcr.io/cozy-backups/some-daemon:0.1.0",
                "command": ["/some-daemon", "--a"],
                "args": ["--b=1"],
                "env": env,
            }]}}}
        })
    }

    #[test]
    fn a_container_becomes_a_binary_its_arguments_and_a_resolved_env() {
        let c = Container::of(&deployment(json!([
            {"name": "PLAIN", "value": "x"},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}},
            {"name": "LEASE_ENDPOINT", "value": "svc.ns.svc:9090"},
            {"name": "ADMIN_ADDR", "value": "0.0.0.0:8080"},
        ])))
        .unwrap();
        assert_eq!(c.binary, "some-daemon");
        assert_eq!(c.args, ["--a", "--b=1"]);
        let env = c
            .env(&Local {
                pod_name: "d-0".into(),
                replace: vec![("svc.ns.svc:9090".into(), "127.0.0.1:5".into())],
                skip: vec!["ADMIN_ADDR".into()],
            })
            .unwrap();
        assert_eq!(
            env.into_iter().collect::<Vec<_>>(),
            [
                ("LEASE_ENDPOINT".to_owned(), "127.0.0.1:5".to_owned()),
                ("PLAIN".into(), "x".into()),
                ("POD_NAME".into(), "d-0".into()),
                ("POD_NAMESPACE".into(), "ns".into()),
            ]
        );
    }

    #[test]
    fn an_env_source_the_check_cannot_resolve_is_an_error_naming_the_variable() {
        let c = Container::of(&deployment(json!([
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        ])))
        .unwrap();
        let err = c.env(&Local::default()).unwrap_err().to_string();
        assert!(
            err.starts_with("Deployment d: env[TOKEN].valueFrom: unsupported source"),
            "{err}"
        );
        let c = Container::of(&deployment(json!([{"name": "N", "value": 3}]))).unwrap();
        assert_eq!(
            c.env(&Local::default()).unwrap_err().to_string(),
            "Deployment d: env[N].value: not a string (quote it)"
        );
    }

    #[test]
    fn a_deployment_without_an_image_is_an_error_naming_the_field() {
        let mut d = deployment(json!([]));
        d["spec"]["template"]["spec"]["containers"][0]
            .as_object_mut()
            .unwrap()
            .remove("image");
        assert_eq!(
            Container::of(&d).unwrap_err().to_string(),
            "Deployment d: spec.template.spec.containers[0].image: missing"
        );
    }
}
