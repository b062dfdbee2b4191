"""The usdt_markers.h span loop (tests/testprogs/bench_markers_loop.c) that goals.py,
handler.py and site_shape.py time: built once here, run untraced or under a tracer here."""
import os, re, subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build(out, *extra):
    """Builds the loop into `out` with extra gcc flags; returns `out`."""
    subprocess.run(["gcc", "-O2", "-I", os.path.join(ROOT, "usdt-markers/include"),
                    os.path.join(ROOT, "tests/testprogs/bench_markers_loop.c"), "-o", out, *extra],
                   check=True)
    return out


def cpu_per_iter(result):
    with open(result) as f:
        return float(re.search(r"ns_per_iter_cpu=([\d.]+)", f.read()).group(1))


def run(prefix, binary, n, work, env=None, timeout=900):
    """The loop's CPU ns per iteration over `n` iterations, untraced (`prefix` None) or as the
    command of `prefix` (a tracer's argv ending in `-c`), and the tracer's stderr."""
    result = os.path.join(work, "result")
    if os.path.exists(result):
        os.unlink(result)
    cmd = f"{binary} {n} {result}"
    if prefix is None:
        subprocess.run(cmd.split(), check=True)
        return cpu_per_iter(result), ""
    p = subprocess.run(prefix + [cmd], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       timeout=timeout, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{prefix[0]} failed: {p.stderr.decode()[-500:]}")
    return cpu_per_iter(result), p.stderr.decode(errors="replace")
