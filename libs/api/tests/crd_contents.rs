//! The generated CRDs carry upstream's names, scopes, required fields, enums and CEL rules, plus
//! our documented improvements (list-map conditions, printer columns, short names).

use serde_json::{Value, json};

fn crd(name: &str) -> Value {
    let crd = api::crds::all()
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no CRD {name}"));
    serde_json::to_value(crd).unwrap()
}

fn schema(crd: &Value) -> &Value {
    &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
}

fn at<'a>(v: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(v, |v, key| &v["properties"][key])
}

#[test]
fn all_fourteen_kinds_with_upstream_names_and_scopes() {
    let got: Vec<(String, String, String, String)> = api::crds::all()
        .iter()
        .map(|c| {
            (
                c.spec.group.clone(),
                c.spec.names.kind.clone(),
                c.spec.names.plural.clone(),
                c.spec.scope.clone(),
            )
        })
        .collect();
    let want = [
        (
            "backups.cozystack.io",
            "BackupClass",
            "backupclasses",
            "Cluster",
        ),
        (
            "backups.cozystack.io",
            "BackupJob",
            "backupjobs",
            "Namespaced",
        ),
        ("backups.cozystack.io", "Backup", "backups", "Namespaced"),
        ("backups.cozystack.io", "Plan", "plans", "Namespaced"),
        (
            "backups.cozystack.io",
            "RestoreJob",
            "restorejobs",
            "Namespaced",
        ),
        ("strategy.backups.cozystack.io", "CNPG", "cnpgs", "Cluster"),
        ("strategy.backups.cozystack.io", "Etcd", "etcds", "Cluster"),
        (
            "strategy.backups.cozystack.io",
            "MariaDB",
            "mariadbs",
            "Cluster",
        ),
        (
            "strategy.backups.cozystack.io",
            "Altinity",
            "altinities",
            "Cluster",
        ),
        (
            "strategy.backups.cozystack.io",
            "FoundationDB",
            "foundationdbs",
            "Cluster",
        ),
        (
            "strategy.backups.cozystack.io",
            "MongoDB",
            "mongodbs",
            "Cluster",
        ),
        (
            "strategy.backups.cozystack.io",
            "Velero",
            "veleroes",
            "Cluster",
        ),
        ("strategy.backups.cozystack.io", "Job", "jobs", "Cluster"),
        (
            "cozystack.io",
            "ApplicationDefinition",
            "applicationdefinitions",
            "Cluster",
        ),
    ];
    let want: Vec<_> = want
        .iter()
        .map(|(g, k, p, s)| (g.to_string(), k.to_string(), p.to_string(), s.to_string()))
        .collect();
    assert_eq!(got, want);
    for c in api::crds::all() {
        assert_eq!(c.spec.versions.len(), 1);
        assert_eq!(c.spec.versions[0].name, "v1alpha1");
        assert!(c.spec.versions[0].served && c.spec.versions[0].storage);
    }
}

#[test]
fn status_subresource_everywhere_except_backup_and_applicationdefinition() {
    for c in api::crds::all() {
        let has = c.spec.versions[0]
            .subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some();
        let want = !matches!(
            c.spec.names.kind.as_str(),
            "Backup" | "ApplicationDefinition"
        );
        assert_eq!(has, want, "{}: status subresource", c.spec.names.kind);
    }
}

#[test]
fn every_conditions_list_is_a_list_map_keyed_by_type() {
    for c in api::crds::all() {
        if c.spec.names.kind == "ApplicationDefinition" {
            continue;
        }
        let v = serde_json::to_value(&c).unwrap();
        let cond = at(schema(&v), "status.conditions");
        assert_eq!(
            cond["x-kubernetes-list-type"], "map",
            "{}",
            c.spec.names.kind
        );
        assert_eq!(
            cond["x-kubernetes-list-map-keys"],
            json!(["type"]),
            "{}",
            c.spec.names.kind
        );
        assert_eq!(
            cond["items"]["required"],
            json!(["lastTransitionTime", "message", "reason", "status", "type"])
        );
        assert_eq!(
            cond["items"]["properties"]["status"]["enum"],
            json!(["True", "False", "Unknown"])
        );
    }
}

