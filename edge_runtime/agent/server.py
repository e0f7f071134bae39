"""The agent's request handling: one `Agent` owns the link to the host, the state directory and the jobs. The I/O loop
(endpoint.py) feeds it bytes and writes what it gives back; worker threads run jobs and answer through the same link.
Here: the dispatch, the answers kept, the job queue and the workers; what it answers itself (op_<name>) is in
handlers.py.

Requests (args in brackets; every answer is a `response` with the request's id):

    hello {mac}                       identity: board, CPUs, backends and versions; with a token, `mac` must be
                                      HMAC-SHA256(token, the nonce of this connection's ACCEPT) first
    ping                              nothing: the cheapest round trip
    info | thermal | tune_show {cpus} `edge-runtime info|thermal|tune show --json`, run in a child
    model_status {sha256, files}      what the board has of a model (complete, or bytes held per file)
    upload_chunk {sha256, name, offset, size, crc32} + bytes
    upload_end {sha256, name, file_sha256, size, files}
    load_check {request}              load and run once in a child: inputs, outputs, what ran
    bench {request}                   a BenchRequest, run in a child on the board's pinned CPUs; the answer waits in
                                      the outbox until acknowledged
    results | fetch {id} | ack {ids} | cancel {id}

Never stops on a request: a bad one is answered with an error (kind + one line), a model that crashes takes its
child, a host that vanishes leaves its answers in the outbox. The same request id is never run twice: a repeat is
answered from memory or the outbox, or joins the run under way. It stops for one thing only: its state directory
deleted or replaced under it (should_stop; every request is refused from then on).
"""

from __future__ import annotations

import collections
import queue
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field

from edge_runtime.agent.handlers import MAX_CHUNK, Handlers
from edge_runtime.agent.jobs import Job, board_request, run_child, run_command, stored_message
from edge_runtime.agent.room import NO_SPACE
from edge_runtime.agent.state import StateDir
from edge_runtime.errors import EdgeRuntimeError, RequestError
from edge_runtime.measure.child import board_identity
from edge_runtime.wire import messages as wm
from edge_runtime.wire.link import Connected, Down, Link, Message, ProtocolError

ANSWERS_KEPT = 256  # quick answers kept in memory for repeated request ids
MAX_REQUEST = MAX_CHUNK + (64 << 10)  # the largest message the agent takes: a chunk and its header
MAX_UNAUTHENTICATED = 4096  # before the token is proven: a hello, nothing larger
AUTH_GRACE_S = 5.0  # a host that has not proven its token by then is dropped (it must not hold the agent)
MAX_BACKLOG = 128 << 20  # answers waiting for a host that does not take them: the session is dropped beyond this
ERRORS_PER_S = 20
STATE_CHECK_S = 0.25  # how often the I/O loop checks that the state directory is still the one locked
INLINE = {"hello", "ping", "model_status", "upload_chunk", "results", "fetch", "ack", "cancel"}
COMMANDS = {"info", "thermal", "tune_show", "upload_end"}  # slow: a worker thread, so the link keeps answering
JOBS = {"bench", "load_check"}


def _is_ping(message: bytes) -> bool:
    """A `ping` request (a few dozen bytes; a guess is enough: it only decides whether its ACK leaves first)."""
    return len(message) < 256 and b'"op":"ping"' in message


