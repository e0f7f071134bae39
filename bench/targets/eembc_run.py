"""The eembc target's runs (issue 27): what its URL asks for, MLPerf Tiny's performance and accuracy modes on an
EembcDevice, and the record they make: `edge-runtime/bench/1`, the record every target writes, so a microcontroller's
run is stored, compared, baselined and reported beside a Linux board's and a GPU server's.

URL options (beside pyserial's `baud`), each checked in one line before anything is opened:
- `mode=performance` (default): a probe sizes N, then `loops` loops of at least `loop_s` s by the device's timer;
  throughput is the median of the loops' inferences per second and latency the mean per inference that gives
  (MLPerf Tiny's figures). Default loop length: the request's duration shared by the loops, else the rule's 10 s.
- `mode=accuracy&data=FILE.npz`: every sample of `x` loaded and inferred once (`infer 1 0`, as the runner's accuracy
  mode), the result vectors kept; top-1 against `y` for a classifier, the area under the ROC curve of the device's
  anomaly score for ad01 (MLPerf Tiny's metric for it). Each inference is then timed alone by the device's laps: a
  real distribution, so this mode's record has percentiles.
- `loops`, `loop_s`, `warmups` (the runner's 10), `input_bytes` (a submitter's own model: the size of its input),
  `timeout` (s a command may take before its answer; an inference loop gets its own length on top).

Decided here:
- The input of a performance run is seeded random data of the size and type the reference firmware reads for its
  model (ic01 32x32x3 uint8, kws01 49x10 int8, vww01 96x96x3 uint8, ad01 640 float32, as the reference submitters'
  th_load_tensor take them): the run's time does not depend on the values.
- Performance mode has no per-inference distribution: the device times a loop, not an inference. The percentiles,
  min, max and the histogram are absent (null), never made up from loop means; `firmware.why_no_percentiles` says
  so, and the reports print it.
- The record's `firmware.mlperf_rule` says whether the run is one MLPerf Tiny counts (at least 5 loops of at least
  10 s): a shorter run is a measurement, not a score.

Never: read a device line here (eembc.py and eembc_protocol.py do), or time an inference with the host's clock."""

from __future__ import annotations

import math
import socket
import statistics
import time
import urllib.parse
from dataclasses import dataclass

import numpy as np

from bench.targets.base import TargetError
from edge_runtime.errors import UserError

RULE_LOOPS, RULE_LOOP_S = 5, 10.0  # MLPerf Tiny's performance mode: the median of loops of at least 10 s
MODEL_INPUTS = {"ic01": ((32, 32, 3), "uint8"), "kws01": ((49, 10), "int8"), "vww01": ((96, 96, 3), "uint8"),
                "ad01": ((640,), "float32")}  # fmt: skip
CLASSES = {"ic01": 10, "kws01": 12, "vww01": 2, "ad01": 2}  # what a label may be (ad01: 0 normal, 1 anomaly)
MAX_INPUT_BYTES = 1 << 22  # a microcontroller holds far less; a bigger number is a typo
MAX_SAMPLES = 100_000  # an accuracy set is loaded a sample at a time over a UART: ~0.3 s each at 115200 baud
WHY_NO_PERCENTILES = ("the device times each loop of N inferences, not each inference (MLPerf Tiny's performance "
                      "mode): a mean per loop, so there is no distribution to take percentiles of")  # fmt: skip
TIMED_CALL = "the firmware's th_infer, N times between two m-lap-us laps (the device's own timer)"
_NUMBERS = {  # option: (type, low, high)
    "loops": (int, 1, 1000), "loop_s": (float, 0.001, 3600.0), "warmups": (int, 0, 1_000_000),
    "input_bytes": (int, 1, MAX_INPUT_BYTES), "timeout": (float, 0.05, 3600.0),
}  # fmt: skip
OPTIONS = {"mode", "data", *_NUMBERS}
# What pyserial itself reads from a network URL's query (its own `timeout` is rfc2217's negotiation, not ours: ours
# wins); a serial device's URL takes only `baud`.
PYSERIAL_OPTIONS = {"socket": {"logging"}, "rfc2217": {"logging", "ign_set_control", "poll_modem"}}


@dataclass(frozen=True)
class RunOptions:
    mode: str = "performance"
    data: str | None = None
    loops: int = RULE_LOOPS
    loop_s: float | None = None  # None: the request's duration shared by the loops, else RULE_LOOP_S
    warmups: int = 10
    input_bytes: int | None = None
    timeout: float | None = None


