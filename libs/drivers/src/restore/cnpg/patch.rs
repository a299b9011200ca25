//! The application patch: the JSON merge patch that points the target Postgres application's
//! bootstrap at the source archive and restores its users and databases from the snapshot.

use std::collections::BTreeMap;

use serde_json::{Map, Value as Json, json};

use crate::cnpg::keys;

/// RFC 7386: `patch` applied to `doc`.
pub fn merge_patch_apply(doc: &Json, patch: &Json) -> Json {
    let Some(p) = patch.as_object() else {
        return patch.clone();
    };
    let mut out = doc.as_object().cloned().unwrap_or_default();
    for (k, v) in p {
        if v.is_null() {
            out.remove(k);
        } else {
            let merged = merge_patch_apply(out.get(k).unwrap_or(&Json::Null), v);
            out.insert(k.clone(), merged);
        }
    }
    Json::Object(out)
}

/// RFC 7386: the patch that turns `from` into `to` (objects recurse; removed keys become `null`).
pub fn merge_patch_diff(from: &Json, to: &Json) -> Json {
    match (from.as_object(), to.as_object()) {
        (Some(f), Some(t)) => {
            let mut out = Map::new();
            for (k, fv) in f {
                match t.get(k) {
                    None => {
                        out.insert(k.clone(), Json::Null);
                    }
                    Some(tv) if tv != fv => {
                        out.insert(k.clone(), merge_patch_diff(fv, tv));
                    }
                    Some(_) => {}
                }
            }
            for (k, tv) in t {
                if !f.contains_key(k) {
                    out.insert(k.clone(), tv.clone());
                }
            }
            Json::Object(out)
        }
        _ => to.clone(),
    }
}

/// The users to restore: the snapshot's, each keeping the password the snapshot carries (an
/// upstream-written Backup) or else the target's current one (ours never stores passwords).
fn restored_users(snapshot: &Json, current: &Json) -> Json {
    let mut users = snapshot["users"].as_object().cloned().unwrap_or_default();
    for (name, user) in users.iter_mut() {
        let Some(u) = user.as_object_mut() else {
            continue;
        };
        if !u.contains_key("password")
            && let Some(p) = current[name]["password"].as_str()
        {
            u.insert("password".into(), json!(p));
        }
    }
    Json::Object(users)
}

/// The merge patch of the target Postgres application: bootstrap from the source server, the
/// source's backup coordinates with the rendered credentials and CA, inline S3 keys cleared, and
/// databases and users replaced by the snapshot's.
pub fn app_patch(
    app: &Json,
    server: &str,
    metadata: &BTreeMap<String, String>,
    rendered: &Json,
    snapshot: &Json,
    recovery_time: &str,
) -> Json {
    let spec = &app["spec"];
    let clear = |v: &Json| (!v.is_null()).then_some(Json::Null);
    let mut bootstrap = json!({"enabled": true, "oldName": server, "serverName": server});
    if !recovery_time.is_empty() {
        bootstrap["recoveryTime"] = json!(recovery_time);
    } else if let Some(n) = clear(&spec["bootstrap"]["recoveryTime"]) {
        bootstrap["recoveryTime"] = n;
    }
    let md = |k: &str| metadata.get(k).cloned().unwrap_or_default();
    let mut backup = json!({"destinationPath": md(keys::DESTINATION_PATH)});
    let endpoint = md(keys::ENDPOINT_URL);
    if !endpoint.is_empty() {
        backup["endpointURL"] = json!(endpoint);
    } else if let Some(n) = clear(&spec["backup"]["endpointURL"]) {
        backup["endpointURL"] = n;
    }
    for k in ["s3AccessKey", "s3SecretKey"] {
        if let Some(n) = clear(&spec["backup"][k]) {
            backup[k] = n;
        }
    }
    let store = &rendered["barmanObjectStore"];
    let nonempty = |v: &Json, default: &str| {
        v.as_str()
            .filter(|s| !s.is_empty())
            .unwrap_or(default)
            .to_owned()
    };
    let creds = &store["s3Credentials"];
    match creds["secretRef"]["name"]
        .as_str()
        .filter(|n| !n.is_empty())
    {
        Some(name) => {
            backup["s3CredentialsSecret"] = json!({
                "name": name,
                "accessKeyIDKey": nonempty(&creds["accessKeyIDKey"], "AWS_ACCESS_KEY_ID"),
                "secretAccessKeyKey": nonempty(&creds["secretAccessKeyKey"], "AWS_SECRET_ACCESS_KEY"),
            });
        }
        None => {
            if let Some(n) = clear(&spec["backup"]["s3CredentialsSecret"]) {
                backup["s3CredentialsSecret"] = n;
            }
        }
    }
    let ca = &store["endpointCA"];
    match ca["secretRef"]["name"].as_str().filter(|n| !n.is_empty()) {
        Some(name) => {
            backup["endpointCA"] = json!({"name": name, "key": nonempty(&ca["key"], "ca.crt")});
        }
        None => {
            if let Some(n) = clear(&spec["backup"]["endpointCA"]) {
                backup["endpointCA"] = n;
            }
        }
    }
    let databases = snapshot
        .get("databases")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let users = restored_users(snapshot, &spec["users"]);
    let mut patch = json!({"spec": {"bootstrap": bootstrap, "backup": backup}});
    for (key, desired) in [("databases", databases), ("users", users)] {
        let current = spec.get(key).cloned().unwrap_or_else(|| json!({}));
        let diff = merge_patch_diff(&current, &desired);
        if diff.as_object().is_some_and(|m| !m.is_empty()) {
            patch["spec"][key] = diff;
        }
    }
    patch
}
