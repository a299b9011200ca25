//! Go's `fmt` (`Sprint`, `Sprintln`, `Sprintf`) and the parts of `strconv` it uses, over
//! [`Value`]s: maps in key order as `map[k:v]`, slices as `[a b]`, floats in the shortest form
//! with Go's exponents (`1e+21`, `1e-07`), `<nil>`, and the `%!verb(type=value)`,
//! `%!verb(MISSING)` and `%!(EXTRA …)` forms for what does not fit. About 1,100 lines, as Go's
//! `fmt/print.go` and `format.go` together: every verb's rules per value kind, which must agree
//! with each other.

use crate::strconv::{decode_rune, is_print, quote_rune, quote_with, runes};
use crate::value::Value;

#[derive(Clone, Copy, Default)]
struct Flags {
    plus: bool,
    minus: bool,
    sharp: bool,
    space: bool,
    zero: bool,
    plus_v: bool,
    sharp_v: bool,
    wid: Option<usize>,
    prec: Option<usize>,
}

struct Printer {
    buf: Vec<u8>,
    f: Flags,
}

/// `fmt.Sprint`: operands printed with `%v`, a space between two operands when neither is a
/// string.
pub fn sprint(args: &[Value]) -> Vec<u8> {
    let mut p = Printer::new();
    let mut prev_string = false;
    for (i, a) in args.iter().enumerate() {
        let is_string = matches!(a, Value::Str(_));
        if i > 0 && !is_string && !prev_string {
            p.buf.push(b' ');
        }
        p.print_arg(a, 'v');
        prev_string = is_string;
    }
    p.buf
}

/// `fmt.Sprintln`: operands printed with `%v`, always separated by a space, and a newline.
pub(crate) fn sprintln(args: &[Value]) -> Vec<u8> {
    let mut p = Printer::new();
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            p.buf.push(b' ');
        }
        p.print_arg(a, 'v');
    }
    p.buf.push(b'\n');
    p.buf
}

/// `%v` of one value.
pub(crate) fn sprint_v(v: &Value) -> Vec<u8> {
    let mut p = Printer::new();
    p.print_arg(v, 'v');
    p.buf
}

