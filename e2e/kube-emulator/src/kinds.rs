//! The table of served resources: the built-in kinds compiled in, plus one entry per served version of every
//! established CustomResourceDefinition.
//!
//! Discovery, OpenAPI, routing, Tables, strategic merge patch and server-side apply all read this table; it
//! is rebuilt from the stored CRDs whenever a CRD is written, so a CRD is served the moment it is created.

use serde_json::{Value, json};

/// A printer column for Table output.
#[derive(Debug, Clone)]
pub(crate) struct PrinterColumn {
    /// Column header.
    pub(crate) name: String,
    /// OpenAPI type: string, integer, number, boolean, date.
    pub(crate) type_: String,
    /// OpenAPI format hint.
    pub(crate) format: String,
    /// Column description.
    pub(crate) description: String,
    /// Only shown with `-o wide` when > 0.
    pub(crate) priority: i64,
    /// Simple JSONPath, e.g. `.spec.size`.
    pub(crate) json_path: String,
}

/// One served resource in one group-version.
#[derive(Debug, Clone)]
pub(crate) struct Kind {
    /// API group, "" for core.
    pub(crate) group: String,
    /// Served version.
    pub(crate) version: String,
    /// Kind name.
    pub(crate) kind: String,
    /// Resource (plural) name.
    pub(crate) plural: String,
    /// Singular resource name.
    pub(crate) singular: String,
    /// List kind.
    pub(crate) list_kind: String,
    /// Namespaced or cluster-scoped.
    pub(crate) namespaced: bool,
    /// Short names for kubectl.
    pub(crate) short_names: Vec<String>,
    /// Categories (`all`).
    pub(crate) categories: Vec<String>,
    /// Has a `/status` subresource.
    pub(crate) status_subresource: bool,
    /// Served from a CRD.
    pub(crate) custom: bool,
    /// Maintains `metadata.generation`.
    pub(crate) tracks_generation: bool,
    /// DELETE answers with the deleted object instead of a Status.
    pub(crate) return_deleted_object: bool,
    /// Storage key shared by every version (and by core/events.k8s.io Events).
    pub(crate) storage: String,
    /// Table columns after `Name`.
    pub(crate) printer_columns: Vec<PrinterColumn>,
    /// The CRD's openAPIV3Schema for this version.
    pub(crate) schema: Option<Value>,
    /// Is this the preferred (storage) version of its group for discovery ordering.
    pub(crate) preferred: bool,
    /// The CRD version's `selectableFields` (`spec.color`), usable in field selectors.
    pub(crate) selectable_fields: Vec<String>,
    /// The serving CRD's `metadata.generation` (0 for built-ins): derived documents are cached by it.
    pub(crate) source_generation: i64,
    /// A review kind (TokenReview, SubjectAccessReview, …): create only, never stored.
    pub(crate) create_only: bool,
}

impl Kind {
    /// `group/version`, or `version` for the core group.
    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `plural.group` or `plural` for the core group: the name upstream messages use.
    pub(crate) fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// The verbs served on the main resource.
    pub(crate) fn verbs(&self) -> Vec<&'static str> {
        if self.create_only {
            return vec!["create"];
        }
        vec![
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
    }
}

#[allow(clippy::too_many_arguments)]
fn builtin(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    namespaced: bool,
    short: &[&str],
    categories: &[&str],
    status: bool,
) -> Kind {
    Kind {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        plural: plural.into(),
        singular: kind.to_lowercase(),
        list_kind: format!("{kind}List"),
        namespaced,
        short_names: short.iter().map(|s| s.to_string()).collect(),
        categories: categories.iter().map(|s| s.to_string()).collect(),
        status_subresource: status,
        custom: false,
        tracks_generation: matches!(
            kind,
            "Deployment"
                | "Job"
                | "CustomResourceDefinition"
                | "StatefulSet"
                | "DaemonSet"
                | "Pod"
                | "PodDisruptionBudget"
                | "NetworkPolicy"
        ),
        return_deleted_object: matches!(kind, "Pod" | "ServiceAccount"),
        // core/v1 and events.k8s.io/v1 Events share one store, as upstream.
        storage: if plural == "events" && (group.is_empty() || group == "events.k8s.io") {
            "events".into()
        } else if group.is_empty() {
            format!("core/{plural}")
        } else {
            format!("{group}/{plural}")
        },
        printer_columns: Vec::new(),
        schema: None,
        preferred: true,
        selectable_fields: Vec::new(),
        source_generation: 0,
        create_only: false,
    }
}

