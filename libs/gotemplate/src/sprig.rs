//! slim-sprig's `FuncMap()`: its functions with their Go parameter types (which decide what a
//! template may pass) and Go result types.
//! A Go panic inside a function is an execution error, as `text/template` recovers it.
//!
//! Over 1,000 lines because it is one table: about 150 functions, each a few lines stating its Go
//! signature and behaviour; splitting the table by topic would only scatter the one lookup.
//!
//! Not offered, on purpose (a template that calls one does not parse, and is used as written):
//! `env`, `expandenv` and `getHostByName`. Templates come from tenants' strategies; rendering one
//! must not read the controller's environment (credentials live there) or make network lookups
//! from inside the cluster.
//!
//! The date functions see the local zone as UTC (see `gotime`); `now`, `ago` and `randInt` read
//! the real clock and a real random source, as upstream's do.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use sha1::Digest as _;

use crate::fmt;
use crate::func::{Func, Ty, any_list, f, fv};
use crate::parse::{go_f64_to_i64, parse_float};
use crate::value::{Elem, Map, MapElem, Named, Value, decode_rune, runes};
use crate::{duration, gotime, gourl};

use Ty::{Any, Bool, Float, Int, MapAny, Str};

type Res = Result<Value, String>;

/// The most bytes (or items) a function builds; Go would try to allocate more and abort the
/// whole process.
const MAX_SIZE: usize = 1 << 20;

