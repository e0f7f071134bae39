"""Issue 26's serving benchmarks: `edge-runtime serve` against Triton's dynamic batcher, both driven by perf_analyzer.

- the batching window (max delay 0, 250 us, 1 ms, 4 ms; max batch 8) at concurrency 1, 4 and 16 on the dynamic-batch
  reference model resnet8_int8_dynamic.onnx: throughput and p99 of `edge-runtime serve` and of PyTriton's tritonserver
  (tests/servers/triton_server.py: ONNX Runtime, one thread, one instance, a dynamic batch run as one ONNX Runtime
  call), per cell the ratio edge / Triton (throughput goal >= 1.0, p99 goal <= 1.0);
- the servers' resident memory (VmRSS and VmHWM of the whole process tree) idle after start and under load at
  concurrency 16 (a board has 512 MB: asserted for edge-runtime serve);
- the cost of the protocol: a batch-1 request over loopback at concurrency 1, window 0, against Session.infer of the
  same input in this process on the same CPU (goal: client p50 at most 1.3x Session.infer's p50).

Both servers run whole on one CPU (edge-runtime serve under taskset with --cpus on it; Triton's launcher pins itself
before tritonserver and the Python backend's stub start, so they inherit it) and perf_analyzer on another. Both servers
of a window are up together and measured in turn, the order alternating from cell to cell; the idle one's CPU use is
reported. Triton here is PyTriton's: its tritonserver has only the Python backend, so the model runs in ONNX Runtime in
a Python process behind it, and that hop is most of Triton's "compute" (~3 ms a batch on this VM against ~0.2 ms in
Session.infer); a tritonserver with its native onnxruntime backend would be faster. perf_analyzer measures windows of
PERIOD_MS until three agree within 50% (loosened from its default 10%, as in test_kserve_anchor.py: this VM's identical
runs differ by up to 2x). The goals are printed as PASS/MISS and not asserted: one pair per cell on a shared 2-CPU VM is
not stable enough to fail a build on.

Tables (Markdown) print in the summary and go, with every figure, to EDGE_SERVE_BENCH_JSON (default: serve_bench.json
under pytest's base temporary directory). EDGE_SERVE_BENCH_ROUNDS (default 1) repeats each cell's pair.
"""

from __future__ import annotations

import contextlib
import csv
import gc
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import serverkit as servers
from conftest import MODELS, need

from .conftest import TABLES, report_ratio

MODEL = MODELS / "resnet8" / "resnet8_int8_dynamic.onnx"
NAME = "resnet8"
WINDOWS_US = (0, 250, 1000, 4000)
CONCURRENCY = (1, 4, 16)
MAX_BATCH = 8
PERIOD_MS = 1500
ROUNDS = int(os.environ.get("EDGE_SERVE_BENCH_ROUNDS", "1"))
PROTOCOL_ROUNDS = 3
BOARD_MB = 512
RESULTS: dict = {"model": str(MODEL.relative_to(MODELS.parent)), "max_batch": MAX_BATCH, "cells": [], "memory": []}


def cpus() -> tuple[int, int]:
    """(the servers' CPU, perf_analyzer's CPU): the last and the first this process may use."""
    mine = sorted(os.sched_getaffinity(0))
    if len(mine) < 2:
        pytest.skip(f"needs 2 CPUs (one for the server, one for perf_analyzer); this process may use {mine}")
    return mine[-1], mine[0]


@pytest.fixture(scope="module")
def perf_analyzer():
    need("onnxruntime")
    if importlib.util.find_spec("aiohttp") is None:
        pytest.skip("edge-runtime serve's REST face needs aiohttp: pip install 'edge-runtime[serve]' (make test does)")
    return servers.perf_analyzer_path()


