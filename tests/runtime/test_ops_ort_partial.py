"""Issue 29: a real partial placement on ONNX Runtime, with per-op shares. OpenVINO's execution provider (the
onnxruntime-ep-openvino plugin, `--device openvino`) takes Add and Mul but not com.microsoft FastGelu, so the
reference model models/partial_fastgelu (Add -> FastGelu -> Mul) runs as two OpenVINO subgraphs around one node on
the CPU provider: the fallback op named, its partitions, its share of the profiled time, the copies counted (0: the
plugin on CPU works in host memory). resnet8 INT8 goes to OpenVINO whole. And the device missing (the plugin hidden
from a child): one line without --allow-fallback, a reported fallback with it."""

from __future__ import annotations

import hashlib
import importlib.util

import numpy as np
import pytest
from conftest import ARTIFACTS, MODELS, need
from helpers import assert_one_line_error, run_cli, strict_json

import edge_runtime
from edge_runtime.ops.profile import profile_model
from edge_runtime.ops.record import OVERHEAD, Counted

PARTIAL = MODELS / "partial_fastgelu" / "partial_fastgelu_fp32.onnx"
RESNET8 = MODELS / "resnet8" / "resnet8_int8.onnx"
RUNS = dict(iterations=60, warmup=10, threads=1, sandbox=False)
QUICK = ("--iterations", "60", "--warmup", "10", "--threads", "1")
needs_plugin = pytest.mark.skipif(
    importlib.util.find_spec("onnxruntime_ep_openvino") is None,
    reason="onnxruntime-ep-openvino not installed: pip install 'edge-runtime[onnxruntime-openvino-ep]' (make test "
    "does, on x86_64 Linux with Python 3.11+)",
)