/// `fmt.Sprintf`.
pub fn sprintf(format: &[u8], args: &[Value]) -> Vec<u8> {
    let mut p = Printer::new();
    let end = format.len();
    let mut i = 0;
    let mut arg_num = 0;
    let mut reordered = false;
    while i < end {
        let lasti = i;
        while i < end && format[i] != b'%' {
            i += 1;
        }
        p.buf.extend_from_slice(&format[lasti..i]);
        if i >= end {
            break;
        }
        i += 1; // the '%'
        p.f = Flags::default();
        while i < end {
            match format[i] {
                b'#' => p.f.sharp = true,
                b'0' => p.f.zero = true,
                b'+' => p.f.plus = true,
                b'-' => p.f.minus = true,
                b' ' => p.f.space = true,
                _ => break,
            }
            i += 1;
        }
        // An explicit argument index is rare in templates; Go accepts it, and so do we.
        let mut good_arg_num = true;
        let mut after_index = false;
        if i < end && format[i] == b'[' {
            reordered = true;
            match arg_index(format, i, args.len()) {
                (Some(n), ni) => {
                    arg_num = n;
                    i = ni;
                    after_index = true;
                }
                (None, ni) => {
                    good_arg_num = false;
                    i = ni;
                }
            }
        }
        if i < end && format[i] == b'*' {
            i += 1;
            match int_from_arg(args, arg_num) {
                Some(w) => {
                    if w < 0 {
                        p.f.minus = true;
                        p.f.zero = false;
                    }
                    p.f.wid = Some(w.unsigned_abs() as usize);
                }
                None => p.buf.extend_from_slice(b"%!(BADWIDTH)"),
            }
            arg_num += 1;
            after_index = false;
        } else {
            let (n, ni) = parse_num(format, i);
            if n.is_some() && after_index {
                good_arg_num = false;
            }
            p.f.wid = n;
            i = ni;
        }
        if i < end && format[i] == b'.' {
            i += 1;
            if after_index {
                good_arg_num = false;
            }
            if i < end && format[i] == b'[' {
                reordered = true;
                match arg_index(format, i, args.len()) {
                    (Some(n), ni) => {
                        arg_num = n;
                        i = ni;
                        after_index = true;
                    }
                    (None, ni) => {
                        good_arg_num = false;
                        i = ni;
                    }
                }
            }
            if i < end && format[i] == b'*' {
                i += 1;
                match int_from_arg(args, arg_num) {
                    Some(pr) if pr >= 0 => p.f.prec = Some(pr as usize),
                    Some(_) => p.f.prec = None,
                    None => {
                        p.f.prec = None;
                        p.buf.extend_from_slice(b"%!(BADPREC)");
                    }
                }
                arg_num += 1;
                after_index = false;
            } else {
                let (n, ni) = parse_num(format, i);
                p.f.prec = Some(n.unwrap_or(0));
                i = ni;
            }
        }
        if !after_index && i < end && format[i] == b'[' {
            reordered = true;
            match arg_index(format, i, args.len()) {
                (Some(n), ni) => {
                    arg_num = n;
                    i = ni;
                }
                (None, ni) => {
                    good_arg_num = false;
                    i = ni;
                }
            }
        }
        if i >= end {
            p.buf.extend_from_slice(b"%!(NOVERB)");
            break;
        }
        let (verb, size) = decode_rune(&format[i..]);
        i += size;
        if verb == '%' {
            p.buf.push(b'%');
        } else if !good_arg_num {
            p.bad_arg_num(verb);
        } else if arg_num >= args.len() {
            p.buf.extend_from_slice(b"%!");
            push_char(&mut p.buf, verb);
            p.buf.extend_from_slice(b"(MISSING)");
        } else {
            if verb == 'v' {
                p.f.sharp_v = p.f.sharp;
                p.f.sharp = false;
                p.f.plus_v = p.f.plus;
                p.f.plus = false;
            }
            p.print_arg(&args[arg_num], verb);
            arg_num += 1;
        }
    }
    if !reordered && arg_num < args.len() {
        p.f = Flags::default();
        p.buf.extend_from_slice(b"%!(EXTRA ");
        for (k, a) in args[arg_num..].iter().enumerate() {
            if k > 0 {
                p.buf.extend_from_slice(b", ");
            }
            if let Value::Invalid | Value::NilInterface = a {
                p.buf.extend_from_slice(b"<nil>");
            } else {
                p.buf.extend_from_slice(a.type_name().as_bytes());
                p.buf.push(b'=');
                p.print_arg(a, 'v');
            }
        }
        p.buf.push(b')');
    }
    p.buf
}

fn parse_num(s: &[u8], mut i: usize) -> (Option<usize>, usize) {
    let start = i;
    let mut n: usize = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        if n > 1_000_000 {
            return (None, s.len());
        }
        n = n * 10 + usize::from(s[i] - b'0');
        i += 1;
    }
    if i == start { (None, i) } else { (Some(n), i) }
}

fn arg_index(s: &[u8], i: usize, num_args: usize) -> (Option<usize>, usize) {
    // s[i] == '['
    for j in i + 1..s.len() {
        if s[j] == b']' {
            let (n, end) = parse_num(s, i + 1);
            return match n {
                Some(n) if end == j && n >= 1 && n <= num_args => (Some(n - 1), j + 1),
                _ => (None, j + 1),
            };
        }
    }
    (None, i + 1)
}

fn int_from_arg(args: &[Value], n: usize) -> Option<i64> {
    match args.get(n)? {
        Value::Int(i) | Value::Int64(i) if i.unsigned_abs() <= 1_000_000 => Some(*i),
        Value::Uint8(u) => Some(i64::from(*u)),
        _ => None,
    }
}

fn push_char(buf: &mut Vec<u8>, c: char) {
    let mut b = [0u8; 4];
    buf.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
}

impl Printer {
    fn new() -> Printer {
        Printer {
            buf: Vec::new(),
            f: Flags::default(),
        }
    }

    fn print_arg(&mut self, v: &Value, verb: char) {
        if let Value::Invalid | Value::NilInterface = v {
            match verb {
                'T' | 'v' => self.pad_string(b"<nil>"),
                _ => self.bad_verb(verb, v),
            }
            return;
        }
        if verb == 'T' {
            self.fmt_s(v.type_name().as_bytes());
            return;
        }
        if verb == 'p' {
            self.bad_verb(verb, v);
            return;
        }
        self.print_value(v, verb, 0);
    }

