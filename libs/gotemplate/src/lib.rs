//! Go's `text/template` with slim-sprig's `FuncMap()` (github.com/go-task/slim-sprig/v3
//! v3.0.0), executed over values with Go's dynamic types and printed with Go's `fmt`, so that a
//! template renders byte for byte what upstream's Go renders.
//!
//! Why not a crate: `gtmpl` is the only Rust port of Go's templates, and its value model has no
//! Go types (an `int` and an `int64` and a `float64` are one number, so `printf "%s"` and
//! `typeOf` cannot answer as Go does), its maps are unordered (Go ranges over and prints maps in
//! key order), `and`/`or` evaluate every argument (Go stops at the first deciding one), and
//! composite values and floats print in its own forms, not Go's. This crate follows Go's own
//! sources instead: the lexer and parser of `text/template/parse`, the evaluation rules of
//! `exec.go` (argument typing, missing keys, nil values) and the builtins of `funcs.go`, the
//! printing of `fmt` and `strconv`, and slim-sprig's functions with their Go signatures.
//!
//! Errors are not worded as Go words them (nobody reads them: upstream uses a string that fails
//! as written), but a template fails exactly when Go's does, at parse or at execution time.

pub mod duration;
mod exec;
mod fmt;
mod func;
pub mod gotime;
mod gourl;
mod parse;
mod sprig;
mod strconv;
mod value;

pub use fmt::{format_float, sprint, sprintf};
pub use parse::ParseError;
pub use strconv::quote;
pub use value::{Bytes, Elem, Map, MapElem, Named, Value, lossy};

/// A parsed template.
#[derive(Clone, Debug)]
pub struct Template {
    tree: parse::Tree,
}

/// Why a template could not be parsed or executed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The text is not a template (Go's `Parse` fails).
    Parse(String),
    /// Execution failed (Go's `Execute` fails).
    Exec(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Parse(m) => write!(f, "template: {m}"),
            Error::Exec(m) => write!(f, "template: executing: {m}"),
        }
    }
}

impl std::error::Error for Error {}

impl Template {
    /// Parses `text` with slim-sprig's functions and Go's builtins.
    pub fn parse(text: &str) -> Result<Template, Error> {
        let tree = parse::parse(text, &|name| exec::lookup(name).is_some())
            .map_err(|e| Error::Parse(e.0))?;
        Ok(Template { tree })
    }

    /// Executes the template with `data` as dot; the output is bytes, as Go's (a string may hold
    /// bytes that are not UTF-8, e.g. after `trunc` cut a character).
    pub fn execute(&self, data: &Value) -> Result<Vec<u8>, Error> {
        exec::execute(&self.tree, data).map_err(Error::Exec)
    }
}

/// Whether slim-sprig's map or Go's builtins have a function of this name.
pub fn has_function(name: &str) -> bool {
    exec::lookup(name).is_some()
}

/// Parses and executes `text` with `data`; the output as text (bytes that are not UTF-8 become
/// U+FFFD, as when Go's result is carried in JSON).
pub fn render(text: &str, data: &Value) -> Result<String, Error> {
    let t = Template::parse(text)?;
    Ok(lossy(&t.execute(data)?))
}

#[cfg(test)]
mod tests;
