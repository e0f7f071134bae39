"""Serve one ONNX model from a real Triton Inference Server on CPU (PyTriton's bundled tritonserver), for the tests.

Run with .venv-triton's Python (numpy 1; `make test` builds it):

    .venv-triton/bin/python tests/servers/triton_server.py --model M.onnx --name NAME \
        --http-port P --grpc-port P --metrics-port P [--token T | --no-token] [--max-batch N] [--max-delay-us U]
        [--stack-requests] [--cpus LIST]

The model runs in ONNX Runtime (CPU, one thread) inside this process; Triton gets its inputs and outputs named, typed
and shaped as in the ONNX file (a dynamic dimension becomes -1). Statistics, model repository, shared memory, trace and
logging want the access token (header `triton-access-token`, gRPC `triton-grpc-protocol-triton-access-token`) unless
--no-token. Every endpoint listens on 127.0.0.1 only. When the model answers ready through Triton's own HTTP endpoint
(and the gRPC and metrics ports accept connections), one line `ready http=H:P grpc=H:P metrics=H:P` goes to stdout;
logs go to stderr. SIGTERM (or SIGINT) stops Triton and exits 0; a Triton that dies on its own exits 1. --cpus pins
this process before Triton starts, so tritonserver and the Python backend's stub (its children) inherit the CPUs: the
whole server runs on them, as `edge-runtime serve` does under taskset.

This is test scaffolding: it never binds a non-loopback address and never runs outside the tests' own venv.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import socket
import sys
import sysconfig
import tempfile
import threading
import time
import typing
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import onnxruntime as ort

HOST = "127.0.0.1"
READY_TIMEOUT_S = 120.0
# tritonserver waits this long for in-flight requests when told to stop (its default is 30 s).
EXIT_TIMEOUT_S = 5

from onnx_model import ORT_DTYPES  # noqa: E402 - tests/servers is on the path (the launcher's own folder)

log = logging.getLogger("triton_server")


class _Stop(BaseException):
    """Raised in the main thread by the SIGTERM/SIGINT handler. A BaseException, like KeyboardInterrupt, so that no
    `except Exception` in PyTriton's start-up loops swallows it."""


def _on_signal(signum: int, _frame: object) -> None:
    # One stop only: a second signal while Triton shuts down is ignored (the tests escalate to SIGKILL on their own).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise _Stop(signal.Signals(signum).name)


def _cpu_list(text: str) -> set[int]:
    """`1`, `0-1`, `0,2-3` -> a set of CPU numbers (argparse type)."""
    cpus: set[int] = set()
    try:
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a CPU list: {text!r} (e.g. 1 or 0-1,3)") from None
    if not cpus:
        raise argparse.ArgumentTypeError(f"not a CPU list: {text!r} (e.g. 1 or 0-1,3)")
    return cpus


def _dims(shape: list) -> list[int]:
    """ONNX dims -> Triton dims: a symbolic or unknown dimension becomes -1."""
    return [d if isinstance(d, int) and d >= 0 else -1 for d in shape]


def _dtype(ort_type: str) -> type:
    try:
        return ORT_DTYPES[ort_type]
    except KeyError:
        raise SystemExit(f"triton_server: unsupported tensor type {ort_type!r}; known: {sorted(ORT_DTYPES)}") from None


