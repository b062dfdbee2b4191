//! Shared helpers for the end-to-end tests.
//!
//! `fn_run`: programs run untraced and then under `watch 'fn:*'`, a throwaway redis-server;
//! `proc`: root check, spawning (with the ETXTBSY retry), line reading and waiting, all bounded
//! in time; `watch`: run `usdt-trace watch` against real processes; `watch_util`: interactive
//! targets and assertions; `testprogs`: build the C programs in `tests/testprogs/`; `markers`:
//! the usdt-markers test programs, an ELF layout reader, the demo servers; `scenarios`: attach
//! scenarios run under several flags (semaphore life cycle, shared-library records);
//! `prometheus`: a real Prometheus server that scrapes a target and answers PromQL; `serve`:
//! the `serve` daemon, its log and its parsed `/metrics`; `serve_proc`: the daemon from any
//! command (`setpriv`), scraped in-process, and its /proc figures.
pub mod fn_run;
pub mod kmsg;
pub mod markers;
pub mod perfetto;
pub mod proc;
pub mod prometheus;
pub mod scenarios;
pub mod serve;
pub mod serve_proc;
pub mod testprogs;
pub mod watch;
pub mod watch_util;