@dataclass
class Agent(Handlers):
    state: StateDir
    token: bytes | None = None
    max_payload: int = 64 * 1024
    log: object = field(default=None)
    line_rate: float | None = None  # bytes/s of a serial line (from its baud rate)

    def __post_init__(self) -> None:
        self.link = Link(role="agent", max_payload=self.max_payload, max_message=MAX_REQUEST, line_rate=self.line_rate)
        self.lock = threading.RLock()
        self.authed = self.token is None
        self.answers: collections.OrderedDict[str, wm.Msg] = collections.OrderedDict()
        self.jobs: queue.Queue[Job | None] = queue.Queue()
        self.active: dict[str, Job] = {}  # queued or running model jobs, by request id
        self.commands: queue.Queue[tuple[str, str, dict] | None] = queue.Queue()
        self.commands_pending: set[str] = set()
        self.identity: dict = {}
        self._connected_at = 0.0
        self._now = 0.0  # the I/O loop's clock, as last given to feed/poll
        self._refusals = 0
        self.stopping = False
        self.lost: str | None = None  # why the state directory is no longer the one locked: the agent must stop
        self._state_checked = 0.0
        self._error_window, self._errors_in_window = 0.0, 0
        for rid in self.state.interrupted():
            self._log(f"request {rid} was cut short by a restart: it runs again when the host asks for it")
        self._threads = [
            threading.Thread(target=self._job_worker, name="agent-jobs", daemon=True),
            threading.Thread(target=self._command_worker, name="agent-commands", daemon=True),
        ]
        for t in self._threads:
            t.start()

    # ----------------------------------------------------------------------------------------------- I/O side
    def feed(self, data: bytes, now: float, acks=None) -> None:
        """Bytes from the host. With `acks` (the stream's write), what the link answers at once (its ACKs) is written
        before a request is handled: the host's round trip samples are then the link's, not the time this board took
        over the request (issue 22: 40 ms "link rtt" on loopback during a bench). A ping is answered as fast as its
        ACK would leave, so both go in one write."""
        with self.lock:
            self._now = now
            events = []
            try:
                self.link.receive(data, now)
                events = self.link.events()
            except Exception as err:  # noqa: BLE001 - nothing a host sends may stop the agent
                self._internal(err, now)
            if acks is not None and any(isinstance(e, Message) and not _is_ping(e.data) for e in events):
                out = self.link.outgoing()
                if out:
                    acks(out)  # outside the guard: a stream that fails is the I/O loop's to handle
            try:
                self._events(now, events)
            except Exception as err:  # noqa: BLE001
                self._internal(err, now)

    def poll(self, now: float) -> None:
        with self.lock:
            self._now = now
            try:
                self.link.poll(now)
                self._events(now)
                if self.link.is_open and not self.authed and now - self._connected_at > AUTH_GRACE_S:
                    self._end(f"the host did not prove its token within {AUTH_GRACE_S:g} s")
                if self.link.backlog > MAX_BACKLOG:
                    self._end(f"the host does not take its answers ({self.link.backlog:,} bytes waiting)")
            except Exception as err:  # noqa: BLE001
                self._internal(err, now)

    def _internal(self, err: Exception, now: float) -> None:
        line = f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"
        self._log(f"internal error, going on: {line}")
        try:
            self._error("internal", line, now)
        except Exception:  # noqa: BLE001 - the report itself failed: the log line above is what is left
            pass

    def _end(self, why: str) -> None:
        self._log(f"session ended: {why}")
        self.link.end_session()

    def outgoing(self) -> bytes:
        with self.lock:
            return self.link.outgoing()

    def session_alive(self) -> bool:
        """A host holds the agent: connected, and it proved its token (or still has the few seconds to)."""
        with self.lock:
            if self.link.state not in ("open", "connecting"):
                return False
            return self.authed or self._now - self._connected_at <= AUTH_GRACE_S

    def drop_session(self, why: str) -> None:
        """The stream closed under the link (TCP EOF, serial port gone): the next CONNECT starts anew."""
        with self.lock:
            if self.link.state == "open":
                self._log(f"host gone ({why}); answers stay in the outbox")
            self.link.end_session()

    def should_stop(self) -> bool:
        """For the I/O loop, at every tick: True once the state directory is gone (checked every STATE_CHECK_S)."""
        now = time.monotonic()
        if self.lost is None and now - self._state_checked >= STATE_CHECK_S:
            self._state_checked = now
            self._check_state()
        return self.lost is not None

    def _check_state(self) -> bool:
        """Is the state directory still the one this agent locked? Said once in the log when it is not."""
        if self.lost is None:
            why = self.state.lost()
            if why is not None:
                self.lost = why
                self._log(f"{why}: stopping (running jobs killed; the results it kept there are gone)")
        return self.lost is None

    def close(self, grace_s: float = 10.0) -> None:
        """Stop: running jobs are asked to stop (SIGINT: a bench keeps what it measured), then killed after
        `grace_s` (0: at once, when there is nowhere left to keep what they would answer)."""
        self.stopping = True
        with self.lock:
            procs = [j.proc for j in self.active.values() if j.proc is not None and j.proc.poll() is None]
        for proc in procs:
            proc.send_signal(signal.SIGINT if grace_s > 0 else signal.SIGKILL)
        deadline = time.monotonic() + grace_s
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
        self.jobs.put(None)
        self.commands.put(None)

    def _events(self, now: float, events: list | None = None) -> None:
        for ev in self.link.events() if events is None else events:
            if isinstance(ev, Connected):
                if ev.fresh:
                    self.authed = self.token is None
                    self._connected_at = now
                    self._refusals = 0
                    self._log(f"host connected (link {ev.link:08x})")
            elif isinstance(ev, Message):
                self._on_message(ev.data, now)
            elif isinstance(ev, ProtocolError):
                self._error(ev.kind, ev.detail, now)
            elif isinstance(ev, Down):
                self._log(f"host gone ({ev.reason}); answers stay in the outbox")

    def _send(self, msg: wm.Msg, now: float | None = None) -> None:
        with self.lock:
            if self.link.is_open:
                self.link.send(wm.encode(msg), time.monotonic() if now is None else now)

    def _error(self, kind: str, detail: str, now: float) -> None:
        """An `error` message for what could not be taken: at most ERRORS_PER_S a second, so a stream of garbage
        cannot make the agent flood the line back."""
        if now - self._error_window >= 1.0:
            self._error_window, self._errors_in_window = now, 0
        self._errors_in_window += 1
        if self._errors_in_window <= ERRORS_PER_S:
            self._send(wm.failed(None, None, kind, detail), now)

    def _log(self, text: str) -> None:
        if self.log is not None:
            self.log(text)

    # ----------------------------------------------------------------------------------------------- requests
    def _on_message(self, data: bytes, now: float) -> None:
        if not self.authed and len(data) > MAX_UNAUTHENTICATED:
            self._end(f"a message of {len(data):,} bytes before the token was proven")
            return
        try:
            msg = wm.decode(data)
        except wm.MessageError as err:
            self._error("bad-message", str(err), now)
            return
        if msg.type != "request":
            self._error("bad-message", f"an agent takes requests, not {msg.type!r}", now)
            return
        rid, op, args = msg.get("id"), msg.get("op"), msg.get("args")
        if not isinstance(rid, str) or not wm.REQUEST_ID.fullmatch(rid):
            self._error("bad-request", f"request id {str(rid)[:80]!r}: 1-64 of [A-Za-z0-9._-]", now)
            return
        if not isinstance(op, str) or not isinstance(args, dict):
            self._send(
                wm.failed(rid, str(op)[:40], "bad-request", "a request needs `op` (a name) and `args` (an object)")
            )
            return
        if not self.authed and op != "hello":
            self._refusals += 1
            if self._refusals > 3:
                self._end("requests without the token")
            else:
                self._send(wm.failed(rid, op, "auth", "say hello with the token first"), now)
            return
        if rid in self.answers:  # asked again (the host reconnected before the answer reached it)
            self._send(self.answers[rid], now)
            return
        if rid in self.commands_pending:  # asked again while it runs: one answer comes, when it is done
            return
        if not self._check_state():  # before each request: nothing runs in a directory that is not the one locked
            self._send(wm.failed(rid, op, "state-lost", f"{self.lost}: the agent is stopping"), now)
            return
        try:
            if op in INLINE:
                self._answer(rid, op, getattr(self, "op_" + op)(args, msg.blob), now)
            elif op in COMMANDS:
                self.commands_pending.add(rid)
                self.commands.put((rid, op, args))
            elif op in JOBS:
                self._submit(rid, op, args, now)
            else:
                known = ", ".join(sorted(INLINE | COMMANDS | JOBS))
                raise RequestError(f"unknown request {op[:40]!r} (this agent knows: {known})", "unknown-op")
        except RequestError as err:
            self._answer(rid, op, None, now, error=(err.kind, err.one_line()))
        except EdgeRuntimeError as err:
            self._answer(rid, op, None, now, error=("user-error", err.one_line()))
        except OSError as err:
            self._answer(rid, op, None, now, error=self._os_error(err))

    def _os_error(self, err: OSError) -> tuple[str, str]:
        """An answer's error for what the system refused: a full disk is named as such (kind no-space)."""
        if err.errno in NO_SPACE:
            return "no-space", f"no space left on the disk of the agent's state dir {self.state.root!r}"
        return "io", f"{err.strerror or err}"

    def _answer(self, rid: str, op: str, result, now=None, error: tuple[str, str] | None = None) -> None:
        msg = wm.failed(rid, op, *error) if error else wm.ok(rid, op, result)
        if op not in ("upload_chunk", "fetch", "hello"):  # cheap to redo; hello is checked again every time
            self.answers[rid] = msg
            while len(self.answers) > ANSWERS_KEPT:
                self.answers.popitem(last=False)
        self._send(msg, now)

    # ----------------------------------------------------------------------------------------------- jobs
    def _submit(self, rid: str, op: str, args: dict, now: float) -> None:
        stored = self.state.answer(rid)
        if stored is not None:  # answered before (perhaps before a restart): the same answer, never a second run
            self._send(stored_message(stored), now)
            return
        with self.lock:
            if rid in self.active:
                self._send(wm.progress(rid, "already queued or running"), now)
                return
            request = board_request(self.state, args.get("request"))
            job = Job(rid, op, {"request": request}, rerun=rid in self.state.interrupted())
            self.state.mark_running(rid, op, args)  # raises OSError (a full disk) before the job is counted
            self.active[rid] = job
            self.state.in_use.add(str(request["model_sha256"]).lower())
        self.jobs.put(job)
        ahead = self.jobs.qsize() - 1
        self._send(wm.progress(rid, f"queued behind {ahead} job(s)" if ahead > 0 else "starting"), now)

    def _job_worker(self) -> None:
        """One model job at a time (the board's CPUs are the thing measured). Whatever a job does, the worker goes on:
        each answer, even an internal error, is kept in the outbox until the host acknowledges it."""
        while True:
            job = self.jobs.get()
            if job is None:
                return
            try:
                if job.cancelled:
                    answer = {"ok": False, "error": {"kind": "cancelled", "message": "cancelled before it started"}}
                else:
                    answer = run_child(job, self.lock, self._send)
            except Exception as err:  # noqa: BLE001 - reported as the job's answer
                answer = {"ok": False, "error": {"kind": "internal", "message": f"{type(err).__name__}: {err}"}}
            if job.rerun:
                answer["rerun_after_restart"] = True
            try:
                self.state.put_answer(job.rid, job.op, answer)
            except OSError as err:
                self._log(f"cannot keep the answer of {job.rid} ({err.strerror}): sent once, not kept")
                self.state.clear_running(job.rid)
            with self.lock:
                self.active.pop(job.rid, None)
                self.state.in_use = {str(j.args["request"]["model_sha256"]).lower() for j in self.active.values()}
                self._send(stored_message({"id": job.rid, "op": job.op, **answer}))

    def _command_worker(self) -> None:
        while True:
            item = self.commands.get()
            if item is None:
                return
            rid, op, args = item
            try:
                if op == "upload_end":
                    result, error = self.op_upload_end(args, b""), None
                else:
                    result, error = run_command(op, args), None
            except RequestError as err:
                result, error = None, (err.kind, err.one_line())
            except EdgeRuntimeError as err:
                result, error = None, ("user-error", err.one_line())
            except Exception as err:  # noqa: BLE001 - an OSError (no memory, no fd) is an answer, not a dead worker
                result, error = None, ("internal", f"{type(err).__name__}: {' '.join(str(err).split())[:300]}")
                if isinstance(err, OSError) and err.errno in NO_SPACE:
                    error = self._os_error(err)
            with self.lock:
                self.commands_pending.discard(rid)
                self._answer(rid, op, result, error=error)

    def learn_identity(self) -> None:
        """Who this board is, for every hello: from `edge-runtime info` (in a child, see run_command)."""
        try:
            self.identity = board_identity(run_command("info", {}))
        except RequestError as err:
            self._log(f"info failed: {err.one_line()}")
            self.identity = board_identity({})
