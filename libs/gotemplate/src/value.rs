//! Values with Go's dynamic types: what a template sees in its context, what literals and
//! functions produce. Only the types that occur are modelled; each prints, compares and converts
//! as the Go type does.

pub(crate) use crate::strconv::{decode_rune, runes};
use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value as Json;

/// A Go string: bytes, not necessarily UTF-8 (slicing a string can split a character, as in Go).
pub type Bytes = Arc<[u8]>;

/// A map with string keys, iterated (and printed) in Go's sorted key order.
pub type Map = BTreeMap<Vec<u8>, Value>;

/// The element type of a slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    /// `[]interface{}`
    Any,
    /// `[]string`
    Str,
    /// `[]int`
    Int,
    /// `[][]interface{}` (what `chunk` returns)
    AnyList,
}

/// The value type of a map (keys are strings).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapElem {
    /// `map[string]interface{}`
    Any,
    /// `map[string]string`
    Str,
}

/// A Go value.
#[derive(Clone, Debug)]
pub enum Value {
    /// No value: a missing map key, a nil interface (Go's invalid `reflect.Value`). Printed by
    /// the template as `<no value>`, by `fmt` as `<nil>`.
    Invalid,
    /// A nil `interface{}` read from a map or a slice (a `null` of the application) or given to a
    /// range body: Go keeps it typed until a pipeline unwraps it (to no value), so until then it
    /// cannot be passed where a map is expected and reading a field of it is an error.
    NilInterface,
    /// `bool`
    Bool(bool),
    /// `int` (template integer literals, `len`, `int`, `atoi`)
    Int(i64),
    /// `int64` (integers of the JSON application, sprig's arithmetic)
    Int64(i64),
    /// `uint8` (`index` of a string)
    Uint8(u8),
    /// `float64`
    Float(f64),
    /// `string`
    Str(Bytes),
    /// A slice; `None` is a nil slice.
    List(Elem, Option<Arc<Vec<Value>>>),
    /// A map; `None` is a nil map.
    Map(MapElem, Option<Arc<Map>>),
    /// A struct-like object: a missing field is an error (not a Go map).
    Struct(Arc<Map>),
    /// `time.Time`
    Time(Arc<crate::gotime::Time>),
    /// An integer of a named `time` type (`time.Month`, `time.Weekday`, `time.Duration`): an
    /// integer for comparisons, its `String()` for `%v`.
    Named(Named, i64),
    /// `*time.Location` (never nil): prints its name.
    Location(Arc<crate::gotime::Loc>),
}

/// The named integer types of package `time` a method of `time.Time` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Named {
    /// `time.Month` (an `int`)
    Month,
    /// `time.Weekday` (an `int`)
    Weekday,
    /// `time.Duration` (an `int64`)
    Duration,
}

impl Named {
    /// The value's `String()`, as Go's `time` package gives it.
    pub fn string(self, n: i64) -> String {
        match self {
            Named::Month => match usize::try_from(n - 1)
                .ok()
                .and_then(|i| crate::gotime::LONG_MONTHS.get(i))
            {
                Some(m) => (*m).to_string(),
                None => format!("%!Month({n})"),
            },
            Named::Weekday => match usize::try_from(n)
                .ok()
                .and_then(|i| crate::gotime::LONG_DAYS.get(i))
            {
                Some(d) => (*d).to_string(),
                None => format!("%!Weekday({n})"),
            },
            Named::Duration => crate::duration::format_duration(n),
        }
    }
}

impl Value {
    /// A Go string.
    pub fn str(s: impl AsRef<[u8]>) -> Value {
        Value::Str(Arc::from(s.as_ref()))
    }

    /// A `[]interface{}`.
    pub fn list(items: Vec<Value>) -> Value {
        Value::List(Elem::Any, Some(Arc::new(items)))
    }

    /// A `[]string`.
    pub fn strings(items: Vec<Vec<u8>>) -> Value {
        Value::List(
            Elem::Str,
            Some(Arc::new(items.into_iter().map(Value::str).collect())),
        )
    }

