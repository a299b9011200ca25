//! Keeping a CNPG archive in step with a Plan: the barman `retentionPolicy` of the Plan's
//! ObjectStore.
//!
//! ```text
//!  the Plan's successful CNPG Backups the sweep keeps ─► the oldest one's base backup stop time
//!  ─► days since then, rounded up, plus one day of margin ─► "<N>d" (at least the template's)
//! ```
//!
//! Deleting a catalog CNPG Backup deletes only the cnpg `Backup` object; the base backup and its
//! WAL stay in the bucket until barman-cloud's own retention purges them. barman's policy is a
//! recovery window ("keep what is needed to recover to any point of the last N days"): it keeps
//! every base backup that stopped inside the window plus the newest one before it, and the WAL from
//! there on. It cannot express grandfather-father-son sparsity, so the rule is one-sided: the window
//! must reach back at least to the oldest base backup the catalog still lists, so barman never purges
//! what a catalog Backup (and the restore pre-flight's window) promises. The bucket may then hold
//! base backups the catalog no longer lists (those between the kept ones, and one older); never fewer.
//! The margin covers the time until the next sweep recomputes the value. The daemon applies the
//! longer of this and the strategy template's value, so an administrator's longer setting wins.

use api::backups::{Backup, Plan};
use chrono::{DateTime, Utc};

use crate::policy::Policy;
use crate::{Decision, Verdict, floors::backup_stop_time, human, name_of};

/// The strategy kind of CNPG Backups.
pub const STRATEGY_KIND: &str = "CNPG";
/// Days added to the computed window: the value must hold until the next sweep recomputes it.
pub const MARGIN_DAYS: u64 = 1;

/// The barman retention a Plan's ObjectStore should carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectStoreRetention {
    /// The ObjectStore (`postgres-<app>`, named after the Cluster).
    pub object_store: String,
    /// The oldest Backup the sweep keeps.
    pub oldest_kept: String,
    /// Window in days.
    pub days: u64,
}

impl ObjectStoreRetention {
    /// The `spec.retentionPolicy` string (`<days>d`).
    pub fn policy(&self) -> String {
        format!("{}d", self.days)
    }

    /// The value to apply given the strategy template's own `retentionPolicy`: the longer window
    /// (an unparsable template value is replaced).
    pub fn merged_with(&self, template: Option<&str>) -> String {
        drivers::cnpg::effective_retention(template, Some(&self.policy()))
            .unwrap_or_else(|| self.policy())
    }
}

pub use drivers::cnpg::policy_days;

/// Whole days from `oldest` to `now`, rounded up, plus [`MARGIN_DAYS`]; at least 1.
pub fn window_days(oldest: DateTime<Utc>, now: DateTime<Utc>) -> u64 {
    let seconds = u64::try_from((now - oldest).num_seconds()).unwrap_or(0);
    (seconds.div_ceil(86_400) + MARGIN_DAYS).max(1)
}

/// The ObjectStore retention of a CNPG Plan after this sweep: from the Plan's decisions (kept
/// ones) over its successful Backups. `None` for other drivers or when nothing is kept.
pub(crate) fn object_store_retention<'a>(
    plan: &Plan,
    decisions: &[Decision],
    backups: impl Iterator<Item = &'a Backup>,
    now: DateTime<Utc>,
) -> Option<ObjectStoreRetention> {
    let backups: Vec<&Backup> = backups.collect();
    if !backups
        .iter()
        .any(|b| b.spec.strategy_ref.kind == STRATEGY_KIND)
    {
        return None;
    }
    let (stop, name) = backups
        .iter()
        .filter(|b| {
            decisions
                .iter()
                .any(|d| d.name == name_of(&b.metadata) && d.verdict != Verdict::Delete)
        })
        .map(|b| (backup_stop_time(b), name_of(&b.metadata)))
        .min()?;
    Some(ObjectStoreRetention {
        object_store: drivers::cnpg::cluster_name(&plan.spec.application_ref.name),
        oldest_kept: name.to_owned(),
        days: window_days(stop, now),
    })
}

/// The policy in its spec's words, for messages (`keepLast 3, maxAge 720h0m0s`).
pub fn describe(policy: &Policy) -> String {
    let mut parts: Vec<String> = [
        ("keepLast", policy.keep_last),
        ("keepDaily", policy.keep_daily),
        ("keepWeekly", policy.keep_weekly),
        ("keepMonthly", policy.keep_monthly),
    ]
    .into_iter()
    .filter_map(|(field, n)| n.map(|n| format!("{field} {n}")))
    .collect();
    if let Some(max) = policy.max_age {
        parts.push(format!("maxAge {}", human(max)));
    }
    if parts.is_empty() {
        "no keep rule".to_owned()
    } else {
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn window_days_round_up_and_add_the_margin() {
        let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        let now = at("2026-03-10T12:00:00Z");
        let cases = [
            ("2026-03-10T12:00:00Z", 1),
            ("2026-03-10T11:59:59Z", 2),
            ("2026-03-09T12:00:00Z", 2),
            ("2026-03-09T11:00:00Z", 3),
            ("2026-02-08T12:00:00Z", 31),
            ("2026-03-11T00:00:00Z", 1), // a clock ahead of ours: still at least a day
        ];
        for (oldest, want) in cases {
            assert_eq!(window_days(at(oldest), now), want, "{oldest}");
        }
    }

    #[test]
    fn merged_with_the_template_keeps_the_longer_window() {
        let r = ObjectStoreRetention {
            object_store: "postgres-db".into(),
            oldest_kept: "nightly-1".into(),
            days: 40,
        };
        let cases = [
            (None, "40d"),
            (Some("30d"), "40d"),
            (Some("6w"), "6w"),
            (Some("2m"), "2m"),
            (Some("1m"), "40d"),
            (Some("40d"), "40d"),
            (Some("forever"), "40d"),
            (Some("0d"), "40d"),
        ];
        for (template, want) in cases {
            assert_eq!(r.merged_with(template), want, "{template:?}");
        }
        assert_eq!(policy_days("4w"), Some(28));
        assert_eq!(policy_days(""), None);
        assert_eq!(policy_days("d"), None);
    }
}
