//! Who may scrape, in Prometheus' own web-config format (the `--web.config.file` of
//! exporter-toolkit, which node_exporter and Prometheus itself read): basic auth with bcrypt
//! hashes, TLS, and client certificates. `watch --web-config FILE` and `serve`'s
//! `web-config = "FILE"` name the same YAML file:
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt        # relative paths are from the file's directory
//!   key_file: server.key
//!   client_auth_type: RequireAndVerifyClientCert   # optional, with client_ca_file
//!   client_ca_file: clients-ca.crt
//! basic_auth_users:
//!   alice: $2y$10$...            # bcrypt: htpasswd -nbB alice PASSWORD
//! ```
//!
//! - here: the YAML → typed [`Settings`] (pure), then [`Web`]: the files read (through the
//!   config file's own checks, `trusted`) and the TLS config built;
//! - `auth`: checking a request's `Authorization` against the users;
//! - `tls`: the certificates → a rustls server config.

mod auth;
mod tls;

pub use auth::{authorization, BasicAuth, Verdict};
pub use tls::ClientAuth;

use crate::util::trusted::FileError;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A problem with the web config or a file it names, as one line naming the file.
#[derive(Debug, thiserror::Error)]
pub enum WebConfigError {
    /// Not readable, or refused by the config file's checks (mode, owner, type, size).
    #[error("web config {0}")]
    File(FileError),
    #[error("web config {file}: {msg}")]
    Bad { file: String, msg: String },
}

/// `tls_server_config` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping: cert_file, key_file, ...")]
struct RawTls {
    cert_file: Option<String>,
    key_file: Option<String>,
    client_auth_type: Option<String>,
    client_ca_file: Option<String>,
    min_version: Option<String>,
    max_version: Option<String>,
    // exporter-toolkit's, read so that they are refused by name as not supported here
    // rather than as unknown: rustls chooses its own (modern) suites and curves.
    cert: Option<serde_norway::Value>,
    key: Option<serde_norway::Value>,
    cipher_suites: Option<serde_norway::Value>,
    curve_preferences: Option<serde_norway::Value>,
    prefer_server_cipher_suites: Option<serde_norway::Value>,
    client_allowed_sans: Option<serde_norway::Value>,
}

/// The file as written.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping: tls_server_config, basic_auth_users"
)]
struct RawWeb {
    tls_server_config: Option<RawTls>,
    /// A mapping kept as such: a user named twice is an error, not the last one winning.
    basic_auth_users: Option<serde_norway::Mapping>,
    /// exporter-toolkit's (HTTP/2, extra headers): refused by name.
    http_server_config: Option<serde_norway::Value>,
}

/// TLS versions rustls speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

/// `tls_server_config`, checked; paths resolved against the file's directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub client_auth: ClientAuth,
    pub client_ca_file: Option<PathBuf>,
    pub min_version: TlsVersion,
    pub max_version: TlsVersion,
}

/// The web config, checked, before any file it names is read.   (pure)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub tls: Option<TlsSettings>,
    /// User name → bcrypt hash, in the file's order.
    pub users: Vec<(String, String)>,
}

/// The loaded web config: what a connection needs.
pub struct Web {
    pub path: PathBuf,
    pub auth: Option<BasicAuth>,
    pub tls: Option<tls::Tls>,
}

impl std::fmt::Debug for Web {
    // Never the hashes: a Debug print can end up in a log.
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "Web({}: {})", self.path.display(), self.describe())
    }
}

impl Web {
    /// Reads and checks `path` and every file it names; the TLS config built.
    pub fn load(path: &Path) -> Result<Arc<Web>, WebConfigError> {
        let text = crate::util::trusted::read(path).map_err(WebConfigError::File)?;
        let s = parse(path, &text)?;
        let tls = s
            .tls
            .as_ref()
            .map(tls::Tls::load)
            .transpose()
            .map_err(|e| match e {
                tls::TlsError::File(f) => WebConfigError::File(f),
                tls::TlsError::Bad(msg) => WebConfigError::Bad {
                    file: path.display().to_string(),
                    msg,
                },
            })?;
        let auth = (!s.users.is_empty()).then(|| BasicAuth::new(s.users));
        Ok(Arc::new(Web {
            path: path.to_path_buf(),
            auth,
            tls,
        }))
    }