    fn print_value(&mut self, v: &Value, verb: char, depth: usize) {
        match v {
            Value::Invalid | Value::NilInterface => {
                if depth == 0 {
                    self.buf.extend_from_slice(b"<invalid reflect.Value>");
                } else if verb == 'v' {
                    self.buf.extend_from_slice(b"<nil>");
                } else {
                    self.bad_verb(verb, v);
                }
            }
            Value::Bool(b) => self.fmt_bool(*b, verb, v),
            Value::Int(i) | Value::Int64(i) => self.fmt_integer(*i as u64, true, verb, v),
            Value::Uint8(u) => self.fmt_integer(u64::from(*u), false, verb, v),
            Value::Float(x) => self.fmt_float(*x, verb, v),
            Value::Str(s) => self.fmt_string(s, verb, v),
            Value::Time(t) => {
                // Go calls `String()` for the verbs a string takes; the others would print the
                // struct's private fields (a pointer among them), shown here as a bad verb.
                let text = t.string().unwrap_or_default();
                if matches!(verb, 'v' | 's' | 'x' | 'X' | 'q') {
                    self.fmt_string(&text, verb, &Value::str(&text));
                } else {
                    self.bad_verb(verb, v);
                }
            }
            Value::Named(kind, n) => {
                // A `Stringer`: `String()` for the verbs a string takes, the integer otherwise.
                let text = kind.string(*n);
                if matches!(verb, 'v' | 's' | 'x' | 'X' | 'q') && !self.f.sharp_v {
                    self.fmt_string(text.as_bytes(), verb, &Value::str(&text));
                } else {
                    self.fmt_integer(*n as u64, true, verb, v);
                }
            }
            Value::Location(loc) => {
                // A `Stringer`; the other verbs would show the pointer, shown as a bad verb.
                let text = loc.name();
                if matches!(verb, 'v' | 's' | 'x' | 'X' | 'q') && !self.f.sharp_v {
                    self.fmt_string(text.as_bytes(), verb, &Value::str(&text));
                } else {
                    self.bad_verb(verb, v);
                }
            }
            Value::Map(_, m) => {
                if self.f.sharp_v {
                    self.buf.extend_from_slice(v.type_name().as_bytes());
                    if m.is_none() {
                        self.buf.extend_from_slice(b"(nil)");
                        return;
                    }
                    self.buf.push(b'{');
                } else {
                    self.buf.extend_from_slice(b"map[");
                }
                let any = matches!(v, Value::Map(crate::value::MapElem::Any, _));
                for (i, (k, e)) in v.entries().into_iter().flatten().enumerate() {
                    if i > 0 {
                        if self.f.sharp_v {
                            self.buf.extend_from_slice(b", ");
                        } else {
                            self.buf.push(b' ');
                        }
                    }
                    self.print_value(&Value::str(k), verb, depth + 1);
                    self.buf.push(b':');
                    self.print_elem(e, any, verb, depth + 1);
                }
                self.buf.push(if self.f.sharp_v { b'}' } else { b']' });
            }
            Value::List(elem, items) => {
                if self.f.sharp_v {
                    self.buf.extend_from_slice(v.type_name().as_bytes());
                    if items.is_none() {
                        self.buf.extend_from_slice(b"(nil)");
                        return;
                    }
                    self.buf.push(b'{');
                    for (i, e) in v.items().unwrap_or(&[]).iter().enumerate() {
                        if i > 0 {
                            self.buf.extend_from_slice(b", ");
                        }
                        self.print_elem(e, *elem == crate::value::Elem::Any, verb, depth + 1);
                    }
                    self.buf.push(b'}');
                    return;
                }
                self.buf.push(b'[');
                for (i, e) in v.items().unwrap_or(&[]).iter().enumerate() {
                    if i > 0 {
                        self.buf.push(b' ');
                    }
                    self.print_elem(e, *elem == crate::value::Elem::Any, verb, depth + 1);
                }
                self.buf.push(b']');
            }
            Value::Struct(fields) => {
                if self.f.sharp_v {
                    self.buf.extend_from_slice(v.type_name().as_bytes());
                }
                self.buf.push(b'{');
                for (i, (k, e)) in fields.iter().enumerate() {
                    if i > 0 {
                        if self.f.sharp_v {
                            self.buf.extend_from_slice(b", ");
                        } else {
                            self.buf.push(b' ');
                        }
                    }
                    if self.f.plus_v || self.f.sharp_v {
                        self.buf.extend_from_slice(k);
                        self.buf.push(b':');
                    }
                    self.print_elem(e, true, verb, depth + 1);
                }
                self.buf.push(b'}');
            }
        }
    }

