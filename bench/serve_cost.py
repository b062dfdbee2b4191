#!/usr/bin/env python3
"""What exporting costs (root, ~3 minutes; not a test, nothing is asserted but the counts).

1. Per span: the target's added CPU per start/end pair of usdt_markers.h spans
   (tests/testprogs/bench_markers_loop.c, as bench/goals.py) for `watch --hist`, `watch --hist
   --prometheus ADDR` (listening, nobody scraping), the same scraped every 0.1 s by a thread
   here, and bpftrace's hist() beside them, with each one's ratio to plain `--hist`. Medians of
   --reps interleaved runs.
2. Per scrape, with many keys: `watch --hist --by arg0 --max-keys K --prometheus ADDR` and
   `serve` with the same definition, over a loop generated here (KEYS_LOOP: span i has
   arg0 = i, K keys, --runs spans each, new keys --key-gap-us apart). Before the scrapes,
   /metrics is checked against the workload: usdt_spans_total is K * runs and every key has
   exactly --runs spans (a wrong count stops the bench). Then --scrapes GETs of /metrics one after
   another (a new connection each, as a scraper does): latency p50/p99/max, the daemon's CPU per
   scrape (utime + stime from /proc/PID/stat over the scrapes, minus its idle rate measured
   over --idle seconds just before), and the exposition's size. Also with no --by (one
   histogram) for the floor. Latency includes the wait for the daemon's loop to notice the
   connection (serve looks every 20 ms, watch between ring-buffer polls of up to 50 ms).
"""
import argparse, http.client, os, re, signal, socket, statistics, subprocess, sys, tempfile
import threading, time

from markers_loop import ROOT, build, run

CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(m):
    print(m, file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def cpu_ns(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1e9 / CLK_TCK


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def get_metrics(port, timeout=30):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", "/metrics")
        r = c.getresponse()
        body = r.read()
        if r.status != 200:
            raise RuntimeError(f"/metrics: HTTP {r.status}")
        return body
    finally:
        c.close()


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


# ---------------------------------------------------------------- 1. per span

def per_span(a, ut, work):
    loop = build(os.path.join(work, "loop"))
    bt = ("usdt:{b}:bench:op__start {{ @s[arg0] = nsecs; }} "
          "usdt:{b}:bench:op__end /@s[arg0]/ {{ @h = hist(nsecs - @s[arg0]); delete(@s[arg0]); }}")
    have_bt = subprocess.run(["which", "bpftrace"], capture_output=True).returncode == 0
    port = free_port()
    configs = [
        ("untraced", None, False),
        ("hist", [ut, "watch", "--hist", "-c"], False),
        ("hist_prom", [ut, "watch", "--hist", "--prometheus", f"127.0.0.1:{port}", "-c"], False),
        ("hist_prom_scraped",
         [ut, "watch", "--hist", "--prometheus", f"127.0.0.1:{port}", "-c"], True),
    ]
    if have_bt:
        configs.append(("bt_hist", ["bpftrace", "-e", bt.format(b=loop), "-c"], False))
    res = {c[0]: [] for c in configs}
    scrapes = []
    for rep in range(a.reps):
        for name, prefix, scraped in configs:
            stop = threading.Event()
            n = [0]

            def scraper():
                while not stop.is_set():
                    try:
                        get_metrics(port, timeout=5)
                        n[0] += 1
                    except OSError:
                        pass  # not listening yet, or gone
                    stop.wait(0.1)

            t = threading.Thread(target=scraper) if scraped else None
            if t:
                t.start()
            try:
                v, _ = run(prefix, loop, a.pairs, work)
            finally:
                stop.set()
                if t:
                    t.join()
            if t:
                scrapes.append(n[0])
            res[name].append(v)
        log(f"[{rep + 1}/{a.reps}] " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in res.items()))
    med = {k: statistics.median(v) for k, v in res.items()}
    add = {k: med[k] - med["untraced"] for k in med if k != "untraced"}
    print(f"### Per span: {a.pairs} usdt_markers.h spans per run, medians of {a.reps} "
          f"(kernel {os.uname().release}, {os.cpu_count()} vCPUs)")
    print()
    print("| tracer | added CPU per span | over `watch --hist` |")
    print("|---|---|---|")
    labels = {
        "hist": "`watch --hist`",
        "hist_prom": "`watch --hist --prometheus ADDR`, not scraped",
        "hist_prom_scraped": f"`watch --hist --prometheus ADDR`, scraped every 0.1 s "
                             f"({min(scrapes, default=0)}-{max(scrapes, default=0)} scrapes a run)",
        "bt_hist": "bpftrace `hist()`",
    }
    for k in ["hist", "hist_prom", "hist_prom_scraped", "bt_hist"]:
        if k in add:
            print(f"| {labels[k]} | {add[k]:.0f} ns | {add[k] / add['hist']:.2f}x |")
    print()


# ---------------------------------------------------------------- 2. per scrape

class Daemon:
    def __init__(self, argv, ready, timeout=120):
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
        self.lines = []
        self.ready = threading.Event()
        self.failed = threading.Event()

        def read():
            for line in self.p.stderr:
                self.lines.append(line.rstrip("\n"))
                if ready in line:
                    self.ready.set()
                if "cannot attach" in line or "error" in line:
                    self.failed.set()
            self.failed.set()

        threading.Thread(target=read, daemon=True).start()
        deadline = time.time() + timeout
        while not self.ready.is_set():
            if self.failed.is_set() or time.time() > deadline:
                self.stop()
                raise RuntimeError("did not attach: " + " | ".join(self.lines[-5:]))
            time.sleep(0.05)

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGINT)
            try:
                self.p.wait(60)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