@contextlib.contextmanager
def edge_server(window_us: int, cpu: int, model: Path = MODEL, name: str = NAME):
    """`edge-runtime serve` (REST and gRPC) with its whole process on `cpu`, its one instance pinned there too."""
    # `python -m` from the checkout (serverkit runs servers there): this tree's edge_runtime, not the one the venv's
    # `edge-runtime` script was installed from
    http, grpc = servers.free_ports(2)
    argv = ["taskset", "-c", str(cpu), sys.executable, "-m", "edge_runtime.cli", "serve", f"{name}={model}",
            "--http", f"{servers.HOST}:{http}", "--grpc", f"{servers.HOST}:{grpc}", "--max-batch", str(MAX_BATCH),
            "--max-delay-us", str(window_us), "--cpus", str(cpu)]  # fmt: skip
    with servers._serve(
        "edge",
        argv,
        session=False,
        name=name,
        token=None,
        http=f"{servers.HOST}:{http}",
        grpc=f"{servers.HOST}:{grpc}",
        metrics=None,
    ) as server:
        yield server


@contextlib.contextmanager
def triton_server(window_us: int, cpu: int):
    """PyTriton's tritonserver with the same model, maximum batch and window, its whole process tree on `cpu`."""
    python = servers._venv_python(servers.TRITON_VENV)
    http, grpc, metrics = servers.free_ports(3)
    argv = [str(python), str(servers.SERVERS / "triton_server.py"), "--model", str(MODEL), "--name", NAME,
            "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics), "--no-token",
            "--max-batch", str(MAX_BATCH), "--max-delay-us", str(window_us), "--stack-requests",
            "--cpus", str(cpu)]  # fmt: skip
    addresses = {k: f"{servers.HOST}:{port}" for k, port in (("http", http), ("grpc", grpc), ("metrics", metrics))}
    with servers._serve("triton", argv, session=False, name=NAME, token=None, **addresses) as server:
        yield server


def tree_memory_kb(server) -> dict[str, int]:
    """VmRSS and VmHWM summed over the server's process group (the sum of peaks bounds the peak of the sum)."""
    total = {"VmRSS": 0, "VmHWM": 0}
    for pid in server.group_pids():
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                key, _, value = line.partition(":")
                if key in total:
                    total[key] += int(value.split()[0])
    return {"rss_kb": total["VmRSS"], "hwm_kb": total["VmHWM"]}


