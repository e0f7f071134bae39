"""`edge-runtime`: the board-side command line. Subcommands are small functions in a table; `main()` is the one place
that turns errors into one line and an exit code (0 ok, 1 failed check, 2 user error, 3 internal error).
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import os
import platform
import re
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

from edge_runtime import __version__
from edge_runtime.errors import EdgeRuntimeError, FeedError, Interrupted, UserError
from edge_runtime.system.files import Output, check_distinct, finite, load_npy, plan_output, write_json, write_output

PROG = "edge-runtime"
MAX_THREADS = 1024  # more inference threads than any board has cores, by far
MAX_WARMUP = 50_000_000  # untimed calls; use --warmup-time for long warm-ups
MAX_WARMUP_S = 3600.0
MAX_DURATION_S = 7 * 86400.0  # a longer soak is a campaign of runs; one run keeps at most 50M samples anyway


class _UsageError(UserError):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so bad flags get the same one-line error and exit code 2."""

    def error(self, message: str):  # type: ignore[override]
        # "argument --threads: 0: must be at least 1" -> "--threads 0: must be at least 1": flag, value, what is wrong
        m = re.match(r"argument ([^:]+?)(?:/[^:]*)?: (.*)$", message)
        if m and not m.group(2).startswith(("invalid", "expected", "not allowed", "one of")):
            message = f"{m.group(1)} {m.group(2)}"
        raise _UsageError(f"{self.prog}: {message}", hint=f"see '{self.prog} --help'")


# ---------------------------------------------------------------------------------------- numbers from the user
# Every count, duration and temperature is bounded by what it can mean here: NaN, infinities, negative counts and
# values no machine can hold are refused when the flags are parsed, before anything runs.
def _integer(low: int, high, what: str = ""):
    """argparse type: an integer in [low, high()] (high may be a callable: a bound known only on this machine)."""

    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        top, why = high() if callable(high) else (high, "")
        if value < low:
            raise argparse.ArgumentTypeError(f"{text}: must be at least {low}{what}")
        if top is not None and value > top:
            raise argparse.ArgumentTypeError(f"{text}: at most {top:,}{why or what}")
        return value

    return parse


