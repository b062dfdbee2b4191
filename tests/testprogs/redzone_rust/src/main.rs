//! The Rust twin of `redzone_c.c`: leaf-shaped functions whose locals live in memory next to
//! the stack pointer, probed with usdt-markers and checked after every hit.
//!
//! usage: `redzone_rust N` runs N rounds; prints (to stderr) `bad N` and exits 1 if any value
//! changed across a hit.
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use usdt_markers::probe;

static BAD: AtomicU64 = AtomicU64::new(0);

/// Six locals forced into memory (black_box takes their address).
#[inline(never)]
fn leaf_locals(a: u64, b: u64) -> u64 {
    let want = [a, b, a ^ b, a.wrapping_add(b), a.wrapping_mul(3), !a];
    let loc = black_box(want);
    probe!(redzone, locals, loc[0], loc[1], loc[2], loc[3], loc[4], loc[5]);
    if black_box(&loc) != &want {
        BAD.fetch_add(1, Ordering::Relaxed);
    }
    loc[0].wrapping_add(loc[5])
}

/// The arguments themselves kept in memory.
#[inline(never)]
fn leaf_args(x: u32, y: i32) -> u32 {
    let v = black_box((x, y));
    probe!(redzone, args, v.0, v.1);
    if black_box(&v) != &(x, y) {
        BAD.fetch_add(1, Ordering::Relaxed);
    }
    v.0.wrapping_add(v.1 as u32)
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let mut sum = 0u64;
    for i in 0..n {
        sum = sum.wrapping_add(leaf_locals(0x1000 + i, 0xf7f6_f5f4_f3f2_f1f0 ^ i));
        sum = sum.wrapping_add(u64::from(leaf_args(
            0x8000_0000 + i as u32,
            -(i as i32) - 1,
        )));
    }
    let bad = BAD.load(Ordering::Relaxed);
    // stderr: under `watch -c` stdout is the tracer's JSON.
    eprintln!("bad {bad} sum {sum}");
    std::process::exit(i32::from(bad != 0));
}
