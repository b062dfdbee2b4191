//! Shared bits of the two demo servers: command line and MIME types.
//!
//! Both servers fire the same USDT probes (provider `httpserver`):
//!
//! | probe | arguments |
//! |---|---|
//! | `request__start` | span id, parent span id (0), request id |
//! | `request__end` | span id, status code (u16), bytes sent (u64) |
//! | `send_message__start` | span id, parent span id (the request's span id), request id |
//! | `send_message__end` | span id, bytes sent (u64) |

use std::path::PathBuf;

/// Command line of both servers: `--port N` (default 8081) and `--root DIR` (default the `www`
/// folder next to this crate's manifest).
#[derive(Debug, Clone)]
pub struct Args {
    /// TCP port on 127.0.0.1.
    pub port: u16,
    /// Directory whose files are served.
    pub root: PathBuf,
}

/// Default document root: `demo-httpserver/www` of this source tree.
pub fn default_root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/www"))
}

impl Args {
    /// Parses `--port N`, `--root DIR` (also `--port=N`, `--root=DIR`) and `--help`.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Args, String> {
        let mut out = Args {
            port: 8081,
            root: default_root(),
        };
        let mut it = args.into_iter();
        while let Some(arg) = it.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
                _ => (arg.clone(), None),
            };
            let mut value = |name: &str| {
                inline
                    .clone()
                    .or_else(|| it.next())
                    .ok_or_else(|| format!("{name} needs a value"))
            };
            match flag.as_str() {
                "--port" | "-p" => {
                    let v = value("--port")?;
                    out.port = v.parse().map_err(|_| format!("bad port: {v}"))?;
                }
                "--root" | "-r" => out.root = PathBuf::from(value("--root")?),
                "--help" | "-h" => {
                    return Err(
                        "usage: [--port N (8081)] [--root DIR (demo-httpserver/www)]".into(),
                    )
                }
                other => return Err(format!("unknown argument: {other}")),
            }
        }
        Ok(out)
    }

    /// Parses the process's arguments, or prints the error and exits with status 2.
    pub fn from_env() -> Args {
        Args::parse(std::env::args().skip(1)).unwrap_or_else(|e| {
            eprintln!("{e}");
            std::process::exit(2)
        })
    }
}

/// The Content-Type for a file name, by extension.
pub fn mime_type(path: &str) -> &'static str {
    let ext = path
        .rsplit_once('/')
        .map_or(path, |(_, f)| f)
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase());
    match ext.as_deref() {
        Some("html" | "htm") => "text/html; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("json") => "application/json",
        Some("txt") => "text/plain; charset=utf-8",
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("gif") => "image/gif",
        Some("svg") => "image/svg+xml",
        Some("ico") => "image/x-icon",
        Some("wasm") => "application/wasm",
        Some("pdf") => "application/pdf",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mime_by_extension() {
        assert_eq!(mime_type("/a/index.HTML"), "text/html; charset=utf-8");
        assert_eq!(mime_type("/x.json"), "application/json");
        assert_eq!(mime_type("/dir.d/file"), "application/octet-stream");
    }

    #[test]
    fn args() {
        let a = Args::parse(["--port".into(), "9000".into(), "--root=/tmp".into()])
            .expect("valid arguments");
        assert_eq!((a.port, a.root), (9000, PathBuf::from("/tmp")));
        assert!(Args::parse(["--port".into(), "x".into()]).is_err());
        assert!(Args::parse(["--bogus".into()]).is_err());
    }
}
