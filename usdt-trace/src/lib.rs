//! usdt-trace: list and watch USDT probes with eBPF.
//!
//! The crate is split at the privilege line. Everything that parses or formats is pure and
//! unit-tested without root; only `tracer` touches aya and the kernel. The modules, in the
//! order a `watch` run uses them (find probes → plan → run → output):
//!
//! | stage | module | job | pure |
//! |---|---|---|---|
//! | find | [`target`] | a path or a PID → opened, parsed objects (shared by `list` and `watch`) | reads files |
//! | find | [`elf`] | `.note.stapsdt` notes, segments, symbols → probe sites and file offsets | yes |
//! | find | [`argspec`] | argument specs: parsing (x86_64, aarch64), lowering for the kernel, description | yes |
//! | find | `functions` | `fn:` probes: function entries and their ends, refused where unsafe | yes |
//! | find | [`procmaps`] | `/proc/PID/maps` text → mapped objects | yes |
//! | find | `procnames` | `--process NAME` → the processes so called and their executables | matching yes |
//! | find | `libhint` | the libraries with probes that an executable without them loads | parsing yes |
//! | find | [`pattern`] | `provider:name` globs | yes |
//! | plan | `spans` | start/end pairing rules → roles and span names | yes |
//! | plan | [`filter`] | the `--filter` grammar → a predicate program the kernel runs | yes |
//! | plan | `plan` | chosen sites and roles → kernel specs, printer info and attach points per cookie | yes |
//! | plan | `agg` | `--by`/`--count`/`--top`: keys planned, maps read back into tables | yes |
//! | plan | `btf`, `syscalls` | a kernel struct member's offset; syscall numbers → wait kinds | yes |
//! | run | `watch` | the driver: targets → plan → tracer → sinks | no |
//! | run | `tracer` | load the eBPF object, attach uprobes, read the ring buffer and maps | no |
//! | run | `child`, `semaphores`, `procmem`, `late`, `changes`, `follow` | the `-c` command; semaphores raised in new processes; strings read late; objects mapped later; traced files rewritten; named files replaced and new executables of `--process` names | no |
//! | output | [`output`] | sinks: text, NDJSON, histograms, Perfetto, OTLP, Prometheus | yes |
//! | output | `outqueue`, `outfile`, `terminal` | stdout behind a bounded queue; `-o` files opened safely; escaping untrusted text | |
//! | output | `symbolize` | `--stack` addresses → object, function and offset | lookups yes |
//! | other | [`list`], `diff`, `doctor`, [`cli`] | the other subcommands, and the command line | |
//!
//! Modules are crate-private unless the command (`main.rs`), the end-to-end tests' helpers or
//! the fuzz targets use them.

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub(crate) mod agg;
pub mod argspec;
pub(crate) mod btf;
pub(crate) mod changes;
pub(crate) mod child;
pub mod cli;
pub(crate) mod diff;
pub(crate) mod doctor;
pub mod elf;
pub mod filter;
// docs/flags.md from the clap definitions, and the test that keeps it current.
#[cfg(test)]
mod flagsdoc;
pub(crate) mod follow;
pub(crate) mod functions;
pub(crate) mod late;
pub(crate) mod libhint;
pub(crate) mod libname;
pub mod list;
pub(crate) mod outfile;
pub mod output;
pub(crate) mod outqueue;
pub mod pattern;
pub(crate) mod plan;
pub mod procmaps;
pub(crate) mod procmem;
pub(crate) mod procnames;
pub(crate) mod semaphores;
pub(crate) mod serve;
pub(crate) mod spans;
pub(crate) mod suggest;
pub(crate) mod symbolize;
pub(crate) mod syscalls;
pub mod target;
pub(crate) mod terminal;
pub(crate) mod tracer;
pub(crate) mod unwind;
pub(crate) mod wake;
pub(crate) mod watch;
