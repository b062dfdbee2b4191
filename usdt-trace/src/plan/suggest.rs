//! "Did you mean ...?": the closest of the names a command could have meant, for a probe
//! pattern, a `--filter` field or a function glob that matched nothing.
//!
//! The distance is the edit distance from a glob to a name where `*` matches any run and `?`
//! any one character for free, so `httpserver:reqest__*` is one edit from
//! `httpserver:request__start` (the glob would match it with one letter added). (pure)

use crate::elf::ObjectProbes;
use crate::util::pattern::Pattern;

/// Edits (insertions, deletions, substitutions) that make `glob` match `name`.
pub fn glob_distance(glob: &str, name: &str) -> usize {
    let g: Vec<char> = glob.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // d[j]: distance from the glob's first i characters to the name's first j.
    let mut d: Vec<usize> = (0..=n.len()).collect();
    for &gc in &g {
        let mut next = vec![0; n.len() + 1];
        next[0] = if gc == '*' { d[0] } else { d[0] + 1 };
        for j in 1..=n.len() {
            next[j] = if gc == '*' {
                // The star takes nothing more (d[j]) or one more character (next[j - 1]).
                d[j].min(next[j - 1])
            } else {
                let same = gc == '?' || gc == n[j - 1];
                (d[j - 1] + usize::from(!same))
                    .min(d[j] + 1)
                    .min(next[j - 1] + 1)
            };
        }
        d = next;
    }
    d[n.len()]
}

/// The candidate closest to `typed`, if one is close enough to be what was meant: at most a
/// third of its length away, or two edits for short words (a swapped pair is two), and never
/// 0: an exact match is no typo. Ties go to the first.
pub fn closest<'a>(typed: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let len = typed.chars().count();
    let most = (len / 3).max(2).min(len.saturating_sub(1));
    let mut best: Option<(usize, &str)> = None;
    for c in candidates {
        let d = glob_distance(typed, c);
        if d > 0 && d <= most && best.is_none_or(|(b, _)| d < b) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

/// `; did you mean X?` for an error message's end, or nothing.
pub fn did_you_mean(best: Option<&str>) -> String {
    best.map(|b| format!("; did you mean {b}?"))
        .unwrap_or_default()
}

/// `; did you mean P?` naming the probe (or `fn:` function) of `objects` closest to the first
/// of `patterns` that is close to one, or empty. A pattern without a provider is compared
/// with the names alone, and the suggestion still names the provider.
pub fn probe(objects: &[(&str, &ObjectProbes)], patterns: &[&Pattern]) -> String {
    let probes: std::collections::BTreeSet<(String, String)> = objects
        .iter()
        .flat_map(|(_, o)| o.sites.iter())
        .map(|s| match crate::elf::function_of(s) {
            Some(f) => (
                f.to_string(),
                format!("{}:{f}", crate::util::pattern::FN_PROVIDER),
            ),
            None => (s.name.clone(), format!("{}:{}", s.provider, s.name)),
        })
        .collect();
    for pat in patterns {
        let best = if pat.provider().is_some() {
            closest(pat.as_str(), probes.iter().map(|(_, full)| full.as_str()))
        } else {
            closest(pat.as_str(), probes.iter().map(|(name, _)| name.as_str()))
                .and_then(|n| probes.iter().find(|(name, _)| name == n))
                .map(|(_, full)| full.as_str())
        };
        if best.is_some() {
            return did_you_mean(best);
        }
    }
    String::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_glob_with_a_missing_letter_is_one_edit_away() {
        assert_eq!(
            glob_distance("httpserver:reqest__*", "httpserver:request__start"),
            1
        );
        assert_eq!(glob_distance("a*", "abc"), 0);
        assert_eq!(glob_distance("a?c", "abc"), 0);
        assert_eq!(glob_distance("kitten", "sitting"), 3);
        assert_eq!(glob_distance("", "ab"), 2);
    }

    #[test]
    fn closest_picks_the_nearest_and_refuses_far_ones() {
        let names = [
            "httpserver:request__start",
            "httpserver:send_message__start",
        ];
        assert_eq!(
            closest("httpserver:reqest__*", names),
            Some("httpserver:request__start")
        );
        assert_eq!(closest("zzz:qqq", names), None);
        assert_eq!(closest("pdi", ["pid", "tid", "comm"]), Some("pid"));
        assert_eq!(did_you_mean(Some("pid")), "; did you mean pid?");
        assert_eq!(did_you_mean(None), "");
    }
}
