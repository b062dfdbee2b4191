//! `--otlp` flags and the OpenTelemetry SDKs' environment → the exporter's settings (pure: the
//! environment is passed in as a lookup, nothing is read here).
//!
//! Each setting is taken from the first of: its flag, its traces-specific variable
//! (`OTEL_EXPORTER_OTLP_TRACES_*`), its generic one (`OTEL_EXPORTER_OTLP_*`), the default, as
//! the OpenTelemetry SDKs do. An empty variable counts as unset. A value that does not parse is
//! an error naming the flag or variable (the SDKs warn and ignore it; a tracer sending without
//! the credentials it was given would only be refused later, further from the cause).

use super::http::{Endpoint, UrlError};
use std::path::PathBuf;
use std::time::Duration;

/// The `--otlp*` flags as given (`None`: not given).
#[derive(Clone, Debug, Default)]
pub struct Flags {
    /// `--otlp URL`, or `--otlp env` (`None` here): the endpoint from the environment.
    pub endpoint: Option<String>,
    /// `--otlp-header KEY=VALUE`, each as given.
    pub headers: Vec<String>,
    pub compression: Option<String>,
    /// `--otlp-timeout` (seconds).
    pub timeout_secs: Option<u64>,
    pub ca: Option<PathBuf>,
    pub service: Option<String>,
}

/// Request headers, in order; `Debug` leaves out the values (API keys).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Headers(pub Vec<(String, String)>);

impl std::fmt::Debug for Headers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(k, _)| format!("{k}: ...")))
            .finish()
    }
}

/// Request compression.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
}

/// What the exporter uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub endpoint: Endpoint,
    /// Extra request headers, in order.
    pub headers: Headers,
    pub compression: Compression,
    pub timeout: Duration,
    /// PEM file of the certificate authorities to trust instead of the system's (https only),
    /// and where it was named (`--otlp-ca` or the variable), for errors.
    pub ca: Option<(PathBuf, &'static str)>,
    /// `service.name`: `--otlp-service`, else `OTEL_SERVICE_NAME`, else `service.name` in
    /// `OTEL_RESOURCE_ATTRIBUTES`; `None`: the traced executable's file name.
    pub service: Option<String>,
    /// `OTEL_RESOURCE_ATTRIBUTES` but `service.name`: added to every process's resource.
    pub resource: Vec<(String, String)>,
}

pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest timeout: an hour is no longer a timeout.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
/// Where spans go when neither the flag nor the environment says.
pub const DEFAULT_ENDPOINT: &str = "http://localhost:4318/v1/traces";
/// The value of `--otlp` that takes the endpoint from the environment.
pub const FROM_ENV: &str = "env";

