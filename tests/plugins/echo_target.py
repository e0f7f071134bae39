"""echo://NAME?latency_us=N&fail_every=K: a target that answers itself (each query waits latency_us on this host,
every K-th fails), timed by the host as a client times a server. A test target and the README's example of a target
kind in one file: registered through the `edge_bench.targets` entry point (echo_target-0.1.dist-info beside it, found
on the path), never shipped. Never: open a socket, a port or a file."""

from __future__ import annotations

import itertools
import threading
import time
import urllib.parse

from bench.targets.base import Target, TargetInfo, TargetOptions, TargetResult
from edge_runtime.errors import UserError

OPTIONS = {"latency_us", "fail_every"}


class EchoTarget(Target):
    schemes = ("echo",)
    info = TargetInfo(kind="server", summary="echo://NAME?latency_us=N&fail_every=K for a target that answers itself",
                      takes=frozenset({"concurrency"}))  # fmt: skip

    @classmethod
    def check_url(cls, url: str) -> None:
        cls._parse(url)

    @classmethod
    def named_model(cls, url: str) -> str | None:
        return cls._parse(url)[0]  # the URL names what it serves: no model file on this host

    @classmethod
    def _parse(cls, url: str) -> tuple[str, float, int]:
        u = urllib.parse.urlsplit(url)
        q = dict(urllib.parse.parse_qsl(u.query))
        try:
            latency_us, fail_every = float(q.get("latency_us", 100)), int(q.get("fail_every", 0))
        except ValueError:
            latency_us = fail_every = -1
        bad = set(q) - OPTIONS or not 0 <= latency_us <= 1e6 or fail_every < 0
        if u.scheme not in cls.schemes or not u.netloc or bad:
            raise UserError(f"target {url!r}: {cls.schemes[0]}://NAME?latency_us=N&fail_every=K (N up to 1e6, K >= 0)")
        return u.netloc, latency_us, fail_every

    def __init__(self, url: str, options: TargetOptions | None = None):
        super().__init__(url, options)
        self.name, self.latency_us, self.fail_every = self._parse(url)
        # what a host run's record reads of a server (bench/scenarios/record.py: host_result)
        self.meta = {"server": {"name": "echo", "version": "0.1"}, "model": {"name": self.name}}
        self.opts = {"address": "this process", "model": self.name, "protocol": "echo"}
        self._stop = threading.Event()
        self._running: str | None = None

    def connect(self) -> dict:
        self.identity = {"board": f"echo {self.name}", "kind": "echo", "latency_us": self.latency_us}
        return self.identity

    def bench(self, request, *, progress=None, rid=None, sink=None) -> TargetResult:
        from bench.scenarios.engine import run_request
        from bench.scenarios.record import HostRunContext, host_result, served_model
        from edge_runtime.results import BackendSection, ServerSection

        count = [itertools.count(1)]  # next() of a count is atomic: the workers share it

        def send() -> str | None:
            n = next(count[0])
            time.sleep(self.latency_us / 1e6)
            return "status 503" if self.fail_every and n % self.fail_every == 0 else None

        def on_start() -> None:  # every K-th query of the timed run fails, whatever the warm-up sent
            count[0] = itertools.count(1)
            marks["at"] = time.time()

        rid, marks = rid or f"echo-{time.time_ns():x}", {}
        self._stop.clear()
        self._running = rid
        try:
            run = run_request(request, lambda: send, workers=request.concurrency or 1, should_stop=self._stop.is_set,
                              say=progress, on_start=on_start)  # fmt: skip
        finally:
            self._running = None
        backend = BackendSection("echo", "0.1", "this host", None, False, None, {"server": "echo"})
        context = HostRunContext(served_model(self.url, request.model, self.name, self.name, None), backend,
                                 f"echo {self.name}", f"a sleep of {self.latency_us:g} us")  # fmt: skip
        server = ServerSection({"available": False, "reason": "an echo keeps no statistics"},
                               {"available": False, "reason": "an echo has no metrics endpoint"},
                               {"rtt_ms": None, "reason": "an echo answers in this process"})  # fmt: skip
        record = host_result(request, run, context, started_at=marks.get("at"), server=server)
        got = TargetResult(rid, record.to_dict(), warnings=list(record.quality.warnings), stopped_by=run.interrupted)
        if sink is not None:
            sink(got)
        return got

    def cancel(self, rid: str) -> bool:
        if self._running != rid:
            return False
        self._stop.set()
        return True