    /// An element of a container; in an `interface{}` container a nil element is a nil
    /// interface (`<nil>`, or `interface {}(nil)` with `%#v`) whatever the verb.
    fn print_elem(&mut self, e: &Value, interface: bool, verb: char, depth: usize) {
        if interface && matches!(e, Value::Invalid | Value::NilInterface) {
            if self.f.sharp_v {
                self.buf.extend_from_slice(b"interface {}(nil)");
            } else {
                self.buf.extend_from_slice(b"<nil>");
            }
            return;
        }
        self.print_value(e, verb, depth);
    }

    fn bad_verb(&mut self, verb: char, v: &Value) {
        self.buf.extend_from_slice(b"%!");
        push_char(&mut self.buf, verb);
        self.buf.push(b'(');
        if let Value::Invalid | Value::NilInterface = v {
            self.buf.extend_from_slice(b"<nil>");
        } else {
            self.buf.extend_from_slice(v.type_name().as_bytes());
            self.buf.push(b'=');
            if let Value::Named(_, n) = v {
                // Go prints a bad verb's operand without calling its methods.
                self.buf.extend_from_slice(n.to_string().as_bytes());
            } else {
                self.print_arg(v, 'v');
            }
        }
        self.buf.push(b')');
    }

    fn bad_arg_num(&mut self, verb: char) {
        self.buf.extend_from_slice(b"%!");
        push_char(&mut self.buf, verb);
        self.buf.extend_from_slice(b"(BADINDEX)");
    }

    fn fmt_bool(&mut self, b: bool, verb: char, v: &Value) {
        match verb {
            't' | 'v' => self.pad_string(if b { b"true" } else { b"false" }),
            _ => self.bad_verb(verb, v),
        }
    }

    fn fmt_integer(&mut self, u: u64, signed: bool, verb: char, v: &Value) {
        match verb {
            'v' => {
                if self.f.sharp_v && !signed {
                    let sharp = self.f.sharp;
                    self.f.sharp = true;
                    self.fmt_int(u, 16, signed, verb, false);
                    self.f.sharp = sharp;
                } else {
                    self.fmt_int(u, 10, signed, verb, false);
                }
            }
            'd' => self.fmt_int(u, 10, signed, verb, false),
            'b' => self.fmt_int(u, 2, signed, verb, false),
            'o' | 'O' => self.fmt_int(u, 8, signed, verb, false),
            'x' => self.fmt_int(u, 16, signed, verb, false),
            'X' => self.fmt_int(u, 16, signed, verb, true),
            'c' => {
                let c = char_of(u, signed);
                let mut b = Vec::new();
                push_char(&mut b, c);
                self.pad(&b);
            }
            'q' => {
                let c = char_of(u, signed);
                let q = quote_rune(c, self.f.plus);
                self.pad(q.as_bytes());
            }
            'U' => {
                let s = format!("U+{u:04X}");
                let mut s = s.into_bytes();
                if let Some(c) = char::from_u32(u as u32)
                    .filter(|c| self.f.sharp && u <= 0x10FFFF && is_print(*c))
                {
                    s.extend_from_slice(b" '");
                    push_char(&mut s, c);
                    s.push(b'\'');
                }
                let old = self.f.zero;
                self.f.zero = false;
                self.pad(&s);
                self.f.zero = old;
            }
            _ => self.bad_verb(verb, v),
        }
    }