    /// A `map[string]interface{}`.
    pub fn map(m: Map) -> Value {
        Value::Map(MapElem::Any, Some(Arc::new(m)))
    }

    /// The value the way Go decodes unstructured JSON with integers preserved (as the API
    /// client does): integers that fit `int64` are `int64`, other numbers `float64`, objects
    /// `map[string]interface{}`, arrays `[]interface{}`, `null` a nil interface.
    pub fn from_json(v: &Json) -> Value {
        match v {
            Json::Null => Value::Invalid,
            Json::Bool(b) => Value::Bool(*b),
            Json::Number(n) => match n.as_i64() {
                Some(i) => Value::Int64(i),
                None => Value::Float(n.as_f64().unwrap_or_default()),
            },
            Json::String(s) => Value::str(s),
            Json::Array(items) => Value::list(items.iter().map(Value::from_json).collect()),
            Json::Object(m) => Value::map(
                m.iter()
                    .map(|(k, v)| (k.as_bytes().to_vec(), Value::from_json(v)))
                    .collect(),
            ),
        }
    }

    /// A `map[string]string` from string pairs.
    pub fn string_map<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Value {
        Value::Map(
            MapElem::Str,
            Some(Arc::new(
                pairs
                    .into_iter()
                    .map(|(k, v)| (k.as_bytes().to_vec(), Value::str(v)))
                    .collect(),
            )),
        )
    }

    /// A struct with the given fields: reading a field it lacks is an error.
    pub fn structure(fields: Map) -> Value {
        Value::Struct(Arc::new(fields))
    }

