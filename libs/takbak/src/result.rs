//! The one JSON result object each tool prints on stdout, and the optional Prometheus textfile.
//!
//! Both are built only from counts, hashes, durations and the static strings of [`crate::error`]:
//! never paths, file contents, operator-record contents or foreign error text.

use std::io::Write;
use std::path::Path;

use serde::Serialize;

use crate::ctx::Ctx;
use crate::error::{Error, FailureSource, Result, errno_err, errno_name, io_err};
use crate::format::Totals;

/// What a successful (or partially successful) operation measured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Aggregate counts from the manifest.
    pub totals: Totals,
    /// Archive size in bytes.
    pub archive_bytes: Option<u64>,
    /// Manifest size in bytes.
    pub manifest_bytes: Option<u64>,
    /// SHA-256 of the whole archive file, lowercase hex.
    pub archive_sha256: Option<String>,
    /// SHA-256 of the manifest bytes, lowercase hex.
    pub manifest_sha256: Option<String>,
}

/// The failure part of a result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    /// Bounded category (`deadline_exceeded`, `filesystem_timeout`, `permission_denied`, ...).
    pub category: &'static str,
    /// Bounded reason: the check or operation that failed.
    pub reason: &'static str,
    /// Which object the failing system call touched, when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<&'static str>,
    /// Numeric errno, when a system call failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errno: Option<i32>,
    /// Symbolic errno name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errno_name: Option<&'static str>,
}

impl Failure {
    /// Classifies an error.
    pub fn from_error(e: &Error) -> Self {
        let errno = e.errno();
        Self {
            category: e.category(),
            reason: e.reason(),
            source: e.failure_source().map(FailureSource::as_str),
            errno,
            errno_name: errno.map(errno_name),
        }
    }
}

/// The single result object printed on stdout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OpResult {
    /// `backup-volume` or `restore-volume`.
    pub tool: &'static str,
    /// Tool version.
    pub tool_version: &'static str,
    /// Always `TAKBAK1`.
    pub format: &'static str,
    /// `backup`, `verify`, `list` or `restore`.
    pub operation: &'static str,
    /// `PASS` or `FAIL`.
    pub result: &'static str,
    /// The phase reached (`done` on PASS).
    pub phase: &'static str,
    /// Wall time in milliseconds.
    pub duration_ms: u64,
    /// Aggregate counts (zero when unknown).
    #[serde(flatten)]
    pub totals: Totals,
    /// Archive size in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub archive_bytes: Option<u64>,
    /// Manifest size in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub manifest_bytes: Option<u64>,
    /// Whole-archive SHA-256.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub archive_sha256: Option<String>,
    /// Manifest SHA-256.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub manifest_sha256: Option<String>,
    /// Present on FAIL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
}

impl OpResult {
    /// Builds the result of an operation.
    pub fn new(
        tool: &'static str,
        operation: &'static str,
        ctx: &Ctx,
        outcome: &Result<Report>,
    ) -> Self {
        let report = outcome.as_ref().ok().cloned().unwrap_or_default();
        Self {
            tool,
            tool_version: env!("CARGO_PKG_VERSION"),
            format: "TAKBAK1",
            operation,
            result: if outcome.is_ok() { "PASS" } else { "FAIL" },
            phase: ctx.phase().as_str(),
            duration_ms: u64::try_from(ctx.elapsed().as_millis()).unwrap_or(u64::MAX),
            totals: report.totals,
            archive_bytes: report.archive_bytes,
            manifest_bytes: report.manifest_bytes,
            archive_sha256: report.archive_sha256,
            manifest_sha256: report.manifest_sha256,
            failure: outcome.as_ref().err().map(Failure::from_error),
        }
    }

    /// One line of JSON.
    pub fn to_json_line(&self) -> String {
        let mut s =
            serde_json::to_string(self).unwrap_or_else(|_| String::from("{\"result\":\"FAIL\"}"));
        s.push('\n');
        s
    }

