//! What an untraced probe costs: a loop with a disabled `probe!`, `span!` or `enabled!` against
//! the same loop without one. Prints figures; run with `cargo bench -p usdt-markers`.
//! (With no tracer attached every semaphore is 0, so all markers here are disabled.)
use std::future::Future;
use std::hint::black_box;
use std::time::Instant;
use usdt_markers::{enabled, poll_markers, probe, span};

const N: u64 = 50_000_000;

fn time(mut f: impl FnMut(u64) -> u64) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..5 {
        let start = Instant::now();
        let mut acc = 0u64;
        for i in 0..N {
            acc = acc.wrapping_add(f(black_box(i)));
        }
        black_box(acc);
        best = best.min(start.elapsed().as_secs_f64() * 1e9 / N as f64);
    }
    best
}

fn main() {
    let base = time(|i| i ^ 0x55);
    let probe = time(|i| {
        probe!(bench, point, i, i as u32, true);
        i ^ 0x55
    });
    let span = time(|i| {
        let s = span!(bench, work, i; end(u64));
        s.end(i);
        i ^ 0x55
    });
    let enabled = time(|i| if enabled!(bench, point) { i } else { i ^ 0x55 });
    // One poll of an instrumented future that is ready at once, against the bare future.
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    let bare = time(|i| {
        let mut f = std::pin::pin!(async move { i ^ 0x55 });
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => 0,
        }
    });
    let markers = poll_markers!(bench, task);
    let polled = time(|i| {
        let s = span!(bench, task; parent = 0);
        let mut f = std::pin::pin!(markers.instrument(s.id(), async move { i ^ 0x55 }));
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => 0,
        }
    });
    println!("usdt-markers, untraced, best of 5 x {N} iterations:");
    println!("  plain loop            {base:6.2} ns/iter");
    for (what, t) in [
        ("probe! (3 args)", probe),
        ("span! + end(1 arg)", span),
        ("enabled!", enabled),
    ] {
        println!("  {what:<21} {t:6.2} ns/iter  (+{:.2} ns)", t - base);
    }
    println!("  bare future poll      {bare:6.2} ns/iter");
    println!(
        "  span! + instrumented  {polled:6.2} ns/iter  (+{:.2} ns over the bare poll)",
        polled - bare
    );
}
