"""`edge-runtime serve`: models behind the KServe v2 protocol (REST and gRPC), the one the GPU servers speak, with a
dynamic batcher, a bounded queue and a thermal limit. Runs until SIGTERM or Ctrl-C: then it refuses new requests,
finishes those in flight and exits 0.

Every model loads before anything listens: one that fails is refused in one line and the command exits 2. One line
`ready http=HOST:PORT grpc=HOST:PORT` goes to stdout once both listen (port 0 picks a free port: the line says which);
what the server does goes to stderr, a line per refused request.
"""

from __future__ import annotations

import ipaddress
import os
import sys
import threading

from edge_runtime.errors import UsageError, UserError
from edge_runtime.program.args import PROG, add_debug, add_sysroot, celsius, integer, path_arg, real, word

MAX_GRPC_WORKERS = 512  # threads for gRPC calls at most: a larger --queue is bounded by gRPC's call limit there


def add_arguments(p) -> None:
    p.add_argument(
        "models", nargs="+", metavar="MODEL", type=path_arg, help="model file (.onnx, .xml, .tflite), or NAME=FILE"
    )
    p.add_argument(
        "--http", default="127.0.0.1:8000", metavar="HOST:PORT", help="REST address, or off (default %(default)s)"
    )
    p.add_argument(
        "--grpc", default="127.0.0.1:8001", metavar="HOST:PORT", help="gRPC address, or off (default %(default)s)"
    )
    p.add_argument(
        "--max-batch", type=integer(1, 4096), default=8, metavar="N", help="rows per batch at most (default 8)"
    )
    p.add_argument(
        "--max-delay-us",
        type=real(0, 60e6, "us"),
        default=0.0,
        metavar="U",
        help="how long the oldest request waits for companions before its batch runs (default 0: what is queued)",
    )
    p.add_argument(
        "--queue", type=integer(1, 1 << 20), default=64, metavar="N", help="requests waiting at most; beyond, 503 (64)"
    )
    p.add_argument("--instances", type=integer(1, 256), default=1, metavar="K", help="model instances (default 1)")
    p.add_argument("--cpus", metavar="LIST", help="CPUs for the instances, split among them in order (e.g. 2-3)")
    p.add_argument(
        "--thermal-limit",
        type=celsius,
        metavar="C",
        help="refuse new work at or above this temperature (default: none)",
    )
    p.add_argument(
        "--thermal-hysteresis",
        type=real(0.1, 50, "C"),
        default=5.0,
        metavar="C",
        help="take work again below the limit minus this (default 5)",
    )
    p.add_argument(
        "--token-file", type=path_arg, metavar="FILE", help="shared secret (mode 600); required off loopback"
    )
    p.add_argument(
        "--max-body", type=integer(1, 4096), default=16, metavar="MB", help="largest request body (default 16 MB)"
    )
    p.add_argument("--backend", type=word, help="onnxruntime, openvino or tflite (default: from the file type)")
    p.add_argument("--device", type=word, help="onnxruntime: cpu|cuda|...; openvino: CPU|GPU|NPU|AUTO")
    p.add_argument("--delegate", metavar="PATH", type=path_arg, help="TFLite external delegate library")
    p.add_argument("--delegate-option", action="append", metavar="K=V", help="option for the delegate (repeatable)")
    p.add_argument("--option", action="append", metavar="K=V", help="backend option (repeatable)")
    p.add_argument("--allow-fallback", action="store_true", help="run on CPU when the device cannot be used (reported)")
    p.add_argument("--threads", type=integer(1, 256), metavar="N", help="threads per instance (default: its CPUs)")
    p.add_argument("--quiet", action="store_true", help="log nothing but errors and refused requests")
    add_sysroot(p, "read the thermal sensors below DIR (default /)")
    add_debug(p)


