//! Label values of `--by` keys: numbers in decimal, strings as they are, bytes that are not
//! UTF-8 escaped.   (pure)

use crate::agg::{Key, KeyVal};

/// A key's label value: its fields joined by ", " (as the text tables show a `--by comm,arg1`
/// key), each as `field_label` writes it.
pub fn key_label(k: &Key) -> String {
    let parts: Vec<String> = k.0.iter().map(field_label).collect();
    parts.join(", ")
}

/// A key field's label value: numbers in decimal, strings as they are, a byte that is not
/// UTF-8 as `\xNN` (never U+FFFD: two different strings must not print alike), a string cut
/// at `--str-max` followed by `…`.
pub fn field_label(k: &KeyVal) -> String {
    match k {
        KeyVal::Uint(v) => v.to_string(),
        KeyVal::Int(v) => v.to_string(),
        KeyVal::Str(b) => bytes_label(b),
        KeyVal::CutStr(b) => bytes_label(b) + "…",
    }
}

fn bytes_label(mut b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len());
    while !b.is_empty() {
        match std::str::from_utf8(b) {
            Ok(s) => {
                out.push_str(s);
                break;
            }
            Err(e) => {
                let (good, rest) = b.split_at(e.valid_up_to());
                out.push_str(std::str::from_utf8(good).unwrap_or_default());
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
