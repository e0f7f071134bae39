"""`edge-runtime info` and `edge-runtime run` end to end (real subprocesses, real backends, fixture system trees)."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import MANIFEST, MODELS, ROOT, artifact, backend_installed, need
from helpers import assert_one_line_error, fixture, run_cli

from edge_runtime.system.root import SystemRoot


def test_info_json_lists_installed_backends_with_versions():
    proc = run_cli("info", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "edge-runtime/info/1"
    for name in ("onnxruntime", "openvino", "tflite"):
        b = doc["backends"][name]
        assert b["installed"] == backend_installed(name)
        if b["installed"]:
            assert b["version"] and b["devices"]
        else:
            assert f"edge-runtime[{name}]" in b["install"]
    if backend_installed("onnxruntime"):
        import onnxruntime

        assert doc["backends"]["onnxruntime"]["version"] == onnxruntime.__version__
        assert "CPUExecutionProvider" in doc["backends"]["onnxruntime"]["providers"]


def test_info_text_is_readable():
    """The text says what the JSON says, line by line: versions, this machine's CPU and kernel, every backend."""
    proc = run_cli("info")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(run_cli("info", "--json").stdout)
    lines = proc.stdout.splitlines()
    assert lines[0] == f"edge-runtime {doc['edge_runtime']}  (python {doc['python']}, numpy {doc['numpy']})"
    rows = {ln.split()[0]: ln for ln in lines[1:] if ln.startswith("  ")}
    assert rows["cpu"].split(None, 1)[1] == doc["cpu_model"]
    assert rows["kernel"].split(None, 1)[1] == doc["kernel"] == platform.release()
    online = SystemRoot("/").online_cpus()
    from edge_runtime.system.cpulist import format_cpu_list

    assert rows["cpus"].split()[2].rstrip(",") == format_cpu_list(online)
    assert lines.index("backends") > 0
    for name, b in doc["backends"].items():
        row = rows[name]
        if b["installed"]:
            assert row.split()[1] == b["version"] and f"devices: {', '.join(b['devices'])}" in row
        else:
            assert f"not installed   (pip install 'edge-runtime[{name}]')" in row


def test_info_reads_a_board_tree_through_sysroot():
    root = fixture("rpi5")
    proc = run_cli("info", "--sysroot", str(root), "--json")
    doc = json.loads(proc.stdout)
    raw = (root / "proc/device-tree/model").read_bytes()
    assert doc["board"] == raw.rstrip(b"\x00").decode()
    assert doc["board"].startswith("Raspberry Pi 5")
    assert doc["sysroot"] == str(root)


def test_info_reads_dmi_and_cpu_sets_from_an_x86_tree():
    root = fixture("x86-node-exporter")
    doc = json.loads(run_cli("info", "--sysroot", str(root), "--json").stdout)
    dmi = root / "sys/class/dmi/id"
    assert doc["board"] == f"{(dmi / 'sys_vendor').read_text().strip()} {(dmi / 'product_name').read_text().strip()}"
    assert doc["cpus"]["online"] == [0, 1, 2, 3]
    assert doc["cpus"]["isolated"] == [1, 3, 4, 5, 9]  # the fixture's odd list is reported as the kernel wrote it


def test_isolation_from_the_kernel_command_line(tmp_path):
    src = fixture("rpi5")
    shutil.copytree(src, tmp_path / "root")
    cmdline = tmp_path / "root/proc/cmdline"
    cmdline.write_text(
        cmdline.read_text().strip() + " isolcpus=managed_irq,domain,2-3 nohz_full=2-3 rcu_nocbs=2-3 irqaffinity=0-1\n"
    )
    iso = SystemRoot(tmp_path / "root").isolation()
    assert iso["isolcpus"] == [2, 3]
    assert iso["nohz_full"] == [2, 3]
    assert iso["rcu_nocbs"] == [2, 3]
    assert iso["irqaffinity"] == [0, 1]
    assert iso["sysfs_isolated"] == []  # no sysfs in this capture: unknown is empty, not an error