def tree_cpu_s(server) -> float:
    """User + system CPU seconds of the server's live processes."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in server.group_pids():
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{pid}/stat").read_bytes()
            rest = stat[stat.rfind(b")") + 2 :].split()
            total += int(rest[11]) + int(rest[12])
    return total / ticks


def idle(server) -> dict:
    """Memory after start, and the CPU the idle server takes (while the other one is measured)."""
    before, t = tree_cpu_s(server), time.monotonic()
    time.sleep(0.5)
    cpu_pct = 100 * (tree_cpu_s(server) - before) / (time.monotonic() - t)
    return {**tree_memory_kb(server), "idle_cpu_pct": round(cpu_pct, 1)}


class RssPeak:
    """The largest VmRSS sum seen while the block runs, sampled every 50 ms."""

    def __init__(self, server) -> None:
        self.server, self.peak_kb, self._stop = server, 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True, name="rss-sampler")

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.peak_kb = max(self.peak_kb, tree_memory_kb(self.server)["rss_kb"])

    def __enter__(self) -> RssPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)


def perf(exe: Path, http: str, concurrency: int, out: Path, cpu: int, period_ms: int = PERIOD_MS,
         protocol: str = "http") -> dict:  # fmt: skip
    """One perf_analyzer run on `cpu`: throughput, client p50/p99, the server's queue and compute (us, its averages
    from the statistics extension) and the average batch (its inference count over its execution count)."""
    args = ["-m", NAME, "-u", http, "-i", protocol, "--concurrency-range", f"{concurrency}:{concurrency}", "-p",
            str(period_ms), "-s", "50", "--max-trials", "10", "-f", str(out)]  # fmt: skip
    # 10 windows at most, then it gives up: 150 s is far beyond
    proc = subprocess.run(["taskset", "-c", str(cpu), str(exe), *args], capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    with open(out, newline="") as f:
        (row,) = list(csv.DictReader(f))
    got = {"throughput": float(row["Inferences/Second"]), "p50_us": float(row["p50 latency"]),
           "p99_us": float(row["p99 latency"]), "queue_us": float(row["Server Queue"]),
           "compute_us": float(row["Server Compute Infer"]),
           # the client's time outside the server's own request time: the wire, the HTTP stack, (de)serialisation
           "network_us": float(row["Network+Server Send/Recv"]),
           "compute_io_us": float(row["Server Compute Input"]) + float(row["Server Compute Output"])}  # fmt: skip
    counts = [re.search(rf"{what} count: (\d+)", proc.stdout) for what in ("Inference", "Execution")]
    if all(counts) and int(counts[1].group(1)):
        got["avg_batch"] = round(int(counts[0].group(1)) / int(counts[1].group(1)), 2)
    return got


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def write_results(tmp_path_factory) -> Path:
    """Every figure as JSON, and the tables as Markdown beside it (.md), for the README."""
    path = Path(os.environ.get("EDGE_SERVE_BENCH_JSON") or tmp_path_factory.getbasetemp() / "serve_bench.json")
    path.write_text(json.dumps(RESULTS, indent=2) + "\n")
    path.with_suffix(".md").write_text("".join(f"### {title}\n\n{table}\n\n" for title, table in TABLES.items()))
    return path


def median_of(runs: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0] if all(k in r for r in runs)}


def record_cell(benchmark, window_us: int, concurrency: int, runs: dict[str, list[dict]]) -> None:
    edge, triton = runs["edge"], runs["triton"]
    per = lambda k: [e[k] / t[k] for e, t in zip(edge, triton, strict=True)]  # noqa: E731
    col = lambda rows, k: [r[k] for r in rows]  # noqa: E731
    where = f"window {window_us} us, c={concurrency}"
    tp = report_ratio(benchmark, f"serve throughput edge / Triton, {where} (inf/s, not us)",
                      col(triton, "throughput"), col(edge, "throughput"), goal=float("inf"), goal_low=1.0,
                      per_round=per("throughput"))  # fmt: skip
    p99 = report_ratio(benchmark, f"serve p99 edge / Triton, {where}", col(triton, "p99_us"), col(edge, "p99_us"),
                       goal=1.0, per_round=per("p99_us"))  # fmt: skip
    RESULTS["cells"].append({"window_us": window_us, "concurrency": concurrency, "edge": median_of(edge),
                             "triton": median_of(triton), "throughput_ratio": tp["ratio_median"],
                             "p99_ratio": p99["ratio_median"], "runs": runs})  # fmt: skip


def batching_table() -> str:
    head = ("| window | c | edge inf/s | Triton inf/s | ratio (goal >= 1.0) | edge p99 ms | Triton p99 ms "
            "| ratio (goal <= 1.0) | edge p50 ms | Triton p50 ms | avg batch edge / Triton |")  # fmt: skip
    lines = [head, "|" + "---|" * 11]
    for c in sorted(RESULTS["cells"], key=lambda c: (c["window_us"], c["concurrency"])):
        e, t, tr, pr = c["edge"], c["triton"], c["throughput_ratio"], c["p99_ratio"]
        batch = " / ".join(f"{r['avg_batch']:.2f}" if "avg_batch" in r else "-" for r in (e, t))
        lines.append(f"| {c['window_us']} us | {c['concurrency']} | {e['throughput']:.0f} | {t['throughput']:.0f} "
                     f"| {tr:.2f} {verdict(tr >= 1.0)} | {e['p99_us'] / 1e3:.2f} | {t['p99_us'] / 1e3:.2f} "
                     f"| {pr:.2f} {verdict(pr <= 1.0)} | {e['p50_us'] / 1e3:.2f} | {t['p50_us'] / 1e3:.2f} "
                     f"| {batch} |")  # fmt: skip
    return "\n".join(lines)


def memory_table() -> str:
    lines = ["| server | idle VmRSS MB | idle VmHWM MB | idle CPU % | c=16 peak VmRSS MB | VmHWM MB after c=16 "
             f"| fits a {BOARD_MB} MB board |", "|" + "---|" * 7]  # fmt: skip
    mb = lambda kb: f"{kb / 1024:.0f}"  # noqa: E731
    for who in ("edge", "triton"):
        rows = [m for m in RESULTS["memory"] if m["server"] == who]
        quiet, load = [m for m in rows if m["when"] == "idle"], [m for m in rows if m["when"] != "idle"]
        if not quiet or not load:
            continue
        hwm = max(m["hwm_kb"] for m in load)
        lines.append(f"| {'edge-runtime serve' if who == 'edge' else 'PyTriton (tritonserver + python)'} "
                     f"| {mb(statistics.median(m['rss_kb'] for m in quiet))} "
                     f"| {mb(statistics.median(m['hwm_kb'] for m in quiet))} "
                     f"| {statistics.median(m['idle_cpu_pct'] for m in quiet):.1f} "
                     f"| {mb(max(m['rss_peak_kb'] for m in load))} | {mb(hwm)} "
                     f"| {verdict(hwm < BOARD_MB * 1024)} |")  # fmt: skip
    return "\n".join(lines)


@pytest.mark.parametrize("window_us", WINDOWS_US)
def test_the_batching_window_against_triton(benchmark, perf_analyzer, tmp_path, tmp_path_factory, window_us):
    server_cpu, client_cpu = cpus()
    with triton_server(window_us, server_cpu) as triton, edge_server(window_us, server_cpu) as edge:
        up = {"edge": edge, "triton": triton}
        for who, srv in up.items():
            RESULTS["memory"].append({"server": who, "window_us": window_us, "when": "idle", **idle(srv)})
        for i, c in enumerate(CONCURRENCY):
            runs: dict[str, list[dict]] = {"edge": [], "triton": []}
            for r in range(ROUNDS):
                first = (i + r + WINDOWS_US.index(window_us)) % 2 == 0
                for who in ("edge", "triton") if first else ("triton", "edge"):
                    with RssPeak(up[who]) as peak:
                        got = perf(perf_analyzer, up[who].http, c, tmp_path / f"{who}-c{c}-{r}.csv", client_cpu)
                    assert got["throughput"] > 0 and got["p99_us"] > 0
                    runs[who].append(got)
                    if c == max(CONCURRENCY):
                        RESULTS["memory"].append({"server": who, "window_us": window_us, "when": f"c={c}",
                                                  "rss_peak_kb": peak.peak_kb, **tree_memory_kb(up[who])})  # fmt: skip
            record_cell(benchmark, window_us, c, runs)
    benchmark.pedantic(lambda: None, rounds=1)
    TABLES["serve: batching window, edge-runtime serve vs Triton"] = batching_table()
    TABLES["serve: resident memory"] = memory_table()
    path = write_results(tmp_path_factory)
    print(f"\nwindow {window_us} us: {json.dumps(RESULTS['cells'][-len(CONCURRENCY) :])}\nfigures: {path}")
    edge_hwm = [m["hwm_kb"] for m in RESULTS["memory"] if m["server"] == "edge"]
    assert max(edge_hwm) < BOARD_MB * 1024, f"edge-runtime serve's VmHWM {max(edge_hwm)} kB: over a {BOARD_MB} MB board"


@contextlib.contextmanager
def pinned(cpu: int):
    """The calling thread (only: Linux's sched_setaffinity(0) is per thread) on `cpu` for the block."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def session_p50_us(session, feeds: dict, iterations: int = 3000) -> float:
    for _ in range(200):
        session.infer(feeds)
    samples = np.empty(iterations, dtype=np.int64)
    gc.disable()  # as the measurement layer does: no collection inside a timed call
    try:
        for i in range(iterations):
            t = time.perf_counter_ns()
            session.infer(feeds)
            samples[i] = time.perf_counter_ns() - t
    finally:
        gc.enable()
    return float(np.median(samples)) / 1e3


def protocol_table(rows: list[dict]) -> str:
    lines = ["| round | Session.infer p50 us | HTTP client p50 us | HTTP / Session (goal <= 1.3) | gRPC client p50 us "
             "| gRPC / Session | server compute us | compute / Session | server queue us | network + HTTP us |",
             "|" + "---|" * 10]  # fmt: skip
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    for label, r in [*((str(i + 1), r) for i, r in enumerate(rows)), ("median", med)]:
        lines.append(f"| {label} | {r['session_p50_us']:.0f} | {r['p50_us']:.0f} | {r['p50_ratio']:.2f} "
                     f"{verdict(r['p50_ratio'] <= 1.3)} | {r['grpc_p50_us']:.0f} | {r['grpc_ratio']:.2f} "
                     f"{verdict(r['grpc_ratio'] <= 1.3)} | {r['compute_us']:.0f} | {r['compute_ratio']:.2f} "
                     f"| {r['queue_us']:.0f} | {r['network_us']:.0f} |")  # fmt: skip
    return "\n".join(lines)


def test_the_protocol_cost_against_session_infer(benchmark, perf_analyzer, tmp_path, tmp_path_factory):
    """A batch-1 request at concurrency 1, window 0, against Session.infer of one input on the server's CPU, in turn."""
    import edge_runtime

    server_cpu, client_cpu = cpus()
    session = edge_runtime.load(str(MODEL), backend="onnxruntime", threads=1)
    info = session.inputs[0]
    feeds = {info.name: np.random.default_rng(0).random((1, *info.shape[1:]), dtype=np.float32)}
    rows: list[dict] = []
    try:
        with edge_server(0, server_cpu) as edge:
            for r in range(PROTOCOL_ROUNDS):
                got: dict = {}
                for who in ("server", "session") if r % 2 == 0 else ("session", "server"):
                    if who == "server":
                        got.update(perf(perf_analyzer, edge.http, 1, tmp_path / f"p{r}.csv", client_cpu, 1000))
                        # gRPC: a lone request runs in its call's thread (no hand-off to the batcher's worker)
                        g = perf(perf_analyzer, edge.grpc, 1, tmp_path / f"g{r}.csv", client_cpu, 1000, "grpc")
                        got.update(grpc_p50_us=g["p50_us"], grpc_network_us=g["network_us"])
                    else:
                        with pinned(server_cpu):
                            got["session_p50_us"] = session_p50_us(session, feeds)
                got["p50_ratio"] = got["p50_us"] / got["session_p50_us"]
                got["grpc_ratio"] = got["grpc_p50_us"] / got["session_p50_us"]
                got["compute_ratio"] = got["compute_us"] / got["session_p50_us"]
                rows.append(got)
        with pinned(server_cpu):
            benchmark.pedantic(session.infer, args=(feeds,), rounds=2000, warmup_rounds=200)
    finally:
        session.close()
    col = lambda k: [r[k] for r in rows]  # noqa: E731
    report_ratio(benchmark, "serve protocol: client p50 / Session.infer p50, c=1, window 0", col("session_p50_us"),
                 col("p50_us"), goal=1.3, per_round=col("p50_ratio"))  # fmt: skip
    report_ratio(benchmark, "serve protocol: gRPC client p50 / Session.infer p50, c=1, window 0",
                 col("session_p50_us"), col("grpc_p50_us"), goal=1.3, per_round=col("grpc_ratio"))  # fmt: skip
    report_ratio(benchmark, "serve protocol: server compute / Session.infer p50, c=1, window 0",
                 col("session_p50_us"), col("compute_us"), goal=None, per_round=col("compute_ratio"))  # fmt: skip
    RESULTS["protocol"] = {"model": RESULTS["model"], "rounds": rows}
    TABLES[f"serve: protocol cost ({MODEL.name}, batch 1, c=1, window 0)"] = protocol_table(rows)
    print(f"\nprotocol cost: {json.dumps(rows)}\nfigures: {write_results(tmp_path_factory)}")
    # What the figures must hold whatever the machine (the 1.3x goal is reported, not asserted: see the README):
    # every round measured both faces and the reference, a request over the wire costs more than the same call in
    # process, and the server's own queue + compute fit inside what the client waited
    assert len(rows) == PROTOCOL_ROUNDS
    for r in rows:
        assert r["session_p50_us"] > 0 and r["p50_us"] > r["session_p50_us"] and r["grpc_p50_us"] > r["session_p50_us"]
        assert 0 < r["queue_us"] + r["compute_us"] < r["p50_us"], r