def split_url(url: str) -> tuple[str, RunOptions]:
    """(the device's URL without this module's options, the options); one UserError line for a bad one."""
    u = urllib.parse.urlsplit(url)
    ours, rest = {}, []
    passes = PYSERIAL_OPTIONS.get(u.scheme.lower().partition("+")[2], set()) | {"baud"}
    for key, value in urllib.parse.parse_qsl(u.query, keep_blank_values=True):
        if key in ours or key in dict(rest):
            raise UserError(f"target {url!r}: {key} given twice")
        if key not in OPTIONS and key not in passes:
            known = ", ".join(sorted(OPTIONS | passes))
            raise UserError(f"target {url!r}: unknown option {key!r} (known: {known})")
        (ours.__setitem__(key, value) if key in OPTIONS else rest.append((key, value)))
    opts = {}
    for key, value in ours.items():
        if key in _NUMBERS:
            kind, low, high = _NUMBERS[key]
            try:
                number = kind(value)
            except ValueError:
                number = None
            if number is None or not (isinstance(number, int) or math.isfinite(number)) or not low <= number <= high:
                bounds = f"{low:,} to {high:,}" if kind is int else f"{low:g} to {high:g}"
                raise UserError(f"target {url!r}: {key} {value!r}: a {'whole ' if kind is int else ''}number {bounds}")
            opts[key] = number
    mode = ours.get("mode", "performance")
    if mode not in ("performance", "accuracy"):
        raise UserError(f"target {url!r}: mode {mode!r}: performance or accuracy (energy mode needs a power monitor "
                        "and the runner's I/O manager: not offered)")  # fmt: skip
    if (mode == "accuracy") != bool(ours.get("data")):
        raise UserError(f"target {url!r}: " + ("mode=accuracy needs data=FILE.npz (x: the inputs, y: the labels)"
                                              if mode == "accuracy" else "data= is for mode=accuracy"))  # fmt: skip
    device = urllib.parse.urlunsplit(u._replace(query=urllib.parse.urlencode(rest)))
    if url.startswith("eembc:///") and not device.startswith("eembc:///"):  # urlunsplit drops an empty `//`
        device = "eembc://" + device[len("eembc:") :]
    return device, RunOptions(mode=mode, data=ours.get("data") or None, **opts)


def input_size(model: str, opts: RunOptions) -> tuple[tuple[int, ...], str]:
    """The shape and type the firmware's model reads; `input_bytes` for a model MLPerf Tiny does not name."""
    if opts.input_bytes:
        return (opts.input_bytes,), "uint8"
    if model not in MODEL_INPUTS:
        raise TargetError(f"model {model!r}: its input size is not known here: give input_bytes=N", "user-error")
    return MODEL_INPUTS[model]


def random_input(model: str, opts: RunOptions, seed: int) -> bytes:
    shape, dtype = input_size(model, opts)
    rng = np.random.default_rng(seed)
    if dtype == "float32":
        return rng.random(shape, dtype=np.float32).tobytes()
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True).tobytes()


