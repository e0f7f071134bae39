"""`edge-runtime`: the board-side command line. Subcommands are small functions in a table; `main()` is the one place
that turns errors into one line and an exit code (0 ok, 1 failed check, 2 user error, 3 internal error).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

from edge_runtime import __version__
from edge_runtime.errors import EdgeRuntimeError, FeedError, UserError

PROG = "edge-runtime"


class _UsageError(UserError):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so bad flags get the same one-line error and exit code 2."""

    def error(self, message: str):  # type: ignore[override]
        raise _UsageError(f"{self.prog}: {message}", hint=f"see '{self.prog} --help'")


# ---------------------------------------------------------------------------------------------------------- output
def write_json(doc: dict, dest: str, protect: tuple[Path, ...] = ()) -> None:
    """`-` -> stdout; otherwise written atomically next to its destination (a crash never leaves half a file).

    `protect`: files the command read (model, weights, inputs), which --json must never overwrite.
    """
    text = json.dumps(doc, indent=2, default=_json_default) + "\n"
    if dest == "-":
        sys.stdout.write(text)
        return
    path = Path(dest)
    for p in protect:
        if path.resolve() == p.resolve():
            raise UserError(f"--json {dest!r}: is an input of this command; refusing to overwrite it")
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; a result file is as readable as any other file
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as err:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        raise UserError(f"--json {dest!r}: cannot write: {err.strerror or err}") from err


def _json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(type(o).__name__)


def _key_values(pairs: list[str] | None, flag: str) -> dict[str, str]:
    out = {}
    for item in pairs or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise _UsageError(f"{flag} {item!r}: expected KEY=VALUE")
        out[key] = value
    return out


def _cpus(text: str | None, root=None) -> list[int] | None:
    """A CPU list, or `board`: the detected board profile's CPUs to isolate."""
    if text is None:
        return None
    from edge_runtime.cpulist import parse_cpu_list

    if text == "board":
        from edge_runtime.boards import detect
        from edge_runtime.system import SystemRoot

        root = root or SystemRoot("/")
        board = detect(root)
        chosen = board.suggested_isolated(root.online_cpus()) if board else []
        if not chosen:
            raise _UsageError("--cpus board: no board profile matches this machine", hint="give --cpus LIST")
        return chosen

    try:
        cpus = parse_cpu_list(text)
    except ValueError as err:
        raise _UsageError(f"--cpus {text!r}: not a CPU list ({err})", hint="e.g. 2-3 or 1,3") from err
    if not cpus:
        raise _UsageError(f"--cpus {text!r}: empty CPU list")
    return cpus


# ------------------------------------------------------------------------------------------------------------ info
def cmd_info(args) -> int:
    from edge_runtime import backends
    from edge_runtime.cpulist import format_cpu_list

    root = _sysroot(args.sysroot)
    found = {}
    for name in backends.names():
        cls = backends.get(name)
        try:
            found[name] = {"installed": True, **cls.describe()}
        except EdgeRuntimeError as err:
            found[name] = {
                "installed": False,
                "error": err.message,
                "install": f"pip install 'edge-runtime[{cls.extra}]'",
            }
        except Exception as err:  # noqa: BLE001 - a broken install is reported, not fatal to `info`
            found[name] = {
                "installed": False,
                "error": f"{type(err).__name__}: {err}",
                "install": f"pip install 'edge-runtime[{cls.extra}]'",
            }
    iso = root.isolation()
    from edge_runtime.boards import detect

    profile = detect(root)
    doc = {
        "schema": "edge-runtime/info/1",
        "edge_runtime": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "sysroot": str(root.root),
        "board": root.board_model() or None,
        "board_profile": None
        if profile is None
        else {
            "name": profile.name,
            "description": profile.description,
            "suggested_isolated_cpus": profile.suggested_isolated(root.online_cpus()),
            "npu": profile.npu.kind,
            "cmdline_file": profile.cmdline.file,
        },
        "cpu_model": root.cpu_model() or None,
        "kernel": root.kernel() or None,
        "cpus": {"online": root.online_cpus(), "isolated": iso.get("sysfs_isolated", [])},
        "isolation": {k: v for k, v in iso.items() if k != "sysfs_isolated"},
        "backends": found,
    }
    if args.json:
        write_json(doc, args.json)
        if args.json == "-":
            return 0
    p = print
    p(f"edge-runtime {__version__}  (python {doc['python']}, numpy {doc['numpy']})")
    p(f"  board    {doc['board'] or 'unknown (no device-tree model or DMI product here)'}")
    bp = doc["board_profile"]
    if bp:
        iso_hint = format_cpu_list(bp["suggested_isolated_cpus"]) or "-"
        p(f"  profile  {bp['name']}: {bp['description']}; isolate CPU {iso_hint} (--cpus board)")
    p(f"  cpu      {doc['cpu_model'] or 'unknown'}")
    p(f"  kernel   {doc['kernel'] or 'unknown'}")
    online, isolated = doc["cpus"]["online"], doc["cpus"]["isolated"]
    p(f"  cpus     online {format_cpu_list(online) or '?'}, isolated {format_cpu_list(isolated) or 'none'}")
    cmd = (
        "  ".join(f"{k}={format_cpu_list(v)}" for k, v in doc["isolation"].items()) or "none on the kernel command line"
    )
    p(f"  isolation {cmd}")
    p("backends")
    for name, b in found.items():
        if not b["installed"]:
            p(f"  {name:<12} not installed   ({b['install']})")
            continue
        extra = ""
        if name == "onnxruntime":
            extra = f"providers: {', '.join(b['providers'])}"
        elif name == "openvino":
            extra = ", ".join(f"{d}: {n}" for d, n in b["device_names"].items())
        elif name == "tflite":
            extra = f"{b['library']}; delegates found: {', '.join(b['delegates']) or 'none'}"
        p(f"  {name:<12} {b['version']:<10} devices: {', '.join(b['devices'])}   {extra}")
    return 0


