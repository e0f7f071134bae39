"""`bench --ops` (issue 29): the result's `ops` section, from a second, profiled session after the timed loop; off by
default, and when off nothing of it runs (or is even imported). Real backends on the real models, a real agent on
127.0.0.1."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest
from conftest import MODELS, ROOT, need
from helpers import assert_one_line_error, request, run_cli

from edge_runtime.errors import UserError
from edge_runtime.measure import bench as bench_mod
from edge_runtime.measure.bench import run_bench
from edge_runtime.measure.loop import StopRequest
from edge_runtime.measure.request import BenchRequest
from edge_runtime.system.root import SystemRoot

ORT_INT8 = MODELS / "resnet8" / "resnet8_int8.onnx"
OV_INT8 = MODELS / "resnet8" / "resnet8_int8.xml"
PARTIAL = MODELS / "partial_cumsum" / "partial_cumsum_fp32.tflite"
OPS_DIR = str(ROOT / "edge_runtime" / "ops")
MEASURE = bench_mod.measure  # the loop itself, whatever a test has put in its place


def assert_section(ops: dict, runs: int) -> None:
    """What a profiled section must hold: a verdict, partitions that place ops, every op row kept (resnet8 has fewer
    than the 200 a summary keeps), and the ops plus the overhead row adding up to the profiled run's time."""
    assert ops["schema"] == "edge-runtime/ops/1" and "error" not in ops
    assert ops["verdict"] and ops["time_source"] == "profiler" and ops["runs"] == runs
    assert ops["partitions"] and all(p["ops"] > 0 and p["where"] for p in ops["partitions"])
    rows = [o for o in ops["ops"] if o["status"] != "overhead"]
    (overhead,) = [o for o in ops["ops"] if o["status"] == "overhead"]
    assert len(rows) == ops["ops_total"] > 0
    assert ops["named_us"] + ops["overhead_us"] == pytest.approx(ops["profiled_us"], abs=0.01)
    assert sum(o["mean_us"] or 0.0 for o in rows) == pytest.approx(ops["named_us"], abs=0.05 + 0.001 * len(rows))
    assert overhead["mean_us"] == pytest.approx(ops["overhead_us"], abs=0.01)
    assert ops["profiling_overhead_pct"] is not None


# ------------------------------------------------------------------------------------- off: nothing of it runs
class Recorder:
    """`measure` as bench.py calls it, with a profile hook (sys.setprofile: this thread, the one that runs the timed
    loop) installed between the loop's on_start and on_end marks: the (file, function) pairs called in the timed
    window."""

    def __init__(self, monkeypatch, stop: StopRequest | None = None):
        self.calls: set[tuple[str, str]] = set()
        self.stop = stop

        def hook(frame, event, arg):
            if event == "call":
                self.calls.add((frame.f_code.co_filename, frame.f_code.co_name))
            elif event == "c_call":
                self.calls.add(("<c>", getattr(arg, "__qualname__", repr(arg))))

        def measure(runner, **kw):
            on_start, on_end = kw["on_start"], kw["on_end"]

            def start():
                on_start()
                if self.stop is not None:
                    self.stop.request(2)  # as a Ctrl-C would, once the measured part has begun
                sys.setprofile(hook)

            def end():
                sys.setprofile(None)
                on_end()

            return MEASURE(runner, **{**kw, "on_start": start, "on_end": end})

        monkeypatch.setattr(bench_mod, "measure", measure)


def test_the_timed_loop_runs_the_same_code_with_ops_on_and_off(monkeypatch):
    need("onnxruntime")
    seen = {}
    for ops in (None, True):
        rec = Recorder(monkeypatch)
        result = run_bench(request(ORT_INT8, iterations=100, warmup=5, ops=ops), SystemRoot("/")).result.to_dict()
        seen[ops] = rec.calls
        assert ("ops" in result) is bool(ops)
    assert seen[None] and seen[None] == seen[True]
    assert not [c for c in seen[True] if c[0].startswith(OPS_DIR)]
    assert_section(result["ops"], runs=100)  # the "on" run did profile: the comparison is of two real runs


