"""The harness against the engine it drives, and the open-loop schedule against its plan, in the same run.

1. Single-stream through the harness (`edge-bench run --target local:`) against `edge-runtime bench` directly, same
   model (resnet8 INT8, TFLite), same CPU, interleaved: ratio of their p50 (goal at most 1.02). Both run the model in
   a child process; the harness adds only what happens before and after the measured loop.
2. The server scenario at 500 queries/s for 10 s (digits INT8 on TFLite, pinned): achieved rate against the rate the
   seeded schedule asked for (goal within 1%), and the send-time error p50/p99 (reported).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from conftest import MODELS, ROOT, need

from .conftest import report_ratio

ROUNDS = 7
MODEL = str(MODELS / "digits_cnn" / "digits_cnn_int8.tflite")
# digits runs in ~2-3 us, and on this VM each process lands in one of two modes (2.2 or 2.9 us) whoever starts it:
# the harness comparison uses resnet8 (~100 us), where a few us of process luck is not the harness.
SINGLE_STREAM_MODEL = str(MODELS / "resnet8" / "resnet8_int8.tflite")


def _json(cmd: list[str]) -> dict:
    store = os.path.join(tempfile.gettempdir(), "edge-bench-benchmarks.sqlite")
    env = {**os.environ, "EDGE_BENCH_STORE": store}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_single_stream_through_the_harness_against_edge_runtime_bench(benchmark):
    need("tflite")
    flags = ["--cpus", "1", "--iterations", "5000", "--warmup", "200"]
    ref, cand, per = [], [], []
    for _ in range(ROUNDS):
        direct = _json([sys.executable, "-m", "edge_runtime.cli", "bench", SINGLE_STREAM_MODEL, *flags, "--json"])
        via = ["run", "--target", "local:", "--model", SINGLE_STREAM_MODEL, *flags, "--json", "-"]
        harness = _json([sys.executable, "-m", "bench.cli", *via])
        # the same run both ways, or the ratio compares different work
        assert harness["config"] == direct["config"] and harness["model"]["sha256"] == direct["model"]["sha256"]
        ref.append(direct["latency_us"]["p50"])
        cand.append(harness["latency_us"]["p50"])
        per.append(cand[-1] / ref[-1])
    benchmark.pedantic(lambda: None, rounds=1)
    report_ratio(benchmark, "harness local: / edge-runtime bench, p50 (resnet8 tflite)", ref, cand, goal=1.02,
                 per_round=per)  # fmt: skip


def test_the_server_scenario_keeps_its_rate(benchmark):
    need("tflite")
    doc = _json([sys.executable, "-m", "edge_runtime.cli", "bench", MODEL, "--cpus", "1", "--scenario", "server",
                 "--rate", "500", "--duration", "10", "--json"])  # fmt: skip
    sc = doc["scenario"]
    assert sc["kind"] == "server" and sc["rate_qps"] == 500 and sc["queries"] == doc["latency_us"]["count"] > 0
    asked = sc["scheduled_qps"]  # the seeded schedule's own rate over the run (queries counts those sent)
    benchmark.pedantic(lambda: None, rounds=1)
    # Three figures, because a Poisson schedule of 10 s at 500/s holds 5000 +- 71 queries by its nature: the harness
    # keeps the rate it was given when achieved / scheduled is within 1%; against the nominal 500/s the draw's own
    # spread adds to it (shown, the goal is the harness's).
    report_ratio(benchmark, "server scenario: achieved / scheduled rate (qps, not us)", [asked], [sc["achieved_qps"]],
                 goal=1.01, goal_low=0.99)  # fmt: skip
    report_ratio(benchmark, "server scenario: achieved / nominal 500 qps (qps, not us)", [500.0],
                 [sc["achieved_qps"]], goal=None)  # fmt: skip
    report_ratio(benchmark, "server scenario: scheduled / nominal 500 qps (the Poisson draw)", [500.0], [asked],
                 goal=None)  # fmt: skip
    # The send error (actual minus intended send), as a share of the mean gap between queries (2000 us).
    err = sc["send_error_us"]
    for q in ("p50", "p99"):
        report_ratio(benchmark, f"server scenario: send error {q} / 2000 us mean gap", [2000.0], [float(err[q])],
                     goal=None)  # fmt: skip
    benchmark.extra_info.update({"send_error_us": err, "achieved_qps": sc["achieved_qps"], "scheduled_qps": asked})
    print(f"\nserver 500 qps x 10 s: {sc['queries']} queries scheduled ({asked:.1f}/s), {sc['achieved_qps']:.1f}/s "
          f"achieved; send error p50 {err['p50']} us, p99 {err['p99']} us")  # fmt: skip
