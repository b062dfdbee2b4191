//! Escaping for what reaches a terminal: probe names, comms, paths and strings come from
//! files and processes we do not trust. Below the printers (and `procmaps`, which names a
//! kernel thread in its error), so that every layer escapes the same way.

/// True for characters that must not reach a terminal raw: C0 and C1 controls (escape
/// sequences, `\r`, bell), DEL, and the bidirectional overrides and isolates that reorder
/// what is shown.
pub fn is_unsafe_for_terminal(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Whether every byte is printable ASCII (`' '..='~'`) other than a backslash. Eight bytes at
/// a time: `list` asks this of every name and argument it prints.
fn plain_ascii(b: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // Whether some byte of x is zero, or below n (n <= 128): exact as to whether there is one.
    let below = |x: u64, n: u8| x.wrapping_sub(ONES * u64::from(n)) & !x & HIGHS != 0;
    let plain = |x: u64| {
        x & HIGHS == 0
            && !below(x, b' ')
            && !below(x ^ (ONES * 0x7f), 1)
            && !below(x ^ (ONES * u64::from(b'\\')), 1)
    };
    let word = |w: &[u8]| u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
    // Four bytes, the other four of the word spaces.
    let half = |w: &[u8]| {
        u64::from(u32::from_le_bytes(w.try_into().unwrap_or([0; 4]))) | (ONES * 0x20) << 32
    };
    // Words overlap at the end when the length is not a multiple of their size: a byte
    // looked at twice is no harm. Most names and arguments are under 8 bytes.
    match b.len() {
        0..4 => b.iter().all(|&c| (b' '..=b'~').contains(&c) && c != b'\\'),
        4..8 => plain(half(&b[..4])) && plain(half(&b[b.len() - 4..])),
        n => b.chunks_exact(8).all(|w| plain(word(w))) && plain(word(&b[n - 8..])),
    }
}

/// `s` with every character unsafe for a terminal written as a `\u{..}` escape (a
/// backslash is doubled, so the escaped form is never ambiguous).
pub fn clean(s: &str) -> std::borrow::Cow<'_, str> {
    // Printable ASCII without a backslash, by far the common case, is decided on bytes:
    // decoding chars made this a seventh of `list`'s time on 50,000 sites.
    if plain_ascii(s.as_bytes()) {
        return std::borrow::Cow::Borrowed(s);
    }
    if !s.chars().any(|c| is_unsafe_for_terminal(c) || c == '\\') {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            c if is_unsafe_for_terminal(c) => {
                use std::fmt::Write as _;
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

thread_local! {
    /// What this thread's [`say`] lines start with.
    static SPEAKER: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Names the lines this thread [`say`]s: a `serve` definition's thread sets
/// `usdt-trace serve: [NAME] `, so that the daemon's log tells which definition attached,
/// detached or refused what.
pub(crate) fn set_speaker(prefix: String) {
    SPEAKER.with(|s| *s.borrow_mut() = prefix);
}

/// One line on stderr about what a run attached, detached or refused (its untrusted parts
/// [`clean`]ed by the caller), after the thread's name for itself.
pub(crate) fn say(line: &str) {
    SPEAKER.with(|s| eprintln!("{}{line}", s.borrow()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_ascii_is_printable_ascii_without_a_backslash() {
        let naive = |b: &[u8]| b.iter().all(|&c| (b' '..=b'~').contains(&c) && c != b'\\');
        // Every byte value at every place of words and tails, among plain neighbours of
        // both extremes (a borrow across bytes must not hide or invent one).
        for fill in [b' ', b'~', b'0'] {
            for len in 1..20 {
                for at in 0..len {
                    for v in 0..=255u8 {
                        let mut b = vec![fill; len];
                        b[at] = v;
                        assert_eq!(plain_ascii(&b), naive(&b), "{b:?}");
                    }
                }
            }
        }
        assert!(plain_ascii(b""));
    }

    #[test]
    fn clean_escapes_what_a_terminal_would_obey() {
        assert_eq!(clean("hotspot:gc__begin"), "hotspot:gc__begin");
        assert_eq!(clean("a\\b"), "a\\\\b");
        assert_eq!(clean("\u{1b}[31mred"), "\\u{1b}[31mred");
        assert_eq!(clean("x\u{202e}y\u{7f}é"), "x\\u{202e}y\\u{7f}é");
    }
}