# ------------------------------------------------------------------------------------------------------------- run
def _load_inputs(specs: list[str] | None, session, seed: int) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    given: dict[str, np.ndarray] = {}
    names = [t.name for t in session.inputs]
    for spec in specs or []:
        # NAME=FILE when NAME is one of the model's inputs; otherwise the whole value is a path (paths may hold '=').
        name, sep, file = spec.partition("=")
        if not sep or name not in names:
            if sep and len(names) > 1:
                raise FeedError(
                    f"--input {spec!r}: the model has no input {name!r}", hint=f"its inputs are: {', '.join(names)}"
                )
            if len(names) != 1:
                raise FeedError(
                    f"--input {spec!r}: the model has {len(names)} inputs; write NAME=FILE.npy",
                    hint=f"its inputs are: {', '.join(names)}",
                )
            name, file = names[0], spec
        if name in given:
            raise FeedError(f"--input {spec!r}: input {name!r} is given twice")
        try:
            given[name] = np.load(file, allow_pickle=False)
        except FileNotFoundError as err:
            raise FeedError(f"--input {spec!r}: no such file {file!r}") from err
        except IsADirectoryError as err:
            raise FeedError(f"--input {spec!r}: {file!r} is a directory") from err
        except (OSError, ValueError, EOFError) as err:
            raise FeedError(f"--input {spec!r}: {file!r} is not a readable .npy array ({err or 'empty file'})") from err
        if not isinstance(given[name], np.ndarray):
            raise FeedError(f"--input {spec!r}: {file!r} holds no single array (use .npy, not .npz)")
    rng = np.random.default_rng(seed)
    sources = {}
    feeds = {}
    for t in session.inputs:
        if t.name in given:
            feeds[t.name] = given[t.name]
            sources[t.name] = "file"
            continue
        shape = [d if d is not None else 1 for d in t.shape]
        if t.dtype.kind == "f":
            feeds[t.name] = rng.random(shape, dtype=np.float64).astype(t.dtype)
            sources[t.name] = "random uniform [0, 1)"
        elif t.dtype.kind in "iu":
            info = np.iinfo(t.dtype)
            feeds[t.name] = rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=t.dtype)
            sources[t.name] = f"random integers [{info.min}, {info.max}]"
        elif t.dtype.kind == "b":
            feeds[t.name] = rng.integers(0, 2, size=shape).astype(bool)
            sources[t.name] = "random bool"
        else:
            raise FeedError(f"input {t.name!r}: cannot make random data of dtype {t.dtype}; pass --input")
    return feeds, sources


def _top(info, arr: np.ndarray, k: int) -> list[list[float]]:
    real = info.dequantize(arr) if info.quantization is not None else arr
    flat = np.asarray(real).reshape(-1)
    if flat.dtype.kind not in "fiub" or flat.size == 0:
        return []
    idx = np.argsort(-flat.astype(np.float64), kind="stable")[:k]
    return [[int(i), float(flat[i])] for i in idx]


