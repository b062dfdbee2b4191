//! Reading a run's NDJSON: a regular file only, line by line with each line bounded (a
//! file without newlines must not take all memory), span lines into a [`Run`].

use super::compare::{Run, SpanSample, SplitSample, Summaries, KINDS, PARTS};
use super::DiffError;
use serde_json::Value;
use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};

impl SpanSample {
    /// From a `{"type":"span"}` line; None for any other line, an error for a span line
    /// without a numeric `duration_ns`.
    pub(super) fn of_json(v: &Value) -> Option<Result<SpanSample, ()>> {
        if v["type"] != "span" {
            return None;
        }
        let Some(duration_ns) = v["duration_ns"].as_u64() else {
            return Some(Err(()));
        };
        // A split has at least on-CPU time; idle_ns only exists for polled spans.
        let split = v["oncpu_ns"].is_u64().then(|| SplitSample {
            parts: PARTS.map(|p| v[p.field()].as_u64().unwrap_or(0)),
            // Absent: no wait of that kind (or a run recorded before kinds were known).
            kinds_ns: KINDS.map(|(kind, _)| v["waits"][kind]["ns"].as_u64().unwrap_or(0)),
            kinds_n: KINDS.map(|(kind, _)| v["waits"][kind]["n"].as_u64().unwrap_or(0)),
        });
        Some(Ok(SpanSample { duration_ns, split }))
    }
}

/// The longest line a run may have: a span line is a few hundred bytes, a few KB with
/// `--str` strings and `--stack` frames; 16 MiB is far past any, and small enough that a file
/// without newlines (a device, a core dump, 3 GB of anything) is refused before it can take
/// the memory a line would need.
pub const MAX_LINE: usize = 16 << 20;

/// `16 MiB`, or `64 bytes` below a MiB.
pub(super) fn size_words(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else {
        format!("{n} bytes")
    }
}

/// The most span names a file may have. A run has at most 4,096 (the kernel's table of them,
/// `MAX_PAIRS`); files of several runs put together may have more, but not this many. Each name
/// costs a few hundred bytes, whatever its spans: a file of a billion distinct names would
/// otherwise take all memory with lines of any length.
pub const MAX_NAMES: usize = 1 << 16;

/// Per span name (`provider:name`), the spans of one NDJSON run.
pub fn read_run(path: &Path, r: impl BufRead) -> Result<Summaries, DiffError> {
    read_run_bounded(path, r, MAX_LINE, MAX_NAMES)
}

/// [`read_run`] with lines of at most `max` bytes and at most `max_names` span names (the
/// tests use small ones).
pub(super) fn read_run_bounded(
    path: &Path,
    mut r: impl BufRead,
    max: usize,
    max_names: usize,
) -> Result<Summaries, DiffError> {
    let mut run = Run::default();
    let mut line = Vec::new();
    for i in 1.. {
        line.clear();
        // At most one byte more than `max`: enough to tell a line that is too long.
        let n = (&mut r)
            .take(max as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(|source| DiffError::Read {
                path: path.into(),
                source,
            })?;
        if n == 0 {
            break;
        }
        if line.last() == Some(&b'\n') {
            line.pop();
        } else if line.len() > max {
            return Err(DiffError::LineTooLong {
                path: path.into(),
                line: i,
                max,
            });
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        // Bytes, not a String: a line that is not UTF-8 is a parse error with its line
        // number, like any other that is not JSON.
        let v: Value = serde_json::from_slice(&line).map_err(|e| DiffError::Parse {
            path: path.into(),
            line: i,
            msg: e.to_string(),
        })?;
        let Some(sample) = SpanSample::of_json(&v) else {
            continue;
        };
        let sample = sample.map_err(|()| DiffError::NoDuration {
            path: path.into(),
            line: i,
        })?;
        let name = format!(
            "{}:{}",
            v["provider"].as_str().unwrap_or(""),
            v["name"].as_str().unwrap_or("")
        );
        run.add(&name, &sample);
        if run.names() > max_names {
            return Err(DiffError::TooManyNames {
                path: path.into(),
                line: i,
                max: max_names,
            });
        }
    }
    if run.is_empty() {
        return Err(DiffError::NoSpans { path: path.into() });
    }
    Ok(run.summaries())
}

/// `watch --baseline FILE`: a run read before tracing starts, compared with the live run's
/// spans when it ends.
#[derive(Debug, Clone)]
pub struct Baseline {
    pub path: PathBuf,
    pub spans: Summaries,
}

impl Baseline {
    pub fn read(path: &Path) -> Result<Baseline, DiffError> {
        Ok(Baseline {
            path: path.into(),
            spans: read_run_file(path)?,
        })
    }
}

/// Reads a whole run from the file at `path`: a regular file (a FIFO or a device would be
/// read forever, or block opening), NDJSON with span lines.
pub fn read_run_file(path: &Path) -> Result<Summaries, DiffError> {
    read_run(path, open(path)?)
}

/// Compare two runs read from `before` and `after`.
#[cfg(test)]
pub(super) fn diff_readers(
    before: (&Path, impl BufRead),
    after: (&Path, impl BufRead),
) -> Result<Vec<super::Comparison>, DiffError> {
    let b = read_run(before.0, before.1)?;
    let a = read_run(after.0, after.1)?;
    Ok(super::compare_runs(b, a))
}

fn open(path: &Path) -> Result<std::io::BufReader<std::fs::File>, DiffError> {
    use std::os::unix::fs::OpenOptionsExt;
    let err = |source| DiffError::Read {
        path: path.into(),
        source,
    };
    // O_NONBLOCK: opening a FIFO would otherwise wait for a writer.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(err)?;
    if !f.metadata().map_err(err)?.is_file() {
        return Err(DiffError::NotFile { path: path.into() });
    }
    Ok(std::io::BufReader::new(f))
}