pub(crate) fn lookup(name: &str) -> Option<Func> {
    Some(match name {
        "hello" => f(&[], |_| Ok(Value::str("Hello!"))),
        // Strings.
        "trunc" => f(&[Int, Str], |a| {
            let (c, s) = (int(&a[0]), bytes(&a[1]));
            let n = s.len() as i64;
            Ok(Value::str(if c < 0 && n + c > 0 {
                &s[(n + c) as usize..]
            } else if c >= 0 && n > c {
                &s[..c as usize]
            } else {
                s
            }))
        }),
        "trim" => f(&[Str], |a| {
            Ok(Value::str(trim_func(bytes(&a[0]), char::is_whitespace)))
        }),
        "upper" => f(&[Str], |a| Ok(Value::str(map_runes(bytes(&a[0]), upper)))),
        "lower" => f(&[Str], |a| Ok(Value::str(map_runes(bytes(&a[0]), lower)))),
        "title" => f(&[Str], |a| Ok(Value::str(title(bytes(&a[0]))))),
        "substr" => f(&[Int, Int, Str], |a| {
            let (start, end, s) = (int(&a[0]), int(&a[1]), bytes(&a[2]));
            let n = s.len() as i64;
            let slice = |lo: i64, hi: i64| -> Res {
                if lo < 0 || hi < lo || hi > n {
                    return Err(format!("slice bounds out of range [{lo}:{hi}]"));
                }
                Ok(Value::str(&s[lo as usize..hi as usize]))
            };
            if start < 0 {
                return slice(0, end);
            }
            if end < 0 || end > n {
                return slice(start, n);
            }
            slice(start, end)
        }),
        "repeat" => f(&[Int, Str], |a| {
            let (count, s) = (int(&a[0]), bytes(&a[1]));
            repeat(s, count).map(Value::str)
        }),
        "trimall" | "trimAll" => f(&[Str, Str], |a| {
            let cut: Vec<char> = runes(bytes(&a[0])).into_iter().map(|r| r.0).collect();
            Ok(Value::str(trim_func(bytes(&a[1]), |c| cut.contains(&c))))
        }),
        "trimSuffix" => f(&[Str, Str], |a| {
            let (suf, s) = (bytes(&a[0]), bytes(&a[1]));
            Ok(Value::str(s.strip_suffix(suf).unwrap_or(s)))
        }),
        "trimPrefix" => f(&[Str, Str], |a| {
            let (pre, s) = (bytes(&a[0]), bytes(&a[1]));
            Ok(Value::str(s.strip_prefix(pre).unwrap_or(s)))
        }),
        "contains" => f(&[Str, Str], |a| {
            Ok(Value::Bool(contains(bytes(&a[1]), bytes(&a[0]))))
        }),
        "hasPrefix" => f(&[Str, Str], |a| {
            Ok(Value::Bool(bytes(&a[1]).starts_with(bytes(&a[0]))))
        }),
        "hasSuffix" => f(&[Str, Str], |a| {
            Ok(Value::Bool(bytes(&a[1]).ends_with(bytes(&a[0]))))
        }),
        "quote" => fv(&[], Any, |a| {
            let parts: Vec<Vec<u8>> = a
                .iter()
                .filter(|v| !matches!(v, Value::Invalid))
                .map(|v| crate::strconv::quote(&strval(v)).into_bytes())
                .collect();
            Ok(Value::str(parts.join(&b' ')))
        }),
        "squote" => fv(&[], Any, |a| {
            let parts: Vec<Vec<u8>> = a
                .iter()
                .filter(|v| !matches!(v, Value::Invalid))
                .map(|v| {
                    let mut s = vec![b'\''];
                    s.extend(fmt::sprint_v(v));
                    s.push(b'\'');
                    s
                })
                .collect();
            Ok(Value::str(parts.join(&b' ')))
        }),
        "cat" => fv(&[], Any, |a| {
            let parts: Vec<Vec<u8>> = a
                .iter()
                .filter(|v| !matches!(v, Value::Invalid))
                .map(fmt::sprint_v)
                .collect();
            Ok(Value::str(parts.join(&b' ')))
        }),
        "indent" => f(&[Int, Str], |a| {
            indent(int(&a[0]), bytes(&a[1])).map(Value::str)
        }),
        "nindent" => f(&[Int, Str], |a| {
            let mut s = b"\n".to_vec();
            s.extend(indent(int(&a[0]), bytes(&a[1]))?);
            Ok(Value::str(s))
        }),
        "replace" => f(&[Str, Str, Str], |a| {
            replace(bytes(&a[2]), bytes(&a[0]), bytes(&a[1])).map(Value::str)
        }),
        "plural" => f(&[Str, Str, Int], |a| {
            Ok(if int(&a[2]) == 1 {
                a[0].clone()
            } else {
                a[1].clone()
            })
        }),
        "sha1sum" => f(&[Str], |a| {
            Ok(Value::str(hex::encode(sha1::Sha1::digest(bytes(&a[0])))))
        }),
        "sha256sum" => f(&[Str], |a| {
            Ok(Value::str(hex::encode(sha2::Sha256::digest(bytes(&a[0])))))
        }),
        "adler32sum" => f(&[Str], |a| {
            let (mut s1, mut s2) = (1u32, 0u32);
            for &b in bytes(&a[0]) {
                s1 = (s1 + u32::from(b)) % 65521;
                s2 = (s2 + s1) % 65521;
            }
            Ok(Value::str(((s2 << 16) | s1).to_string()))
        }),
        "toString" => f(&[Any], |a| Ok(Value::str(strval(&a[0])))),
        "atoi" => f(&[Str], |a| {
            Ok(Value::Int(parse_int10(bytes(&a[0])).unwrap_or(0)))
        }),
        "int64" => f(&[Any], |a| Ok(Value::Int64(to_int64(&a[0])))),
        "int" => f(&[Any], |a| Ok(Value::Int(to_int64(&a[0])))),
        "float64" => f(&[Any], |a| Ok(Value::Float(to_float64(&a[0])))),
        "seq" => fv(&[], Int, |a| seq(&a.iter().map(int).collect::<Vec<_>>())),
        "toDecimal" => f(&[Any], |a| {
            let s = String::from_utf8_lossy(&fmt::sprint_v(&a[0])).into_owned();
            Ok(Value::Int64(parse_int_base(&s, 8).unwrap_or(0)))
        }),
        "split" => f(&[Str, Str], |a| {
            let parts = split(bytes(&a[1]), bytes(&a[0]), -1)?;
            Ok(split_map(parts))
        }),
        "splitn" => f(&[Str, Int, Str], |a| {
            let parts = split(bytes(&a[2]), bytes(&a[0]), int(&a[1]))?;
            Ok(split_map(parts))
        }),
        "splitList" => f(&[Str, Str], |a| {
            Ok(Value::strings(split(bytes(&a[1]), bytes(&a[0]), -1)?))
        }),
        "toStrings" => f(&[Any], |a| Ok(Value::strings(strslice(&a[0])))),
        "until" => f(&[Int], |a| {
            let c = int(&a[0]);
            until_step(0, c, if c < 0 { -1 } else { 1 })
        }),
        "untilStep" => f(&[Int, Int, Int], |a| {
            until_step(int(&a[0]), int(&a[1]), int(&a[2]))
        }),
        // Arithmetic.
        "add1" => f(&[Any], |a| {
            Ok(Value::Int64(to_int64(&a[0]).wrapping_add(1)))
        }),
        "add" => fv(&[], Any, |a| {
            Ok(Value::Int64(
                a.iter().fold(0i64, |s, v| s.wrapping_add(to_int64(v))),
            ))
        }),
        "sub" => f(&[Any, Any], |a| {
            Ok(Value::Int64(to_int64(&a[0]).wrapping_sub(to_int64(&a[1]))))
        }),
        "div" => f(&[Any, Any], |a| {
            let d = to_int64(&a[1]);
            if d == 0 {
                return Err("runtime error: integer divide by zero".into());
            }
            Ok(Value::Int64(to_int64(&a[0]).wrapping_div(d)))
        }),
        "mod" => f(&[Any, Any], |a| {
            let d = to_int64(&a[1]);
            if d == 0 {
                return Err("runtime error: integer divide by zero".into());
            }
            Ok(Value::Int64(to_int64(&a[0]).wrapping_rem(d)))
        }),
        "mul" => fv(&[Any], Any, |a| {
            Ok(Value::Int64(
                a[1..]
                    .iter()
                    .fold(to_int64(&a[0]), |s, v| s.wrapping_mul(to_int64(v))),
            ))
        }),
        "biggest" | "max" => fv(&[Any], Any, |a| {
            Ok(Value::Int64(
                a[1..]
                    .iter()
                    .fold(to_int64(&a[0]), |m, v| m.max(to_int64(v))),
            ))
        }),
        "min" => fv(&[Any], Any, |a| {
            Ok(Value::Int64(
                a[1..]
                    .iter()
                    .fold(to_int64(&a[0]), |m, v| m.min(to_int64(v))),
            ))
        }),
        "maxf" => fv(&[Any], Any, |a| {
            Ok(Value::Float(
                a[1..]
                    .iter()
                    .fold(to_float64(&a[0]), |m, v| go_max(m, to_float64(v))),
            ))
        }),
        "minf" => fv(&[Any], Any, |a| {
            Ok(Value::Float(
                a[1..]
                    .iter()
                    .fold(to_float64(&a[0]), |m, v| go_min(m, to_float64(v))),
            ))
        }),
        "ceil" => f(&[Any], |a| Ok(Value::Float(to_float64(&a[0]).ceil()))),
        "floor" => f(&[Any], |a| Ok(Value::Float(to_float64(&a[0]).floor()))),
        "round" => fv(&[Any, Int], Float, |a| {
            let round_on = match a.get(2) {
                Some(Value::Float(r)) => *r,
                _ => 0.5,
            };
            let val = to_float64(&a[0]);
            let pow = 10f64.powf(int(&a[1]) as f64);
            let digit = pow * val;
            let div = digit - digit.trunc();
            let r = if div >= round_on {
                digit.ceil()
            } else {
                digit.floor()
            };
            Ok(Value::Float(r / pow))
        }),
        // String slices.
        "join" => f(&[Str, Any], |a| {
            Ok(Value::str(strslice(&a[1]).join(bytes(&a[0]))))
        }),
        "sortAlpha" => f(&[Any], |a| {
            if let Value::List(..) = a[0] {
                let mut s = strslice(&a[0]);
                s.sort();
                Ok(Value::strings(s))
            } else {
                Ok(Value::strings(vec![strval(&a[0])]))
            }
        }),
        // Defaults.
        "default" => fv(&[Any], Any, |a| {
            Ok(match a.get(1) {
                Some(g) if !empty(g) => g.clone(),
                _ => a[0].clone(),
            })
        }),
        "empty" => f(&[Any], |a| Ok(Value::Bool(empty(&a[0])))),
        "coalesce" => fv(&[], Any, |a| {
            Ok(a.iter()
                .find(|v| !empty(v))
                .cloned()
                .unwrap_or(Value::Invalid))
        }),
        "all" => fv(&[], Any, |a| Ok(Value::Bool(a.iter().all(|v| !empty(v))))),
        "any" => fv(&[], Any, |a| Ok(Value::Bool(a.iter().any(|v| !empty(v))))),
        "compact" | "mustCompact" => f(&[Any], |a| {
            let items = list_items(&a[0], "compact on")?;
            Ok(any_list(items.into_iter().filter(|v| !empty(v)).collect()))
        }),
        "fromJson" => f(&[Str], |a| {
            Ok(from_json(bytes(&a[0])).unwrap_or(Value::Invalid))
        }),
        "mustFromJson" => f(&[Str], |a| from_json(bytes(&a[0]))),
        "toJson" => f(&[Any], |a| {
            Ok(Value::str(to_json(&a[0], true, false).unwrap_or_default()))
        }),
        "mustToJson" => f(&[Any], |a| to_json(&a[0], true, false).map(Value::str)),
        "toPrettyJson" => f(&[Any], |a| {
            Ok(Value::str(to_json(&a[0], true, true).unwrap_or_default()))
        }),
        "mustToPrettyJson" => f(&[Any], |a| to_json(&a[0], true, true).map(Value::str)),
        "toRawJson" | "mustToRawJson" => {
            f(&[Any], |a| to_json(&a[0], false, false).map(Value::str))
        }
        "ternary" => f(&[Any, Any, Bool], |a| {
            Ok(if matches!(a[2], Value::Bool(true)) {
                a[0].clone()
            } else {
                a[1].clone()
            })
        }),
        // Reflection.
        "typeOf" => f(&[Any], |a| Ok(Value::str(a[0].type_name()))),
        "typeIs" => f(&[Str, Any], |a| {
            Ok(Value::Bool(bytes(&a[0]) == a[1].type_name().as_bytes()))
        }),
        "typeIsLike" => f(&[Str, Any], |a| {
            let t = a[1].type_name().as_bytes();
            let target = bytes(&a[0]);
            Ok(Value::Bool(target == t || [b"*", target].concat() == t))
        }),
        "kindOf" => f(&[Any], |a| Ok(Value::str(a[0].kind_name()))),
        "kindIs" => f(&[Str, Any], |a| {
            Ok(Value::Bool(bytes(&a[0]) == a[1].kind_name().as_bytes()))
        }),
        "deepEqual" => f(&[Any, Any], |a| Ok(Value::Bool(a[0].deep_equal(&a[1])))),
        // Paths (Go's path; filepath is the same on Linux).
        "base" | "osBase" => f(&[Str], |a| Ok(Value::str(path_base(bytes(&a[0]))))),
        "dir" | "osDir" => f(&[Str], |a| Ok(Value::str(path_dir(bytes(&a[0]))))),
        "clean" | "osClean" => f(&[Str], |a| Ok(Value::str(path_clean(bytes(&a[0]))))),
        "ext" | "osExt" => f(&[Str], |a| Ok(Value::str(path_ext(bytes(&a[0]))))),
        "isAbs" | "osIsAbs" => f(&[Str], |a| Ok(Value::Bool(bytes(&a[0]).starts_with(b"/")))),
        // Encoding.
        "b64enc" => f(&[Str], |a| {
            Ok(Value::str(
                base64::engine::general_purpose::STANDARD.encode(bytes(&a[0])),
            ))
        }),
        "b64dec" => f(&[Str], |a| {
            Ok(Value::str(match b64_decode(bytes(&a[0])) {
                Ok(d) => d,
                Err(e) => e.into_bytes(),
            }))
        }),
        "b32enc" => f(&[Str], |a| Ok(Value::str(b32_encode(bytes(&a[0]))))),
        "b32dec" => f(&[Str], |a| {
            Ok(Value::str(match b32_decode(bytes(&a[0])) {
                Ok(d) => d,
                Err(e) => e.into_bytes(),
            }))
        }),
        // Data structures.
        "tuple" | "list" => fv(&[], Any, |a| Ok(any_list(a.to_vec()))),
        "dict" => fv(&[], Any, |a| {
            let mut m = Map::new();
            let mut i = 0;
            while i < a.len() {
                let k = strval(&a[i]);
                m.insert(k, a.get(i + 1).cloned().unwrap_or_else(|| Value::str("")));
                i += 2;
            }
            Ok(Value::map(m))
        }),
        "get" => f(&[MapAny, Str], |a| {
            Ok(entries(&a[0])
                .get(bytes(&a[1]))
                .cloned()
                .unwrap_or_else(|| Value::str("")))
        }),
        "set" => f(&[MapAny, Str, Any], |a| {
            let Value::Map(_, Some(m)) = &a[0] else {
                return Err("assignment to entry in nil map".into());
            };
            let mut m = (**m).clone();
            m.insert(bytes(&a[1]).to_vec(), a[2].clone());
            Ok(Value::map(m))
        }),
        "unset" => f(&[MapAny, Str], |a| {
            let mut m = entries(&a[0]).clone();
            m.remove(bytes(&a[1]));
            Ok(match a[0] {
                Value::Map(_, None) => a[0].clone(),
                _ => Value::map(m),
            })
        }),
        "hasKey" => f(&[MapAny, Str], |a| {
            Ok(Value::Bool(entries(&a[0]).contains_key(bytes(&a[1]))))
        }),
        "pluck" => fv(&[Str], MapAny, |a| {
            let key = bytes(&a[0]);
            Ok(any_list(
                a[1..]
                    .iter()
                    .filter_map(|d| entries(d).get(key).cloned())
                    .collect(),
            ))
        }),
        "keys" => fv(&[], MapAny, |a| {
            // Go's order is the map's (random) order; this is one of them.
            Ok(Value::strings(
                a.iter().flat_map(|d| entries(d).keys().cloned()).collect(),
            ))
        }),
        "values" => f(&[MapAny], |a| {
            Ok(any_list(entries(&a[0]).values().cloned().collect()))
        }),
        "pick" => fv(&[MapAny], Str, |a| {
            let d = entries(&a[0]);
            let mut m = Map::new();
            for k in &a[1..] {
                if let Some(v) = d.get(bytes(k)) {
                    m.insert(bytes(k).to_vec(), v.clone());
                }
            }
            Ok(Value::map(m))
        }),
        "omit" => fv(&[MapAny], Str, |a| {
            let mut m = entries(&a[0]).clone();
            for k in &a[1..] {
                m.remove(bytes(k));
            }
            Ok(Value::map(m))
        }),
        "append" | "push" | "mustAppend" | "mustPush" => f(&[Any, Any], |a| {
            let mut items = list_items(&a[0], "push on")?;
            items.push(a[1].clone());
            Ok(any_list(items))
        }),
        "prepend" | "mustPrepend" => f(&[Any, Any], |a| {
            let mut items = list_items(&a[0], "prepend on")?;
            items.insert(0, a[1].clone());
            Ok(any_list(items))
        }),
        "first" | "mustFirst" => f(&[Any], |a| {
            Ok(list_items(&a[0], "find first on")?
                .first()
                .cloned()
                .unwrap_or(Value::Invalid))
        }),
        "last" | "mustLast" => f(&[Any], |a| {
            Ok(list_items(&a[0], "find last on")?
                .last()
                .cloned()
                .unwrap_or(Value::Invalid))
        }),
        "rest" | "mustRest" => f(&[Any], |a| {
            let items = list_items(&a[0], "find rest on")?;
            if items.is_empty() {
                return Ok(Value::List(Elem::Any, None));
            }
            Ok(any_list(items[1..].to_vec()))
        }),
        "initial" | "mustInitial" => f(&[Any], |a| {
            let items = list_items(&a[0], "find initial on")?;
            if items.is_empty() {
                return Ok(Value::List(Elem::Any, None));
            }
            Ok(any_list(items[..items.len() - 1].to_vec()))
        }),
        "reverse" | "mustReverse" => f(&[Any], |a| {
            let mut items = list_items(&a[0], "find reverse on")?;
            items.reverse();
            Ok(any_list(items))
        }),
        "uniq" | "mustUniq" => f(&[Any], |a| {
            let mut out: Vec<Value> = Vec::new();
            for v in list_items(&a[0], "find uniq on")? {
                if !out.iter().any(|o| v.deep_equal(o)) {
                    out.push(v);
                }
            }
            Ok(any_list(out))
        }),
        "without" | "mustWithout" => fv(&[Any], Any, |a| {
            let omit = &a[1..];
            Ok(any_list(
                list_items(&a[0], "find without on")?
                    .into_iter()
                    .filter(|v| !omit.iter().any(|o| v.deep_equal(o)))
                    .collect(),
            ))
        }),
        "has" | "mustHas" => f(&[Any, Any], |a| {
            if let Value::Invalid = a[1] {
                return Ok(Value::Bool(false));
            }
            let items = list_items(&a[1], "find has on")?;
            Ok(Value::Bool(items.iter().any(|v| a[0].deep_equal(v))))
        }),
        "slice" | "mustSlice" => fv(&[Any], Any, |a| {
            let items = list_items(&a[0], "slice")?;
            let l = items.len() as i64;
            if l == 0 {
                return Ok(Value::Invalid);
            }
            let start = a.get(1).map_or(0, to_int64);
            let end = a.get(2).map_or(l, to_int64);
            if start < 0 || end < start || end > l {
                return Err(format!("slice bounds out of range [{start}:{end}]"));
            }
            let part = items[start as usize..end as usize].to_vec();
            let elem = match &a[0] {
                Value::List(e, _) => *e,
                _ => Elem::Any,
            };
            Ok(Value::List(elem, Some(Arc::new(part))))
        }),
        "concat" => fv(&[], Any, |a| {
            let mut out = Vec::new();
            for l in a {
                out.extend(list_items(l, "concat type")?);
            }
            if out.is_empty() {
                return Ok(Value::List(Elem::Any, None));
            }
            Ok(any_list(out))
        }),
        "dig" => fv(&[], Any, |a| {
            if a.len() < 3 {
                return Err("dig needs at least three arguments".into());
            }
            let Value::Map(MapElem::Any, Some(dict)) = &a[a.len() - 1] else {
                return Err("interface conversion: not a map[string]interface {}".into());
            };
            let def = &a[a.len() - 2];
            let mut keys = Vec::new();
            for k in &a[..a.len() - 2] {
                match k {
                    Value::Str(s) => keys.push(s.to_vec()),
                    _ => return Err("interface conversion: not a string".into()),
                }
            }
            let mut d: Arc<Map> = dict.clone();
            for (i, k) in keys.iter().enumerate() {
                let Some(step) = d.get(k).cloned() else {
                    return Ok(def.clone());
                };
                if i == keys.len() - 1 {
                    return Ok(step);
                }
                match step {
                    Value::Map(MapElem::Any, Some(m)) => d = m,
                    _ => return Err("interface conversion: not a map[string]interface {}".into()),
                }
            }
            Ok(def.clone())
        }),
        "chunk" | "mustChunk" => f(&[Int, Any], |a| {
            // slim-sprig's float arithmetic, as it computes the chunk count and sizes.
            let size = int(&a[0]);
            let items = list_items(&a[1], "chunk type")?;
            let l = items.len() as i64;
            let cs = go_f64_to_i64(((l - 1) as f64 / size as f64).floor() + 1.0);
            if !(0..=MAX_SIZE as i64).contains(&cs) {
                return Err("makeslice: len out of range".into());
            }
            let mut out = Vec::new();
            for i in 0..cs {
                let mut clen = size;
                if i == cs - 1 {
                    clen = go_f64_to_i64((l as f64 % size as f64).floor());
                    if clen == 0 {
                        clen = size;
                    }
                }
                if clen < 0 {
                    return Err("makeslice: len out of range".into());
                }
                let mut chunk = Vec::new();
                for j in 0..clen {
                    let ix = i.wrapping_mul(size).wrapping_add(j);
                    if ix < 0 || ix >= l {
                        return Err("reflect: slice index out of range".into());
                    }
                    chunk.push(items[ix as usize].clone());
                }
                out.push(any_list(chunk));
            }
            Ok(Value::List(Elem::AnyList, Some(Arc::new(out))))
        }),
        // Dates (the local zone is UTC, see `gotime`).
        "now" => f(&[], |_| Ok(time_value(gotime::Time::now()))),
        "date" => f(&[Str, Any], |a| date_in_zone(bytes(&a[0]), &a[1], b"Local")),
        "dateInZone" | "date_in_zone" => f(&[Str, Any, Str], |a| {
            date_in_zone(bytes(&a[0]), &a[1], bytes(&a[2]))
        }),
        "htmlDate" => f(&[Any], |a| date_in_zone(b"2006-01-02", &a[0], b"Local")),
        "htmlDateInZone" => f(&[Any, Str], |a| {
            date_in_zone(b"2006-01-02", &a[0], bytes(&a[1]))
        }),
        "dateModify" | "date_modify" => f(&[Str, Ty::Time], |a| {
            let t = time_of(&a[1]);
            Ok(match duration::parse_duration(bytes(&a[0])) {
                Ok(d) => time_value(t.add(d)),
                Err(_) => a[1].clone(),
            })
        }),
        "mustDateModify" | "must_date_modify" => f(&[Str, Ty::Time], |a| {
            let d = duration::parse_duration(bytes(&a[0]))?;
            Ok(time_value(time_of(&a[1]).add(d)))
        }),
        "toDate" => f(&[Str, Str], |a| {
            Ok(time_value(
                gotime::parse_in_local(bytes(&a[0]), bytes(&a[1]))
                    .unwrap_or_else(gotime::Time::zero),
            ))
        }),
        "mustToDate" => f(&[Str, Str], |a| {
            gotime::parse_in_local(bytes(&a[0]), bytes(&a[1]))
                .map(time_value)
                .ok_or_else(|| format!("parsing time {}", crate::strconv::quote(bytes(&a[1]))))
        }),
        "unixEpoch" => f(&[Ty::Time], |a| {
            Ok(Value::str(time_of(&a[0]).secs.to_string()))
        }),
        "ago" => f(&[Any], |a| {
            let t = match &a[0] {
                Value::Time(t) => (**t).clone(),
                Value::Int64(n) | Value::Int(n) => gotime::Time::unix(*n),
                _ => gotime::Time::now(),
            };
            Ok(Value::str(duration::format_duration(round_second(since(
                &t,
            )))))
        }),
        "randInt" => f(&[Int, Int], |a| {
            let (min, max) = (int(&a[0]), int(&a[1]));
            let n = max.wrapping_sub(min);
            if n <= 0 {
                return Err("invalid argument to Intn".into());
            }
            Ok(Value::Int(rand::random_range(0..n).wrapping_add(min)))
        }),
        // URLs (Go's net/url, see `gourl`).
        "urlParse" => f(&[Str], |a| {
            let u = gourl::parse(bytes(&a[0])).map_err(|e| {
                format!(
                    "unable to parse url: parse {}: {e}",
                    crate::strconv::quote(bytes(&a[0]))
                )
            })?;
            let mut m = Map::new();
            for (k, v) in [
                ("scheme", u.scheme.clone()),
                ("host", u.host.clone()),
                ("hostname", u.hostname()),
                ("path", u.path.clone()),
                ("query", u.raw_query.clone()),
                ("opaque", u.opaque.clone()),
                ("fragment", u.fragment.clone()),
                ("userinfo", u.userinfo()),
            ] {
                m.insert(k.as_bytes().to_vec(), Value::str(v));
            }
            Ok(Value::map(m))
        }),
        "urlJoin" => f(&[MapAny], |a| {
            let d = entries(&a[0]);
            let get = |key: &str| -> Result<Vec<u8>, String> {
                match d.get(key.as_bytes()) {
                    None => Ok(Vec::new()),
                    Some(Value::Str(s)) => Ok(s.to_vec()),
                    Some(v) => Err(format!(
                        "unable to parse {key} key, must be of type string, but {} found",
                        v.kind_name()
                    )),
                }
            };
            let mut u = gourl::Url {
                scheme: get("scheme")?,
                host: get("host")?,
                path: get("path")?,
                raw_query: get("query")?,
                opaque: get("opaque")?,
                fragment: get("fragment")?,
                ..Default::default()
            };
            let userinfo = get("userinfo")?;
            if !userinfo.is_empty() {
                let mut probe = b"proto://".to_vec();
                probe.extend_from_slice(&userinfo);
                probe.extend_from_slice(b"@host");
                u.user = gourl::parse(&probe)
                    .map_err(|e| format!("unable to parse userinfo in dict: {e}"))?
                    .user;
            }
            Ok(Value::str(u.string()))
        }),
        // Durations.
        "duration" => f(&[Any], |a| {
            let n = match &a[0] {
                Value::Str(s) => parse_int10_saturating(s),
                Value::Int64(i) => *i,
                _ => 0,
            };
            Ok(Value::str(duration::format_duration(
                n.wrapping_mul(1_000_000_000),
            )))
        }),
        "durationRound" => f(&[Any], |a| {
            let d = match &a[0] {
                Value::Str(s) => duration::parse_duration(s).unwrap_or(0),
                Value::Int64(i) => *i,
                Value::Time(t) => since(t),
                _ => 0,
            };
            Ok(Value::str(duration::duration_round(d)))
        }),
        // Flow control.
        "fail" => f(&[Str], |a| {
            Err(String::from_utf8_lossy(bytes(&a[0])).into_owned())
        }),
        // Regular expressions.
        "regexMatch" => f(&[Str, Str], |a| {
            Ok(Value::Bool(
                regex(&a[0]).is_ok_and(|r| r.is_match(&text(&a[1]))),
            ))
        }),
        "mustRegexMatch" => f(&[Str, Str], |a| {
            Ok(Value::Bool(regex(&a[0])?.is_match(&text(&a[1]))))
        }),
        "regexFindAll" | "mustRegexFindAll" => f(&[Str, Str, Int], |a| {
            let r = regex(&a[0])?;
            let n = int(&a[2]);
            if n == 0 {
                return Ok(Value::List(Elem::Str, None));
            }
            let found: Vec<Vec<u8>> = r
                .find_iter(&text(&a[1]))
                .take(if n < 0 { usize::MAX } else { n as usize })
                .map(|m| m.as_str().as_bytes().to_vec())
                .collect();
            if found.is_empty() {
                return Ok(Value::List(Elem::Str, None));
            }
            Ok(Value::strings(found))
        }),
        "regexFind" | "mustRegexFind" => f(&[Str, Str], |a| {
            let r = regex(&a[0])?;
            Ok(Value::str(r.find(&text(&a[1])).map_or("", |m| m.as_str())))
        }),
        "regexReplaceAll" | "mustRegexReplaceAll" => f(&[Str, Str, Str], |a| {
            let r = regex(&a[0])?;
            Ok(Value::str(
                r.replace_all(&text(&a[1]), text(&a[2]).as_ref()).as_bytes(),
            ))
        }),
        "regexReplaceAllLiteral" | "mustRegexReplaceAllLiteral" => f(&[Str, Str, Str], |a| {
            let r = regex(&a[0])?;
            Ok(Value::str(
                r.replace_all(&text(&a[1]), regex::NoExpand(&text(&a[2])))
                    .as_bytes(),
            ))
        }),
        "regexSplit" | "mustRegexSplit" => f(&[Str, Str, Int], |a| {
            let r = regex(&a[0])?;
            let (s, n) = (text(&a[1]), int(&a[2]));
            let s = s.as_ref();
            if n == 0 {
                return Ok(Value::List(Elem::Str, None));
            }
            if !bytes(&a[0]).is_empty() && s.is_empty() {
                return Ok(Value::strings(vec![Vec::new()]));
            }
            let mut out: Vec<Vec<u8>> = Vec::new();
            let (mut beg, mut end) = (0, 0);
            for m in r.find_iter(s) {
                if n > 0 && out.len() as i64 == n - 1 {
                    break;
                }
                end = m.start();
                if m.end() != 0 {
                    out.push(s.as_bytes()[beg..end].to_vec());
                }
                beg = m.end();
            }
            if end != s.len() {
                out.push(s.as_bytes()[beg..].to_vec());
            }
            Ok(Value::strings(out))
        }),
        "regexQuoteMeta" => f(&[Str], |a| {
            let mut out = Vec::new();
            for &c in bytes(&a[0]) {
                if b"\\.+*?()|[]{}^$".contains(&c) {
                    out.push(b'\\');
                }
                out.push(c);
            }
            Ok(Value::str(out))
        }),
        _ => return None,
    })
}

