//! Command-line arguments of `restore-volume` (every flag also reads an environment variable).

use std::path::PathBuf;

use clap::Parser;

/// Restore a verified TAKBAK1 archive into a new, empty, mounted directory.
///
/// Keep all target application clients stopped. Prints exactly one JSON result object on stdout;
/// exit codes are listed in docs/takbak1.md.
#[derive(Debug, Parser)]
#[command(name = "restore-volume", version)]
pub(crate) struct Args {
    /// Destination directory: the new, empty volume mount. Required for a restore.
    #[arg(long, env = "TAKBAK_ROOT", required_unless_present = "list")]
    pub(crate) root: Option<PathBuf>,
    /// Archive file to restore.
    #[arg(long, env = "TAKBAK_ARCHIVE")]
    pub(crate) archive: PathBuf,
    /// Identity JSON (volume, generation, claimUID) of the NEW destination; all three must differ from the source.
    #[arg(long, env = "TAKBAK_IDENTITY", required_unless_present = "list")]
    pub(crate) identity: Option<PathBuf>,
    /// Operator record JSON with purpose restore-isolated naming the archive's source.
    #[arg(long, env = "TAKBAK_RECORD", required_unless_present = "list")]
    pub(crate) record: Option<PathBuf>,
    /// The archive's SHA-256 as recorded independently at backup time (64 hex digits): a different
    /// archive is refused (reason archive_sha256_mismatch) before the destination is touched.
    #[arg(long, env = "TAKBAK_EXPECT_SHA256", value_parser = takbak::tool::parse_sha256_hex)]
    pub(crate) expect_sha256: Option<[u8; 32]>,
    /// Print the manifest's entries (one JSON line each) without reading payload.
    #[arg(long, env = "TAKBAK_LIST", conflicts_with_all = ["root", "identity", "record", "expect_sha256"])]
    pub(crate) list: bool,
    #[command(flatten)]
    pub(crate) common: takbak::tool::CommonFlags,
}

impl Args {
    /// Converts the flags into the library's mode and common options.
    pub(crate) fn into_parts(self) -> (takbak::tool::RestoreMode, takbak::tool::Common) {
        use takbak::tool::{RestoreMode, TreeArgs};
        let mode = if self.list {
            RestoreMode::List
        } else {
            RestoreMode::Restore {
                tree: TreeArgs {
                    root: self.root.unwrap_or_default(),
                    identity: self.identity.unwrap_or_default(),
                    record: self.record.unwrap_or_default(),
                },
                expect_sha256: self.expect_sha256,
            }
        };
        let common = self.common.into_common(self.archive);
        (mode, common)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn args_are_consistent() {
        Args::command().debug_assert();
    }

    #[test]
    fn restore_needs_root_identity_and_record() {
        assert!(Args::try_parse_from(["restore-volume", "--archive", "/b/x.takbak"]).is_err());
        let a =
            Args::try_parse_from(["restore-volume", "--list", "--archive", "/b/x.takbak"]).unwrap();
        assert!(matches!(a.into_parts().0, takbak::tool::RestoreMode::List));
    }
}
