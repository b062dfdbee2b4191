//! Basic auth against bcrypt hashes, as exporter-toolkit checks it, and for the same reasons:
//!
//! - bcrypt is slow on purpose (cost 10: ~50 ms of CPU), so checking it on every scrape
//!   would let any client burn the daemon's CPU: a successful check is remembered, keyed by a
//!   SHA-256 of the user, the hash and the password (never the password itself), at most
//!   [`MAX_CACHED`] of them. Only successes are kept: a client guessing passwords cannot push
//!   the real scraper's entry out, and pays a full bcrypt for every guess;
//! - bcrypts run one at a time (one lock): guesses on 32 connections cost one core, not all;
//! - a user who does not exist costs the same bcrypt as one who does (against the costliest
//!   hash of the file, then refused), and names are compared in constant time over digests of
//!   equal length: the answer's timing does not tell which users exist.

use ring::digest::{digest, SHA256};
use std::sync::Mutex;

/// Successful checks remembered (a scraper or two per daemon; more are simply checked again).
pub const MAX_CACHED: usize = 64;

/// The bcrypt versions Apache's htpasswd, Python's bcrypt and Go's bcrypt write.
const PREFIXES: [&str; 3] = ["$2y$", "$2b$", "$2a$"];

/// Costs accepted. Each step doubles a check's time (cost 10: tens of milliseconds; 15: about
/// a second): above 15 one refused guess (an unknown user is checked against the costliest
/// hash) would hold the one-at-a-time bcrypt for seconds to days, and a real scraper behind it.
pub const COSTS: std::ops::RangeInclusive<u32> = 4..=15;

/// Whether `hash` is a bcrypt hash this checks: one line saying what is wrong when not.
pub(super) fn check_hash(hash: &str) -> Result<(), String> {
    if !PREFIXES.iter().any(|p| hash.starts_with(p)) {
        return Err("not a bcrypt hash ($2y$, $2b$ or $2a$)".into());
    }
    let parts = hash
        .parse::<bcrypt::HashParts>()
        .map_err(|e| format!("not a valid bcrypt hash ({e})"))?;
    let cost = parts.get_cost();
    if !COSTS.contains(&cost) {
        return Err(format!(
            "bcrypt cost {cost}: expected {} to {} (each step doubles the time of a check)",
            COSTS.start(),
            COSTS.end()
        ));
    }
    Ok(())
}

/// What a request's credentials are worth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// Missing, malformed, an unknown user or a wrong password: all one answer, 401.
    Refused,
}

pub struct BasicAuth {
    /// SHA-256 of each name, and its hash: compared digest to digest, always all of them.
    users: Vec<([u8; 32], String)>,
    /// The hash an unknown user is checked against: the costliest, so that refusing a name
    /// takes as long as refusing a password.
    decoy: usize,
    cache: Mutex<Vec<[u8; 32]>>,
    bcrypt: Mutex<()>,
}

fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    // Each part length-prefixed: ("ab", "c") and ("a", "bc") are different keys.
    let mut buf = Vec::new();
    for p in parts {
        buf.extend_from_slice(&(p.len() as u64).to_le_bytes());
        buf.extend_from_slice(p);
    }
    let d = digest(&SHA256, &buf);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// Equal in time independent of where they differ.
fn ct_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

impl BasicAuth {
    /// `users`: names and hashes already checked by [`check_hash`].
    pub(super) fn new(users: Vec<(String, String)>) -> BasicAuth {
        let cost = |h: &str| {
            h.parse::<bcrypt::HashParts>()
                .map(|p| p.get_cost())
                .unwrap_or(0)
        };
        let decoy = users
            .iter()
            .enumerate()
            .max_by_key(|(_, (_, h))| cost(h))
            .map_or(0, |(i, _)| i);
        BasicAuth {
            users: users
                .into_iter()
                .map(|(u, h)| (sha256(&[u.as_bytes()]), h))
                .collect(),
            decoy,
            cache: Mutex::new(Vec::new()),
            bcrypt: Mutex::new(()),
        }
    }

    pub fn users(&self) -> usize {
        self.users.len()
    }

    /// The request head's `Authorization` value (None when there is none).
    pub fn check(&self, authorization: Option<&str>) -> Verdict {
        let Some((user, password)) = authorization.and_then(decode_basic) else {
            return Verdict::Refused;
        };
        let name = sha256(&[&user]);
        let mut found: Option<usize> = None;
        for (i, (n, _)) in self.users.iter().enumerate() {
            // Every name compared, none skipped once one matched.
            if ct_eq(n, &name) {
                found = Some(i);
            }
        }
        let Some(entry) = self.users.get(found.unwrap_or(self.decoy)) else {
            return Verdict::Refused;
        };
        let hash = &entry.1;
        let key = sha256(&[&user, hash.as_bytes(), &password]);
        if found.is_some() && self.cache.lock().is_ok_and(|c| c.contains(&key)) {
            return Verdict::Allowed;
        }
        let ok = {
            let _one_at_a_time = self.bcrypt.lock();
            bcrypt::verify(&password, hash).unwrap_or(false)
        };
        if !(ok && found.is_some()) {
            return Verdict::Refused;
        }
        if let Ok(mut c) = self.cache.lock() {
            if c.len() >= MAX_CACHED {
                c.remove(0);
            }
            c.push(key);
        }
        Verdict::Allowed
    }
}

/// `Basic BASE64(user:password)` → the user and the password, as bytes.
fn decode_basic(value: &str) -> Option<(Vec<u8>, Vec<u8>)> {
    use base64::Engine;
    let (scheme, rest) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(rest.trim())
        .ok()?;
    let colon = raw.iter().position(|&b| b == b':')?;
    Some((raw[..colon].to_vec(), raw[colon + 1..].to_vec()))
}

/// The value of the `Authorization` header of a request head, if it has one.
pub fn authorization(head: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(head).ok()?;
    text.split('\n').skip(1).find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("authorization")
            .then(|| value.trim())
    })
}