fn bytes(v: &Value) -> &[u8] {
    match v {
        Value::Str(s) => s,
        _ => b"",
    }
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(i) | Value::Int64(i) => *i,
        _ => 0,
    }
}

fn entries(v: &Value) -> &Map {
    static EMPTY: Map = BTreeMap::new();
    v.entries().unwrap_or(&EMPTY)
}

/// sprig's `strval`: a string as it is, anything else as `%v` prints it.
fn strval(v: &Value) -> Vec<u8> {
    match v {
        Value::Str(s) => s.to_vec(),
        other => fmt::sprint_v(other),
    }
}

/// sprig's `strslice`.
fn strslice(v: &Value) -> Vec<Vec<u8>> {
    match v {
        Value::List(..) => v
            .items()
            .unwrap_or(&[])
            .iter()
            .filter(|e| !matches!(e, Value::Invalid))
            .map(strval)
            .collect(),
        Value::Invalid => Vec::new(),
        other => vec![strval(other)],
    }
}

/// sprig's `empty`.
fn empty(v: &Value) -> bool {
    match v {
        Value::Struct(_) => false,
        other => !other.truth(),
    }
}

/// The items of a slice; anything else is the error Go's reflection gives (or a panic on nil).
fn list_items(v: &Value, what: &str) -> Result<Vec<Value>, String> {
    match v {
        Value::List(..) => Ok(v.items().unwrap_or(&[]).to_vec()),
        Value::Invalid => Err("reflect: call of Kind on nil Type".into()),
        other => Err(format!("Cannot {what} type {}", other.kind_name())),
    }
}

