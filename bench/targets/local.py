"""The local target (`local:`, `local:?backend=openvino&cpus=1&threads=1&device=CPU`): this machine, measured by
the same engine and the same child process the agent uses for a board (`edge_runtime.measure.child`), so a local
result and a board's mean the same thing. The URL's options fill what the bench request leaves unset. On a local
NVIDIA GPU (`device=cuda` or `tensorrt`, ONNX Runtime's providers) NVML is sampled during the run (`gpu` section);
without one, one line before anything runs."""

from __future__ import annotations

import threading
import urllib.parse
from collections.abc import Mapping
from dataclasses import replace

from bench.metrics.nvml import GPU_DEVICES
from bench.targets.base import Target, TargetError, TargetInfo, TargetOptions, TargetResult, board_lines
from bench.transports.connection import new_request_id
from edge_runtime.errors import Interrupted, UserError

OPTIONS = {"backend", "device", "cpus", "threads"}


def parse_local(url: str) -> dict:
    u = urllib.parse.urlsplit(url)
    if u.scheme != "local" or u.netloc or u.path not in ("", "/"):
        raise UserError(f"target {url!r}: expected local: or local:?backend=NAME&cpus=LIST")
    opts = {}
    for key, values in urllib.parse.parse_qs(u.query, keep_blank_values=True).items():
        if key not in OPTIONS:
            raise UserError(f"target {url!r}: unknown option {key!r} (known: {', '.join(sorted(OPTIONS))})")
        opts[key] = values[-1]
    if "cpus" in opts:
        from edge_runtime.system.cpulist import parse_cpu_list

        try:
            opts["cpus"] = tuple(parse_cpu_list(opts["cpus"]))
        except ValueError as err:
            raise UserError(f"target {url!r}: cpus {opts['cpus']!r}: {err}") from None
    if "threads" in opts:
        if not opts["threads"].isdigit() or not 1 <= int(opts["threads"]) <= 1024:
            raise UserError(f"target {url!r}: threads {opts['threads']!r}: a whole number 1 to 1024")
        opts["threads"] = int(opts["threads"])
    return opts


class LocalTarget(Target):
    schemes = ("local",)
    info = TargetInfo(
        kind="board",
        summary="local:?backend=NAME&cpus=LIST&threads=N&device=D for this machine",
        thermal=True,
        takes=frozenset({"cpus", "threads", "backend", "device"}),
    )

    def __init__(self, url: str = "local:", options: TargetOptions | None = None):
        super().__init__(url, options)
        self.fill = parse_local(url)  # what the request leaves unset
        self._running = None

    @classmethod
    def check_url(cls, url: str) -> None:
        parse_local(url)

    @classmethod
    def preflight(cls, url: str, *, backend: str | None = None, cpus: tuple[int, ...] | None = None,
                  models: Mapping[str, str] | None = None) -> None:  # fmt: skip
        """A backend this machine lacks or that cannot read a model, or CPUs it lacks: refused before any run."""
        from edge_runtime.runtime import backends
        from edge_runtime.system.cpulist import format_cpu_list
        from edge_runtime.system.root import SystemRoot

        opts = parse_local(url)
        backend = backend or opts.get("backend")
        if backend is not None and backend not in backends.names():
            raise UserError(f"backend {backend!r}: not one this machine has (backends: {', '.join(backends.names())})")
        for name, fmt in (models or {}).items():
            if backend is not None and fmt not in backends.get(backend).formats:
                raise UserError(f"backend {backend!r} cannot read {name} ({fmt})")
        cpus = cpus or opts.get("cpus")
        online = SystemRoot("/").online_cpus()
        if cpus and online and set(cpus) - set(online):
            raise UserError(f"cpus {format_cpu_list(cpus)}: this machine has CPUs {format_cpu_list(online)}")

    def connect(self) -> dict:
        from edge_runtime.measure.child import ChildError, board_info

        try:
            self.identity = board_info()
        except ChildError as err:
            raise TargetError(f"{self.url}: {err.one_line()}", "internal") from None
        return self.identity

    def describe(self) -> dict:
        return {"kind": "local", **self.connect()}  # this machine, as the local: target runs it (no link)

    @classmethod
    def describe_text(cls, r: dict) -> list[str]:
        return [
            f"{r['url']}  this machine  ({r.get('hostname', '?')}, kernel {r.get('kernel') or '?'}"
            + (f", profile {r['board_profile']}" if r.get("board_profile") else "") + ")",
            *board_lines(r),
        ]

    def bench(self, request, *, progress=None, rid: str | None = None, sink=None) -> TargetResult:
        """Run `request` here, with the URL's options where the request leaves them unset, in a child process."""
        from edge_runtime.measure.child import ChildJob, cancel, run_in_child

        fill = {k: v for k, v in self.fill.items() if getattr(request, k) is None}
        request = replace(request, **fill).validate()
        gpu = None
        if (request.device or "").lower() in GPU_DEVICES:  # a local NVIDIA GPU: NVML says what it did meanwhile
            from bench.metrics.nvml import GpuSampler

            try:
                gpu = GpuSampler()
            except UserError as err:
                raise TargetError(f"{self.url}: {err.one_line()}", "user-error") from None
            gpu.start()
        rid = rid or new_request_id("local-")
        job = ChildJob("bench", request.to_dict())
        self._running = (rid, job)

        box: dict = {}
        finished = threading.Event()

        def work() -> None:
            try:
                hear = None if progress is None else lambda text: progress(text[:500])  # as the agent sends it
                box["answer"] = run_in_child(job, on_progress=hear, lock=threading.Lock())
            finally:
                finished.set()

        threading.Thread(target=work, daemon=True).start()
        stopped_by = None
        try:
            # An Event, not Thread.join: a join interrupted by Ctrl-C can leave the thread looking finished (3.11).
            while not finished.is_set():
                try:
                    finished.wait(0.2)
                except KeyboardInterrupt as err:  # Ctrl-C, SIGTERM: the run stops and keeps what it measured
                    stopped_by = getattr(err, "signum", None) or 2
                    job.cancelled = True
                    cancel(job)
        finally:
            self._running = None
            if gpu is not None:
                gpu.mark_end()
                gpu.stop()
        answer = box.get("answer") or {"ok": False, "error": {"kind": "internal", "message": "no answer"}}
        if not answer.get("ok"):
            err = answer.get("error") or {}
            if stopped_by is not None:
                raise Interrupted(stopped_by)
            raise TargetError(f"{self.url}: bench: {err.get('message', 'failed')}", err.get("kind", "internal"))
        result = answer["result"]
        if gpu is not None:
            count = (result.get("latency_us") or {}).get("count")
            result = {**result, "gpu": gpu.summary(count, result.get("wall_s"))}
        got = TargetResult(rid, result, warnings=list(answer.get("warnings") or []), stopped_by=stopped_by)
        if sink is not None:
            sink(got)
        return got

    def cancel(self, rid: str) -> bool:
        from edge_runtime.measure.child import cancel

        running = self._running
        if running is None or running[0] != rid:
            return False
        job = running[1]
        job.cancelled = True
        cancel(job)
        return True
