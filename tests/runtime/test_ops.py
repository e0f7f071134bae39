"""Issue 29, first slice: per-op placement and time (edge_runtime/ops) on the reference models, both engines on CPU,
with the real engines; and the verdict line and the Chrome trace from their records."""

from __future__ import annotations

import itertools
import json
import platform
from dataclasses import replace

import pytest
from conftest import MODELS, need

from edge_runtime.ops.onnxruntime_ops import fit_runs
from edge_runtime.ops.openvino_ops import places
from edge_runtime.ops.profile import profile_model
from edge_runtime.ops.record import (
    EXECUTED,
    FUSED,
    OVERHEAD,
    PROFILER,
    Counted,
    EngineProfile,
    OpRow,
    Partition,
)
from edge_runtime.ops.trace import chrome_trace
from edge_runtime.ops.verdict import finish, verdict

RUNS = dict(iterations=150, warmup=20, threads=1, sandbox=False)
INT8_IR = ["digits_cnn/digits_cnn_int8.xml", "resnet8/resnet8_int8.xml"]
INT8_ONNX = ["digits_cnn/digits_cnn_int8.onnx", "resnet8/resnet8_int8.onnx"]
_CACHE: dict = {}


def report(model: str, backend: str, **options):
    """One profile per model, engine and options for the whole module (each costs a second or so)."""
    need(backend)
    key = (model, backend, tuple(sorted(options.items())))
    if key not in _CACHE:
        _CACHE[key] = profile_model(MODELS / model, backend=backend, options=options or None, **RUNS)
    return _CACHE[key]


def cpu_flags() -> set[str]:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def x86_int8() -> bool:
    """An x86 CPU with the instructions OpenVINO's INT8 CPU kernels need (AVX2 at least)."""
    return platform.machine() in ("x86_64", "AMD64") and "avx2" in cpu_flags()


def ops_of(rep) -> list[OpRow]:
    return [r for r in rep.ops if r.status != OVERHEAD]


def assert_cpu_only(rep) -> None:
    assert ops_of(rep) and all(r.where == "CPU" for r in ops_of(rep))
    assert [p.where for p in rep.partitions] == ["CPU"]
    assert rep.fallback.count == 0
    n = rep.partitions[0].ops
    assert sum(rep.partitions[0].op_types.values()) == n
    assert rep.verdict == f"CPU only: all {n} ops on CPU (no accelerator asked)"


def assert_overhead_named(rep) -> None:
    """The research's form of the 10% rule: the ops plus a named overhead row make up the profiled run's measured
    time, and every share is of that time."""
    rows = ops_of(rep)
    last = rep.ops[-1]
    assert last.status == OVERHEAD and last.name == "(overhead)" and last.mean_us == rep.overhead_us
    named = sum(r.mean_us for r in rows if r.mean_us is not None)
    assert rep.named_us == pytest.approx(named, abs=0.01)
    assert rep.named_us + rep.overhead_us == pytest.approx(rep.profiled_us, abs=0.01)
    assert rep.overhead_us > 0  # the engine's run loop and the Python call are never free
    assert sum(r.share for r in rep.ops if r.share is not None) == pytest.approx(1.0, abs=1e-3)
    assert rep.total_us["p50"] > 0 and rep.total_us["mean"] > 0 and rep.time_source == PROFILER
    assert any("account for" in n for n in rep.notes)


# ---------------------------------------------------------------------------------------------------------- OpenVINO
@pytest.mark.parametrize("model", INT8_IR)
def test_openvino_int8_ir_runs_int8_kernels_on_cpu(model):
    rep = report(model, "openvino")
    assert_cpu_only(rep)
    assert_overhead_named(rep)
    ran = [r for r in ops_of(rep) if r.status == EXECUTED]
    assert all(r.kernel and r.precision for r in ran)
    i8 = [r for r in ran if r.kernel.endswith("_I8")]
    assert all(r.precision == "int8" for r in i8)
    if x86_int8():  # OpenVINO's CPU plugin has INT8 kernels for AVX2/AVX-512 (VNNI, AMX); on ARM it may run FP32
        assert any(r.type == "Convolution" for r in i8), [(r.name, r.kernel) for r in ran]
    # PERF_COUNT has no per-run values: no p99 per op, and the report says so
    assert all(r.p99_us is None for r in rep.ops)
    assert any("p99 is n/a" in n for n in rep.notes)
    # fused nodes are shown, each as part of an op that ran before it
    fused = [r for r in ops_of(rep) if r.status == FUSED]
    names = [r.name for r in ops_of(rep)]
    assert fused and all(r.mean_us is None and names.index(r.fused_into) < names.index(r.name) for r in fused)


