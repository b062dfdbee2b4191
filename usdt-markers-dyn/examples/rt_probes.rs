//! Probes defined at run time from Rust: a `work` span per loop iteration, with a counter and
//! a string, fired only while a tracer is attached.
//!
//! ```text
//! cargo run -p usdt-markers-dyn --example rt_probes -- [ITERATIONS] [INTERVAL_MS]
//! usdt-trace watch -p $(pgrep rt_probes) --str work__start:1
//! ```

use std::ffi::CString;
use std::time::Duration;
use usdt_markers_dyn::{ArgType, Provider};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let iterations: u64 = args.next().map_or(Ok(u64::MAX), |s| s.parse())?;
    let interval = Duration::from_millis(args.next().map_or(Ok(100), |s| s.parse())?);

    let mut p = Provider::new("rtdemo")?;
    p.add_probe("work__start", &[ArgType::U64, ArgType::U64])?;
    p.add_probe("work__end", &[ArgType::U64, ArgType::I32])?;
    p.load()?;
    let (start, end) = (
        p.probe("work__start").ok_or("no work__start")?,
        p.probe("work__end").ok_or("no work__end")?,
    );
    println!(
        "pid {} loaded provider rtdemo; semaphore of work__start at {:#x}",
        std::process::id(),
        start.semaphore_address()
    );
    for i in 0..iterations {
        // Built only when someone is looking.
        if start.enabled() {
            let label = CString::new(format!("item-{i}"))?;
            start.fire(&[i, label.as_ptr() as u64]);
        }
        std::thread::sleep(interval);
        end.fire(&[i, 0]);
    }
    Ok(())
}
