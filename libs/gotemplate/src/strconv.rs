//! Go's `strconv` and `unicode/utf8` pieces the engine prints with: characters decoded as Go
//! decodes them (an invalid byte is U+FFFD of width 1), `strconv.Quote`/`QuoteRune` and
//! `IsPrint`. A leaf: values, printing, times and durations all quote through it.

/// Decodes one character of `s` as Go does: an invalid byte is U+FFFD of width 1.
pub(crate) fn decode_rune(s: &[u8]) -> (char, usize) {
    let n = match s.first() {
        None => return ('\u{FFFD}', 0),
        Some(b) if *b < 0x80 => return (*b as char, 1),
        Some(b) if b >> 5 == 0b110 => 2,
        Some(b) if b >> 4 == 0b1110 => 3,
        Some(b) if b >> 3 == 0b11110 => 4,
        Some(_) => return ('\u{FFFD}', 1),
    };
    match s.get(..n).and_then(|c| std::str::from_utf8(c).ok()) {
        Some(c) => (c.chars().next().unwrap_or('\u{FFFD}'), n),
        None => ('\u{FFFD}', 1),
    }
}

/// The characters of `s` with their widths, as Go's `for range` over a string sees them.
pub(crate) fn runes(s: &[u8]) -> Vec<(char, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let (c, n) = decode_rune(&s[i..]);
        out.push((c, n));
        i += n;
    }
    out
}

/// Whether Go's `strconv.IsPrint` holds, closely enough: letters, marks, numbers, punctuation,
/// symbols and the ASCII space.
pub(crate) fn is_print(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    let u = c as u32;
    // Format characters, private use, surrogates and non-characters are not printable.
    !matches!(u,
        0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x180E | 0x200B..=0x200F
        | 0x202A..=0x202E | 0x2060..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB
        | 0xE000..=0xF8FF | 0xFFFE | 0xFFFF | 0xF0000..=0x10FFFF)
}

/// Go's `strconv.Quote`.
pub fn quote(s: &[u8]) -> String {
    quote_with(s, false)
}

pub(crate) fn quote_with(s: &[u8], ascii: bool) -> String {
    let mut out = String::from("\"");
    let mut i = 0;
    while i < s.len() {
        let (c, n) = decode_rune(&s[i..]);
        if n == 1 && c == '\u{FFFD}' && s[i] >= 0x80 {
            out.push_str(&format!("\\x{:02x}", s[i]));
            i += 1;
            continue;
        }
        escape_rune(&mut out, c, '"', ascii);
        i += n;
    }
    out.push('"');
    out
}

/// Go's `strconv.QuoteRune` (`QuoteRuneToASCII` with `ascii`).
pub(crate) fn quote_rune(c: char, ascii: bool) -> String {
    let mut out = String::from("'");
    escape_rune(&mut out, c, '\'', ascii);
    out.push('\'');
    out
}

fn escape_rune(out: &mut String, c: char, quote: char, ascii: bool) {
    if c == quote || c == '\\' {
        out.push('\\');
        out.push(c);
        return;
    }
    if ascii {
        if (c as u32) < 0x80 && is_print(c) {
            out.push(c);
            return;
        }
    } else if is_print(c) {
        out.push(c);
        return;
    }
    match c {
        '\x07' => out.push_str("\\a"),
        '\x08' => out.push_str("\\b"),
        '\x0c' => out.push_str("\\f"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\x0b' => out.push_str("\\v"),
        c if (c as u32) < ' ' as u32 || c as u32 == 0x7f => {
            out.push_str(&format!("\\x{:02x}", c as u32));
        }
        c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
        c => out.push_str(&format!("\\U{:08x}", c as u32)),
    }
}