def test_openvino_fp32_runs_fp32_kernels_with_f32_pinned():
    """The backend pins INFERENCE_PRECISION_HINT to f32 unless told otherwise: the profiled model is compiled with
    the same options, so an FP32 model shows FP32 kernels and no precision-converting copies, on any CPU."""
    rep = report("resnet8/resnet8_fp32.onnx", "openvino")
    assert_cpu_only(rep)
    assert_overhead_named(rep)
    convs = [r for r in ops_of(rep) if r.type == "Convolution" and r.status == EXECUTED]
    assert convs and all(r.precision == "fp32" and r.kernel.endswith("_f32") for r in convs)
    assert not any("bf16" in (r.precision or "") for r in ops_of(rep))
    assert not any("->" in t for t in rep.copies.types)
    assert any("inference precision: f32" in n for n in rep.notes)


def test_openvino_bf16_hint_passes_through_as_the_cpu_allows():
    """--option INFERENCE_PRECISION_HINT=bf16 reaches the profiled model: on an x86 CPU with bf16 instructions
    (avx512_bf16, amx_bf16: /proc/cpuinfo's flags) the convolutions run bf16 and Reorders convert f32 to bf16;
    without any (not even avx_ne_convert) they stay fp32."""
    rep = report("resnet8/resnet8_fp32.onnx", "openvino", INFERENCE_PRECISION_HINT="bf16")
    assert_cpu_only(rep)
    flags = cpu_flags()
    convs = {r.precision for r in ops_of(rep) if r.type == "Convolution" and r.status == EXECUTED}
    if platform.machine() not in ("x86_64", "AMD64"):  # ARM: bf16 support is the CPU plugin's (ACL's) to decide
        assert convs and convs <= {"bf16", "fp32", "fp16"}
    elif flags & {"avx512_bf16", "amx_bf16"}:
        assert convs == {"bf16"}
        assert rep.copies.types.get("Reorder f32->bf16", 0) >= 1, rep.copies
    elif not flags & {"avx_ne_convert"}:
        assert convs == {"fp32"}
    else:
        assert convs <= {"bf16", "fp32"}


# ----------------------------------------------------------------------------------------------------- ONNX Runtime
@pytest.mark.parametrize("model", INT8_ONNX)
def test_onnxruntime_int8_runs_quantized_nodes_on_cpu(model):
    rep = report(model, "onnxruntime")
    assert_cpu_only(rep)
    assert_overhead_named(rep)
    quantized = [r for r in ops_of(rep) if r.type.startswith(("QLinear", "QGemm"))]
    assert quantized and all(r.precision.split("->")[0] in ("int8", "uint8") for r in quantized)
    assert any(r.type == "QuantizeLinear" and r.precision.endswith(("->uint8", "->int8")) for r in ops_of(rep))
    assert all(r.kernel is None and r.p99_us is not None for r in ops_of(rep))
    # the kernels run inside model_run, which runs inside the call timed from Python
    assert rep.named_us <= rep.engine_us <= rep.profiled_us
    # the profiler costs several us per node: the total is from the session with profiling off
    assert rep.total_us["p50"] < rep.profiled_us


def test_onnxruntime_profiles_leave_nothing_behind(tmp_path, monkeypatch):
    """The profiler's trace goes to a private temporary directory, read and removed: nothing in the working
    directory (where ORT writes onnxruntime_profile_*.json by default) and nothing left in the temporary one."""
    need("onnxruntime")
    import tempfile

    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.chdir(tmp_path)
    rep = profile_model(MODELS / INT8_ONNX[0], **RUNS)
    assert rep.named_us and sorted(p.name for p in tmp_path.rglob("*")) == ["tmp"]


@pytest.mark.parametrize(
    ("budget", "iterations", "warmup", "want"),
    [(1000, 500, 50, (500, 50)), (1000, 20, 60000, (20, 980)), (1000, 5000, 60000, (500, 500)), (1, 10, 10, (1, 0))],
)
def test_onnxruntime_warmup_and_runs_fit_the_trace(budget, iterations, warmup, want):
    assert fit_runs(budget, iterations, warmup) == want
    runs, warm = fit_runs(budget, iterations, warmup)
    assert runs + warm <= max(budget, 1)