fn parse_int10(s: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(s).ok()?;
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<i64>().ok()
}

/// The methods of `time.Time` a template finds but cannot call, with Go's error: they return
/// more than one value, or two whose second is not an `error`.
pub(crate) fn time_method_results(name: &str) -> Option<String> {
    Some(match name {
        "Date" | "Clock" => format!("function {name} has 3 return values; should be 1 or 2"),
        "ISOWeek" | "Zone" => {
            format!(
                "invalid function signature for {name}: second return value should be error; is int"
            )
        }
        "ZoneBounds" => format!(
            "invalid function signature for {name}: second return value should be error; is time.Time"
        ),
        _ => return None,
    })
}

/// The methods of `time.Month`, `time.Weekday` and `time.Duration` a template can call.
pub(crate) fn named_method(kind: Named, name: &str) -> Option<Func> {
    fn n(v: &Value) -> i64 {
        match v {
            Value::Named(_, n) => *n,
            _ => 0,
        }
    }
    fn dur(d: i64) -> Value {
        Value::Named(Named::Duration, d)
    }
    Some(match (kind, name) {
        (Named::Month, "String") => f(&[], |a| Ok(Value::str(Named::Month.string(n(&a[0]))))),
        (Named::Weekday, "String") => f(&[], |a| Ok(Value::str(Named::Weekday.string(n(&a[0]))))),
        (Named::Duration, "String") => {
            f(&[], |a| Ok(Value::str(duration::format_duration(n(&a[0])))))
        }
        (Named::Duration, "Nanoseconds") => f(&[], |a| Ok(Value::Int64(n(&a[0])))),
        (Named::Duration, "Microseconds") => f(&[], |a| Ok(Value::Int64(n(&a[0]) / 1000))),
        (Named::Duration, "Milliseconds") => f(&[], |a| Ok(Value::Int64(n(&a[0]) / 1_000_000))),
        (Named::Duration, "Seconds" | "Minutes" | "Hours") => {
            fn split(d: i64, unit: i64) -> f64 {
                (d / unit) as f64 + (d % unit) as f64 / unit as f64
            }
            match name {
                "Seconds" => f(&[], |a| Ok(Value::Float(split(n(&a[0]), 1_000_000_000)))),
                "Minutes" => f(&[], |a| Ok(Value::Float(split(n(&a[0]), 60_000_000_000)))),
                _ => f(&[], |a| {
                    Ok(Value::Float(split(n(&a[0]), 3_600_000_000_000)))
                }),
            }
        }
        (Named::Duration, "Abs") => f(&[], |a| {
            let d = n(&a[0]);
            Ok(dur(if d >= 0 {
                d
            } else if d == i64::MIN {
                i64::MAX
            } else {
                -d
            }))
        }),
        (Named::Duration, "Truncate") => f(&[Ty::Duration], |a| {
            let (d, m) = (n(&a[0]), n(&a[1]));
            Ok(dur(if m <= 0 { d } else { d - d % m }))
        }),
        (Named::Duration, "Round") => f(&[Ty::Duration], |a| {
            Ok(dur(duration_round_to(n(&a[0]), n(&a[1]))))
        }),
        _ => return None,
    })
}

