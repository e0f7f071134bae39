"""A fast HTTP sender for KServe v2 inference with binary tensors: one keep-alive HTTP/1.1 connection on a raw socket
that sends the same precomputed request bytes every query and reads the reply by its Content-Length.

Why not tritonclient here: against a server that answers at once, tritonclient's per-request Python cost (building
the request, geventhttpclient's parser, its gevent hub; about 150-200 us a request on this project's 2-vCPU VM) is the
whole run's limit, and its queueing shows up as the server's latency (issue 24). The inputs are the same seeded data
every query (bench/targets/kserve.py), so the request body is built once, by tritonclient itself
(`InferenceServerClient.generate_request_body`: the protocol's encoding stays the library's), and sent as bytes.
tritonclient stays the client for gRPC, for JSON tensors, and for everything around a run (metadata, statistics,
health); the target uses this sender when binary tensors were chosen (a first request already went through), with
no probe query of its own (a server's first answers are the tests' and the warm-up's).

Every request has one deadline for the whole of it (connect, send, receive): the URL's `timeout`; a server that
trickles a byte every half second still fails the query at its timeout ("timeout"). A reply is checked for its
status (`status NNN`, the server's error text kept), its framing (Content-Length; a chunked or unframed reply is
"bad reply") and, when the target gives one, by `answer_check(header, body_len)` on the reply's parsed JSON header
and the length of the body after it (a non-None answer is the query's failure, kind "wrong answer"): for the KServe
target that is kserve_answers.check_answer against the model's metadata, the check every other sender makes.
After a failure whose reply was not read whole (a timeout, a lost connection, a bad frame) the connection is closed
and the next query opens a new one; a wrong answer or an error status, read whole, leaves it open (as tritonclient
does: a server that lies every other answer on a connection is seen to).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from bench.targets.kserve_protocol import ENGINES, load_options  # noqa: F401 - ENGINES: for callers

AnswerCheck = Callable[[dict, int], "str | None"]
MAX_REPLY = 256 * 1024 * 1024  # a declared Content-Length above this is refused, never allocated
WRONG_ANSWER = "wrong answer"
FIELDS = tuple((name, b"\r\n" + name + b":") for name in (b"content-length", b"connection", b"transfer-encoding",
                                                           b"inference-header-content-length"))  # fmt: skip


class ReplyError(Exception):
    """A failed query: its kind (for counting) and its words (the first of each kind is kept)."""

    def __init__(self, kind: str, message: str, framed: bool = False):
        super().__init__(message)
        self.kind = kind
        self.framed = framed  # the whole reply was read: the connection is still good


class _Status(Exception):
    """A reply's HTTP status and words, as kserve_protocol.failure_kind reads a tritonclient error."""

    def __init__(self, status: int, text: str):
        super().__init__(text)
        self.status = str(status)


def request_bytes(address: str, model: str, version: str, inputs, outputs, headers: dict[str, str]) -> bytes:
    """The whole HTTP/1.1 request of one inference, as tritonclient would encode its body."""
    import tritonclient.http as tc

    body, json_size = tc.InferenceServerClient.generate_request_body(inputs, outputs=outputs)
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"
    head = [f"POST {path} HTTP/1.1", f"Host: {address}", "Connection: keep-alive", f"Content-Length: {len(body)}"]
    if json_size is not None:
        head += ["Content-Type: application/octet-stream", f"Inference-Header-Content-Length: {json_size}"]
    else:
        head.append("Content-Type: application/json")
    head += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


