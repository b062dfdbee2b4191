#!/usr/bin/env python3
"""usdt-trace overhead benchmark, driven by bench/run.sh (see bench/README.md).

Measures, in one run and side by side:
  1. ns added per USDT start/end pair (tests/testprogs/bench_loop.c) vs the untraced loop, for
     usdt-trace watch --json (> /dev/null and > file, with a zero-loss check), --hist,
     --json --no-sched, and bpftrace printf (-f json) and hist();
  2. attach time for a binary with 500 probe sites, usdt-trace vs bpftrace;
  3. the scheduler-hook cost on a context-switch-heavy pipe ping-pong
     (tests/testprogs/bench_pingpong.c), with no span open and with a span around each round trip;
  4. tracer RSS during the loop.

Costs are the target's own CPU time (user + system: the uprobe trap and the BPF program run in
its context) per pair, so they hold up on a loaded machine; wall-clock figures are printed too.
Every configuration runs REPS times, interleaved, and the median is kept.
"""
import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTPROGS = os.path.join(ROOT, "tests", "testprogs")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def gcc(src, out, *extra):
    subprocess.run(["gcc", "-O2", "-g", src, "-o", out, *extra], check=True)
    return out


def gen_many_sites(path, pairs):
    """A C file with `pairs` noinline functions, each with its own start/end probe pair."""
    lines = ["#include <sys/sdt.h>", "#include <stdlib.h>", "volatile long sink;"]
    for i in range(pairs):
        lines.append(
            f"__attribute__((noinline)) void f{i}(long x) {{ DTRACE_PROBE1(gen, p{i}__start, x);"
            f" sink += x; DTRACE_PROBE1(gen, p{i}__end, x); }}"
        )
    lines.append("int main(int argc, char **argv) {")
    lines.append("  long n = argc > 1 ? atol(argv[1]) : 1;")
    lines.append("  for (long k = 0; k < n; k++) {")
    lines += [f"    f{i}(k);" for i in range(pairs)]
    lines.append("  }")
    lines.append("  return 0;")
    lines.append("}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def proc_cpu_ns(pid):
    """utime + stime of a live process, in ns (clock-tick resolution)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 1e9 / CLK_TCK
    except (OSError, IndexError, ValueError):
        return 0.0


def proc_rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def wait_gone(pid, timeout):
    """Wait for a process that is not our child (usdt-trace's detach helper) to exit."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not os.path.exists(f"/proc/{pid}"):
            return True
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.02)
    return False


def parse_kv(path):
    with open(path) as f:
        return {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", f.read())}


class Tracer:
    """A tracer process started before the target, ready once `ready_re` shows on `ready_on`
    ("stdout" or "stderr"). The other stream goes to `stdout` (a path, or None for /dev/null).
    A stdout that must be watched is read in large chunks and discarded."""

    def __init__(self, argv, ready_on, ready_re, stdout=None, timeout=180):
        self.argv = argv
        self.t0 = time.monotonic()
        self.ready = threading.Event()
        self.text = {"stdout": [], "stderr": []}
        out = subprocess.PIPE if ready_on == "stdout" else (open(stdout, "wb") if stdout else subprocess.DEVNULL)
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.PIPE)
        self.ready_s = None
        pat = re.compile(ready_re.encode())
        self.threads = []
        for name, stream, watch in (("stdout", self.p.stdout, ready_on == "stdout"), ("stderr", self.p.stderr, ready_on == "stderr")):
            if stream is None:
                continue
            t = threading.Thread(target=self._drain, args=(name, stream, pat if watch else None), daemon=True)
            t.start()
            self.threads.append(t)
        if not self.ready.wait(timeout):
            self.kill()
            raise RuntimeError(f"{argv[0]} not ready after {timeout}s: {self.stderr()}")
        if self.p.poll() is not None:
            raise RuntimeError(f"{argv[0]} exited before being ready: {self.stderr()}")
        self.cpu_at_ready = proc_cpu_ns(self.p.pid)

    def _drain(self, name, stream, pat):
        fd = stream.fileno()
        buf = b""
        kept = 0
        while True:
            try:
                chunk = os.read(fd, 1 << 20)
            except OSError:
                break
            if not chunk:
                break
            if kept < 65536:  # keep the beginning (messages), discard the bulk
                self.text[name].append(chunk)
                kept += len(chunk)
            if pat is not None and not self.ready.is_set():
                buf = (buf + chunk)[-65536:]
                if pat.search(buf):
                    self.ready_s = time.monotonic() - self.t0
                    self.ready.set()
        if not self.ready.is_set():
            self.ready.set()  # EOF: let the waiter see the exit

    def stderr(self):
        return b"".join(self.text["stderr"]).decode(errors="replace")

    def stop(self, grace=60):
        """SIGINT (repeated: bpftrace 0.17 sometimes misses the first), wait, return rusage."""
        rss_loop = proc_rss_kib(self.p.pid)
        deadline = time.time() + grace
        next_sig = 0.0
        while True:
            now = time.time()
            if now >= next_sig:
                try:
                    os.kill(self.p.pid, signal.SIGINT)
                except ProcessLookupError:
                    pass
                next_sig = now + 2.0
            pid, status, ru = os.wait4(self.p.pid, os.WNOHANG)
            if pid == self.p.pid:
                self.p.returncode = os.waitstatus_to_exitcode(status)
                break
            if now > deadline:
                self.p.kill()
                pid, status, ru = os.wait4(self.p.pid, 0)
                self.p.returncode = -9
                break
            time.sleep(0.02)
        for t in self.threads:
            t.join(5)
        cpu = (ru.ru_utime + ru.ru_stime) * 1e9
        m = re.search(r"helper PID (\d+)", self.stderr())
        return {
            "cpu_after_ready_ns": max(cpu - self.cpu_at_ready, 0.0),
            "rss_loop_kib": rss_loop,
            "maxrss_kib": ru.ru_maxrss,
            "helper": int(m.group(1)) if m else None,
            "rc": self.p.returncode,
        }

    def kill(self):
        try:
            self.p.kill()
            self.p.wait(5)
        except Exception:
            pass


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, nd=0):
    return "n/a" if x is None else f"{x:,.{nd}f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--usdt-trace", required=True)
    ap.add_argument("--quick", action="store_true", help="1 run per configuration, smaller loops")
    ap.add_argument("--reps", type=int)
    ap.add_argument("--pairs", type=int, help="start/end pairs per loop run")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    a = ap.parse_args()
    reps = a.reps or (1 if a.quick else 5)
    pairs = a.pairs or (100_000 if a.quick else 300_000)
    bt_printf_pairs = pairs // 3 if a.quick else pairs // 2  # bpftrace printf is ~10x slower
    pp_rts = 50_000 if a.quick else 100_000
    usdt = os.path.abspath(a.usdt_trace)
    bpftrace = shutil.which("bpftrace")
    # Files on a real disk, not tmpfs: the "> file" run writes ~100 MB.
    work = tempfile.mkdtemp(prefix="usdt-bench.", dir="/var/tmp")
    t_start = time.monotonic()
    log(f"work dir {work}; {reps} run(s) per configuration; {pairs} pairs per loop")

    loop = gcc(os.path.join(TESTPROGS, "bench_loop.c"), os.path.join(work, "bench_loop"))
    pingpong = gcc(os.path.join(TESTPROGS, "bench_pingpong.c"), os.path.join(work, "bench_pingpong"))
    many_src = os.path.join(work, "many_sites.c")
    gen_many_sites(many_src, 250)
    many = gcc(many_src, os.path.join(work, "many_sites"))
    result = os.path.join(work, "result.txt")

    def run_target(argv):
        subprocess.run(argv + [result], check=True, stdout=subprocess.DEVNULL)
        return parse_kv(result)

    def after(stats):
        # usdt-trace detaches in a background helper: let it finish so its uprobes do not
        # tax the next configuration.
        if stats.get("helper"):
            if not wait_gone(stats["helper"], 60):
                log(f"warning: detach helper {stats['helper']} still running")

    # ---- 0. attach time, 500 sites: usdt-trace first, bpftrace last ---------------------------
    # Detaching 500 uprobes takes the kernel ~0.1 s per site, and attaching while another
    # process detaches is much slower, so each tool attaches once, on a quiet system: usdt-trace
    # now, bpftrace at the end once usdt-trace's detach helper is gone.
    path = os.path.join(work, "many_sites.u")
    shutil.copy(many, path)
    tr = Tracer([usdt, "watch", "--json", path], "stderr", r"Attached")
    u_attach = tr.ready_s
    attached = re.search(r"Attached (\d+) probe sites", tr.stderr())
    t_int = time.monotonic()
    u_stop = tr.stop()  # its helper detaches in the background (~0.1 s per site)
    u_exit = time.monotonic() - t_int
    log(f"  attach 500 sites: usdt-trace {u_attach:.2f} s, exit {u_exit:.2f} s")

    # ---- 1. loop of start/end pairs -------------------------------------------------------
    json_file = os.path.join(work, "spans.ndjson")
    bt_printf_prog = (
        'BEGIN { printf("READY\\n"); } '
        f"usdt:{loop}:bench:op__start {{ @s[tid] = nsecs; }} "
        f"usdt:{loop}:bench:op__end /@s[tid]/ {{ "
        'printf("{\\"type\\":\\"span\\",\\"tid\\":%d,\\"arg\\":%d,\\"duration_ns\\":%d}\\n", tid, arg0, nsecs - @s[tid]); '
        "delete(@s[tid]); }"
    )
    bt_hist_prog = (
        'BEGIN { printf("READY\\n"); } '
        f"usdt:{loop}:bench:op__start {{ @s[tid] = nsecs; }} "
        f"usdt:{loop}:bench:op__end /@s[tid]/ {{ @h = hist(nsecs - @s[tid]); delete(@s[tid]); }}"
    )
    bt_empty_prog = (
        'BEGIN { printf("READY\\n"); } '
        f"usdt:{loop}:bench:op__start {{ }} usdt:{loop}:bench:op__end {{ }}"
    )
    configs = [
        ("baseline", "untraced", None),
        ("u_json", "usdt-trace --json > /dev/null", ([usdt, "watch", "--json", loop], "stderr", r"^Attached|\nAttached", None)),
        ("u_json_file", "usdt-trace --json > file", ([usdt, "watch", "--json", loop], "stderr", r"^Attached|\nAttached", json_file)),
        ("u_hist", "usdt-trace --hist", ([usdt, "watch", "--hist", loop], "stderr", r"^Attached|\nAttached", None)),
        ("u_nosched", "usdt-trace --json --no-sched > /dev/null", ([usdt, "watch", "--json", "--no-sched", loop], "stderr", r"^Attached|\nAttached", None)),
    ]
    if bpftrace:
        configs += [
            ("bt_printf", "bpftrace printf -f json > /dev/null", ([bpftrace, "-f", "json", "-e", bt_printf_prog], "stdout", r"READY", None)),
            ("bt_hist", "bpftrace hist()", ([bpftrace, "-e", bt_hist_prog], "stdout", r"READY", None)),
            # The floor: two uprobes whose programs do nothing. What a tool adds above this is
            # its BPF program (and its share of the uprobe dispatch); the rest is the kernel's trap.
            ("bt_empty", "floor: bpftrace, empty actions", ([bpftrace, "-e", bt_empty_prog], "stdout", r"READY", None)),
        ]
    else:
        log("bpftrace not found: skipping its configurations")
    res = {k: [] for k, _, _ in configs}
    loss = []
    for rep in range(reps):
        for key, label, spec in configs:
            n = bt_printf_pairs if key == "bt_printf" else pairs
            if spec is None:
                r = run_target([loop, str(n)])
                res[key].append({"cpu": r["ns_per_iter_cpu"], "wall": r["ns_per_iter_wall"]})
                continue
            argv, ready_on, ready_re, out = spec
            tr = Tracer(argv, ready_on, ready_re, stdout=out)
            r = run_target([loop, str(n)])
            st = tr.stop()
            after(st)
            res[key].append({
                "cpu": r["ns_per_iter_cpu"], "wall": r["ns_per_iter_wall"],
                "tracer_cpu": st["cpu_after_ready_ns"] / n, "rss": st["rss_loop_kib"],
                "maxrss": st["maxrss_kib"], "attach_s": tr.ready_s,
            })
            if key == "u_json_file":
                spans = 0
                summary = None
                with open(json_file) as f:
                    for line in f:
                        if line.startswith('{"type":"span"'):
                            spans += 1
                        elif '"type":"summary"' in line:
                            summary = line
                lost = re.search(r'"lost":(\d+)', summary or "")
                loss.append((n, spans, int(lost.group(1)) if lost else None))
                os.unlink(json_file)
            log(f"  [{rep + 1}/{reps}] {label}: {r['ns_per_iter_cpu']:.0f} ns/pair CPU, {r['ns_per_iter_wall']:.0f} wall")

    base = median(x["cpu"] for x in res["baseline"])
    base_wall = median(x["wall"] for x in res["baseline"])
    added = {}
    for key, label, _ in configs:
        c = median(x["cpu"] for x in res[key])
        w = median(x["wall"] for x in res[key])
        added[key] = {
            "label": label,
            "cpu": c - base,
            "wall": w - base_wall,
            "tracer_cpu": median(x.get("tracer_cpu") for x in res[key]),
            "rss": median(x.get("rss") for x in res[key]),
            "maxrss": median(x.get("maxrss") for x in res[key]),
        }

    # ---- 2. scheduler hooks: pipe ping-pong ----------------------------------------------
    pp = {k: [] for k in ("base0", "sched0", "base1", "nosched1", "sched1")}
    for rep in range(reps):
        for key in pp:
            spans = "1" if key.endswith("1") else "0"
            argv = [pingpong, str(pp_rts), spans, "1"]
            if key.startswith("base"):
                r = run_target(argv)
            else:
                w = [usdt, "watch", "--json"] + (["--no-sched"] if key == "nosched1" else []) + [pingpong]
                tr = Tracer(w, "stderr", r"Attached")
                r = run_target(argv)
                after(tr.stop())
            pp[key].append(r["ns_per_rt_cpu"])
        log(f"  [{rep + 1}/{reps}] ping-pong: " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in pp.items()))
    ppm = {k: median(v) for k, v in pp.items()}

    # ---- 3. bpftrace attach time, 500 sites ----------------------------------------------------
    if u_stop.get("helper") and not wait_gone(u_stop["helper"], 60 if not a.quick else 20):
        log("warning: usdt-trace's detach helper is still running; bpftrace's attach time may suffer")
    bt_att = None
    if bpftrace:
        path = os.path.join(work, "many_sites.bt")
        shutil.copy(many, path)
        prog = f'BEGIN {{ printf("READY\\n"); }} usdt:{path}:gen:* {{ @c = count(); }}'
        t0 = time.monotonic()
        p = subprocess.Popen([bpftrace, "-e", prog], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        bt_att = {"attaching": None, "ready": None, "note": "", "exit_s": None, "p": p}
        out = []
        for line in iter(p.stdout.readline, b""):
            line = line.decode(errors="replace").rstrip()
            out.append(line)
            if line.startswith("Attaching") and bt_att["attaching"] is None:
                bt_att["attaching"] = time.monotonic() - t0
                bt_att["note"] = line
            if line == "READY":
                bt_att["ready"] = time.monotonic() - t0
                break
        if bt_att["ready"] is None:
            bt_att["note"] = "bpftrace did not become ready: " + " | ".join(out[-3:])
        t_int = time.monotonic()
        os.kill(p.pid, signal.SIGINT)

        def reap():
            # bpftrace detaches synchronously at exit: time it while the rest runs.
            for _ in range(120):
                try:
                    p.wait(1.0)
                    break
                except subprocess.TimeoutExpired:
                    try:
                        os.kill(p.pid, signal.SIGINT)
                    except ProcessLookupError:
                        break
            if p.returncode is not None:
                bt_att["exit_s"] = time.monotonic() - t_int
            p.stdout.close()

        bt_att["thread"] = threading.Thread(target=reap, daemon=True)
        bt_att["thread"].start()
        log(f"  attach 500 sites: bpftrace 'Attaching' {fmt(bt_att['attaching'], 2)} s, ready {fmt(bt_att['ready'], 2)} s (detaching in the background)")

    # ---- report -----------------------------------------------------------------------------
    def ratio(a, b):
        return None if a is None or b is None or b <= 0 else a / b

    r_json = ratio(added["u_json"]["cpu"], added.get("bt_printf", {}).get("cpu"))
    r_hist = ratio(added["u_hist"]["cpu"], added.get("bt_hist", {}).get("cpu"))
    print()
    print(f"## usdt-trace overhead ({'quick, ' if a.quick else ''}{reps} run(s) per row, medians; kernel {os.uname().release}, {os.cpu_count()} CPUs)")
    print()
    print(f"Untraced loop: {base:.1f} ns/pair CPU. \"Added\" is the traced loop's CPU time per start/end")
    print("pair minus that (the uprobe traps and BPF programs run in the target's context);")
    print("tracer CPU is the tracer process's own CPU time per pair (reading, formatting, writing).")
    print()
    floor = added.get("bt_empty", {}).get("cpu")
    print("| configuration | added ns/pair (CPU) | above the uprobe floor | added ns/pair (wall) | vs bpftrace | tracer CPU ns/pair | tracer RSS during loop |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for key, _, _ in configs:
        if key == "baseline":
            continue
        d = added[key]
        vs = ""
        if key in ("u_json", "u_json_file", "u_nosched"):
            rr = ratio(d["cpu"], added.get("bt_printf", {}).get("cpu"))
            vs = f"{rr:.2f}x printf" if rr else ""
        elif key == "u_hist":
            rr = ratio(d["cpu"], added.get("bt_hist", {}).get("cpu"))
            vs = f"{rr:.2f}x hist()" if rr else ""
        rss = f"{d['rss'] / 1024:.1f} MiB" if d["rss"] else "n/a"
        above = fmt(d["cpu"] - floor) if floor is not None and key != "bt_empty" else ""
        print(f"| {d['label']} | {fmt(d['cpu'])} | {above} | {fmt(d['wall'])} | {vs} | {fmt(d['tracer_cpu'])} | {rss} |")
    print()
    if loss:
        n, spans, lost = loss[len(loss) // 2]
        ok = all(s == nn and l == 0 for nn, s, l in loss)
        print(f"Zero-loss check (--json > file): " + "; ".join(f"{s:,}/{nn:,} spans written, lost {l}" for nn, s, l in loss)
              + (" -> OK" if ok else " -> LOSS"))
        print()
    print("| goal | measured | met |")
    print("|---|---:|:---:|")
    if r_json is not None:
        print(f"| --json <= 0.25x bpftrace printf | {r_json:.2f}x | {'yes' if r_json <= 0.25 else 'no'} |")
    if r_hist is not None:
        print(f"| --hist <= 0.9x bpftrace hist() | {r_hist:.2f}x | {'yes' if r_hist <= 0.9 else 'no'} |")
    if floor is not None and "bt_hist" in added:
        u = added["u_hist"]["cpu"] - floor
        b = added["bt_hist"]["cpu"] - floor
        print(f"| (--hist vs hist() above the floor of {floor:,.0f} ns/pair) | {fmt(u)} vs {fmt(b)} ns | |")
    print()
    print("| scheduler hooks (pipe ping-pong, 2 processes on 1 CPU) | ns/round trip (CPU) | added |")
    print("|---|---:|---:|")
    print(f"| untraced, no probes hit | {fmt(ppm['base0'])} | |")
    print(f"| usdt-trace attached, no span open (sched hooks only) | {fmt(ppm['sched0'])} | {fmt(ppm['sched0'] - ppm['base0'])} |")
    print(f"| untraced, span probes in the loop (nops) | {fmt(ppm['base1'])} | |")
    print(f"| usdt-trace --no-sched, span per round trip | {fmt(ppm['nosched1'])} | {fmt(ppm['nosched1'] - ppm['base1'])} |")
    print(f"| usdt-trace, span per round trip (attribution active) | {fmt(ppm['sched1'])} | {fmt(ppm['sched1'] - ppm['base1'])} (attribution: {fmt(ppm['sched1'] - ppm['nosched1'])}) |")
    print()
    print("| 500 probe sites (250 span pairs) | usdt-trace | bpftrace |")
    print("|---|---:|---:|")
    bta = bt_att or {}
    print(f"| launch -> attached and ready (`Attached` / BEGIN ran) | {fmt(u_attach, 2)} s | {fmt(bta.get('ready'), 2)} s |")
    print(f"| launch -> bpftrace's `Attaching N probes...` | | {fmt(bta.get('attaching'), 2)} s |")
    if bt_att is not None:
        bt_att["thread"].join(10)
    bt_exit = fmt(bta.get("exit_s"), 1) + " s" if bta.get("exit_s") else "> 10 s (still detaching; it exits on its own)"
    print(f"| SIGINT -> process exited | {fmt(u_exit, 2)} s (detach continues in a helper) | {bt_exit} |")
    print()
    if bta:
        print(f"bpftrace said: `{bta['note']}`")
    if attached:
        print(f"usdt-trace said: `{attached.group(0)}`")
    print()
    if bpftrace:
        d = added
        print(f"Memory: usdt-trace RSS during the loop {fmt(d['u_json']['rss'] / 1024, 1)} MiB (peak {fmt(d['u_json']['maxrss'] / 1024, 1)}); "
              f"bpftrace {fmt(d['bt_printf']['rss'] / 1024, 1)} MiB (peak {fmt(d['bt_printf']['maxrss'] / 1024, 1)}, LLVM compile included).")
    print(f"Benchmark wall time: {time.monotonic() - t_start:.0f} s.")

    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