    /// Go's type name (`%T`); `<nil>` for no value.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Invalid | Value::NilInterface => "<nil>",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Int64(_) => "int64",
            Value::Uint8(_) => "uint8",
            Value::Float(_) => "float64",
            Value::Str(_) => "string",
            Value::List(Elem::Any, _) => "[]interface {}",
            Value::List(Elem::Str, _) => "[]string",
            Value::List(Elem::Int, _) => "[]int",
            Value::List(Elem::AnyList, _) => "[][]interface {}",
            Value::Map(MapElem::Any, _) => "map[string]interface {}",
            Value::Map(MapElem::Str, _) => "map[string]string",
            Value::Struct(_) => "struct {}",
            Value::Time(_) => "time.Time",
            Value::Named(Named::Month, _) => "time.Month",
            Value::Named(Named::Weekday, _) => "time.Weekday",
            Value::Named(Named::Duration, _) => "time.Duration",
            Value::Location(_) => "*time.Location",
        }
    }

    /// Go's `reflect.Kind` name.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Value::Invalid | Value::NilInterface => "invalid",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Int64(_) | Value::Named(Named::Duration, _) => "int64",
            Value::Named(..) => "int",
            Value::Uint8(_) => "uint8",
            Value::Float(_) => "float64",
            Value::Str(_) => "string",
            Value::List(..) => "slice",
            Value::Map(..) => "map",
            Value::Struct(_) | Value::Time(_) => "struct",
            Value::Location(_) => "ptr",
        }
    }

    /// The value as a pipeline leaves it: a nil interface unwrapped to no value.
    pub fn unwrapped(self) -> Value {
        match self {
            Value::NilInterface => Value::Invalid,
            other => other,
        }
    }

    /// An element read from an `interface{}` container: a nil one stays a typed nil interface.
    pub(crate) fn element(&self) -> Value {
        match self {
            Value::Invalid => Value::NilInterface,
            other => other.clone(),
        }
    }

    /// The items of a slice (empty for a nil slice), or `None` if this is not a slice.
    pub fn items(&self) -> Option<&[Value]> {
        match self {
            Value::List(_, Some(v)) => Some(v),
            Value::List(_, None) => Some(&[]),
            _ => None,
        }
    }

    /// The entries of a map (empty for a nil map), or `None` if this is not a map.
    pub fn entries(&self) -> Option<&Map> {
        static EMPTY: Map = BTreeMap::new();
        match self {
            Value::Map(_, Some(m)) => Some(m),
            Value::Map(_, None) => Some(&EMPTY),
            _ => None,
        }
    }

    /// Go's `len` for strings, slices and maps.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> Option<usize> {
        match self {
            Value::Str(s) => Some(s.len()),
            Value::List(..) => self.items().map(<[Value]>::len),
            Value::Map(..) => self.entries().map(BTreeMap::len),
            _ => None,
        }
    }

    /// Whether this is a nil slice or map or no value.
    pub fn is_nil(&self) -> bool {
        matches!(
            self,
            Value::Invalid | Value::NilInterface | Value::List(_, None) | Value::Map(_, None)
        )
    }

    /// The truth of `if`, `with`, `and`, `or`, `not`: not the zero value of its type.
    pub fn truth(&self) -> bool {
        match self {
            Value::Invalid | Value::NilInterface => false,
            Value::Bool(b) => *b,
            Value::Int(i) | Value::Int64(i) | Value::Named(_, i) => *i != 0,
            Value::Uint8(u) => *u != 0,
            Value::Float(f) => *f != 0.0,
            Value::Str(s) => !s.is_empty(),
            Value::List(..) | Value::Map(..) => self.len().unwrap_or(0) > 0,
            Value::Struct(_) | Value::Time(_) | Value::Location(_) => true,
        }
    }

    /// Go's `reflect.DeepEqual` for these types.
    pub fn deep_equal(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Invalid | Value::NilInterface, Value::Invalid | Value::NilInterface) => true,
            (Value::Bool(a), Value::Bool(b)) => a == b,
            (Value::Int(a), Value::Int(b)) | (Value::Int64(a), Value::Int64(b)) => a == b,
            (Value::Uint8(a), Value::Uint8(b)) => a == b,
            (Value::Float(a), Value::Float(b)) => a == b,
            (Value::Str(a), Value::Str(b)) => a == b,
            (Value::List(ea, a), Value::List(eb, b)) => {
                ea == eb
                    && a.is_none() == b.is_none()
                    && self.items().unwrap_or(&[]).len() == other.items().unwrap_or(&[]).len()
                    && self
                        .items()
                        .unwrap_or(&[])
                        .iter()
                        .zip(other.items().unwrap_or(&[]))
                        .all(|(x, y)| x.deep_equal(y))
            }
            (Value::Map(ea, a), Value::Map(eb, b)) => {
                ea == eb
                    && a.is_none() == b.is_none()
                    && maps_equal(self.entries(), other.entries())
            }
            (Value::Time(a), Value::Time(b)) => a == b,
            (Value::Named(ka, a), Value::Named(kb, b)) => ka == kb && a == b,
            (Value::Struct(a), Value::Struct(b)) => {
                a.len() == b.len()
                    && a.iter()
                        .zip(b.iter())
                        .all(|((ka, va), (kb, vb))| ka == kb && va.deep_equal(vb))
            }
            _ => false,
        }
    }
}

fn maps_equal(a: Option<&Map>, b: Option<&Map>) -> bool {
    let (Some(a), Some(b)) = (a, b) else {
        return false;
    };
    a.len() == b.len()
        && a.iter()
            .zip(b.iter())
            .all(|((ka, va), (kb, vb))| ka == kb && va.deep_equal(vb))
}

/// Bytes as text the way Go's JSON encoder (and so a Kubernetes object) carries them: every byte
/// that is not part of valid UTF-8 becomes U+FFFD.
pub fn lossy(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    let mut rest = bytes;
    while !rest.is_empty() {
        match std::str::from_utf8(rest) {
            Ok(s) => {
                out.push_str(s);
                break;
            }
            Err(e) => {
                let (good, bad) = rest.split_at(e.valid_up_to());
                out.push_str(std::str::from_utf8(good).unwrap_or_default());
                out.push('\u{FFFD}');
                rest = &bad[1..];
            }
        }
    }
    out
}