def test_without_ops_bench_imports_nothing_of_edge_runtime_ops_and_its_json_has_no_section(tmp_path):
    need("onnxruntime")
    out = tmp_path / "r.json"
    code = (
        "import sys\n"
        "from edge_runtime.cli.main import main\n"
        f"rc = main(['bench', {str(ORT_INT8)!r}, '--iterations', '50', '--warmup', '5', '--json', {str(out)!r}])\n"
        "print(sorted(m for m in sys.modules if m == 'edge_runtime.ops' or m.startswith('edge_runtime.ops.')))\n"
        "sys.exit(rc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"
    doc = json.loads(out.read_text())
    assert "ops" not in doc and doc["latency_us"]["count"] == 50
    assert "profiling ops" not in proc.stderr


# --------------------------------------------------------------------------------------------- on: the section
def test_bench_ops_on_an_onnxruntime_int8_model_json_and_text(tmp_path):
    need("onnxruntime")
    out = tmp_path / "r.json"
    proc = run_cli("bench", str(ORT_INT8), "--ops", "--iterations", "60", "--warmup", "5", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "profiling ops: 60 runs" in proc.stderr
    doc = json.loads(out.read_text())
    ops = doc["ops"]
    assert_section(ops, runs=60)
    assert {p["where"] for p in ops["partitions"]} == {"CPU"} and ops["fallback"]["count"] == 0
    assert any(o["type"] == "QLinearConv" and o["precision"] for o in ops["ops"])
    text = proc.stdout
    assert f"ops          {ops['verdict']}" in text
    assert "partitions: CPU" in text and "the profiler's cost on p50" in text
    slowest = [line for line in text.splitlines() if line.startswith("  slowest")]
    top = sorted((o for o in ops["ops"] if o["status"] != "overhead"), key=lambda o: -o["mean_us"])[:5]
    assert len(slowest) == 5 and all(o["name"] in line for o, line in zip(top, slowest, strict=True))


def test_bench_ops_on_an_openvino_model():
    need("openvino")
    result = run_bench(request(OV_INT8, iterations=40, warmup=5, ops=True), SystemRoot("/")).result.to_dict()
    ops = result["ops"]
    assert_section(ops, runs=40)
    assert ops["target"] == "CPU" and any(o["kernel"] for o in ops["ops"] if o["status"] == "executed")


def test_a_litert_partial_model_gives_fallback_cumsum():
    need("tflite")
    pytest.importorskip("ai_edge_litert")
    result = run_bench(request(PARTIAL, iterations=30, warmup=5, ops=True), SystemRoot("/")).result.to_dict()
    ops = result["ops"]
    assert ops["time_source"] == "placement only" and ops["profiled_us"] is None
    assert ops["fallback"]["types"] == {"CUMSUM": 1} and ops["verdict"].startswith("partial")
    assert any(o["type"] == "CUMSUM" and o["where"] == "CPU" for o in ops["ops"])


# ------------------------------------------------------------------------------------- refusals and failures
def test_an_option_ops_refuses_is_one_line_before_anything_is_measured(monkeypatch):
    def never(*_a, **_k):
        raise AssertionError("the run was prepared: the refusal came too late")

    monkeypatch.setattr(bench_mod, "prepare", never)
    req = request(OV_INT8, iterations=10, ops=True, options={"PERF_COUNT": "YES"})
    with pytest.raises(UserError, match="PERF_COUNT"):
        run_bench(req, SystemRoot("/"))
    proc = run_cli("bench", str(OV_INT8), "--ops", "--option", "PERF_COUNT=YES", "--iterations", "10")
    assert_one_line_error(proc, "--option PERF_COUNT", code=2)
    assert proc.stdout == ""


def test_a_request_with_ops_not_a_boolean_is_refused_in_one_line():
    with pytest.raises(UserError, match=r"ops.*expected true or false.*'yes'") as err:
        BenchRequest.from_json({"model": str(ORT_INT8), "ops": "yes"}).validate()
    assert "\n" not in err.value.one_line()
    with pytest.raises(UserError, match=r"ops 'yes': expected true or false"):  # built in code, not read: validate()
        BenchRequest(model=str(ORT_INT8), ops="yes").validate()


def test_a_profiler_failure_keeps_the_timed_result(monkeypatch):
    need("onnxruntime")
    from edge_runtime.ops import onnxruntime_ops

    def broken(*_a, **_k):
        raise RuntimeError("the profiler\nbroke")

    monkeypatch.setattr(onnxruntime_ops, "profile", broken)
    result = run_bench(request(ORT_INT8, iterations=30, warmup=2, ops=True), SystemRoot("/")).result.to_dict()
    assert result["latency_us"]["count"] == 30
    assert result["ops"] == {"schema": "edge-runtime/ops/1", "error": "RuntimeError: the profiler broke"}
    assert "ops not profiled: RuntimeError: the profiler broke" in result["quality"]["warnings"]


def test_an_interrupted_run_is_not_profiled(monkeypatch):
    need("onnxruntime")
    stop = StopRequest()
    Recorder(monkeypatch, stop=stop)
    said = []
    run = run_bench(request(ORT_INT8, iterations=100_000, ops=True), SystemRoot("/"), stop=stop, progress=said.append)
    result = run.result.to_dict()
    assert result["aborted"]["kind"] == "interrupted"
    assert result["ops"]["error"] == "not profiled: the run was stopped (interrupted)"
    assert not [m for m in said if m.startswith("profiling ops")]


def test_a_signal_while_profiling_keeps_the_timed_result_and_exits_as_the_signal_says(tmp_path):
    """SIGINT lands while the second session is profiled (after the timed loop, with the loop's stop disarmed): the
    real handler raises, the timed result is written whole, `ops` says why it is missing, and the exit is 130."""
    need("onnxruntime")
    out = tmp_path / "r.json"
    code = (
        "import os, signal, sys, time\n"
        "from edge_runtime.ops import onnxruntime_ops\n"
        "def slow(*a, **k):\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(30)\n"
        "onnxruntime_ops.profile = slow\n"
        "from edge_runtime.cli.main import main\n"
        f"sys.exit(main(['bench', {str(ORT_INT8)!r}, '--iterations', '40', '--warmup', '2', '--ops',\n"
        f"    '--json', {str(out)!r}]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 130, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["latency_us"]["count"] == 40 and "aborted" not in doc
    assert doc["ops"]["error"] == "not profiled: interrupted by SIGINT while profiling"
    assert "not profiled: interrupted by SIGINT while profiling: the timed result written" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_open_loop_query_of_several_samples_is_not_set_against_single_profiled_runs():
    """offline, 8 samples a query: the query's latency is 8 inferences and queueing; the profiler's cost is set
    against single back-to-back runs of the timed session instead (it read -99% against the query's latency)."""
    need("onnxruntime")
    model = MODELS / "digits_cnn" / "digits_cnn_int8.onnx"
    req = request(model, scenario="offline", samples_per_query=8, iterations=30, warmup=2, ops=True)
    ops = run_bench(req, SystemRoot("/")).result.to_dict()["ops"]
    assert "error" not in ops and ops["runs"] == 30
    # ONNX Runtime's profiler costs time, never saves it: against a query of 8 samples it read -99%
    assert ops["profiling_overhead_pct"] > -50, ops["profiling_overhead_pct"]
    assert any("back-to-back runs of the timed session" in n for n in ops["notes"])


# ------------------------------------------------------------------------------------------- over the agent
def test_ops_true_reaches_the_agents_bench_and_the_section_comes_back(tmp_path):
    need("onnxruntime")
    pytest.importorskip("serial")
    from agentkit import AgentProcess

    from bench.targets import TargetOptions
    from bench.targets.agent import AgentTarget, TargetError

    req = request(ORT_INT8, iterations=40, warmup=5, ops=True, sandbox=True)
    with AgentProcess("tcp://127.0.0.1:0", tmp_path / "state") as agent:
        with AgentTarget(agent.url, TargetOptions(reconnect_for=30.0, connect_timeout=5.0), dead_after=3.0) as t:
            got = t.bench(req)
            sha, name = t.upload(req.model)  # stored already: the request names it as the board knows it
            wire = {**replace(req, model=name, model_sha256=sha).to_dict(), "ops": "yes"}
            with pytest.raises(TargetError) as err:
                t.call("bench", {"request": wire})
    assert_section(got.result["ops"], runs=40)
    assert "ops" in str(err.value) and "expected true or false" in str(err.value) and "\n" not in str(err.value)
