"""`edge-runtime ops` end to end (real subprocesses, real engines, reference models): the table, --json, the Chrome
trace file, and bad input refused in one line each (issue 29, first slice)."""

from __future__ import annotations

import os
import platform

import pytest
from conftest import MODELS, need
from helpers import assert_one_line_error, run_cli, strict_json

IR = str(MODELS / "digits_cnn" / "digits_cnn_int8.xml")
ONNX = str(MODELS / "digits_cnn" / "digits_cnn_int8.onnx")
QUICK = ("--iterations", "100", "--warmup", "10", "--threads", "1")


def test_the_table_shows_every_op_the_overhead_and_the_verdict():
    need("openvino")
    proc = run_cli("ops", IR, *QUICK)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.split()[:2] == ["#", "op"])
    columns = ["#", "op", "type", "where", "kernel", "precision", "mean", "us", "p99", "us", "share", "status"]
    assert lines[head].split() == columns
    rows = lines[head + 1 : lines.index("", head)]
    assert rows[-1].split()[0] == "(overhead)" and rows[-1].split()[-1] == "overhead"
    if platform.machine() == "x86_64":  # INT8 kernels there; OpenVINO on ARM may run this model in FP32
        assert any(r.split()[2] == "Convolution" and "_I8" in r and " int8 " in r for r in rows), rows
    # the columns line up: every row's share ends where the header's does
    end = lines[head].index("share") + len("share")
    assert all(r[end - 1] == "%" or r[end - 1] == "-" for r in rows)
    said = {ln.split()[0]: ln for ln in lines[lines.index("", head) + 1 :]}
    assert said["verdict"].startswith("verdict     CPU only: all ")
    assert "profiling off" in said["total"] and "overhead" in said["profiled"]


def test_json_and_chrome_trace_files(tmp_path):
    need("onnxruntime")
    out, trace = tmp_path / "ops.json", tmp_path / "trace.json"
    flags = ("--cpus", "0", "--no-sandbox", "--json", str(out), "--chrome-trace", str(trace))
    proc = run_cli("ops", ONNX, "--iterations", "100", "--warmup", "10", *flags)
    assert proc.returncode == 0, proc.stderr
    assert "verdict" in proc.stdout  # a --json FILE keeps the table on stdout
    doc = strict_json(out.read_text())
    assert doc["schema"] == "edge-runtime/ops/1" and doc["engine"]["name"] == "onnxruntime"
    assert doc["verdict"].startswith("CPU only") and doc["fallback"] == {"count": 0, "types": {}}
    assert doc["named_us"] + doc["overhead_us"] == pytest.approx(doc["profiled_us"], abs=0.01)
    assert {"p50", "mean", "p99"} <= doc["total_us"].keys()
    events = strict_json(trace.read_text())["traceEvents"]
    x = [e for e in events if e["ph"] == "X"]
    assert len(x) == len([r for r in doc["ops"] if r["mean_us"]]) + 1


def test_json_to_stdout_is_one_document():
    need("onnxruntime")
    proc = run_cli("ops", ONNX, *QUICK, "--no-sandbox", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = strict_json(proc.stdout)
    assert all(r["where"] == "CPU" for r in doc["ops"] if r["status"] != "overhead")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["{tmp}/missing.onnx"], "no such file"),
        (["{tmp}/dir.onnx"], "is a directory"),
        (["{tmp}/fifo.onnx"], "fifo"),
        ([ONNX, "--iterations", "nan"], "--iterations 'nan' is not a whole number"),
        ([ONNX, "--iterations", "1e999"], "is not a whole number"),
        ([ONNX, "--iterations", "100000000000"], "at most 100,000"),
        ([ONNX, "--iterations", "0"], "at least 1"),
        ([ONNX, "--backend", "tflite"], "backend 'tflite' cannot load onnx files"),
        ([ONNX, "--chrome-trace", "{tmp}/dir.onnx"], "--chrome-trace"),
        ([ONNX, "--chrome-trace", ONNX], "an input of this command"),
        ([ONNX, "--json", "-", "--chrome-trace", "-"], "the same destination"),
    ],
)
def test_bad_input_is_one_line(tmp_path, args, needle):
    (tmp_path / "dir.onnx").mkdir()
    os.mkfifo(tmp_path / "fifo.onnx")
    proc = run_cli("ops", *[a.format(tmp=tmp_path) for a in args], "--no-sandbox")
    assert_one_line_error(proc, needle)
    assert proc.stdout == ""


def test_help_names_the_command():
    proc = run_cli("--help")
    assert proc.returncode == 0
    assert any(ln.split()[:1] == ["ops"] for ln in proc.stdout.splitlines()), proc.stdout
    text = run_cli("ops", "--help").stdout
    assert "--chrome-trace" in text and "--iterations" in text and "--json" in text


def test_a_litert_model_with_an_op_xnnpack_does_not_take_is_partial_and_names_it():
    """LiteRT's placement (edge_runtime/ops/litert_ops.py) through the command: the reference model ADD -> CUMSUM ->
    MUL leaves CUMSUM on the CPU between two XNNPACK partitions; no per-op times, and the report says why."""
    need("tflite")
    model = str(MODELS / "partial_cumsum" / "partial_cumsum_fp32.tflite")
    proc = run_cli("ops", model, *QUICK, "--no-sandbox", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = strict_json(proc.stdout)
    placed = {r["type"]: r["where"] for r in doc["ops"] if r["status"] != "overhead"}
    assert placed == {"ADD": "XNNPACK", "CUMSUM": "CPU", "MUL": "XNNPACK"}
    assert doc["fallback"] == {"count": 1, "types": {"CUMSUM": 1}}
    assert [p["where"] for p in doc["partitions"]] == ["XNNPACK", "XNNPACK", "CPU"]  # every part, as ORT counts them
    assert doc["time_source"] == "placement only" and doc["verdict"].startswith("partial: 1 op (CUMSUM) on CPU")
    assert any("no op profiler" in n for n in doc["notes"]) and doc["total_us"]["p50"] > 0


def test_a_chrome_trace_of_a_litert_model_is_refused_before_any_work(tmp_path):
    """LiteRT gives no per-op times: an empty trace would be a file that says nothing; one line, exit 2, no file."""
    need("tflite")
    trace = tmp_path / "t.json"
    model = str(MODELS / "partial_cumsum" / "partial_cumsum_fp32.tflite")
    proc = run_cli("ops", model, "--no-sandbox", "--chrome-trace", str(trace))
    assert proc.returncode == 2 and proc.stdout == ""
    assert_one_line_error(proc, "--chrome-trace: LiteRT's Python package has no op profiler: nothing to trace")
    assert not trace.exists()
