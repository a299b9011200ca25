//! A template function's signature: the Go types of its parameters (which decide what a
//! template may pass) and its body. A leaf: the executor checks and calls functions, slim-sprig's
//! module defines them, and neither needs the other for this.

use crate::value::{Elem, Value};

/// The Go type of a function parameter, as far as argument checking needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ty {
    /// `interface{}`
    Any,
    /// `reflect.Value` (the builtins): like `interface{}`, and a nil stays no value.
    RValue,
    /// `string`
    Str,
    /// `int`
    Int,
    /// `float64`
    Float,
    /// `bool`
    Bool,
    /// `map[string]interface{}`
    MapAny,
    /// `time.Time`
    Time,
    /// `time.Duration`
    Duration,
    /// `*time.Location`
    Location,
}

/// A function: its parameters (the last one repeated when `variadic`) and its body. An `Err`
/// is an execution error (Go's error result or a recovered panic).
#[derive(Clone, Copy)]
pub(crate) struct Func {
    pub(crate) params: &'static [Ty],
    pub(crate) variadic: Option<Ty>,
    pub(crate) call: fn(&[Value]) -> Result<Value, String>,
}

pub(crate) const fn f(params: &'static [Ty], call: fn(&[Value]) -> Result<Value, String>) -> Func {
    Func {
        params,
        variadic: None,
        call,
    }
}

pub(crate) const fn fv(
    params: &'static [Ty],
    variadic: Ty,
    call: fn(&[Value]) -> Result<Value, String>,
) -> Func {
    Func {
        params,
        variadic: Some(variadic),
        call,
    }
}

/// `[]interface{}` of values.
pub(crate) fn any_list(items: Vec<Value>) -> Value {
    Value::List(Elem::Any, Some(std::sync::Arc::new(items)))
}
