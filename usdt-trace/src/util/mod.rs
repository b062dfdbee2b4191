//! The lowest stage: pieces every stage above uses and that use nothing of the crate.
//! Escaping untrusted text for a terminal (`terminal`), reading a file root must trust with
//! sshd's care (`trusted`), waking a loop (`wake`), the clocks a run reads (`clock`), `provider:name` globs (`pattern`), and
//! what `/proc/kallsyms` says of how a probed instruction runs (`kallsyms`).

pub(crate) mod clock;
pub(crate) mod kallsyms;
pub mod pattern;
pub(crate) mod terminal;
pub(crate) mod trusted;
pub(crate) mod wake;
