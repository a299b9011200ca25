//! Go's `text/template` execution (`exec.go`): evaluation of pipelines, commands, fields,
//! variables and arguments with Go's typing of function arguments, the control structures, and
//! the builtins (`and`, `or`, `not`, `len`, `index`, `print*`, `eq`…, `html`, `js`, `urlquery`).

use crate::fmt;
use crate::func::{Func, Ty, f, fv};
use crate::parse::{Arg, Branch, Node, Number, Pipe, Tree};
use crate::sprig;
use crate::value::{MapElem, Value};

/// Looks a function up as Go does: the template's functions (slim-sprig's map) first, then the
/// builtins.
pub(crate) fn lookup(name: &str) -> Option<Func> {
    sprig::lookup(name).or_else(|| builtin(name))
}

use Ty::{Any, RValue, Str};

fn builtin(name: &str) -> Option<Func> {
    Some(match name {
        "and" | "or" => fv(&[RValue], RValue, |_| Err("unreachable".into())),
        "call" => fv(&[RValue], RValue, |_| Err("call of a non-function".into())),
        "html" => fv(&[], Any, |a| Ok(Value::str(html_escape(&eval_args(a))))),
        "index" => fv(&[RValue], RValue, index),
        "slice" => fv(&[RValue], RValue, |_| Err("unreachable".into())),
        "js" => fv(&[], Any, |a| Ok(Value::str(js_escape(&eval_args(a))))),
        "len" => f(&[RValue], |a| match a[0].len() {
            Some(n) => Ok(Value::Int(n as i64)),
            None => Err(format!("len of type {}", a[0].type_name())),
        }),
        "not" => f(&[RValue], |a| Ok(Value::Bool(!a[0].truth()))),
        "print" => fv(&[], Any, |a| Ok(Value::str(fmt::sprint(a)))),
        "printf" => fv(&[Str], Any, |a| {
            let Value::Str(format) = &a[0] else {
                return Err("printf: format is not a string".into());
            };
            Ok(Value::str(fmt::sprintf(format, &a[1..])))
        }),
        "println" => fv(&[], Any, |a| Ok(Value::str(fmt::sprintln(a)))),
        "urlquery" => fv(&[], Any, |a| Ok(Value::str(query_escape(&eval_args(a))))),
        "eq" => fv(&[RValue], RValue, |a| eq(&a[0], &a[1..]).map(Value::Bool)),
        "ne" => f(&[RValue, RValue], |a| {
            eq(&a[0], &a[1..2]).map(|b| Value::Bool(!b))
        }),
        "lt" => f(&[RValue, RValue], |a| lt(&a[0], &a[1]).map(Value::Bool)),
        "le" => f(&[RValue, RValue], |a| le(&a[0], &a[1]).map(Value::Bool)),
        "gt" => f(&[RValue, RValue], |a| {
            le(&a[0], &a[1]).map(|b| Value::Bool(!b))
        }),
        "ge" => f(&[RValue, RValue], |a| {
            lt(&a[0], &a[1]).map(|b| Value::Bool(!b))
        }),
        _ => return None,
    })
}

/// The text of `html`, `js` and `urlquery`: one string argument as it is, otherwise the
/// arguments printed as `print` does (a nil one as `<no value>`).
fn eval_args(args: &[Value]) -> Vec<u8> {
    if let [Value::Str(s)] = args {
        return s.to_vec();
    }
    let shown: Vec<Value> = args
        .iter()
        .map(|a| match a {
            Value::Invalid => Value::str("<no value>"),
            other => other.clone(),
        })
        .collect();
    fmt::sprint(&shown)
}

fn html_escape(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for &c in s {
        match c {
            0 => out.extend_from_slice("\u{FFFD}".as_bytes()),
            b'"' => out.extend_from_slice(b"&#34;"),
            b'\'' => out.extend_from_slice(b"&#39;"),
            b'&' => out.extend_from_slice(b"&amp;"),
            b'<' => out.extend_from_slice(b"&lt;"),
            b'>' => out.extend_from_slice(b"&gt;"),
            c => out.push(c),
        }
    }
    out
}

