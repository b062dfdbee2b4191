//! A Rust panic that unwinds through traced frames and is caught (issue 30): `traced_mid(i)`
//! calls `maybe_panic(i)`, which panics for every 7th `i`; `catch_unwind` in main catches it.
//! Built with `rustc -C opt-level=2 -C panic=unwind`. The unwinder walks `maybe_panic`'s and
//! `traced_mid`'s frames by their return addresses: a return probe there (a trampoline's
//! address instead) ends in an abort. Prints what it computed and how many it caught.
//! With BATCH > 0, `run_batch` (where the panics are caught) is called for BATCH iterations
//! at a time and returns; with BATCH = 0, once for all of them.
//! Usage: fn_panic ITERATIONS BATCH
use std::hint::black_box;
use std::panic;

#[inline(never)]
fn leaf_triple(x: u64) -> u64 {
    black_box(x) * 3 + 1
}

#[inline(never)]
fn maybe_panic(i: u64) -> u64 {
    if black_box(i) % 7 == 0 {
        panic!("boom {i}");
    }
    leaf_triple(i)
}

#[inline(never)]
fn traced_mid(i: u64) -> u64 {
    // A value alive across the call, dropped on the way out whether or not it unwinds.
    let v = vec![black_box(i); 4];
    let r = maybe_panic(i);
    r + v.iter().sum::<u64>()
}

#[derive(Default)]
struct Acc {
    sum: u64,
    caught: u64,
    returned: u64,
    caught_sum: u64,
}

/// Iterations [from, to), each caught here when it panics.
#[inline(never)]
fn run_batch(from: u64, to: u64, acc: &mut Acc) -> u64 {
    for i in from..to {
        match panic::catch_unwind(|| traced_mid(i)) {
            Ok(v) => {
                acc.sum = acc.sum.wrapping_mul(31).wrapping_add(v);
                acc.returned += 1;
            }
            Err(e) => {
                acc.caught += 1;
                let msg = e.downcast_ref::<String>().map(String::as_str).unwrap_or("");
                acc.caught_sum += msg.trim_start_matches("boom ").parse::<u64>().unwrap_or(0);
            }
        }
    }
    to - from
}

fn main() {
    let arg = |n: usize, default: u64| {
        std::env::args()
            .nth(n)
            .and_then(|a| a.parse().ok())
            .unwrap_or(default)
    };
    let (n, batch) = (arg(1, 10_000), arg(2, 0));
    panic::set_hook(Box::new(|_| {}));
    let mut acc = Acc::default();
    let mut batches = 0;
    if batch == 0 {
        // All in main's loop: main returns only at the end.
        run_batch(0, n, &mut acc);
    } else {
        let mut from = 0;
        while from < n {
            run_batch(from, (from + batch).min(n), &mut acc);
            from += batch;
            batches += 1;
        }
    }
    println!(
        "n={n} batches={batches} returned={} caught={} caught_sum={} sum={}",
        acc.returned, acc.caught, acc.caught_sum, acc.sum
    );
}
