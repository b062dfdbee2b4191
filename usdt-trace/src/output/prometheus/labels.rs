//! Label values of `--by` keys: numbers in decimal, strings as they are but for escapes that
//! keep every distinct byte string a distinct value.   (pure)

use crate::output::agg::{Key, KeyVal};

/// A key's label value: its fields joined by ", " (as the text tables show a `--by comm,arg1`
/// key), each as `field_label` writes it. With several fields, a comma inside a string is
/// `\x2c`: else the fields ("a, b", "c") and ("a", "b, c") would be one series.
pub fn key_label(k: &Key) -> String {
    let several = k.0.len() > 1;
    let parts: Vec<String> =
        k.0.iter()
            .map(|f| {
                let l = field_label(f);
                if several && matches!(f, KeyVal::Str(_) | KeyVal::CutStr(_)) {
                    l.replace(',', "\\x2c")
                } else {
                    l
                }
            })
            .collect();
    parts.join(", ")
}

/// A key field's label value: numbers in decimal, strings escaped by `bytes_label`, a string
/// cut at `--str-max` followed by `…`.
pub fn field_label(k: &KeyVal) -> String {
    match k {
        KeyVal::Uint(v) => v.to_string(),
        KeyVal::Int(v) => v.to_string(),
        KeyVal::Str(b) => bytes_label(b),
        KeyVal::CutStr(b) => bytes_label(b) + "…",
        KeyVal::NoStr => crate::output::agg::NO_STRING_LABEL.to_string(),
    }
}

/// A program's string as a label value, reversibly, so that two different strings are never
/// one series and nothing a program writes reaches a terminal or a log as a control byte:
///
/// - a byte that is not part of valid UTF-8 is `\xNN` (never U+FFFD: two strings would print
///   alike);
/// - a backslash is `\\` (else the bytes `\x80` and the text `\x80` would be one series);
/// - an ASCII control byte (NUL to 0x1f, DEL: ESC, CR, LF, TAB...) is `\xNN`, a Unicode
///   control character (U+0080 to U+009F) `\u{NN}`;
/// - a `…` in the string is `\u{2026}`, so that the `…` marking a cut string is only that.
///
/// Everything else is itself.
pub fn bytes_label(mut b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len());
    let push_str = |out: &mut String, s: &str| {
        for c in s.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '…' => out.push_str("\\u{2026}"),
                c if c.is_ascii_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
                c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
                c => out.push(c),
            }
        }
    };
    while !b.is_empty() {
        match std::str::from_utf8(b) {
            Ok(s) => {
                push_str(&mut out, s);
                break;
            }
            Err(e) => {
                let (good, rest) = b.split_at(e.valid_up_to());
                push_str(&mut out, std::str::from_utf8(good).unwrap_or_default());
                let bad = e.error_len().unwrap_or(rest.len()).max(1);
                for byte in &rest[..bad] {
                    out.push_str(&format!("\\x{byte:02x}"));
                }
                b = &rest[bad..];
            }
        }
    }
    out
}