def cmd_run(args) -> int:
    from edge_runtime.session import load

    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = load(args.model, **_load_kwargs(args), isolate=not args.no_isolate)
    for w in caught:
        print(f"{PROG}: warning: {w.message}", file=sys.stderr)
    load_ms = (time.perf_counter() - t0) * 1e3
    with session:
        feeds, sources = _load_inputs(args.input, session, args.seed)
        t1 = time.perf_counter()
        outputs = session.infer(feeds)
        infer_ms = (time.perf_counter() - t1) * 1e3
        b = session.backend
        doc = {
            "schema": "edge-runtime/run/1",
            "model": {"path": str(session.model.path), "sha256": session.model.sha256, "format": session.model.format},
            "backend": b.to_dict(),
            "inputs": [{**t.to_dict(), "source": sources[t.name]} for t in session.inputs],
            "outputs": [{**t.to_dict(), "top": _top(t, outputs[t.name], args.top)} for t in session.outputs],
            "timing_ms": {"load": round(load_ms, 3), "first_inference": round(infer_ms, 3)},
        }
    if args.json:
        inputs = [Path(p) for spec in args.input or [] for p in {spec, spec.partition("=")[2] or spec}]
        weights = [session.model.weights] if session.model.weights else []
        write_json(doc, args.json, protect=(session.model.path, *weights, *inputs))
        if args.json == "-":
            return 0
    model = doc["model"]
    print(f"model    {model['path']}  ({model['format']}, sha256 {model['sha256'][:12]})")
    where = b.device + (f", delegate {b.delegate}" if b.delegate else "")
    fb = f"  FALLBACK to CPU: {b.fallback_reason}" if b.fallback else ""
    print(f"backend  {b.name} {b.version} on {where}{fb}")
    for t in doc["inputs"]:
        print(f"input    {t['name']}  {tuple(t['shape'])} {t['dtype']}  <- {t['source']}")
    for t in doc["outputs"]:
        top = "  ".join(f"[{i}]={v:.4g}" for i, v in t["top"])
        print(f"output   {t['name']}  {tuple(t['shape'])} {t['dtype']}  top: {top}")
    print(f"time     load {load_ms:.1f} ms, first inference {infer_ms:.3f} ms")
    return 0