/// The methods of `*time.Location` a template can call.
pub(crate) fn location_method(name: &str) -> Option<Func> {
    match name {
        "String" => Some(f(&[], |a| match &a[0] {
            Value::Location(loc) => Ok(Value::str(loc.name())),
            _ => Ok(Value::str("UTC")),
        })),
        _ => None,
    }
}

/// Go's `Duration.Round(m)`: halves away from zero, saturating.
fn duration_round_to(d: i64, m: i64) -> i64 {
    if m <= 0 {
        return d;
    }
    let mut r = d % m;
    if d < 0 {
        r = -r;
        if (r as u64) + (r as u64) < m as u64 {
            return d + r;
        }
        return d.checked_sub(m - r).unwrap_or(i64::MIN);
    }
    if (r as u64) + (r as u64) < m as u64 {
        return d - r;
    }
    d.checked_add(m - r).unwrap_or(i64::MAX)
}

/// The methods of `time.Time` a template can call (`(now).Format "2006"`, `(toDate …).Unix`);
/// the receiver is the first value. `Location`, `In`, `Zone` and the methods returning `[]byte`
/// are not offered (see the compatibility notes).
pub(crate) fn time_method(name: &str) -> Option<Func> {
    fn num(t: &Value, layout: &[u8]) -> Res {
        let s = time_of(t)
            .format(layout)
            .ok_or("time out of the supported range")?;
        Ok(Value::Int(
            std::str::from_utf8(&s)
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0),
        ))
    }
    Some(match name {
        "Format" => f(&[Str], |a| {
            time_of(&a[0])
                .format(bytes(&a[1]))
                .map(Value::str)
                .ok_or_else(|| "time out of the supported range".into())
        }),
        "String" => f(&[], |a| {
            Ok(Value::str(time_of(&a[0]).string().unwrap_or_default()))
        }),
        "Unix" => f(&[], |a| Ok(Value::Int64(time_of(&a[0]).secs))),
        "UnixMilli" => f(&[], |a| {
            let t = time_of(&a[0]);
            Ok(Value::Int64(
                t.secs
                    .wrapping_mul(1000)
                    .wrapping_add(i64::from(t.nanos / 1_000_000)),
            ))
        }),
        "UnixMicro" => f(&[], |a| {
            let t = time_of(&a[0]);
            Ok(Value::Int64(
                t.secs
                    .wrapping_mul(1_000_000)
                    .wrapping_add(i64::from(t.nanos / 1000)),
            ))
        }),
        "UnixNano" => f(&[], |a| {
            let t = time_of(&a[0]);
            Ok(Value::Int64(
                t.secs
                    .wrapping_mul(1_000_000_000)
                    .wrapping_add(i64::from(t.nanos)),
            ))
        }),
        "Year" => f(&[], |a| num(&a[0], b"2006")),
        "Day" => f(&[], |a| num(&a[0], b"2")),
        "Hour" => f(&[], |a| num(&a[0], b"15")),
        "Minute" => f(&[], |a| num(&a[0], b"4")),
        "Second" => f(&[], |a| num(&a[0], b"5")),
        "YearDay" => f(&[], |a| num(&a[0], b"002")),
        "Nanosecond" => f(&[], |a| Ok(Value::Int(i64::from(time_of(&a[0]).nanos)))),
        "IsZero" => f(&[], |a| Ok(Value::Bool(time_of(&a[0]).is_zero()))),
        "IsDST" => f(&[], |a| Ok(Value::Bool(time_of(&a[0]).is_dst()))),
        "Location" => f(&[], |a| {
            Ok(Value::Location(Arc::new(time_of(&a[0]).location())))
        }),
        "In" => f(&[Ty::Location], |a| match &a[1] {
            Value::Location(loc) => Ok(time_value(time_of(&a[0]).in_loc((**loc).clone()))),
            _ => Err("time: missing Location in call to Time.In".into()),
        }),
        "GoString" => f(&[], |a| {
            time_of(&a[0])
                .go_string()
                .map(Value::str)
                .ok_or_else(|| "time out of the supported range".into())
        }),
        "Month" | "Weekday" => {
            fn mw(a: &[Value]) -> Result<(i64, i64), String> {
                time_of(&a[0])
                    .month_weekday()
                    .ok_or_else(|| "time out of the supported range".into())
            }
            match name {
                "Month" => f(&[], |a| Ok(Value::Named(Named::Month, mw(a)?.0))),
                _ => f(&[], |a| Ok(Value::Named(Named::Weekday, mw(a)?.1))),
            }
        }
        "Add" => f(&[Ty::Duration], |a| {
            Ok(time_value(time_of(&a[0]).add(named_int(&a[1]))))
        }),
        "Sub" => f(&[Ty::Time], |a| {
            Ok(Value::Named(
                Named::Duration,
                time_of(&a[0]).sub(&time_of(&a[1])),
            ))
        }),
        "Truncate" => f(&[Ty::Duration], |a| {
            Ok(time_value(time_of(&a[0]).truncate(named_int(&a[1]))))
        }),
        "Round" => f(&[Ty::Duration], |a| {
            Ok(time_value(time_of(&a[0]).round(named_int(&a[1]))))
        }),
        "AddDate" => f(&[Ty::Int, Ty::Int, Ty::Int], |a| {
            let n = |v: &Value| match v {
                Value::Int(n) => *n,
                _ => 0,
            };
            time_of(&a[0])
                .add_date(n(&a[1]), n(&a[2]), n(&a[3]))
                .map(time_value)
                .ok_or_else(|| "time out of the supported range".into())
        }),
        "UTC" => f(&[], |a| {
            Ok(time_value(time_of(&a[0]).in_loc(gotime::Loc::Utc)))
        }),
        "Local" => f(&[], |a| {
            Ok(time_value(time_of(&a[0]).in_loc(gotime::Loc::Local)))
        }),
        "Equal" | "Before" | "After" | "Compare" => {
            fn cmp(a: &[Value]) -> std::cmp::Ordering {
                let (x, y) = (time_of(&a[0]), time_of(&a[1]));
                (x.secs, x.nanos).cmp(&(y.secs, y.nanos))
            }
            match name {
                "Equal" => f(&[Ty::Time], |a| Ok(Value::Bool(cmp(a).is_eq()))),
                "Before" => f(&[Ty::Time], |a| Ok(Value::Bool(cmp(a).is_lt()))),
                "After" => f(&[Ty::Time], |a| Ok(Value::Bool(cmp(a).is_gt()))),
                _ => f(&[Ty::Time], |a| Ok(Value::Int(cmp(a) as i64))),
            }
        }
        _ => return None,
    })
}

fn named_int(v: &Value) -> i64 {
    match v {
        Value::Named(_, n) => *n,
        _ => 0,
    }
}

fn time_value(t: gotime::Time) -> Value {
    Value::Time(Arc::new(t))
}

fn time_of(v: &Value) -> gotime::Time {
    match v {
        Value::Time(t) => (**t).clone(),
        _ => gotime::Time::zero(),
    }
}

/// slim-sprig's `dateInZone`: a `time.Time` or Unix seconds (`int`, `int64`; any other value is
/// the current time), shown in `zone` (UTC when Go cannot load it).
fn date_in_zone(layout: &[u8], date: &Value, zone: &[u8]) -> Res {
    let t = match date {
        Value::Time(t) => (**t).clone(),
        Value::Int(n) | Value::Int64(n) => gotime::Time::unix(*n),
        _ => gotime::Time::now(),
    };
    t.in_loc(gotime::load_location(zone))
        .format(layout)
        .map(Value::str)
        .ok_or_else(|| "time out of the supported range".into())
}