def read_dataset(path: str, model: str | None, opts: RunOptions) -> tuple[list[bytes], np.ndarray]:
    """The samples (each as the bytes the device reads) and labels of an accuracy set: a .npz with `x` (samples
    first) and `y` (one label each: a class, or 1 for an anomaly with ad01). One UserError line naming the file."""
    from edge_runtime.files.inputs import load_npz

    z = load_npz(path, "data")
    shown = f"data {path!r}"
    if "x" not in z or "y" not in z:
        raise UserError(f"{shown}: needs arrays x (the inputs) and y (the labels); it has {', '.join(z) or 'none'}")
    x, y = z["x"], np.asarray(z["y"]).reshape(-1)
    if x.ndim < 1 or not 1 <= len(x) <= MAX_SAMPLES or len(y) != len(x):
        raise UserError(f"{shown}: {len(x) if x.ndim else 0} inputs and {len(y)} labels: 1 to {MAX_SAMPLES:,} of each, "
                        "one label an input")  # fmt: skip
    if y.dtype.kind not in "iub" or (len(y) and y.min() < 0):
        raise UserError(f"{shown}: y must hold class numbers (whole numbers >= 0), not {y.dtype}")
    if x.dtype.kind not in "iuf":
        raise UserError(f"{shown}: x must hold the inputs as numbers, not {x.dtype}")
    if x.ndim < 2:
        raise UserError(f"{shown}: x must hold one input a row (shape {x.shape}: at least 2 dimensions)")
    if x.dtype.kind == "f" and not np.isfinite(x).all():
        raise UserError(f"{shown}: x holds NaN or infinity")
    if model is None:  # checked before the device says its model: the size waits for it
        return [np.ascontiguousarray(v).tobytes() for v in x], y.astype(np.int64)
    shape, dtype = input_size(model, opts)
    need = int(np.prod(shape)) * np.dtype(dtype).itemsize
    classes = CLASSES.get(model) if not opts.input_bytes else None
    if model == "ad01" and not opts.input_bytes and len(set(y.tolist()) & {0, 1}) < 2:
        raise UserError(f"{shown}: an area under the ROC curve needs normal (y=0) and anomalous (y=1) samples")
    if classes and int(y.max()) >= classes:
        what = f"classes (0 to {classes - 1})" if model != "ad01" else "labels (0 normal, 1 anomaly)"
        raise UserError(f"{shown}: label {int(y.max())}: the device's {model} has {classes} {what}")
    if x[0].nbytes != need or (not opts.input_bytes and x.dtype != np.dtype(dtype)):
        got = f"{'x'.join(map(str, x.shape[1:]))} {x.dtype}"
        raise UserError(f"{shown}: an input is {x[0].nbytes} bytes ({got}); the device's {model} reads {need} "
                        f"({'x'.join(map(str, shape))} {dtype})")  # fmt: skip
    return [np.ascontiguousarray(s).tobytes() for s in x], y.astype(np.int64)


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """The area under the ROC curve of `scores` (higher: more anomalous) for labels 1 against 0: the Mann-Whitney
    statistic with tied scores sharing their ranks (what sklearn's roc_auc_score gives)."""
    pos, neg = labels == 1, labels == 0
    if not pos.any() or not neg.any():
        raise UserError("an area under the ROC curve needs normal (y=0) and anomalous (y=1) samples")
    _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    ranks = (ends - (counts - 1) / 2.0)[inverse]  # the mean rank of each run of ties, 1-based
    n_pos, n_neg = int(pos.sum()), int(neg.sum())
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def score(model: str, results: list[tuple[float, ...]], labels: np.ndarray) -> dict:
    """The accuracy section: top-1 for a classifier, AUC for ad01 (its one result is the anomaly score)."""
    if model == "ad01":
        scores = np.array([r[0] if r else math.nan for r in results], dtype=np.float64)
        if not np.isfinite(scores).all():
            raise TargetError(f"{model}: a result that is no anomaly score ({int((~np.isfinite(scores)).sum())} "
                              "samples)", "refused")  # fmt: skip
        return {"metric": "auc", "value": round(auc(scores, labels), 6), "samples": len(labels)}
    bad = [i for i, r in enumerate(results) if not r or not all(math.isfinite(v) for v in r)]
    if bad:  # argmax would take a NaN for the answer: a device that says nothing must not score
        raise TargetError(f"{model}: sample {bad[0]}: a result vector that is empty or not finite "
                          f"({len(bad)} of {len(results)} samples)", "refused")  # fmt: skip
    widest = min(len(r) for r in results)
    if int(labels.max()) >= widest:
        raise UserError(f"data: label {int(labels.max())}, but the device's results have {widest} classes")
    guesses = np.array([int(np.argmax(r)) for r in results])
    right = int((guesses == labels).sum())
    return {"metric": "top1", "value": round(right / len(labels), 6), "samples": len(labels), "correct": right}


def loop_row(loop) -> dict:
    p = loop.perf
    return {"inferences": p.inferences, "warmups": p.warmups, "elapsed_us": p.elapsed_us,
            "inferences_per_s": round(p.inferences_per_s, 3), "latency_us": round(p.latency_us, 3),
            "resets": loop.resets}  # fmt: skip


def rule(loops: list[dict]) -> dict:
    short = [lp for lp in loops if lp["elapsed_us"] < RULE_LOOP_S * 1e6]
    met = len(loops) >= RULE_LOOPS and not short
    why = ("" if met else f"{len(loops)} loop(s), {len(short)} under {RULE_LOOP_S:g} s: MLPerf Tiny counts at least "
           f"{RULE_LOOPS} loops of at least {RULE_LOOP_S:g} s")  # fmt: skip
    return {"met": met, "why": why} if why else {"met": met}


MLPERF_NAMES = {"resnet8": "ic01", "dscnn_kws": "kws01", "mobilenet_v1_025_vww": "vww01", "fc_autoencoder_ad": "ad01"}