def address(text: str, flag: str, token: bytes | None) -> tuple[str, int] | None:
    """HOST:PORT (or off); off loopback only with a token (anyone who reaches the port could use the board)."""
    if text == "off":
        return None
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UsageError(f"{flag} {text!r}: expected HOST:PORT (e.g. 127.0.0.1:8000), or off")
    loopback = host == "localhost"
    if not loopback:
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            raise UsageError(f"{flag} {text!r}: {host!r} is not an IP address (or localhost)") from None
    if not loopback and token is None:
        raise UsageError(
            f"{flag} {text}: listening beyond loopback needs --token-file (anyone who reaches the port "
            "could run the models)"
        )
    return host, int(port)


def load_kwargs(args) -> dict:
    """run's load() arguments, less --cpus (the batcher splits them among its instances) and with no crash check in
    load() itself (it forks: the batcher loads in threads; the check runs first, in _load)."""
    import argparse

    from edge_runtime.program.bench_flags import load_kwargs as run_kwargs

    kwargs = run_kwargs(argparse.Namespace(**{**vars(args), "cpus": None, "no_sandbox": True}))
    del kwargs["cpus"]
    return kwargs


def run(args) -> int:
    from edge_runtime.wire.endpoint import read_token

    token = read_token(args.token_file) if args.token_file else None
    http = address(args.http, "--http", token)
    grpc = address(args.grpc, "--grpc", token)
    if http is None and grpc is None:
        raise UsageError("--http off and --grpc off: nothing would listen")
    _need_extra(http is not None, grpc is not None)

    prefix, lock = f"{PROG} serve: ", threading.Lock()

    def log(text: str) -> None:
        """One line, whole: the faces' lines come with the prefix already; one write under a lock, so lines from
        the loop, gRPC's threads and the batcher never interleave."""
        if sys.stderr is None:
            return
        line = (text if text.startswith(prefix) else prefix + text) + "\n"
        with lock:
            try:
                sys.stderr.write(line)
                sys.stderr.flush()
            except (OSError, ValueError):  # stderr gone (a closed pipe): the server goes on without its log
                pass

    say = (lambda _t: None) if args.quiet else log
    gate, heat_line = _heat_gate(args)  # said once the models are loaded: a refusal at start is one line alone
    core, lines = _load(args, gate, heat_line)
    try:
        return _serve(args, core, http, grpc, token, log, lambda: [say(line) for line in lines])
    finally:
        core.close(timeout_s=0)


def _need_extra(http: bool, grpc: bool) -> None:
    """The faces' libraries (the `serve` extra), checked before any model loads: one line naming what is missing."""
    import importlib

    wanted = [("aiohttp", http), ("grpc", grpc), ("tritonclient.grpc", grpc), ("prometheus_client", http)]
    missing = []
    for module, used in wanted:
        if used:
            try:
                importlib.import_module(module)
            except ImportError:
                missing.append(module.split(".")[0])
    if missing:
        raise UserError(
            f"serve needs {', '.join(dict.fromkeys(missing))}, not installed here",
            hint="pip install 'edge-runtime[serve]'",
        )


def _heat_gate(args):
    from edge_runtime.cli.common import sysroot
    from edge_runtime.serve.heat import HeatGate
    from edge_runtime.system.thermal import read_snapshot, thermal_limit

    root = sysroot(args.sysroot)
    # No limit unless given: a server that starts refusing at a trip point nobody named would surprise (the log line
    # names the lowest trip point, so the limit is one flag away).
    limit = args.thermal_limit
    gate = HeatGate(
        root, limit, hysteresis_c=args.thermal_hysteresis, limit_source="--thermal-limit" if limit else "none"
    )
    t = gate.start().temperature_c
    if limit is None:
        trip, why = thermal_limit(None, None, read_snapshot(root))
        known = f"; {why}: {trip:g} C" if trip is not None else ""
        return gate, f"thermal: no limit (--thermal-limit C refuses new work when hot); hottest sensor {_c(t)}{known}"
    if t is None:
        gate.stop()
        raise UserError(f"--thermal-limit {limit:g}: no temperature sensor found under {args.sysroot}")
    return gate, f"thermal: refusing new work at {limit:g} C, again below {limit - gate.hysteresis_c:g} C; now {_c(t)}"


