"""The harness's KServe v2 client against the anchor, perf_analyzer (tritonclient 2.41.0's C++ binary), interleaved:

- on a server that answers at once (tests/servers/fast_server.py: precomputed replies, 2 processes sharing the port),
  at concurrency 1 and 16: throughput ratio harness / perf_analyzer (goal at least 0.9), client p50 ratio (goal at
  most 1.10: a harness faster to time a reply than perf_analyzer is not a fault; only its own queueing added to the
  server's latency is), and the client's own CPU per query for both (the harness's from its record,
  `server.client.cpu_us_per_query`, over the timed part of every client process; perf_analyzer's from its process's
  CPU time (getrusage of the reaped child) over its queries, estimated as its throughput times its run's wall time:
  its measurement windows and its stabilisation all run at that rate). Issue 24: this is the case where the client,
  not the server, is the limit; it was 0.64-0.69x at c=1 and 0.30-0.40x at c=16 before the multi-process engine;
- on Triton (digits INT8 through ONNX Runtime in PyTriton's tritonserver, on CPU), at concurrency 1 and 2: the same
  ratios where the server is the limit (goal p50 within 5%); then an open-loop run at a fixed rate: the rate achieved
  against the schedule's, and the send-time error.

perf_analyzer measures windows of 3 s until three agree within 50% (its stability rule, loosened from its default
10%: on this VM identical windows differ by more, and it would give up); the harness runs 6 s per round. Both
clients share the machine's CPUs with the server: a client that costs more CPU per request slows the server too,
and that shows in both ratios, as it would on a real host.
"""

from __future__ import annotations

import csv
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import pytest
import serverkit as servers
from conftest import MODELS, ROOT, need

from .conftest import report_ratio

ROUNDS = 3
DIGITS = MODELS / "digits_cnn" / "digits_cnn_int8.onnx"


def harness(url: str, *flags: str) -> dict:
    store = os.path.join(tempfile.gettempdir(), "edge-bench-benchmarks.sqlite")
    proc = subprocess.run([sys.executable, "-m", "bench.cli", "run", "--target", url, *flags, "--json", "-",
                           "--store", store], capture_output=True, text=True, cwd=ROOT, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["errors"]["failed"] == 0
    return doc


def perf_analyzer(exe, http: str, concurrency: int, out: str, model: str = "digits") -> dict:
    """perf_analyzer's throughput and p50 at `concurrency`, and its CPU per query (its process's user + system time
    over the queries it sent, estimated as throughput x its wall time)."""
    args = ["-m", model, "-u", http, "-i", "http", "--concurrency-range", f"{concurrency}:{concurrency}", "-p",
            "3000", "-s", "50", "--max-trials", "10", "-f", out]  # fmt: skip
    before, t = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    # 10 windows of 3 s at most, then it gives up: 150 s is far beyond (it once ran 300 s at c=16 under a load of 9-16)
    proc = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=150)
    wall, after = time.monotonic() - t, resource.getrusage(resource.RUSAGE_CHILDREN)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    with open(out, newline="") as f:
        (row,) = list(csv.DictReader(f))
    throughput = float(row["Inferences/Second"])
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"throughput": throughput, "p50_us": float(row["p50 latency"]), "cpu_us": cpu_s / (throughput * wall) * 1e6}


@pytest.fixture(scope="module")
def fast():
    with servers.fast(processes=2) as srv:
        yield srv


@pytest.mark.parametrize("concurrency", [1, 16])
def test_the_load_engine_against_perf_analyzer_on_a_server_that_answers_at_once(benchmark, fast, tmp_path, concurrency):
    exe = servers.perf_analyzer_path()
    url = f"kserve+http://{fast.http}/fast"
    got: dict[str, list[dict]] = {"pa": [], "harness": []}
    for i in range(ROUNDS):
        for who in ("pa", "harness") if i % 2 == 0 else ("harness", "pa"):
            if who == "pa":
                got[who].append(perf_analyzer(exe, fast.http, concurrency, str(tmp_path / f"pa{i}.csv"), "fast"))
                continue
            doc = harness(url, "--concurrency", str(concurrency), "--duration", "6", "--warmup", "200")
            assert doc["scenario"]["concurrency"] == concurrency and doc["latency_us"]["count"] > 1000
            client = doc["server"]["client"]
            got[who].append({"throughput": doc["throughput_ips"], "p50_us": doc["latency_us"]["p50"],
                             "cpu_us": client["cpu_us_per_query"], "processes": client["processes"],
                             "engine": client["engine"], "client_bound": client["client_bound"]})  # fmt: skip
    pa, h = got["pa"], got["harness"]
    benchmark.pedantic(lambda: None, rounds=1)
    col = lambda rows, k: [r[k] for r in rows]  # noqa: E731
    per = lambda k: [b[k] / a[k] for a, b in zip(pa, h, strict=True)]  # noqa: E731
    report_ratio(benchmark, f"fast server throughput harness / perf_analyzer, c={concurrency} (inf/s, not us)",
                 col(pa, "throughput"), col(h, "throughput"), goal=float("inf"), goal_low=0.9,
                 per_round=per("throughput"))  # fmt: skip
    report_ratio(benchmark, f"fast server client p50 harness / perf_analyzer, c={concurrency}", col(pa, "p50_us"),
                 col(h, "p50_us"), goal=1.10, per_round=per("p50_us"))  # fmt: skip
    report_ratio(benchmark, f"fast server client CPU/query harness / perf_analyzer, c={concurrency}",
                 col(pa, "cpu_us"), col(h, "cpu_us"), goal=None, per_round=per("cpu_us"))  # fmt: skip
    print(f"\nfast server c={concurrency}: perf_analyzer {pa}\nharness {h}")


