//! What both server-side apply suites (emulator and kube-apiserver) share: the operators' CRDs the
//! overlays need, installed the same way, and the objects `kubectl get -f - -o json` found.

use harness::Harness;
use serde_json::Value;

/// Installs the CRDs of every operator the rendered objects refer to.
pub(crate) async fn install_operator_crds(h: &Harness) {
    use operator_sims::Sim;
    let crds: Vec<_> = [
        Sim::Cosi,
        Sim::Velero,
        Sim::Cnpg,
        Sim::Flux,
        Sim::Mariadb,
        Sim::Etcd,
        Sim::Fdb,
        Sim::Psmdb,
    ]
    .iter()
    .flat_map(|s| s.crds())
    .collect();
    operator_sims::install_crds(&h.client(), &crds)
        .await
        .unwrap();
}

/// The objects of `kubectl get -f - --ignore-not-found -o json` output (empty, one object or a
/// List), each as `(kind/namespace/name, object)`.
pub(crate) fn stored(out: &str) -> Vec<(String, Value)> {
    if out.trim().is_empty() {
        return Vec::new();
    }
    let list: Value = serde_json::from_str(out).unwrap();
    let items = match list["kind"].as_str() {
        Some("List") => list["items"].as_array().cloned().unwrap_or_default(),
        _ => vec![list],
    };
    items
        .into_iter()
        .map(|o| {
            let id = format!(
                "{}/{}/{}",
                o["kind"].as_str().unwrap(),
                o["metadata"]["namespace"].as_str().unwrap_or(""),
                o["metadata"]["name"].as_str().unwrap()
            );
            (id, o)
        })
        .collect()
}
