//! The etcd simulator's data plane: a real etcd member per EtcdCluster, `etcdctl snapshot save`
//! uploaded to the snapshot's S3 destination, and `bootstrap.restore` from S3 through
//! `etcdctl snapshot status` and `etcdctl snapshot restore` before the member starts.
//!
//! ```text
//!  <data-dir>/etcd/<namespace>/<cluster>-<uid>/   0700
//!     data/         the member's data directory (etcd --data-dir)
//!     restore.db    the downloaded snapshot, while it is verified and restored
//!     snapshot-<snapshot uid>.db   a snapshot being saved and uploaded
//!     etcd.log      the member's output
//! ```
//!
//! Invariants: every member listens on 127.0.0.1 only, on free ports; a member restored from a
//! snapshot starts only after `etcdctl snapshot restore` succeeded, so a snapshot that cannot be
//! restored never leaves an empty cluster running; every process started here gets SIGKILL when
//! the simulator ends, however it ends (`setpriv --pdeathsig`, see [`crate::pg::dying_with_parent`]),
//! and is killed when the member or command is dropped. Credentials go only to the S3 client,
//! never to logs, messages or argv.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use backup_storage::s3::{Got, S3Client, S3Config};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::process::Child;

use crate::pg::{dying_with_parent, free_port, tail};

/// The largest snapshot the simulator downloads.
const MAX_SNAPSHOT_BYTES: u64 = 1 << 30;
/// How long a member may take to answer its health check after it starts.
const START_DEADLINE: Duration = Duration::from_secs(30);
/// Annotation on the client Service: where the member listens on this machine.
pub const ANNOTATION_ENDPOINT: &str = "operator-sims.cozy-backups.io/endpoint";

/// Where members live, where the etcd tools are, and which CA HTTPS endpoints chain to.
#[derive(Clone, Debug)]
pub struct Plane {
    /// `<data-dir>/etcd`.
    pub root: PathBuf,
    /// Directory of `etcd` and `etcdctl` (Debian's etcd-server and etcd-client: `/usr/bin`).
    pub bin_dir: PathBuf,
    /// PEM of the CA trusted for HTTPS S3 endpoints besides the system's (the S3 server's dev CA).
    pub ca_pem: Option<Vec<u8>>,
}

/// The S3 location and credentials of a snapshot destination or a restore source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3Location {
    /// Full endpoint URL.
    pub endpoint: String,
    /// Bucket.
    pub bucket: String,
    /// Object key.
    pub key: String,
    /// Signing region.
    pub region: String,
    /// The Secret (in the object's namespace) with `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`.
    pub secret: String,
}

impl S3Location {
    /// Reads `{endpoint, bucket, key, region, credentialsSecretRef.name}`; `key` is the object's
    /// key as given (a snapshot destination's prefix is resolved by the caller).
    pub fn from_spec(s3: &Value) -> Result<Self, String> {
        let s = |k: &str| s3[k].as_str().unwrap_or_default().to_owned();
        let loc = S3Location {
            endpoint: s("endpoint"),
            bucket: s("bucket"),
            key: s("key"),
            region: s("region"),
            secret: s3["credentialsSecretRef"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        };
        for (field, value) in [
            ("endpoint", &loc.endpoint),
            ("bucket", &loc.bucket),
            ("credentialsSecretRef.name", &loc.secret),
        ] {
            if value.is_empty() {
                return Err(format!("s3.{field} is empty"));
            }
        }
        Ok(loc)
    }

    /// `s3://<bucket>/<key>`.
    pub fn uri(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.key)
    }
}

/// `sha256:<hex>` of `bytes`, the artifact checksum's form.
pub fn checksum(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// What a failed etcd tool said: its `Error: …` lines, else the tail of its output.
pub fn tool_message(stderr: &str) -> String {
    let errors: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("Error:"))
        .collect();
    if errors.is_empty() {
        tail(stderr, 3)
    } else {
        errors.join("; ")
    }
}

impl Plane {
    fn tool(&self, name: &str) -> PathBuf {
        self.bin_dir.join(name)
    }