def test_system_reads_tolerate_missing_and_garbled_files(tmp_path):
    (tmp_path / "sys/devices/system/cpu").mkdir(parents=True)
    (tmp_path / "sys/devices/system/cpu/online").write_text("zero-three\n")
    root = SystemRoot(tmp_path)
    assert root.cpus("online") is None
    assert root.online_cpus() == []
    assert root.board_model() == ""
    assert root.cmdline() == ""
    assert root.read("/proc/nope", "fallback") == "fallback"


@pytest.mark.parametrize(
    ("suffix", "backend"), [("_int8.onnx", "onnxruntime"), ("_int8.xml", "openvino"), ("_int8.tflite", "tflite")]
)
def test_run_json_describes_the_model_and_outputs(suffix, backend):
    need(backend)
    path = artifact("digits_cnn", suffix)
    proc = run_cli("run", str(path), "--json", "--seed", "3", "--top", "3")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    art = next(a for a in MANIFEST["artifact"] if a["file"].endswith("digits_cnn" + suffix))
    assert doc["schema"] == "edge-runtime/run/1"
    assert doc["backend"]["name"] == backend and doc["backend"]["fallback"] is False
    files = [path] + ([path.with_suffix(".bin")] if backend == "openvino" else [])  # IR: hash of .xml then .bin
    assert doc["model"]["sha256"] == hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()
    assert [o["name"] for o in doc["outputs"]] == [o["name"] for o in art["outputs"]]
    top = doc["outputs"][0]["top"]
    assert len(top) == 3 and top[0][1] >= top[1][1] >= top[2][1]
    # Same seed, same inputs, same answer; another seed gives other inputs.
    again = json.loads(run_cli("run", str(path), "--json", "--seed", "3", "--top", "3").stdout)
    other = json.loads(run_cli("run", str(path), "--json", "--seed", "4", "--top", "3").stdout)
    assert again["outputs"] == doc["outputs"]
    assert other["outputs"] != doc["outputs"]


def test_run_with_an_input_file_gives_the_digit(tmp_path, digits):
    need("onnxruntime")
    x, y = digits
    f = tmp_path / "digit.npy"
    np.save(f, x[:1])
    proc = run_cli("run", str(artifact("digits_cnn", "_fp32.onnx")), "--input", f"input={f}", "--json")
    doc = json.loads(proc.stdout)
    assert doc["inputs"][0]["source"] == "file"
    assert doc["outputs"][0]["top"][0][0] == int(y[0])


def test_run_json_to_file_keeps_the_text_on_stdout(tmp_path):
    need("onnxruntime")
    out = tmp_path / "sub" / "run.json"
    proc = run_cli("run", str(artifact("digits_cnn", "_int8.onnx")), "--json", str(out))
    assert proc.returncode == 0
    assert json.loads(out.read_text())["schema"] == "edge-runtime/run/1"
    assert "backend  onnxruntime" in proc.stdout
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temporary file left behind


