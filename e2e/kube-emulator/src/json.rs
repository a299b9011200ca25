//! JSON and metadata helpers shared by every layer of the emulator: timestamps and UIDs as the API server
//! mints them, Go-`omitempty` normalisation of metadata, and canonical numbers.
//!
//! This module depends on nothing else in the crate, so the store, the server-side apply engine, the HTTP
//! front end and the controllers can all use it without forming a module cycle.

use serde_json::Value;

/// Current time, RFC 3339 with whole seconds.
pub(crate) fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A random v4 UUID.
pub(crate) fn uuid() -> String {
    let b: [u8; 16] = rand::random();
    let h = hex::encode(b);
    format!(
        "{}-{}-4{}-{:x}{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        (b[8] & 0x3) | 0x8,
        &h[17..20],
        &h[20..32]
    )
}

/// Drops empty metadata lists/maps and zero generation, as Go's `omitempty` does.
pub(crate) fn normalize(obj: &mut Value) {
    canonical_numbers(obj);
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.retain(|k, v| match v {
            Value::Null => false,
            Value::Array(a) => !a.is_empty(),
            Value::Object(o) => !(o.is_empty() && k != "fieldsV1"),
            Value::Number(n) if k == "generation" || k == "deletionGracePeriodSeconds" => {
                k == "deletionGracePeriodSeconds" || n.as_i64() != Some(0)
            }
            Value::String(s) => !s.is_empty(),
            _ => true,
        });
    }
}