    /// Runs `etcdctl <args>` (API v3) to completion, in a process group of its own, killed when
    /// this future is dropped or the simulator ends; a failure is `etcdctl <what> failed: <its
    /// words>`.
    pub async fn etcdctl(&self, what: &str, args: &[&str]) -> Result<String, String> {
        let mut cmd = dying_with_parent(self.tool("etcdctl"), "KILL");
        cmd.env("ETCDCTL_API", "3")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let out = cmd
            .output()
            .await
            .map_err(|e| format!("etcdctl {what}: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "etcdctl {what} failed: {}",
                tool_message(&String::from_utf8_lossy(&out.stderr))
            ))
        }
    }

    async fn client(
        &self,
        kube: &kube::Client,
        ns: &str,
        loc: &S3Location,
    ) -> Result<S3Client, String> {
        let secrets: Api<Secret> = Api::namespaced(kube.clone(), ns);
        let secret = secrets
            .get_opt(&loc.secret)
            .await
            .map_err(|e| format!("reading Secret {ns}/{}: {e}", loc.secret))?
            .ok_or_else(|| format!("Secret {ns}/{} not found", loc.secret))?;
        let data = secret.data.unwrap_or_default();
        let key = |k: &str| {
            data.get(k)
                .map(|v| String::from_utf8_lossy(&v.0).trim().to_owned())
                .filter(|v| !v.is_empty())
                .ok_or_else(|| format!("Secret {ns}/{} has no {k}", loc.secret))
        };
        S3Client::new(S3Config {
            endpoint: loc.endpoint.clone(),
            bucket: loc.bucket.clone(),
            region: loc.region.clone(),
            access_key: key("AWS_ACCESS_KEY_ID")?,
            secret_key: key("AWS_SECRET_ACCESS_KEY")?,
            ca_pem: self.ca_pem.clone(),
        })
        .map_err(|e| e.to_string())
    }

    /// Saves a snapshot of the member at `endpoint` into `dir`, uploads it to `loc` and returns
    /// the artifact (`uri`, `sizeBytes`, `checksum` of the uploaded bytes).
    pub async fn snapshot(
        &self,
        kube: &kube::Client,
        ns: &str,
        endpoint: &str,
        dir: &Path,
        file_name: &str,
        loc: &S3Location,
    ) -> Result<Value, String> {
        let file = dir.join(file_name);
        let _remove = RemoveOnDrop(file.clone());
        let path = file.display().to_string();
        self.etcdctl(
            "snapshot save",
            &["--endpoints", endpoint, "snapshot", "save", &path],
        )
        .await?;
        let bytes = tokio::fs::read(&file)
            .await
            .map_err(|e| format!("reading the snapshot: {e}"))?;
        let artifact = json!({
            "uri": loc.uri(),
            "sizeBytes": bytes.len(),
            "checksum": checksum(&bytes),
        });
        let s3 = self.client(kube, ns, loc).await?;
        s3.put(&loc.key, bytes)
            .await
            .map_err(|e| format!("uploading the snapshot: {e}"))?;
        Ok(artifact)
    }

    /// Downloads the snapshot at `loc` into `file`.
    async fn download(
        &self,
        kube: &kube::Client,
        ns: &str,
        loc: &S3Location,
        file: &Path,
    ) -> Result<(), String> {
        let s3 = self.client(kube, ns, loc).await?;
        let bytes = match s3.get_capped(&loc.key, MAX_SNAPSHOT_BYTES).await {
            Ok(Got::Bytes(b)) => b,
            Ok(Got::Missing) => return Err(format!("snapshot {} not found", loc.uri())),
            Ok(Got::TooLarge) => {
                return Err(format!(
                    "snapshot {} is larger than {MAX_SNAPSHOT_BYTES} bytes",
                    loc.uri()
                ));
            }
            Err(e) => {
                return Err(format!("downloading snapshot {}: {e}", loc.uri()));
            }
        };
        tokio::fs::write(file, &bytes)
            .await
            .map_err(|e| format!("writing {}: {e}", file.display()))
    }
}

/// Removes a file when dropped.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A running member.
#[derive(Debug)]
pub struct Member {
    /// Its directory (removed by [`Member::stop`]).
    pub dir: PathBuf,
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
    child: Child,
}

