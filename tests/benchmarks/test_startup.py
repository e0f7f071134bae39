"""A one-shot `edge-runtime run` against a six-line script calling the backend's library directly, same model
(MobileNet-0.25 INT8), fresh processes, interleaved rounds: wall time and peak RSS (ru_maxrss of the process and the
children it waited for: the crash check's child counts). Goals (issue 16): with the crash check on, at most 1.2x the
script's time and at most its peak RSS + 5 MB. `--no-sandbox` beside it shows what the check itself costs. The agent's
idle RSS is reported too (the resident size a board pays for keeping it up).

Bytecode is written for these runs (PYTHONDONTWRITEBYTECODE is dropped, and a first round is not counted): an
installed wheel has its .pyc files, and compiling the sources on every start is not what a board pays.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import time

import pytest
from conftest import MODELS, ROOT, need

from .conftest import report_ratio

ROUNDS = 9
MODEL = MODELS / "mobilenet_v1_025_vww" / "mobilenet_v1_025_vww_int8"
BIN = os.path.dirname(sys.executable)
DIRECT = {
    "onnxruntime": (
        ".onnx",
        "import sys, numpy as np, onnxruntime as ort\n"
        "s = ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])\n"
        "i = s.get_inputs()[0]\n"
        "x = np.zeros([d if isinstance(d, int) else 1 for d in i.shape], dtype=np.float32)\n"
        "print(s.run(None, {i.name: x})[0].shape)\n",
    ),
    "openvino": (
        ".xml",
        "import sys, numpy as np, openvino as ov\n"
        "c = ov.Core().compile_model(sys.argv[1], 'CPU')\n"
        "x = np.zeros(list(c.inputs[0].shape), dtype=np.float32)\n"
        "print(c(x)[c.outputs[0]].shape)\n",
    ),
    "tflite": (
        ".tflite",
        "import sys, numpy as np\n"
        "from ai_edge_litert.interpreter import Interpreter\n"
        "it = Interpreter(model_path=sys.argv[1]); it.allocate_tensors()\n"
        "d = it.get_input_details()[0]\n"
        "it.set_tensor(d['index'], np.zeros(d['shape'], dtype=d['dtype'])); it.invoke()\n"
        "print(it.get_tensor(it.get_output_details()[0]['index']).shape)\n",
    ),
}
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(cmd: list[str]) -> tuple[float, float]:
    """(wall ms, peak RSS MB of the process and the children it reaped)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV, cwd=ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = (time.perf_counter() - t0) * 1e3
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, (cmd, proc.stderr.read().decode(errors="replace"))
    proc.stderr.close()
    return wall, usage.ru_maxrss / 1024


@pytest.mark.parametrize("backend", list(DIRECT))
def test_a_one_shot_run_against_the_direct_script(benchmark, backend, tmp_path):
    need(backend)
    ext, code = DIRECT[backend]
    script = tmp_path / "direct.py"
    script.write_text(code)
    model = str(MODEL) + ext
    cmds = {
        "direct": [sys.executable, str(script), model],
        "check": [os.path.join(BIN, "edge-runtime"), "run", model, "--backend", backend],
        "no-sandbox": [os.path.join(BIN, "edge-runtime"), "run", model, "--backend", backend, "--no-sandbox"],
    }
    got: dict[str, list[tuple[float, float]]] = {k: [] for k in cmds}
    for r in range(ROUNDS + 1):
        for k, cmd in cmds.items():
            m = timed(cmd)
            if r:  # the first round writes the bytecode and warms the page cache
                got[k].append(m)
    benchmark.pedantic(lambda: None, rounds=1)
    wall = {k: [w for w, _ in v] for k, v in got.items()}
    rss = {k: statistics.median(m for _, m in v) for k, v in got.items()}
    per_round = [c / d for c, d in zip(wall["check"], wall["direct"], strict=True)]
    report_ratio(benchmark, f"one-shot run / direct script, {backend} (ms)", wall["direct"], wall["check"],
                 goal=1.2, per_round=per_round)  # fmt: skip
    alone = [c / d for c, d in zip(wall["no-sandbox"], wall["direct"], strict=True)]
    report_ratio(benchmark, f"run --no-sandbox / direct script, {backend} (ms)", wall["direct"], wall["no-sandbox"],
                 goal=None, per_round=alone)  # fmt: skip
    extra = rss["check"] - rss["direct"]
    benchmark.extra_info.update({f"peak_rss_mb_{k}": round(v, 1) for k, v in rss.items()})
    med = {k: statistics.median(v) for k, v in wall.items()}
    print(f"\n{backend}: median wall direct {med['direct']:.0f} ms, run {med['check']:.0f} ms, --no-sandbox "
          f"{med['no-sandbox']:.0f} ms; peak RSS direct {rss['direct']:.1f} MB, run {rss['check']:.1f} MB "
          f"({extra:+.1f} MB; goal +5), --no-sandbox {rss['no-sandbox']:.1f} MB")  # fmt: skip
    # the work timed is what it says: every command ran the model (exit 0) and loaded the backend's library
    assert min(rss.values()) > 20


def test_the_agents_idle_rss(benchmark, tmp_path):
    """The resident size of an agent waiting for a host (TCP on 127.0.0.1): what keeping it up costs a board."""
    import psutil

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [os.path.join(BIN, "edge-runtime"), "agent", f"tcp://127.0.0.1:{port}", "--state-dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=ENV,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # listening: it has started and is idle
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail("the agent did not listen within 60 s")
        time.sleep(1.0)
        rss = psutil.Process(proc.pid).memory_info().rss / 2**20
        threads = psutil.Process(proc.pid).num_threads()
    finally:
        proc.terminate()
        proc.wait(30)
    benchmark.pedantic(lambda: None, rounds=1)
    benchmark.extra_info.update({"agent_idle_rss_mb": round(rss, 1), "agent_threads": threads})
    print(f"\nagent idle: {rss:.1f} MB resident, {threads} threads")
    assert rss > 5
