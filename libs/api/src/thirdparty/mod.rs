//! Typed views of third-party kinds the daemons read or write.
//!
//! A view declares only the fields we use; every other field is kept in an `extra` map flattened into
//! the struct, so reading an object and writing it back never drops fields another controller owns.
//! The views carry no JSON schema (`schema = "disabled"`): we never own these CRDs. The simulated
//! operators in `e2e/operator-sims` install permissive CRDs for them ([`permissive_crd`]).

pub mod apps;
pub mod barman;
pub mod cnpg;
pub mod cosi;
pub mod etcd;
pub mod fdb;
pub mod flux;
pub mod mariadb;
pub mod percona;
pub mod velero;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Resource;

/// Unknown fields of a view, kept verbatim.
pub type Extra = std::collections::BTreeMap<String, serde_json::Value>;

/// Declares a third-party view: a kube `CustomResource` whose spec and status structs list the
/// fields we use (all optional) and keep the rest in `extra`.
macro_rules! view {
    (
        $(#[$doc:meta])*
        kind $kind:literal ($group:literal, $version:literal, $plural:literal $(, $scope:ident)?);
        spec $spec:ident { $( $(#[$fmeta:meta])* $field:ident : $fty:ty ),* $(,)? }
        status $status:ident = $statuslit:literal { $( $(#[$smeta:meta])* $sfield:ident : $sty:ty ),* $(,)? }
    ) => {
        $(#[$doc])*
        #[derive(kube::CustomResource, serde::Serialize, serde::Deserialize, Clone, Debug, Default, PartialEq)]
        #[kube(
            group = $group,
            version = $version,
            kind = $kind,
            plural = $plural,
            status = $statuslit,
            schema = "disabled",
            derive = "Default",
            derive = "PartialEq"
            $(, $scope)?
        )]
        #[serde(rename_all = "camelCase")]
        pub struct $spec {
            $(
                $(#[$fmeta])*
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub $field: Option<$fty>,
            )*
            /// Fields this view does not model, kept verbatim.
            #[serde(flatten)]
            pub extra: $crate::thirdparty::Extra,
        }

        /// Observed state (the fields we read; the rest kept verbatim).
        #[derive(serde::Serialize, serde::Deserialize, Clone, Debug, Default, PartialEq)]
        #[serde(rename_all = "camelCase")]
        pub struct $status {
            $(
                $(#[$smeta])*
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub $sfield: Option<$sty>,
            )*
            /// Fields this view does not model, kept verbatim.
            #[serde(flatten)]
            pub extra: $crate::thirdparty::Extra,
        }
    };
}
pub(crate) use view;

/// A CRD for `K` that accepts any spec and status (`x-kubernetes-preserve-unknown-fields`) and has a
/// status subresource, for simulated operators and tests.
pub fn permissive_crd<K>(namespaced: bool) -> CustomResourceDefinition
where
    K: Resource<DynamicType = ()>,
{
    let group = K::group(&());
    let plural = K::plural(&());
    let kind = K::kind(&());
    // kube-apiserver refuses a CRD in a group under `k8s.io` or `kubernetes.io` (COSI's
    // `objectstorage.k8s.io`) without this annotation; the real CRDs carry a KEP link there.
    let protected = group == "k8s.io"
        || group.ends_with(".k8s.io")
        || group == "kubernetes.io"
        || group.ends_with(".kubernetes.io");
    let annotations = if protected {
        serde_json::json!({"api-approved.kubernetes.io": "unapproved, a test stand-in for the upstream CRD"})
    } else {
        serde_json::json!({})
    };
    let crd = serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}"), "annotations": annotations},
        "spec": {
            "group": group,
            "scope": if namespaced { "Namespaced" } else { "Cluster" },
            "names": {
                "kind": kind,
                "listKind": format!("{kind}List"),
                "plural": plural,
                "singular": kind.to_lowercase(),
            },
            "versions": [{
                "name": K::version(&()),
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true,
                }},
            }],
        },
    });
    serde_json::from_value(crd).expect("the permissive CRD literal is a valid CRD")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cnpg_and_plugin_status_spellings() {
        let backup: cnpg::Backup = serde_json::from_value(serde_json::json!({
            "apiVersion": "postgresql.cnpg.io/v1", "kind": "Backup",
            "metadata": {"name": "b"},
            "spec": {"method": "plugin", "cluster": {"name": "c"}},
            "status": {"phase": "completed", "beginLSN": "0/3000028", "endLSN": "0/3000100",
                       "backupId": "20260721T093000", "endpointURL": "https://s3",
                       "pluginMetadata": {"timeline": "1"}},
        }))
        .unwrap();
        let st = backup.status.unwrap();
        assert_eq!(st.begin_lsn.as_deref(), Some("0/3000028"));
        assert_eq!(st.end_lsn.as_deref(), Some("0/3000100"));
        assert_eq!(st.endpoint_url.as_deref(), Some("https://s3"));
        assert_eq!(st.plugin_metadata.unwrap()["timeline"], "1");
        let store: barman::ObjectStore = serde_json::from_value(serde_json::json!({
            "apiVersion": "barmancloud.cnpg.io/v1", "kind": "ObjectStore",
            "metadata": {"name": "s"}, "spec": {},
            "status": {"serverRecoveryWindow": {"srv": {"firstRecoverabilityPoint": "2026-07-21T09:30:00Z"}}},
        }))
        .unwrap();
        let window = &store.status.unwrap().server_recovery_window.unwrap()["srv"];
        assert_eq!(
            window.first_recoverability_point.as_deref(),
            Some("2026-07-21T09:30:00Z")
        );
    }

    #[test]
    fn permissive_crd_names_follow_the_view() {
        let crd = permissive_crd::<cnpg::Cluster>(true);
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("clusters.postgresql.cnpg.io")
        );
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(crd.spec.names.kind, "Cluster");
        assert_eq!(crd.spec.versions[0].name, "v1");
    }
}