    /// Whether a client must prove who it is (a password, or a verified certificate) before it
    /// reads anything.
    pub fn authenticates(&self) -> bool {
        self.auth.is_some() || self.tls.as_ref().is_some_and(|t| t.required_client_cert())
    }

    /// `https` or `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// What it asks of a client, for the log and `serve --check`: "TLS, client certificates,
    /// basic auth (2 users)".
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(t) = &self.tls {
            parts.push("TLS".to_string());
            match t.client_auth {
                ClientAuth::None => {}
                ClientAuth::IfGiven => parts.push("client certificates if given".into()),
                ClientAuth::Required => parts.push("client certificates".into()),
            }
        }
        if let Some(a) = &self.auth {
            let n = a.users();
            parts.push(format!(
                "basic auth ({n} user{})",
                if n == 1 { "" } else { "s" }
            ));
        }
        if parts.is_empty() {
            "no TLS, no auth".into()
        } else {
            parts.join(", ")
        }
    }
}

/// Why strings exported over TCP under `web` are readable by others, or None when a client
/// must prove who it is first (a password, a verified certificate).
pub fn exposed(web: Option<&Web>) -> Option<&'static str> {
    match web {
        Some(w) if w.authenticates() => None,
        Some(w) if w.tls.is_some() => Some(
            "readable by anyone who can connect there: TLS encrypts them on the way but asks no one who they are; add basic_auth_users or client certificates to the web config",
        ),
        _ => Some(
            "readable by anyone who can connect there; a web config with basic_auth_users or client certificates, or a unix: socket, limits who can",
        ),
    }
}

/// One line of a YAML error: its message, with where.
fn yaml_error(e: &serde_norway::Error) -> String {
    let msg = e.to_string().replace('\n', " ");
    // serde's "unknown field" names the key; the location is appended by the crate.
    msg.trim().to_string()
}

fn version(key: &str, v: Option<&str>, default: TlsVersion) -> Result<TlsVersion, String> {
    match v {
        None => Ok(default),
        Some("TLS12") => Ok(TlsVersion::Tls12),
        Some("TLS13") => Ok(TlsVersion::Tls13),
        Some(v @ ("TLS10" | "TLS11")) => Err(format!(
            "tls_server_config: {key} {v}: not supported (TLS 1.2 and 1.3 only)"
        )),
        Some(v) => Err(format!(
            "tls_server_config: {key} {v:?}: expected TLS12 or TLS13"
        )),
    }
}