    /// Go's `fmt.fmtInteger`.
    fn fmt_int(&mut self, u: u64, base: u64, signed: bool, verb: char, upper: bool) {
        let negative = signed && (u as i64) < 0;
        let mut u = if negative {
            (u as i64).unsigned_abs()
        } else {
            u
        };
        let mut prec = 0usize;
        if let Some(p) = self.f.prec {
            prec = p;
            if p == 0 && u == 0 {
                let old = self.f.zero;
                self.f.zero = false;
                self.write_padding(self.f.wid.unwrap_or(0));
                self.f.zero = old;
                return;
            }
        } else if self.f.zero && !self.f.minus && self.f.wid.is_some() {
            prec = self.f.wid.unwrap_or(0);
            if negative || self.f.plus || self.f.space {
                prec = prec.saturating_sub(1);
            }
        }
        let digits: &[u8] = if upper {
            b"0123456789ABCDEFX"
        } else {
            b"0123456789abcdefx"
        };
        let mut out: Vec<u8> = Vec::new();
        loop {
            out.push(digits[(u % base) as usize]);
            u /= base;
            if u == 0 {
                break;
            }
        }
        while out.len() < prec {
            out.push(b'0');
        }
        if self.f.sharp {
            match base {
                2 => out.extend_from_slice(b"b0"),
                8 if out.last() != Some(&b'0') => out.push(b'0'),
                16 => {
                    out.push(digits[16]);
                    out.push(b'0');
                }
                _ => {}
            }
        }
        if verb == 'O' {
            out.extend_from_slice(b"o0");
        }
        if negative {
            out.push(b'-');
        } else if self.f.plus {
            out.push(b'+');
        } else if self.f.space {
            out.push(b' ');
        }
        out.reverse();
        let old = self.f.zero;
        self.f.zero = false;
        self.pad(&out);
        self.f.zero = old;
    }

    fn fmt_float(&mut self, x: f64, verb: char, v: &Value) {
        match verb {
            'v' => self.fmt_float_as(x, 'g', -1),
            'b' | 'g' | 'G' | 'x' | 'X' => self.fmt_float_as(x, verb, -1),
            'f' | 'e' | 'E' => self.fmt_float_as(x, verb, 6),
            'F' => self.fmt_float_as(x, 'f', 6),
            _ => self.bad_verb(verb, v),
        }
    }

    /// Go's `fmt.fmtFloat` (without `#`, which the sharp flag adds for `%#g` and friends).
    fn fmt_float_as(&mut self, x: f64, verb: char, prec: i32) {
        let prec = self.f.prec.map_or(prec, |p| p.min(10_000) as i32);
        let mut num = format_float(x, verb as u8, prec).into_bytes();
        if num[0] == b'-' || num[0] == b'+' {
            // sign present
        } else {
            num.insert(0, b'+');
        }
        if self.f.space && num[0] == b'+' && !self.f.plus {
            num[0] = b' ';
        }
        if num[1] == b'I' || num[1] == b'N' {
            let old = self.f.zero;
            self.f.zero = false;
            if num[1] == b'N' && !self.f.space && !self.f.plus {
                num.remove(0);
            }
            self.pad(&num);
            self.f.zero = old;
            return;
        }
        if self.f.sharp && verb != 'b' {
            let mut digits: i64 = match verb {
                'v' | 'g' | 'G' | 'x' => {
                    if prec == -1 {
                        6
                    } else {
                        i64::from(prec)
                    }
                }
                _ => 0,
            };
            let mut tail = Vec::new();
            let mut has_point = false;
            let mut saw_nonzero = false;
            let mut i = 1;
            while i < num.len() {
                match num[i] {
                    b'.' => has_point = true,
                    b'p' | b'P' => {
                        tail = num.split_off(i);
                        break;
                    }
                    b'e' | b'E' if verb != 'x' && verb != 'X' => {
                        tail = num.split_off(i);
                        break;
                    }
                    c => {
                        if c != b'0' {
                            saw_nonzero = true;
                        }
                        if saw_nonzero {
                            digits -= 1;
                        }
                    }
                }
                i += 1;
            }
            if !has_point {
                if num.len() == 2 && num[1] == b'0' {
                    digits -= 1;
                }
                num.push(b'.');
            }
            while digits > 0 {
                num.push(b'0');
                digits -= 1;
            }
            num.extend_from_slice(&tail);
        }
        if self.f.plus || num[0] != b'+' {
            if self.f.zero && !self.f.minus && self.f.wid.is_some_and(|w| w > num.len()) {
                self.buf.push(num[0]);
                let w = self.f.wid.unwrap_or(0) - num.len();
                self.write_padding(w);
                self.buf.extend_from_slice(&num[1..]);
                return;
            }
            self.pad(&num);
            return;
        }
        self.pad(&num[1..]);
    }