def test_onnxruntime_a_long_warmup_keeps_the_trace_under_its_cap(monkeypatch):
    """A warm-up longer than the trace holds (the profiler records it too): the profiled session's warm-up is cut,
    the measured runs all kept, the events read stay under the cap, and a note says so."""
    need("onnxruntime")
    from edge_runtime.ops import onnxruntime_ops

    read, seen = onnxruntime_ops._read_trace, []
    monkeypatch.setattr(onnxruntime_ops, "MAX_EVENTS", 3000)
    monkeypatch.setattr(onnxruntime_ops, "_read_trace", lambda path: seen.append(read(path)) or seen[-1])
    rep = profile_model(MODELS / INT8_ONNX[0], iterations=20, warmup=2000, threads=1, sandbox=False)
    assert rep.runs == 20 and len(seen[0]) <= 3000
    assert any(n.endswith("(the session timed with profiling off had all 2000)") for n in rep.notes), rep.notes


def test_onnxruntime_a_trace_too_large_for_memory_is_one_line(tmp_path, monkeypatch):
    need("onnxruntime")
    from edge_runtime.errors import UserError
    from edge_runtime.ops import onnxruntime_ops

    trace = tmp_path / "profile.json"
    trace.write_text("[]")

    def no_memory(f):
        raise MemoryError

    monkeypatch.setattr(onnxruntime_ops.json, "load", no_memory)
    with pytest.raises(UserError, match="does not fit in memory") as err:
        onnxruntime_ops._read_trace(str(trace))
    assert err.value.__cause__ is None and "\n" not in str(err.value)


def test_onnxruntime_fp32_runs_float_kernels_and_counts_its_copies():
    rep = report("resnet8/resnet8_fp32.onnx", "onnxruntime")
    assert_cpu_only(rep)
    assert_overhead_named(rep)
    convs = [r for r in ops_of(rep) if r.type in ("Conv", "FusedConv")]
    assert convs and all(r.precision == "fp32" for r in convs)
    copies = [r.type for r in ops_of(rep) if r.type.startswith(("Memcpy", "ReorderInput", "ReorderOutput"))]
    assert rep.copies == Counted.of(copies)


# ----------------------------------------------------------------------------------------------------- fallback
def test_a_device_that_fell_back_is_not_delegated():
    """An accelerator asked for and missing here, with fallback allowed: every op ran on CPU, every op fell back,
    and the verdict says so (not "CPU only")."""
    need("onnxruntime")
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime has CUDA: nothing falls back")
    with pytest.warns(UserWarning, match="falling back to CPU"):
        rep = profile_model(MODELS / INT8_ONNX[0], device="cuda", fallback=True, **RUNS)
    n = sum(p.ops for p in rep.partitions)
    assert rep.verdict == f"not delegated: all {n} ops on CPU"
    assert rep.fallback.count == n and rep.engine["fallback"] is True
    assert all(r.where == "CPU" for r in ops_of(rep))
    assert any(note.startswith("fell back to CPU:") for note in rep.notes)


def test_an_openvino_device_that_fell_back_is_not_delegated():
    need("openvino")
    import openvino

    if any(d.startswith("NPU") for d in openvino.Core().available_devices):
        pytest.skip("this machine has an NPU: nothing falls back")
    with pytest.warns(UserWarning, match="falling back to CPU"):
        rep = profile_model(MODELS / INT8_IR[0], device="NPU", fallback=True, **RUNS)
    assert rep.verdict == f"not delegated: all {len(ops_of(rep))} ops on CPU"
    assert rep.fallback.count == len(ops_of(rep))


@pytest.mark.parametrize(
    ("device", "requested", "executed", "want"),
    [
        ("CPU", "CPU", None, ("CPU", "CPU")),
        ("CPU", None, None, ("CPU", "CPU")),
        ("CPU", "NPU", None, ("CPU", "NPU")),  # fell back: the target stays the one asked for
        ("HETERO:CPU", "HETERO:CPU", ["CPU"], ("CPU", "CPU")),  # only CPU in the string: nothing else asked
        ("AUTO:CPU", "AUTO", ["CPU"], ("CPU", "AUTO")),  # AUTO could pick an accelerator and picked the CPU
        ("AUTO:GPU.0", "AUTO", ["GPU.0"], ("GPU.0", "GPU.0")),
        ("HETERO:GPU,CPU", "HETERO:GPU,CPU", ["CPU"], ("CPU", "HETERO:GPU,CPU")),
        ("AUTO:CPU", "AUTO:CPU", None, ("CPU", "CPU")),
    ],
)
def test_where_openvino_ran_and_where_it_was_asked(device, requested, executed, want):
    assert places(device, requested, executed) == want