@pytest.fixture(scope="module")
def triton():
    need("onnxruntime")
    with servers.triton(DIGITS, "digits", token=None) as srv:  # perf_analyzer 2.41 sends no token over HTTP headers
        yield srv


@pytest.mark.parametrize("concurrency", [1, 2])
def test_the_harness_against_perf_analyzer(benchmark, triton, tmp_path, concurrency):
    exe = servers.perf_analyzer_path()
    url = f"kserve+http://{triton.http}/digits"
    tp_ref, tp_cand, lat_ref, lat_cand, tp_per, lat_per = [], [], [], [], [], []
    for i in range(ROUNDS):
        order = ("pa", "harness") if i % 2 == 0 else ("harness", "pa")
        got = {}
        for who in order:
            if who == "pa":
                got[who] = perf_analyzer(exe, triton.http, concurrency, str(tmp_path / f"pa{i}.csv"))
            else:
                doc = harness(url, "--concurrency", str(concurrency), "--duration", "6", "--warmup", "100")
                # the same work as perf_analyzer's: this concurrency, a closed loop, every query answered
                assert doc["scenario"]["concurrency"] == concurrency and doc["scenario"]["kind"] == "single-stream"
                assert doc["latency_us"]["count"] > 100 and doc["errors"]["failed"] == 0
                got[who] = {"throughput": doc["throughput_ips"], "p50_us": doc["latency_us"]["p50"]}
        assert got["pa"]["throughput"] > 0 and got["pa"]["p50_us"] > 0
        tp_ref.append(got["pa"]["throughput"])
        tp_cand.append(got["harness"]["throughput"])
        lat_ref.append(got["pa"]["p50_us"])
        lat_cand.append(got["harness"]["p50_us"])
        tp_per.append(tp_cand[-1] / tp_ref[-1])
        lat_per.append(lat_cand[-1] / lat_ref[-1])
    benchmark.pedantic(lambda: None, rounds=1)
    report_ratio(benchmark, f"kserve throughput harness / perf_analyzer, c={concurrency} (inf/s, not us)", tp_ref,
                 tp_cand, goal=float("inf"), goal_low=0.9, per_round=tp_per)  # fmt: skip
    report_ratio(benchmark, f"kserve client p50 harness / perf_analyzer, c={concurrency}", lat_ref, lat_cand,
                 goal=1.05, goal_low=0.95, per_round=lat_per)  # fmt: skip
    print(f"\nc={concurrency}: throughput perf_analyzer {tp_ref} harness {tp_cand}; p50 us perf_analyzer {lat_ref} "
          f"harness {lat_cand}")  # fmt: skip


def test_an_open_loop_run_keeps_its_rate_against_the_server(benchmark, triton):
    doc = harness(f"kserve+http://{triton.http}/digits", "--scenario", "server", "--rate", "100", "--duration", "10")
    sc = doc["scenario"]
    assert sc["kind"] == "server" and sc["rate_qps"] == 100 and sc["queries"] == doc["latency_us"]["count"] > 500
    assert sc["latency_from"].startswith("intended")  # open loop: timed from the schedule, not the send
    asked = sc["scheduled_qps"]  # the seeded schedule's own rate over the run
    benchmark.pedantic(lambda: None, rounds=1)
    report_ratio(benchmark, "kserve server scenario: achieved / scheduled rate (qps, not us)", [asked],
                 [sc["achieved_qps"]], goal=1.01, goal_low=0.99)  # fmt: skip
    print(f"\nkserve open loop 100 qps x 10 s: {sc['queries']} queries scheduled ({asked:.1f}/s), "
          f"{sc['achieved_qps']:.1f}/s achieved; send error p50 {sc['send_error_us']['p50']} us, p99 "
          f"{sc['send_error_us']['p99']} us; client p50 {doc['latency_us']['p50']:.0f} us")  # fmt: skip