fn js_escape(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        if c < 0x80 {
            match c {
                b'\\' => out.extend_from_slice(b"\\\\"),
                b'\'' => out.extend_from_slice(b"\\'"),
                b'"' => out.extend_from_slice(b"\\\""),
                b'<' => out.extend_from_slice(b"\\u003C"),
                b'>' => out.extend_from_slice(b"\\u003E"),
                b'&' => out.extend_from_slice(b"\\u0026"),
                b'=' => out.extend_from_slice(b"\\u003D"),
                c if c < b' ' => out.extend_from_slice(format!("\\u00{c:02X}").as_bytes()),
                c => out.push(c),
            }
            i += 1;
        } else {
            let (r, n) = crate::value::decode_rune(&s[i..]);
            if crate::strconv::is_print(r) {
                out.extend_from_slice(&s[i..i + n]);
            } else {
                out.extend_from_slice(format!("\\u{:04X}", r as u32).as_bytes());
            }
            i += n;
        }
    }
    out
}

fn query_escape(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for &c in s {
        match c {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(c),
            b' ' => out.push(b'+'),
            c => out.extend_from_slice(format!("%{c:02X}").as_bytes()),
        }
    }
    out
}

/// Go's basic kinds for comparisons.
#[derive(PartialEq, Eq, Clone, Copy)]
enum Kind {
    Invalid,
    Bool,
    Int,
    Uint,
    Float,
    Str,
}

fn basic_kind(v: &Value) -> Kind {
    match v {
        Value::Bool(_) => Kind::Bool,
        Value::Int(_) | Value::Int64(_) | Value::Named(..) => Kind::Int,
        Value::Uint8(_) => Kind::Uint,
        Value::Float(_) => Kind::Float,
        Value::Str(_) => Kind::Str,
        _ => Kind::Invalid,
    }
}

fn int_of(v: &Value) -> i64 {
    match v {
        Value::Int(i) | Value::Int64(i) | Value::Named(_, i) => *i,
        Value::Uint8(u) => i64::from(*u),
        _ => 0,
    }
}

fn same_kind(a: &Value, b: &Value) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

fn eq(a: &Value, rest: &[Value]) -> Result<bool, String> {
    if rest.is_empty() {
        return Err("missing argument for comparison".into());
    }
    let k1 = basic_kind(a);
    for b in rest {
        let k2 = basic_kind(b);
        let truth = if k1 != k2 {
            match (k1, k2) {
                (Kind::Int, Kind::Uint) | (Kind::Uint, Kind::Int) => int_of(a) == int_of(b),
                _ => {
                    if !matches!(a, Value::Invalid) && !matches!(b, Value::Invalid) {
                        return Err(format!(
                            "incompatible types for comparison: {} and {}",
                            a.type_name(),
                            b.type_name()
                        ));
                    }
                    false
                }
            }
        } else {
            match (a, b) {
                (Value::Bool(x), Value::Bool(y)) => x == y,
                (Value::Float(x), Value::Float(y)) => x == y,
                (Value::Str(x), Value::Str(y)) => x == y,
                // Go's `==` on `time.Time`: the same instant, location and monotonic reading.
                (Value::Time(x), Value::Time(y)) => x == y,
                _ if k1 == Kind::Int || k1 == Kind::Uint => int_of(a) == int_of(b),
                _ => {
                    let comparable = same_kind(a, b)
                        || matches!(a, Value::Invalid)
                        || matches!(b, Value::Invalid);
                    if !comparable {
                        return Err("non-comparable types".into());
                    }
                    if a.is_nil() || b.is_nil() {
                        a.is_nil() == b.is_nil()
                    } else {
                        return Err(format!("non-comparable type {}", b.type_name()));
                    }
                }
            }
        };
        if truth {
            return Ok(true);
        }
    }
    Ok(false)
}

fn lt(a: &Value, b: &Value) -> Result<bool, String> {
    let (k1, k2) = (basic_kind(a), basic_kind(b));
    if k1 == Kind::Invalid || k2 == Kind::Invalid {
        return Err("invalid type for comparison".into());
    }
    if k1 != k2 {
        return match (k1, k2) {
            (Kind::Int, Kind::Uint) | (Kind::Uint, Kind::Int) => Ok(int_of(a) < int_of(b)),
            _ => Err(format!(
                "incompatible types for comparison: {} and {}",
                a.type_name(),
                b.type_name()
            )),
        };
    }
    Ok(match (a, b) {
        (Value::Bool(_), _) => return Err("invalid type for comparison".into()),
        (Value::Float(x), Value::Float(y)) => x < y,
        (Value::Str(x), Value::Str(y)) => x < y,
        _ => int_of(a) < int_of(b),
    })
}