class FastSender:
    """One connection's sender: `send()` returns None on success or the failure's kind; `examples` keeps the first
    message of each kind."""

    def __init__(self, address: str, request: bytes, timeout_s: float, answer_check: AnswerCheck | None = None,
                 examples: dict[str, str] | None = None):  # fmt: skip
        host, _, port = address.rpartition(":")
        self.host, self.port = host.strip("[]"), int(port)
        self.request, self.timeout_s, self.check = request, timeout_s, answer_check
        self.examples = examples if examples is not None else {}
        self.sock: socket.socket | None = None
        self.buf = bytearray(64 * 1024)
        self.view = memoryview(self.buf)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def __call__(self) -> str | None:
        return self.send()

    def send(self) -> str | None:
        deadline = time.monotonic() + self.timeout_s
        try:
            self._exchange(deadline)
            return None
        except ReplyError as err:
            if not err.framed:
                self.close()
            self.examples.setdefault(err.kind, str(err))
            return err.kind

    def _exchange(self, deadline: float) -> None:
        try:
            if self.sock is None:
                self.sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
                self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sock.settimeout(max(1e-4, deadline - time.monotonic()))
            self.sock.sendall(self.request)
            left = deadline - time.monotonic()
            if left < self.timeout_s - 1e-3:  # the send itself waited (a server slow to read): the rest is less
                if left <= 0:
                    raise TimeoutError
                self.sock.settimeout(left)
            self._read(deadline)
        except TimeoutError:
            raise ReplyError("timeout", f"no whole answer in {self.timeout_s:g} s (the request's deadline: connect, "
                             "send and receive)") from None  # fmt: skip
        except ConnectionRefusedError as err:
            raise ReplyError("unreachable", f"{self.host}:{self.port}: {err.strerror or err}") from None
        except OSError as err:
            raise ReplyError("connection lost", f"{type(err).__name__}: {err.strerror or err}") from None

    def _recv(self, into: memoryview, deadline: float, first: bool = False) -> int:
        if not first:  # the first read keeps the bound set around the send (_exchange)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            self.sock.settimeout(left)
        n = self.sock.recv_into(into)
        if n == 0:
            raise ReplyError("connection lost", "the server closed the connection before the whole reply")
        return n

    def _read(self, deadline: float) -> None:
        got = 0
        while True:
            got += self._recv(self.view[got:], deadline, got == 0)
            end = self.buf.find(b"\r\n\r\n", 0, got)
            if end >= 0:
                break
            if got == len(self.buf):
                raise ReplyError("bad reply", f"reply headers over {len(self.buf)} bytes")
        status, fields = _head(bytes(self.buf[:end]))
        length = fields.get(b"content-length")
        if length is None or not length.isdigit() or int(length) > MAX_REPLY:
            raise ReplyError("bad reply", "a reply without a usable Content-Length "
                             f"({(length or b'none').decode(errors='replace')[:40]})")  # fmt: skip
        total = end + 4 + int(length)
        if total > len(self.buf):
            self.buf.extend(bytes(total - len(self.buf)))
            self.view = memoryview(self.buf)
        while got < total:
            got += self._recv(self.view[got:total], deadline)
        if got > total:
            raise ReplyError("bad reply", "bytes after the reply's Content-Length (a pipelined or misframed reply)")
        if fields.get(b"connection", b"").lower() == b"close":
            self.close()
        body_len = total - end - 4
        if status != 200:  # counted by the kind tritonclient's same failure would get (kserve_protocol.failure_kind)
            from bench.targets.kserve_protocol import failure_kind

            text = " ".join(
                _error_text(bytes(self.buf[end + 4 : min(total, end + 4 + 4096)]).decode(errors="replace")).split()
            )
            raise ReplyError(failure_kind(_Status(status, text)), f"{status}: {text[:200]}", framed=True)
        if self.check is None:
            return
        size = fields.get(b"inference-header-content-length")
        head_len = int(size) if size and size.isdigit() and int(size) <= body_len else body_len
        try:
            header = json.loads(bytes(self.buf[end + 4 : end + 4 + head_len]))
        except ValueError as err:
            raise ReplyError(WRONG_ANSWER, f"the reply's JSON header does not parse: {err}", framed=True) from None
        wrong = self.check(header, body_len - head_len)  # a header that is not an object is the check's to say
        if wrong is not None:
            raise ReplyError(WRONG_ANSWER, wrong, framed=True)