/// Rewrites integral floating-point numbers (`0.0`, `5.0`) as integers, as a real API server's JSON round
/// trip does: Go encodes `float64(0)` as `0`, which decodes back as an integer. YAML manifests read by the
/// emulator itself (serde_yaml) would otherwise keep `0.0`, and `0.0 != 0` made identical re-applies look
/// like changes.
pub(crate) fn canonical_numbers(v: &mut Value) {
    match v {
        Value::Number(n) if n.is_f64() => {
            if let Some(f) = n.as_f64()
                && f.fract() == 0.0
                && f.abs() < 1e21
                && f >= i64::MIN as f64
                && f <= i64::MAX as f64
            {
                *v = Value::from(f as i64);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(canonical_numbers),
        Value::Object(m) => m.values_mut().for_each(canonical_numbers),
        _ => {}
    }
}

pub(crate) fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj["metadata"][field].as_str().unwrap_or_default()
}

/// The object's `metadata.finalizers`.
pub(crate) fn finalizers(obj: &Value) -> Vec<String> {
    obj["metadata"]["finalizers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Keys of `metav1.Time` fields in the built-in kinds the emulator serves (conditions, statuses, events).
const TIME_KEYS: &[&str] = &[
    "creationTimestamp",
    "deletionTimestamp",
    "lastTransitionTime",
    "lastUpdateTime",
    "lastProbeTime",
    "lastHeartbeatTime",
    "startTime",
    "completionTime",
    "startedAt",
    "finishedAt",
    "firstTimestamp",
    "lastTimestamp",
    "deprecatedFirstTimestamp",
    "deprecatedLastTimestamp",
    "lastScheduleTime",
    "lastSuccessfulTime",
];
/// Keys of `metav1.MicroTime` fields (Events, Leases).
const MICRO_TIME_KEYS: &[&str] = &["eventTime", "lastObservedTime", "acquireTime", "renewTime"];

const RFC3339: &str = "2006-01-02T15:04:05Z07:00";
const RFC3339_MICRO: &str = "2006-01-02T15:04:05.000000Z07:00";

/// Rewrites the `metav1.Time` and `MicroTime` strings of `obj` the way the API server's Go types
/// serialise them: UTC with `Z`, whole seconds for Time, six fractional digits for MicroTime
/// (`2026-01-01T12:00:00+02:00` → `2026-01-01T10:00:00Z`). `builtin` selects the typed fields of built-in
/// kinds; custom resources only have their metadata times rewritten. A value that does not parse is an
/// error with Go's `time.Parse` message, which the caller reports as a 400.
pub(crate) fn normalize_times(obj: &mut Value, builtin: bool) -> Result<(), String> {
    if let Some(fields) = obj
        .get_mut("metadata")
        .and_then(|m| m.get_mut("managedFields"))
        .and_then(Value::as_array_mut)
    {
        for f in fields {
            if let Some(t) = f.get_mut("time") {
                time_value(t, false)?;
            }
        }
    }
    if builtin {
        walk_times(obj)
    } else if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in ["creationTimestamp", "deletionTimestamp"] {
            if let Some(t) = m.get_mut(k) {
                time_value(t, false)?;
            }
        }
        Ok(())
    } else {
        Ok(())
    }
}

fn walk_times(v: &mut Value) -> Result<(), String> {
    match v {
        Value::Object(m) => {
            for (k, child) in m.iter_mut() {
                if matches!(
                    k.as_str(),
                    "labels" | "annotations" | "data" | "stringData" | "binaryData"
                ) {
                    continue;
                }
                if child.is_string() {
                    if TIME_KEYS.contains(&k.as_str()) {
                        time_value(child, false)?;
                    } else if MICRO_TIME_KEYS.contains(&k.as_str()) {
                        time_value(child, true)?;
                    }
                } else {
                    walk_times(child)?;
                }
            }
            Ok(())
        }
        Value::Array(a) => a.iter_mut().try_for_each(walk_times),
        _ => Ok(()),
    }
}

fn time_value(v: &mut Value, micro: bool) -> Result<(), String> {
    let Some(s) = v.as_str() else {
        return Ok(());
    };
    let t = parse_go_time(s, micro)?;
    let utc = t.with_timezone(&chrono::Utc);
    *v = Value::String(if micro {
        utc.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
    } else {
        utc.format("%Y-%m-%dT%H:%M:%SZ").to_string()
    });
    Ok(())
}

/// Parses like Go's `time.Parse(RFC3339 | RFC3339Micro, s)` and fails with its message. RFC3339 accepts any
/// fraction; the MicroTime layout wants exactly six digits.
fn parse_go_time(s: &str, micro: bool) -> Result<chrono::DateTime<chrono::FixedOffset>, String> {
    let layout = if micro { RFC3339_MICRO } else { RFC3339 };
    let err = |rest: &str, elem: &str| {
        format!(
            "parsing time {} as {}: cannot parse {} as {}",
            quote(s),
            quote(layout),
            quote(rest),
            quote(elem)
        )
    };
    let b = s.as_bytes();
    let mut i = 0;
    let num = |i: &mut usize, n: usize, elem: &str| -> Result<u32, String> {
        let part = b
            .get(*i..*i + n)
            .filter(|p| p.iter().all(u8::is_ascii_digit));
        match part {
            Some(p) => {
                *i += n;
                Ok(std::str::from_utf8(p).unwrap_or("0").parse().unwrap_or(0))
            }
            None => Err(err(&s[*i..], elem)),
        }
    };
    let lit = |i: &mut usize, c: u8, elem: &str| -> Result<(), String> {
        if b.get(*i) == Some(&c) {
            *i += 1;
            Ok(())
        } else {
            Err(err(&s[*i..], elem))
        }
    };
    let year = num(&mut i, 4, "2006")?;
    lit(&mut i, b'-', "-")?;
    let month = num(&mut i, 2, "01")?;
    lit(&mut i, b'-', "-")?;
    let day = num(&mut i, 2, "02")?;
    lit(&mut i, b'T', "T")?;
    let hour = num(&mut i, 2, "15")?;
    lit(&mut i, b':', ":")?;
    let min = num(&mut i, 2, "04")?;
    lit(&mut i, b':', ":")?;
    let sec = num(&mut i, 2, "05")?;
    let mut nanos = 0u32;
    if micro {
        lit(&mut i, b'.', ".000000")?;
        let start = i;
        let f = num(&mut i, 6, ".000000").map_err(|_| err(&s[start - 1..], ".000000"))?;
        nanos = f * 1000;
    } else if b.get(i) == Some(&b'.') && b.get(i + 1).is_some_and(u8::is_ascii_digit) {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        let digits = &s[start..i.min(start + 9)];
        nanos = format!("{digits:0<9}").parse().unwrap_or(0);
    }
    let offset = match b.get(i) {
        Some(b'Z') => {
            i += 1;
            0
        }
        Some(&c @ (b'+' | b'-')) => {
            let zone = &s[i..];
            i += 1;
            let h = num(&mut i, 2, "Z07:00").map_err(|_| err(zone, "Z07:00"))?;
            lit(&mut i, b':', "Z07:00").map_err(|_| err(zone, "Z07:00"))?;
            let m = num(&mut i, 2, "Z07:00").map_err(|_| err(zone, "Z07:00"))?;
            let secs = (h * 3600 + m * 60) as i32;
            if c == b'-' { -secs } else { secs }
        }
        _ => return Err(err(&s[i..], "Z07:00")),
    };
    if i != b.len() {
        return Err(format!(
            "parsing time {}: extra text: {}",
            quote(s),
            quote(&s[i..])
        ));
    }
    let range = |what: &str| format!("parsing time {}: {what} out of range", quote(s));
    if !(1..=12).contains(&month) {
        return Err(range("month"));
    }
    let date =
        chrono::NaiveDate::from_ymd_opt(year as i32, month, day).ok_or_else(|| range("day"))?;
    if hour > 23 {
        return Err(range("hour"));
    }
    if min > 59 {
        return Err(range("minute"));
    }
    if sec > 59 {
        return Err(range("second"));
    }
    let tz = chrono::FixedOffset::east_opt(offset).ok_or_else(|| range("time zone offset"))?;
    let naive = date
        .and_hms_nano_opt(hour, min, sec, nanos)
        .ok_or_else(|| range("second"))?;
    naive
        .and_local_timezone(tz)
        .single()
        .ok_or_else(|| range("time"))
}

fn quote(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// Human age like kubectl's `HumanDuration`.
pub(crate) fn age(ts: &str) -> String {
    let Ok(t) = chrono::DateTime::parse_from_rfc3339(ts) else {
        return "<invalid>".into();
    };
    human_duration((chrono::Utc::now() - t.with_timezone(&chrono::Utc)).num_seconds())
}

/// apimachinery's `duration.HumanDuration` of a number of seconds.
pub(crate) fn human_duration(secs: i64) -> String {
    let secs = secs.max(0);
    let (m, h, d) = (secs / 60, secs / 3600, secs / 86400);
    if secs < 120 {
        format!("{secs}s")
    } else if m < 10 {
        if secs % 60 == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{}s", secs % 60)
        }
    } else if h < 3 {
        format!("{m}m")
    } else if h < 8 {
        if m % 60 == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{}m", m % 60)
        }
    } else if h < 48 {
        format!("{h}h")
    } else if d < 8 {
        if h % 24 == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{}h", h % 24)
        }
    } else if d < 365 * 2 {
        format!("{d}d")
    } else {
        format!("{}y", d / 365)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn times_come_back_in_utc_with_z() {
        let mut obj = json!({"metadata": {"name": "l"}, "spec": {
            "acquireTime": "2026-01-01T12:00:00.500000+02:00", "renewTime": "2026-01-01T10:00:00.123456+00:00"},
            "status": {"conditions": [{"lastTransitionTime": "2026-01-01T10:00:00.9+00:00"}]},
            "data": {"startTime": "not a time"}});
        normalize_times(&mut obj, true).unwrap();
        assert_eq!(
            obj,
            json!({"metadata": {"name": "l"}, "spec": {
                "acquireTime": "2026-01-01T10:00:00.500000Z", "renewTime": "2026-01-01T10:00:00.123456Z"},
                "status": {"conditions": [{"lastTransitionTime": "2026-01-01T10:00:00Z"}]},
                "data": {"startTime": "not a time"}})
        );
    }

    #[test]
    fn ages() {
        assert_eq!(age("bad"), "<invalid>");
        let t = (chrono::Utc::now() - chrono::Duration::hours(50)).to_rfc3339();
        assert_eq!(age(&t), "2d2h");
        assert_eq!(human_duration(90), "90s");
    }

    #[test]
    fn go_parse_errors() {
        assert_eq!(
            parse_go_time("2026-01-01T10:00:00Z", true).unwrap_err(),
            r#"parsing time "2026-01-01T10:00:00Z" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "Z" as ".000000""#
        );
        assert_eq!(
            parse_go_time("yesterday", false).unwrap_err(),
            r#"parsing time "yesterday" as "2006-01-02T15:04:05Z07:00": cannot parse "yesterday" as "2006""#
        );
        assert_eq!(
            parse_go_time("2026-13-01T10:00:00Z", false).unwrap_err(),
            r#"parsing time "2026-13-01T10:00:00Z": month out of range"#
        );
    }
}