fn le(a: &Value, b: &Value) -> Result<bool, String> {
    if lt(a, b)? {
        return Ok(true);
    }
    eq(a, std::slice::from_ref(b))
}

/// Go's `index`.
fn index(args: &[Value]) -> Result<Value, String> {
    let mut item = args[0].clone();
    if let Value::Invalid = item {
        return Err("index of untyped nil".into());
    }
    for ix in &args[1..] {
        item = match &item {
            Value::Invalid => return Err("index of nil pointer".into()),
            Value::List(..) | Value::Str(_) => {
                let len = item.len().unwrap_or(0);
                let x = match ix {
                    Value::Int(i) | Value::Int64(i) => *i,
                    Value::Uint8(u) => i64::from(*u),
                    Value::Invalid => return Err("cannot index slice/array with nil".into()),
                    other => {
                        return Err(format!(
                            "cannot index slice/array with type {}",
                            other.type_name()
                        ));
                    }
                };
                if x < 0 || x as u64 >= len as u64 {
                    return Err(format!("index out of range: {x}"));
                }
                match &item {
                    Value::Str(s) => Value::Uint8(s[x as usize]),
                    _ => item.items().unwrap_or(&[])[x as usize].clone(),
                }
            }
            Value::Map(elem, _) => {
                let key = match ix {
                    Value::Str(s) => s.to_vec(),
                    Value::Invalid => return Err("value is nil; should be of type string".into()),
                    other => {
                        return Err(format!(
                            "value has type {}; should be string",
                            other.type_name()
                        ));
                    }
                };
                match item.entries().and_then(|m| m.get(&key)) {
                    Some(v) => v.clone(),
                    None if *elem == MapElem::Str => Value::str(""),
                    None => Value::Invalid,
                }
            }
            other => return Err(format!("can't index item of type {}", other.type_name())),
        };
    }
    Ok(item)
}

/// How a walk stops early.
enum Flow {
    Break,
    Continue,
    Err(String),
}

type R<T> = Result<T, Flow>;

fn fail<T>(msg: impl Into<String>) -> R<T> {
    Err(Flow::Err(msg.into()))
}

/// The most output one execution may produce, and the most range iterations it may run. Go has
/// no limit: a range over a huge integer runs until the process runs out of memory (or, without
/// output, practically forever); here the execution fails instead.
pub(crate) const MAX_OUTPUT: usize = 1 << 20;
const MAX_ITERATIONS: u64 = 10_000_000;

/// The deepest nesting of `template` calls (Go allows 100,000 on its growing stack; a template
/// that recurses this deep is an error either way in practice).
const MAX_DEPTH: usize = 100;

struct State<'t> {
    tree: &'t Tree,
    vars: Vec<(String, Value)>,
    out: Vec<u8>,
    depth: usize,
    iterations: u64,
}

/// Executes `tree` with `data` as dot and `$`.
pub(crate) fn execute(tree: &Tree, data: &Value) -> Result<Vec<u8>, String> {
    let mut s = State {
        tree,
        vars: vec![("$".into(), data.clone())],
        out: Vec::new(),
        depth: 0,
        iterations: 0,
    };
    match s.walk_list(data, &tree.root) {
        Ok(()) => Ok(s.out),
        Err(Flow::Err(e)) => Err(e),
        Err(Flow::Break | Flow::Continue) => Err("break or continue outside range".into()),
    }
}