const ENDPOINT: (&str, &str) = (
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
);
const HEADERS: (&str, &str) = (
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_HEADERS",
);
const COMPRESSION: (&str, &str) = (
    "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
    "OTEL_EXPORTER_OTLP_COMPRESSION",
);
const TIMEOUT: (&str, &str) = (
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
);
const CERTIFICATE: (&str, &str) = (
    "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_CERTIFICATE",
);
const SERVICE_NAME: &str = "OTEL_SERVICE_NAME";
const RESOURCE_ATTRIBUTES: &str = "OTEL_RESOURCE_ATTRIBUTES";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingsError {
    #[error(transparent)]
    Url(#[from] UrlError),
    #[error("--otlp-header {0:?}: expected KEY=VALUE (an HTTP header name, a value without control characters)")]
    HeaderFlag(String),
    #[error("{var}: {item:?}: expected key=value pairs separated by commas, percent-encoded (an HTTP header name, a value without control characters)")]
    HeaderEnv { var: &'static str, item: String },
    #[error("{from} {0:?}: unsupported compression (expected gzip or none)", from = .1)]
    Compression(String, &'static str),
    #[error("{0}: {1:?}: this header is the exporter's own (Content-Type, Content-Length, Content-Encoding, Transfer-Encoding, Connection)")]
    HeaderReserved(&'static str, String),
    #[error("{var} {value:?}: expected a timeout in milliseconds, 1 to 3600000")]
    TimeoutEnv { var: &'static str, value: String },
    #[error("--otlp-ca: {0} is not an https:// endpoint (a CA is only used with TLS)")]
    CaWithoutTls(String),
    #[error("{RESOURCE_ATTRIBUTES}: {0:?}: expected key=value pairs separated by commas, percent-encoded")]
    Resource(String),
}

/// The settings for `flags` in the environment `env` (a variable's value, `None` if unset).
pub fn resolve(
    flags: &Flags,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Settings, SettingsError> {
    // An empty variable is an unset one (the SDK environment specification).
    let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    // The traces-specific variable, else the generic one: (name, value).
    let pick = |(traces, generic): (&'static str, &'static str)| {
        var(traces)
            .map(|v| (traces, v))
            .or_else(|| var(generic).map(|v| (generic, v)))
    };

    let endpoint = match flags.endpoint.as_deref() {
        Some(url) => Endpoint::parse_flag(url)?,
        None => match (var(ENDPOINT.0), var(ENDPOINT.1)) {
            (Some(url), _) => Endpoint::parse_env(ENDPOINT.0, url.trim(), false)?,
            (None, Some(base)) => Endpoint::parse_env(ENDPOINT.1, base.trim(), true)?,
            (None, None) => Endpoint::parse_flag(DEFAULT_ENDPOINT)?,
        },
    };

    let (headers, from) = if !flags.headers.is_empty() {
        let h = flags
            .headers
            .iter()
            .map(|h| header_flag(h).ok_or_else(|| SettingsError::HeaderFlag(h.clone())))
            .collect::<Result<Vec<_>, _>>()?;
        (h, "--otlp-header")
    } else if let Some((name, v)) = pick(HEADERS) {
        let h = header_list(&v).map_err(|item| SettingsError::HeaderEnv { var: name, item })?;
        (h, name)
    } else {
        (Vec::new(), "")
    };
    if let Some((k, _)) = headers
        .iter()
        .find(|(k, _)| RESERVED_HEADERS.iter().any(|r| k.eq_ignore_ascii_case(r)))
    {
        return Err(SettingsError::HeaderReserved(from, k.clone()));
    }

    let compression = match (&flags.compression, pick(COMPRESSION)) {
        (Some(c), _) => {
            compression(c).ok_or(SettingsError::Compression(c.clone(), "--otlp-compression"))?
        }
        (None, Some((name, c))) => {
            compression(&c).ok_or(SettingsError::Compression(c.clone(), name))?
        }
        (None, None) => Compression::None,
    };

    let timeout = match (flags.timeout_secs, pick(TIMEOUT)) {
        // The flag's range is checked with the other limits (cli).
        (Some(s), _) => Duration::from_secs(s),
        (None, Some((name, ms))) => ms
            .trim()
            .parse::<u64>()
            .ok()
            .map(Duration::from_millis)
            .filter(|d| !d.is_zero() && *d <= MAX_TIMEOUT)
            .ok_or(SettingsError::TimeoutEnv {
                var: name,
                value: ms.clone(),
            })?,
        (None, None) => DEFAULT_TIMEOUT,
    };

    let ca = match (&flags.ca, pick(CERTIFICATE)) {
        (Some(_), _) if !endpoint.tls => {
            return Err(SettingsError::CaWithoutTls(endpoint.to_string()))
        }
        (Some(p), _) => Some((p.clone(), "--otlp-ca")),
        // The environment may be set for every exporter of the machine: unused over http.
        (None, Some((name, p))) if endpoint.tls => Some((PathBuf::from(p.trim()), name)),
        (None, _) => None,
    };

    let mut resource = match var(RESOURCE_ATTRIBUTES) {
        Some(v) => baggage(&v).map_err(SettingsError::Resource)?,
        None => Vec::new(),
    };
    let attr_service = resource
        .iter()
        .rposition(|(k, _)| k == "service.name")
        .map(|i| resource[i].1.clone());
    resource.retain(|(k, _)| k != "service.name");
    let service = flags
        .service
        .clone()
        .or_else(|| var(SERVICE_NAME).map(|s| s.trim().to_string()))
        .or(attr_service)
        .filter(|s| !s.is_empty());

    Ok(Settings {
        endpoint,
        headers: Headers(headers),
        compression,
        timeout,
        ca,
        service,
        resource,
    })
}

/// Headers the exporter sets itself: a second one would make the request invalid.
const RESERVED_HEADERS: [&str; 5] = [
    "content-type",
    "content-length",
    "content-encoding",
    "transfer-encoding",
    "connection",
];

fn compression(s: &str) -> Option<Compression> {
    match s.trim() {
        "gzip" => Some(Compression::Gzip),
        "none" => Some(Compression::None),
        _ => None,
    }
}

/// `KEY=VALUE` (the value as given, spaces around it dropped).
fn header_flag(s: &str) -> Option<(String, String)> {
    let (k, v) = s.split_once('=')?;
    let (k, v) = (k.trim(), v.trim());
    (header_name_ok(k) && header_value_ok(v)).then(|| (k.to_string(), v.to_string()))
}

/// `k=v,k2=v2`, the W3C baggage format without properties: keys and values trimmed and
/// percent-decoded, as the SDKs read `OTEL_EXPORTER_OTLP_HEADERS`. `Err`: the bad item.
fn header_list(s: &str) -> Result<Vec<(String, String)>, String> {
    let pairs = baggage(s)?;
    for (k, v) in &pairs {
        if !header_name_ok(k) || !header_value_ok(v) {
            return Err(format!("{k}={v}"));
        }
    }
    Ok(pairs)
}

/// The W3C baggage list `k=v,k2=v2` (no `;` properties), percent-decoded; empty items are
/// skipped. `Err`: the item that is not `k=v`.
fn baggage(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for item in s.split(',') {
        if item.trim().is_empty() {
            continue;
        }
        let bad = || item.trim().to_string();
        let (k, v) = item.split_once('=').ok_or_else(bad)?;
        let k = percent_decode(k.trim()).ok_or_else(bad)?;
        let v = percent_decode(v.trim()).ok_or_else(bad)?;
        if k.is_empty() {
            return Err(bad());
        }
        out.push((k, v));
    }
    Ok(out)
}

/// `%20` → ` `; `None` for a `%` not followed by two hex digits or bytes that are not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// An HTTP field name: a token (RFC 9110).
fn header_name_ok(k: &str) -> bool {
    !k.is_empty()
        && k.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c))
}

/// An HTTP field value: no control characters but tab.
fn header_value_ok(v: &str) -> bool {
    v.bytes().all(|c| c == b'\t' || (c >= 0x20 && c != 0x7f))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with_env(flags: &Flags, vars: &[(&str, &str)]) -> Result<Settings, SettingsError> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        resolve(flags, &|k| m.get(k).cloned())
    }

    fn flag_url(url: &str) -> Flags {
        Flags {
            endpoint: Some(url.into()),
            ..Default::default()
        }
    }

    #[test]
    fn defaults() {
        let s = with_env(&Flags::default(), &[]).unwrap();
        assert_eq!(s.endpoint.to_string(), "http://localhost:4318/v1/traces");
        assert_eq!(s.headers.0, vec![]);
        assert_eq!(s.compression, Compression::None);
        assert_eq!(s.timeout, Duration::from_secs(5));
        assert_eq!((s.ca, s.service, s.resource), (None, None, vec![]));
    }

    #[test]
    fn endpoint_precedence_and_paths() {
        let base = ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://api.example.com");
        let traces = (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "https://t.example.com:8443/custom",
        );
        // The generic variable is a base URL: /v1/traces is appended (no double slash).
        let s = with_env(&Flags::default(), &[base]).unwrap();
        assert_eq!(
            s.endpoint.to_string(),
            "https://api.example.com:443/v1/traces"
        );
        assert!(s.endpoint.tls);
        for (b, want) in [
            ("http://c/", "http://c:80/v1/traces"),
            ("http://c:4318/mypath", "http://c:4318/mypath/v1/traces"),
            ("http://c:4318/mypath/", "http://c:4318/mypath/v1/traces"),
        ] {
            let s = with_env(&Flags::default(), &[("OTEL_EXPORTER_OTLP_ENDPOINT", b)]).unwrap();
            assert_eq!(s.endpoint.to_string(), want, "{b}");
        }
        // The traces variable is used as is, and wins over the generic one.
        let s = with_env(&Flags::default(), &[base, traces]).unwrap();
        assert_eq!(s.endpoint.to_string(), "https://t.example.com:8443/custom");
        let s = with_env(
            &Flags::default(),
            &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:4318")],
        )
        .unwrap();
        assert_eq!(s.endpoint.to_string(), "http://t:4318/");
        // An empty variable is unset.
        let s = with_env(
            &Flags::default(),
            &[base, ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")],
        )
        .unwrap();
        assert_eq!(
            s.endpoint.to_string(),
            "https://api.example.com:443/v1/traces"
        );
        // The flag wins over both.
        let s = with_env(&flag_url("http://127.0.0.1:9999"), &[base, traces]).unwrap();
        assert_eq!(s.endpoint.to_string(), "http://127.0.0.1:9999/v1/traces");
        let e = with_env(
            &Flags::default(),
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://x")],
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "OTEL_EXPORTER_OTLP_ENDPOINT ftp://x: only http:// and https:// URLs are supported"
        );
    }

    #[test]
    fn headers_precedence_and_decoding() {
        let generic = (
            "OTEL_EXPORTER_OTLP_HEADERS",
            "api-key=s%20ecret , x-team=a%2Cb,",
        );
        let traces = (
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            "authorization=Bearer%20t0k",
        );
        let s = with_env(&Flags::default(), &[generic]).unwrap();
        assert_eq!(
            s.headers.0,
            vec![
                ("api-key".to_string(), "s ecret".to_string()),
                ("x-team".to_string(), "a,b".to_string())
            ]
        );
        let s = with_env(&Flags::default(), &[generic, traces]).unwrap();
        assert_eq!(
            s.headers.0,
            vec![("authorization".to_string(), "Bearer t0k".to_string())]
        );
        let flags = Flags {
            headers: vec!["X-A=1=2".into(), "x-b = two words ".into()],
            ..Default::default()
        };
        let s = with_env(&flags, &[generic, traces]).unwrap();
        assert_eq!(
            s.headers.0,
            vec![
                ("X-A".to_string(), "1=2".to_string()),
                ("x-b".to_string(), "two words".to_string())
            ]
        );
        for bad in ["novalue", "=v", "bad key=v", "k=a\nb"] {
            let flags = Flags {
                headers: vec![bad.into()],
                ..Default::default()
            };
            let e = with_env(&flags, &[]).unwrap_err();
            assert_eq!(e, SettingsError::HeaderFlag(bad.into()));
            assert!(!e.to_string().contains('\n') || bad.contains('\n'));
        }
        let flags = Flags {
            headers: vec!["Content-Length=3".into()],
            ..Default::default()
        };
        assert_eq!(
            with_env(&flags, &[]).unwrap_err(),
            SettingsError::HeaderReserved("--otlp-header", "Content-Length".into())
        );
        for bad in ["k", "k=%zz", "a b=c", "k=%0a"] {
            let e =
                with_env(&Flags::default(), &[("OTEL_EXPORTER_OTLP_HEADERS", bad)]).unwrap_err();
            assert!(
                matches!(
                    e,
                    SettingsError::HeaderEnv {
                        var: "OTEL_EXPORTER_OTLP_HEADERS",
                        ..
                    }
                ),
                "{bad}: {e:?}"
            );
        }
    }

    #[test]
    fn compression_timeout_and_certificate() {
        let env = [
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "750"),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/etc/ca.pem"),
        ];
        let s = with_env(&flag_url("https://c"), &env).unwrap();
        assert_eq!(s.compression, Compression::Gzip);
        assert_eq!(s.timeout, Duration::from_millis(750));
        assert_eq!(
            s.ca,
            Some((
                PathBuf::from("/etc/ca.pem"),
                "OTEL_EXPORTER_OTLP_CERTIFICATE"
            ))
        );
        // Over http the environment's certificate is not used.
        assert_eq!(with_env(&flag_url("http://c"), &env).unwrap().ca, None);
        let flags = Flags {
            endpoint: Some("https://c".into()),
            compression: Some("none".into()),
            timeout_secs: Some(3),
            ca: Some("/my/ca.pem".into()),
            ..Default::default()
        };
        let s = with_env(&flags, &env).unwrap();
        assert_eq!(s.compression, Compression::None);
        assert_eq!(s.timeout, Duration::from_secs(3));
        assert_eq!(s.ca, Some((PathBuf::from("/my/ca.pem"), "--otlp-ca")));
        let flags = Flags {
            compression: Some("br".into()),
            ..Default::default()
        };
        assert_eq!(
            with_env(&flags, &[]).unwrap_err().to_string(),
            "--otlp-compression \"br\": unsupported compression (expected gzip or none)"
        );
        let e = with_env(
            &Flags::default(),
            &[("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "zstd")],
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION \"zstd\": unsupported compression (expected gzip or none)"
        );
        for bad in ["0", "-1", "1.5", "ten", "3600001"] {
            let e = with_env(&Flags::default(), &[("OTEL_EXPORTER_OTLP_TIMEOUT", bad)]);
            assert!(matches!(e, Err(SettingsError::TimeoutEnv { .. })), "{bad}");
        }
        let flags = Flags {
            ca: Some("/my/ca.pem".into()),
            ..flag_url("http://c")
        };
        assert_eq!(
            with_env(&flags, &[]).unwrap_err().to_string(),
            "--otlp-ca: http://c:4318/v1/traces is not an https:// endpoint (a CA is only used with TLS)"
        );
    }

    #[test]
    fn service_name_precedence() {
        let attrs = (
            "OTEL_RESOURCE_ATTRIBUTES",
            "service.name=from-attrs,deployment.environment=prod%20eu,team=obs",
        );
        let named = ("OTEL_SERVICE_NAME", "from-env");
        let s = with_env(&Flags::default(), &[attrs]).unwrap();
        assert_eq!(s.service.as_deref(), Some("from-attrs"));
        assert_eq!(
            s.resource,
            vec![
                ("deployment.environment".to_string(), "prod eu".to_string()),
                ("team".to_string(), "obs".to_string())
            ]
        );
        let s = with_env(&Flags::default(), &[attrs, named]).unwrap();
        assert_eq!(s.service.as_deref(), Some("from-env"));
        let flags = Flags {
            service: Some("from-flag".into()),
            ..Default::default()
        };
        assert_eq!(
            with_env(&flags, &[attrs, named])
                .unwrap()
                .service
                .as_deref(),
            Some("from-flag")
        );
        let e = with_env(
            &Flags::default(),
            &[("OTEL_RESOURCE_ATTRIBUTES", "a=1,oops")],
        )
        .unwrap_err();
        assert_eq!(e, SettingsError::Resource("oops".into()));
    }
}