#[test]
fn backupjob_backupclassname_is_immutable_and_non_empty() {
    let v = crd("backupjobs.backups.cozystack.io");
    let field = at(schema(&v), "spec.backupClassName");
    assert_eq!(field["minLength"], 1);
    assert_eq!(
        field["x-kubernetes-validations"],
        json!([{"rule": "self == oldSelf", "message": "backupClassName is immutable"}])
    );
    assert_eq!(
        at(schema(&v), "spec")["required"],
        json!(["applicationRef", "backupClassName"])
    );
    // Plan's backupClassName has neither constraint.
    let plan = crd("plans.backups.cozystack.io");
    let field = at(schema(&plan), "spec.backupClassName");
    assert!(field.get("minLength").is_none() && field.get("x-kubernetes-validations").is_none());
    assert_eq!(
        at(schema(&plan), "spec")["required"],
        json!(["applicationRef", "backupClassName", "schedule"])
    );
}

#[test]
fn mariadb_storage_is_exactly_one_of() {
    let v = crd("mariadbs.strategy.backups.cozystack.io");
    let storage = at(schema(&v), "spec.template.storage");
    assert_eq!(
        storage["x-kubernetes-validations"][0]["message"],
        "exactly one of s3, persistentVolumeClaim or volume must be set"
    );
    let s3 = at(storage, "s3");
    assert_eq!(
        s3["required"],
        json!([
            "accessKeyIdSecretKeyRef",
            "bucket",
            "endpoint",
            "secretAccessKeySecretKeyRef"
        ])
    );
}

#[test]
fn etcd_destination_requires_s3() {
    let v = crd("etcds.strategy.backups.cozystack.io");
    let dest = at(schema(&v), "spec.template.destination");
    assert_eq!(dest["x-kubernetes-validations"][0]["rule"], "has(self.s3)");
    assert_eq!(
        at(dest, "s3")["required"],
        json!(["bucket", "credentialsSecretRef", "endpoint"])
    );
    assert_eq!(at(dest, "s3.forcePathStyle")["type"], "boolean");
}

#[test]
fn json_spellings_match_upstream() {
    let cnpg = crd("cnpgs.strategy.backups.cozystack.io");
    let creds = at(
        schema(&cnpg),
        "spec.template.barmanObjectStore.s3Credentials",
    );
    assert!(creds["properties"].get("accessKeyIDKey").is_some());
    assert!(
        at(schema(&cnpg), "spec.template.barmanObjectStore")["properties"]
            .get("endpointURL")
            .is_some()
    );
    let mongo = crd("mongodbs.strategy.backups.cozystack.io");
    assert_eq!(
        at(schema(&mongo), "spec.template.type")["enum"],
        json!(["logical"])
    );
    let appdef = crd("applicationdefinitions.cozystack.io");
    let app = at(schema(&appdef), "spec.application");
    assert_eq!(
        app["required"],
        json!(["kind", "openAPISchema", "plural", "singular"])
    );
    assert_eq!(
        at(schema(&appdef), "spec.release.chartRef.kind")["enum"],
        json!(["OCIRepository", "HelmChart", "ExternalArtifact"])
    );
    let altinity = crd("altinities.strategy.backups.cozystack.io");
    assert_eq!(
        at(schema(&altinity), "spec.template.spec")["required"],
        json!(["containers"])
    );
}

#[test]
fn tenant_facing_printer_columns_and_short_names() {
    let columns = |name: &str| -> Vec<String> {
        let v = crd(name);
        v["spec"]["versions"][0]["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c.get("priority").is_none())
            .map(|c| c["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        columns("backupjobs.backups.cozystack.io"),
        ["Application", "Class", "Phase", "Age"]
    );
    assert_eq!(
        columns("restorejobs.backups.cozystack.io"),
        ["Backup", "Target", "Phase", "Age"]
    );
    assert_eq!(
        columns("backups.backups.cozystack.io"),
        ["Application", "Taken", "Phase", "Age"]
    );
    assert_eq!(
        columns("plans.backups.cozystack.io"),
        ["Application", "Schedule", "Last", "Next", "Age"]
    );
    // Short names must not collide with well-known kinds' short names or resource names.
    let well_known = [
        "bc", "bj", "b", "bk", "job", "jobs", "po", "svc", "cm", "deploy", "ns", "pv", "pvc", "sa",
        "rs", "ds", "sts", "cj", "ing", "ev", "crd", "crds", "hr", "vm", "vmi", "dv",
    ];
    let mut seen = std::collections::BTreeSet::new();
    for c in api::crds::all() {
        for s in c.spec.names.short_names.unwrap_or_default() {
            assert!(
                !well_known.contains(&s.as_str()),
                "{s} collides with a well-known short name"
            );
            assert!(seen.insert(s.clone()), "{s} used twice");
        }
    }
}