/// Checks the text of a web config (`path` names it in errors and anchors relative paths).
pub fn parse(path: &Path, text: &str) -> Result<Settings, WebConfigError> {
    let bad = |msg: String| WebConfigError::Bad {
        file: path.display().to_string(),
        msg,
    };
    // An empty file (or only comments) is a config with nothing in it, as exporter-toolkit
    // reads it: no TLS, no auth.
    let raw: Option<RawWeb> = serde_norway::from_str(text).map_err(|e| bad(yaml_error(&e)))?;
    let Some(raw) = raw else {
        return Ok(Settings {
            tls: None,
            users: Vec::new(),
        });
    };
    if raw.http_server_config.is_some() {
        return Err(bad(
            "http_server_config: not supported (HTTP/1.1 only, no extra headers)".into(),
        ));
    }
    let dir = path.parent().unwrap_or(Path::new("/"));
    let resolve = |p: &str| -> PathBuf {
        let p = Path::new(p);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            dir.join(p)
        }
    };
    let tls = match raw.tls_server_config {
        None => None,
        Some(t) => {
            for (key, set) in [
                ("cert", t.cert.is_some()),
                ("key", t.key.is_some()),
                ("cipher_suites", t.cipher_suites.is_some()),
                ("curve_preferences", t.curve_preferences.is_some()),
                (
                    "prefer_server_cipher_suites",
                    t.prefer_server_cipher_suites.is_some(),
                ),
                ("client_allowed_sans", t.client_allowed_sans.is_some()),
            ] {
                if set {
                    let why = if key == "cert" || key == "key" {
                        "name the PEM files with cert_file and key_file"
                    } else {
                        "rustls chooses among modern suites and curves itself"
                    };
                    return Err(bad(format!(
                        "tls_server_config: {key}: not supported ({why})"
                    )));
                }
            }
            let need = |v: Option<String>, key: &str| {
                v.filter(|s| !s.is_empty())
                    .map(|s| resolve(&s))
                    .ok_or_else(|| bad(format!("tls_server_config: {key} is missing")))
            };
            let cert_file = need(t.cert_file, "cert_file")?;
            let key_file = need(t.key_file, "key_file")?;
            let client_auth = match t.client_auth_type.as_deref() {
                None | Some("" | "NoClientCert") => ClientAuth::None,
                Some("VerifyClientCertIfGiven") => ClientAuth::IfGiven,
                Some("RequireAndVerifyClientCert") => ClientAuth::Required,
                Some(v @ ("RequestClientCert" | "RequireAnyClientCert")) => {
                    return Err(bad(format!(
                        "tls_server_config: client_auth_type {v}: not supported (it takes a certificate without verifying it); use RequireAndVerifyClientCert with client_ca_file"
                    )))
                }
                Some(v) => {
                    return Err(bad(format!(
                        "tls_server_config: client_auth_type {v:?}: expected NoClientCert, VerifyClientCertIfGiven or RequireAndVerifyClientCert"
                    )))
                }
            };
            let client_ca_file = t
                .client_ca_file
                .filter(|s| !s.is_empty())
                .map(|s| resolve(&s));
            match (client_auth, &client_ca_file) {
                (ClientAuth::None, Some(_)) => {
                    return Err(bad(
                        "tls_server_config: client_ca_file without client_auth_type: set client_auth_type: RequireAndVerifyClientCert".into(),
                    ))
                }
                (ClientAuth::IfGiven | ClientAuth::Required, None) => {
                    return Err(bad(
                        "tls_server_config: client_auth_type verifies client certificates: client_ca_file is missing".into(),
                    ))
                }
                _ => {}
            }
            let min_version =
                version("min_version", t.min_version.as_deref(), TlsVersion::Tls12).map_err(bad)?;
            let max_version =
                version("max_version", t.max_version.as_deref(), TlsVersion::Tls13).map_err(bad)?;
            if min_version > max_version {
                return Err(bad(
                    "tls_server_config: min_version is above max_version".into()
                ));
            }
            Some(TlsSettings {
                cert_file,
                key_file,
                client_auth,
                client_ca_file,
                min_version,
                max_version,
            })
        }
    };
    let mut users = Vec::new();
    for (k, v) in raw.basic_auth_users.unwrap_or_default() {
        let Some(user) = k.as_str() else {
            return Err(bad(format!(
                "basic_auth_users: a user name is not a string: {}",
                value_line(&k)
            )));
        };
        let shown = crate::output::text::clean(user);
        if user.is_empty() || user.contains(':') || user.chars().any(char::is_control) {
            return Err(bad(format!(
                "basic_auth_users: user {shown:?}: a name is not empty and has no ':' or control character"
            )));
        }
        let Some(hash) = v.as_str() else {
            return Err(bad(format!(
                "basic_auth_users: {shown}: the value is a bcrypt hash (a string)"
            )));
        };
        auth::check_hash(hash).map_err(|why| {
            bad(format!(
                "basic_auth_users: {shown}: {why}: make one with `htpasswd -nbB {shown} PASSWORD` (apache2-utils)"
            ))
        })?;
        users.push((user.to_string(), hash.to_string()));
    }
    Ok(Settings { tls, users })
}

/// A YAML value on one line, shortened, for an error.
fn value_line(v: &serde_norway::Value) -> String {
    let s = serde_norway::to_string(v).unwrap_or_default();
    let s = s.trim().replace('\n', " ");
    crate::output::text::clean(&s.chars().take(40).collect::<String>()).into_owned()
}

#[cfg(test)]
mod tests;