# ------------------------------------------------------------------------------------------------------------ main
def cmd_bench(args) -> int:
    import signal

    from edge_runtime.benchmark import BenchConfig, format_report, run_bench
    from edge_runtime.stats import cyclictest_histogram
    from edge_runtime.stress import StressSpec

    for flag, value, low in (("--iterations", args.iterations, 1), ("--warmup", args.warmup, 0)):
        if value is not None and value < low:
            raise _UsageError(f"{flag} {value}: must be at least {low}")
    import math

    for flag, value, low in (
        ("--duration", args.duration, 1e-3),
        ("--warmup-time", args.warmup_time, 0.0),
        ("--sample-interval", args.sample_interval, 1e-3),
        ("--cooldown-timeout", args.cooldown_timeout, 0.0),
    ):
        if value is not None and not (math.isfinite(value) and value >= low):
            raise _UsageError(f"{flag} {value}: must be a finite number of seconds >= {low:g}")
    for flag, value in (("--thermal-limit", args.thermal_limit), ("--cooldown-to", args.cooldown_to)):
        if value is not None and not math.isfinite(value):
            raise _UsageError(f"{flag} {value}: must be a finite temperature in C")
    if args.histogram is not None and args.histogram < 0:
        raise _UsageError(f"--histogram {args.histogram}: the number of 1 us buckets must be >= 0")
    inputs = [Path(args.model), *(Path(p) for spec in args.input or [] for p in {spec, spec.partition("=")[2] or spec})]
    if Path(args.model).suffix == ".xml":
        inputs.append(Path(args.model).with_suffix(".bin"))
    outputs = [
        (f, v) for f, v in (("--json", args.json), ("--hdr-log", args.hdr_log), ("--prom", args.prom)) if v and v != "-"
    ]
    for flag, value in outputs:  # before the run, not after it: a result is never lost to a bad path
        dest = Path(value)
        if any(dest.resolve() == i.resolve() for i in inputs):
            raise _UsageError(f"{flag} {value!r}: is an input of this command; refusing to overwrite it")
        parent = dest.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise _UsageError(f"{flag} {value!r}: cannot create {str(parent)!r}: {err.strerror or err}") from err
        if dest.is_dir() or not os.access(parent, os.W_OK):
            raise _UsageError(f"{flag} {value!r}: cannot write there")
    if args.rt_priority is not None and not 1 <= args.rt_priority <= 99:
        raise _UsageError(f"--rt-priority {args.rt_priority}: must be 1-99 (SCHED_FIFO)")
    cfg = BenchConfig(
        model=args.model,
        **_load_kwargs(args),
        rt_priority=args.rt_priority,
        mlock=args.mlock,
        warmup=args.warmup,
        warmup_s=args.warmup_time,
        iterations=args.iterations if args.iterations is not None else (None if args.duration else 1000),
        duration_s=args.duration,
        stress=[StressSpec.parse(s) for s in args.stress or []],
        platform_latency_s=args.platform_latency,
        feeds_fn=(lambda session: _load_inputs(args.input, session, args.seed)[0]) if args.input else None,
        seed=args.seed,
        hdr_log=args.hdr_log,
        isolate=not args.no_isolate,
        thermal_limit_c=args.thermal_limit,
        cooldown_to_c=args.cooldown_to,
        cooldown_timeout_s=args.cooldown_timeout,
        sample_interval_s=args.sample_interval,
    )
    tty = sys.stderr.isatty()

    def progress(msg: str) -> None:
        print(f"\r{msg}\033[K" if tty else msg, end="" if tty else "\n", file=sys.stderr, flush=True)

    # SIGTERM ends the run like Ctrl-C: co-runners are stopped and scheduling restored on the way out.
    def on_term(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = run_bench(cfg, _sysroot(args.sysroot), progress)
    finally:
        signal.signal(signal.SIGTERM, old)
        if tty:
            print("\r\033[K", end="", file=sys.stderr)
    for w in caught:
        print(f"{PROG}: warning: {w.message}", file=sys.stderr)
    samples = result.pop("_samples_ns")
    us = samples // 1000
    values, counts = np.unique(us, return_counts=True)
    result["histogram_us"] = [[int(v), int(c)] for v, c in zip(values, counts, strict=True)]
    code = 1 if result.get("aborted") else 0  # a run stopped at the thermal limit is a failed check
    if args.prom:
        from edge_runtime.prom import write_textfile

        write_textfile(args.prom, result)
    if args.json:
        write_json(result, args.json, protect=(Path(args.model),))
        if args.json == "-":
            if code:
                print(f"{PROG}: {result['aborted']['reason']}: partial result written", file=sys.stderr)
            return code
    sys.stdout.write(format_report(result))
    if args.histogram is not None:
        sys.stdout.write(cyclictest_histogram(samples, args.histogram or None))
    return code


def cmd_quantize(args) -> int:
    from edge_runtime import quantize as q

    cfg = q.QuantizeConfig(
        model=args.model,
        calibration=args.calibration,
        out=args.out,
        backend=args.backend,
        method=args.method,
        per_channel=not args.per_tensor,
        activations=args.activations,
        validation=args.validation,
        labels=args.labels,
        max_accuracy_drop=args.max_accuracy_drop,
    )
    if args.max_accuracy_drop is not None and args.max_accuracy_drop < 0:
        raise _UsageError(f"--max-accuracy-drop {args.max_accuracy_drop}: must be >= 0 (points)")
    if args.labels and not args.validation:
        raise _UsageError("--labels goes with --validation")
    res = q.run(cfg, lambda m: print(m, file=sys.stderr, flush=True))
    for w in res.warnings:
        print(f"{PROG}: warning: {w}", file=sys.stderr)
    doc = res.doc
    doc["warnings"] = res.warnings
    code = 1 if doc.get("meets_budget") is False else 0
    if args.json:
        write_json(doc, args.json, protect=(Path(args.model), Path(args.calibration)))
        if args.json == "-":
            return code
    print(
        f"quantized  {doc['out']['path']}  ({doc['precision']}, {doc['backend']}, {doc['method']}, "
        f"{'per-channel' if doc['per_channel'] else 'per-tensor'}, {doc['calibration_samples']} calibration samples)"
    )
    act = doc["activations"]
    print(f"types      activations {act['type']}, weights {act['weights']}: {act['why']}")
    rows = [("INT8", doc["accuracy_int8"])] + ([("mixed", doc["accuracy_mixed"])] if "accuracy_mixed" in doc else [])
    print(
        f"{'accuracy':<10} {'top-1 FP32':>10} {'top-1 q':>8} {'agree':>7} {'drop pts':>9} {'SQNR dB':>8} {'max err':>8}"
    )
    for name, a in rows:

        def pct(k, a=a):
            return f"{a[k]:.2%}" if k in a else "-"

        drop = f"{a['drop_points']:.2f}" if "drop_points" in a else "-"
        sqnr = f"{a['sqnr_db']:.1f}" if a["sqnr_db"] is not None else "exact"
        print(
            f"{name:<10} {pct('fp32_top1'):>10} {pct('int8_top1'):>8} {pct('top1_agreement'):>7} {drop:>9} "
            f"{sqnr:>8} {a['max_abs_error']:>8.3g}"
        )
    if doc["kept_fp32"]:
        print(f"kept FP32  {', '.join(doc['kept_fp32'])}")
    if doc.get("meets_budget") is not None:
        verdict = "meets" if doc["meets_budget"] else "MISSES"
        print(f"budget     {verdict} --max-accuracy-drop {args.max_accuracy_drop:g} points")
    lat, size = doc["latency_us"], doc["size_bytes"]
    mixed = f", mixed {lat['mixed_p50']:.1f} us" if "mixed_p50" in lat else ""
    print(
        f"latency    FP32 {lat['fp32_p50']:.1f} us, INT8 {lat['int8_p50']:.1f} us{mixed}: {lat['speedup']:.2f}x "
        "for the written model (medians of 3 interleaved runs, 1 thread)"
    )
    print(
        f"size       {size['what']}: {size['fp32']:,} -> {size['quantized']:,} bytes ({size['ratio']:.0%})"
        + (
            f"; with the .xml {size['fp32_total']:,} -> {size['quantized_total']:,}"
            if size["what"] != "model file"
            else ""
        )
    )
    print(f"manifest   {doc['manifest_file']}")
    return code


def _sysroot(path: str):
    from edge_runtime.system import SystemRoot

    if not Path(path).is_dir():
        raise _UsageError(f"--sysroot {path!r}: no such directory")
    return SystemRoot(path)


def cmd_thermal(args) -> int:
    from edge_runtime.boards import detect
    from edge_runtime.thermal import pick_rail, read_snapshot, thermal_limit, throttle_reasons

    root = _sysroot(args.sysroot)
    board = detect(root)

    def snapshot_doc():
        snap = read_snapshot(root)
        limit, source = thermal_limit(args.thermal_limit, board, snap)
        mx = snap.max_c()
        rail = pick_rail(snap.rails)
        return snap, {
            **snap.to_dict(),
            "schema": "edge-runtime/thermal/1",
            "available": snap.available,
            "max_c": mx,
            "limit_c": limit,
            "limit_source": source,
            "headroom_c": round(limit - mx, 2) if limit is not None and mx is not None else None,
            "throttled": throttle_reasons(snap),
            "firmware_throttled": snap.throttled,
            "power": {"rail": rail.label, "source": rail.source, "w": rail.power_w} if rail else None,
            "sensors_skipped": snap.skipped,
        }

    if args.watch is not None:
        if not args.watch > 0 or args.watch == float("inf"):
            raise _UsageError(f"--watch {args.watch}: must be a positive number of seconds")
        if args.json not in (None, "-"):
            raise _UsageError("--watch writes one JSON line per interval to stdout: use --json without a FILE")
        n = 0
        while args.count is None or n < args.count:
            snap, doc = snapshot_doc()
            if args.json:
                print(
                    json.dumps(
                        {
                            "t": time.time(),
                            "max_c": doc["max_c"],
                            "headroom_c": doc["headroom_c"],
                            "temps_c": snap.temperatures(),
                            "freq_khz": {f.cpu: f.cur_khz for f in snap.cpufreq},
                            "power_w": doc["power"]["w"] if doc["power"] else None,
                            "throttled": doc["throttled"],
                        }
                    ),
                    flush=True,
                )
            else:
                temps = "  ".join(f"{k} {v:.1f}" for k, v in snap.temperatures().items()) or "no sensors"
                freqs = " ".join(f"{(f.cur_khz or 0) // 1000}" for f in snap.cpufreq)
                extra = f"  headroom {doc['headroom_c']:.1f} C" if doc["headroom_c"] is not None else ""
                thr = "  THROTTLED" if doc["throttled"] else ""
                print(
                    f"{time.strftime('%H:%M:%S')}  {temps}{extra}{'  MHz ' + freqs if freqs else ''}{thr}", flush=True
                )
            n += 1
            if args.count is None or n < args.count:
                time.sleep(args.watch)
        return 0
    snap, doc = snapshot_doc()
    if args.json:
        write_json(doc, args.json)
        if args.json == "-":
            return 0
    if not snap.available and not snap.cpufreq and not snap.rails:
        print(
            f"no thermal sensors: nothing under {root.path('/sys/class/thermal')} or {root.path('/sys/class/hwmon')}"
            " reports a temperature, and there is no cpufreq or power rail to show (a VM, or a board without those"
            " drivers)"
        )
        return 0
    print(f"{'zone':<24} {'temp C':>8}  trip points")
    for z in snap.zones:
        trips = ", ".join(
            f"{t.type} {t.temp_c:g}" + (f" (hyst {t.hysteresis_c:g})" if t.hysteresis_c else "") for t in z.trips
        )
        temp = f"{z.temp_c:.1f}" if z.temp_c is not None else "-"
        print(f"{z.type:<24} {temp:>8}  {trips or '-'}")
        for c in z.cooling:
            print(f"{'':<24} {'':>8}  cooling {c.type} {c.cur_state}/{c.max_state}")
    for h in snap.hwmon:
        crit = f"  crit {h.crit_c:g}" if h.crit_c else ""
        print(f"{h.chip + '/' + h.label:<24} {h.temp_c:>8.1f}{crit}")
    for f in snap.cpufreq:
        cap = "  CAPPED" if f.capped else ""
        top = (f.max_khz or f.scaling_max_khz or 0) // 1000
        print(f"cpu{f.cpu:<21} {(f.cur_khz or 0) // 1000:>5} MHz  max {top} MHz{cap}")
    for r in snap.rails:
        print(f"{r.label + ' (' + r.source + ')':<24} {r.power_w:>8.2f} W")
    if snap.throttled:
        t = snap.throttled
        print(
            f"firmware throttle flags {t['raw']}: now {', '.join(t['now']) or 'none'}; "
            f"since boot {', '.join(t['since_boot']) or 'none'}"
        )
    if doc["headroom_c"] is not None:
        print(
            f"headroom {doc['headroom_c']:.1f} C: hottest {doc['max_c']:.1f} C, limit {doc['limit_c']:g} C "
            f"({doc['limit_source']})"
        )
    if doc["throttled"]:
        print("THROTTLED: " + "; ".join(doc["throttled"]))
    if snap.skipped:
        print(f"({snap.skipped} sensor reading(s) missing or garbled, skipped)")
    return 0


def _tune_cpus(args, root) -> list[int]:
    """--cpus, else the detected board's suggestion, else the CPUs the kernel already isolates."""
    if args.cpus:
        return _cpus(args.cpus, root)
    from edge_runtime.boards import detect

    board = detect(root)
    if board is not None:
        chosen = board.suggested_isolated(root.online_cpus())
        if chosen:
            return chosen
    isolated = root.cpus("isolated") or []
    if isolated:
        return isolated
    raise _UsageError("tune: which CPUs? give --cpus LIST (no board profile or isolated CPUs to start from)")


def cmd_tune(args) -> int:
    from edge_runtime import tuning
    from edge_runtime.cpulist import format_cpu_list

    root = _sysroot(args.sysroot)
    if args.action == "show":
        cpus = _tune_cpus(args, root)
        checks = tuning.audit(root, cpus)
        failed = [c for c in checks if c.status == "fail"]
        doc = {
            "schema": "edge-runtime/tune/1",
            "cpus": cpus,
            "tuned": not failed,
            "checks": [c.to_dict() for c in checks],
        }
        if args.json:
            write_json(doc, args.json)
            if args.json == "-":
                return 1 if failed else 0
        print(f"tuning for CPU {format_cpu_list(cpus)} (sysroot {args.sysroot})")
        for c in checks:
            print(f"  {c.status.upper():<5} {c.knob:<22} {c.seen}")
            if c.advice and c.status in ("fail", "warn"):
                print(f"        {'':<22} -> {c.advice}")
        print("not tuned: " + ", ".join(c.knob for c in failed) if failed else "tuned")
        return 1 if failed else 0
    state = tuning.state_dir(args.state_dir)
    if args.action == "apply":
        cpus = _tune_cpus(args, root)
        lines, save = tuning.apply(cpus, args.governor, args.sysroot, args.dry_run, state)
        print("\n".join(lines))
        if save is not None:
            print(f"saved what was there before in {save} (edge-runtime tune reset puts it back)")
        return 0
    print("\n".join(tuning.reset(args.sysroot, args.dry_run, state)))
    return 0


COMMANDS: dict[str, tuple[Callable[[argparse.Namespace], int], str]] = {
    "info": (cmd_info, "backends, devices and delegates installed; CPUs and isolation; the board"),
    "run": (cmd_run, "load a model and run one inference (random inputs unless given)"),
    "bench": (cmd_bench, "measure latency and jitter on pinned CPUs, with the interference that caused them"),
    "tune": (cmd_tune, "audit CPU isolation (show), or apply/reset it with the system_tuning scripts"),
    "thermal": (cmd_thermal, "thermal zones, sensors, trip points, frequencies, power rails and headroom"),
    "quantize": (cmd_quantize, "FP32 ONNX -> INT8 with calibration data, checked against FP32, mixed precision"),
}


def _load_kwargs(args) -> dict:
    """The `load()` arguments that `_model_args` flags describe."""
    return {
        "backend": args.backend,
        "device": args.device,
        "delegate": args.delegate,
        "delegate_options": _key_values(args.delegate_option, "--delegate-option"),
        "options": _key_values(args.option, "--option"),
        "threads": args.threads,
        "cpus": _cpus(args.cpus),
        "fallback": args.allow_fallback,
    }


def _model_args(p: argparse.ArgumentParser) -> None:
    """What `run` and `bench` share: the model, where it runs, its inputs."""
    p.add_argument("model", metavar="MODEL", help=".onnx, .xml (OpenVINO IR) or .tflite file")
    p.add_argument("--backend", help="onnxruntime, openvino or tflite (default: from the file type)")
    p.add_argument("--device", help="onnxruntime: cpu|cuda|tensorrt|qnn|openvino|...; openvino: CPU|GPU|NPU|AUTO")
    p.add_argument("--delegate", metavar="PATH", help="TFLite external delegate library (e.g. libvx_delegate.so)")
    p.add_argument("--delegate-option", action="append", metavar="K=V", help="option for the delegate (repeatable)")
    p.add_argument(
        "--option",
        action="append",
        metavar="K=V",
        help="backend option: onnxruntime provider option or session.* entry, OpenVINO property, "
        "tflite xnnpack=0 (repeatable)",
    )
    p.add_argument(
        "--allow-fallback",
        action="store_true",
        help="run on CPU when the device or delegate cannot be used (always reported)",
    )
    p.add_argument("--threads", type=int, metavar="N", help="inference threads (default: backend's, or len(--cpus))")
    p.add_argument(
        "--cpus",
        metavar="LIST",
        help="pin the process and all its threads to these CPUs (e.g. 2-3; 'board': the board profile's)",
    )
    p.add_argument("--input", action="append", metavar="NAME=FILE.npy", help="input from a .npy file (repeatable)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument(
        "--no-isolate",
        action="store_true",
        help="skip the crash check in a child process (faster; a crashing model then crashes this process)",
    )


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")


def _json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="FILE",
        help="machine-readable output: to stdout, or to FILE (text still printed)",
    )


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog=PROG, description="On-device inference runtime: load, run and measure INT8 models.")
    ap.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    ap.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("info", help=COMMANDS["info"][1], description=COMMANDS["info"][1])
    p.add_argument("--sysroot", default="/", metavar="DIR", help="read /proc and /sys below DIR (default /)")
    _json_flag(p)
    _common(p)

    p = sub.add_parser("quantize", help=COMMANDS["quantize"][1], description=COMMANDS["quantize"][1])
    p.add_argument("model", metavar="MODEL", help="FP32 .onnx model")
    p.add_argument("--calibration", required=True, metavar="PATH", help=".npy/.npz file or folder of them")
    p.add_argument(
        "--out", required=True, metavar="OUT", help="quantized model: .onnx (onnxruntime) or .xml (openvino)"
    )
    p.add_argument("--backend", default="onnxruntime", choices=["onnxruntime", "openvino"])
    p.add_argument("--method", default="minmax", choices=["minmax", "entropy", "percentile"], help="calibration")
    gran = p.add_mutually_exclusive_group()
    gran.add_argument("--per-channel", action="store_true", default=True, help="per-channel weights (default)")
    gran.add_argument("--per-tensor", action="store_true", help="one scale per weight tensor")
    p.add_argument(
        "--activations",
        default="auto",
        choices=["auto", "u8", "s8"],
        help="onnxruntime activation type (default: from the CPU: U8 on x86 without VNNI)",
    )
    p.add_argument("--validation", metavar="PATH", help="validation inputs (.npz may carry labels as 'y')")
    p.add_argument("--labels", metavar="PATH", help="validation labels (.npy), for top-1")
    p.add_argument(
        "--max-accuracy-drop",
        type=float,
        metavar="POINTS",
        help="keep the most sensitive layers in FP32 until the top-1 drop is at most this many points",
    )
    _json_flag(p)
    _common(p)

    p = sub.add_parser("thermal", help=COMMANDS["thermal"][1], description=COMMANDS["thermal"][1])
    p.add_argument("--watch", type=float, metavar="SECONDS", help="a live line every SECONDS (Ctrl-C to stop)")
    p.add_argument("--count", type=int, metavar="N", help="with --watch: stop after N lines")
    p.add_argument("--thermal-limit", type=float, metavar="C", help="limit for the headroom (default: board, trips)")
    p.add_argument("--sysroot", default="/", metavar="DIR", help="read /sys below DIR (default /)")
    _json_flag(p)
    _common(p)

    p = sub.add_parser("tune", help=COMMANDS["tune"][1], description=COMMANDS["tune"][1])
    p.add_argument("action", choices=["show", "apply", "reset"], help="show: audit (exit 1 when not tuned)")
    p.add_argument("--cpus", metavar="LIST", help="CPUs to set apart (default: the board profile's, or isolated ones)")
    p.add_argument("--governor", default="performance", help="apply: cpufreq governor (default performance)")
    p.add_argument("--dry-run", action="store_true", help="apply/reset: print what would change, change nothing")
    p.add_argument("--state-dir", metavar="DIR", help="where apply keeps its save file (default /var/lib/edge-runtime)")
    p.add_argument("--sysroot", default="/", metavar="DIR", help="operate on a tree below DIR (default /)")
    _json_flag(p)
    _common(p)

    p = sub.add_parser("run", help=COMMANDS["run"][1], description=COMMANDS["run"][1])
    _model_args(p)
    p.add_argument("--top", type=int, default=5, metavar="K", help="how many top values per output to show (default 5)")
    _json_flag(p)
    _common(p)

    p = sub.add_parser("bench", help=COMMANDS["bench"][1], description=COMMANDS["bench"][1])
    _model_args(p)
    p.add_argument("--rt-priority", type=int, metavar="P", help="SCHED_FIFO priority (1-99) for all threads")
    p.add_argument("--mlock", action="store_true", help="lock all memory (mlockall) for the run")
    p.add_argument("--warmup", type=int, default=50, metavar="N", help="untimed calls first (default 50)")
    p.add_argument("--warmup-time", type=float, metavar="SECONDS", help="warm up for this long instead of --warmup")
    length = p.add_mutually_exclusive_group()
    length.add_argument("--iterations", type=int, metavar="N", help="timed calls (default 1000)")
    length.add_argument("--duration", type=float, metavar="SECONDS", help="time calls for this long instead")
    p.add_argument(
        "--stress",
        action="append",
        metavar="KIND:CPUS",
        help="co-runner on other CPUs during the run: cpu:LIST or memory:LIST (repeatable)",
    )
    p.add_argument(
        "--platform-latency",
        type=float,
        nargs="?",
        const=3.0,
        metavar="SECONDS",
        help="run cyclictest on the same CPUs first (default 3 s) and report it beside the model",
    )
    p.add_argument(
        "--histogram",
        type=int,
        nargs="?",
        const=0,
        metavar="BUCKETS",
        help="print a histogram in cyclictest's layout (1 us buckets)",
    )
    p.add_argument("--hdr-log", metavar="FILE", help="write an HdrHistogram interval log (values in ns)")
    p.add_argument(
        "--thermal-limit",
        type=float,
        metavar="C",
        help="abort above this temperature (default: board profile, else lowest passive/critical trip)",
    )
    p.add_argument("--cooldown-to", type=float, metavar="C", help="wait until the board is below C before measuring")
    p.add_argument(
        "--cooldown-timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="give up waiting for --cooldown-to after this long (default 600; exit 1)",
    )
    p.add_argument(
        "--sample-interval",
        type=float,
        default=0.25,
        metavar="SECONDS",
        help="thermal/frequency/power sampling period during the run (default 0.25)",
    )
    p.add_argument("--prom", metavar="FILE", help="also write the result as a Prometheus textfile (node_exporter)")
    p.add_argument(
        "--sysroot",
        default="/",
        metavar="DIR",
        help="read the observed system (/proc, /sys) below DIR (default /); pinning acts on this process",
    )
    _json_flag(p)
    _common(p)
    return ap


def _one_line_warning(message, category, filename, lineno, file=None, line=None):
    print(f"{PROG}: warning: {' '.join(str(message).split())}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    if not debug:
        warnings.showwarning = _one_line_warning
    try:
        args = build_parser().parse_args(argv)
        if not args.command:
            build_parser().print_help()
            return 2
        return COMMANDS[args.command][0](args)
    except EdgeRuntimeError as err:
        if debug:
            raise
        print(f"{PROG}: error: {err.one_line()}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as err:
        if debug:
            raise
        print(
            f"{PROG}: internal error: {type(err).__name__}: {' '.join(str(err).split())[:500]} "
            "(run with --debug for the traceback, and please report it)",
            file=sys.stderr,
        )
        return 3


if __name__ == "__main__":
    sys.exit(main())
