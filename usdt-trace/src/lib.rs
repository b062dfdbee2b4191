//! usdt-trace: list and watch USDT probes with eBPF.
//!
//! The crate is split at the privilege line. Everything that parses or formats is pure and
//! unit-tested without root; only [`tracer`] touches aya and the kernel.
//!
//! | module | job | pure |
//! |---|---|---|
//! | [`target`] | a path or a PID → opened, parsed objects (shared by `list` and `watch`) | reads files |
//! | [`elf`] | `.note.stapsdt` notes, segments, symbols → probe sites and file offsets | yes |
//! | [`argspec`] | argument spec grammar → typed locations (x86_64, aarch64) | yes |
//! | [`btf`] | the offset of a struct member in the kernel's BTF | yes |
//! | [`libhint`] | the libraries with probes that an executable without them loads | parsing yes |
//! | [`procmaps`] | `/proc/PID/maps` text → mapped objects | yes |
//! | [`symbolize`] | `--stack` addresses → object, function and offset | lookups yes |
//! | [`pattern`] | `provider:name` globs | yes |
//! | [`terminal`] | escaping untrusted text for a terminal | yes |
//! | [`spans`] | start/end pairing rules → roles and span names | yes |
//! | [`plan`] | chosen sites and roles → kernel specs, printer info and attach points per cookie | yes |
//! | [`output`] | text and NDJSON records, histograms | yes |
//! | [`diff`] | two runs' NDJSON → per span name, what changed and why | yes |
//! | [`child`] | the `-c` command: fork, hold until the probes are live, reap | no |
//! | [`tracer`] | load the eBPF object, attach uprobes (with semaphores), read the ring buffer | no |

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod agg;
pub mod argspec;
pub mod btf;
pub mod changes;
pub mod child;
pub mod cli;
pub mod diff;
pub mod doctor;
pub mod elf;
pub mod filter;
// docs/flags.md from the clap definitions, and the test that keeps it current.
#[cfg(test)]
mod flagsdoc;
pub mod functions;
pub mod late;
pub mod libhint;
pub mod list;
pub mod outfile;
pub mod output;
pub mod outqueue;
pub mod pattern;
pub mod plan;
pub mod procmaps;
pub mod procmem;
pub mod semaphores;
pub mod spans;
pub mod symbolize;
pub mod syscalls;
pub mod target;
pub mod terminal;
pub mod tracer;
pub mod watch;