def test_run_fallback_is_reported_on_stderr_and_in_json():
    need("onnxruntime")
    proc = run_cli("run", str(artifact("digits_cnn", "_int8.onnx")), "--device", "cuda", "--allow-fallback", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["backend"]["fallback"] is True and doc["backend"]["requested_device"] == "cuda"
    assert "warning: onnxruntime: falling back to CPU" in proc.stderr


def test_edge_bench_prints_its_help():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "bench.cli", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "usage: edge-bench" in proc.stdout


# ---------------------------------------------------------------------- a one-shot run's own cost (issue 22, item 10)
# What `run` used to pay for beside the library's own work: numpy.random for its inputs, hashlib (OpenSSL) for a small
# model's hash, argparse's shutil (with bz2 and lzma), selectors, tempfile for LiteRT's stderr, the output machinery
# with no output asked for. The parent (flags, paths, the fork) never imports numpy; the work imports none of these.
PARENT_NEVER = ["numpy", "shutil", "selectors", "hashlib", "tempfile", "edge_runtime.files.outputs"]
WORK_NEVER = ["numpy.random", "shutil", "selectors", "hashlib", "tempfile", "edge_runtime.files.outputs"]


def _imported_after(code: str) -> list:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=180)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.parametrize(
    ("suffix", "backend", "library"),
    [("_int8.onnx", "onnxruntime", "onnxruntime"), ("_int8.xml", "openvino", "openvino"),
     ("_int8.tflite", "tflite", "ai_edge_litert.interpreter")],
)  # fmt: skip
def test_a_one_shot_run_imports_only_what_it_uses(suffix, backend, library):
    need(backend)
    model = str(artifact("digits_cnn", suffix))
    # What the library brings itself (OpenVINO imports shutil and tempfile) is the library's, not the run's.
    own = _imported_after(f"import json, sys, numpy, {library}\nprint(json.dumps(sorted(sys.modules)))")
    parent, work = _imported_after(
        "import json, sys\n"
        "from edge_runtime.cli.main import main\n"
        f"assert main(['run', {model!r}]) == 0\n"  # forked: what the parent imported
        f"parent = [m for m in {PARENT_NEVER!r} if m in sys.modules]\n"
        f"assert main(['run', {model!r}, '--no-sandbox']) == 0\n"  # here: what the work imports
        f"print(json.dumps([parent, [m for m in {WORK_NEVER!r} if m in sys.modules]]))\n"
    )
    assert parent == [] and [m for m in work if m not in own] == []


def test_random_inputs_are_seeded_per_input_and_cover_each_dtype():
    """The inputs `run` and `bench` make (numpy.random no more): the same seed gives the same arrays, another seed or
    another input other ones; floats in [0, 1) at their own precision, integers over their whole range, bools both."""
    from edge_runtime.runtime.backends.base import TensorInfo
    from edge_runtime.runtime.feeds import random_feeds

    ins = [
        TensorInfo("f", (1, 4096), np.dtype(np.float32)),
        TensorInfo("g", (1, 4096), np.dtype(np.float32)),
        TensorInfo("h", (4096,), np.dtype(np.float16)),
        TensorInfo("q", (None, 4096), np.dtype(np.int8)),
        TensorInfo("u", (4096,), np.dtype(np.uint16)),
        TensorInfo("b", (4096,), np.dtype(bool)),
    ]
    a, sources = random_feeds(ins, 3)
    again, _ = random_feeds(ins, 3)
    other, _ = random_feeds(ins, 4)
    for t in ins:
        assert a[t.name].dtype == t.dtype and a[t.name].shape == tuple(d or 1 for d in t.shape)
        assert np.array_equal(a[t.name], again[t.name]) and not np.array_equal(a[t.name], other[t.name])
    assert not np.array_equal(a["f"], a["g"])  # two inputs of one shape get their own data
    for name in ("f", "h"):
        x = a[name].astype(np.float64)
        assert 0.0 <= x.min() and x.max() < 1.0 and abs(x.mean() - 0.5) < 0.03, name
    assert (a["q"].min(), a["q"].max()) == (-128, 127) and a["u"].min() < 1000 and a["u"].max() > 64000
    assert 0.45 < a["b"].mean() < 0.55
    uniform = "random uniform [0, 1)"
    assert sources == {"f": uniform, "g": uniform, "h": uniform, "q": "random integers [-128, 127]",
                       "u": "random integers [0, 65535]", "b": "random bool"}  # fmt: skip
    given, src = random_feeds(ins[:1], 3, {"f": np.zeros((1, 4096), np.float32)})
    assert not given["f"].any() and src == {"f": "file"}