/// What a member needs to know to start.
#[derive(Clone, Debug)]
pub struct MemberSpec {
    /// Namespace of the EtcdCluster.
    pub ns: String,
    /// Its name.
    pub name: String,
    /// Its uid (one directory, one member per uid).
    pub uid: String,
    /// `spec.bootstrap.restore.source.s3`, when it bootstraps from a snapshot.
    pub restore: Option<Value>,
}

impl MemberSpec {
    /// The member's name: the first member of the cluster.
    pub fn member_name(&self) -> String {
        format!("{}-0", self.name)
    }

    /// Its directory under `root`.
    pub fn dir(&self, root: &Path) -> PathBuf {
        root.join(&self.ns)
            .join(format!("{}-{}", self.name, self.uid))
    }
}

impl Member {
    /// Creates the member's directory, restores the snapshot when the cluster bootstraps from
    /// one, starts etcd and waits until it answers. A restore that fails leaves no member running.
    pub async fn start(
        plane: &Plane,
        kube: &kube::Client,
        spec: &MemberSpec,
    ) -> Result<Member, String> {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = spec.dir(&plane.root);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("chmod {}: {e}", dir.display()))?;
        let client_port = free_port().map_err(|e| e.to_string())?;
        let peer_port = free_port().map_err(|e| e.to_string())?;
        let endpoint = format!("http://127.0.0.1:{client_port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        let member = spec.member_name();
        let initial_cluster = format!("{member}={peer}");
        let token = format!("{}-{}", spec.name, spec.uid);
        let data = dir.join("data");
        if let Some(source) = &spec.restore {
            let loc = S3Location::from_spec(source)?;
            let file = dir.join("restore.db");
            let _remove = RemoveOnDrop(file.clone());
            plane.download(kube, &spec.ns, &loc, &file).await?;
            let path = file.display().to_string();
            plane
                .etcdctl(
                    "snapshot status",
                    &["snapshot", "status", &path, "-w", "json"],
                )
                .await?;
            plane
                .etcdctl(
                    "snapshot restore",
                    &[
                        "snapshot",
                        "restore",
                        &path,
                        "--name",
                        &member,
                        "--data-dir",
                        &data.display().to_string(),
                        "--initial-cluster",
                        &initial_cluster,
                        "--initial-cluster-token",
                        &token,
                        "--initial-advertise-peer-urls",
                        &peer,
                    ],
                )
                .await?;
        }
        let log = std::fs::File::create(dir.join("etcd.log"))
            .map_err(|e| format!("creating etcd.log: {e}"))?;
        let log_err = log
            .try_clone()
            .map_err(|e| format!("creating etcd.log: {e}"))?;
        let mut cmd = dying_with_parent(plane.tool("etcd"), "KILL");
        cmd.arg("--name")
            .arg(&member)
            .arg("--data-dir")
            .arg(&data)
            .args(["--listen-client-urls", &endpoint])
            .args(["--advertise-client-urls", &endpoint])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &initial_cluster])
            .args(["--initial-cluster-token", &token])
            .args(["--initial-cluster-state", "new"])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .process_group(0)
            .kill_on_drop(true);
        let child = cmd.spawn().map_err(|e| format!("starting etcd: {e}"))?;
        let mut member = Member {
            dir,
            endpoint,
            child,
        };
        let deadline = tokio::time::Instant::now() + START_DEADLINE;
        loop {
            if let Ok(Some(status)) = member.child.try_wait() {
                let log = std::fs::read_to_string(member.dir.join("etcd.log")).unwrap_or_default();
                return Err(format!("etcd exited ({status}): {}", tail(&log, 3)));
            }
            let health = plane
                .etcdctl(
                    "endpoint health",
                    &[
                        "--endpoints",
                        &member.endpoint,
                        "--command-timeout=1s",
                        "endpoint",
                        "health",
                    ],
                )
                .await;
            match health {
                Ok(_) => return Ok(member),
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    member.stop().await;
                    return Err(format!("etcd did not become healthy: {e}"));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Stops etcd (SIGTERM, SIGKILL after 10 s) and removes the member's directory.
    pub async fn stop(mut self) {
        if let Some(pid) = self
            .child
            .id()
            .and_then(|p| rustix::process::Pid::from_raw(p as i32))
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.start_kill();
            let _ = self.child.wait().await;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    /// Whether etcd still runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

/// Writes the cluster's client Service `<cluster>-client` (port 2379, owned by the cluster), with
/// the member's address on this machine in [`ANNOTATION_ENDPOINT`].
pub async fn write_client_service(
    kube: &kube::Client,
    field_manager: &str,
    spec: &MemberSpec,
    endpoint: &str,
) -> Result<(), String> {
    let name = format!("{}-client", spec.name);
    let body = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {
            "name": name, "namespace": spec.ns,
            "labels": {"app.kubernetes.io/instance": spec.name, "app.kubernetes.io/name": "etcd"},
            "annotations": {ANNOTATION_ENDPOINT: endpoint},
            "ownerReferences": [{
                "apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdCluster",
                "name": spec.name, "uid": spec.uid, "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": {
            "type": "ClusterIP",
            "ports": [{"name": "client", "port": 2379, "protocol": "TCP", "targetPort": 2379}],
            "selector": {"app.kubernetes.io/instance": spec.name},
        },
    });
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(kube.clone(), &spec.ns);
    let params = PatchParams::apply(field_manager).force();
    services
        .patch(&name, &params, &Patch::Apply(&body))
        .await
        .map(|_| ())
        .map_err(|e| format!("writing Service {}/{name}: {e}", spec.ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_messages_are_the_tools_error_lines() {
        let stderr = "{\"level\":\"info\",\"msg\":\"restoring snapshot\"}\nError: expected sha256 [1 2], got [3 4]\n";
        assert_eq!(
            tool_message(stderr),
            "Error: expected sha256 [1 2], got [3 4]"
        );
        assert_eq!(tool_message("a\n\nb\nc\nd\n"), "b; c; d");
    }

    #[test]
    fn locations_need_endpoint_bucket_and_credentials() {
        let s3 = json!({"endpoint": "https://127.0.0.1:9", "bucket": "b", "key": "t/e/s.db",
                        "credentialsSecretRef": {"name": "creds"}});
        let loc = S3Location::from_spec(&s3).unwrap();
        assert_eq!(loc.uri(), "s3://b/t/e/s.db");
        assert_eq!(loc.secret, "creds");
        assert_eq!(
            S3Location::from_spec(&json!({"bucket": "b"})).unwrap_err(),
            "s3.endpoint is empty"
        );
        assert_eq!(
            checksum(b"abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    /// A member starts on loopback, serves, and leaves neither a process nor its directory behind
    /// when stopped (Debian's etcd-server and etcd-client, as `hack/install-dataplane.sh` installs).
    #[tokio::test]
    async fn a_member_serves_and_stopping_it_leaves_nothing() {
        let root = std::env::temp_dir().join(format!("etcd-plane-test-{}", std::process::id()));
        let plane = Plane {
            root: root.clone(),
            bin_dir: PathBuf::from("/usr/bin"),
            ca_pem: None,
        };
        // Never called: the member does not restore.
        let kube = kube::Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap()))
            .unwrap();
        let spec = MemberSpec {
            ns: "t".into(),
            name: "etcd".into(),
            uid: "u1".into(),
            restore: None,
        };
        let member = Member::start(&plane, &kube, &spec).await.unwrap();
        let endpoint = member.endpoint.clone();
        plane
            .etcdctl("put", &["--endpoints", &endpoint, "put", "k", "v"])
            .await
            .unwrap();
        let got = plane
            .etcdctl(
                "get",
                &["--endpoints", &endpoint, "get", "k", "--print-value-only"],
            )
            .await
            .unwrap();
        assert_eq!(got.trim(), "v");
        let pid = member.child.id().unwrap();
        let dir = member.dir.clone();
        assert!(dir.join("data").is_dir());
        member.stop().await;
        assert!(!dir.exists(), "the member's directory is removed");
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "etcd is gone"
        );
        let refused = plane
            .etcdctl(
                "get",
                &["--endpoints", &endpoint, "--command-timeout=1s", "get", "k"],
            )
            .await
            .unwrap_err();
        assert!(refused.starts_with("etcdctl get failed: "), "{refused}");
        let _ = std::fs::remove_dir_all(root);
    }
}
