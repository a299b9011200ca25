//! Go `encoding/json` string encoding, so generated JSON is byte-identical to upstream's.

/// Appends `bytes` as a Go-encoded JSON string: `"`, `\` and control characters escaped (`\n`, `\r`,
/// `\t`, `\b`, `\f`, else `\u00XX`), HTML-sensitive `<`, `>`, `&` as `\u003c`, `\u003e`, `\u0026`,
/// U+2028/U+2029 escaped, and invalid UTF-8 replaced by `\ufffd`.
pub(crate) fn write_string(out: &mut String, bytes: &[u8]) {
    out.push('"');
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                }
                c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                c => out.push(c),
            }
        }
        if !chunk.invalid().is_empty() {
            out.push_str("\\ufffd");
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_like_go() {
        let mut s = String::new();
        write_string(&mut s, b"a<b>&\"\\\n\x01\x08\xe2\x80\xa8\xff");
        assert_eq!(s, r#""a\u003cb\u003e\u0026\"\\\n\u0001\b\u2028\ufffd""#);
    }
}