/// `time.Since(t)`, saturating as Go's `Sub` does.
fn since(t: &gotime::Time) -> i64 {
    let now = gotime::Time::now();
    let d = (i128::from(now.secs) - i128::from(t.secs)) * 1_000_000_000 + i128::from(now.nanos)
        - i128::from(t.nanos);
    d.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// Go's `Duration.Round(time.Second)`: halves away from zero, saturating.
fn round_second(d: i64) -> i64 {
    const S: i64 = 1_000_000_000;
    let r = d % S;
    if d < 0 {
        let r = -r;
        if r + r < S {
            return d + r;
        }
        d.checked_sub(S - r).unwrap_or(i64::MIN)
    } else {
        if r + r < S {
            return d - r;
        }
        d.checked_add(S - r).unwrap_or(i64::MAX)
    }
}

/// Go's `strconv.ParseInt(s, 10, 64)` with its error ignored: a syntax error gives 0, an
/// out-of-range number the nearest limit.
fn parse_int10_saturating(s: &[u8]) -> i64 {
    let Ok(text) = std::str::from_utf8(s) else {
        return 0;
    };
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return 0;
    }
    text.parse::<i64>().unwrap_or(if text.starts_with('-') {
        i64::MIN
    } else {
        i64::MAX
    })
}

fn parse_int_base(s: &str, base: u32) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || digits.contains('_') {
        return None;
    }
    i64::from_str_radix(s, base).ok()
}

/// sprig's `toInt64`.
fn to_int64(v: &Value) -> i64 {
    match v {
        Value::Str(s) => parse_int10(s).unwrap_or(0),
        Value::Int(i) | Value::Int64(i) | Value::Named(_, i) => *i,
        Value::Uint8(u) => i64::from(*u),
        Value::Float(f) => go_f64_to_i64(*f),
        Value::Bool(b) => i64::from(*b),
        _ => 0,
    }
}

/// sprig's `toFloat64`.
fn to_float64(v: &Value) -> f64 {
    match v {
        Value::Str(s) => std::str::from_utf8(s)
            .ok()
            .and_then(parse_float)
            .unwrap_or(0.0),
        Value::Int(i) | Value::Int64(i) | Value::Named(_, i) => *i as f64,
        Value::Uint8(u) => f64::from(*u),
        Value::Float(f) => *f,
        Value::Bool(b) => f64::from(u8::from(*b)),
        _ => 0.0,
    }
}

fn go_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a == 0.0 && b == 0.0 {
        if a.is_sign_negative() { b } else { a }
    } else {
        a.max(b)
    }
}

fn go_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a == 0.0 && b == 0.0 {
        if a.is_sign_negative() { a } else { b }
    } else {
        a.min(b)
    }
}

fn until_step(start: i64, stop: i64, step: i64) -> Res {
    let mut v = Vec::new();
    let mut push = |i: i64| -> Result<(), String> {
        if v.len() >= MAX_SIZE {
            return Err("too many items".into());
        }
        v.push(Value::Int(i));
        Ok(())
    };
    if stop < start {
        if step < 0 {
            let mut i = start;
            while i > stop {
                push(i)?;
                i = i.wrapping_add(step);
            }
        }
    } else if step > 0 {
        let mut i = start;
        while i < stop {
            push(i)?;
            i = i.wrapping_add(step);
        }
    }
    Ok(Value::List(Elem::Int, Some(Arc::new(v))))
}

fn seq(params: &[i64]) -> Res {
    let list = match params {
        [] => return Ok(Value::str("")),
        [end] => {
            let inc = if *end < 1 { -1 } else { 1 };
            until_step(1, end + inc, inc)?
        }
        [start, step, end] => {
            let mut inc = 1;
            if end < start {
                inc = -1;
                if *step > 0 {
                    return Ok(Value::str(""));
                }
            }
            until_step(*start, end + inc, *step)?
        }
        [start, end] => {
            let step = if end < start { -1 } else { 1 };
            until_step(*start, end + step, step)?
        }
        _ => return Ok(Value::str("")),
    };
    let s: Vec<String> = list
        .items()
        .unwrap_or(&[])
        .iter()
        .map(|v| int(v).to_string())
        .collect();
    Ok(Value::str(s.join(" ")))
}

fn repeat(s: &[u8], count: i64) -> Result<Vec<u8>, String> {
    if count < 0 {
        return Err("strings: negative Repeat count".into());
    }
    if (s.len() as u128) * (count as u128) > MAX_SIZE as u128 {
        return Err("strings: Repeat output too large".into());
    }
    Ok(s.repeat(count as usize))
}

fn indent(spaces: i64, v: &[u8]) -> Result<Vec<u8>, String> {
    let pad = repeat(b" ", spaces)?;
    let mut nl = b"\n".to_vec();
    nl.extend_from_slice(&pad);
    let mut out = pad;
    out.extend(replace(v, b"\n", &nl)?);
    Ok(out)
}

fn contains(s: &[u8], sub: &[u8]) -> bool {
    sub.is_empty() || s.windows(sub.len()).any(|w| w == sub)
}

/// Go's `strings.Replace(s, old, new, -1)`; an empty `old` matches before every character and
/// at the end.
fn replace(s: &[u8], old: &[u8], new: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    if old.is_empty() {
        out.extend_from_slice(new);
        let mut i = 0;
        while i < s.len() {
            let n = decode_rune(&s[i..]).1;
            out.extend_from_slice(&s[i..i + n]);
            out.extend_from_slice(new);
            i += n;
            if out.len() > MAX_SIZE {
                return Err("result too large".into());
            }
        }
        return Ok(out);
    }
    let mut i = 0;
    while i < s.len() {
        if s[i..].starts_with(old) {
            out.extend_from_slice(new);
            i += old.len();
        } else {
            out.push(s[i]);
            i += 1;
        }
        if out.len() > MAX_SIZE {
            return Err("result too large".into());
        }
    }
    Ok(out)
}

/// Go's `strings.Split`/`SplitN` (`n < 0`: all).
fn split(s: &[u8], sep: &[u8], n: i64) -> Result<Vec<Vec<u8>>, String> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    if sep.is_empty() {
        let rs = runes(s);
        let mut i = 0;
        for (k, (_, w)) in rs.iter().enumerate() {
            if n > 0 && out.len() as i64 == n - 1 {
                out.push(s[i..].to_vec());
                return Ok(out);
            }
            let _ = k;
            out.push(s[i..i + w].to_vec());
            i += w;
        }
        return Ok(out);
    }
    let mut start = 0;
    let mut i = 0;
    while i + sep.len() <= s.len() {
        if n > 0 && out.len() as i64 == n - 1 {
            break;
        }
        if &s[i..i + sep.len()] == sep {
            out.push(s[start..i].to_vec());
            i += sep.len();
            start = i;
        } else {
            i += 1;
        }
    }
    out.push(s[start..].to_vec());
    Ok(out)
}

fn split_map(parts: Vec<Vec<u8>>) -> Value {
    Value::Map(
        MapElem::Str,
        Some(Arc::new(
            parts
                .into_iter()
                .enumerate()
                .map(|(i, p)| (format!("_{i}").into_bytes(), Value::str(p)))
                .collect(),
        )),
    )
}

/// Maps each character (an invalid byte is U+FFFD) as Go's `strings.Map` does.
fn map_runes(s: &[u8], f: impl Fn(char) -> char) -> Vec<u8> {
    if s.is_ascii() {
        return s.iter().map(|&b| f(b as char) as u8).collect();
    }
    let mut out = String::new();
    for (c, _) in runes(s) {
        out.push(f(c));
    }
    out.into_bytes()
}

fn single(mut it: impl Iterator<Item = char>, c: char) -> char {
    match (it.next(), it.next()) {
        (Some(x), None) => x,
        _ => c,
    }
}

fn upper(c: char) -> char {
    single(c.to_uppercase(), c)
}

fn lower(c: char) -> char {
    single(c.to_lowercase(), c)
}

/// Go's `strings.Title`.
fn title(s: &[u8]) -> Vec<u8> {
    let is_sep = |c: char| {
        if c.is_ascii() {
            return !(c.is_ascii_alphanumeric() || c == '_');
        }
        if c.is_alphabetic() || c.is_numeric() {
            return false;
        }
        c.is_whitespace()
    };
    let mut prev = ' ';
    let mut out = String::new();
    for (c, _) in runes(s) {
        if is_sep(prev) {
            out.push(upper(c));
        } else {
            out.push(c);
        }
        prev = c;
    }
    if s.is_ascii() {
        return out.into_bytes();
    }
    out.into_bytes()
}

/// Trims characters matching `f` from both ends (Go's `strings.TrimFunc`).
fn trim_func(s: &[u8], f: impl Fn(char) -> bool) -> Vec<u8> {
    let rs = runes(s);
    let mut start = 0;
    let mut i = 0;
    while i < rs.len() && f(rs[i].0) {
        start += rs[i].1;
        i += 1;
    }
    let mut end = s.len();
    let mut j = rs.len();
    while j > i && f(rs[j - 1].0) {
        end -= rs[j - 1].1;
        j -= 1;
    }
    s[start..end].to_vec()
}

/// Go's `regexp` works on characters (an empty match never splits one), as `regex::Regex` does
/// on text; a string that is not UTF-8 is matched as Go reads it, each bad byte as U+FFFD. The
/// pattern is Go's RE2 syntax, translated where the `regex` crate reads it otherwise.
fn regex(pattern: &Value) -> Result<regex::Regex, String> {
    regex::Regex::new(&go_regex(&text(pattern))?).map_err(|e| e.to_string())
}