/// The review kinds served (group, plural, kind, namespaced).
const REVIEW_KINDS: &[(&str, &str, &str, bool)] = &[
    (
        "authentication.k8s.io",
        "tokenreviews",
        "TokenReview",
        false,
    ),
    (
        "authentication.k8s.io",
        "selfsubjectreviews",
        "SelfSubjectReview",
        false,
    ),
    (
        "authorization.k8s.io",
        "subjectaccessreviews",
        "SubjectAccessReview",
        false,
    ),
    (
        "authorization.k8s.io",
        "selfsubjectaccessreviews",
        "SelfSubjectAccessReview",
        false,
    ),
    (
        "authorization.k8s.io",
        "localsubjectaccessreviews",
        "LocalSubjectAccessReview",
        true,
    ),
    (
        "authorization.k8s.io",
        "selfsubjectrulesreviews",
        "SelfSubjectRulesReview",
        false,
    ),
];

/// The built-in kinds the project and its tests use.
pub(crate) fn builtins() -> Vec<Kind> {
    let mut v = vec![
        builtin(
            "",
            "v1",
            "Namespace",
            "namespaces",
            false,
            &["ns"],
            &[],
            true,
        ),
        builtin("", "v1", "Secret", "secrets", true, &[], &[], false),
        builtin(
            "",
            "v1",
            "ConfigMap",
            "configmaps",
            true,
            &["cm"],
            &[],
            false,
        ),
        builtin("", "v1", "Pod", "pods", true, &["po"], &["all"], true),
        builtin(
            "",
            "v1",
            "PersistentVolumeClaim",
            "persistentvolumeclaims",
            true,
            &["pvc"],
            &[],
            true,
        ),
        builtin(
            "",
            "v1",
            "PersistentVolume",
            "persistentvolumes",
            false,
            &["pv"],
            &[],
            true,
        ),
        builtin(
            "",
            "v1",
            "Service",
            "services",
            true,
            &["svc"],
            &["all"],
            true,
        ),
        builtin(
            "",
            "v1",
            "ServiceAccount",
            "serviceaccounts",
            true,
            &["sa"],
            &[],
            false,
        ),
        builtin("", "v1", "Event", "events", true, &["ev"], &[], false),
        builtin(
            "events.k8s.io",
            "v1",
            "Event",
            "events",
            true,
            &["ev"],
            &[],
            false,
        ),
        builtin(
            "coordination.k8s.io",
            "v1",
            "Lease",
            "leases",
            true,
            &[],
            &[],
            false,
        ),
        builtin(
            "apps",
            "v1",
            "Deployment",
            "deployments",
            true,
            &["deploy"],
            &["all"],
            true,
        ),
        builtin("batch", "v1", "Job", "jobs", true, &[], &["all"], true),
        // Stored only, like the RBAC kinds: the installation manifests carry them.
        builtin(
            "policy",
            "v1",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
            true,
            &["pdb"],
            &[],
            true,
        ),
        builtin(
            "networking.k8s.io",
            "v1",
            "NetworkPolicy",
            "networkpolicies",
            true,
            &["netpol"],
            &[],
            false,
        ),
        builtin(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            false,
            &["crd", "crds"],
            &[],
            true,
        ),
    ];
    for (kind, plural, ns) in [
        ("Role", "roles", true),
        ("RoleBinding", "rolebindings", true),
        ("ClusterRole", "clusterroles", false),
        ("ClusterRoleBinding", "clusterrolebindings", false),
    ] {
        v.push(builtin(
            "rbac.authorization.k8s.io",
            "v1",
            kind,
            plural,
            ns,
            &[],
            &[],
            false,
        ));
    }
    for (group, plural, kind, ns) in REVIEW_KINDS {
        let mut k = builtin(group, "v1", kind, plural, *ns, &[], &[], false);
        k.create_only = true;
        v.push(k);
    }
    v
}