@pytest.mark.parametrize(
    ("device", "verdict_starts", "note"),
    [
        ("HETERO:CPU", "CPU only: all ", "does not say which device ran each op"),
        ("AUTO", "not delegated: all ", "AUTO ran"),
    ],
)
def test_openvino_virtual_devices_say_where_the_ops_ran(device, verdict_starts, note):
    """HETERO:CPU ran everything on the CPU and asked for nothing else; AUTO could have picked an accelerator and
    picked the CPU (this machine has none): neither is "fully delegated", and the notes say where that came from."""
    need("openvino")
    import openvino

    if any(not d.startswith("CPU") for d in openvino.Core().available_devices):
        pytest.skip("this machine has an accelerator: AUTO may pick it")
    rep = profile_model(MODELS / INT8_IR[0], device=device, iterations=5, warmup=1, threads=1, sandbox=False)
    n = len(ops_of(rep))
    assert rep.verdict.startswith(verdict_starts) and rep.verdict.endswith(
        f"{n} ops on CPU" + (" (no accelerator asked)" if verdict_starts.startswith("CPU") else "")
    )
    assert [p.where for p in rep.partitions] == ["CPU"] and all(r.where == "CPU" for r in ops_of(rep))
    assert any(note in n for n in rep.notes), rep.notes


# ------------------------------------------------------------------------------------------- the verdict and trace
def _profile(rows, partitions, fallback=None, profiled_us=100.0, target="NPU") -> EngineProfile:
    fb = fallback or Counted()
    return EngineProfile(tuple(rows), tuple(partitions), fb, Counted(), profiled_us, None, 10, PROFILER, target)


def _row(name, type_, where, mean_us):
    return OpRow(name, type_, where, None, "int8", mean_us, None, None, EXECUTED)


def test_verdict_lines():
    npu = [_row("a", "CONV", "NPU", 40.0), _row("b", "RESIZE", "CPU", 30.0), _row("c", "SOFTMAX", "CPU", 11.0)]
    parts = [Partition("NPU", 5, {"CONV": 5}), Partition("CPU", 2, {"RESIZE": 1, "SOFTMAX": 1})]
    prof = _profile(npu, parts, Counted.of(["RESIZE", "SOFTMAX"]))
    rows, named, overhead = finish(prof)
    assert (named, overhead) == (81.0, 19.0)
    assert verdict(prof, rows) == "partial: 2 ops (RESIZE, SOFTMAX) on CPU cost 41% of the time"
    full = _profile(npu[:1], [Partition("NPU", 5, {"CONV": 5})])
    assert verdict(full, finish(full)[0]) == "fully delegated: 5 ops in 1 subgraph(s) on NPU"
    none = _profile(npu[1:], [Partition("CPU", 7, {"RESIZE": 7})], Counted.of(["RESIZE"] * 7))
    assert verdict(none, finish(none)[0]) == "not delegated: all 7 ops on CPU"
    untimed = _profile([replace(r, mean_us=None) for r in npu], parts, Counted.of(["RESIZE", "SOFTMAX"]), None)
    assert "unknown share" in verdict(untimed, finish(untimed)[0])


@pytest.mark.parametrize(("model", "backend"), [(INT8_IR[1], "openvino"), (INT8_ONNX[1], "onnxruntime")])
def test_chrome_trace_is_json_with_one_event_per_timed_op(model, backend):
    rep = report(model, backend)
    doc = json.loads(json.dumps(chrome_trace(rep), allow_nan=False))
    events = doc["traceEvents"]
    x = [e for e in events if e["ph"] == "X"]
    timed = [r for r in rep.ops if r.mean_us]
    assert [e["name"] for e in x] == [r.name for r in timed] + ["inference"]
    assert all({"name", "ts", "dur", "pid", "tid"} <= e.keys() for e in x)
    ops = x[:-1]
    assert all(b["ts"] == pytest.approx(a["ts"] + a["dur"], abs=0.01) for a, b in itertools.pairwise(ops))
    assert x[-1]["dur"] == pytest.approx(rep.profiled_us, abs=0.05)
    tracks = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"CPU", "overhead"} <= tracks