def said_of_request(request, identity: dict, opts: RunOptions) -> list[str]:
    """What the record warns of the request: a host model file that is another MLPerf Tiny model than the device's
    (the run would pair with that file's runs), and iterations asked of loops the device's timer sizes."""
    out = []
    path = str(getattr(request, "model", "") or "")
    named = next((m for stem, m in MLPERF_NAMES.items() if stem in path.rsplit("/", 1)[-1]), None)
    if named and identity.get("model") in MLPERF_NAMES.values() and named != identity.get("model"):
        out.append(f"the model file {path.rsplit('/', 1)[-1]} is MLPerf Tiny's {named}, the device runs "
                   f"{identity.get('model')}: the run is stored under the file's model")  # fmt: skip
    if opts.mode == "performance" and getattr(request, "iterations", None):
        out.append(f"iterations={request.iterations} does not apply: the device's loops are sized by its timer "
                   "(loop_s)")  # fmt: skip
    return out


def environment(identity: dict):
    """The record's environment: the device named as the board (its kernel, governor and CPUs are not Linux's); the
    host that read it, and where the latency was measured."""
    import platform

    import serial

    from edge_runtime import __version__
    from edge_runtime.results import Environment

    return Environment(board=identity.get("board"), python=platform.python_version(), hostname=socket.gethostname(),
                       packages={"edge-runtime": __version__, "pyserial": serial.__version__, "numpy": np.__version__},
                       measured_on={"host": socket.gethostname(), "note": "latency from the device's own timer "
                                    "(m-lap-us laps); the host only reads it"})  # fmt: skip


def model_info(request, identity: dict):
    """The model section: the host's copy of the model the firmware runs, when the request names a file (hashed as a
    board hashes it, so the run pairs with a Linux board's run of that file), and the device's own model name."""
    from edge_runtime.results import ModelInfo

    sha = ""
    if request is not None and request.model:
        from edge_runtime.runtime.model import model_sha256

        try:
            sha = model_sha256(request.model)
        except (OSError, UserError):
            sha = ""
    path = request.model if request is not None and request.model else f"{identity.get('model')} (on the device)"
    return ModelInfo(path, sha, "firmware", "unknown", server_name=identity.get("model"))


