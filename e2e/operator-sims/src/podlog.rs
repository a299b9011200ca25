//! Simulated Pods and their logs: creates Pod objects and feeds their container logs through the
//! kube emulator's admin API (`PUT /emulator/v1/namespaces/{ns}/pods/{name}/log?append=true`), so
//! `kubectl logs` and the `pods/log` API show what the simulated process printed.
//!
//! Lines are sent in batches: a sink task takes every line waiting in its channel and appends them
//! in one request, so a chatty process costs few requests and no line is reordered. This only works
//! against the kube emulator (a real API server has no admin API); errors are logged and dropped.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// Creates a Pod (see [`create_owned`]).
pub async fn create_pod(client: &kube::Client, ns: &str, pod: Value) -> Result<(), kube::Error> {
    create_owned(&Api::<Pod>::namespaced(client.clone(), ns), pod).await
}

/// Creates an object. One of the same name that belongs to the same owner is kept; one left by an
/// earlier owner of the same name (a deleted and re-created Cluster, before the garbage collector
/// got to it) is replaced.
pub async fn create_owned<K>(api: &Api<K>, body: Value) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(body.clone()).map_err(kube::Error::SerdeError)?;
    let name = body["metadata"]["name"].as_str().unwrap_or_default();
    let owner = body["metadata"]["ownerReferences"][0]["uid"].clone();
    for _ in 0..3 {
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let Some(existing) = api.get_opt(name).await? else {
                    continue;
                };
                let existing = serde_json::to_value(existing).map_err(kube::Error::SerdeError)?;
                if existing["metadata"]["ownerReferences"][0]["uid"] == owner {
                    return Ok(());
                }
                match api.delete(name, &kube::api::DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Sets a Pod's `status.phase` (and container state) as the kubelet would after the container exits.
pub async fn finish_pod(
    client: &kube::Client,
    ns: &str,
    name: &str,
    container: &str,
    exit_code: i32,
    field_manager: &str,
) {
    let phase = if exit_code == 0 {
        "Succeeded"
    } else {
        "Failed"
    };
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let patch = json!({"status": {
        "phase": phase,
        "containerStatuses": [{
            "name": container, "ready": false, "restartCount": 0, "image": "", "imageID": "",
            "state": {"terminated": {
                "exitCode": exit_code,
                "reason": if exit_code == 0 { "Completed" } else { "Error" },
                "finishedAt": now,
            }},
        }],
    }});
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let params = PatchParams {
        field_manager: Some(field_manager.into()),
        ..Default::default()
    };
    if let Err(e) = api.patch_status(name, &params, &Patch::Merge(&patch)).await {
        tracing::debug!(namespace = ns, pod = name, error = %e, "pod status update failed");
    }
}

/// Appends `text` to a container's log.
pub async fn append(client: &kube::Client, ns: &str, pod: &str, container: &str, text: String) {
    let path =
        format!("/emulator/v1/namespaces/{ns}/pods/{pod}/log?container={container}&append=true");
    let request = match http::Request::put(path).body(text.into_bytes()) {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(error = %e, "building the pod log request failed");
            return;
        }
    };
    if let Err(e) = client.request_text(request).await {
        tracing::debug!(namespace = ns, pod, error = %e, "appending to the pod log failed");
    }
}

/// A channel whose lines end up, in order, in one container's log.
pub fn sink(
    client: kube::Client,
    ns: String,
    pod: String,
    container: String,
) -> (mpsc::UnboundedSender<String>, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let task = tokio::spawn(async move {
        while let Some(first) = rx.recv().await {
            let mut text = first;
            text.push('\n');
            while let Ok(more) = rx.try_recv() {
                text.push_str(&more);
                text.push('\n');
            }
            append(&client, &ns, &pod, &container, text).await;
        }
    });
    (tx, task)
}