    fn fmt_string(&mut self, s: &[u8], verb: char, v: &Value) {
        match verb {
            'v' => {
                if self.f.sharp_v {
                    self.fmt_q(s);
                } else {
                    self.fmt_s(s);
                }
            }
            's' => self.fmt_s(s),
            'x' => self.fmt_sx(s, false),
            'X' => self.fmt_sx(s, true),
            'q' => self.fmt_q(s),
            _ => self.bad_verb(verb, v),
        }
    }

    fn truncate<'a>(&self, s: &'a [u8]) -> &'a [u8] {
        if let Some(p) = self.f.prec {
            let mut n = 0;
            let mut i = 0;
            while i < s.len() {
                n += 1;
                if n > p {
                    return &s[..i];
                }
                i += decode_rune(&s[i..]).1;
            }
        }
        s
    }

    fn fmt_s(&mut self, s: &[u8]) {
        let s = self.truncate(s).to_vec();
        self.pad_string(&s);
    }

    fn fmt_sx(&mut self, s: &[u8], upper: bool) {
        let digits: &[u8] = if upper {
            b"0123456789ABCDEF"
        } else {
            b"0123456789abcdef"
        };
        let length = self.f.prec.map_or(s.len(), |p| p.min(s.len()));
        let mut out = Vec::new();
        for (i, c) in s[..length].iter().enumerate() {
            if self.f.space && i > 0 {
                out.push(b' ');
            }
            if self.f.sharp && (self.f.space || i == 0) {
                out.push(b'0');
                out.push(if upper { b'X' } else { b'x' });
            }
            out.push(digits[usize::from(c >> 4)]);
            out.push(digits[usize::from(c & 15)]);
        }
        self.pad(&out);
    }

    fn fmt_q(&mut self, s: &[u8]) {
        let s = self.truncate(s);
        let q = if self.f.sharp && can_backquote(s) {
            let mut q = vec![b'`'];
            q.extend_from_slice(s);
            q.push(b'`');
            q
        } else {
            quote_with(s, self.f.plus).into_bytes()
        };
        self.pad(&q);
    }

    fn pad_string(&mut self, s: &[u8]) {
        self.pad(s);
    }

    fn write_padding(&mut self, n: usize) {
        let b = if self.f.zero && !self.f.minus {
            b'0'
        } else {
            b' '
        };
        self.buf.extend(std::iter::repeat_n(b, n));
    }

    fn pad(&mut self, s: &[u8]) {
        let Some(wid) = self.f.wid.filter(|w| *w > 0) else {
            self.buf.extend_from_slice(s);
            return;
        };
        let width = wid.saturating_sub(runes(s).len());
        if !self.f.minus {
            self.write_padding(width);
            self.buf.extend_from_slice(s);
        } else {
            self.buf.extend_from_slice(s);
            self.write_padding(width);
        }
    }
}

fn char_of(u: u64, signed: bool) -> char {
    if signed && (u as i64) < 0 {
        return '\u{FFFD}';
    }
    if u > 0x10FFFF {
        return '\u{FFFD}';
    }
    char::from_u32(u as u32).unwrap_or('\u{FFFD}')
}

fn can_backquote(s: &[u8]) -> bool {
    let mut i = 0;
    while i < s.len() {
        let (c, n) = decode_rune(&s[i..]);
        if n == 1 && c == '\u{FFFD}' && s[i] >= 0x80 {
            return false;
        }
        if c == '`' || c == '\u{FEFF}' || (c < ' ' && c != '\t') || c == '\u{7F}' {
            return false;
        }
        i += n;
    }
    true
}

