"""Which HTTP server carries `edge-runtime serve`'s REST face: the standard library's ThreadingHTTPServer (HTTP/1.1
keep-alive, Nagle off, a thread per connection) or aiohttp (one event loop in a background thread), both running the
same `Rest` handler over the same Core on models/digits_cnn/digits_cnn_int8.onnx.

Measured, each server in a child process of its own: requests/s, p50 and p99 at concurrency 1 and 8 (a pool of
keep-alive http.client connections sending the binary tensor extension), the server's RSS idle and with 1000 idle
keep-alive connections open, and whether a client sending its head one byte a second delays another client.
Prints a table. Usage: .venv/bin/python tools/serve_http_choice.py [--seconds 3] [--repeat 3]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "models" / "digits_cnn" / "digits_cnn_int8.onnx"
SERVERS = ("stdlib", "aiohttp")


def _core():
    from edge_runtime.serve.app import Settings, build_core

    return build_core([str(MODEL)], Settings(max_batch=8, max_delay_us=0, queue=64))


def serve_stdlib(core, port: int = 0) -> int:
    """The standard library's ThreadingHTTPServer with the same Rest handler: what was measured against aiohttp
    (http_server.py) before the choice, kept to measure again."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from edge_runtime.serve.rest import Pending, Rest

    rest = Rest(core, log=lambda line: None)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True
        timeout = 60

        def _one(self) -> None:
            headers = {k.lower(): v for k, v in self.headers.items()}
            peer = self.client_address[0]
            answer = rest.check_head(self.command, self.path, headers, peer)
            if answer is None:
                body = self.rfile.read(rest.body_length(headers))
                answer = rest.handle(self.command, self.path, headers, body, peer)
                if isinstance(answer, Pending):
                    answer.future.exception()  # waits; respond() reads the outcome
                    answer = answer.respond()
            self.send_response(answer.status)
            for k, v in answer.headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)

        do_GET = do_POST = _one

        def log_message(self, *args) -> None:
            pass

    ThreadingHTTPServer.request_queue_size = 1024  # as aiohttp's backlog: the default 5 drops SYNs of 1000 clients
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]


def child(kind: str) -> None:
    """Run one server, print its port, serve until stdin closes."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (8192, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    core = _core()
    if kind == "stdlib":
        port = serve_stdlib(core)
    else:
        from edge_runtime.serve.http_server import start_http

        port = start_http(core, log=lambda line: None).port
    print(port, flush=True)
    sys.stdin.read()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _infer_request() -> tuple[bytes, dict]:
    x = np.random.default_rng(0).random((1, 8, 8, 1), dtype=np.float32).tobytes()
    head = {"inputs": [{"name": "input", "shape": [1, 8, 8, 1], "datatype": "FP32",
                        "parameters": {"binary_data_size": len(x)}}],
            "parameters": {"binary_data_output": True}}  # fmt: skip
    text = json.dumps(head).encode()
    return text + x, {"Inference-Header-Content-Length": str(len(text)), "Content-Type": "application/octet-stream"}


def load(port: int, concurrency: int, seconds: float) -> dict:
    body, headers = _infer_request()
    lat: list[list[float]] = [[] for _ in range(concurrency)]
    end = time.monotonic() + seconds

    def worker(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port)
        while time.monotonic() < end:
            t = time.perf_counter()
            conn.request("POST", "/v2/models/digits_cnn_int8/infer", body, headers)
            r = conn.getresponse()
            r.read()
            assert r.status == 200, r.status
            lat[i].append(time.perf_counter() - t)
        conn.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    all_us = np.array([x for xs in lat for x in xs]) * 1e6
    rps = len(all_us) / (time.monotonic() - t0)
    return {"rps": rps, "p50": np.percentile(all_us, 50), "p99": np.percentile(all_us, 99)}


def idle_connections(port: int, n: int) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        socks.append(s)
    for s in socks:
        s.recv(4096)  # answered: the connection is now an idle keep-alive one
    return socks


def slow_client_blocks(port: int) -> str:
    """A client sends its head one byte a second; another client's requests during 3 s: p99 latency."""
    slow = socket.create_connection(("127.0.0.1", port))
    stop = threading.Event()

    def drip() -> None:
        for b in b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n":
            if stop.wait(1.0):
                return
            slow.send(bytes([b]))

    threading.Thread(target=drip, daemon=True).start()
    time.sleep(0.5)
    got = load(port, 1, 3.0)
    stop.set()
    slow.close()
    return f"no (p99 {got['p99']:.0f} us meanwhile)" if got["rps"] > 10 else "YES"


def measure(kind: str, seconds: float) -> dict:
    proc = subprocess.Popen([sys.executable, __file__, "--child", kind], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, cwd=ROOT)  # fmt: skip
    try:
        port = int(proc.stdout.readline())
        load(port, 1, 0.5)  # warm-up
        row = {"c1": load(port, 1, seconds), "c8": load(port, 8, seconds)}
        time.sleep(0.5)
        row["rss_idle"] = rss_mb(proc.pid)
        socks = idle_connections(port, 1000)
        time.sleep(0.5)
        row["rss_1000"] = rss_mb(proc.pid)
        row["c1_1000"] = load(port, 1, 1.0)
        for s in socks:
            s.close()
        row["slow"] = slow_client_blocks(port)
        return row
    finally:
        proc.stdin.close()
        proc.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--repeat", type=int, default=3, help="rounds, the servers' order alternating (default 3)")
    ap.add_argument("--child", choices=SERVERS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    resource.setrlimit(resource.RLIMIT_NOFILE, (8192, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    rows = []
    for i in range(args.repeat):  # alternating, so a neighbour's load on the machine falls on both
        for kind in SERVERS if i % 2 == 0 else SERVERS[::-1]:
            rows.append((kind, measure(kind, args.seconds)))
    rows.sort(key=lambda kv: kv[0])
    print(f"{'server':8} {'c1 req/s':>9} {'p50 us':>7} {'p99 us':>7} {'c8 req/s':>9} {'p50 us':>7} {'p99 us':>7} "
          f"{'RSS MB':>7} {'+1000 idle':>10} {'c1 p99 w/1000':>13}  slow client blocks others")  # fmt: skip
    for kind, r in rows:
        c1, c8 = r["c1"], r["c8"]
        print(f"{kind:8} {c1['rps']:9.0f} {c1['p50']:7.0f} {c1['p99']:7.0f} {c8['rps']:9.0f} {c8['p50']:7.0f} "
              f"{c8['p99']:7.0f} {r['rss_idle']:7.1f} {r['rss_1000']:10.1f} {r['c1_1000']['p99']:13.0f}  "
              f"{r['slow']}")  # fmt: skip
    print(f"({os.cpu_count()} CPUs, Python {sys.version.split()[0]}, {MODEL.name}, {args.seconds:g} s per load)")


if __name__ == "__main__":
    main()
