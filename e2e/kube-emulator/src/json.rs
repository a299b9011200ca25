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