def _c(t) -> str:
    return "unknown (no sensor)" if t is None else f"{t:.1f} C"


def _load(args, gate, heat_line: str):
    """The Core with every model loaded, and the lines that say how each is served (said once it listens)."""
    from edge_runtime.runtime.sandbox import can_fork
    from edge_runtime.serve.app import Settings, build_core, model_specs

    kwargs = load_kwargs(args)
    try:
        specs = model_specs(args.models)
    except BaseException:
        gate.stop()
        raise
    if can_fork():  # a model that crashes its backend is refused here, in a child, before anything listens
        from edge_runtime.runtime.load import load

        for _name, path in specs:
            load(path, **{**kwargs, "sandbox": True}).close()
    settings = Settings(args.max_batch, args.max_delay_us, args.queue, args.instances, args.cpus)
    try:
        core = build_core(args.models, settings, kwargs, gate)
    except BaseException:
        gate.stop()
        raise
    lines = [heat_line]
    for m in core.models.values():
        b = m.batcher
        cpus = ", ".join("all" if i.cpus is None else ",".join(map(str, i.cpus)) for i in b.instances)
        how = f"batches up to {m.max_batch}, window {args.max_delay_us:g} us" if m.batching else b.unbatched_reason
        lines.append(
            f"model {m.name}: {m.path} on {b.backend.name} {b.backend.device}; {how}; queue {args.queue}; "
            f"{len(b.instances)} instance(s) on CPUs {cpus}"
        )
    return core, lines


def _serve(args, core, http, grpc, token, log, say_loaded) -> int:
    import signal

    stop = threading.Event()
    got: list[int] = []

    def on_signal(signum, frame) -> None:
        got.append(signum)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    servers = _listen(args, core, http, grpc, token, log)
    hosts = {"http": http, "grpc": grpc}
    where = " ".join(f"{k}={hosts[k][0]}:{s.port}" for k, s in servers.items())
    say_loaded()
    print(f"ready {where}", flush=True)
    say = (lambda _t: None) if args.quiet else log
    say(f"serving {', '.join(core.models)} on {where}; {'token required' if token else 'no token'}; pid {os.getpid()}")
    while not stop.wait(3600):
        pass
    say(f"signal {got[0]}: refusing new requests, finishing those in flight")
    drained = core.close(timeout_s=30.0)
    for s in servers.values():
        s.close(10.0)
    say("stopped" if drained else "stopped; requests still in flight after 30 s were dropped")
    return 0


def _listen(args, core, http, grpc, token, log) -> dict:
    servers: dict = {}
    try:
        if http is not None:
            from edge_runtime.serve.http_server import start_http

            servers["http"] = _bind(
                "--http",
                http,
                lambda: start_http(core, http[0], http[1], token=token, log=log, max_body_bytes=args.max_body << 20),
            )
        if grpc is not None:
            from edge_runtime.serve.grpc_server import start_grpc

            # a thread per call waiting: the queue, the batches in flight and a few health calls, so the batcher's
            # queue refuses (with retry-after) before gRPC's own call limit does
            workers = min(args.queue + args.instances * args.max_batch + 8, MAX_GRPC_WORKERS)
            servers["grpc"] = _bind(
                "--grpc",
                grpc,
                lambda: start_grpc(
                    core, grpc[0], grpc[1], token=token, log=log, max_message_bytes=args.max_body << 20, workers=workers
                ),
            )
    except BaseException:
        for s in servers.values():
            s.close(0)
        raise
    return servers


def _bind(flag: str, addr: tuple[str, int], start):
    try:
        return start()
    except OSError as err:
        why = err.strerror or str(err)
    except UserError as err:  # the face's own words: "... cannot listen ...: address already in use"
        why = err.message.rsplit(": ", 1)[-1]
    raise UserError(f"{flag} {addr[0]}:{addr[1]}: cannot listen: {why}")
