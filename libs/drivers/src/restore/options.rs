//! `RestoreJob.spec.options` per driver, with upstream's tolerance rules.
//!
//! ```text
//!  spec.options (free-form JSON) ─► typed view of the driver
//!     CNPG, MariaDB     permissive: a decode error ─► Warning MalformedOptions, every default
//!     Etcd, FoundationDB  a decode error ─► Warning MalformedOptions + terminal failure
//!     MongoDB           permissive unless the object carries a `recoveryTime` key (terminal);
//!                       keys it does not know ─► one Warning UnknownRestoreOption each
//!     Velero            a decode error ─► terminal `invalid restore options: …`
//!     Job, Altinity     no options
//! ```
//!
//! Decoding follows Go's `encoding/json` into a struct, which upstream uses: a missing or `null`
//! blob, and `null` fields, mean defaults; a key matches a field exactly or, failing that,
//! case-insensitively; unknown keys are ignored; a value of the wrong type (a string for an integer,
//! a fraction, an array for the object) is an error, and on any error upstream keeps none of the
//! decoded fields. Non-positive timeouts fall back to the driver's default. The error detail is
//! ours (Go's text names Go types); the surrounding messages are upstream's.

use std::time::Duration;

use api::contract::event_reasons;
use serde_json::{Map, Value as Json};

use super::Event;

/// Default restore deadline of every driver that has one.
pub const DEFAULT_RESTORE_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Default CNPG WAL-archive gate deadline.
pub const DEFAULT_WAL_ARCHIVE_TIMEOUT: Duration = Duration::from_secs(180);
/// Default deadline of the safety backup taken before an in-place CNPG purge.
pub const DEFAULT_SAFETY_BACKUP_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Default deadline for the WAL archive to reach a CNPG recovery target that lay past it, after a
/// WAL switch was forced: CloudNativePG's `archive_timeout` (5 minutes) plus a minute, so even a
/// switch Backup that cannot run leaves PostgreSQL's own timed switch time to land.
pub const DEFAULT_WAL_SWITCH_TIMEOUT: Duration = Duration::from_secs(6 * 60);

/// A decode error, already worded for the messages (`decode restoreJob.spec.options: …`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub String);

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Options that parsed, with the Events their parsing produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed<T> {
    /// The options (defaults where absent or malformed).
    pub options: T,
    /// Events to record on the RestoreJob.
    pub events: Vec<Event>,
}

/// Options that end the restore: the failure message and the Events to record with it.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejected {
    /// The `Failed` message.
    pub message: String,
    /// Events to record.
    pub events: Vec<Event>,
}

/// The value of `key` in `obj`: the exact key, else the first case-insensitive match (Go's rule).
fn field<'a>(obj: &'a Map<String, Json>, key: &str) -> Option<&'a Json> {
    obj.get(key)
        .or_else(|| {
            obj.iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(key))
                .map(|(_, v)| v)
        })
        .filter(|v| !v.is_null())
}

/// The blob as an object: `None` for no options (absent or `null`), an error for any other type.
fn object(options: Option<&Json>) -> Result<Option<&Map<String, Json>>, DecodeError> {
    match options {
        None | Some(Json::Null) => Ok(None),
        Some(Json::Object(m)) => Ok(Some(m)),
        Some(other) => Err(DecodeError(format!(
            "decode restoreJob.spec.options: expected a JSON object, got {}",
            type_name(other)
        ))),
    }
}

