//! Perfetto's own trace processor, for the `--perfetto` tests.
use serde_json::Value;
use std::path::Path;
use std::process::Command;

use crate::proc::{output_within, RUN_TIMEOUT};

/// Results of SQL queries on `trace` as Perfetto's own trace processor answers them: the
/// WebAssembly build the Perfetto UI loads traces with, run by node (tests/scripts/tp_query.js;
/// both installed by scripts/setup.sh). The rows of each query, in order.
pub fn trace_processor(trace: &Path, queries: &[&str]) -> Vec<Vec<Vec<Value>>> {
    assert!(crate::markers::have("node"), "node (scripts/setup.sh)");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/tp_query.js");
    let out = output_within(
        Command::new("node").arg(&script).arg(trace).args(queries),
        RUN_TIMEOUT,
    );
    assert!(
        out.status.success(),
        "tp_query.js failed (node and the trace processor come from scripts/setup.sh): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Vec<Value> = serde_json::from_slice(&out.stdout).expect("tp_query.js JSON");
    v.iter()
        .map(|r| {
            r["rows"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_array().unwrap().clone())
                .collect()
        })
        .collect()
}
