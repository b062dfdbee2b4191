//! usdt-trace: list and watch USDT probes with eBPF.
//!
//! The crate is split at the privilege line. Everything that parses or formats is pure and
//! unit-tested without root; only `tracer` touches aya and the kernel. One folder a stage,
//! listed here from the bottom up: a stage imports only the stages below it (the order is
//! ARCHITECTURE.md's, and a test holds the imports to it).
//!
//! | stage | job |
//! |---|---|
//! | [`util`] | escaping untrusted text, reading trusted files, wake-ups, `provider:name` globs, kallsyms facts |
//! | [`elf`] | `.note.stapsdt` notes, segments, symbols → probe sites and file offsets; argument specs ([`elf::argspec`]) |
//! | [`target`] | a path or a PID → opened objects; /proc maps and names; the `-c` child; library hints; stack symbols |
//! | [`plan`] | what is asked (patterns, `--filter`, span rules, `fn:` sites) → kernel specs, printer info, attach points; decoded records |
//! | `tracer` | load the eBPF object, attach uprobes, read the ring buffer and maps (the only kernel-touching stage) |
//! | [`output`] | sinks: text, NDJSON, histograms, Perfetto, OTLP, Prometheus; `--by`/`--count` tables; stdout and `-o` files |
//! | `diff` | `diff` and `--baseline`: runs compared per span name, the cause named |
//! | `watch` | the driver (targets → plan → tracer → sinks) and the stages it runs while tracing: late objects, followed files, semaphores |
//! | `serve` | the always-on daemon: definitions, each a `watch` session, one endpoint |
//! | [`cli`] | the command line, `list`, `doctor`, dispatch |
//!
//! Modules are crate-private unless the command (`main.rs`), the end-to-end tests' helpers or
//! the fuzz targets use them.

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod cli;
pub(crate) mod diff;
pub mod elf;
pub mod output;
pub mod plan;
pub(crate) mod serve;
pub mod target;
pub(crate) mod tracer;
pub mod util;
pub(crate) mod watch;
