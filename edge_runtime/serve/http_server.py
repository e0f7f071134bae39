"""The HTTP transport of `edge-runtime serve`'s REST face (issue 26): sockets, keep-alive, time bounds. Every route and
check is rest.py's; this module reads a request's head and body, hands them to `Rest`, and writes what it answers.
It must never decode a tensor or look at a route itself.

The standard library's ThreadingHTTPServer (HTTP/1.1 keep-alive, Nagle off, a thread per connection) and not
aiohttp: measured by tools/serve_http_choice.py on the development machine (2 vCPUs shared with other work, Python
3.11, digits_cnn_int8.onnx through Core, a pool of keep-alive http.client connections sending binary tensors, the same
Rest handler in both, each server in its own process):

    MEASUREMENTS

The thread per connection costs little memory here (1000 idle connections: about +10 MB, as aiohttp's), serves more
requests per second at concurrency 8, needs no dependency, and a slow client holds only its own thread. So: the
standard library. Its one gap, a bound on the whole request head (a socket timeout bounds each read, not a client
that sends one byte a second), is closed by a watchdog thread that shuts such a connection down with one log line.
Idle connections are closed after `idle_timeout_s` (the socket timeout while waiting for a request).
"""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from edge_runtime.errors import UserError
from edge_runtime.serve.kserve import Core
from edge_runtime.serve.rest import PREFIX, Pending, Response, Rest, printable, stderr_log


class _Handler(BaseHTTPRequestHandler):
    """One connection: requests one after another (keep-alive), each handed to the server's Rest."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _Server
    busy_since: float | None = None  # the first byte of a request arrived then; None while idle or answering
    answering = False  # the request is in and being answered
    dropped = False  # shut down by the watchdog: what was read of the request is not answered

    def setup(self) -> None:
        self.timeout = self.server.idle_timeout_s
        super().setup()
        self.server.track(self, True)

    def finish(self) -> None:
        self.server.track(self, False)
        try:
            super().finish()
        except OSError:  # the client is gone: nothing left to flush to
            pass

    def handle_one_request(self) -> None:
        try:
            if not self.rfile.peek(1):  # idle until a request starts (or idle_timeout_s, or the client leaves)
                self.close_connection = True
                return
        except (TimeoutError, OSError):
            self.close_connection = True
            return
        if self.server.closing:
            self.close_connection = True
            return
        self.busy_since = time.monotonic()
        try:
            super().handle_one_request()
        except (TimeoutError, OSError):
            self.close_connection = True
        finally:
            self.busy_since, self.answering = None, False

    def _one(self) -> None:
        if self.dropped:
            self.close_connection = True
            return
        rest, peer = self.server.rest, self.client_address[0]
        headers = {k.lower(): v for k, v in self.headers.items()}
        method, target = self.command, self.path
        answer = rest.check_head(method, target, headers, peer)
        if answer is not None:
            self.close_connection = "content-length" in headers or "transfer-encoding" in headers
            return self._reply(answer)
        length = rest.body_length(headers)
        body = self.rfile.read(length) if length else b""
        if len(body) != length:
            rest.log(
                f"{PREFIX}: {printable(method, 10)} {printable(target)} from {peer}: body of {length} bytes "
                f"cut at {len(body)}: connection closed"
            )
            self.close_connection = True
            return
        self.busy_since = None  # the request is in: from here on it is the server's time, not the client's
        self.answering = True
        answer = rest.handle(method, target, headers, body, peer)
        if isinstance(answer, Pending):
            answer.future.exception()  # waits for the outcome (its deadline is the batcher's); respond() reads it
            answer = answer.respond()
        if self.server.closing:
            self.close_connection = True
        self._reply(answer)

    do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _one

    def _reply(self, answer: Response) -> None:
        self.send_response(answer.status)
        for k, v in answer.headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(answer.body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(answer.body)

    def version_string(self) -> str:
        return "edge-runtime"

    def log_request(self, code="-", size="-") -> None:
        pass  # no access log: refusals are logged, one line each, by Rest

    def log_message(self, format: str, *args) -> None:  # the stdlib's own refusals (a malformed request line)
        if self.dropped:
            return
        self.server.rest.log(f"{PREFIX}: {printable(format % args)} from {self.client_address[0]}")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 1024

    def __init__(self, address, rest: Rest, idle_timeout_s: float, header_timeout_s: float):
        self.rest, self.idle_timeout_s, self.header_timeout_s = rest, idle_timeout_s, header_timeout_s
        self.closing = False
        self.handlers: set[_Handler] = set()
        self._lock = threading.Lock()
        super().__init__(address, _Handler)

    def track(self, handler: _Handler, alive: bool) -> None:
        with self._lock:
            (self.handlers.add if alive else self.handlers.discard)(handler)

    def snapshot(self) -> list[_Handler]:
        with self._lock:
            return list(self.handlers)

    def handle_error(self, request, client_address) -> None:  # never a traceback for what a client did
        self.rest.log(f"{PREFIX}: connection from {client_address[0]} ended by an error")


def _drop(handler: _Handler) -> None:
    try:
        handler.connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class HttpServer:
    """A running REST server: `.port`, `.url`, `.close(timeout_s)`."""

    def __init__(self, rest: Rest, host: str, port: int, idle_timeout_s: float, header_timeout_s: float):
        try:
            self._server = _Server((host, port), rest, idle_timeout_s, header_timeout_s)
        except OSError as err:
            raise UserError(f"serve: cannot listen on {host}:{port}: {err.strerror or err}") from None
        self.port = self._server.server_address[1]
        self.url = f"http://{f'[{host}]' if ':' in host else host}:{self.port}"
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._server.serve_forever, args=(0.1,), name="edge-runtime-http", daemon=True),
            threading.Thread(target=self._watch, name="edge-runtime-http-watch", daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _watch(self) -> None:
        """Drop a connection whose request (head and body) has been arriving for longer than header_timeout_s: a
        socket timeout bounds each read only, and a client sending a byte a second never trips it."""
        bound = self._server.header_timeout_s
        while not self._stop.wait(min(1.0, bound / 4)):
            now = time.monotonic()
            for h in self._server.snapshot():
                began = h.busy_since
                if began is not None and now - began > bound:
                    h.busy_since, h.dropped = None, True
                    self._server.rest.log(
                        f"{PREFIX}: request from {h.client_address[0]} not received within {bound:g} s: dropped"
                    )
                    _drop(h)

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop accepting, let in-flight requests finish (for up to timeout_s), then close every connection."""
        if self._stop.is_set():
            return
        self._stop.set()
        server = self._server
        server.closing = True
        server.shutdown()
        server.server_close()
        end = time.monotonic() + timeout_s
        while True:
            left = server.snapshot()
            for h in left:
                if h.busy_since is None and not h.answering:
                    _drop(h)  # idle between requests: nothing to finish
            if not left or time.monotonic() > end:
                break
            time.sleep(0.01)
        for h in server.snapshot():
            _drop(h)
        for t in self._threads:
            t.join(1.0)

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
