"""The agent target: a board running `edge-runtime agent`, reached over a serial line or TCP. The board runs each bench
itself, on its own pinned CPUs (the host never times inferences across the link); this target uploads the model by
hash, sends the BenchRequest, waits with the board's progress, and collects the result with the link's statistics.

A connection that breaks (cable pulled, agent restarted, host restarted) is opened again until `reconnect_for`
seconds have passed, and the same request id is asked again: the agent answers from its outbox or the run under
way, so a result arrives once and nothing runs twice. A result is acknowledged only after `sink` has kept it.
"""

from __future__ import annotations

import os
import time
import zlib
from collections.abc import Callable
from dataclasses import replace

from bench.targets.base import Progress, Target, TargetError, TargetInfo, TargetOptions, TargetResult, board_lines
from bench.targets.registry import BOARD_SCHEMES
from bench.transports import StreamLost, bare, named
from bench.transports.connection import Connection, ConnectRefused, LinkLost, RemoteError, new_request_id
from edge_runtime.errors import UserError

CHUNK = 256 * 1024
CHUNKS_IN_FLIGHT = 4
AgentResult = TargetResult  # the name the host tests know it by


def _merge(totals: dict, st: dict) -> None:
    """A connection's link statistics into the totals: counts add up, times (`..._ms`) are the latest measured."""
    for k, v in st.items():
        if k.endswith("_ms"):
            totals[k] = v if v is not None else totals.get(k)
        else:
            totals[k] = totals.get(k, 0) + (v or 0)