/// Go's (RE2) regular expression syntax in the `regex` crate's: `\d`, `\w`, `\s`, `\b` are
/// ASCII in Go (Unicode in the crate); a `{` that does not start a repetition and a `[` inside a
/// class are literal in Go (a nested class in the crate), so are `&` and `~` in a class (set
/// operations in the crate); an escaped punctuation character is that character (`\<` is a word
/// boundary in the crate); `\u`, a backreference or another unknown escape, and flags other than
/// `imsU`, are errors in Go.
fn go_regex(p: &str) -> Result<String, String> {
    let c: Vec<char> = p.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    let mut in_class = false;
    let mut class_start = false;
    let hex = |ch: char| format!("\\x{{{:X}}}", ch as u32);
    while i < c.len() {
        let ch = c[i];
        i += 1;
        if ch == '\\' {
            let Some(&n) = c.get(i) else {
                return Err("trailing backslash at end of expression".into());
            };
            i += 1;
            let perl = |neg: bool, set: &str| match (neg, in_class) {
                (false, true) => set.to_owned(),
                (false, false) => format!("[{set}]"),
                (true, _) => format!("[^{set}]"),
            };
            match n {
                'a' | 'f' | 't' | 'n' | 'r' | 'v' | 'A' | 'z' => {
                    out.push('\\');
                    out.push(n);
                }
                'd' => out.push_str(&perl(false, "0-9")),
                'D' => out.push_str(&perl(true, "0-9")),
                'w' => out.push_str(&perl(false, "0-9A-Za-z_")),
                'W' => out.push_str(&perl(true, "0-9A-Za-z_")),
                's' => out.push_str(&perl(false, "\\t\\n\\f\\r ")),
                'S' => out.push_str(&perl(true, "\\t\\n\\f\\r ")),
                'b' | 'B' if !in_class => {
                    out.push_str("(?-u:\\");
                    out.push(n);
                    out.push(')');
                }
                '0'..='7' => {
                    // Octal (a lone non-zero digit is a backreference, which Go refuses).
                    if n != '0' && !c.get(i).is_some_and(|d| ('0'..='7').contains(d)) {
                        return Err("invalid escape sequence".into());
                    }
                    let mut v = n.to_digit(8).unwrap_or(0);
                    for _ in 0..2 {
                        match c.get(i).and_then(|d| d.to_digit(8)) {
                            Some(d) => {
                                v = v * 8 + d;
                                i += 1;
                            }
                            None => break,
                        }
                    }
                    out.push_str(&format!("\\x{{{v:X}}}"));
                }
                'x' => {
                    out.push_str("\\x");
                    if c.get(i) == Some(&'{') {
                        while i < c.len() {
                            out.push(c[i]);
                            i += 1;
                            if c[i - 1] == '}' {
                                break;
                            }
                        }
                    } else {
                        for _ in 0..2 {
                            match c.get(i) {
                                Some(d) if d.is_ascii_hexdigit() => {
                                    out.push(*d);
                                    i += 1;
                                }
                                _ => return Err("invalid escape sequence".into()),
                            }
                        }
                    }
                }
                'p' | 'P' => {
                    out.push('\\');
                    out.push(n);
                    if c.get(i) == Some(&'{') {
                        while i < c.len() {
                            out.push(c[i]);
                            i += 1;
                            if c[i - 1] == '}' {
                                break;
                            }
                        }
                    }
                }
                'Q' => {
                    let rest: String = c[i..].iter().collect();
                    let (lit, after) = match rest.find("\\E") {
                        Some(e) => (rest[..e].to_owned(), e + 2),
                        None => (rest.clone(), rest.len()),
                    };
                    for l in lit.chars() {
                        out.push_str(&hex(l));
                    }
                    i += rest[..after].chars().count();
                }
                n if n.is_ascii_punctuation() => out.push_str(&hex(n)),
                _ => return Err("invalid escape sequence".into()),
            }
            class_start = false;
            continue;
        }
        if in_class {
            match ch {
                '[' if c.get(i) == Some(&':') => {
                    // A POSIX class [:name:] is the same in both.
                    out.push('[');
                    while i < c.len() {
                        out.push(c[i]);
                        i += 1;
                        if c[i - 1] == ']' {
                            break;
                        }
                    }
                }
                ']' if !class_start => {
                    in_class = false;
                    out.push(']');
                }
                '[' | '&' | '~' | '-' if ch != '-' || out.ends_with('-') => out.push_str(&hex(ch)),
                _ => out.push(ch),
            }
            class_start = false;
            continue;
        }
        match ch {
            '[' => {
                in_class = true;
                class_start = true;
                out.push('[');
                if c.get(i) == Some(&'^') {
                    out.push('^');
                    i += 1;
                }
            }
            '{' => {
                // A repetition only if it reads {n}, {n,} or {n,m}; otherwise a literal brace.
                let rest: String = c[i..].iter().collect();
                let end = rest.find('}');
                let spec = end.map(|e| &rest[..e]);
                let valid = spec.is_some_and(|sp| {
                    let (a, b) = sp.split_once(',').unwrap_or((sp, "0"));
                    !a.is_empty()
                        && a.bytes().all(|x| x.is_ascii_digit())
                        && b.bytes().all(|x| x.is_ascii_digit())
                });
                if valid {
                    out.push('{');
                } else {
                    out.push_str(&hex('{'));
                }
            }
            '}' => {
                // Closing a repetition copied above, or a literal.
                let open = out.rfind('{');
                let close = out.rfind('}');
                if open.is_some() && open > close && !out.ends_with("\\x{7B}") {
                    out.push('}');
                } else {
                    out.push_str(&hex('}'));
                }
            }
            '(' if c.get(i) == Some(&'?') => {
                let mut j = i + 1;
                let named = matches!(c.get(j), Some('P') | Some('<'));
                if !named {
                    while j < c.len() && c[j] != ')' && c[j] != ':' {
                        if !matches!(c[j], 'i' | 'm' | 's' | 'U' | '-') {
                            return Err("invalid or unsupported Perl syntax".into());
                        }
                        j += 1;
                    }
                }
                out.push('(');
            }
            _ => out.push(ch),
        }
    }
    Ok(out)
}

fn text(v: &Value) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(bytes(v))
}

// ---- paths (Go's `path`) ----

fn path_clean(p: &[u8]) -> Vec<u8> {
    if p.is_empty() {
        return b".".to_vec();
    }
    let rooted = p[0] == b'/';
    let n = p.len();
    let mut out: Vec<u8> = Vec::new();
    let (mut r, mut dotdot) = (0, 0);
    if rooted {
        out.push(b'/');
        r = 1;
        dotdot = 1;
    }
    while r < n {
        if p[r] == b'/' || (p[r] == b'.' && (r + 1 == n || p[r + 1] == b'/')) {
            r += 1;
        } else if p[r] == b'.' && p[r + 1] == b'.' && (r + 2 == n || p[r + 2] == b'/') {
            r += 2;
            if out.len() > dotdot {
                let mut w = out.len() - 1;
                while w > dotdot && out[w] != b'/' {
                    w -= 1;
                }
                out.truncate(w);
            } else if !rooted {
                if !out.is_empty() {
                    out.push(b'/');
                }
                out.extend_from_slice(b"..");
                dotdot = out.len();
            }
        } else {
            if (rooted && out.len() != 1) || (!rooted && !out.is_empty()) {
                out.push(b'/');
            }
            while r < n && p[r] != b'/' {
                out.push(p[r]);
                r += 1;
            }
        }
    }
    if out.is_empty() {
        return b".".to_vec();
    }
    out
}

fn path_base(p: &[u8]) -> Vec<u8> {
    if p.is_empty() {
        return b".".to_vec();
    }
    let mut p = p;
    while p.last() == Some(&b'/') {
        p = &p[..p.len() - 1];
    }
    if let Some(i) = p.iter().rposition(|&c| c == b'/') {
        p = &p[i + 1..];
    }
    if p.is_empty() {
        return b"/".to_vec();
    }
    p.to_vec()
}

fn path_dir(p: &[u8]) -> Vec<u8> {
    let i = p.iter().rposition(|&c| c == b'/').map_or(0, |i| i + 1);
    path_clean(&p[..i])
}

fn path_ext(p: &[u8]) -> Vec<u8> {
    for i in (0..p.len()).rev() {
        if p[i] == b'/' {
            break;
        }
        if p[i] == b'.' {
            return p[i..].to_vec();
        }
    }
    Vec::new()
}

// ---- encodings ----

