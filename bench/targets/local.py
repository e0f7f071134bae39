"""The local target (`local:`, `local:?backend=openvino&cpus=1&threads=1&device=CPU`): this machine, measured by
the same engine and the same child process the agent uses for a board (`edge_runtime.measure.child`), so a local
result and a board's mean the same thing. The URL's options fill what the bench request leaves unset. On a local
NVIDIA GPU (`device=cuda` or `tensorrt`, ONNX Runtime's providers) NVML is sampled during the run (`gpu` section);
without one, one line before anything runs.

`batch=N` runs N samples per inference (edge_runtime/measure/batch.py: a model with a dynamic or matching first
dimension; latency per batch, throughput in samples). `gpu=N` (issue 24) picks GPU N of a multi-GPU host: the CUDA
provider's `device_id` (and TensorRT's) and the GPU NVML samples. Decided here:
- `gpu=` needs `device=cuda` or `device=tensorrt` in the same URL (elsewhere it would be silently ignored).
- CUDA numbers GPUs fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, NVML by PCI bus: the run sets PCI_BUS_ID
  (unless the user set an order) so GPU N is the same board for both. A GPU index NVML does not have is refused
  before anything runs (preflight; exit 2).
- Before the model loads, the GPU's idle power is sampled for IDLE_WINDOW_S (bench/metrics/nvml.py), so the
  record has the energy above idle as well as the total.
"""

from __future__ import annotations

import threading
import urllib.parse
from collections.abc import Mapping
from dataclasses import replace

from bench.metrics.nvml import GPU_DEVICES
from bench.targets.base import Target, TargetError, TargetInfo, TargetOptions, TargetResult, board_lines
from bench.transports.connection import new_request_id
from edge_runtime.errors import Interrupted, UserError

OPTIONS = {"backend", "device", "cpus", "threads", "batch", "gpu"}
MAX_GPUS = 64  # NVML's own limit on devices in one system is lower; a bigger number is a typo


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
    return _gpu_options(url, opts)


def _gpu_options(url: str, opts: dict) -> dict:
    """batch=N and gpu=N checked (whole numbers in range; gpu only beside a GPU device)."""
    from edge_runtime.measure.request import MAX_SAMPLES_PER_QUERY

    for key, high in (("batch", MAX_SAMPLES_PER_QUERY), ("gpu", MAX_GPUS - 1)):
        if key in opts:
            low = 1 if key == "batch" else 0
            if not opts[key].isdigit() or not low <= int(opts[key]) <= high:
                raise UserError(f"target {url!r}: {key} {opts[key]!r}: a whole number {low} to {high}")
            opts[key] = int(opts[key])
    if "gpu" in opts and (opts.get("device") or "").lower() not in GPU_DEVICES:
        raise UserError(f"target {url!r}: gpu={opts['gpu']} picks an NVIDIA GPU: it needs device=cuda or "
                        "device=tensorrt in the same URL")  # fmt: skip
    return opts


class LocalTarget(Target):
    schemes = ("local",)
    info = TargetInfo(
        kind="board",
        summary="local:?backend=NAME&cpus=LIST&threads=N&device=D&batch=N (device=cuda&gpu=N) for this machine",
        thermal=True,
        takes=frozenset({"cpus", "threads", "backend", "device", "ops"}),
    )

    def __init__(self, url: str = "local:", options: TargetOptions | None = None):
        super().__init__(url, options)
        self.fill = parse_local(url)  # what the request leaves unset
        self.gpu_index = self.fill.pop("gpu", None)
        self._running = None

    @classmethod
    def check_url(cls, url: str) -> None:
        parse_local(url)

    @classmethod
    def ops_refusal(cls, url: str, device: str | None = None) -> str | None:
        """A run on this host's NVIDIA GPU (device=cuda or tensorrt, in the URL or the request) carries no per-op
        profile: edge-runtime ops reads no GPU profiler yet, and a second, profiled session would share the GPU the
        NVML sampler is watching (docs/design.md, "Per-op profiles on the host side")."""
        asked = (device or parse_local(url).get("device") or "").lower()
        if asked in GPU_DEVICES:
            return (f"a run on this host's NVIDIA GPU (device={asked}) has no per-op profile yet (edge-runtime ops "
                    "profiles CPUs, OpenVINO devices and LiteRT delegates)")  # fmt: skip
        return None

    @classmethod
    def preflight(cls, url: str, *, backend: str | None = None, cpus: tuple[int, ...] | None = None,
                  models: Mapping[str, str] | None = None) -> None:  # fmt: skip
        """A backend this machine lacks or that cannot read a model, CPUs it lacks, or the NVIDIA GPU the URL's device
        or gpu= asks for: refused before any run (by `run`, a campaign when read, and `edge-bench targets`)."""
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
        if "gpu" in opts or (opts.get("device") or "").lower() in GPU_DEVICES:  # a GPU this host lacks: NVML says so
            from bench.metrics.nvml import check  # before anything runs (a run needs NVML for its gpu section)

            check(opts.get("gpu", 0))

    def connect(self) -> dict:
        from edge_runtime.measure.child import ChildError, board_info

        try:
            self.identity = board_info()
        except ChildError as err:
            raise TargetError(f"{self.url}: {err.one_line()}", "internal") from None
        return self.identity

    def describe(self) -> dict:
        """This machine, as the local: target runs it (no link); refused, in the words `run` would use, when the URL
        asks for what this machine lacks (issue 25: `targets 'local:?device=cuda'` said fine where `run` refused)."""
        identity = self.connect()
        try:
            self.preflight(self.url)
        except UserError as err:
            raise TargetError(f"{self.url}: {err.one_line()}", "unusable") from None
        return {"kind": "local", **identity}

    @classmethod
    def describe_text(cls, r: dict) -> list[str]:
        return [
            f"{r['url']}  this machine  ({r.get('hostname', '?')}, kernel {r.get('kernel') or '?'}"
            + (f", profile {r['board_profile']}" if r.get("board_profile") else "") + ")",
            *board_lines(r),
        ]

    def bench(self, request, *, progress=None, rid: str | None = None, sink=None) -> TargetResult:
        """Run `request` here, with the URL's options where the request leaves them unset, in a child process."""
        from bench.targets.local_gpu import gpu_section, on_gpu, start_sampler
        from edge_runtime.measure.child import ChildJob, cancel, run_in_child

        fill = {k: v for k, v in self.fill.items() if getattr(request, k) is None}
        request = replace(request, **fill).validate()
        gpu = None
        if (request.device or "").lower() in GPU_DEVICES:  # a local NVIDIA GPU: NVML says what it did meanwhile
            request = on_gpu(request, self.gpu_index, self.url)
            gpu = start_sampler(self.gpu_index or 0, self.url, progress)
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
            result = {**result, "gpu": gpu_section(gpu, result)}
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