def _real(low: float, high: float, unit: str, *, low_open: bool = False, why: str = ""):
    """argparse type: a finite number in [low, high] (or (low, high] with low_open)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text}: must be a finite number of {unit}")
        if value < low or (low_open and value == low):
            raise argparse.ArgumentTypeError(f"{text}: must be {'>' if low_open else '>='} {low:g} {unit}")
        if value > high:
            raise argparse.ArgumentTypeError(f"{text}: at most {high:g} {unit}{why}")
        return value

    return parse


def _celsius(text: str) -> float:
    """A temperature a sensor could report (thermal.SILICON_RANGE_C); anything else is a typo."""
    from edge_runtime.system.thermal import SILICON_RANGE_C

    lo, hi = SILICON_RANGE_C
    return _real(lo, hi, "C", why=" (beyond what silicon temperature sensors report)")(text)


def _samples_bound() -> tuple[int, str]:
    from edge_runtime.measure.loop import max_samples

    n = max_samples()
    return n, " samples fit in this machine's memory (8 bytes each, kept and sorted)"


def _word(text: str) -> str:
    """argparse type for a name (--backend, --device): not empty, one word."""
    if not text.strip() or text != text.strip() or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError(f"{text!r}: not a name")
    return text


def _path(text: str) -> str:
    """argparse type for a path: not empty, no NUL byte (an empty --json used to be ignored silently)."""
    if text == "":
        raise argparse.ArgumentTypeError("'': empty path")
    if "\x00" in text:
        raise argparse.ArgumentTypeError(f"{text!r}: not a valid path (NUL byte)")
    return text


# ---------------------------------------------------------------------------------------------------------- output
def _plan_outputs(
    pairs: list[tuple[str, str | None]], inputs: list[tuple[str, object]] = (), regular_only: tuple[str, ...] = ()
) -> dict[str, Output]:
    """Check every output of a command before it runs: each writable, none the same as another or as an input."""
    outs = {
        flag: plan_output(flag, dest, regular_only=flag in regular_only) for flag, dest in pairs if dest is not None
    }
    check_distinct(outs.values(), inputs)
    return outs


def _input_paths(args, session=None) -> list[tuple[str, object]]:
    """The files `run`/`bench` read: the model (and its IR weights), --input files, a delegate given by path."""
    found: list[tuple[str, object]] = [("the model", args.model)]
    model = Path(args.model)
    if model.suffix.lower() == ".xml":
        found.append(("the model's weights", model.with_suffix(".bin")))
    elif model.suffix.lower() == ".onnx" and os.path.isfile(model):
        from edge_runtime.runtime.model import onnx_external_files

        try:
            found += [("the model's external data", e) for e in onnx_external_files(model)]
        except EdgeRuntimeError:
            pass  # an unreadable model is refused, with its reason, when it is loaded
    for spec in args.input or []:
        for p in {spec, spec.partition("=")[2] or spec}:
            found.append(("an --input file", p))
    if getattr(args, "delegate", None) and os.sep in args.delegate:
        found.append(("the --delegate library", args.delegate))
    return found


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
    from edge_runtime.system.cpulist import parse_cpu_list

    if text == "board":
        from edge_runtime.system.boards import detect
        from edge_runtime.system.root import SystemRoot

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
    from edge_runtime.runtime import backends
    from edge_runtime.system.cpulist import format_cpu_list

    root = _sysroot(args.sysroot)
    outs = _plan_outputs([("--json", args.json)])
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
    from edge_runtime.system.boards import detect

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
    if "--json" in outs:
        write_json(doc, outs["--json"])
        if outs["--json"].is_stdout:
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
        "  ".join(
            f"{k}={format_cpu_list(v)}"
            if k != "garbled"
            else "  ".join(f"{g}={raw!r} (garbled)" for g, raw in v.items())
            for k, v in doc["isolation"].items()
        )
        or "none on the kernel command line"
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
        if not os.path.lexists(file):
            raise FeedError(f"--input {spec!r}: no such file {file!r}")
        given[name] = load_npy(file, "--input", error=FeedError)
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
    from edge_runtime.runtime.session import load

    if args.top < 0:
        raise _UsageError(f"--top {args.top}: must be >= 0")
    outs = _plan_outputs([("--json", args.json)], _input_paths(args))
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
    if "--json" in outs:
        write_json(doc, outs["--json"])
        if outs["--json"].is_stdout:
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
    from edge_runtime.measure.bench import BenchConfig, format_report, run_bench
    from edge_runtime.measure.corunners import StressSpec
    from edge_runtime.measure.loop import StopRequest
    from edge_runtime.measure.stats import cyclictest_histogram

    root = _sysroot(args.sysroot)
    # Before the run, not after it: a result is never lost to a bad path.
    outs = _plan_outputs(
        [("--json", args.json), ("--hdr-log", args.hdr_log), ("--prom", args.prom)], _input_paths(args)
    )
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
        hdr_log=outs.get("--hdr-log"),
        isolate=not args.no_isolate,
        thermal_limit_c=args.thermal_limit,
        cooldown_to_c=args.cooldown_to,
        cooldown_timeout_s=args.cooldown_timeout,
        sample_interval_s=args.sample_interval,
    )
    tty = sys.stderr is not None and sys.stderr.isatty()

    def progress(msg: str) -> None:
        print(f"\r{msg}\033[K" if tty else msg, end="" if tty else "\n", file=sys.stderr, flush=True)

    stop = StopRequest()  # a signal during the measured loop ends it at the next chunk, keeping the samples
    _SIGNALS.stop = stop
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = run_bench(cfg, root, progress, stop=stop)
    finally:
        _SIGNALS.stop = None
        if tty:
            print("\r\033[K", end="", file=sys.stderr)
    for w in caught:
        print(f"{PROG}: warning: {w.message}", file=sys.stderr)
    samples = result.pop("_samples_ns")
    us = samples // 1000
    values, counts = np.unique(us, return_counts=True)
    result["histogram_us"] = [[int(v), int(c)] for v, c in zip(values, counts, strict=True)]
    aborted = result.get("aborted")
    # A run stopped at the thermal limit is a failed check; one stopped by a signal exits as that signal says.
    code = (128 + stop.signum if stop.signum else 1) if aborted else 0
    if "--prom" in outs:
        from edge_runtime.system.prom import textfile

        write_output(outs["--prom"], textfile(result))
    if "--json" in outs:
        write_json(result, outs["--json"])
        if outs["--json"].is_stdout:
            if aborted:
                print(f"{PROG}: {aborted['reason']}: partial result written", file=sys.stderr)
            return code
    sys.stdout.write(format_report(result))
    if args.histogram is not None:
        sys.stdout.write(cyclictest_histogram(samples, args.histogram or None))
    if aborted and stop.signum:
        print(f"{PROG}: {aborted['reason']}: partial result written", file=sys.stderr)
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
    if args.labels and not args.validation:
        raise _UsageError("--labels goes with --validation")
    outs = q.plan_outputs(cfg, args.json)
    res = q.run(cfg, lambda m: print(m, file=sys.stderr, flush=True), outputs=outs)
    for w in res.warnings:
        print(f"{PROG}: warning: {w}", file=sys.stderr)
    doc = res.doc
    doc["warnings"] = res.warnings
    code = 1 if doc.get("meets_budget") is False else 0
    if "--json" in outs:
        write_json(doc, outs["--json"])
        if outs["--json"].is_stdout:
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
        exact = a["max_abs_error"] == 0
        sqnr = f"{a['sqnr_db']:.1f}" if a["sqnr_db"] is not None else ("exact" if exact else "-")
        err = f"{a['max_abs_error']:.3g}" if a["max_abs_error"] is not None else "-"
        print(
            f"{name:<10} {pct('fp32_top1'):>10} {pct('int8_top1'):>8} {pct('top1_agreement'):>7} {drop:>9} "
            f"{sqnr:>8} {err:>8}"
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
    from edge_runtime.system.files import check_input
    from edge_runtime.system.root import SystemRoot

    check_input(path, "--sysroot", error=_UsageError, directory=True)
    return SystemRoot(path)


def cmd_thermal(args) -> int:
    from edge_runtime.system.boards import detect
    from edge_runtime.system.thermal import pick_rail, read_snapshot, thermal_limit, throttle_reasons

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

    if args.count is not None and args.watch is None:
        raise _UsageError("--count goes with --watch")
    if args.watch is not None:
        if args.json not in (None, "-"):
            raise _UsageError("--watch writes one JSON line per interval to stdout: use --json without a FILE")
        n = 0
        while args.count is None or n < args.count:
            snap, doc = snapshot_doc()
            if args.json:
                print(
                    json.dumps(
                        finite(
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
                        allow_nan=False,
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
    outs = _plan_outputs([("--json", args.json)])
    snap, doc = snapshot_doc()
    if "--json" in outs:
        write_json(doc, outs["--json"])
        if outs["--json"].is_stdout:
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
            state = f"{'?' if c.cur_state is None else c.cur_state}/{'?' if c.max_state is None else c.max_state}"
            print(f"{'':<24} {'':>8}  cooling {c.type} {state}")
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
        cpus = _cpus(args.cpus, root)
        online = root.online_cpus()
        bad = sorted(set(cpus) - set(online)) if online else []
        if bad:
            from edge_runtime.system.cpulist import format_cpu_list

            raise _UsageError(
                f"--cpus {args.cpus!r}: CPU {format_cpu_list(bad)} does not exist on {root.root} "
                f"(online: {format_cpu_list(online)})"
            )
        return cpus
    from edge_runtime.system.boards import detect

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
    from edge_runtime.system import tuning
    from edge_runtime.system.cpulist import format_cpu_list

    root = _sysroot(args.sysroot)
    given = {
        "--governor": args.governor is not None,
        "--dry-run": args.dry_run,
        "--state-dir": bool(args.state_dir),
        "--cpus": args.cpus is not None,
    }
    allowed = {"show": {"--cpus"}, "apply": set(given), "reset": {"--dry-run", "--state-dir"}}[args.action]
    stray = [flag for flag, on in given.items() if on and flag not in allowed]
    if stray:
        raise _UsageError(f"tune {args.action}: {', '.join(stray)} does not apply here (ignored flags hide mistakes)")
    outs = _plan_outputs([("--json", args.json)])
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
        if "--json" in outs:
            write_json(doc, outs["--json"])
            if outs["--json"].is_stdout:
                return 1 if failed else 0
        print(f"tuning for CPU {format_cpu_list(cpus)} (sysroot {args.sysroot})")
        for c in checks:
            print(f"  {c.status.upper():<5} {c.knob:<22} {c.seen}")
            if c.advice and c.status in ("fail", "warn"):
                print(f"        {'':<22} -> {c.advice}")
        print("not tuned: " + ", ".join(c.knob for c in failed) if failed else "tuned")
        return 1 if failed else 0
    state = tuning.state_dir(args.state_dir)
    save = None
    if args.action == "apply":
        cpus = _tune_cpus(args, root)
        lines, save = tuning.apply(cpus, args.governor or "performance", args.sysroot, args.dry_run, state)
        if save is not None:
            lines.append(f"saved what was there before in {save} (edge-runtime tune reset puts it back)")
    else:
        lines = tuning.reset(args.sysroot, args.dry_run, state)
    if "--json" in outs:
        doc = {
            "schema": "edge-runtime/tune/1",
            "action": args.action,
            "dry_run": args.dry_run,
            "messages": lines,
            "save_file": str(save) if save else None,
        }
        write_json(doc, outs["--json"])
        if outs["--json"].is_stdout:
            return 0
    print("\n".join(lines))
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
    p.add_argument("model", metavar="MODEL", type=_path, help=".onnx, .xml (OpenVINO IR) or .tflite file")
    p.add_argument("--backend", type=_word, help="onnxruntime, openvino or tflite (default: from the file type)")
    p.add_argument(
        "--device", type=_word, help="onnxruntime: cpu|cuda|tensorrt|qnn|openvino|...; openvino: CPU|GPU|NPU|AUTO"
    )
    p.add_argument(
        "--delegate", metavar="PATH", type=_path, help="TFLite external delegate library (e.g. libvx_delegate.so)"
    )
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
    p.add_argument(
        "--threads",
        type=_integer(1, MAX_THREADS),
        metavar="N",
        help="inference threads (default: backend's, or len(--cpus))",
    )
    p.add_argument(
        "--cpus",
        metavar="LIST",
        help="pin the process and all its threads to these CPUs (e.g. 2-3; 'board': the board profile's)",
    )
    p.add_argument(
        "--input", action="append", type=_path, metavar="NAME=FILE.npy", help="input from a .npy file (repeatable)"
    )
    p.add_argument("--seed", type=_integer(0, 2**64 - 1), default=0, help="seed of the random inputs (default 0)")
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
        type=_path,
        metavar="FILE",
        help="machine-readable output: to stdout, or to FILE (text still printed)",
    )


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog=PROG, description="On-device inference runtime: load, run and measure INT8 models.")
    ap.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    ap.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("info", help=COMMANDS["info"][1], description=COMMANDS["info"][1])
    p.add_argument(
        "--sysroot", default="/", type=_path, metavar="DIR", help="read /proc and /sys below DIR (default /)"
    )
    _json_flag(p)
    _common(p)

    p = sub.add_parser("quantize", help=COMMANDS["quantize"][1], description=COMMANDS["quantize"][1])
    p.add_argument("model", metavar="MODEL", help="FP32 .onnx model")
    p.add_argument("--calibration", required=True, type=_path, metavar="PATH", help=".npy/.npz file or folder of them")
    p.add_argument(
        "--out",
        required=True,
        type=_path,
        metavar="OUT",
        help="quantized model: .onnx (onnxruntime) or .xml (openvino)",
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
    p.add_argument("--validation", type=_path, metavar="PATH", help="validation inputs (.npz may carry labels as 'y')")
    p.add_argument("--labels", type=_path, metavar="PATH", help="validation labels (.npy), for top-1")
    p.add_argument(
        "--max-accuracy-drop",
        type=_real(0.0, 100.0, "points"),
        metavar="POINTS",
        help="keep the most sensitive layers in FP32 until the top-1 drop is at most this many points",
    )
    _json_flag(p)
    _common(p)

    p = sub.add_parser("thermal", help=COMMANDS["thermal"][1], description=COMMANDS["thermal"][1])
    p.add_argument(
        "--watch",
        type=_real(0.1, 86400.0, "seconds", why=" (a day)"),
        metavar="SECONDS",
        help="a live line every SECONDS (Ctrl-C to stop)",
    )
    p.add_argument("--count", type=_integer(1, 10**9), metavar="N", help="with --watch: stop after N lines")
    p.add_argument("--thermal-limit", type=_celsius, metavar="C", help="limit for the headroom (default: board, trips)")
    p.add_argument("--sysroot", default="/", metavar="DIR", help="read /sys below DIR (default /)")
    _json_flag(p)
    _common(p)

    p = sub.add_parser("tune", help=COMMANDS["tune"][1], description=COMMANDS["tune"][1])
    p.add_argument("action", choices=["show", "apply", "reset"], help="show: audit (exit 1 when not tuned)")
    p.add_argument("--cpus", metavar="LIST", help="CPUs to set apart (default: the board profile's, or isolated ones)")
    p.add_argument("--governor", help="apply: cpufreq governor (default performance)")
    p.add_argument("--dry-run", action="store_true", help="apply/reset: print what would change, change nothing")
    p.add_argument(
        "--state-dir", type=_path, metavar="DIR", help="where apply keeps its save file (default /var/lib/edge-runtime)"
    )
    p.add_argument("--sysroot", default="/", type=_path, metavar="DIR", help="operate on a tree below DIR (default /)")
    _json_flag(p)
    _common(p)

    p = sub.add_parser("run", help=COMMANDS["run"][1], description=COMMANDS["run"][1])
    _model_args(p)
    p.add_argument(
        "--top",
        type=_integer(0, 10**6),
        default=5,
        metavar="K",
        help="how many top values per output to show (default 5)",
    )
    _json_flag(p)
    _common(p)

    p = sub.add_parser("bench", help=COMMANDS["bench"][1], description=COMMANDS["bench"][1])
    _model_args(p)
    p.add_argument(
        "--rt-priority", type=_integer(1, 99), metavar="P", help="SCHED_FIFO priority (1-99) for all threads"
    )
    p.add_argument("--mlock", action="store_true", help="lock all memory (mlockall) for the run")
    p.add_argument(
        "--warmup", type=_integer(0, MAX_WARMUP), default=50, metavar="N", help="untimed calls first (default 50)"
    )
    p.add_argument(
        "--warmup-time",
        type=_real(0.0, MAX_WARMUP_S, "seconds"),
        metavar="SECONDS",
        help="warm up for this long instead of --warmup",
    )
    length = p.add_mutually_exclusive_group()
    length.add_argument(
        "--iterations", type=_integer(1, _samples_bound), metavar="N", help="timed calls (default 1000)"
    )
    length.add_argument(
        "--duration",
        type=_real(0.0, MAX_DURATION_S, "seconds", low_open=True, why=" (7 days)"),
        metavar="SECONDS",
        help="time calls for this long instead",
    )
    p.add_argument(
        "--stress",
        action="append",
        metavar="KIND:CPUS",
        help="co-runner on other CPUs during the run: cpu:LIST or memory:LIST (repeatable)",
    )
    p.add_argument(
        "--platform-latency",
        type=_real(1.0, 3600.0, "seconds", why=" (cyclictest runs whole seconds, at least 1)"),
        nargs="?",
        const=3.0,
        metavar="SECONDS",
        help="run cyclictest on the same CPUs first (default 3 s) and report it beside the model",
    )
    p.add_argument(
        "--histogram",
        type=_integer(0, 100_000),
        nargs="?",
        const=0,
        metavar="BUCKETS",
        help="print a histogram in cyclictest's layout (1 us buckets)",
    )
    p.add_argument("--hdr-log", type=_path, metavar="FILE", help="write an HdrHistogram interval log (values in ns)")
    p.add_argument(
        "--thermal-limit",
        type=_celsius,
        metavar="C",
        help="abort above this temperature (default: board profile, else lowest passive/critical trip)",
    )
    p.add_argument("--cooldown-to", type=_celsius, metavar="C", help="wait until the board is below C before measuring")
    p.add_argument(
        "--cooldown-timeout",
        type=_real(0.0, 86400.0, "seconds"),
        default=600.0,
        metavar="SECONDS",
        help="give up waiting for --cooldown-to after this long (default 600; exit 1)",
    )
    p.add_argument(
        "--sample-interval",
        type=_real(1e-3, 3600.0, "seconds"),
        default=0.25,
        metavar="SECONDS",
        help="thermal/frequency/power sampling period during the run (default 0.25)",
    )
    p.add_argument(
        "--prom", type=_path, metavar="FILE", help="also write the result as a Prometheus textfile (node_exporter)"
    )
    p.add_argument(
        "--sysroot",
        default="/",
        type=_path,
        metavar="DIR",
        help="read the observed system (/proc, /sys) below DIR (default /); pinning acts on this process",
    )
    _json_flag(p)
    _common(p)
    return ap


def _one_line_warning(message, category, filename, lineno, file=None, line=None):
    if sys.stderr is not None:
        print(f"{PROG}: warning: {' '.join(str(message).split())}", file=sys.stderr)


class _Signals:
    """SIGINT, SIGTERM and SIGHUP end a command as Ctrl-C does (co-runners stopped, scheduling restored on the way
    out) and it exits 128 + the signal. While a bench measures (`stop` set), the signal only asks the loop to end at
    the next chunk, so the partial result is kept and written, marked interrupted."""

    stop = None

    pid = os.getpid()

    def handler(self, signum, frame) -> None:
        if os.getpid() != self.pid:
            # A child forked by a library (multiprocessing): not ours to interpret; die as the signal says.
            import signal

            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if self.stop is not None and self.stop.armed:
            self.stop.request(signum)
            return
        raise Interrupted(signum)

    def install(self) -> None:
        import signal

        self.pid = os.getpid()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            try:
                signal.signal(sig, self.handler)
            except (ValueError, OSError):  # not the main thread (main() called from a library): leave them
                return


_SIGNALS = _Signals()


def _reopen_closed_std_fds() -> set[int]:
    """Descriptors 0-2 that were closed at start, now opened on /dev/null: otherwise the next file opened would become
    "standard output" and a child or a print could write into it."""
    closed = set()
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            closed.add(fd)
    for fd in sorted(closed):
        new = os.open(os.devnull, os.O_RDWR)
        if new != fd:
            os.dup2(new, fd)
            os.close(new)
    return closed


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    if not debug:
        warnings.showwarning = _one_line_warning
    closed = _reopen_closed_std_fds()
    from edge_runtime.system import files

    files.CLOSED_STD_FDS.update(closed)

    def err_line(text: str) -> None:
        if sys.stderr is not None and 2 not in closed:
            print(f"{PROG}: {text}", file=sys.stderr)

    _SIGNALS.install()
    try:
        args = build_parser().parse_args(argv)
        if not args.command:
            build_parser().print_help()
            return 2
        if 1 in closed or sys.stdout is None:
            # Nothing would see the result: refuse before the work, unless it goes to a file.
            if getattr(args, "json", None) in (None, "-"):
                raise _UsageError(
                    "standard output is closed: the result would be lost", hint="give --json FILE, or open stdout"
                )
            sys.stdout = open(os.devnull, "w")
        code = COMMANDS[args.command][0](args)
        if sys.stdout is not None:
            sys.stdout.flush()
        return code
    except EdgeRuntimeError as err:
        if debug:
            raise
        err_line(f"error: {err.one_line()}")
        return err.exit_code
    except KeyboardInterrupt as err:
        signum = getattr(err, "signum", None) or 2
        err_line("interrupted" + (f" ({_signal_name(signum)})" if signum != 2 else ""))
        return 128 + signum
    except BrokenPipeError:
        _quiet_stdout()
        return 0
    except OSError as err:
        if debug:
            raise
        if err.errno in (errno.ENOSPC, errno.EIO, errno.EBADF) and err.filename is None:
            _quiet_stdout()
            err_line(f"error: cannot write the output: {err.strerror}")
            return 2
        err_line(_internal(err))
        return 3
    except Exception as err:
        if debug:
            raise
        err_line(_internal(err))
        return 3


def _internal(err: BaseException) -> str:
    return (
        f"internal error: {type(err).__name__}: {' '.join(str(err).split())[:500]} "
        "(run with --debug for the traceback, and please report it)"
    )


def _signal_name(signum: int) -> str:
    import signal

    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _quiet_stdout() -> None:
    """After a failed write to stdout, point it at /dev/null so the interpreter's exit flush cannot fail again."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, 1)
        os.close(fd)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
