//! Shared helpers for the end-to-end tests.
pub mod testprogs;
pub mod watch;
pub mod watch_util;
