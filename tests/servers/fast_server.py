"""A KServe v2 HTTP server that answers at once, for the load engine's tests and `make bench`: it stands in for a GPU
server answering a small model tens of thousands of times a second, so that what limits a run is the client.

    python tests/servers/fast_server.py --http-port P [--processes N] [--name fast] [--delay-ms D]

Pure standard library (asyncio), so any of the project's interpreters runs it. One model (`--name`, default "fast"):
input INPUT0 FP32 [1,16], output OUTPUT0 FP32 [1,16] (zeros). Every reply is precomputed: health, server and model
metadata, model config, repository index, and the statistics extension (what perf_analyzer and the harness read);
an inference request's reply is built once per distinct request body (binary tensors or JSON, the outputs it asks
for) and cached, so each later query costs a dictionary look-up. `--delay-ms D` answers each inference D ms late
(without blocking the loop): a slow server, for a run the client is not the limit of.

Processes: `--processes N` (default: the CPUs this process may use, at most 4) listen on the same port with
SO_REUSEPORT and the kernel spreads connections among them, so one interpreter is not the server's limit either.
Their statistics are summed from one shared memory page (one slot per process, written only by its owner).
The first process prints `ready http=127.0.0.1:PORT` once every process listens; SIGTERM or SIGINT stops them all
(the others also die with the first: PR_SET_PDEATHSIG). It binds 127.0.0.1 only; it is test scaffolding.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import mmap
import os
import re
import signal
import socket
import struct
import sys
import time

HOST = "127.0.0.1"
SLOTS = 64  # processes at most (one 16-byte slot each in the statistics page)
MAX_HEADER = 64 * 1024
MAX_BODY = 64 * 1024 * 1024
CACHE = 256  # distinct inference requests whose reply is kept
OUT_BYTES = bytes(4 * 16)

ROUTE = re.compile(rb"^/v2/models/([^/]+)(?:/versions/([^/]+))?(/[a-z]+)?$")


def _json(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _reply(status: str, body: bytes = b"", ctype: bytes = b"application/json", extra: bytes = b"") -> bytes:
    return (b"HTTP/1.1 " + status.encode() + b"\r\nContent-Type: " + ctype + b"\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n" + extra + b"\r\n" + body)  # fmt: skip


class Model:
    def __init__(self, name: str) -> None:
        self.name = name
        io = {"datatype": "FP32", "shape": [1, 16]}
        self.metadata = _json({"name": name, "versions": ["1"], "platform": "onnxruntime_onnx",
                               "inputs": [{"name": "INPUT0", **io}],
                               "outputs": [{"name": "OUTPUT0", **io}]})  # fmt: skip
        dims = {"data_type": "TYPE_FP32", "dims": [1, 16]}
        self.config = _json({"name": name, "platform": "onnxruntime_onnx", "backend": "onnxruntime",
                             "max_batch_size": 0,
                             "input": [{"name": "INPUT0", **dims}], "output": [{"name": "OUTPUT0", **dims}],
                             "instance_group": [{"kind": "KIND_CPU", "count": 1}]})  # fmt: skip


class Stats:
    """Per process: successful inferences and their nanoseconds, in a shared page (summed when read)."""

    def __init__(self) -> None:
        self.page = mmap.mmap(-1, SLOTS * 16)  # anonymous and shared: inherited by the forked processes
        self.slot = 0

    def add(self, ns: int) -> None:
        off = self.slot * 16
        n, total = struct.unpack_from("qq", self.page, off)
        struct.pack_into("qq", self.page, off, n + 1, total + ns)

    def document(self, model: Model) -> bytes:
        n = total = 0
        for i in range(SLOTS):
            a, b = struct.unpack_from("qq", self.page, i * 16)
            n, total = n + a, total + b
        zero = {"count": 0, "ns": 0}
        share = {"count": n, "ns": total // 4}
        stats = {"success": {"count": n, "ns": total}, "fail": zero, "queue": share, "compute_input": share,
                 "compute_infer": share, "compute_output": share, "cache_hit": zero, "cache_miss": zero}  # fmt: skip
        return _json({"model_stats": [{"name": model.name, "version": "1", "last_inference": int(time.time() * 1000),
                                       "inference_count": n, "execution_count": n, "inference_stats": stats,
                                       "batch_stats": []}]})  # fmt: skip


class Server:
    def __init__(self, model: Model, stats: Stats, delay_s: float) -> None:
        self.model, self.stats, self.delay_s = model, stats, delay_s
        self.cache: dict[tuple[bytes, bytes], bytes] = {}
        exts = ["binary_tensor_data", "statistics", "model_configuration", "model_repository"]
        meta = _json({"name": "fast-server", "version": "1.0", "extensions": exts})
        index = _json([{"name": model.name, "version": "1", "state": "READY"}])
        self.fixed = {
            (b"GET", b"/v2/health/live"): _reply("200 OK"),
            (b"GET", b"/v2/health/ready"): _reply("200 OK"),
            (b"GET", b"/v2"): _reply("200 OK", meta),
            (b"POST", b"/v2/repository/index"): _reply("200 OK", index),
        }

    def answer(self, method: bytes, path: bytes, headers: dict[bytes, bytes], body: bytes) -> bytes:
        path = path.split(b"?", 1)[0]
        got = self.fixed.get((method, path))
        if got is not None:
            return got
        if path == b"/v2/models/stats":
            return _reply("200 OK", self.stats.document(self.model))
        m = ROUTE.match(path)
        if m is None or m.group(1).decode(errors="replace") != self.model.name:
            what = path.decode(errors="replace")
            return _reply("404 Not Found", _json({"error": f"no such model or endpoint: {what}"}))
        what = m.group(3) or b""
        if what == b"" and method == b"GET":
            return _reply("200 OK", self.model.metadata)
        if what == b"/ready":
            return _reply("200 OK")
        if what == b"/config":
            return _reply("200 OK", self.model.config)
        if what == b"/stats":
            return _reply("200 OK", self.stats.document(self.model))
        if what == b"/infer" and method == b"POST":
            return self.infer(headers, body)
        return _reply("404 Not Found", _json({"error": "no such endpoint"}))

    def infer(self, headers: dict[bytes, bytes], body: bytes) -> bytes:
        size = headers.get(b"inference-header-content-length")
        head = body[: int(size)] if size else body
        key = (size or b"", head)
        got = self.cache.get(key)
        if got is None:
            got = self._infer_reply(head, size is not None, len(body))
            if len(self.cache) < CACHE:
                self.cache[key] = got
        return got

    def _infer_reply(self, head: bytes, binary_in: bool, length: int) -> bytes:
        try:
            req = json.loads(head)
            inputs = {i["name"]: i for i in req["inputs"]}
        except (ValueError, KeyError, TypeError) as err:
            return _reply("400 Bad Request", _json({"error": f"malformed inference request: {err}"}))
        if set(inputs) != {"INPUT0"}:
            return _reply("400 Bad Request", _json({"error": f"expected input INPUT0, got {sorted(inputs)}"}))
        asked = req.get("outputs") or [{"name": "OUTPUT0"}]
        default_binary = bool((req.get("parameters") or {}).get("binary_data_output"))
        outs, blobs = [], []
        for o in asked:
            if o.get("name") != "OUTPUT0":
                return _reply("400 Bad Request", _json({"error": f"unknown output {o.get('name')!r}"}))
            out = {"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 16]}
            if (o.get("parameters") or {}).get("binary_data", default_binary):
                out["parameters"] = {"binary_data_size": len(OUT_BYTES)}
                blobs.append(OUT_BYTES)
            else:
                out["data"] = [0.0] * 16
            outs.append(out)
        header = _json({"model_name": self.model.name, "model_version": "1", "outputs": outs})
        if not blobs:
            return _reply("200 OK", header)
        extra = b"Inference-Header-Content-Length: " + str(len(header)).encode() + b"\r\n"
        return _reply("200 OK", header + b"".join(blobs), b"application/octet-stream", extra)


class Connection(asyncio.Protocol):
    def __init__(self, server: Server) -> None:
        self.server = server
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.waiting = False  # a delayed reply is pending: later requests wait in the buffer

    def connection_made(self, transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.waiting:
            self.serve()

    def serve(self) -> None:
        while self.transport is not None and not self.waiting:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > MAX_HEADER:
                    self.close(_reply("431 Request Header Fields Too Large"))
                return
            lines = bytes(self.buf[:end]).split(b"\r\n")
            try:
                method, path, _version = lines[0].split(b" ", 2)
                headers = {}
                for line in lines[1:]:
                    k, _, v = line.partition(b":")
                    headers[k.strip().lower()] = v.strip()
                length = int(headers.get(b"content-length", b"0"))
            except ValueError:
                self.close(_reply("400 Bad Request", _json({"error": "malformed request"})))
                return
            if length > MAX_BODY:
                self.close(_reply("413 Payload Too Large"))
                return
            if len(self.buf) < end + 4 + length:
                return
            body = bytes(self.buf[end + 4 : end + 4 + length])
            del self.buf[: end + 4 + length]
            started = time.perf_counter_ns()
            out = self.server.answer(method, path, headers, body)
            infer = path.endswith(b"/infer")
            close = headers.get(b"connection", b"").lower() == b"close"
            if infer and self.server.delay_s > 0:
                self.waiting = True
                asyncio.get_running_loop().call_later(self.server.delay_s, self.later, out, close, started)
                return
            if infer:
                self.server.stats.add(time.perf_counter_ns() - started)
            self.transport.write(out)
            if close:
                self.close()

    def later(self, out: bytes, close: bool, started: int) -> None:
        self.waiting = False
        if self.transport is None:
            return
        self.server.stats.add(time.perf_counter_ns() - started)
        self.transport.write(out)
        if close:
            self.close()
        else:
            self.serve()

    def close(self, last: bytes = b"") -> None:
        if self.transport is not None:
            if last:
                self.transport.write(last)
            self.transport.close()
            self.transport = None

    def connection_lost(self, exc) -> None:
        self.transport = None


def _listen(port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind((HOST, port))
    s.listen(1024)
    s.setblocking(False)
    return s


def _serve(sock: socket.socket, server: Server) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        stop = loop.create_future()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))
        srv = await loop.create_server(lambda: Connection(server), sock=sock)
        async with srv:
            await stop

    asyncio.run(main())


def _die_with_parent(parent: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: the kernel kills this process when its parent dies
    if os.getppid() != parent:
        os._exit(0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--http-port", type=int, default=0)
    ap.add_argument("--name", default="fast")
    ap.add_argument("--processes", type=int, default=min(4, len(os.sched_getaffinity(0))))
    ap.add_argument("--delay-ms", type=float, default=0.0)
    args = ap.parse_args(argv)
    if not 1 <= args.processes <= SLOTS:
        ap.error(f"--processes {args.processes}: from 1 to {SLOTS}")
    first = _listen(args.http_port)
    port = first.getsockname()[1]
    socks = [first] + [_listen(port) for _ in range(args.processes - 1)]
    stats, model = Stats(), Model(args.name)
    parent, children = os.getpid(), []
    for i, sock in enumerate(socks[1:], 1):
        pid = os.fork()
        if pid == 0:
            _die_with_parent(parent)
            for other in socks:
                if other is not sock:
                    other.close()
            stats.slot = i
            _serve(sock, Server(model, stats, args.delay_ms / 1e3))
            os._exit(0)
        children.append(pid)
    for sock in socks[1:]:
        sock.close()
    print(f"ready http={HOST}:{port} processes={args.processes}", flush=True)
    try:
        _serve(first, Server(model, stats, args.delay_ms / 1e3))
    finally:
        for pid in children:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 5
        for pid in children:
            try:
                while os.waitpid(pid, os.WNOHANG) == (0, 0):
                    if time.monotonic() > deadline:
                        os.kill(pid, signal.SIGKILL)
                        os.waitpid(pid, 0)
                        break
                    time.sleep(0.02)
            except ChildProcessError:
                pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
