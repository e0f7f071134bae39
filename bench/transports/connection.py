"""One connection to an agent: a stream, the wire protocol's Link over it, and a reader thread that feeds the codec,
runs the link's timers and hands each response to the request waiting for it.

`request()` sends and waits; `send_request()`/`wait()` let a caller keep several requests in flight (model chunks).
`stats()` is the link's (frames, resends, its own round trip) with `board_busy_ms` beside it: how long the board took,
on average, from having a request (its ACK, which the agent writes before it handles the request) to its first answer
(a progress or the response): what a round trip of request and answer adds to the link's own.
When the stream ends or the link hears nothing for `dead_after` seconds every waiter gets LinkLost: the target
reconnects and asks again with the same request id, which the agent answers without running anything twice.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import os
import queue
import threading
import time
from collections.abc import Callable

from bench.transports import Stream, StreamLost, named, open_stream
from edge_runtime.wire import messages as wm
from edge_runtime.wire.link import Connected, Down, Link, Message, ProtocolError, Refused


class LinkLost(ConnectionError):
    """The connection to the agent is gone (the request may still complete on the board)."""


class ConnectRefused(ConnectionError):
    """The agent refused the connection (busy with another host, another protocol version)."""


class RemoteError(Exception):
    """The agent answered with an error: `kind` (auth, bad-path, hash-mismatch, user-error, crashed...) and a line."""

    def __init__(self, kind: str, message: str, op: str | None = None):
        super().__init__(message)
        self.kind, self.message, self.op = kind, message, op


_ids = itertools.count(1)


def new_request_id(prefix: str = "r") -> str:
    """Unique across host restarts: time, pid, a counter."""
    return f"{prefix}{time.time_ns():x}-{os.getpid():x}-{next(_ids):x}"


class Connection:
    def __init__(
        self,
        url: str,
        *,
        token: bytes | None = None,
        max_payload: int = 64 * 1024,
        connect_timeout: float = 10.0,
        dead_after: float = 10.0,
        stream: Stream | None = None,
    ):
        self.url = url
        self.token = token
        self.link = Link(role="host", max_payload=max_payload, dead_after=dead_after, line_rate=_line_rate(url))
        self.connect_timeout = connect_timeout
        self._stream = stream
        self._lock = threading.Lock()  # the link
        self._wlock = threading.Lock()  # the stream's write side (taken before _lock, never after)
        self._waiters: dict[str, queue.Queue] = {}
        self._progress: dict[str, Callable[[str], None]] = {}
        self._connected = threading.Event()
        self._lost: str | None = None
        self._refused: str | None = None
        self.stray_errors: list[dict] = []  # `error` messages (not answers): what the agent could not take
        self.identity: dict = {}
        self._reader: threading.Thread | None = None
        self._closing = False
        self._nonce = ""
        self._unacked_requests: dict[str, int] = {}  # request id -> its end in the link's stream, until acknowledged
        self._acked_at: dict[str, float] = {}  # request id -> when the agent was known to have it, until answered
        self._busy = [0.0, 0]  # board_busy_ms: total, requests

    # ------------------------------------------------------------------------------------------------ open/close
    def open(self) -> dict:
        """Connect and say hello; returns the identity. Raises StreamLost, ConnectRefused, RemoteError (auth)."""
        if self._stream is None:
            self._stream = open_stream(self.url, timeout=self.connect_timeout)
        with self._lock:
            self.link.connect(time.monotonic())
        self._flush()
        self._reader = threading.Thread(target=self._read_loop, name=f"link {self.url}", daemon=True)
        self._reader.start()
        deadline = time.monotonic() + self.connect_timeout
        while not self._connected.wait(0.05):
            if self._refused:
                self.close()
                raise ConnectRefused(f"{self.url}: refused: {self._refused}")
            if self._lost or time.monotonic() > deadline:
                why = self._lost or f"no agent answered in {self.connect_timeout:g} s"
                self.close()
                raise StreamLost(named(self.url, why))
        args = {}
        if self.token is not None:
            args["mac"] = hmac.new(self.token, self._nonce.encode(), hashlib.sha256).hexdigest()
        try:
            self.identity = self.request("hello", args, timeout=self.connect_timeout)
        except TimeoutError:
            self.close()
            raise StreamLost(f"{self.url}: the agent did not answer hello in {self.connect_timeout:g} s") from None
        except BaseException:
            self.close()
            raise
        return self.identity

    def close(self) -> None:
        self._closing = True
        if self._stream is not None:
            self._stream.close()
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(timeout=2)
        self._fail_all("connection closed")

    @property
    def alive(self) -> bool:
        return self._lost is None and not self._closing and self._connected.is_set()

    def stats(self) -> dict:
        with self._lock:
            d = self.link.stats_dict()
        total, n = self._busy
        d["board_busy_ms"] = round(total / n, 3) if n else None
        return d

    # ------------------------------------------------------------------------------------------------ requests
    def send_request(
        self, op: str, args: dict | None = None, blob: bytes = b"", rid: str | None = None, progress=None
    ) -> str:
        rid = rid or new_request_id()
        self._waiters[rid] = queue.Queue()
        if progress is not None:
            self._progress[rid] = progress
        if self._lost:  # checked after the waiter is in place: a loss from now on reaches it through _fail_all
            self._waiters.pop(rid, None)
            self._progress.pop(rid, None)
            raise LinkLost(self._lost)
        data = wm.encode(wm.request(rid, op, args, blob))
        with self._wlock:
            with self._lock:
                self._unacked_requests[rid] = self.link.send(data, time.monotonic())
                out = self.link.outgoing()
            self._write(out)
        return rid

    def wait(self, rid: str, timeout: float | None = None, full: bool = False):
        """The result of request `rid`; RemoteError when the agent answered with an error, LinkLost when the
        connection went first, TimeoutError after `timeout` seconds."""
        q = self._waiters.get(rid)
        if q is None:
            raise KeyError(rid)
        try:
            item = q.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"{self.url}: no answer to {rid} in {timeout:g} s") from None
        finally:
            self._waiters.pop(rid, None)
            self._progress.pop(rid, None)
        if isinstance(item, Exception):
            raise item
        if not item.get("ok"):
            err = item.get("error") or {}
            raise RemoteError(str(err.get("kind", "error")), str(err.get("message", "")), item.get("op"))
        return item if full else item.get("result")

    def request(self, op: str, args: dict | None = None, blob: bytes = b"", rid: str | None = None, timeout=None,
                progress=None, full: bool = False):  # fmt: skip
        """Send and wait: the result (with `full`, the whole answer: ok, result, warnings...)."""
        return self.wait(self.send_request(op, args, blob, rid, progress), timeout, full)

    # ------------------------------------------------------------------------------------------------ reader
    def _read_loop(self) -> None:
        try:
            self._read_loop_body()
        except Exception as err:  # noqa: BLE001 - whatever ends the reader ends the connection, and wakes the waiters
            self._lose(f"{self.url}: {type(err).__name__}: {' '.join(str(err).split())[:200]}")

    def _read_loop_body(self) -> None:
        while not self._closing:
            with self._lock:
                wait = min(self.link.next_timer(time.monotonic()), 0.05)
            try:
                data = self._stream.read(wait)
            except StreamLost as err:
                self._lose(str(err))
                return
            except Exception as err:  # noqa: BLE001 - a closed stream raises whatever its library raises
                self._lose(named(self.url, f"{type(err).__name__}: {err}"))
                return
            now = time.monotonic()
            with self._lock:
                self.link.receive(data, now)
                self.link.poll(now)
                events = self.link.events()
                for rid, end in list(self._unacked_requests.items()):
                    if end <= self.link.acked:
                        del self._unacked_requests[rid]
                        self._acked_at[rid] = now
            for ev in events:
                self._on_event(ev)
            try:
                self._flush()
            except LinkLost:
                return

    def _on_event(self, ev) -> None:
        if isinstance(ev, Connected):
            self._nonce = str(ev.peer.get("nonce", ""))
            self._connected.set()
        elif isinstance(ev, Refused):
            self._refused = ev.reason
            if self._connected.is_set():  # the agent ended the session (it lost us, or restarted): connect again
                self._lose(f"{self.url}: the agent ended the session ({ev.reason})")
        elif isinstance(ev, Down):
            self._lose(f"{self.url}: {ev.reason}")
        elif isinstance(ev, ProtocolError):
            self.stray_errors.append({"kind": ev.kind, "message": ev.detail})
        elif isinstance(ev, Message):
            try:
                msg = wm.decode(ev.data)
            except wm.MessageError as err:
                self.stray_errors.append({"kind": "bad-message", "message": str(err)})
                return
            rid = msg.get("id")
            if not isinstance(rid, str):
                rid = None
            acked = self._acked_at.pop(rid, None) if rid is not None else None
            if acked is not None:  # its first answer (or progress): the board's time since it had the request
                self._busy[0] += max(0.0, ev.first_at - acked) * 1e3
                self._busy[1] += 1
            self._unacked_requests.pop(rid, None)  # answered before its ACK came: the ACK was lost, no sample
            if msg.type == "progress":
                cb = self._progress.get(rid)
                if cb is not None:
                    cb(str(msg.get("text", "")))
            elif msg.type == "response" and rid in self._waiters:
                self._waiters[rid].put(msg.fields)
            elif msg.type == "error":
                err = msg.get("error")
                self.stray_errors.append(err if isinstance(err, dict) else {"kind": "error", "message": str(err)})
                del self.stray_errors[:-100]

    def _flush(self) -> None:
        with self._wlock:
            with self._lock:
                out = self.link.outgoing()
            self._write(out)

    def _write(self, out: bytes) -> None:
        if not out or self._lost:
            return
        try:
            self._stream.write(out)
        except Exception as err:  # noqa: BLE001 - a stream closed under us raises whatever its library raises
            why = named(self.url, str(err) if isinstance(err, StreamLost) else f"{type(err).__name__}: {err}")
            self._lose(why)
            raise LinkLost(why) from None

    def _lose(self, why: str) -> None:
        if self._lost is None:
            self._lost = why
        self._fail_all(why)

    def _fail_all(self, why: str) -> None:
        for q in list(self._waiters.values()):
            q.put(LinkLost(why))


def _line_rate(url: str) -> float | None:
    """Bytes per second of a serial line named by the URL, or None (see edge_runtime.wire.endpoint.line_rate)."""
    from bench.transports import parse_endpoint
    from edge_runtime.wire.endpoint import line_rate

    try:
        return line_rate(parse_endpoint(url, "target", listen=False))
    except Exception:  # noqa: BLE001 - a bad URL is reported when the stream opens
        return None