/// The decimal digits of `x` (no sign, no trailing zeros) and the position of the decimal
/// point, rounded to `digits` significant digits, or the shortest that reads back as `x`.
fn decimal(x: f64, digits: Option<usize>) -> (Vec<u8>, i32) {
    if x == 0.0 {
        return (Vec::new(), 0);
    }
    let s = match digits {
        None => format!("{:e}", x.abs()),
        Some(d) => format!("{:.*e}", d.saturating_sub(1), x.abs()),
    };
    let (mant, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let mut ds: Vec<u8> = mant.bytes().filter(u8::is_ascii_digit).collect();
    while ds.last() == Some(&b'0') {
        ds.pop();
    }
    if ds.is_empty() {
        return (Vec::new(), 0);
    }
    (ds, exp + 1)
}

/// Go's `strconv.FormatFloat(x, fmt, prec, 64)` for the formats `e E f g G x X b`.
pub fn format_float(x: f64, fmt: u8, prec: i32) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    let neg = x.is_sign_negative();
    match fmt {
        b'x' | b'X' => return fmt_x(x, prec, fmt),
        b'b' => {
            let bits = x.to_bits();
            let mut exp = ((bits >> 52) & 0x7ff) as i64;
            let mut mant = bits & ((1 << 52) - 1);
            if exp == 0 {
                exp += 1;
            } else {
                mant |= 1 << 52;
            }
            exp += -1023 - 52;
            let sign = if neg { "-" } else { "" };
            return format!("{sign}{mant}p{}{exp}", if exp >= 0 { "+" } else { "" });
        }
        _ => {}
    }
    let shortest = prec < 0;
    let (digs, dp, prec) = match fmt {
        b'e' | b'E' => {
            let d = decimal(
                x,
                if shortest {
                    None
                } else {
                    Some(prec as usize + 1)
                },
            );
            let p = if shortest {
                d.0.len().max(1) as i32 - 1
            } else {
                prec
            };
            (d.0, d.1, p)
        }
        b'f' => {
            if shortest {
                let d = decimal(x, None);
                let p = (d.0.len() as i32 - d.1).max(0);
                (d.0, d.1, p)
            } else {
                // Exact rounding to `prec` decimals.
                let s = format!("{:.*}", prec as usize, x.abs());
                let mut out = String::new();
                if neg {
                    out.push('-');
                }
                out.push_str(&s);
                return out;
            }
        }
        _ => {
            // 'g' / 'G'
            let p = if prec == 0 { 1 } else { prec };
            let d = decimal(x, if shortest { None } else { Some(p as usize) });
            let p = if shortest { d.0.len() as i32 } else { p };
            (d.0, d.1, p)
        }
    };
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    let nd = digs.len() as i32;
    match fmt {
        b'e' | b'E' => fmt_e(&mut out, &digs, dp, prec, fmt),
        b'f' => fmt_f(&mut out, &digs, dp, prec),
        _ => {
            let mut eprec = prec;
            if eprec > nd && nd >= dp {
                eprec = nd;
            }
            if shortest {
                eprec = 6;
            }
            let exp = dp - 1;
            if exp < -4 || exp >= eprec {
                let p = if prec > nd { nd } else { prec };
                fmt_e(&mut out, &digs, dp, p - 1, fmt + b'e' - b'g');
            } else {
                let p = if prec > dp { nd } else { prec };
                fmt_f(&mut out, &digs, dp, (p - dp).max(0));
            }
        }
    }
    out
}

fn digit(digs: &[u8], i: i32) -> char {
    if i >= 0 && (i as usize) < digs.len() {
        digs[i as usize] as char
    } else {
        '0'
    }
}

fn fmt_e(out: &mut String, digs: &[u8], dp: i32, prec: i32, fmt: u8) {
    out.push(if digs.is_empty() { '0' } else { digit(digs, 0) });
    if prec > 0 {
        out.push('.');
        for i in 1..=prec {
            out.push(digit(digs, i));
        }
    }
    out.push(fmt as char);
    let mut exp = if digs.is_empty() { 0 } else { dp - 1 };
    if exp < 0 {
        out.push('-');
        exp = -exp;
    } else {
        out.push('+');
    }
    if exp < 10 {
        out.push('0');
    }
    out.push_str(&exp.to_string());
}

fn fmt_f(out: &mut String, digs: &[u8], dp: i32, prec: i32) {
    if dp > 0 {
        for i in 0..dp {
            out.push(digit(digs, i));
        }
    } else {
        out.push('0');
    }
    if prec > 0 {
        out.push('.');
        for i in 0..prec {
            out.push(digit(digs, dp + i));
        }
    }
}