class OnnxModel:
    """An ONNX Runtime session (CPU, one thread) and the inference callable PyTriton binds."""

    def __init__(self, path: Path, max_batch: int, stack_requests: bool = False) -> None:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
        self.inputs = [(i.name, _dtype(i.type), _dims(i.shape)) for i in self.session.get_inputs()]
        self.outputs = [(o.name, _dtype(o.type), _dims(o.shape)) for o in self.session.get_outputs()]
        self.max_batch = max_batch
        self.stack_requests = stack_requests
        if max_batch:
            first = {d[0] if d else None for _, _, d in self.inputs + self.outputs}
            if not first <= {1, -1}:
                raise SystemExit(f"triton_server: --max-batch needs a leading batch dimension (1 or dynamic) on {path}")
            # With batching on, Triton's shapes leave the batch dimension out; ONNX Runtime gets it back.
            self.fixed_batch = first == {1}
        self._lock = threading.Lock()
        self._output_names = [name for name, _, _ in self.outputs]

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with self._lock:
            results = self.session.run(self._output_names, feeds)
        return dict(zip(self._output_names, results, strict=True))

    def _run_request(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.max_batch and self.fixed_batch:
            # A batch-1 ONNX graph under a batching Triton model: one ORT call per sample, then stack.
            count = next(iter(feeds.values())).shape[0]
            parts = [self._run({k: v[i : i + 1] for k, v in feeds.items()}) for i in range(count)]
            return {name: np.concatenate([p[name] for p in parts]) for name in self._output_names}
        return self._run(feeds)

    def infer(self, requests: list) -> list[dict[str, np.ndarray]]:
        """PyTriton's callable: a list of requests (a dynamic batch) in, one dict of outputs per request out."""
        feeds = [{name: np.ascontiguousarray(r[name], dtype=dtype) for name, dtype, _ in self.inputs} for r in requests]
        if self.stack_requests and len(feeds) > 1:
            return self._run_stacked(feeds)
        return [self._run_request(f) for f in feeds]

    def _run_stacked(self, feeds: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """The requests of a dynamic batch as one ONNX Runtime call (what pytriton.decorators.batch does), split back
        into one answer per request by their batch sizes."""
        stacked = {name: np.concatenate([f[name] for f in feeds]) for name, _, _ in self.inputs}
        outputs = self._run_request(stacked)
        ends = np.cumsum([next(iter(f.values())).shape[0] for f in feeds])[:-1]
        split = {name: np.split(out, ends) for name, out in outputs.items()}
        return [{name: parts[i] for name, parts in split.items()} for i in range(len(feeds))]


def _python_libdir_first() -> None:
    """Let the Python backend stub load this interpreter's libpython, not the system one.

    PyTriton's `triton_python_backend_stub` links `libpython3.X.so.1.0` by soname; without help it finds the
    distribution's copy (/lib/x86_64-linux-gnu), which is another build than a pyenv or python.org interpreter (seen:
    "'_thread.RLock' object has no attribute '_recursion_count'" when the stub's 3.11.2 meets pyenv's 3.11.7 stdlib).
    The stub inherits our environment through tritonserver, so putting our LIBDIR first is enough (`ldd` on the stub
    shows which one it picks).
    """
    libdir = sysconfig.get_config_var("LIBDIR")
    soname = sysconfig.get_config_var("INSTSONAME")
    if not libdir or not soname or not (Path(libdir) / soname).exists():
        log.warning("this Python has no shared libpython (%s/%s): the stub uses the system one", libdir, soname)
        return
    current = os.environ.get("LD_LIBRARY_PATH", "")
    if libdir not in current.split(":"):
        os.environ["LD_LIBRARY_PATH"] = f"{libdir}:{current}" if current else libdir


def _stub_model_dirs(launcher_pid: int) -> set[Path]:
    """The temporary model directories (/tmp/folderXXXXXX) of this launcher's Python backend stubs.

    PyTriton loads its model through Triton's repository API with the files inline; tritonserver writes them to
    /tmp/folderXXXXXX (not TMPDIR) and removes it when the model unloads. A stub killed by the group's SIGTERM before
    that unload leaves it behind, so the launcher notes it while running. A stub's command line is
    `triton_python_backend_stub /tmp/folderXXXXXX/1/model.py pytrtion<launcher pid>-...`.
    """
    dirs = set()
    for entry in os.scandir("/proc"):
        try:
            argv = Path(entry.path, "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:  # not a process, or gone meanwhile
            continue
        if len(argv) > 2 and argv[0].endswith("triton_python_backend_stub"):
            if argv[2].startswith(f"pytrtion{launcher_pid}-"):
                folder = Path(argv[1]).parents[1]
                if folder.parent == Path("/tmp") and folder.name.startswith("folder"):
                    dirs.add(folder)
    return dirs


def remove_leftovers(launcher_pid: int, model_dirs: set[Path]) -> list[str]:
    """What a stopped Triton may leave when its stubs die first: the Python backend's shared-memory regions (named with
    the launcher's PID by PyTriton) and the temporary model directories. Returns what was removed."""
    removed = []
    for region in Path("/dev/shm").glob(f"pytrtion{launcher_pid}-*"):
        region.unlink(missing_ok=True)
        removed.append(str(region))
    for folder in model_dirs:
        if folder.exists():
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(str(folder))
    return removed


def _http_ok(url: str, timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # loopback URL built here
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _listening(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1.0):
            return True
    except OSError:
        return False


def _wait_ready(args: argparse.Namespace, triton: object) -> None:
    """Bounded: the model ready over Triton's HTTP endpoint, and the gRPC and metrics ports accepting connections."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    url = f"http://{HOST}:{args.http_port}/v2/models/{args.name}/ready"
    while time.monotonic() < deadline:
        if not triton.is_alive():
            raise RuntimeError("tritonserver exited before the model was ready")
        if _http_ok(url) and _listening(args.grpc_port) and _listening(args.metrics_port):
            return
        time.sleep(0.2)
    raise TimeoutError(f"model {args.name!r} not ready after {READY_TIMEOUT_S:.0f} s")


def main(argv: list[str] | None = None) -> int:
    from onnx_model import launcher_parser

    parser = launcher_parser(__doc__)
    parser.add_argument("--metrics-port", type=int, required=True)
    guard = parser.add_mutually_exclusive_group()
    guard.add_argument(
        "--token",
        help="access token guarding statistics, model repository, shared memory, trace, "
        "logging (sent as header triton-access-token; default: a random one nobody is told)",
    )
    guard.add_argument(
        "--no-token",
        action="store_true",
        help="guard nothing (perf_analyzer 2.41 cannot send the token over gRPC, and it reads the statistics)",
    )
    parser.add_argument(
        "--max-batch", type=int, default=0, help="Triton max_batch_size, dynamic batcher on (default 0: no batching)"
    )
    parser.add_argument(
        "--max-delay-us",
        type=int,
        default=0,
        help="the dynamic batcher's max_queue_delay_microseconds (with --max-batch; default 0: no wait)",
    )
    parser.add_argument(
        "--stack-requests",
        action="store_true",
        help="run the requests of a dynamic batch as one ONNX Runtime call (default: one call per request)",
    )
    parser.add_argument("--cpus", type=_cpu_list, help="pin the server (this process and its children) to these CPUs")
    args = parser.parse_args(argv)
    if args.cpus:
        os.sched_setaffinity(0, args.cpus)

    # stdout carries the ready line only: PyTriton echoes tritonserver's log to stdout, so fd 1 becomes stderr and the
    # ready line goes to a private copy of the original stdout.
    ready_out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    _python_libdir_first()

    try:
        return serve(args, ready_out)
    except _Stop as stop:
        log.info("%s received: Triton stopped", stop)
        return 0


def serve(args: argparse.Namespace, ready_out: typing.TextIO) -> int:
    """Load the model, start Triton, say ready, and serve until Triton dies (1) or a signal raises _Stop."""
    # PyTriton imported late: it reads its environment (and ours, above) when the server starts.
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig

    model = OnnxModel(args.model, args.max_batch, args.stack_requests)
    config = TritonConfig(
        http_address=HOST,
        http_port=args.http_port,
        grpc_address=HOST,
        grpc_port=args.grpc_port,
        allow_metrics=True,
        allow_gpu_metrics=False,
        allow_cpu_metrics=True,
        metrics_address=HOST,
        metrics_port=args.metrics_port,
        exit_timeout_secs=EXIT_TIMEOUT_S,
    )

    def tensors(specs: list) -> list:
        return [Tensor(name=n, dtype=t, shape=tuple(d[1:] if args.max_batch else d)) for n, t, d in specs]

    model_config = (
        ModelConfig(
            batching=True,
            max_batch_size=args.max_batch,
            batcher=DynamicBatcher(max_queue_delay_microseconds=args.max_delay_us),
        )
        if args.max_batch
        else ModelConfig(batching=False)
    )
    model_dirs: set[Path] = set()
    with tempfile.TemporaryDirectory(prefix="triton-test-") as workspace:
        triton = Triton(
            config=config,
            workspace=Path(workspace) / "pytriton",
            security_config=(
                TritonSecurityConfig(restricted_endpoints=[])
                if args.no_token
                else TritonSecurityConfig(access_token=args.token)
            ),
        )
        try:
            triton.bind(
                model_name=args.name,
                infer_func=model.infer,
                inputs=tensors(model.inputs),
                outputs=tensors(model.outputs),
                config=model_config,
                strict=True,
            )
            triton.run()
            _wait_ready(args, triton)
            model_dirs |= _stub_model_dirs(os.getpid())
            print(
                f"ready http={HOST}:{args.http_port} grpc={HOST}:{args.grpc_port} metrics={HOST}:{args.metrics_port}",
                file=ready_out,
                flush=True,
            )
            while triton.is_alive():
                time.sleep(0.5)
            log.error("tritonserver or the model proxy exited on its own")
            return 1
        finally:
            triton.stop()
            for path in remove_leftovers(os.getpid(), model_dirs):
                log.info("removed leftover %s", path)


if __name__ == "__main__":
    sys.exit(main())