def test_a_small_model_is_hashed_without_openssl_and_a_large_one_with_it():
    """hashlib loads OpenSSL and builds all its algorithms (~3 ms) before it hashes: a model under 1 MiB is hashed by
    the interpreter's own SHA-256, a larger one by OpenSSL; the same digest either way, .xml then .bin for an IR."""
    small = artifact("mobilenet_v1_025_vww", "_int8.xml")  # 245 KB + 242 KB
    large = MODELS / "fc_autoencoder_ad" / "fc_autoencoder_ad_fp32.onnx"
    assert large.stat().st_size > 1 << 20
    code = (
        "import json, sys\n"
        "from edge_runtime.runtime.model import inspect_model\n"
        f"small = inspect_model({str(small)!r}).sha256\n"
        "before = 'hashlib' in sys.modules\n"
        f"large = inspect_model({str(large)!r}).sha256\n"
        "print(json.dumps([small, before, large, 'hashlib' in sys.modules]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got[0] == hashlib.sha256(small.read_bytes() + small.with_suffix(".bin").read_bytes()).hexdigest()
    assert got[2] == hashlib.sha256(large.read_bytes()).hexdigest()
    assert got[1] is False and got[3] is True


def test_onnx_external_data_is_found_and_a_model_without_is_not_walked(tmp_path, monkeypatch):
    """The external-data files an ONNX model names are inputs like the model; a model with none (no "location" key
    in its bytes) is not walked field by field in Python (~3 ms for a 300 KB model, twice per run)."""
    need("onnxruntime")
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from edge_runtime.runtime import model as model_mod

    w = numpy_helper.from_array(np.eye(64, dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "ext",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        [w],
    )
    path = tmp_path / "ext.onnx"
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save_model(m, str(path), save_as_external_data=True, location="ext.weights", size_threshold=0)
    walked = []
    walk = model_mod._external_locations
    monkeypatch.setattr(model_mod, "_external_locations", lambda *a: walked.append(a[3]) or walk(*a))
    assert model_mod.inspect_model(artifact("mobilenet_v1_025_vww", "_int8.onnx")).external == ()
    assert walked == []
    assert model_mod.inspect_model(path).external == (tmp_path / "ext.weights",) and walked
    doc = json.loads(run_cli("run", str(path), "--json").stdout)
    weights = (tmp_path / "ext.weights").read_bytes()
    assert doc["model"]["sha256"] == hashlib.sha256(path.read_bytes() + weights).hexdigest()
    proc = run_cli("run", str(path), "--json", str(tmp_path / "ext.weights"))
    assert_one_line_error(proc, "ext.weights", "the model's external data")
    (tmp_path / "ext.weights").unlink()
    assert_one_line_error(run_cli("run", str(path)), "external data file", "is missing")


def test_a_forked_run_ends_without_a_teardown_and_still_lets_go_of_its_output(tmp_path):
    """The command line ends a forked run with os._exit after its exit handlers (a teardown writes to every page the
    fork made copy-on-write): the text and the --json are complete, and the output's lock file in /run/lock goes."""
    need("onnxruntime")
    from edge_runtime.files.locks import lock_dir

    out = tmp_path / "run.json"
    code = (
        "import sys\n"
        "from edge_runtime.cli.main import main\n"
        f"sys.argv = ['edge-runtime', 'run', {str(artifact('digits_cnn', '_int8.onnx'))!r}, '--json', {str(out)!r}]\n"
        "main()\n"
        "raise SystemExit('main() returned: the process was not ended at once')\n"
    )
    pipe = subprocess.PIPE
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=pipe, stderr=pipe, text=True, cwd=ROOT)
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, stderr
    assert stdout.startswith("model    ") and stdout.endswith("\n") and "time     load" in stdout
    assert json.loads(out.read_text())["schema"] == "edge-runtime/run/1"
    # A claim's lock file holds its holder's pid; the exit handlers removed this one (other commands' may be there).
    locks = [Path(lock_dir()) / n for n in os.listdir(lock_dir()) if n.startswith("edge-runtime-out-")]
    assert [p for p in locks if p.read_text().strip() == str(proc.pid)] == []