fn fmt_x(x: f64, prec: i32, fmt: u8) -> String {
    let bits = x.to_bits();
    let neg = bits >> 63 != 0;
    let mut exp = ((bits >> 52) & 0x7ff) as i64;
    let mut mant = bits & ((1 << 52) - 1);
    if exp == 0 {
        exp += 1;
    } else {
        mant |= 1 << 52;
    }
    exp -= 1023;
    if mant == 0 {
        exp = 0;
    }
    mant <<= 60 - 52;
    while mant != 0 && mant & (1 << 60) == 0 {
        mant <<= 1;
        exp -= 1;
    }
    if (0..15).contains(&prec) {
        let shift = (prec * 4) as u32;
        let extra = (mant << shift) & ((1 << 60) - 1);
        mant >>= 60 - shift;
        if extra | (mant & 1) > 1 << 59 {
            mant += 1;
        }
        mant <<= 60 - shift;
        if mant & (1 << 61) != 0 {
            mant >>= 1;
            exp += 1;
        }
    }
    let hex: &[u8] = if fmt == b'X' {
        b"0123456789ABCDEF"
    } else {
        b"0123456789abcdef"
    };
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    out.push('0');
    out.push(fmt as char);
    out.push((b'0' + ((mant >> 60) & 1) as u8) as char);
    mant <<= 4;
    if prec < 0 && mant != 0 {
        out.push('.');
        while mant != 0 {
            out.push(hex[((mant >> 60) & 15) as usize] as char);
            mant <<= 4;
        }
    } else if prec > 0 {
        out.push('.');
        for _ in 0..prec {
            out.push(hex[((mant >> 60) & 15) as usize] as char);
            mant <<= 4;
        }
    }
    out.push(if fmt == b'X' { 'P' } else { 'p' });
    if exp < 0 {
        out.push('-');
        exp = -exp;
    } else {
        out.push('+');
    }
    if exp < 10 {
        out.push('0');
    }
    out.push_str(&exp.to_string());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(x: f64) -> String {
        String::from_utf8(sprint(&[Value::Float(x)])).unwrap()
    }

    #[test]
    fn floats_print_as_go_prints_them() {
        assert_eq!(f(1e21), "1e+21");
        assert_eq!(f(1e-7), "1e-07");
        assert_eq!(f(1.5), "1.5");
        assert_eq!(f(3.0), "3");
        assert_eq!(f(1e6), "1e+06");
        assert_eq!(f(123456.0), "123456");
        assert_eq!(f(0.0001), "0.0001");
        assert_eq!(f(0.00001), "1e-05");
        assert_eq!(f(-0.0), "-0");
        assert_eq!(format_float(1.5, b'e', 6), "1.500000e+00");
        assert_eq!(format_float(1.5, b'x', -1), "0x1.8p+00");
        assert_eq!(format_float(0.0, b'x', -1), "0x0p+00");
        assert_eq!(format_float(2.675, b'f', 2), "2.67");
        assert_eq!(format_float(1.0, b'g', 3), "1");
    }

    fn pf(format: &str, args: &[Value]) -> String {
        String::from_utf8(sprintf(format.as_bytes(), args)).unwrap()
    }

    #[test]
    fn printf_verbs_flags_and_errors() {
        let s = Value::str("backup");
        assert_eq!(pf("%05d", &[Value::Int(-4)]), "-0004");
        assert_eq!(pf("%-4d|", &[Value::Int(3)]), "3   |");
        assert_eq!(pf("%8s|", &[Value::Int(2)]), "%!s(int=       2)|");
        assert_eq!(pf("%05d", std::slice::from_ref(&s)), "%!d(string=backup)");
        assert_eq!(pf("%.2f", std::slice::from_ref(&s)), "%!f(string=ba)");
        assert_eq!(pf("%x", std::slice::from_ref(&s)), "6261636b7570");
        assert_eq!(pf("%q", &[Value::Int(97)]), "'a'");
        assert_eq!(pf("%s", &[Value::Invalid]), "%!s(<nil>)");
        assert_eq!(pf("%s %s", std::slice::from_ref(&s)), "backup %!s(MISSING)");
        assert_eq!(
            pf("%%", &[s.clone(), Value::Invalid]),
            "%%!(EXTRA string=backup, <nil>)"
        );
        assert_eq!(pf("%T", &[Value::Int64(1)]), "int64");
        assert_eq!(
            pf("%#v", &[Value::list(vec![Value::str("a"), Value::Invalid])]),
            "[]interface {}{\"a\", interface {}(nil)}"
        );
        assert_eq!(
            pf("%d", &[Value::list(vec![Value::str("a"), Value::Invalid])]),
            "[%!d(string=a) <nil>]"
        );
        assert_eq!(pf("%05s", &[Value::str("ab")]), "000ab");
    }
}
