//! CustomResourceDefinitions from a directory of manifests into a real API server: server-side
//! applied, then waited for until each is Established (the emulator serves a CRD at once).

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use serde_json::Value;

use crate::Error;

/// Every CustomResourceDefinition in the `*.yaml` / `*.yml` / `*.json` files of `dir` (or the
/// file `dir`), in file order.
pub fn crds_in(dir: &Path) -> Result<Vec<Value>, Error> {
    let files: Vec<std::path::PathBuf> = if dir.is_file() {
        vec![dir.to_path_buf()]
    } else {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .map_err(|source| Error::Process {
                what: format!("reading {}", dir.display()),
                source,
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.extension()
                    .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
            })
            .collect();
        files.sort();
        files
    };
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|source| Error::Process {
            what: format!("reading {}", f.display()),
            source,
        })?;
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let v: serde_yaml::Value =
                serde::Deserialize::deserialize(doc).map_err(|e| Error::Process {
                    what: format!("parsing {}", f.display()),
                    source: std::io::Error::other(e.to_string()),
                })?;
            let v = serde_json::to_value(v).unwrap_or(Value::Null);
            if v["kind"] == "CustomResourceDefinition" {
                out.push(v);
            }
        }
    }
    Ok(out)
}

/// Server-side applies every CRD of `dir` (field manager `e2e-harness`, forced) and waits until
/// each is Established and its names accepted.
pub async fn apply_dir(client: &kube::Client, dir: &Path) -> Result<(), Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crds = crds_in(dir)?;
    let pp = PatchParams::apply("e2e-harness").force();
    for crd in &crds {
        let name = crd["metadata"]["name"].as_str().unwrap_or_default();
        api.patch(name, &pp, &Patch::Apply(crd)).await?;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for crd in &crds {
        let name = crd["metadata"]["name"].as_str().unwrap_or_default();
        loop {
            let got = api.get(name).await?;
            let established = got
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
            if established {
                break;
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout(format!("CRD {name} to be Established")));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(())
}
