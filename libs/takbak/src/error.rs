//! Typed failures and their bounded, operator-facing classification.
//!
//! Every failure carries only static strings and numbers: a category (what kind of failure), a reason
//! (which check failed), a failure source (which object the failing call touched) and, for system
//! calls, the numeric errno. Nothing here ever holds a path, file content, record content or the text
//! of an underlying error, so the result JSON built from it is bounded and safe to ship to logs.

use std::io;

/// Which object a failing system call touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureSource {
    /// The tree being archived.
    SourceTree,
    /// The archive file (being written, verified, listed or restored from).
    Archive,
    /// The restore destination tree.
    Destination,
    /// The restore incomplete marker.
    Marker,
    /// The identity JSON file.
    IdentityFile,
    /// The operator record JSON file.
    RecordFile,
    /// The optional Prometheus textfile.
    MetricsTextfile,
    /// The tool itself (threads, clocks, watchdog).
    Tool,
}

impl FailureSource {
    /// Stable snake_case name used in result JSON and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SourceTree => "source_tree",
            Self::Archive => "archive",
            Self::Destination => "destination",
            Self::Marker => "marker",
            Self::IdentityFile => "identity_file",
            Self::RecordFile => "record_file",
            Self::MetricsTextfile => "metrics_textfile",
            Self::Tool => "tool",
        }
    }
}

