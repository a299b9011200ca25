//! Command-line arguments of `backup-volume` (every flag also reads an environment variable).

use std::path::PathBuf;

use clap::Parser;

/// Archive a quiesced, mounted application directory into a TAKBAK1 file, or verify/list one.
///
/// Prints exactly one JSON result object on stdout; exit codes are listed in docs/takbak1.md.
#[derive(Debug, Parser)]
#[command(name = "backup-volume", version)]
pub(crate) struct Args {
    /// Source directory (the quiesced application filesystem mount). Required for a backup.
    #[arg(long, env = "TAKBAK_ROOT", required_unless_present_any = ["verify", "list"])]
    pub(crate) root: Option<PathBuf>,
    /// Archive file: created exclusively for a backup (must not exist, must be outside --root).
    #[arg(long, env = "TAKBAK_ARCHIVE")]
    pub(crate) archive: PathBuf,
    /// Identity JSON with exactly volume, generation, claimUID of the source. Required for a backup.
    #[arg(long, env = "TAKBAK_IDENTITY", required_unless_present_any = ["verify", "list"])]
    pub(crate) identity: Option<PathBuf>,
    /// Operator record JSON with purpose backup-quiesced. Required for a backup.
    #[arg(long, env = "TAKBAK_RECORD", required_unless_present_any = ["verify", "list"])]
    pub(crate) record: Option<PathBuf>,
    /// Re-read the whole archive, check every checksum and the manifest, print its SHA-256.
    #[arg(long, env = "TAKBAK_VERIFY", conflicts_with_all = ["list", "root", "identity", "record"])]
    pub(crate) verify: bool,
    /// With --verify: the archive's SHA-256 as recorded independently at backup time (64 hex
    /// digits); a different archive fails with reason archive_sha256_mismatch.
    #[arg(long, env = "TAKBAK_EXPECT_SHA256", conflicts_with_all = ["root", "identity", "record", "list"], value_parser = takbak::tool::parse_sha256_hex)]
    pub(crate) expect_sha256: Option<[u8; 32]>,
    /// Print the manifest's entries (one JSON line each) without reading payload.
    #[arg(long, env = "TAKBAK_LIST", conflicts_with_all = ["root", "identity", "record"])]
    pub(crate) list: bool,
    #[command(flatten)]
    pub(crate) common: takbak::tool::CommonFlags,
}

impl Args {
    /// Converts the flags into the library's mode and common options.
    pub(crate) fn into_parts(self) -> (takbak::tool::BackupMode, takbak::tool::Common) {
        use takbak::tool::{BackupMode, TreeArgs};
        let mode = if self.verify {
            BackupMode::Verify {
                expect_sha256: self.expect_sha256,
            }
        } else if self.list {
            BackupMode::List
        } else {
            BackupMode::Backup(TreeArgs {
                root: self.root.unwrap_or_default(),
                identity: self.identity.unwrap_or_default(),
                record: self.record.unwrap_or_default(),
            })
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
    fn verify_needs_only_the_archive() {
        let a = Args::try_parse_from(["backup-volume", "--verify", "--archive", "/b/x.takbak"])
            .unwrap();
        assert!(matches!(
            a.into_parts().0,
            takbak::tool::BackupMode::Verify {
                expect_sha256: None
            }
        ));
        assert!(Args::try_parse_from(["backup-volume", "--archive", "/b/x.takbak"]).is_err());
    }

    #[test]
    fn expect_sha256_is_64_hex_digits_and_only_for_verify() {
        let hex = "aB".repeat(32);
        let a = Args::try_parse_from([
            "backup-volume",
            "--verify",
            "--archive",
            "/b/x.takbak",
            "--expect-sha256",
            &hex,
        ])
        .unwrap();
        assert!(matches!(
            a.into_parts().0,
            takbak::tool::BackupMode::Verify {
                expect_sha256: Some(d)
            } if d == [0xab; 32]
        ));
        for bad in ["ab".repeat(31), "zz".repeat(32), format!("{hex}00")] {
            let e = Args::try_parse_from([
                "backup-volume",
                "--verify",
                "--archive",
                "/b/x.takbak",
                "--expect-sha256",
                &bad,
            ])
            .unwrap_err()
            .to_string();
            assert!(e.contains("--expect-sha256"), "{e}");
        }
        let without_verify = Args::try_parse_from([
            "backup-volume",
            "--root",
            "/s",
            "--archive",
            "/b/x.takbak",
            "--identity",
            "/i",
            "--record",
            "/r",
            "--expect-sha256",
            &hex,
        ]);
        assert!(without_verify.is_err());
        let with_list = Args::try_parse_from([
            "backup-volume",
            "--list",
            "--archive",
            "/b/x.takbak",
            "--expect-sha256",
            &hex,
        ]);
        assert!(with_list.is_err());
    }
}