# K keys, ROUNDS spans each: span i has arg0 = i; the first round sleeps GAP_US between keys.
KEYS_LOOP = r"""
#include <stdlib.h>
#include <sys/sdt.h>
#include <unistd.h>
int main(int argc, char **argv) {
    long k = atol(argv[1]), rounds = atol(argv[2]), gap = atol(argv[3]);
    for (long r = 0; r < rounds; r++)
        for (long i = 0; i < k; i++) {
            DTRACE_PROBE1(bench, op__start, i);
            DTRACE_PROBE1(bench, op__end, i);
            if (r == 0 && gap)
                usleep(gap);
        }
    return 0;
}
"""


def spans_total(body):
    m = re.search(rb"^usdt_spans_total(?:\{[^}]*\})? (\d+)$", body, re.M)
    return int(m.group(1)) if m else None


def key_counts(body):
    return {m.group(1): int(m.group(2)) for m in re.finditer(
        rb'^usdt_span_duration_seconds_count\{[^}]*key="([^"]*)"[^}]*\} (\d+)$', body, re.M)}


def per_scrape(a, ut, work, mode, keys):
    loop = os.path.join(work, "keys_loop")
    if not os.path.exists(loop):
        with open(loop + ".c", "w") as f:
            f.write(KEYS_LOOP)
        subprocess.run(["gcc", "-O2", "-o", loop, loop + ".c"], check=True)
    keyprog = loop
    port = free_port()
    by = ["--by", "arg0", "--max-keys", str(keys)] if keys else []
    if mode == "watch":
        argv = [ut, "watch", "--hist", *by, "--prometheus", f"127.0.0.1:{port}", loop]
        ready = "Attached"
    else:
        conf = os.path.join(work, "serve.toml")
        with open(conf, "w") as f:
            f.write(f'listen = "127.0.0.1:{port}"\n[[definition]]\nname = "keys"\n'
                    f'targets = ["{loop}"]\npatterns = ["bench:*"]\n')
            if keys:
                f.write(f'by = "arg0"\nmax-keys = {keys}\n')
        argv = [ut, "serve", "--config", conf]
        ready = "attached:"
    d = Daemon(argv, ready)
    try:
        pid = d.p.pid
        # New keys one at a time, --key-gap-us apart: the kernel takes a new key's memory
        # from a small per-CPU cache refilled in the background, and a span whose new key
        # finds none (nor room in the 32-key reserve) is counted "unkeyed", which /metrics
        # does not show (see bench/README.md). A burst of 1,000 new keys loses some.
        subprocess.run([keyprog, str(keys or 1000), str(a.runs), str(a.key_gap_us)], check=True)
        want = (keys or 1000) * a.runs
        deadline = time.time() + 30
        while True:  # the spans' counts reach the maps when the program has run
            body = get_metrics(port)
            if spans_total(body) == want or time.time() > deadline:
                break
            time.sleep(0.1)
        got = spans_total(body)
        if got != want:
            raise RuntimeError(f"{mode}: usdt_spans_total {got}, the workload made {want}")
        if keys:
            kc = key_counts(body)
            bad = {k: v for k, v in kc.items() if v != a.runs}
            if len(kc) != keys or bad:
                raise RuntimeError(f"{mode}: {len(kc)} keys (want {keys}), wrong counts: "
                                   f"{list(bad.items())[:5]}")
        # Idle rate: the daemon's own CPU with nothing to do (its loops poll).
        c0, t0 = cpu_ns(pid), time.monotonic()
        time.sleep(a.idle)
        idle_rate = (cpu_ns(pid) - c0) / (time.monotonic() - t0)
        lat = []
        c0, t0 = cpu_ns(pid), time.monotonic()
        for _ in range(a.scrapes):
            s = time.monotonic()
            body = get_metrics(port)
            lat.append(time.monotonic() - s)
        elapsed = time.monotonic() - t0
        used = cpu_ns(pid) - c0
        per = (used - idle_rate * elapsed) / a.scrapes
        return {
            "mode": mode, "keys": keys, "p50": pct(lat, 0.5), "p99": pct(lat, 0.99),
            "max": max(lat), "cpu": per, "idle": idle_rate, "bytes": len(body),
            "series": sum(1 for l in body.split(b"\n") if l and not l.startswith(b"#")),
            "rss": rss_kib(pid), "spans": got,
        }
    finally:
        d.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--usdt-trace", default=os.path.join(ROOT, "target/release/usdt-trace"))
    ap.add_argument("--pairs", type=int, default=300_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=3, help="spans per key before the scrapes")
    ap.add_argument("--key-gap-us", type=int, default=1000, help="between new keys")
    ap.add_argument("--scrapes", type=int, default=200)
    ap.add_argument("--idle", type=float, default=5.0)
    ap.add_argument("--skip-per-span", action="store_true")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("serve_cost.py needs root (it loads BPF programs)")
    work = tempfile.mkdtemp(prefix="usdt-servecost.", dir="/var/tmp")
    ut = a.usdt_trace
    if not a.skip_per_span:
        per_span(a, ut, work)
    rows = []
    for keys in [0, a.keys]:
        for mode in ["watch", "serve"]:
            r = per_scrape(a, ut, work, mode, keys)
            log(f"{mode} keys={keys}: {r}")
            rows.append(r)
    print(f"### Per scrape: {a.scrapes} scrapes of /metrics one after another; "
          f"{a.runs} spans per key first (counts checked)")
    print()
    print("| daemon | keys | series | exposition | latency p50 | p99 | max | CPU per scrape "
          "| idle CPU | RSS |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        daemon = ("`watch --hist --prometheus`" if r["mode"] == "watch" else "`serve`")
        k = f"{r['keys']} (`--by arg0`)" if r["keys"] else "none"
        print(f"| {daemon} | {k} | {r['series']:,} | {r['bytes'] / 1024:,.0f} KiB "
              f"| {r['p50'] * 1e3:.1f} ms | {r['p99'] * 1e3:.1f} ms | {r['max'] * 1e3:.1f} ms "
              f"| {r['cpu'] / 1e6:.2f} ms | {r['idle'] / 1e7:.2f}% | {r['rss'] / 1024:.1f} MiB |")
    by = {(r["mode"], r["keys"]): r for r in rows}
    if ("watch", a.keys) in by and ("serve", a.keys) in by:
        w, s = by[("watch", a.keys)], by[("serve", a.keys)]
        print()
        print(f"serve over watch at {a.keys} keys: latency p50 {s['p50'] / w['p50']:.2f}x, "
              f"CPU per scrape {s['cpu'] / w['cpu']:.2f}x")


if __name__ == "__main__":
    main()