    /// Prometheus text exposition of this result.
    pub fn to_prometheus(&self, unix_time: u64) -> String {
        let l = format!("tool=\"{}\",operation=\"{}\"", self.tool, self.operation);
        let mut s = String::new();
        let mut g = |name: &str, help: &str, labels: &str, v: String| {
            s.push_str(&format!("# HELP cozy_backups_takbak_{name} {help}\n# TYPE cozy_backups_takbak_{name} gauge\n"));
            s.push_str(&format!("cozy_backups_takbak_{name}{{{labels}}} {v}\n"));
        };
        g(
            "operation_success",
            "1 if the last operation passed, else 0.",
            &l,
            u8::from(self.result == "PASS").to_string(),
        );
        g(
            "operation_timestamp_seconds",
            "Unix time the last operation finished.",
            &l,
            unix_time.to_string(),
        );
        g(
            "operation_duration_seconds",
            "Wall time of the last operation.",
            &l,
            format!("{:.3}", self.duration_ms as f64 / 1000.0),
        );
        g(
            "entries",
            "Manifest entries of the last operation.",
            &l,
            self.totals.entries.to_string(),
        );
        g(
            "logical_bytes",
            "Logical file bytes of the last operation.",
            &l,
            self.totals.logical_bytes.to_string(),
        );
        g(
            "payload_bytes",
            "Stored payload bytes of the last operation.",
            &l,
            self.totals.payload_bytes.to_string(),
        );
        if let Some(b) = self.archive_bytes {
            g(
                "archive_bytes",
                "Archive size of the last operation.",
                &l,
                b.to_string(),
            );
        }
        if let Some(h) = &self.archive_sha256 {
            g(
                "archive_info",
                "Archive SHA-256 of the last operation (value always 1).",
                &format!("{l},sha256=\"{h}\""),
                "1".into(),
            );
        }
        if let Some(f) = &self.failure {
            g(
                "failure_info",
                "Failure category of the last operation (value always 1).",
                &format!("{l},category=\"{}\",phase=\"{}\"", f.category, self.phase),
                "1".into(),
            );
        }
        s
    }
}

/// Writes the textfile exclusively: a new file created with `O_EXCL`, mode 0600, synced. An existing
/// file is never replaced (the node exporter's collector directory is the operator's to manage).
pub fn write_metrics_textfile(path: &Path, text: &str) -> Result<()> {
    let src = FailureSource::MetricsTextfile;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or(Error::Usage("metrics_textfile_has_no_file_name"))?;
    let dir = rustix::fs::open(
        parent,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(errno_err("open_metrics_dir", src))?;
    let name = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(name))
        .map_err(|_| Error::Usage("metrics_textfile_name_invalid"))?;
    let fd = crate::fsutil::create_exclusive(&dir, &name)
        .map_err(errno_err("create_metrics_textfile", src))?;
    let mut f = std::fs::File::from(fd);
    f.write_all(text.as_bytes())
        .map_err(io_err("write_metrics_textfile", src))?;
    f.sync_all()
        .map_err(io_err("fsync_metrics_textfile", src))?;
    rustix::fs::fsync(&dir).map_err(errno_err("fsync_metrics_dir", src))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn failure_json_is_bounded() {
        let ctx = Ctx::new(Duration::from_secs(1));
        let err: Result<Report> = Err(Error::Io {
            op: "read_file",
            source_kind: FailureSource::SourceTree,
            source: std::io::Error::from_raw_os_error(110),
        });
        let r = OpResult::new("backup-volume", "backup", &ctx, &err);
        let v: serde_json::Value = serde_json::from_str(&r.to_json_line()).unwrap();
        assert_eq!(
            v["failure"],
            serde_json::json!({"category": "filesystem_timeout", "reason": "read_file",
                               "source": "source_tree", "errno": 110, "errnoName": "ETIMEDOUT"})
        );
        assert_eq!(
            (v["result"].as_str(), v["phase"].as_str()),
            (Some("FAIL"), Some("startup"))
        );
        let prom = r.to_prometheus(5);
        assert!(prom.contains("cozy_backups_takbak_operation_success{tool=\"backup-volume\",operation=\"backup\"} 0\n"), "{prom}");
        assert!(prom.contains("category=\"filesystem_timeout\""), "{prom}");
    }
}
