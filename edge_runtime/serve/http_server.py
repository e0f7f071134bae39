"""The HTTP transport of `edge-runtime serve`'s REST face (issue 26): sockets, keep-alive, time bounds. Every route and
check is rest.py's; this module reads a request's head and body, hands them to `Rest`, and writes what it answers.
It must never decode a tensor or look at a route itself.

Why aiohttp and not the standard library's ThreadingHTTPServer (HTTP/1.1 keep-alive, Nagle off, a thread per
connection): measured by tools/serve_http_choice.py on the development machine (2 vCPUs, Python 3.11.7, aiohttp
3.14.5), each server in a child process running the same `Rest` over the same Core on digits_cnn_int8.onnx, a pool
of keep-alive http.client connections sending binary tensors as the client; two rounds, servers alternating, on a
quiet machine (load 0.0-0.6):

    server   c1 req/s p50 us p99 us  c8 req/s p50 us p99 us  RSS idle MB  +1000 idle conns  slow client blocks others
    aiohttp  2574     375    611     3633     2105   3503    76.9         84.9 (+8)         no
    aiohttp  2322     405    682     3530     2144   3802    77.0         85.0 (+8)         no
    stdlib   3069     319    488     3154     2434   4626    65.8         92.1 (+26)        no
    stdlib   2719     354    537     2639     2926   5475    65.8         92.1 (+26)        no

(Earlier rounds on a loaded machine ranked the same at concurrency 8, with wider spread.) The standard library is
about 15% quicker for one client at a time and 11 MB smaller idle; aiohttp serves about 20% more requests per second
at concurrency 8 with a lower p99 (the case the dynamic batcher is for), and a connection costs it about 8 KB
against a thread's 26 KB, so a flood of connections does not become a flood of threads. So: aiohttp, one dependency
(the `serve` extra).

aiohttp runs one event loop in a background thread; an inference never blocks it (the loop awaits the batcher's
future through asyncio.wrap_future); a body above 64 KiB is decoded and encoded in a worker thread. Idle connections
are closed after `idle_timeout_s`; a connection whose request head (or body) does not arrive within `header_timeout_s`
is dropped with one log line.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from edge_runtime.errors import UserError
from edge_runtime.serve.kserve import Core
from edge_runtime.serve.rest import PREFIX, Pending, Response, Rest, printable, stderr_log

_OFFLOAD_BYTES = 1 << 16  # bodies above this are decoded off the loop


class HttpServer:
    """A running REST server: `.port`, `.url`, `.close(timeout_s)`."""

    def __init__(self, rest: Rest, host: str, port: int, idle_timeout_s: float, header_timeout_s: float):
        try:
            from aiohttp import web, web_protocol
        except ImportError:
            raise UserError("serve: the REST face needs aiohttp", hint="pip install 'edge-runtime[serve]'") from None
        self.rest, self.host = rest, host
        self.header_timeout_s = header_timeout_s
        self._web = web
        self._loop = asyncio.new_event_loop()
        outer = self

        class Handler(web_protocol.RequestHandler):
            """aiohttp's connection, timing the head of each request from its first byte."""

            head_started: float | None = None

            def data_received(self, data: bytes) -> None:
                if self.head_started is None and not self._request_in_progress:
                    self.head_started = outer._loop.time()
                super().data_received(data)

            def handle_error(self, request, status=500, exc=None, message=None):
                """A request aiohttp could not parse (bad request line, too many headers, TLS on this port): one
                line and a JSON error, not aiohttp's traceback."""
                why = printable(" ".join(str(getattr(exc, "message", None) or exc or message or "").split()), 120)
                outer.rest.log(f"{PREFIX}: {status} from {request.remote}: malformed request: {why}")
                if request.writer.output_size > 0:
                    raise ConnectionError("response already started")
                resp = web.json_response({"error": f"malformed request: {why}"}, status=status)
                resp.force_close()
                return resp

        class Server(web.Server):
            def __call__(self):
                return Handler(self, loop=self._loop, **self._kwargs)

        quiet = logging.Logger("edge_runtime.serve.http", logging.CRITICAL + 1)  # our faults: one line in Rest
        self._server = Server(
            self._serve,
            loop=self._loop,
            keepalive_timeout=idle_timeout_s,
            access_log=None,
            logger=quiet,
            lingering_time=0,  # a refused body is not read on (a declared 10^12 bytes would be, for 10 s)
            auto_decompress=False,  # a compressed body is refused (415), never inflated
        )
        started = threading.Event()
        failure: list = []
        self._thread = threading.Thread(
            target=self._run, args=(port, started, failure), name="edge-runtime-http", daemon=True
        )
        self._thread.start()
        started.wait()
        if failure:
            raise UserError(f"serve: cannot listen on {host}:{port}: {failure[0]}") from None
        self.port = self._listener.sockets[0].getsockname()[1]
        bracketed = f"[{host}]" if ":" in host else host
        self.url = f"http://{bracketed}:{self.port}"

    def _run(self, port: int, started: threading.Event, failure: list) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._listener = self._loop.run_until_complete(
                self._loop.create_server(self._server, self.host, port, backlog=1024, reuse_address=True)
            )
        except OSError as err:
            failure.append(str(err).rsplit(": ", 1)[-1])  # asyncio wraps the errno text in its own words
            self._loop.close()
            started.set()
            return
        self._sweeper = self._loop.create_task(self._sweep())
        started.set()
        self._loop.run_forever()
        left = asyncio.all_tasks(self._loop)
        for task in left:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        self._loop.close()

    async def _sweep(self) -> None:
        """Drop connections whose request head has been arriving for longer than header_timeout_s (slowloris)."""
        while True:
            await asyncio.sleep(min(1.0, self.header_timeout_s / 4))
            now = self._loop.time()
            for conn in self._server.connections:
                began = getattr(conn, "head_started", None)
                if began is not None and now - began > self.header_timeout_s and not conn._request_in_progress:
                    peer = (conn.transport.get_extra_info("peername") or ("?",))[0] if conn.transport else "?"
                    self.rest.log(
                        f"{PREFIX}: request head from {peer} not received within {self.header_timeout_s:g} s: dropped"
                    )
                    conn.head_started = None
                    conn.force_close()
                    if conn.transport is not None:
                        conn.transport.close()

    async def _serve(self, request):
        conn = request.protocol
        conn.head_started = None
        peer = (request.transport.get_extra_info("peername") or ("?",))[0] if request.transport else "?"
        headers = {k.lower(): v for k, v in request.headers.items()}
        method, target = request.method, request.raw_path
        refused = self.rest.check_head(method, target, headers, peer)
        if refused is not None:
            return self._reply(refused, close=request.can_read_body)
        body = b""
        length = self.rest.body_length(headers)
        if length:
            try:
                body = await asyncio.wait_for(request.content.readexactly(length), self.header_timeout_s)
            except Exception as err:  # noqa: BLE001 - truncated, reset or too slow: all one line
                if isinstance(err, asyncio.IncompleteReadError):
                    why = f"cut at {len(err.partial)}"
                else:
                    why = "not received in time" if isinstance(err, asyncio.TimeoutError) else "not received"
                self.rest.log(
                    f"{PREFIX}: {printable(method, 10)} {printable(target)} from {peer}: body of {length} bytes "
                    f"{why}: connection closed"
                )
                conn.force_close()
                return self._reply(Response(400), close=True)
        if len(body) > _OFFLOAD_BYTES:
            answer = await self._loop.run_in_executor(None, self.rest.handle, method, target, headers, body, peer)
        else:
            answer = self.rest.handle(method, target, headers, body, peer)
        if isinstance(answer, Pending):
            try:
                await asyncio.wrap_future(answer.future)
            except asyncio.CancelledError:
                raise
            except BaseException:  # noqa: BLE001 - the future's error: respond() turns it into the answer
                pass
            answer = answer.respond()
        return self._reply(answer, close=False)

    def _reply(self, answer: Response, close: bool):
        resp = self._web.Response(status=answer.status, body=answer.body, headers=answer.headers)
        if close:
            resp.force_close()
        return resp

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop accepting, let in-flight requests finish (for up to timeout_s), close every connection."""
        if not self._thread.is_alive():
            return

        async def stop() -> None:
            self._sweeper.cancel()
            self._listener.close()
            self._server.pre_shutdown()  # idle connections close now, busy ones after their response
            await self._server.shutdown(timeout_s)

        try:
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout_s + 5)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout_s + 5)

    def __enter__(self) -> HttpServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def start_http(
    core: Core,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    token: bytes | None = None,
    log=None,
    max_body_bytes: int = 64 << 20,
    idle_timeout_s: float = 60.0,
    header_timeout_s: float = 30.0,
) -> HttpServer:
    """Serve `core` over KServe v2 REST on host:port (0: any free port) from background threads; returns at once."""
    rest = Rest(core, token=token, log=log if log is not None else stderr_log, max_body_bytes=max_body_bytes)
    return HttpServer(rest, host, port, idle_timeout_s, header_timeout_s)