fn type_name(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

fn wrong(key: &str, want: &str, got: &Json) -> DecodeError {
    DecodeError(format!(
        "decode restoreJob.spec.options: {key}: expected {want}, got {}",
        type_name(got)
    ))
}

fn int(obj: &Map<String, Json>, key: &str) -> Result<Option<i64>, DecodeError> {
    match field(obj, key) {
        None => Ok(None),
        Some(v) => v
            .as_i64()
            .map(Some)
            .ok_or_else(|| wrong(key, "an integer", v)),
    }
}

fn string(obj: &Map<String, Json>, key: &str) -> Result<Option<String>, DecodeError> {
    match field(obj, key) {
        None => Ok(None),
        Some(Json::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(wrong(key, "a string", v)),
    }
}

fn boolean(obj: &Map<String, Json>, key: &str) -> Result<Option<bool>, DecodeError> {
    match field(obj, key) {
        None => Ok(None),
        Some(Json::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(wrong(key, "a boolean", v)),
    }
}

/// A timeout in seconds, the default when unset or not positive.
fn timeout(seconds: Option<i64>, default: Duration) -> Duration {
    match seconds {
        Some(s) if s > 0 => Duration::from_secs(s.unsigned_abs()),
        _ => default,
    }
}

/// The permissive fallback's Event.
fn malformed_permissive(e: &DecodeError) -> Event {
    Event::warning(
        event_reasons::MALFORMED_OPTIONS,
        format!("spec.options is not valid JSON; falling back to defaults: {e}"),
    )
}

/// One Warning `UnknownRestoreOption` per key of the blob that `driver` does not know, in sorted
/// order. Keys are compared exactly, so a key that only differs in case is both warned about and
/// decoded (upstream's rule for MongoDB, applied to every driver that reads options).
fn unknown_keys(options: Option<&Json>, driver: &str, known: &[&str]) -> Vec<Event> {
    let Some(o) = options.and_then(Json::as_object) else {
        return Vec::new();
    };
    let mut unknown: Vec<&String> = o.keys().filter(|k| !known.contains(&k.as_str())).collect();
    unknown.sort();
    unknown
        .into_iter()
        .map(|k| {
            Event::warning(
                event_reasons::UNKNOWN_RESTORE_OPTION,
                format!(
                    "spec.options.{k} is not a recognised {driver} restore option and was ignored (known: {})",
                    known.join(", ")
                ),
            )
        })
        .collect()
}

/// Ours: one Warning `RestoreOptionIgnored` per timeout that decodes but is not positive (the
/// driver's default applies, as upstream's rule says, and the Event says so instead of nothing).
fn non_positive_timeouts(options: Option<&Json>, timeouts: &[(&str, Duration)]) -> Vec<Event> {
    let Some(o) = options.and_then(Json::as_object) else {
        return Vec::new();
    };
    timeouts
        .iter()
        .filter_map(|(key, default)| {
            let v = field(o, key)?.as_i64().filter(|v| *v <= 0)?;
            Some(Event::warning(
                event_reasons::RESTORE_OPTION_IGNORED,
                format!(
                    "spec.options.{key} is {v}, not a positive number of seconds; the default {} applies",
                    crate::status::go_duration(*default)
                ),
            ))
        })
        .collect()
}

/// The CNPG driver's option keys.
pub const CNPG_KEYS: [&str; 6] = [
    "recoveryTime",
    "restoreTimeoutSeconds",
    "walArchiveTimeoutSeconds",
    "skipSafetyBackup",
    "safetyBackupTimeoutSeconds",
    "walSwitchTimeoutSeconds",
];

/// The option keys of MariaDB, Etcd and FoundationDB.
pub const TIMEOUT_KEYS: [&str; 1] = ["restoreTimeoutSeconds"];

/// CNPG restore options.
#[derive(Debug, Clone, PartialEq)]
pub struct CnpgOptions {
    /// `recoveryTime`, passed to the chart untouched (empty: replay to the end of the archive).
    pub recovery_time: String,
    /// `restoreTimeoutSeconds` (default 30 minutes), from `startedAt`.
    pub restore_timeout: Duration,
    /// `walArchiveTimeoutSeconds` (default 3 minutes), from the gate's first `False`.
    pub wal_archive_timeout: Duration,
    /// `skipSafetyBackup` (ours, default false): do not back up the live database before an
    /// in-place purge.
    pub skip_safety_backup: bool,
    /// `safetyBackupTimeoutSeconds` (ours, default 30 minutes), from the safety backup's first
    /// `False`.
    pub safety_backup_timeout: Duration,
    /// `walSwitchTimeoutSeconds` (ours, default 6 minutes): how long a `recoveryTime` past the
    /// newest archived point may wait for the archive to reach it, from
    /// `RecoveryTargetArchived`'s first `False`.
    pub wal_switch_timeout: Duration,
}

impl Default for CnpgOptions {
    fn default() -> Self {
        Self {
            recovery_time: String::new(),
            restore_timeout: DEFAULT_RESTORE_TIMEOUT,
            wal_archive_timeout: DEFAULT_WAL_ARCHIVE_TIMEOUT,
            skip_safety_backup: false,
            safety_backup_timeout: DEFAULT_SAFETY_BACKUP_TIMEOUT,
            wal_switch_timeout: DEFAULT_WAL_SWITCH_TIMEOUT,
        }
    }
}

fn decode_cnpg(options: Option<&Json>) -> Result<CnpgOptions, DecodeError> {
    let d = CnpgOptions::default();
    let Some(o) = object(options)? else {
        return Ok(d);
    };
    Ok(CnpgOptions {
        recovery_time: string(o, "recoveryTime")?.unwrap_or_default(),
        restore_timeout: timeout(int(o, "restoreTimeoutSeconds")?, d.restore_timeout),
        wal_archive_timeout: timeout(int(o, "walArchiveTimeoutSeconds")?, d.wal_archive_timeout),
        skip_safety_backup: boolean(o, "skipSafetyBackup")?.unwrap_or(false),
        safety_backup_timeout: timeout(
            int(o, "safetyBackupTimeoutSeconds")?,
            d.safety_backup_timeout,
        ),
        wal_switch_timeout: timeout(int(o, "walSwitchTimeoutSeconds")?, d.wal_switch_timeout),
    })
}

/// CNPG: permissive.
pub fn cnpg(options: Option<&Json>) -> Parsed<CnpgOptions> {
    let mut parsed = match decode_cnpg(options) {
        Ok(decoded) => Parsed {
            options: decoded,
            events: non_positive_timeouts(
                options,
                &[
                    ("restoreTimeoutSeconds", DEFAULT_RESTORE_TIMEOUT),
                    ("walArchiveTimeoutSeconds", DEFAULT_WAL_ARCHIVE_TIMEOUT),
                    ("safetyBackupTimeoutSeconds", DEFAULT_SAFETY_BACKUP_TIMEOUT),
                    ("walSwitchTimeoutSeconds", DEFAULT_WAL_SWITCH_TIMEOUT),
                ],
            ),
        },
        Err(e) => Parsed {
            options: CnpgOptions::default(),
            events: vec![malformed_permissive(&e)],
        },
    };
    parsed
        .events
        .extend(unknown_keys(options, "CNPG", &CNPG_KEYS));
    parsed
}

/// The restore deadline of MariaDB, Etcd and FoundationDB.
fn decode_timeout(options: Option<&Json>) -> Result<Duration, DecodeError> {
    let seconds = match object(options)? {
        None => None,
        Some(o) => int(o, "restoreTimeoutSeconds")?,
    };
    Ok(timeout(seconds, DEFAULT_RESTORE_TIMEOUT))
}

/// The restore deadline every driver reads from `restoreTimeoutSeconds` (default 30 minutes),
/// leniently: what a driver would reject or warn about is its own business, this is the deadline
/// a restore that waits for its object store is held to.
pub fn restore_deadline(options: Option<&Json>) -> Duration {
    decode_timeout(options).unwrap_or(DEFAULT_RESTORE_TIMEOUT)
}

/// MariaDB: permissive; the restore deadline.
pub fn mariadb(options: Option<&Json>) -> Parsed<Duration> {
    let mut parsed = match decode_timeout(options) {
        Ok(deadline) => Parsed {
            options: deadline,
            events: non_positive_timeouts(
                options,
                &[("restoreTimeoutSeconds", DEFAULT_RESTORE_TIMEOUT)],
            ),
        },
        Err(e) => Parsed {
            options: DEFAULT_RESTORE_TIMEOUT,
            events: vec![malformed_permissive(&e)],
        },
    };
    parsed
        .events
        .extend(unknown_keys(options, "MariaDB", &TIMEOUT_KEYS));
    parsed
}

/// Etcd and FoundationDB: a decode error is terminal.
fn strict_timeout(options: Option<&Json>, type_name: &str) -> Result<Duration, Rejected> {
    decode_timeout(options).map_err(|e| Rejected {
        message: format!(
            "malformed restoreJob.spec.options: {e} (clear the field or supply a valid {type_name} JSON object)"
        ),
        events: vec![Event::warning(
            event_reasons::MALFORMED_OPTIONS,
            format!("spec.options is not valid JSON: {e}"),
        )],
    })
}

/// Etcd: the restore deadline, or the terminal rejection.
pub fn etcd(options: Option<&Json>) -> Result<Duration, Rejected> {
    strict_timeout(options, "EtcdRestoreOptions")
}

/// FoundationDB: the restore deadline, or the terminal rejection.
pub fn foundationdb(options: Option<&Json>) -> Result<Duration, Rejected> {
    strict_timeout(options, "FoundationDBRestoreOptions")
}

/// MongoDB's recognised keys, in upstream's order (it prints them in the Event).
pub const MONGODB_KEYS: [&str; 2] = ["recoveryTime", "restoreTimeoutSeconds"];

/// Percona's point-in-time target: `{type: date, date: "YYYY-MM-DD HH:MM:SS"}` in UTC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MongoPitr {
    /// `date` in the operator's format.
    pub date: String,
    /// The instant it names.
    pub at: k8s_openapi::jiff::Timestamp,
}

/// MongoDB restore options.
#[derive(Debug, Clone, PartialEq)]
pub struct MongoOptions {
    /// The point-in-time target; `None` restores the snapshot as taken.
    pub pitr: Option<MongoPitr>,
    /// `restoreTimeoutSeconds` (default 30 minutes).
    pub restore_timeout: Duration,
}

/// MongoDB: permissive unless a `recoveryTime` key is present; Events for unknown keys; the
/// recoveryTime must be RFC 3339 (terminal otherwise: a silent wrong-point restore is worse).
pub fn mongodb(options: Option<&Json>) -> Result<Parsed<MongoOptions>, Rejected> {
    let mut events = Vec::new();
    let decoded = object(options).and_then(|o| match o {
        None => Ok((String::new(), None)),
        Some(o) => Ok((
            string(o, "recoveryTime")?.unwrap_or_default(),
            int(o, "restoreTimeoutSeconds")?,
        )),
    });
    let (recovery_time, seconds) = match decoded {
        Ok(v) => v,
        Err(e) => {
            let carries_recovery_time = options
                .and_then(Json::as_object)
                .is_some_and(|o| o.contains_key("recoveryTime"));
            if carries_recovery_time {
                return Err(Rejected {
                    message: format!(
                        "restoreJob.spec.options carries a recoveryTime but is malformed ({e}); refusing to fall back to a plain snapshot restore, which would silently ignore the requested point-in-time"
                    ),
                    events,
                });
            }
            events.push(malformed_permissive(&e));
            (String::new(), None)
        }
    };
    // Unknown keys are matched exactly (upstream diffs the raw keys against the known set).
    events.extend(unknown_keys(options, "MongoDB", &MONGODB_KEYS));
    if seconds.is_some_and(|s| s <= 0) {
        events.extend(non_positive_timeouts(
            options,
            &[("restoreTimeoutSeconds", DEFAULT_RESTORE_TIMEOUT)],
        ));
    }
    let pitr = if recovery_time.is_empty() {
        None
    } else {
        let t = parse_rfc3339(&recovery_time).map_err(|e| Rejected {
            message: format!(
                "invalid restoreJob.spec.options.recoveryTime: recoveryTime {recovery_time:?} is not a valid RFC3339 timestamp: {e}"
            ),
            events: events.clone(),
        })?;
        Some(MongoPitr {
            date: t.strftime("%Y-%m-%d %H:%M:%S").to_string(),
            at: t,
        })
    };
    Ok(Parsed {
        options: MongoOptions {
            pitr,
            restore_timeout: timeout(seconds, DEFAULT_RESTORE_TIMEOUT),
        },
        events,
    })
}

/// Parses an RFC 3339 timestamp (a `T` separator and an explicit offset or `Z`, as Go's
/// `time.RFC3339` layout requires).
pub fn parse_rfc3339(s: &str) -> Result<k8s_openapi::jiff::Timestamp, String> {
    let b = s.as_bytes();
    if b.len() < 20 || b[10] != b'T' {
        return Err("expected the form 2006-01-02T15:04:05Z07:00".into());
    }
    s.parse::<k8s_openapi::jiff::Timestamp>()
        .map_err(|e| e.to_string())
}

/// Velero restore options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VeleroOptions {
    /// `targetNamespace` (empty: the Backup's namespace).
    pub target_namespace: String,
    /// `failIfTargetExists` (default true).
    pub fail_if_target_exists: bool,
    /// `keepOriginalPVC` (default true).
    pub keep_original_pvc: bool,
    /// `keepOriginalIpAndMac` (default true).
    pub keep_original_ip_and_mac: bool,
}

impl Default for VeleroOptions {
    fn default() -> Self {
        Self {
            target_namespace: String::new(),
            fail_if_target_exists: true,
            keep_original_pvc: true,
            keep_original_ip_and_mac: true,
        }
    }
}

/// Velero: a decode error is terminal (`invalid restore options: …`, no Event).
pub fn velero(options: Option<&Json>) -> Result<VeleroOptions, Rejected> {
    let decode = || -> Result<VeleroOptions, DecodeError> {
        let d = VeleroOptions::default();
        let Some(o) = object(options)? else {
            return Ok(d);
        };
        Ok(VeleroOptions {
            target_namespace: string(o, "targetNamespace")?.unwrap_or_default(),
            fail_if_target_exists: boolean(o, "failIfTargetExists")?
                .unwrap_or(d.fail_if_target_exists),
            keep_original_pvc: boolean(o, "keepOriginalPVC")?.unwrap_or(d.keep_original_pvc),
            keep_original_ip_and_mac: boolean(o, "keepOriginalIpAndMac")?
                .unwrap_or(d.keep_original_ip_and_mac),
        })
    };
    decode().map_err(|e| Rejected {
        message: format!(
            "invalid restore options: {}",
            e.0.replacen(
                "decode restoreJob.spec.options",
                "failed to parse restore options",
                1
            )
        ),
        events: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    type Notes = Vec<(&'static str, String)>;

    fn notes(events: &[Event]) -> Notes {
        events.iter().map(|e| (e.reason, e.note.clone())).collect()
    }

    #[test]
    fn cnpg_is_permissive() {
        let cases: Vec<(Option<Json>, CnpgOptions, Notes)> = vec![
            (None, CnpgOptions::default(), vec![]),
            (Some(json!(null)), CnpgOptions::default(), vec![]),
            (
                Some(json!({"recoveryTime": "2026-01-01T00:00:00Z", "restoreTimeoutSeconds": 300,
                            "walArchiveTimeoutSeconds": 60, "skipSafetyBackup": true,
                            "safetyBackupTimeoutSeconds": 120, "walSwitchTimeoutSeconds": 45,
                            "someFutureKey": {"x": 1}})),
                CnpgOptions {
                    recovery_time: "2026-01-01T00:00:00Z".into(),
                    restore_timeout: Duration::from_secs(300),
                    wal_archive_timeout: Duration::from_secs(60),
                    skip_safety_backup: true,
                    safety_backup_timeout: Duration::from_secs(120),
                    wal_switch_timeout: Duration::from_secs(45),
                },
                // Ours: the key it ignores is named.
                vec![(
                    "UnknownRestoreOption",
                    "spec.options.someFutureKey is not a recognised CNPG restore option and was ignored (known: recoveryTime, restoreTimeoutSeconds, walArchiveTimeoutSeconds, skipSafetyBackup, safetyBackupTimeoutSeconds, walSwitchTimeoutSeconds)".into(),
                )],
            ),
            (
                // Go matches keys case-insensitively; non-positive timeouts mean the default.
                Some(json!({"RECOVERYTIME": "x", "restoreTimeoutSeconds": 0,
                            "walArchiveTimeoutSeconds": -5})),
                CnpgOptions {
                    recovery_time: "x".into(),
                    ..CnpgOptions::default()
                },
                // Ours: the defaulted timeouts and the inexact key are named (and still decoded).
                vec![
                    ("RestoreOptionIgnored", "spec.options.restoreTimeoutSeconds is 0, not a positive number of seconds; the default 30m0s applies".into()),
                    ("RestoreOptionIgnored", "spec.options.walArchiveTimeoutSeconds is -5, not a positive number of seconds; the default 3m0s applies".into()),
                    ("UnknownRestoreOption", "spec.options.RECOVERYTIME is not a recognised CNPG restore option and was ignored (known: recoveryTime, restoreTimeoutSeconds, walArchiveTimeoutSeconds, skipSafetyBackup, safetyBackupTimeoutSeconds, walSwitchTimeoutSeconds)".into()),
                ],
            ),
            (
                // A wrong type anywhere drops every decoded field (upstream returns the zero value).
                Some(json!({"recoveryTime": "2026-01-01T00:00:00Z", "restoreTimeoutSeconds": "5h"})),
                CnpgOptions::default(),
                vec![(
                    "MalformedOptions",
                    "spec.options is not valid JSON; falling back to defaults: decode restoreJob.spec.options: restoreTimeoutSeconds: expected an integer, got a string".into(),
                )],
            ),
            (
                Some(json!([1])),
                CnpgOptions::default(),
                vec![(
                    "MalformedOptions",
                    "spec.options is not valid JSON; falling back to defaults: decode restoreJob.spec.options: expected a JSON object, got an array".into(),
                )],
            ),
            (
                Some(json!({"restoreTimeoutSeconds": 1.5})),
                CnpgOptions::default(),
                vec![(
                    "MalformedOptions",
                    "spec.options is not valid JSON; falling back to defaults: decode restoreJob.spec.options: restoreTimeoutSeconds: expected an integer, got a number".into(),
                )],
            ),
        ];
        for (input, want, want_events) in cases {
            let got = cnpg(input.as_ref());
            assert_eq!(got.options, want, "{input:?}");
            assert_eq!(notes(&got.events), want_events, "{input:?}");
        }
    }

    #[test]
    fn mariadb_is_permissive_and_etcd_and_foundationdb_are_terminal() {
        let ok = json!({"restoreTimeoutSeconds": 600});
        assert_eq!(mariadb(Some(&ok)).options, Duration::from_secs(600));
        assert_eq!(etcd(Some(&ok)), Ok(Duration::from_secs(600)));
        assert_eq!(foundationdb(None), Ok(DEFAULT_RESTORE_TIMEOUT));
        let bad = json!({"restoreTimeoutSeconds": "5h"});
        let m = mariadb(Some(&bad));
        assert_eq!(m.options, DEFAULT_RESTORE_TIMEOUT);
        assert_eq!(m.events[0].reason, "MalformedOptions");
        assert_eq!(
            etcd(Some(&bad)),
            Err(Rejected {
                message: "malformed restoreJob.spec.options: decode restoreJob.spec.options: restoreTimeoutSeconds: expected an integer, got a string (clear the field or supply a valid EtcdRestoreOptions JSON object)".into(),
                events: vec![Event::warning(
                    "MalformedOptions",
                    "spec.options is not valid JSON: decode restoreJob.spec.options: restoreTimeoutSeconds: expected an integer, got a string"
                )],
            })
        );
        assert!(foundationdb(Some(&bad)).unwrap_err().message.ends_with(
            "(clear the field or supply a valid FoundationDBRestoreOptions JSON object)"
        ));
    }

    #[test]
    fn mongodb_pitr_unknown_keys_and_the_recovery_time_rule() {
        let p = mongodb(Some(&json!({"recoveryTime": "2026-08-05T12:30:00+02:00",
                                      "restoreTimeoutSeconds": 60, "recoverytime": "x", "zeta": 1})))
        .unwrap();
        assert_eq!(
            p.options,
            MongoOptions {
                pitr: Some(MongoPitr {
                    date: "2026-08-05 10:30:00".into(),
                    at: "2026-08-05T10:30:00Z".parse().unwrap(),
                }),
                restore_timeout: Duration::from_secs(60),
            }
        );
        assert_eq!(
            notes(&p.events),
            vec![
                ("UnknownRestoreOption", "spec.options.recoverytime is not a recognised MongoDB restore option and was ignored (known: recoveryTime, restoreTimeoutSeconds)".into()),
                ("UnknownRestoreOption", "spec.options.zeta is not a recognised MongoDB restore option and was ignored (known: recoveryTime, restoreTimeoutSeconds)".into()),
            ]
        );
        // Malformed without a recoveryTime key: defaults and the event.
        let p = mongodb(Some(&json!({"restoreTimeoutSeconds": "x"}))).unwrap();
        assert_eq!(
            (
                p.options.pitr,
                p.options.restore_timeout,
                p.events[0].reason
            ),
            (None, DEFAULT_RESTORE_TIMEOUT, "MalformedOptions")
        );
        // Malformed with a recoveryTime key (of any type): terminal.
        let r = mongodb(Some(&json!({"recoveryTime": 20260805}))).unwrap_err();
        assert_eq!(
            r.message,
            "restoreJob.spec.options carries a recoveryTime but is malformed (decode restoreJob.spec.options: recoveryTime: expected a string, got a number); refusing to fall back to a plain snapshot restore, which would silently ignore the requested point-in-time"
        );
        // A string that is not RFC 3339: terminal.
        let r = mongodb(Some(&json!({"recoveryTime": "2026-08-05 12:30:00"}))).unwrap_err();
        assert!(
            r.message.starts_with(
                "invalid restoreJob.spec.options.recoveryTime: recoveryTime \"2026-08-05 12:30:00\" is not a valid RFC3339 timestamp: "
            ),
            "{}",
            r.message
        );
        assert_eq!(mongodb(None).unwrap().options.pitr, None);
    }

    #[test]
    fn velero_defaults_true_and_rejects_bad_types() {
        assert_eq!(velero(None), Ok(VeleroOptions::default()));
        assert_eq!(
            velero(Some(
                &json!({"targetNamespace": "t2", "failIfTargetExists": false,
                                "keepOriginalPVC": false})
            )),
            Ok(VeleroOptions {
                target_namespace: "t2".into(),
                fail_if_target_exists: false,
                keep_original_pvc: false,
                keep_original_ip_and_mac: true,
            })
        );
        assert_eq!(
            velero(Some(&json!({"keepOriginalPVC": "yes"}))),
            Err(Rejected {
                message: "invalid restore options: failed to parse restore options: keepOriginalPVC: expected a boolean, got a string".into(),
                events: vec![],
            })
        );
    }

    #[test]
    fn rfc3339_needs_the_t_and_an_offset() {
        assert!(parse_rfc3339("2026-01-01T00:00:00Z").is_ok());
        assert!(parse_rfc3339("2026-01-01T00:00:00.5+01:00").is_ok());
        assert!(parse_rfc3339("2026-01-01 00:00:00Z").is_err());
        assert!(parse_rfc3339("2026-01-01T00:00:00").is_err());
        assert!(parse_rfc3339("yesterday").is_err());
    }

    #[test]
    fn ignored_keys_and_non_positive_timeouts_are_named() {
        let p = mariadb(Some(&json!({"restoreTimeoutSeconds": -5, "retries": 3})));
        assert_eq!(p.options, DEFAULT_RESTORE_TIMEOUT);
        assert_eq!(
            notes(&p.events),
            vec![
                ("RestoreOptionIgnored", "spec.options.restoreTimeoutSeconds is -5, not a positive number of seconds; the default 30m0s applies".into()),
                ("UnknownRestoreOption", "spec.options.retries is not a recognised MariaDB restore option and was ignored (known: restoreTimeoutSeconds)".into()),
            ]
        );
        // A decode error says so once; the non-positive check does not add to it.
        let p = mariadb(Some(&json!({"restoreTimeoutSeconds": "0"})));
        assert_eq!(
            p.events.iter().map(|e| e.reason).collect::<Vec<_>>(),
            ["MalformedOptions"]
        );
        let p = cnpg(Some(
            &json!({"walArchiveTimeoutSeconds": 0, "skipSafetyBackup": true}),
        ));
        assert_eq!(
            notes(&p.events),
            vec![("RestoreOptionIgnored", "spec.options.walArchiveTimeoutSeconds is 0, not a positive number of seconds; the default 3m0s applies".into())]
        );
        let p = mongodb(Some(&json!({"restoreTimeoutSeconds": 0}))).unwrap();
        assert_eq!(
            p.events.iter().map(|e| e.reason).collect::<Vec<_>>(),
            ["RestoreOptionIgnored"]
        );
        // Well-formed options: no Event.
        assert!(
            mariadb(Some(&json!({"restoreTimeoutSeconds": 60})))
                .events
                .is_empty()
        );
        assert!(
            cnpg(Some(&json!({"recoveryTime": "2026-01-01T00:00:00Z"})))
                .events
                .is_empty()
        );
    }
}
