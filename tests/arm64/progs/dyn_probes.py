"""Probes defined at run time from Python (usdt_dyn.py through ctypes), for the arm64 suite's
`python_dyn_probes` test (tests/arm64/src/python.rs). Provider `pyarm`:

    ints(INT32, UINT64, INT8, INT64)    numbers at the edges of their types
    strs(STRING, INT32, STRING)         a short, a non-ASCII and a long string; i; a label

Prints `ready PID` once loaded, then reads commands on stdin, one a line:

    enabled     prints `enabled INTS STRS`, each probe's enabled() (its semaphore) as 0 or 1
    fire N      fires each probe N times, printing before each hit `want NAME JSON` (the
                arguments passed, strings as str), then `fired N`
    quit        unloads and exits
"""

import json
import os
import sys

import usdt_dyn as u

p = u.Provider("pyarm")
ints = p.add_probe("ints", u.INT32, u.UINT64, u.INT8, u.INT64)
strs = p.add_probe("strs", u.STRING, u.INT32, u.STRING)
p.load()

# 1000 bytes: under --str-max 1024, so it must arrive whole.
LONG = "".join(chr(ord("a") + k % 26) for k in range(999)) + "!"
TEXTS = ["plain", "héllo wörld, ✓ ünïcode 日本語", LONG]


def fire(n):
    for i in range(n):
        args = [-(2**31) + i, 2**64 - 1 - i, -128 + i, -(2**63) + i]
        print("want ints " + json.dumps(args), flush=True)
        ints.fire(*args)
        args = [TEXTS[i % len(TEXTS)], 1000 * i - 1, f"label-{i}"]
        print("want strs " + json.dumps(args), flush=True)
        strs.fire(*args)
    print(f"fired {n}", flush=True)


print(f"ready {os.getpid()}", flush=True)
for line in sys.stdin:
    cmd = line.split()
    if not cmd:
        continue
    if cmd[0] == "enabled":
        print(f"enabled {int(ints.enabled())} {int(strs.enabled())}", flush=True)
    elif cmd[0] == "fire":
        fire(int(cmd[1]))
    elif cmd[0] == "quit":
        break
p.close()