/// Kinds served by one stored CRD, one per served version (a terminating CRD still serves reads).
pub(crate) fn from_crd(crd: &Value) -> Vec<Kind> {
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or_default().to_string();
    let names = &spec["names"];
    let kind = names["kind"].as_str().unwrap_or_default().to_string();
    let plural = names["plural"].as_str().unwrap_or_default().to_string();
    let singular = names["singular"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_lowercase());
    let list_kind = names["listKind"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| format!("{kind}List"));
    let strs = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let namespaced = spec["scope"].as_str() != Some("Cluster");
    let mut out = Vec::new();
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    for ver in versions {
        if ver["served"].as_bool() == Some(false) {
            continue;
        }
        let printer_columns = ver["additionalPrinterColumns"]
            .as_array()
            .map(|cols| {
                cols.iter()
                    .map(|c| PrinterColumn {
                        name: c["name"].as_str().unwrap_or_default().into(),
                        type_: c["type"].as_str().unwrap_or("string").into(),
                        format: c["format"].as_str().unwrap_or_default().into(),
                        description: c["description"].as_str().unwrap_or_default().into(),
                        priority: c["priority"].as_i64().unwrap_or(0),
                        json_path: c["jsonPath"].as_str().unwrap_or_default().into(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.push(Kind {
            group: group.clone(),
            version: ver["name"].as_str().unwrap_or_default().into(),
            kind: kind.clone(),
            plural: plural.clone(),
            singular: singular.clone(),
            list_kind: list_kind.clone(),
            namespaced,
            short_names: strs(&names["shortNames"]),
            categories: strs(&names["categories"]),
            status_subresource: ver["subresources"]["status"].is_object(),
            custom: true,
            tracks_generation: true,
            return_deleted_object: false,
            storage: format!("{group}/{plural}"),
            printer_columns,
            schema: ver["schema"].get("openAPIV3Schema").cloned(),
            preferred: ver["storage"].as_bool() == Some(true),
            selectable_fields: ver["selectableFields"]
                .as_array()
                .map(|fs| {
                    fs.iter()
                        .filter_map(|f| f["jsonPath"].as_str())
                        .map(|p| p.trim_start_matches('.').to_string())
                        .collect()
                })
                .unwrap_or_default(),
            source_generation: crd["metadata"]["generation"].as_i64().unwrap_or(0),
            create_only: false,
        });
    }
    out
}

/// How a list at a given path merges, for strategic merge patch and server-side apply.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ListType {
    /// Replaced wholesale.
    Atomic,
    /// Merged element-wise by these keys.
    Map(Vec<String>),
    /// A set of scalars, merged by union.
    Set,
}

/// The list type of the field at `path` (field names from the object root, list elements transparent).
pub(crate) fn list_type(kind: &Kind, path: &[String]) -> ListType {
    let last = path.last().map(String::as_str).unwrap_or("");
    if path.len() == 2 && path[0] == "metadata" {
        match last {
            "finalizers" => return ListType::Set,
            "ownerReferences" => return ListType::Map(vec!["uid".into()]),
            _ => return ListType::Atomic,
        }
    }
    if kind.custom {
        return schema_list_type(kind.schema.as_ref(), path);
    }
    // apiextensions.k8s.io/v1 OpenAPI: `spec.versions` is `x-kubernetes-list-type: map` keyed by `name`.
    if kind.kind == "CustomResourceDefinition" && path == ["spec", "versions"] {
        return ListType::Map(vec!["name".into()]);
    }
    let key = match last {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "imagePullSecrets"
        | "env" => Some("name"),
        "ports" if path.iter().any(|p| p.ends_with("ontainers")) => Some("containerPort"),
        "ports" if kind.kind == "Service" => Some("port"),
        "volumeMounts" => Some("mountPath"),
        "volumeDevices" => Some("devicePath"),
        "conditions" => Some("type"),
        "hostAliases" => Some("ip"),
        "topologySpreadConstraints" => Some("topologyKey"),
        _ => None,
    };
    match key {
        Some(k) => ListType::Map(vec![k.to_string()]),
        None => ListType::Atomic,
    }
}

fn schema_list_type(schema: Option<&Value>, path: &[String]) -> ListType {
    let Some(mut s) = schema else {
        return ListType::Atomic;
    };
    for seg in path {
        if s["type"] == "array" {
            s = &s["items"];
        }
        if let Some(p) = s["properties"].get(seg) {
            s = p;
        } else if s["additionalProperties"].is_object() {
            s = &s["additionalProperties"];
        } else {
            return ListType::Atomic;
        }
    }
    match s["x-kubernetes-list-type"].as_str() {
        Some("map") => ListType::Map(
            s["x-kubernetes-list-map-keys"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|k| k.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
        ),
        Some("set") => ListType::Set,
        _ => ListType::Atomic,
    }
}

/// Defaults `status` for a freshly written CRD: accepted names, stored versions, NamesAccepted/Established.
pub(crate) fn crd_status(crd: &Value, now: &str) -> Value {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let kind = names["kind"].as_str().unwrap_or_default();
    let mut accepted = names.clone();
    if accepted["singular"].is_null() {
        accepted["singular"] = json!(kind.to_lowercase());
    }
    if accepted["listKind"].is_null() {
        accepted["listKind"] = json!(format!("{kind}List"));
    }
    let storage: Vec<Value> = spec["versions"]
        .as_array()
        .map(|vs| {
            vs.iter()
                .filter(|v| v["storage"].as_bool() == Some(true))
                .map(|v| v["name"].clone())
                .collect()
        })
        .unwrap_or_default();
    let prev = &crd["status"];
    let stamp = |ty: &str| {
        prev["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == ty))
            .and_then(|c| c["lastTransitionTime"].as_str())
            .unwrap_or(now)
            .to_string()
    };
    let mut stored = prev["storedVersions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for s in storage {
        if !stored.contains(&s) {
            stored.push(s);
        }
    }
    json!({
        "acceptedNames": accepted,
        "storedVersions": stored,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
             "message": "no conflicts found", "lastTransitionTime": stamp("NamesAccepted")},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted", "lastTransitionTime": stamp("Established")},
        ]
    })
}
