"""A small KServe v2 HTTP server that misbehaves on request, for the tests of bounded waits (issue 24, part B).

    python tests/servers/trickle_server.py --port P --mode MODE [--model m] [--honest-first N] [--trickle-every K]
                                           [--trickle-s 0.5]

It serves one model (`--model`, default "m": input `x` FP32 [1,4], output `y` FP32 [1,4], the sum of x in every
element) well enough for tritonclient: health, server and model metadata, model config, readiness, inference with
binary or JSON tensors (the binary tensor extension: `Inference-Header-Content-Length`), the statistics extension
(`/v2/models/M/stats`) and a Prometheus `/metrics` on the same port. MODE says what goes wrong:

- `honest`: nothing;
- `trickle-infer`: inference replies go out a byte every `--trickle-s` s (status line and headers included), after the
  first `--honest-first` inferences, every `--trickle-every`-th one (1: all), at most `--trickle-max` of them
  (`--body-only`: the status line and headers at once, then the body a byte at a time);
- `trickle-metrics`, `trickle-stats`: `/metrics` or the statistics trickle the same way;
- `big-metrics`: `/metrics` is 10 MB of valid lines, without a Content-Length (the body ends when the connection does);
- `hang-metrics`: `/metrics` reads the request and never answers.

`GET /_counts` answers what it did so far as JSON: {"infer": N, "trickled": N, "metrics": N, "stats": N}; a trickle
whose client hung up stops there. One line `ready http=127.0.0.1:P metrics=127.0.0.1:P` goes to stdout once it
listens (port 0: one picked free). It listens on 127.0.0.1 only; SIGTERM ends it. asyncio, with TCP_NODELAY: every
trickled byte leaves when it is written.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import struct
import sys

HOST = "127.0.0.1"
BIG_METRICS_BYTES = 10 * 1000 * 1000
SHAPE = [1, 4]


class Misbehaving:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.counts = {"infer": 0, "trickled": 0, "metrics": 0, "stats": 0}
        self.big = b""
        if args.mode == "big-metrics":  # made once: building it per scrape would stall this loop's inference replies
            lines = [b'nv_cpu_utilization{core="%d"} 0.5\n' % i for i in range(BIG_METRICS_BYTES // 30)]
            self.big = b"nv_cpu_memory_used_bytes 1048576\n" + b"".join(lines)

    # ------------------------------------------------------------------------------------------- the answers
    def route(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, dict, bytes, str]:
        """(status, headers, body, how) for one request; `how`: "send", "trickle", "hang" or "unbounded"."""
        m = self.args.model
        path = path.split("?", 1)[0].rstrip("/")
        if path in ("/v2/health/live", "/v2/health/ready", f"/v2/models/{m}/ready"):
            return 200, {}, b"", "send"
        if path == "/v2":
            return self.json({"name": "trickle", "version": "1", "extensions": ["binary_tensor_data", "statistics"]})
        if path == f"/v2/models/{m}":
            t = {"datatype": "FP32", "shape": SHAPE}
            return self.json({"name": m, "versions": ["1"], "platform": "trickle", "inputs": [{"name": "x", **t}],
                              "outputs": [{"name": "y", **t}]})  # fmt: skip
        if path == f"/v2/models/{m}/config":
            return self.json({"name": m, "max_batch_size": 0})
        if path == f"/v2/models/{m}/infer" and method == "POST":
            return self.infer(headers, body)
        if path == f"/v2/models/{m}/stats":
            self.counts["stats"] += 1
            n = self.counts["infer"]
            stage = {"count": n, "ns": n * 1000}
            stats = {k: stage for k in ("success", "queue", "compute_input", "compute_infer", "compute_output")}
            doc = {
                "model_stats": [
                    {"name": m, "version": "1", "inference_stats": {**stats, "fail": {"count": 0, "ns": 0}}}
                ]
            }
            status, h, b, _ = self.json(doc)
            return status, h, b, "trickle" if self.args.mode == "trickle-stats" else "send"
        if path == "/metrics":
            self.counts["metrics"] += 1
            return self.metrics()
        if path == "/_counts":
            return self.json(self.counts)
        return self.json({"error": f"no route {method} {path}"}, 404)

    @staticmethod
    def json(doc, status: int = 200) -> tuple[int, dict, bytes, str]:
        return status, {"Content-Type": "application/json"}, json.dumps(doc).encode(), "send"

    def metrics(self) -> tuple[int, dict, bytes, str]:
        mode = self.args.mode
        text = b"# HELP nv_cpu_utilization CPU\n# TYPE nv_cpu_utilization gauge\nnv_cpu_utilization 0.25\n"
        text += b"nv_cpu_memory_used_bytes 1048576\n"
        if mode == "big-metrics":
            return 200, {"Content-Type": "text/plain"}, self.big, "unbounded"
        how = {"trickle-metrics": "trickle", "hang-metrics": "hang"}.get(mode, "send")
        return 200, {"Content-Type": "text/plain; version=0.0.4"}, text, how

    def infer(self, headers: dict[str, str], body: bytes) -> tuple[int, dict, bytes, str]:
        self.counts["infer"] += 1
        n = self.counts["infer"]
        json_len = int(headers.get("inference-header-content-length", len(body)))
        try:
            req = json.loads(body[:json_len])
        except ValueError:
            return self.json({"error": "the request is not JSON"}, 400)
        total, at = 0.0, json_len
        for t in req.get("inputs", []):
            size = (t.get("parameters") or {}).get("binary_data_size")
            if size is not None:  # binary: the tensor's bytes follow the JSON header, in the order of the inputs
                raw, at = body[at : at + size], at + size
                total = float(sum(struct.unpack(f"<{len(raw) // 4}f", raw[: len(raw) // 4 * 4])))
            elif "data" in t:
                total = float(sum(float(v) for v in _flat(t["data"])))
        wanted = req.get("outputs") or [{"name": "y"}]
        binary = any((o.get("parameters") or {}).get("binary_data") for o in wanted) or (
            (req.get("parameters") or {}).get("binary_data_output", False))  # fmt: skip
        values = [total] * (SHAPE[0] * SHAPE[1])
        out = {"name": "y", "datatype": "FP32", "shape": SHAPE}
        if binary:
            raw = struct.pack(f"<{len(values)}f", *values)
            described = {**out, "parameters": {"binary_data_size": len(raw)}}
            head = json.dumps({"model_name": self.args.model, "model_version": "1", "outputs": [described]}).encode()
            reply = (200, {"Content-Type": "application/octet-stream",
                           "Inference-Header-Content-Length": str(len(head))}, head + raw)  # fmt: skip
        else:
            doc = {"model_name": self.args.model, "model_version": "1", "outputs": [{**out, "data": values}]}
            reply = (200, {"Content-Type": "application/json"}, json.dumps(doc).encode())
        a = self.args
        trickle = a.mode == "trickle-infer" and n > a.honest_first and (n - a.honest_first) % a.trickle_every == 0
        trickle = trickle and (a.trickle_max is None or self.counts["trickled"] < a.trickle_max)
        if trickle:
            self.counts["trickled"] += 1
        return (*reply, "trickle" if trickle else "send")

    # ------------------------------------------------------------------------------------------- the wire
    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
                status, extra, payload, how = self.route(method, target, headers, body)
                if how == "hang":
                    await reader.read()  # until the client gives up and closes
                    return
                length = "" if how == "unbounded" else f"Content-Length: {len(payload)}\r\n"
                closing = "Connection: close\r\n" if how == "unbounded" else ""
                words = "".join(f"{k}: {v}\r\n" for k, v in extra.items())
                data = f"HTTP/1.1 {status} X\r\n{words}{length}{closing}\r\n".encode() + payload
                if how == "trickle":
                    at_once = len(data) - len(payload) if self.args.body_only else 0  # the head at once, then the body
                    writer.write(data[:at_once])
                    for i in range(at_once, len(data)):
                        writer.write(data[i : i + 1])
                        await writer.drain()
                        await asyncio.sleep(self.args.trickle_s)
                else:
                    writer.write(data)
                    await writer.drain()
                if how == "unbounded":
                    return
        except (asyncio.IncompleteReadError, ConnectionError, ValueError, asyncio.LimitOverrunError):
            return
        finally:
            writer.close()


def _flat(data):
    for v in data:
        if isinstance(v, list):
            yield from _flat(v)
        else:
            yield v


async def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--model", default="m")
    modes = ("honest", "trickle-infer", "trickle-metrics", "trickle-stats", "big-metrics", "hang-metrics")
    ap.add_argument("--mode", choices=modes, default="honest")
    ap.add_argument("--honest-first", type=int, default=0)
    ap.add_argument("--trickle-every", type=int, default=1)
    ap.add_argument("--trickle-max", type=int, default=None)
    ap.add_argument("--trickle-s", type=float, default=0.5)
    ap.add_argument("--body-only", action="store_true", help="trickle the body only (the head goes at once)")
    args = ap.parse_args(argv)
    app = Misbehaving(args)
    server = await asyncio.start_server(app.serve, HOST, args.port)
    port = server.sockets[0].getsockname()[1]
    print(f"ready http={HOST}:{port} metrics={HOST}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()  # not wait_closed(): a trickle or a hang in progress would hold the exit; asyncio.run cancels them


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
