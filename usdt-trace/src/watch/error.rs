//! [`WatchError`]: every way a `watch` run can fail, each stage's error wrapped as it is, so
//! that `cli` maps them to messages and exit codes in one place. Apart from the driver because
//! every stage of it returns this type.

use crate::output::outfile;
use crate::plan::PlanError;
use crate::target::child::SpawnError;
use crate::target::procmaps::ProcError;
use crate::target::TargetError;
use crate::tracer::TraceError;
use std::io;

#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error(transparent)]
    Proc(#[from] ProcError),
    #[error("no USDT probes in {0}")]
    NoProbes(String),
    /// An executable without probes whose libraries have them (`java` and `libjvm.so`).
    #[error("no USDT probes in {what}; {hint}\nhint: {suggestion}")]
    NoProbesHint {
        what: String,
        hint: String,
        suggestion: String,
    },
    /// `fn:` patterns that select no function of the program but do in libraries it loads
    /// (`getaddrinfo` in libc, called from curl).
    #[error("no function matches {patterns} in {what}; {hint}\nhint: {suggestion}")]
    FunctionInLibrary {
        patterns: String,
        what: String,
        hint: String,
        suggestion: String,
    },
    #[error(
        "{path} is not mapped by process {pids} (list what it maps with: usdt-trace list -p PID)"
    )]
    NotMapped { path: String, pids: String },
    /// `-p` processes whose files could not be opened (another user's, without
    /// CAP_SYS_PTRACE) and nothing with probes that could.
    #[error("cannot open the files process {pids} maps ({first}): another user's process needs root or CAP_SYS_PTRACE, and a file only its owner may read CAP_DAC_READ_SEARCH")]
    ProcessFilesDenied { pids: String, first: String },
    #[error("--process {0}: no process by that name is running (its command name or its executable's file name)")]
    NoProcessNamed(String),
    #[error("--process {name}: {n} process(es) so called (pid {pid}, ...), but which file each runs cannot be read: another user's process needs root or CAP_SYS_PTRACE")]
    ProcessNotReadable { name: String, n: usize, pid: u32 },
    /// A file that came to be named while tracing had no room in the running plan.
    #[error("{0}")]
    FollowRoom(String),
    #[error(transparent)]
    Functions(#[from] crate::plan::functions::FnError),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Filter(#[from] crate::plan::filter::FilterError),
    #[error(transparent)]
    Agg(#[from] crate::output::agg::AggError),
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    /// `-c` followed through its execs (a script, env, a shim) found nothing to trace.
    #[error("{0}")]
    ExecChain(String),
    #[error("writing output: {0}")]
    Output(#[from] io::Error),
    #[error(transparent)]
    OutFile(#[from] outfile::OutFileError),
    #[error(transparent)]
    Prometheus(#[from] crate::output::prometheus::serve::ServeError),
}

impl WatchError {
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, WatchError::Output(e) if e.kind() == io::ErrorKind::BrokenPipe)
    }
}
