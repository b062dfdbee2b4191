//! `provider:name` globs for choosing probes.
//!
//! `*` matches any run of characters and `?` one character, as in a shell. A pattern without
//! `:` is about the name alone, under any provider, so `query__*` finds `postgresql:query__start`;
//! with `:` each side is matched separately (`*:*start`, `python:function__*`). An empty side
//! means any. Probe names in sdt.h are C identifiers (with `__` for `-`), so no escapes exist.

use std::fmt;

/// The provider under which function probes (`fn:GLOB`) are spelled: the pattern grammar gives
/// it its own rule (a name may hold `:`, as C++ and Go symbols do).
pub const FN_PROVIDER: &str = "fn";

/// A compiled `provider:name` glob.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pattern {
    text: String,
    provider: Option<String>,
    name: String,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error("empty probe pattern")]
    Empty,
    #[error("probe pattern {pattern:?} has more than one ':' (expected provider:name or name)")]
    TooManyColons { pattern: String },
}

impl Pattern {
    pub fn parse(text: &str) -> Result<Pattern, PatternError> {
        let t = text.trim();
        if t.is_empty() {
            return Err(PatternError::Empty);
        }
        let side = |s: &str| {
            if s.is_empty() {
                "*".to_string()
            } else {
                s.to_string()
            }
        };
        let (provider, name) = match t.split_once(':') {
            None => (None, t.to_string()),
            // Function names (`fn:ns::f`, C++ and Rust) have colons of their own.
            Some((p, n)) if n.contains(':') && p != FN_PROVIDER => {
                return Err(PatternError::TooManyColons {
                    pattern: t.to_string(),
                })
            }
            Some((p, n)) => (Some(side(p)), side(n)),
        };
        Ok(Pattern {
            text: t.to_string(),
            provider,
            name,
        })
    }

    /// A pattern matching every probe.
    pub fn any() -> Pattern {
        Pattern {
            text: "*".into(),
            provider: None,
            name: "*".into(),
        }
    }

    pub fn matches(&self, provider: &str, name: &str) -> bool {
        self.provider.as_deref().is_none_or(|p| glob(p, provider)) && glob(&self.name, name)
    }

    /// Whether this pattern selects function `name` (`fn:GLOB`): by the function's name, or by
    /// the name of one of its sites as the tool prints them (`fn:readline__entry`,
    /// `fn:readline__return`), so that every name shown can be typed back.
    pub fn matches_function(&self, name: &str) -> bool {
        if !self
            .provider
            .as_deref()
            .is_none_or(|p| glob(p, FN_PROVIDER))
        {
            return false;
        }
        glob(&self.name, name)
            || ["__entry", "__return"].iter().any(|sfx| {
                self.name
                    .strip_suffix(sfx)
                    .is_some_and(|stem| glob(stem, name))
            })
    }

    /// True when the pattern names exactly one provider:name (no wildcards, provider given).
    pub fn is_literal(&self) -> bool {
        self.provider.is_some() && !self.text.contains(['*', '?'])
    }

    /// The provider side, None when the pattern is about the name alone.
    pub fn provider(&self) -> Option<&str> {
        self.provider.as_deref()
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::str::FromStr for Pattern {
    type Err = PatternError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Pattern::parse(s)
    }
}

/// Glob match with backtracking to the last `*` only, so it runs in O(len(p) * len(s)) at worst.
fn glob(pattern: &str, s: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let s: Vec<char> = s.chars().collect();
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, si));
            pi += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn m(p: &str, provider: &str, name: &str) -> bool {
        Pattern::parse(p).unwrap().matches(provider, name)
    }

    #[test]
    fn name_only_patterns_match_any_provider() {
        assert!(m("query__*", "postgresql", "query__start"));
        assert!(m("query__*", "other", "query__done"));
        assert!(!m("query__*", "postgresql", "transaction__start"));
        assert!(m("query__start", "postgresql", "query__start"));
        assert!(!m("query__start", "postgresql", "query__start2"));
    }

    #[test]
    fn provider_and_name() {
        assert!(m("*:*start", "python", "function__start"));
        assert!(!m("*:*start", "python", "function__return"));
        assert!(m("python:*", "python", "gc__done"));
        assert!(!m("python:*", "postgresql", "gc__done"));
        assert!(m("test:probe", "test", "probe"));
        assert!(
            !m("test:probe", "test_dup_name", "probe"),
            "similar providers differ"
        );
        assert!(m("test*:probe", "test_dup_name", "probe"));
        assert!(
            m(":probe", "anything", "probe"),
            "empty provider side means any"
        );
        assert!(m("test:", "test", "anything"), "empty name side means any");
    }

    #[test]
    fn question_mark_and_stars() {
        assert!(m("a?c", "p", "abc"));
        assert!(!m("a?c", "p", "ac"));
        assert!(m("*", "p", ""));
        assert!(m("**a**b**", "p", "xxaxxbxx"));
        assert!(!m("*a*b", "p", "xxbxxa"));
        assert!(m("h?llo*w?rld", "p", "hello big world"));
        assert!(m("é*", "p", "été"));
        // The classic exponential case stays fast.
        let long = "a".repeat(200);
        assert!(!m(&format!("{}b", "a*".repeat(50)), "p", &long));
    }

    #[test]
    fn errors_and_display() {
        assert_eq!(Pattern::parse(""), Err(PatternError::Empty));
        assert_eq!(Pattern::parse("  "), Err(PatternError::Empty));
        assert!(matches!(
            Pattern::parse("a:b:c"),
            Err(PatternError::TooManyColons { .. })
        ));
        let f = Pattern::parse("fn:ns::*").unwrap();
        assert!(f.matches("fn", "ns::run"));
        assert_eq!(f.provider(), Some("fn"));
        let p: Pattern = "python:*".parse().unwrap();
        assert_eq!(p.to_string(), "python:*");
        assert!(!p.is_literal());
        assert!(Pattern::parse("python:gc__done").unwrap().is_literal());
        assert!(!Pattern::parse("gc__done").unwrap().is_literal());
        assert!(Pattern::any().matches("x", "y"));
    }
}