def now_utc(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def median(values) -> float:
    return float(statistics.median(values))


# ----------------------------------------------------------------------------------------------- the two modes
def run_performance(device, request, opts: RunOptions, model: str, progress, kept: list) -> float:
    """MLPerf Tiny's performance mode on `device` (an EembcDevice, synced): the loops land in `kept` as they finish
    (a Ctrl-C keeps those); the loop length asked is returned."""
    duration = getattr(request, "duration_s", None)
    loop_s = opts.loop_s or (duration / opts.loops if duration else RULE_LOOP_S)
    data = random_input(model, opts, getattr(request, "seed", 0) or 0)
    say = progress or (lambda _text: None)
    say(f"loading {len(data):,} bytes, then {opts.loops} loop(s) of at least {loop_s:g} s (the device's timer)")

    def on_loop(loop) -> None:
        kept.append(loop)
        say(f"loop {len(kept)}/{opts.loops}: {loop.perf.inferences_per_s:,.1f} inferences/s, "
            f"{loop.perf.latency_us:,.1f} us each (the device's timer)")  # fmt: skip

    device.performance(data, loops=opts.loops, min_loop_s=loop_s, warmups=opts.warmups, on_loop=on_loop)
    return loop_s


def run_accuracy(device, opts: RunOptions, model: str, progress, kept: list, labels: np.ndarray) -> None:
    """MLPerf Tiny's accuracy mode: each sample loaded and inferred once (`infer 1 0`); its loop lands in `kept`.
    The dataset is read again, now checked against the device's model (the caller read it before the device was
    touched)."""
    samples, _ = read_dataset(opts.data or "", model, opts)
    say = progress or (lambda _text: None)
    every = max(1, len(samples) // 20)
    for i, data in enumerate(samples):
        kept.append(device.loop(data, 1, 0, device.timeout_s + 10.0))
        width = len(kept[0].perf.results)
        if i == 0 and model != "ad01" and int(labels.max()) >= width:  # known after one answer, not after them all
            raise UserError(f"data {opts.data!r}: label {int(labels.max())}, but the device's results have {width} "
                            "classes")  # fmt: skip
        if (i + 1) % every == 0 or i + 1 == len(samples):
            say(f"sample {i + 1:,}/{len(samples):,}")


# ----------------------------------------------------------------------------------------------- the record
def record(request, identity: dict, opts: RunOptions, loops: list, *, loop_s: float | None, started_at: float,
           wall_s: float, device, labels: np.ndarray | None = None, stopped_by: int | None = None,
           failed: TargetError | None = None):  # fmt: skip
    """The run as `edge-runtime/bench/1` (edge_runtime.results.BenchResult), with its `firmware` section."""
    from edge_runtime.measure.stats import PERCENTILE_METHOD, histogram_us, jitter, stability, summarize
    from edge_runtime.results import Aborted, BackendSection, BenchResult, Config, Jitter, Latency, Quality

    rows = [loop_row(lp) for lp in loops]
    resets = sum(lp.resets for lp in loops) + device.resets_between
    warnings = [f"the device reset {resets} time(s) in the run: each loop it cut short was run again"] * (resets > 0)
    firmware = {"protocol": "eembc", "mode": opts.mode, "device": dict(identity), "resets": resets,
                "pieces_resent": device.pieces_resent,
                "loads_fallen_back": getattr(device, "loads_fallen_back", 0)}  # fmt: skip
    hist, jit, unstable, method = (), Jitter(), None, ""
    if opts.mode == "performance":
        ips = median([r["inferences_per_s"] for r in rows]) if rows else None
        latency = Latency(count=sum(r["inferences"] for r in rows), mean=round(1e6 / ips, 3) if ips else None)
        firmware.update(loops=rows, loop_s=loop_s, median_ips=ips, why_no_percentiles=WHY_NO_PERCENTILES,
                        mlperf_rule=rule(rows), results=list(loops[-1].perf.results) if loops else [])  # fmt: skip
        if len(rows) >= 3:  # the loops' spread: MLPerf Tiny's median hides a device that drifts
            ipss = [r["inferences_per_s"] for r in rows]
            spread = max(ipss) / min(ipss) - 1 if min(ipss) > 0 else math.inf
            unstable = spread > 0.1
            if unstable:
                warnings.append(f"unstable: the loops' rates differ by {100 * spread:.0f}% (> 10%)")
        if not firmware["mlperf_rule"]["met"]:
            warnings.append(f"not an MLPerf Tiny score: {firmware['mlperf_rule']['why']}")
        config = Config(warmup=opts.warmups, iterations=rows[-1]["inferences"] if rows else None,
                        duration_s=loop_s, timed_call=TIMED_CALL)  # fmt: skip
    else:  # accuracy: each inference timed alone by the device's laps, a real distribution
        ns = np.array([lp.perf.elapsed_us * 1000 for lp in loops], dtype=np.int64)
        ips = None
        if len(ns):
            lat = summarize(ns)
            unstable, why = stability(ns, lat)
            latency, jit, hist, method = Latency(**lat), Jitter(**jitter(lat)), histogram_us(ns), PERCENTILE_METHOD
            warnings += why
        else:
            latency = Latency(count=0)
        results = [lp.perf.results for lp in loops]
        firmware.update(results=[list(r) for r in results], inferences=len(loops))
        if labels is not None and len(results) == len(labels):
            firmware["accuracy"] = score(identity.get("model", ""), results, labels)
        elif labels is not None:
            warnings.append(f"interrupted after {len(results):,} of {len(labels):,} samples: no accuracy figure")
        config = Config(warmup=0, iterations=len(loops), timed_call=TIMED_CALL.replace("N times", "once"))
    warnings += said_of_request(request, identity, opts)
    aborted = None
    if failed is not None:
        aborted = Aborted(failed.kind, failed.one_line(), None, round(wall_s, 3), True)
        warnings.append(f"cut short after {len(loops)} loop(s): {failed.one_line()}")
    if stopped_by is not None:
        import signal

        name = signal.Signals(stopped_by).name
        aborted = Aborted("interrupted", f"interrupted by {name}", name, round(wall_s, 3), True)
        warnings.append(f"interrupted: partial result of {len(loops)} loop(s)")
    backend = BackendSection("eembc", identity.get("profile") or "", "firmware", None, False, None,
                             {"protocol": "EEMBC runner (MLPerf Tiny)", "url": identity.get("url")})  # fmt: skip
    return BenchResult(model=model_info(request, identity), backend=backend, config=config, latency_us=latency,
                       jitter_us=jit, throughput_ips=round(ips, 3) if ips else None,
                       quality=Quality(None, method, unstable, tuple(warnings)), environment=environment(identity),
                       started_at=now_utc(started_at), wall_s=round(wall_s, 3), aborted=aborted, firmware=firmware,
                       histogram_us=hist)  # fmt: skip