def _head(raw: bytes) -> tuple[int, dict[bytes, bytes]]:
    """The status and the few header fields this sender reads (lower-cased), found rather than parsed line by line:
    this runs once a query."""
    eol = raw.find(b"\r\n")
    parts = raw[: eol if eol >= 0 else len(raw)].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise ReplyError("bad reply", f"not an HTTP/1.x status line: {raw[:60]!r}")
    low, fields = raw.lower(), {}
    for name, needle in FIELDS:
        i = low.find(needle)
        if i >= 0:
            j = low.find(b"\r\n", i + 2)
            fields[name] = low[i + len(needle) : j if j >= 0 else len(low)].strip()
    if fields.get(b"transfer-encoding", b"identity").lower() != b"identity":
        raise ReplyError("bad reply", "a chunked reply (this sender reads replies by Content-Length)")
    return int(parts[1]), fields


def _error_text(text: str) -> str:
    try:
        doc = json.loads(text)
    except ValueError:
        return text
    return str(doc.get("error", text)) if isinstance(doc, dict) else text


# ---------------------------------------------------------------------------------------------------- the target's side
@dataclass
class KServeSenders:
    """What a client process needs to make the target's senders (picklable: sent to each child)."""

    target: type  # the target's class (KServeTarget), by reference
    url: str
    headers: dict | None  # as the caller gave them (expanded again in the child, from the same environment)
    meta: dict
    feeds: dict
    binary: bool
    spq: int
    engine: str  # "fast" or "tritonclient"

    def factory(self):
        from bench.targets.base import TargetOptions

        target = self.target(self.url, TargetOptions(headers=self.headers))
        target.meta = self.meta
        examples: dict[str, str] = {}
        return (lambda: make_sender(target, self.feeds, self.binary, self.spq, examples, self.engine)), examples


def answer_check(target, feeds) -> AnswerCheck:
    """Every answer checked as the target's other senders check theirs (kserve_answers: the model's outputs, names,
    datatypes, shapes, binary sizes)."""
    from bench.targets.kserve_answers import check_answer

    expected = target.expected(feeds)
    return lambda header, body_len: check_answer(expected, header, body_len)


def make_sender(target, feeds, binary: bool, spq: int, examples: dict, engine: str):
    """One connection's sender: the fast one, or the target's own tritonclient one."""
    if engine != "fast":
        return target._sender(feeds, binary, spq, examples)
    opts = target.opts
    req = request_bytes(opts["address"], opts["model"], opts["version"], target._inputs(feeds, True),
                        target._outputs(True), target.headers)  # fmt: skip
    one = FastSender(opts["address"], req, opts["timeout"], answer_check(target, feeds), examples)
    if spq == 1:
        return one.send

    def send() -> str | None:
        for _ in range(spq):
            err = one.send()
            if err is not None:
                return err
        return None

    return send


def choose_engine(target, feeds, binary: bool, spq: int, workers: int) -> tuple[KServeSenders, int, str]:
    """The run's senders, its client processes, and a line saying which engine and why."""
    from bench.scenarios.procs import default_processes
    from edge_runtime.errors import UserError

    asked, processes = load_options(target.url)
    processes = processes or default_processes(workers)
    http_binary = target.opts["protocol"] == "http" and binary
    engine, why = "tritonclient", "tritonclient (gRPC or JSON tensors)"
    if asked == "fast" and not http_binary:
        raise UserError(f"target {target.url!r}: engine=fast sends binary tensors over HTTP only")
    if asked == "tritonclient":
        why = "tritonclient (asked for in the URL)"
    elif http_binary:  # the binary request already went through once (choose_tensors' probe): no query more
        engine, why = "fast", "fast (precomputed binary request bytes over a raw keep-alive socket)"
    headers = dict(target.options.headers or {})
    spec = KServeSenders(type(target), target.url, headers, target.meta, feeds, binary, spq, engine)
    return spec, processes, why
