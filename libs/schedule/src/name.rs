//! The name of the BackupJob a Plan creates for one slot.
//!
//! Upstream names it `<plan>-<minutes since the epoch>` (e.g. `nightly-28401240` for
//! 2024-01-01T02:00Z), and dedups by that name alone: two creates for one slot collide with
//! AlreadyExists. We keep that name whenever it is at most [`MAX_JOB_NAME_LEN`] characters.
//!
//! A longer Plan name would make a longer BackupJob name, and the drivers write the BackupJob
//! name into a label value (the owned-by label on every operator-side object), which
//! Kubernetes limits to 63 characters; upstream's create would succeed and the backup would
//! then fail. So a name that would exceed the limit becomes
//! `<start of the plan name>-<8 hex of SHA-256(plan name)>-<minutes>`, cut to exactly the limit:
//! still deterministic (same Plan and slot, same name, so the dedup still works), still
//! readable, and distinct for Plans that share a long prefix.

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

/// The longest BackupJob name a Plan creates: the limit of a Kubernetes label value.
pub const MAX_JOB_NAME_LEN: usize = 63;

/// The BackupJob name for `plan`'s slot at `slot`.
pub fn backup_job_name(plan: &str, slot: DateTime<Utc>) -> String {
    // Go's integer division truncates toward zero; so does Rust's.
    let minutes = slot.timestamp() / 60;
    let plain = format!("{plan}-{minutes}");
    if plain.len() <= MAX_JOB_NAME_LEN {
        return plain;
    }
    let digest = hex::encode(Sha256::digest(plan.as_bytes()));
    let suffix = format!("-{}-{minutes}", &digest[..8]);
    let room = MAX_JOB_NAME_LEN.saturating_sub(suffix.len());
    // Object names are ASCII, but cut on a character boundary regardless, and never leave a
    // '-' or '.' right before the suffix's '-' ("a.-b" is not a valid name).
    let cut = plan
        .char_indices()
        .map(|(i, c)| i + c.len_utf8())
        .take_while(|end| *end <= room)
        .last()
        .unwrap_or(0);
    let prefix = plan[..cut].trim_end_matches(['-', '.']);
    format!("{prefix}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn at(rfc3339: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(rfc3339).unwrap().to_utc()
    }

    #[test]
    fn short_plans_keep_upstreams_name() {
        let cases: &[(&str, &str, &str)] = &[
            ("test-plan", "2024-01-01T02:00:00Z", "test-plan-28401240"),
            ("nightly", "2024-01-01T02:00:59Z", "nightly-28401240"),
            ("nightly", "2024-01-01T02:01:00Z", "nightly-28401241"),
            ("p", "1970-01-01T00:00:00Z", "p-0"),
            // 54 + 1 + 8 = 63 characters: still the plain form.
            (
                &"a".repeat(54),
                "2024-01-01T02:00:00Z",
                &format!("{}-28401240", "a".repeat(54)),
            ),
        ];
        for (plan, slot, want) in cases {
            assert_eq!(backup_job_name(plan, at(slot)), *want, "{plan}");
        }
    }

    #[test]
    fn long_plans_are_shortened_deterministically() {
        let slot = at("2024-01-01T02:00:00Z");
        let long = format!("{}-backups", "production-postgres-cluster".repeat(3));
        let name = backup_job_name(&long, slot);
        let digest = hex::encode(Sha256::digest(long.as_bytes()));
        let expected = format!(
            "{}-{}-28401240",
            &long[..MAX_JOB_NAME_LEN - 18],
            &digest[..8]
        );
        assert_eq!(name, expected);
        assert_eq!(name.len(), MAX_JOB_NAME_LEN);
        assert_eq!(backup_job_name(&long, slot), name, "same input, same name");

        // Two Plans that differ only after the cut get different names.
        let other = format!("{long}-2");
        assert_ne!(backup_job_name(&other, slot), name);

        // The longest Plan name Kubernetes allows still fits.
        let max = "x".repeat(253);
        assert_eq!(backup_job_name(&max, slot).len(), MAX_JOB_NAME_LEN);
    }

    #[test]
    fn cut_never_leaves_a_separator_before_the_suffix() {
        let slot = at("2024-01-01T02:00:00Z");
        // The 44th and 45th characters, the last ones that fit, are '-' and '.'.
        let plan = format!("{}-.{}", "a".repeat(43), "b".repeat(30));
        let name = backup_job_name(&plan, slot);
        assert!(name.starts_with(&format!("{}-", "a".repeat(43))), "{name}");
        assert!(
            !name.contains("-.") && !name.contains(".-") && !name.contains("--"),
            "{name}"
        );
    }
}