impl State<'_> {
    fn walk_list(&mut self, dot: &Value, list: &[Node]) -> R<()> {
        for n in list {
            self.walk(dot, n)?;
        }
        Ok(())
    }

    fn walk(&mut self, dot: &Value, node: &Node) -> R<()> {
        match node {
            Node::Text(t) => {
                self.out.extend_from_slice(t.as_bytes());
                self.check_output()
            }
            Node::Action(pipe) => {
                let v = self.eval_pipeline(dot, pipe)?;
                if pipe.decl.is_empty() {
                    match v {
                        Value::Invalid => self.out.extend_from_slice(b"<no value>"),
                        v => self.out.extend_from_slice(&fmt::sprint_v(&v)),
                    }
                    return self.check_output();
                }
                Ok(())
            }
            Node::If(b) => self.walk_if_or_with(false, dot, b),
            Node::With(b) => self.walk_if_or_with(true, dot, b),
            Node::Range(b) => self.walk_range(dot, b),
            Node::Break => Err(Flow::Break),
            Node::Continue => Err(Flow::Continue),
            Node::Template(name, pipe) => {
                let Some(list) = self.tree.defined.get(name) else {
                    return fail(format!("template {name:?} not defined"));
                };
                if self.depth >= MAX_DEPTH {
                    return fail("exceeded maximum template depth");
                }
                let dot = match pipe {
                    Some(p) => self.eval_pipeline(dot, p)?,
                    None => Value::Invalid,
                };
                let saved = std::mem::replace(&mut self.vars, vec![("$".into(), dot.clone())]);
                self.depth += 1;
                let r = self.walk_list(&dot, list);
                self.depth -= 1;
                self.vars = saved;
                r
            }
        }
    }

    fn walk_if_or_with(&mut self, with: bool, dot: &Value, b: &Branch) -> R<()> {
        let mark = self.vars.len();
        let r = (|| {
            let v = self.eval_pipeline(dot, &b.pipe)?;
            if v.truth() {
                if with {
                    self.walk_list(&v, &b.list)
                } else {
                    self.walk_list(dot, &b.list)
                }
            } else if let Some(e) = &b.else_list {
                self.walk_list(dot, e)
            } else {
                Ok(())
            }
        })();
        self.vars.truncate(mark);
        r
    }

    fn walk_range(&mut self, dot: &Value, b: &Branch) -> R<()> {
        let mark = self.vars.len();
        let r = self.walk_range_inner(dot, b);
        self.vars.truncate(mark);
        r
    }

    fn walk_range_inner(&mut self, dot: &Value, b: &Branch) -> R<()> {
        let val = self.eval_pipeline(dot, &b.pipe)?;
        let mark = self.vars.len();
        let mut ran = false;
        match &val {
            Value::Int(_) | Value::Int64(_) | Value::Uint8(_) => {
                if b.pipe.decl.len() > 1 {
                    return fail("can't use an integer to iterate over more than one variable");
                }
                // Lazily: Go runs the body for 0..n, stopping at the first error.
                let n = match val {
                    Value::Int(n) | Value::Int64(n) => n,
                    Value::Uint8(u) => i64::from(u),
                    _ => 0,
                };
                for i in 0..n.max(0) {
                    ran = true;
                    let e = match val {
                        Value::Int(_) => Value::Int(i),
                        Value::Int64(_) => Value::Int64(i),
                        _ => Value::Uint8(i as u8),
                    };
                    if !self.one_iteration(b, mark, Value::Invalid, e)? {
                        break;
                    }
                }
            }
            Value::List(..) => {
                for (i, e) in val.items().unwrap_or(&[]).iter().enumerate() {
                    ran = true;
                    if !self.one_iteration(b, mark, Value::Int(i as i64), e.element())? {
                        break;
                    }
                }
            }
            Value::Map(..) => {
                for (k, e) in val.entries().into_iter().flatten() {
                    ran = true;
                    if !self.one_iteration(b, mark, Value::str(k), e.element())? {
                        break;
                    }
                }
            }
            Value::Invalid => {}
            other => return fail(format!("range can't iterate over {}", other.type_name())),
        }
        if let (false, Some(e)) = (ran, &b.else_list) {
            return self.walk_list(dot, e);
        }
        Ok(())
    }

    fn check_output(&self) -> R<()> {
        if self.out.len() > MAX_OUTPUT {
            return fail("output exceeds 1 MiB");
        }
        Ok(())
    }

    /// One pass of a range body; `false` after `{{break}}`.
    fn one_iteration(&mut self, b: &Branch, mark: usize, index: Value, elem: Value) -> R<bool> {
        self.iterations += 1;
        if self.iterations > MAX_ITERATIONS {
            return fail("more than 10,000,000 range iterations");
        }
        let decl = &b.pipe.decl;
        if !decl.is_empty() {
            if b.pipe.is_assign {
                if decl.len() > 1 {
                    self.set_var(&decl[0], index.clone())?;
                } else {
                    self.set_var(&decl[0], elem.clone())?;
                }
            } else {
                self.set_top_var(1, elem.clone());
            }
        }
        if decl.len() > 1 {
            if b.pipe.is_assign {
                self.set_var(&decl[1], elem.clone())?;
            } else {
                self.set_top_var(2, index);
            }
        }
        let r = self.walk_list(&elem, &b.list);
        self.vars.truncate(mark);
        match r {
            Ok(()) | Err(Flow::Continue) => Ok(true),
            Err(Flow::Break) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn set_top_var(&mut self, n: usize, v: Value) {
        let len = self.vars.len();
        if n <= len {
            self.vars[len - n].1 = v;
        }
    }

    fn set_var(&mut self, name: &str, v: Value) -> R<()> {
        for slot in self.vars.iter_mut().rev() {
            if slot.0 == name {
                slot.1 = v;
                return Ok(());
            }
        }
        fail(format!("undefined variable: {name}"))
    }

    fn var_value(&self, name: &str) -> R<Value> {
        for (n, v) in self.vars.iter().rev() {
            if n == name {
                return Ok(v.clone());
            }
        }
        fail(format!("undefined variable: {name}"))
    }

    fn eval_pipeline(&mut self, dot: &Value, pipe: &Pipe) -> R<Value> {
        let mut value: Option<Value> = None;
        for cmd in &pipe.cmds {
            value = Some(self.eval_command(dot, &cmd.args, value)?.unwrapped());
        }
        let value = value.unwrap_or(Value::Invalid);
        for v in &pipe.decl {
            if pipe.is_assign {
                self.set_var(v, value.clone())?;
            } else {
                self.vars.push((v.clone(), value.clone()));
            }
        }
        Ok(value)
    }

    fn not_a_function(&self, args: &[Arg], final_: &Option<Value>) -> R<()> {
        if args.len() > 1 || final_.is_some() {
            return fail("can't give argument to non-function");
        }
        Ok(())
    }

    fn eval_command(&mut self, dot: &Value, args: &[Arg], final_: Option<Value>) -> R<Value> {
        match &args[0] {
            Arg::Field(idents) => self.eval_field_chain(dot, dot.clone(), idents, args, final_),
            Arg::Chain(node, fields) => {
                let v = self.eval_chain_base(dot, node)?;
                self.eval_field_chain(dot, v, fields, args, final_)
            }
            Arg::Ident(name) => self.eval_function(dot, name, &args[1..], final_),
            Arg::Pipe(p) => {
                self.not_a_function(args, &final_)?;
                self.eval_pipeline(dot, p)
            }
            Arg::Variable(parts) => {
                let v = self.var_value(&parts[0])?;
                if parts.len() == 1 {
                    self.not_a_function(args, &final_)?;
                    return Ok(v);
                }
                self.eval_field_chain(dot, v, &parts[1..], args, final_)
            }
            other => {
                self.not_a_function(args, &final_)?;
                match other {
                    Arg::Bool(b) => Ok(Value::Bool(*b)),
                    Arg::Dot => Ok(dot.clone()),
                    Arg::Nil => fail("nil is not a command"),
                    Arg::Number(n) => ideal_constant(n),
                    Arg::Str(s) => Ok(Value::str(s)),
                    _ => fail("can't evaluate command"),
                }
            }
        }
    }

    fn eval_chain_base(&mut self, dot: &Value, node: &Arg) -> R<Value> {
        match node {
            Arg::Nil => fail("indirection through explicit nil"),
            Arg::Pipe(p) => self.eval_pipeline(dot, p),
            Arg::Ident(name) => self.eval_function(dot, name, &[], None),
            other => self.eval_arg(dot, Ty::Any, other),
        }
    }

    fn eval_field_chain(
        &mut self,
        _dot: &Value,
        mut receiver: Value,
        idents: &[String],
        args: &[Arg],
        final_: Option<Value>,
    ) -> R<Value> {
        let n = idents.len();
        for ident in &idents[..n - 1] {
            receiver = match &receiver {
                Value::Time(_) | Value::Named(..) | Value::Location(_) => {
                    self.call_method(_dot, ident, receiver.clone(), &[], None)?
                }
                _ => eval_field(ident, false, receiver)?,
            };
        }
        if let Value::Time(_) | Value::Named(..) | Value::Location(_) = receiver {
            let rest = args.get(1..).unwrap_or(&[]);
            return self.call_method(_dot, &idents[n - 1], receiver, rest, final_);
        }
        let has_args = args.len() > 1 || final_.is_some();
        eval_field(&idents[n - 1], has_args, receiver)
    }

    /// A method of a `time.Time` (the methods Go's template would call on it; see
    /// `sprig::time_method`), with its arguments checked as a function's are.
    fn call_method(
        &mut self,
        dot: &Value,
        name: &str,
        receiver: Value,
        args: &[Arg],
        final_: Option<Value>,
    ) -> R<Value> {
        let num_in = args.len() + usize::from(final_.is_some());
        if let (Value::Time(_), Some(results)) = (&receiver, sprig::time_method_results(name)) {
            // Go finds the method, checks the arguments' count, then refuses its results.
            if num_in != 0 {
                return fail(format!(
                    "wrong number of args for {name}: want 0 got {num_in}"
                ));
            }
            return fail(results);
        }
        let found = match &receiver {
            Value::Named(kind, _) => sprig::named_method(*kind, name),
            Value::Location(_) => sprig::location_method(name),
            _ => sprig::time_method(name),
        };
        let Some(func) = found else {
            return fail(format!(
                "can't evaluate field {name} in type {}",
                receiver.type_name()
            ));
        };
        if num_in != func.params.len() {
            return fail(format!("wrong number of args for {name}"));
        }
        let mut argv = vec![receiver];
        for (a, ty) in args.iter().zip(func.params) {
            argv.push(self.eval_arg(dot, *ty, a)?);
        }
        if let Some(fv) = final_ {
            argv.push(validate(fv, func.params[num_in - 1])?);
        }
        (func.call)(&argv).map_err(|e| Flow::Err(format!("error calling {name}: {e}")))
    }

    fn eval_function(
        &mut self,
        dot: &Value,
        name: &str,
        args: &[Arg],
        final_: Option<Value>,
    ) -> R<Value> {
        let Some(func) = lookup(name) else {
            return fail(format!("{name:?} is not a defined function"));
        };
        let num_in = args.len() + usize::from(final_.is_some());
        let num_fixed = if func.variadic.is_some() {
            if num_in < func.params.len() {
                return fail(format!("wrong number of args for {name}"));
            }
            func.params.len()
        } else {
            if num_in != func.params.len() {
                return fail(format!("wrong number of args for {name}"));
            }
            args.len()
        };
        if name == "and" || name == "or" {
            let mut v = Value::Invalid;
            for a in args {
                v = self.eval_arg(dot, RValue, a)?;
                if v.truth() == (name == "or") {
                    return Ok(v);
                }
            }
            if let Some(fv) = final_ {
                v = fv;
            }
            return Ok(v);
        }
        let mut argv = Vec::with_capacity(num_in);
        let mut i = 0;
        while i < num_fixed && i < args.len() {
            argv.push(self.eval_arg(dot, func.params[i], &args[i])?);
            i += 1;
        }
        if let Some(vt) = func.variadic {
            while i < args.len() {
                argv.push(self.eval_arg(dot, vt, &args[i])?);
                i += 1;
            }
        }
        if let Some(fv) = final_ {
            let t = match func.variadic {
                Some(vt) if num_in > num_fixed => vt,
                _ => func.params[num_in - 1],
            };
            argv.push(validate(fv, t)?);
        }
        if name == "call" {
            return fail("call of a non-function");
        }
        (func.call)(&argv).map_err(|e| Flow::Err(format!("error calling {name}: {e}")))
    }

    fn eval_arg(&mut self, dot: &Value, ty: Ty, arg: &Arg) -> R<Value> {
        match arg {
            Arg::Dot => return validate(dot.clone(), ty),
            Arg::Nil => {
                return match ty {
                    Ty::Any | Ty::RValue => Ok(Value::Invalid),
                    Ty::MapAny => Ok(Value::Map(MapElem::Any, None)),
                    _ => fail("cannot assign nil"),
                };
            }
            Arg::Field(idents) => {
                let v = self.eval_field_chain(dot, dot.clone(), idents, &[], None)?;
                return validate(v, ty);
            }
            Arg::Variable(parts) => {
                let v = self.var_value(&parts[0])?;
                let v = if parts.len() == 1 {
                    v
                } else {
                    self.eval_field_chain(dot, v, &parts[1..], &[], None)?
                };
                return validate(v, ty);
            }
            Arg::Pipe(p) => {
                let v = self.eval_pipeline(dot, p)?;
                return validate(v, ty);
            }
            Arg::Ident(name) => {
                let v = self.eval_function(dot, name, &[], None)?;
                return validate(v, ty);
            }
            Arg::Chain(node, fields) => {
                let base = self.eval_chain_base(dot, node)?;
                let v = self.eval_field_chain(dot, base, fields, &[], None)?;
                return validate(v, ty);
            }
            _ => {}
        }
        match (ty, arg) {
            (Ty::Bool, Arg::Bool(b)) => Ok(Value::Bool(*b)),
            (Ty::Bool, _) => fail("expected bool"),
            (Ty::Float, Arg::Number(n)) if n.is_float => Ok(Value::Float(n.float)),
            (Ty::Float, _) => fail("expected float"),
            (Ty::Int, Arg::Number(n)) if n.is_int => Ok(Value::Int(n.int)),
            (Ty::Int, _) => fail("expected integer"),
            (Ty::Duration, Arg::Number(n)) if n.is_int => {
                Ok(Value::Named(crate::value::Named::Duration, n.int))
            }
            (Ty::Duration, _) => fail("expected integer"),
            (Ty::Location, _) => fail("can't handle argument for *time.Location"),
            (Ty::Str, Arg::Str(s)) => Ok(Value::str(s)),
            (Ty::Str, _) => fail("expected string"),
            (Ty::Any | Ty::RValue, Arg::Bool(b)) => Ok(Value::Bool(*b)),
            (Ty::Any | Ty::RValue, Arg::Number(n)) => ideal_constant(n),
            (Ty::Any | Ty::RValue, Arg::Str(s)) => Ok(Value::str(s)),
            _ => fail("can't handle argument"),
        }
    }
}

/// Go's `evalField` on a map, a struct-like object or no value.
fn eval_field(name: &str, has_args: bool, receiver: Value) -> R<Value> {
    match &receiver {
        Value::Invalid => Ok(Value::Invalid),
        Value::NilInterface => fail(format!("nil pointer evaluating interface {{}}.{name}")),
        Value::Map(..) => {
            if has_args {
                return fail(format!("{name} is not a method but has arguments"));
            }
            Ok(receiver
                .entries()
                .and_then(|m| m.get(name.as_bytes()))
                .map_or(Value::Invalid, Value::element))
        }
        Value::Struct(fields) => match fields.get(name.as_bytes()) {
            Some(v) if !has_args => Ok(v.clone()),
            Some(_) => fail(format!(
                "{name} has arguments but cannot be invoked as function"
            )),
            None => fail(format!("can't evaluate field {name}")),
        },
        other => fail(format!(
            "can't evaluate field {name} in type {}",
            other.type_name()
        )),
    }
}

/// Go's `validateType`: whether a value can be passed where `ty` is expected.
fn validate(v: Value, ty: Ty) -> R<Value> {
    match (ty, &v) {
        (Ty::Any | Ty::RValue, _) => Ok(v.unwrapped()),
        (_, Value::NilInterface) => fail("wrong type for value; got interface {}"),
        (Ty::MapAny, Value::Invalid) => Ok(Value::Map(MapElem::Any, None)),
        (_, Value::Invalid) => fail("invalid value"),
        (Ty::Str, Value::Str(_))
        | (Ty::Int, Value::Int(_))
        | (Ty::Float, Value::Float(_))
        | (Ty::Bool, Value::Bool(_))
        | (Ty::MapAny, Value::Map(MapElem::Any, _))
        | (Ty::Time, Value::Time(_))
        | (Ty::Duration, Value::Named(crate::value::Named::Duration, _))
        | (Ty::Location, Value::Location(_)) => Ok(v),
        _ => fail(format!("wrong type for value; got {}", v.type_name())),
    }
}

/// Go's `idealConstant`: a number literal where the type is not known.
fn ideal_constant(n: &Number) -> R<Value> {
    if n.is_complex {
        return fail("complex numbers are not supported");
    }
    let t = &n.text;
    let hex_int = t.len() > 2
        && t.starts_with('0')
        && (t.as_bytes()[1] == b'x' || t.as_bytes()[1] == b'X')
        && !t.contains(['p', 'P']);
    let rune = t.starts_with('\'');
    if n.is_float && !hex_int && !rune && t.contains(['.', 'e', 'E', 'p', 'P']) {
        return Ok(Value::Float(n.float));
    }
    if n.is_int {
        return Ok(Value::Int(n.int));
    }
    if n.is_uint {
        return fail(format!("{t} overflows int"));
    }
    Ok(Value::Invalid)
}