/// Go's `base64.StdEncoding.DecodeString`, with its error text (`illegal base64 data at input
/// byte N`), which sprig returns as the result.
fn b64_decode(src: &[u8]) -> Result<Vec<u8>, String> {
    const ALPHA: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let corrupt = |i: usize| format!("illegal base64 data at input byte {i}");
    let dec = |c: u8| ALPHA.iter().position(|&a| a == c).map(|p| p as u32);
    let mut out = Vec::new();
    let mut si = 0;
    while si < src.len() {
        let mut dbuf = [0u32; 4];
        let mut dlen = 4;
        let mut j = 0;
        let mut err = None;
        while j < 4 {
            if si == src.len() {
                if j == 0 {
                    return Ok(out);
                }
                return Err(corrupt(si - j));
            }
            let c = src[si];
            si += 1;
            if let Some(v) = dec(c) {
                dbuf[j] = v;
                j += 1;
                continue;
            }
            if c == b'\n' || c == b'\r' {
                continue;
            }
            if c != b'=' {
                return Err(corrupt(si - 1));
            }
            match j {
                0 | 1 => return Err(corrupt(si - 1)),
                2 => {
                    while si < src.len() && (src[si] == b'\n' || src[si] == b'\r') {
                        si += 1;
                    }
                    if si == src.len() {
                        return Err(corrupt(src.len()));
                    }
                    if src[si] != b'=' {
                        return Err(corrupt(si - 1));
                    }
                    si += 1;
                }
                _ => {}
            }
            while si < src.len() && (src[si] == b'\n' || src[si] == b'\r') {
                si += 1;
            }
            if si < src.len() {
                err = Some(corrupt(si));
            }
            dlen = j;
            break;
        }
        let val = (dbuf[0] << 18) | (dbuf[1] << 12) | (dbuf[2] << 6) | dbuf[3];
        let b = [(val >> 16) as u8, (val >> 8) as u8, val as u8];
        match dlen {
            4 => out.extend_from_slice(&b),
            3 => out.extend_from_slice(&b[..2]),
            2 => out.push(b[0]),
            _ => {}
        }
        if let Some(e) = err {
            return Err(e);
        }
    }
    Ok(out)
}

const B32: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

fn b32_encode(src: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for chunk in src.chunks(5) {
        let mut buf = [0u8; 5];
        buf[..chunk.len()].copy_from_slice(chunk);
        let v = buf.iter().fold(0u64, |a, &b| (a << 8) | u64::from(b));
        let chars = match chunk.len() {
            1 => 2,
            2 => 4,
            3 => 5,
            4 => 7,
            _ => 8,
        };
        for i in 0..8 {
            if i < chars {
                out.push(B32[((v >> (35 - 5 * i)) & 31) as usize]);
            } else {
                out.push(b'=');
            }
        }
    }
    out
}

/// Go's `base32.StdEncoding.DecodeString` (new lines dropped first), with its error text.
fn b32_decode(src: &[u8]) -> Result<Vec<u8>, String> {
    let src: Vec<u8> = src
        .iter()
        .copied()
        .filter(|c| *c != b'\n' && *c != b'\r')
        .collect();
    let corrupt = |i: usize| format!("illegal base32 data at input byte {i}");
    let olen = src.len();
    let mut rest: &[u8] = &src;
    let mut out = Vec::new();
    let mut end = false;
    while !rest.is_empty() && !end {
        let mut dbuf = [0u8; 8];
        let mut dlen = 8;
        let mut j = 0;
        while j < 8 {
            if rest.is_empty() {
                return Err(corrupt(olen - j));
            }
            let c = rest[0];
            rest = &rest[1..];
            if c == b'=' && j >= 2 && rest.len() < 8 {
                if rest.len() + j < 7 {
                    return Err(corrupt(olen));
                }
                for k in 0..7 - j {
                    if rest.len() > k && rest[k] != b'=' {
                        return Err(corrupt(olen - rest.len() + k - 1));
                    }
                }
                dlen = j;
                end = true;
                if matches!(dlen, 1 | 3 | 6) {
                    return Err(corrupt(olen - rest.len() - 1));
                }
                break;
            }
            match B32.iter().position(|a| *a == c) {
                Some(d) => dbuf[j] = d as u8,
                None => return Err(corrupt(olen - rest.len() - 1)),
            }
            j += 1;
        }
        let v = dbuf.iter().fold(0u64, |a, &d| (a << 5) | u64::from(d));
        let n = match dlen {
            8 => 5,
            7 => 4,
            5 => 3,
            4 => 2,
            2 => 1,
            _ => 0,
        };
        out.extend_from_slice(&v.to_be_bytes()[3..3 + n]);
    }
    Ok(out)
}

// ---- JSON (Go's encoding/json) ----

fn from_json(s: &[u8]) -> Res {
    let j: serde_json::Value = serde_json::from_slice(s).map_err(|e| e.to_string())?;
    Ok(json_floats(&j))
}

/// JSON decoded as Go's `json.Unmarshal` into `interface{}`: every number a `float64`.
fn json_floats(j: &serde_json::Value) -> Value {
    match j {
        serde_json::Value::Number(n) => Value::Float(n.as_f64().unwrap_or_default()),
        serde_json::Value::Array(a) => any_list(a.iter().map(json_floats).collect()),
        serde_json::Value::Object(m) => Value::map(
            m.iter()
                .map(|(k, v)| (k.as_bytes().to_vec(), json_floats(v)))
                .collect(),
        ),
        other => Value::from_json(other),
    }
}

fn to_json(v: &Value, escape_html: bool, pretty: bool) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    encode(v, escape_html, &mut out)?;
    if pretty {
        return Ok(indent_json(&out));
    }
    Ok(out)
}

fn encode(v: &Value, html: bool, out: &mut Vec<u8>) -> Result<(), String> {
    match v {
        Value::Invalid | Value::NilInterface | Value::List(_, None) | Value::Map(_, None) => {
            out.extend_from_slice(b"null");
        }
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        // A `*time.Location` has no exported field.
        Value::Location(_) => out.extend_from_slice(b"{}"),
        Value::Time(t) => {
            // `Time.MarshalJSON`: RFC 3339 with nanoseconds, years 0 to 9999 only.
            let text = t
                .format(b"2006-01-02T15:04:05.999999999Z07:00")
                .filter(|s| s.first().is_some_and(u8::is_ascii_digit) && s.len() >= 4 && s[4] == b'-')
                .ok_or("json: error calling MarshalJSON for type time.Time: Time.MarshalJSON: year outside of range [0,9999]")?;
            encode_string(&text, html, out);
        }
        Value::Int(i) | Value::Int64(i) | Value::Named(_, i) => {
            out.extend_from_slice(i.to_string().as_bytes());
        }
        Value::Uint8(u) => out.extend_from_slice(u.to_string().as_bytes()),
        Value::Float(f) => {
            if !f.is_finite() {
                return Err(format!("json: unsupported value: {f}"));
            }
            let abs = f.abs();
            let e = abs != 0.0 && !(1e-6..1e21).contains(&abs);
            let mut s = fmt::format_float(*f, if e { b'e' } else { b'f' }, -1).into_bytes();
            if e {
                let n = s.len();
                if n >= 4 && s[n - 4] == b'e' && s[n - 3] == b'-' && s[n - 2] == b'0' {
                    s[n - 2] = s[n - 1];
                    s.truncate(n - 1);
                }
            }
            out.extend_from_slice(&s);
        }
        Value::Str(s) => encode_string(s, html, out),
        Value::List(..) => {
            out.push(b'[');
            for (i, e) in v.items().unwrap_or(&[]).iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                encode(e, html, out)?;
            }
            out.push(b']');
        }
        Value::Map(..) | Value::Struct(_) => {
            let m = match v {
                Value::Struct(m) => m.as_ref(),
                _ => entries(v),
            };
            out.push(b'{');
            for (i, (k, e)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                encode_string(k, html, out);
                out.push(b':');
                encode(e, html, out)?;
            }
            out.push(b'}');
        }
    }
    Ok(())
}

fn encode_string(s: &[u8], html: bool, out: &mut Vec<u8>) {
    out.push(b'"');
    let mut i = 0;
    while i < s.len() {
        let (c, n) = decode_rune(&s[i..]);
        if n == 1 && c == '\u{FFFD}' && s[i] >= 0x80 {
            out.extend_from_slice(b"\\ufffd");
            i += 1;
            continue;
        }
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\x08' => out.extend_from_slice(b"\\b"),
            '\x0c' => out.extend_from_slice(b"\\f"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            '<' | '>' | '&' if html => {
                out.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes());
            }
            '\u{2028}' | '\u{2029}' => {
                out.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes());
            }
            c if (c as u32) < 0x20 => {
                out.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes());
            }
            _ => out.extend_from_slice(&s[i..i + n]),
        }
        i += n;
    }
    out.push(b'"');
}

/// Go's `json.Indent(…, "", "  ")` of compact JSON.
fn indent_json(src: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut need_indent = false;
    let newline = |out: &mut Vec<u8>, depth: usize| {
        out.push(b'\n');
        for _ in 0..depth {
            out.extend_from_slice(b"  ");
        }
    };
    for &c in src {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == b'\\' {
                escaped = true;
            } else if c == b'"' {
                in_string = false;
            }
            continue;
        }
        if need_indent && c != b']' && c != b'}' {
            need_indent = false;
            depth += 1;
            newline(&mut out, depth);
        }
        match c {
            b'"' => {
                in_string = true;
                out.push(c);
            }
            b'{' | b'[' => {
                out.push(c);
                need_indent = true;
            }
            b',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            b':' => out.extend_from_slice(b": "),
            b'}' | b']' => {
                if need_indent {
                    need_indent = false;
                } else {
                    depth = depth.saturating_sub(1);
                    newline(&mut out, depth);
                }
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}
