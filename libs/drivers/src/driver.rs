//! The strategy kinds this project drives, as one type: the backup-runner dispatches a BackupJob
//! and cleans up a deleted Backup by it, the restore-orchestrator dispatches a RestoreJob by it.
//! A kind this version does not know is refused where it is read (`Driver::from_kind` is `None`),
//! so every `match` on a driver is exhaustive and a new driver cannot be forgotten in one of them.

use std::fmt;

/// A strategy kind of `strategy.backups.cozystack.io`, in upstream's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Driver {
    /// Generic batch Job.
    Job,
    /// Velero (VMInstance / VMDisk).
    Velero,
    /// CloudNativePG with barman-cloud.
    Cnpg,
    /// clickhouse-backup.
    Altinity,
    /// mariadb-operator.
    MariaDb,
    /// Percona Server for MongoDB.
    MongoDb,
    /// FoundationDB operator.
    FoundationDb,
    /// etcd-operator.
    Etcd,
}

impl Driver {
    /// Every driver, in upstream's order (that of `api::contract::SUPPORTED_STRATEGY_KINDS`).
    pub const ALL: [Driver; 8] = [
        Driver::Job,
        Driver::Velero,
        Driver::Cnpg,
        Driver::Altinity,
        Driver::MariaDb,
        Driver::MongoDb,
        Driver::FoundationDb,
        Driver::Etcd,
    ];

    /// The driver of a strategy kind, if it is one of ours.
    pub fn from_kind(kind: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.kind() == kind)
    }

    /// The strategy kind.
    pub fn kind(self) -> &'static str {
        match self {
            Self::Job => "Job",
            Self::Velero => "Velero",
            Self::Cnpg => "CNPG",
            Self::Altinity => "Altinity",
            Self::MariaDb => "MariaDB",
            Self::MongoDb => "MongoDB",
            Self::FoundationDb => "FoundationDB",
            Self::Etcd => "Etcd",
        }
    }
}

impl fmt::Display for Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drivers_are_the_supported_kinds_in_upstreams_order() {
        let kinds: Vec<&str> = Driver::ALL.iter().map(|d| d.kind()).collect();
        assert_eq!(kinds, api::contract::SUPPORTED_STRATEGY_KINDS);
        for d in Driver::ALL {
            assert_eq!(Driver::from_kind(d.kind()), Some(d));
            assert_eq!(d.to_string(), d.kind());
        }
        assert_eq!(Driver::from_kind("cnpg"), None, "kinds are case-sensitive");
        assert_eq!(Driver::from_kind("Kafka"), None);
    }
}
