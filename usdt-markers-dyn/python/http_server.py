#!/usr/bin/python3.11
"""A tiny HTTP server with probes defined at run time: pyhttp:request__start(path) and
pyhttp:request__end(status) around every request, through usdt_dyn (ctypes only).

    python3 http_server.py [--port N] [--lazy] [--provider NAME]

It prints "listening on PORT pid PID" when ready. With --lazy the probes are defined only when
GET /load arrives (to show a tracer picking up probes a process defines after it started);
GET /unload removes them. GET /status/N answers with status N; anything else with 200 and
the path. Each probe line printed to stdout names the semaphore address of request__start,
for tools that read it from /proc/PID/mem.

    usdt-trace watch -p PID --str request__start:0
"""

import argparse
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import usdt_dyn  # noqa: E402

provider = None
PROVIDER = "pyhttp"
START = END = None


def define_probes():
    global provider, START, END
    if provider is None:
        provider = usdt_dyn.Provider(PROVIDER)
        START = provider.add_probe("request__start", usdt_dyn.STRING)
        END = provider.add_probe("request__end", usdt_dyn.INT32)
    provider.load()
    print(f"probes loaded semaphore {START.semaphore_address:#x}", flush=True)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        path = self.path
        traced = START is not None
        if traced:
            START.fire(path)
        status = 200
        body = path.encode()
        if path == "/load":
            define_probes()
            body = f"{START.semaphore_address:#x}".encode()
        elif path == "/unload":
            if provider is not None:
                provider.unload()
            print("probes unloaded", flush=True)
        elif path.startswith("/status/"):
            try:
                status = int(path[len("/status/"):])
            except ValueError:
                status = 400
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        if traced and END is not None:
            END.fire(status)

    def log_message(self, fmt, *args):
        pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--lazy", action="store_true", help="define the probes on GET /load")
    ap.add_argument("--provider", default="pyhttp", help="the provider name (default pyhttp)")
    a = ap.parse_args()
    global PROVIDER
    PROVIDER = a.provider
    if not a.lazy:
        define_probes()
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    print(f"listening on {srv.server_address[1]} pid {os.getpid()}", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