def builder():
    spec = importlib.util.spec_from_file_location("partial_onnx", MODELS / "partial_onnx.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ops_of(rep) -> list:
    return [r for r in rep.ops if r.status != OVERHEAD]


@pytest.fixture(scope="module")
def partial():
    need("onnxruntime")
    return profile_model(PARTIAL, backend="onnxruntime", device="openvino", **RUNS)


@pytest.fixture
def no_plugin(tmp_path):
    """An environment whose children cannot import the plugin (a module of its name first on the path that fails
    to import), whether or not it is installed."""
    (tmp_path / "onnxruntime_ep_openvino.py").write_text('raise ImportError("hidden by the test")\n')
    return {"PYTHONPATH": str(tmp_path)}


def test_the_placement_model_is_what_its_builder_writes():
    """`make models` (models/partial_onnx.py) writes the committed bytes again: the manifest's sha256, the file's
    and the builder's output here are one."""
    pytest.importorskip("onnx", reason="onnx: pip install 'edge-runtime[dev]'")
    b = builder()
    entry = next(a for a in ARTIFACTS if a["model"] == "partial_fastgelu")
    assert MODELS / entry["file"] == PARTIAL and entry["provenance"] == b.PROVENANCE
    assert hashlib.sha256(b.model_bytes()).hexdigest() == entry["sha256"]
    assert hashlib.sha256(PARTIAL.read_bytes()).hexdigest() == entry["sha256"]


@needs_plugin
def test_the_split_model_still_computes_what_it_should():
    """Two OpenVINO subgraphs and a CPU node between them give the model's numbers (FastGelu's tanh form)."""
    need("onnxruntime")
    x = np.random.default_rng(0).random((1, builder().WIDTH), np.float32) * 4 - 2
    with edge_runtime.load(PARTIAL, backend="onnxruntime", device="openvino", sandbox=False) as s:
        assert s.backend.device == "openvino" and s.backend.fallback is False
        assert s.backend.details["plugin"] == "onnxruntime-ep-openvino"
        y = s.infer({"input": x})["output"]
    np.testing.assert_allclose(y, builder().expected(x), rtol=1e-4, atol=1e-5)


@needs_plugin
def test_fastgelu_falls_back_to_cpu_between_two_openvino_subgraphs(partial):
    rep = partial
    assert rep.device == "openvino" and rep.target == "OpenVINO" and rep.engine["fallback"] is False
    parts = sorted((p.where, p.ops, tuple(p.op_types.items())) for p in rep.partitions)
    assert parts == [("CPU", 1, (("FastGelu", 1),)), ("OpenVINO", 1, (("Add", 1),)), ("OpenVINO", 1, (("Mul", 1),))]
    assert rep.fallback == Counted(1, {"FastGelu": 1})
    # each OpenVINO subgraph is one profiler node: the row says it is a subgraph and how many ops it holds
    rows = ops_of(rep)
    assert sorted((r.name, r.type, r.where) for r in rows) == [
        ("OpenVINO subgraph 0", "subgraph of 1 op", "OpenVINO"),
        ("OpenVINO subgraph 1", "subgraph of 1 op", "OpenVINO"),
        ("fastgelu", "FastGelu", "CPU"),
    ]
    gelu = next(r for r in rows if r.type == "FastGelu")
    assert gelu.share > 0 and gelu.mean_us > 0 and gelu.precision == "fp32"
    # its share is measured: the fallback share is its row's, and the rows plus the overhead make the whole run
    assert rep.fallback_share == pytest.approx(gelu.share, abs=1e-4)
    on_ov = sum(r.share for r in rows if r.where == "OpenVINO")
    assert rep.delegated_share == pytest.approx(on_ov, abs=1e-4) and rep.delegated_share > 0
    overhead = rep.ops[-1]
    assert overhead.status == OVERHEAD
    assert rep.delegated_share + rep.fallback_share + overhead.share == pytest.approx(1.0, abs=1e-3)
    assert rep.verdict == f"partial: 1 op (FastGelu) on CPU cost {100 * rep.fallback_share:.0f}% of the time"
    # copies counted, and 0 said: no Memcpy between the plugin (host memory) and the CPU provider
    assert rep.copies == Counted() and rep.to_dict()["copies"] == {"count": 0, "types": {}}
    assert any(n.startswith("copies 0: onnxruntime put no Memcpy node") for n in rep.notes)
    assert any("each OpenVINO subgraph is one node" in n for n in rep.notes)


@needs_plugin
def test_resnet8_int8_is_one_openvino_subgraph():
    need("onnxruntime")
    rep = profile_model(RESNET8, backend="onnxruntime", device="openvino", **RUNS)
    assert [p.where for p in rep.partitions] == ["OpenVINO"]
    n = rep.partitions[0].ops
    assert n > 50 and "QLinearConv" not in rep.partitions[0].op_types  # the QDQ graph as placed, before fusion
    assert rep.fallback == Counted() and rep.fallback_share == pytest.approx(0.0)
    assert [(r.name, r.type) for r in ops_of(rep)] == [("OpenVINO subgraph 0", f"subgraph of {n} ops")]
    assert rep.verdict == f"fully delegated: {n} ops in 1 subgraph(s) on OpenVINO"


@needs_plugin
def test_ops_command_on_the_partial_model():
    need("onnxruntime")
    proc = run_cli("ops", PARTIAL, "--device", "openvino", *QUICK, "--no-sandbox")
    assert proc.returncode == 0, proc.stderr
    lines = {ln.split("  ", 1)[0]: ln for ln in proc.stdout.splitlines() if ln and not ln.startswith(" ")}
    assert lines["partitions"].startswith("partitions  3: ")
    assert lines["fallback"] == "fallback    1 (FastGelu 1)" and lines["copies"] == "copies      0"
    assert lines["verdict"].startswith("verdict     partial: 1 op (FastGelu) on CPU cost ")
    row = next(ln for ln in proc.stdout.splitlines() if " fastgelu " in ln)
    assert row.split()[2:4] == ["FastGelu", "CPU"] and row.split()[-2].endswith("%")


def test_the_plugin_missing_is_one_line_naming_the_extra(no_plugin):
    need("onnxruntime")
    proc = run_cli("run", PARTIAL, "--backend", "onnxruntime", "--device", "openvino", env=no_plugin)
    assert_one_line_error(
        proc, "OpenVINOExecutionProvider", "edge-runtime[onnxruntime-openvino-ep]", "--allow-fallback"
    )


def test_the_plugin_missing_with_fallback_allowed_is_reported(no_plugin):
    need("onnxruntime")
    proc = run_cli("ops", PARTIAL, "--device", "openvino", "--allow-fallback", *QUICK, "--json", env=no_plugin)
    assert proc.returncode == 0, proc.stderr
    assert "falling back to CPU" in proc.stderr and "onnxruntime-openvino-ep" in proc.stderr
    doc = strict_json(proc.stdout)
    assert doc["engine"]["fallback"] is True and doc["target"] == "OpenVINO"
    assert doc["fallback"] == {"count": 3, "types": {"Add": 1, "FastGelu": 1, "Mul": 1}}
    assert doc["verdict"] == "not delegated: all 3 ops on CPU"


@needs_plugin
def test_the_plugin_leaves_openvino_able_to_read_tflite_models_in_the_same_process():
    """The plugin bundles a libopenvino.so of the openvino package's soname with only the ONNX and IR frontends: were
    it loaded first, OpenVINO in that process could no longer read a .tflite ("Available frontends: onnx ir"), as a
    fresh clone's suite found. A child that runs the plugin first, then OpenVINO on a .tflite."""
    need("onnxruntime")
    need("openvino")
    code = (
        "import sys\n"
        "import edge_runtime\n"
        f"with edge_runtime.load({str(PARTIAL)!r}, backend='onnxruntime', device='openvino', sandbox=False) as s:\n"
        "    assert s.backend.device == 'openvino', s.backend\n"
        f"with edge_runtime.load({str(MODELS / 'resnet8' / 'resnet8_int8.tflite')!r}, backend='openvino',"
        " sandbox=False) as s:\n"
        "    print('read', s.backend.name, s.model.format)\n"
    )
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "read openvino tflite" in proc.stdout
