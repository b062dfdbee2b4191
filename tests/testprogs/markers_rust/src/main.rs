//! Probe target for the usdt-markers tests. Commands, one per stdin line:
//! `fire` fires every probe once, `sema` prints the semaphore states, `quit` exits.
//! Prints `ready <pid>` when it starts.
use std::io::BufRead;
use usdt_markers::{enabled, probe, span};

const PATTERN: u64 = 0xf7f6_f5f4_f3f2_f1f0;

#[inline(never)]
fn fire_all(round: u64) {
    let p = std::hint::black_box(PATTERN);
    probe!(markers_test, zero);
    probe!(
        markers_test,
        sizes,
        p as u8,
        p as i8,
        p as u16,
        p as i16,
        p as u32,
        p as i32,
        p,
        p as i64
    );
    probe!(
        markers_test,
        twelve,
        1u64,
        2u64,
        3u64,
        4u64,
        5u64,
        6u64,
        7u64,
        8u64,
        9u64,
        10u64,
        11u64,
        round
    );
    let text = "hello";
    // Named arguments: their names go into a note (type 3) that tracers show.
    probe!(markers_test, text, s = text, len = text.len(), ok = true);
    let outer = span!(markers_test, op, round; end(i32));
    {
        let _inner = span!(markers_test, inner, round);
    }
    outer.end(-7);
}

fn main() {
    println!("ready {}", std::process::id());
    let stdin = std::io::stdin();
    let mut round = 0u64;
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        match line.trim() {
            "fire" => {
                round += 1;
                fire_all(round);
                println!("fired {round}");
            }
            "sema" => println!(
                "sema zero={} sizes={} op={} inner={}",
                enabled!(markers_test, zero) as u8,
                enabled!(markers_test, sizes) as u8,
                enabled!(markers_test, op) as u8,
                enabled!(markers_test, inner) as u8,
            ),
            "quit" => break,
            _ => println!("?"),
        }
    }
}