/// A TAKBAK1 tool failure. Messages are lowercase and never contain paths or foreign error text.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A system call failed.
    #[error("{op} failed on {}", source_kind.as_str())]
    Io {
        /// What the tool was doing, e.g. `"read"`, `"fsync"`.
        op: &'static str,
        /// Which object the call touched.
        source_kind: FailureSource,
        /// The underlying error (kept for `Error::source`, never printed in results).
        #[source]
        source: io::Error,
    },
    /// The source tree holds something TAKBAK1 refuses to archive (it is never silently omitted).
    #[error("source refused: {0}")]
    Refused(&'static str),
    /// A configured limit was exceeded.
    #[error("limit exceeded: {0}")]
    Limit(&'static str),
    /// The identity or operator record is malformed or inconsistent.
    #[error("invalid operator record: {0}")]
    Record(&'static str),
    /// The archive is malformed, truncated or fails a checksum.
    #[error("archive invalid: {0}")]
    Archive(&'static str),
    /// The restore destination is unsuitable (missing, not a directory, not empty).
    #[error("destination unsuitable: {0}")]
    Destination(&'static str),
    /// The source tree changed while it was being archived.
    #[error("source changed during backup: {0}")]
    SourceChanged(&'static str),
    /// The restored tree does not match the archive on re-verification.
    #[error("restored tree mismatch: {0}")]
    RestoreMismatch(&'static str),
    /// Invalid command-line usage.
    #[error("usage: {0}")]
    Usage(&'static str),
    /// The operation deadline passed.
    #[error("operation deadline exceeded")]
    Deadline,
    /// The restore failed after the incomplete marker was removed: the destination may look complete
    /// but must not be used; keep application clients stopped.
    #[error("restore publication uncertain")]
    PublicationUncertain(#[source] Box<Error>),
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Builds a closure mapping an `io::Error` into [`Error::Io`]; used as `.map_err(io_err("read", S))`.
pub fn io_err(op: &'static str, source_kind: FailureSource) -> impl Fn(io::Error) -> Error {
    move |source| Error::Io {
        op,
        source_kind,
        source,
    }
}

/// Maps a rustix errno into [`Error::Io`].
pub fn errno_err(
    op: &'static str,
    source_kind: FailureSource,
) -> impl Fn(rustix::io::Errno) -> Error {
    move |e| Error::Io {
        op,
        source_kind,
        source: io::Error::from(e),
    }
}

/// Process exit codes; documented in `docs/takbak1.md`.
pub mod exit {
    /// Operation passed.
    pub const PASS: i32 = 0;
    /// Unclassified I/O or internal failure.
    pub const IO: i32 = 1;
    /// Invalid command-line usage (also clap's own code).
    pub const USAGE: i32 = 2;
    /// Identity or operator record rejected.
    pub const RECORD: i32 = 3;
    /// Source content refused or a limit exceeded.
    pub const REFUSED: i32 = 4;
    /// Archive invalid, truncated or corrupt.
    pub const ARCHIVE: i32 = 5;
    /// Restore destination unsuitable, or restored tree failed re-verification.
    pub const DESTINATION: i32 = 6;
    /// `deadline_exceeded` or `filesystem_timeout`.
    pub const TIMEOUT: i32 = 7;
    /// Permission denied.
    pub const PERMISSION: i32 = 8;
    /// Disk full or quota exceeded.
    pub const DISK_FULL: i32 = 9;
    /// `restore_publication_uncertain_keep_clients_stopped`.
    pub const PUBLICATION_UNCERTAIN: i32 = 10;
    /// The source changed while it was archived.
    pub const SOURCE_CHANGED: i32 = 11;
}

impl Error {
    /// The raw errno of an I/O failure, if any.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Self::Io { source, .. } => source.raw_os_error(),
            Self::PublicationUncertain(inner) => inner.errno(),
            _ => None,
        }
    }

    /// The failure source, if the failure came from a system call.
    pub fn failure_source(&self) -> Option<FailureSource> {
        match self {
            Self::Io { source_kind, .. } => Some(*source_kind),
            Self::PublicationUncertain(inner) => {
                inner.failure_source().or(Some(FailureSource::Destination))
            }
            Self::Deadline => Some(FailureSource::Tool),
            _ => None,
        }
    }

    /// The bounded failure category reported in result JSON and metrics.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Io { source, .. } => match source.raw_os_error() {
                Some(e) if e == rustix::io::Errno::TIMEDOUT.raw_os_error() => "filesystem_timeout",
                Some(e) if e == libc_eacces() || e == libc_eperm() => "permission_denied",
                Some(e) if e == libc_enospc() || e == libc_edquot() => "disk_full",
                _ => "io_error",
            },
            Self::Refused(_) => "refused_input",
            Self::Limit(_) => "limit_exceeded",
            Self::Record(_) => "invalid_record",
            Self::Archive(_) => "archive_invalid",
            Self::Destination(_) => "destination_unsuitable",
            Self::SourceChanged(_) => "source_changed",
            Self::RestoreMismatch(_) => "restore_verification_failed",
            Self::Usage(_) => "usage",
            Self::Deadline => "deadline_exceeded",
            Self::PublicationUncertain(_) => "restore_publication_uncertain_keep_clients_stopped",
        }
    }

    /// The bounded reason: which operation or check failed.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Io { op, .. } => op,
            Self::Refused(r)
            | Self::Limit(r)
            | Self::Record(r)
            | Self::Archive(r)
            | Self::Destination(r)
            | Self::SourceChanged(r)
            | Self::RestoreMismatch(r)
            | Self::Usage(r) => r,
            Self::Deadline => "deadline",
            Self::PublicationUncertain(inner) => inner.reason(),
        }
    }

    /// The documented process exit code for this failure.
    pub fn exit_code(&self) -> i32 {
        match self.category() {
            "filesystem_timeout" | "deadline_exceeded" => exit::TIMEOUT,
            "permission_denied" => exit::PERMISSION,
            "disk_full" => exit::DISK_FULL,
            "refused_input" | "limit_exceeded" => exit::REFUSED,
            "invalid_record" => exit::RECORD,
            "archive_invalid" => exit::ARCHIVE,
            "destination_unsuitable" | "restore_verification_failed" => exit::DESTINATION,
            "source_changed" => exit::SOURCE_CHANGED,
            "usage" => exit::USAGE,
            "restore_publication_uncertain_keep_clients_stopped" => exit::PUBLICATION_UNCERTAIN,
            _ => exit::IO,
        }
    }
}

fn libc_eacces() -> i32 {
    rustix::io::Errno::ACCESS.raw_os_error()
}
fn libc_eperm() -> i32 {
    rustix::io::Errno::PERM.raw_os_error()
}
fn libc_enospc() -> i32 {
    rustix::io::Errno::NOSPC.raw_os_error()
}
fn libc_edquot() -> i32 {
    rustix::io::Errno::DQUOT.raw_os_error()
}

/// The symbolic name of an errno value (a bounded table; unknown values map to `"EUNKNOWN"`).
pub fn errno_name(errno: i32) -> &'static str {
    use rustix::io::Errno as E;
    const TABLE: &[(E, &str)] = &[
        (E::PERM, "EPERM"),
        (E::NOENT, "ENOENT"),
        (E::SRCH, "ESRCH"),
        (E::INTR, "EINTR"),
        (E::IO, "EIO"),
        (E::NXIO, "ENXIO"),
        (E::TOOBIG, "E2BIG"),
        (E::BADF, "EBADF"),
        (E::AGAIN, "EAGAIN"),
        (E::NOMEM, "ENOMEM"),
        (E::ACCESS, "EACCES"),
        (E::FAULT, "EFAULT"),
        (E::BUSY, "EBUSY"),
        (E::EXIST, "EEXIST"),
        (E::XDEV, "EXDEV"),
        (E::NODEV, "ENODEV"),
        (E::NOTDIR, "ENOTDIR"),
        (E::ISDIR, "EISDIR"),
        (E::INVAL, "EINVAL"),
        (E::NFILE, "ENFILE"),
        (E::MFILE, "EMFILE"),
        (E::FBIG, "EFBIG"),
        (E::NOSPC, "ENOSPC"),
        (E::SPIPE, "ESPIPE"),
        (E::ROFS, "EROFS"),
        (E::MLINK, "EMLINK"),
        (E::PIPE, "EPIPE"),
        (E::NAMETOOLONG, "ENAMETOOLONG"),
        (E::NOSYS, "ENOSYS"),
        (E::NOTEMPTY, "ENOTEMPTY"),
        (E::LOOP, "ELOOP"),
        (E::NODATA, "ENODATA"),
        (E::OVERFLOW, "EOVERFLOW"),
        (E::OPNOTSUPP, "EOPNOTSUPP"),
        (E::TIMEDOUT, "ETIMEDOUT"),
        (E::STALE, "ESTALE"),
        (E::DQUOT, "EDQUOT"),
        (E::CANCELED, "ECANCELED"),
        (E::NOTCONN, "ENOTCONN"),
        (E::CONNRESET, "ECONNRESET"),
        (E::HOSTDOWN, "EHOSTDOWN"),
        (E::NOLINK, "ENOLINK"),
        (E::REMOTEIO, "EREMOTEIO"),
    ];
    TABLE
        .iter()
        .find(|(e, _)| e.raw_os_error() == errno)
        .map_or("EUNKNOWN", |(_, n)| n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(errno: i32) -> Error {
        Error::Io {
            op: "write",
            source_kind: FailureSource::Destination,
            source: io::Error::from_raw_os_error(errno),
        }
    }

    #[test]
    fn categories_follow_errno() {
        let cases = [
            (
                rustix::io::Errno::TIMEDOUT,
                "filesystem_timeout",
                exit::TIMEOUT,
                "ETIMEDOUT",
            ),
            (
                rustix::io::Errno::ACCESS,
                "permission_denied",
                exit::PERMISSION,
                "EACCES",
            ),
            (
                rustix::io::Errno::PERM,
                "permission_denied",
                exit::PERMISSION,
                "EPERM",
            ),
            (
                rustix::io::Errno::NOSPC,
                "disk_full",
                exit::DISK_FULL,
                "ENOSPC",
            ),
            (
                rustix::io::Errno::DQUOT,
                "disk_full",
                exit::DISK_FULL,
                "EDQUOT",
            ),
            (rustix::io::Errno::IO, "io_error", exit::IO, "EIO"),
        ];
        for (errno, category, code, name) in cases {
            let e = io(errno.raw_os_error());
            assert_eq!(
                (e.category(), e.exit_code(), errno_name(e.errno().unwrap())),
                (category, code, name)
            );
        }
    }

    #[test]
    fn deadline_and_uncertain_are_distinct() {
        assert_eq!(Error::Deadline.category(), "deadline_exceeded");
        let u =
            Error::PublicationUncertain(Box::new(io(rustix::io::Errno::TIMEDOUT.raw_os_error())));
        assert_eq!(
            (u.category(), u.exit_code(), u.errno(), u.failure_source()),
            (
                "restore_publication_uncertain_keep_clients_stopped",
                exit::PUBLICATION_UNCERTAIN,
                Some(rustix::io::Errno::TIMEDOUT.raw_os_error()),
                Some(FailureSource::Destination)
            )
        );
    }
}