class AgentTarget(Target):
    schemes = BOARD_SCHEMES
    info = TargetInfo(
        kind="board",
        summary="tcp://HOST:PORT, serial:///dev/ttyUSB0?baud=N, a device path, socket://, rfc2217:// or loop:// for a "
        "board's agent",
        thermal=True,
        takes=frozenset({"token", "reconnect_for", "cpus", "threads", "backend", "device", "ops"}),
        recovers=True,
    )

    def __init__(self, url: str, options: TargetOptions | None = None, *, dead_after: float = 10.0,
                 max_payload: int = 64 * 1024):  # fmt: skip
        super().__init__(url, options)
        self.token = self.options.token
        self.reconnect_for = self.options.reconnect_for
        self.connect_timeout = self.options.connect_timeout
        self.dead_after = dead_after
        self.max_payload = max_payload
        self.log = self.options.log
        self.conn: Connection | None = None
        self.reconnects = 0
        self._totals: dict = {}
        self._asked: dict[str, dict] = {}  # request id -> the bench request sent under it

    @classmethod
    def check_url(cls, url: str) -> None:
        from bench.transports import parse_endpoint

        parse_endpoint(url, "target", listen=False)

    # ------------------------------------------------------------------------------------------------ connection
    def connect(self) -> dict:
        conn = Connection(
            self.url,
            token=self.token,
            max_payload=self.max_payload,
            connect_timeout=self.connect_timeout,
            dead_after=self.dead_after,
        )
        try:
            self.identity = conn.open()
        except (StreamLost, LinkLost) as err:
            conn.close()
            raise TargetError(named(self.url, str(err)), "unreachable") from None
        except RemoteError as err:
            conn.close()
            if err.kind == "auth":  # its own words, not "unreachable" (issue 25): the agent is there and said no
                raise TargetError(token_refused(self.url, err.message), "auth", hint=self._token_hint()) from None
            raise TargetError(f"{self.url}: {err.message}", err.kind) from None
        except ConnectRefused as err:
            raise TargetError(named(self.url, str(err)), "refused") from None
        self.conn = conn
        return self.identity

    def _token_hint(self) -> str:
        if self.token is None:
            return "none was given; --token-file FILE, or a campaign target's token_file, names the agent's secret"
        return "the secret given is not the one the agent was started with"

    def close(self) -> None:
        if self.conn is not None:
            self._add_stats(self.conn.stats())
            self.conn.close()
            self.conn = None

    def link_stats(self) -> dict:
        """Frames, bytes, retransmissions, CRC failures, resyncs over every connection so far; the link's own round
        trip and the board's time to answer (`board_busy_ms`) of the latest connection that measured them."""
        out = dict(self._totals)
        if self.conn is not None:
            _merge(out, self.conn.stats())
        out["reconnects"] = self.reconnects
        return out

    def _add_stats(self, st: dict) -> None:
        _merge(self._totals, st)

    def _ensure(self, deadline: float) -> Connection:
        delay = 0.2
        while True:
            if self.conn is not None and self.conn.alive:
                return self.conn
            if self.conn is not None:
                self.close()
                self.reconnects += 1
            try:
                self.connect()
                if self.reconnects:
                    self.log(f"{self.url}: connected again")
                return self.conn
            except TargetError as err:
                if err.kind != "unreachable" or time.monotonic() + delay > deadline:
                    raise
                self.log(f"{named(self.url, str(err))}; trying again")
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    def call(self, op: str, args: dict | None = None, blob: bytes = b"", *, rid: str | None = None,
             progress=None, timeout: float | None = None, full: bool = False):  # fmt: skip
        """One request, asked again under the same id over a new connection when the link breaks."""
        rid = rid or new_request_id()
        deadline = time.monotonic() + self.reconnect_for
        while True:
            conn = self._ensure(deadline)
            try:
                return conn.request(op, args, blob, rid=rid, progress=progress, timeout=timeout, full=full)
            except LinkLost as err:
                if time.monotonic() > deadline:
                    raise TargetError(named(self.url, str(err))) from None
                deadline = time.monotonic() + self.reconnect_for  # the link was up: the budget starts again
                self.log(f"{self.url}: link lost during {op} ({bare(self.url, str(err))}); reconnecting")
            except RemoteError as err:
                raise TargetError(f"{self.url}: {op}: {err.message}", err.kind) from None
            except TimeoutError as err:
                raise TargetError(named(self.url, str(err)), "timeout") from None

    # ------------------------------------------------------------------------------------------------ requests
    def board_info(self) -> dict:
        """`edge-runtime info` of the board, as its agent answers it."""
        return self.call("info", timeout=180)

    def describe(self) -> dict:
        ident = self.connect()
        for _ in range(5):  # a few round trips: the link's quality is measured on more than one frame
            self.call("ping")
        return {**ident, "link": self.link_stats()}

    @classmethod
    def describe_text(cls, r: dict) -> list[str]:
        link = r["link"]
        rtt = f"{link['rtt_ms']:.1f} ms" if link.get("rtt_ms") is not None else "?"
        return [
            f"{r['url']}  reachable  (agent {r.get('agent')}, protocol {r.get('protocol')})",
            f"  board     {r.get('board') or 'unknown'}"
            + (f" (profile {r['board_profile']})" if r.get("board_profile") else "")
            + f", {r.get('hostname', '?')}, kernel {r.get('kernel') or '?'}",
            *board_lines(r),
            f"  link      rtt {rtt}, {link.get('retransmissions', 0)} retransmitted{after_stalls(link)}, "
            f"{link.get('crc_errors', 0)} CRC "
            f"errors, {link.get('resyncs', 0)} resyncs; frames up to {r.get('max_payload', '?')} bytes",
            f"  models    {_size(r.get('models_bytes', 0))} kept, of {_size(r.get('models_max_bytes', 0))}",
        ]

    def upload(self, model: str, progress: Callable[[str], None] | None = None) -> tuple[str, str]:
        """Put the model's files on the board unless it has them (same sha256); resumes a partial upload.
        Returns (sha256 of the model file, its name on the board)."""
        from edge_runtime.runtime.model import model_files, sha256_of_files

        paths = [str(p) for _what, p in model_files(model)]
        for p in paths:
            if not os.path.isfile(p):
                raise UserError(f"model {model!r}: {p!r} is missing (a model's files travel together)")
            if os.path.dirname(os.path.relpath(p, os.path.dirname(str(model)))):
                raise UserError(
                    f"model {model!r}: external data {p!r} is in a subdirectory; the agent keeps flat files"
                )
        files = []

        def each(p, own: str) -> None:
            files.append({"name": p.name, "sha256": own, "size": os.path.getsize(p), "path": str(p)})

        sha = sha256_of_files(paths, each=each)  # the model's hash, as the board computes it: its files in order
        wire_files = [{k: f[k] for k in ("name", "sha256", "size")} for f in files]
        status = self.call("model_status", {"sha256": sha, "files": wire_files})
        if status["complete"]:
            return sha, files[0]["name"]
        total = sum(f["size"] for f in files)
        sent = sum(h["have"] for h in status["files"])
        for f, held in zip(files, status["files"], strict=True):
            self._upload_file(sha, f, held["have"], wire_files, progress, sent, total)
            sent += f["size"] - held["have"]
        return sha, files[0]["name"]

    def _upload_file(self, sha, f, have, wire_files, progress, sent_before, total) -> None:
        deadline_budget = self.reconnect_for
        with open(f["path"], "rb") as fh:
            while have < f["size"]:
                conn = self._ensure(time.monotonic() + deadline_budget)
                try:
                    have = self._send_chunks(conn, sha, f, fh, have, progress, sent_before, total)
                except LinkLost as err:
                    self.log(f"{self.url}: link lost during upload ({bare(self.url, str(err))}); resuming")
                    st = self.call("model_status", {"sha256": sha, "files": wire_files})
                    have = next(h["have"] for h in st["files"] if h["name"] == f["name"])
                except RemoteError as err:
                    raise TargetError(f"{self.url}: upload {f['name']}: {err.message}", err.kind) from None
        self.call(
            "upload_end",
            {"sha256": sha, "name": f["name"], "file_sha256": f["sha256"], "size": f["size"], "files": wire_files},
        )

    def _send_chunks(self, conn, sha, f, fh, have, progress, sent_before, total) -> int:
        """Chunks from `have` on, CHUNKS_IN_FLIGHT at a time; returns the bytes the board holds."""
        inflight: list[tuple[str, int]] = []  # (request id, end of its chunk)
        offset = have
        wait_s = max(60.0, self.dead_after * 3)
        while have < f["size"]:
            while offset < f["size"] and len(inflight) < CHUNKS_IN_FLIGHT:
                fh.seek(offset)
                data = fh.read(CHUNK)
                args = {
                    "sha256": sha,
                    "name": f["name"],
                    "offset": offset,
                    "size": f["size"],
                    "crc32": zlib.crc32(data),
                }
                inflight.append((conn.send_request("upload_chunk", args, data), offset + len(data)))
                offset += len(data)
            rid, end = inflight.pop(0)
            have = int(conn.wait(rid, timeout=wait_s)["have"])
            if progress is not None:
                progress(f"upload {f['name']}: {100 * (sent_before + have) / total:.0f}%")
            if have < end:  # the board holds less than it should (an upload resumed elsewhere): resend from there
                for rid, _ in inflight:
                    have = int(conn.wait(rid, timeout=wait_s)["have"])
                inflight, offset = [], have
        return have

    def bench(self, request, *, progress: Progress | None = None, rid: str | None = None,
              sink: Callable[[TargetResult], None] | None = None) -> TargetResult:  # fmt: skip
        """Upload the model, run `request` (a BenchRequest whose `model` is a path on this host) on the board, and
        return its result. `sink(result)` keeps it before the board is told it may forget it."""
        request.validate()
        sha, name = self.upload(request.model, progress)
        if request.model_sha256 and request.model_sha256.lower() != sha:
            raise UserError(f"model {request.model!r}: sha256 {sha} is not the request's {request.model_sha256}")
        wire = replace(request, model=name, model_sha256=sha).to_dict()
        rid = rid or new_request_id("bench-")
        self._asked[rid] = wire
        try:
            answer = self.call("bench", {"request": wire}, rid=rid, progress=progress, full=True)
        except TargetError as err:
            self._forget(rid, err)
            raise
        return self._keep(rid, answer, sink)

    def _forget(self, rid: str, err: TargetError) -> None:
        """A bench answered with an error: the board keeps that answer too; acknowledge it (the error is raised to
        the caller), unless the link itself failed (then the answer waits in the outbox for collect())."""
        if err.kind in ("unreachable", "timeout", "refused"):
            return
        try:
            self.ack([rid])
        except TargetError:
            pass
        self._asked.pop(rid, None)

    def load_check(self, request) -> dict:
        """Load the request's model on the board (its backend, device, delegate, threads, CPUs) and run it once, in
        a child there: inputs, outputs and what ran (backend, device, fallback). The answer is acknowledged."""
        request.validate()
        sha, name = self.upload(request.model)
        wire = replace(request, model=name, model_sha256=sha).to_dict()
        rid = new_request_id("load-")
        try:
            result = self.call("load_check", {"request": wire}, rid=rid)
        finally:
            try:
                self.ack([rid])
            except TargetError:
                pass  # the answer waits in the outbox; collect() takes it later
        return result

    def cancel(self, rid: str) -> bool:
        """Ask the board to stop request `rid`: a bench ends at its next chunk and answers with what it measured
        (marked aborted, kind interrupted). True when it was queued or running there."""
        return bool(self.call("cancel", {"id": rid}).get("cancelled"))

    def recover(self, rid: str, sink: Callable[[TargetResult], None] | None = None,
                progress: Progress | None = None) -> TargetResult | None:  # fmt: skip
        """The board stops the run asked under `rid` at its next chunk and sends what it measured; None when the
        interrupt came before the bench was asked (uploading, connecting)."""
        if rid not in self._asked:
            return None
        if progress is not None:
            progress("asking the board to stop and send what it measured")
        self.cancel(rid)
        return self.answer_of(rid, sink=sink)

    def answer_of(self, rid: str, sink: Callable[[TargetResult], None] | None = None) -> TargetResult:
        """The answer of a bench asked before under `rid` (after a cancel, or when its caller went away): asked
        again under the same id, which the board answers from its outbox or the run under way, never by a rerun."""
        if rid not in self._asked:
            raise TargetError(f"{self.url}: no bench was asked under {rid}", "unknown")
        try:
            answer = self.call("bench", {"request": self._asked[rid]}, rid=rid, full=True)
        except TargetError as err:
            self._forget(rid, err)
            raise
        return self._keep(rid, answer, sink)

    def _keep(self, rid: str, answer: dict, sink) -> TargetResult:
        got = TargetResult(
            rid,
            answer["result"],
            warnings=list(answer.get("warnings") or []),
            rerun_after_restart=bool(answer.get("rerun_after_restart")),
            link=self.link_stats(),
        )
        if sink is not None:
            sink(got)
        self.ack([rid])
        self._asked.pop(rid, None)
        return got

    def ack(self, ids: list[str]) -> None:
        self.call("ack", {"ids": ids})

    def pending(self) -> list[dict]:
        return self.call("results")["pending"]

    def collect(self, sink: Callable[[TargetResult], None]) -> list[str]:
        """Every answer waiting in the board's outbox (a host that restarted picks up what it missed): each given
        to `sink`, then acknowledged. Returns the request ids collected."""
        done = []
        for item in self.pending():
            got = self.call("fetch", {"id": item["id"]})
            if got.get("state") != "done":
                continue
            answer = got["answer"]
            if answer.get("ok"):
                sink(TargetResult(item["id"], answer["result"], list(answer.get("warnings") or []),
                                 bool(answer.get("rerun_after_restart")), self.link_stats()))  # fmt: skip
            self.ack([item["id"]])
            done.append(item["id"])
        return done


def token_refused(url: str, why: str) -> str:
    """The one line for an agent that refused the host's token (or its lack of one): `edge-bench targets` shows the
    part after the prefix beside the URL."""
    return f"agent at {url} refused the token: {why}"


def after_stalls(link: dict) -> str:
    """How many of the timeouts were a stall (the first send's ACK came late), not a loss: a busy host or board
    resends on a clean line, a bad cable resends on a busy one, and the bench engineer wants to know which."""
    n = link.get("spurious_timeouts") or 0
    return f" ({n} of {link.get('timeouts', 0)} timeouts a stall, not a loss)" if n else ""


def _size(n: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"
