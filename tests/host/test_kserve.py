"""KServe v2 targets against real servers on 127.0.0.1: Triton (PyTriton's tritonserver on CPU) over HTTP and gRPC, and
MLServer (JSON tensors only, no statistics). The harness reads the model's metadata, gets the same outputs as a local
ONNX Runtime run, splits the time with the server's statistics, counts the failures of a server stopped mid-run,
and refuses a wrong model or an unreachable host in one line."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest
import serverkit as servers
from conftest import MODELS, ROOT, need
from helpers import read_until, reaped

from bench.store import Store

pytest.importorskip("tritonclient")
DIGITS = MODELS / "digits_cnn" / "digits_cnn_int8.onnx"


def edge_bench(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout)  # fmt: skip


def local_outputs(feeds: dict) -> dict:
    import onnxruntime as ort

    s = ort.InferenceSession(str(DIGITS), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds), strict=True))


@pytest.fixture(scope="module")
def triton():
    need("onnxruntime")
    with servers.triton(DIGITS, "digits") as srv:
        yield srv


def test_triton_over_http_and_grpc_answers_as_onnx_runtime_does_and_splits_the_time(triton, tmp_path):
    from bench.targets import TargetOptions
    from bench.targets.kserve import KServeTarget

    for proto, addr in (("http", triton.http), ("grpc", triton.grpc)):
        options = TargetOptions(headers={"triton-access-token": triton.token})
        t = KServeTarget(f"kserve+{proto}://{addr}/digits", options)
        ident = t.connect()
        assert ident["board"].startswith("triton") and ident["model"] == "digits"
        infos = t.tensor_infos()
        assert [i.name for i in infos] == [i.name for i in __import__("onnxruntime").InferenceSession(
            str(DIGITS)).get_inputs()]  # fmt: skip
        feeds = t.feeds(seed=3)
        got, want = t.infer(feeds), local_outputs(feeds)
        assert set(got) == set(want)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)
    store = tmp_path / "s.sqlite"
    out = tmp_path / "r.json"
    proc = edge_bench("run", "--target", f"kserve+http://{triton.http}/digits?metrics={triton.metrics.split(':')[1]}",
                      "--header", f"triton-access-token: {triton.token}", "--iterations", "200", "--json", str(out),
                      "--store", str(store))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["backend"]["name"] == "kserve" and doc["backend"]["details"]["tensors"].startswith("binary")
    assert doc["latency_us"]["count"] == 200 and doc["errors"]["failed"] == 0
    split = doc["server"]["statistics"]
    assert split["available"] and split["requests"] >= 200  # the server counted the run's requests
    stages = split["stages_us"]
    assert stages["compute_infer"] > 0 and split["server_us"] >= stages["compute_infer"]
    # the client waited at least as long as the server worked; the rest is network and client
    assert split["client_us"] >= split["server_us"] * 0.95 and split["network_client_us"] == pytest.approx(
        split["client_us"] - split["server_us"], abs=0.02)  # fmt: skip
    assert doc["server"]["network"]["rtt_ms"] > 0
    metrics = doc["server"]["metrics"]
    assert metrics["available"] and metrics["cpu_memory_used_bytes"]["max"] > 0 and "no GPU" in metrics["note"]
    assert "split us     queue" in proc.stdout
    with Store(store) as st:
        assert [r.scenario for r in st.runs()] == ["single-stream"]


def test_the_scenarios_run_host_side_against_a_server(triton, tmp_path):
    base = ["--store", str(tmp_path / "s.sqlite"), "--header", f"triton-access-token: {triton.token}"]
    url = f"kserve+grpc://{triton.grpc}/digits"
    proc = edge_bench("run", "--target", url, "--scenario", "server", "--rate", "100", "--duration", "2",
                      "--json", "-", *base)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    sc = doc["scenario"]
    assert sc["kind"] == "server" and sc["latency_from"].startswith("intended") and sc["concurrency"] == 16
    assert 120 < sc["queries"] < 280 and doc["errors"]["failed"] == 0  # Poisson at 100/s for 2 s
    assert doc["server"]["statistics"]["available"]  # the gRPC token reached the statistics too
    proc = edge_bench("run", "--target", url, "--concurrency", "2", "--iterations", "100", "--json", "-", *base)
    doc = json.loads(proc.stdout)
    assert doc["scenario"]["concurrency"] == 2 and doc["latency_us"]["count"] == 100
    proc = edge_bench("run", "--target", url, "--scenario", "offline", "--iterations", "60", "--concurrency", "3",
                      "--json", "-", *base)  # fmt: skip
    doc = json.loads(proc.stdout)
    assert doc["scenario"]["kind"] == "offline" and doc["latency_us"]["count"] == 60 and doc["throughput_ips"] > 0


def test_an_overloaded_server_run_ends_at_its_time_and_says_it_is_saturated(triton, tmp_path):
    """Issue 22, the host's engine: a server scenario at 10 times what Triton sustains here through the open loop's 16
    connections (measured first, a closed loop of 16 in flight) for 2 s. It ends at its time plus at most the grace
    for the queries in flight (it once sent its whole backlog: ten times its duration), the queries it had no time for
    are counted as not sent, and the record, the text and the stored run's Markdown say it was saturated."""
    from bench.scenarios.engine import END_GRACE_S
    from bench.targets.kserve import OPEN_LOOP_WORKERS

    base = ["--store", str(tmp_path / "s.sqlite"), "--header", f"triton-access-token: {triton.token}"]
    url = f"kserve+grpc://{triton.grpc}/digits"
    proc = edge_bench("run", "--target", url, "--concurrency", str(OPEN_LOOP_WORKERS), "--duration", "1", "--json",
                      "-", *base)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    sustained = json.loads(proc.stdout)["throughput_ips"]
    out = tmp_path / "r.json"
    proc = edge_bench("run", "--target", url, "--scenario", "server", "--rate", f"{10 * sustained:.0f}", "--duration",
                      "2", "--json", str(out), *base)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    sc, e = doc["scenario"], doc["errors"]
    assert 2.0 <= doc["wall_s"] < 2.0 + END_GRACE_S, doc["wall_s"]
    # At most what the server sustains for 2 s out of ten times as many: most were not sent, and say so.
    assert sc["saturated"] is True and sc["not_sent_share"] > 0.5 and sc["achieved_qps"] < sc["scheduled_qps"] / 2
    # Not sent is not failed: the error budget charges the queries sent (those show the queue in their latency).
    # `queries` counts the queries sent, as a board's record does (issue 23, step 17); `scheduled` the schedule's.
    assert sc["scheduled"] == sc["queries"] + sc["not_sent"] and "not sent" not in e["kinds"]
    assert e["failed"] == doc["failed_queries"] and e["share"] == pytest.approx(e["failed"] / sc["queries"], abs=1e-6)
    assert sc["send_error_us"]["queries"] == sc["queries"]  # every query sent, not one
    assert "(SATURATED)" in proc.stdout and "warning      saturated: " in proc.stdout
    assert any("saturated: " in w for w in doc["quality"]["warnings"])
    md = edge_bench("report", str(doc["run"]), "--md", "-", *base[:2])
    assert md.returncode == 0 and "| yes |" in md.stdout and f"{sc['not_sent']:,} of {sc['scheduled']:,}" in md.stdout


def test_a_server_stopped_mid_run_costs_queries_not_the_run(tmp_path):
    need("onnxruntime")
    with servers.triton(DIGITS, "digits") as srv:
        store = tmp_path / "s.sqlite"
        cmd = [sys.executable, "-m", "bench.cli", "run", "--target", f"kserve+http://{srv.http}/digits?timeout=2",
               "--scenario", "server", "--rate", "50", "--duration", "6", "--json", "-", "--store", str(store),
               "--slo", "p99=10s", "--slo", "error_budget=0.01"]  # fmt: skip
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            # The first "measuring" line comes a second into the measured part (~50 queries answered): the server
            # stops then, and the 5 s left of the schedule (~250 queries) meet a dead server.
            seen = read_until(proc, "measuring:")
            srv.stop()
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        err = "".join(seen) + err
    assert proc.returncode == 1, err  # the error budget is blown: exit 1, and the run is whole
    doc = json.loads(out)
    e = doc["errors"]
    assert e["failed"] > 10 and e["share"] > 0.2 and doc["latency_us"]["count"] > 20
    assert set(e["kinds"]) <= {"unreachable", "connection lost", "timeout"} and set(e["examples"]) == set(e["kinds"])
    assert doc["failed_queries"] == e["failed"]
    # The error budget counts the same queries: failed or over the bound, out of every query asked (not only the
    # answered ones, which once gave a share over 100%); when the run fell behind (its workers waited on a dead
    # server), the queries it had no time to send count as failed too.
    with Store(store) as st:
        (run,) = st.runs()
    budget = run.verdict["slo"]["error_budget"]
    sc = doc["scenario"]
    unsent = sc["not_sent"] if sc["saturated"] else 0
    asked = e["failed"] + doc["latency_us"]["count"] + unsent
    assert budget["share"] == pytest.approx((e["failed"] + unsent) / asked, abs=1e-5)
    assert budget["share"] <= 1 and not budget["pass"]


def test_mlserver_gets_json_tensors_and_no_statistics(tmp_path):
    need("onnxruntime")
    from bench.targets.kserve import KServeTarget

    with servers.mlserver(DIGITS, "digits") as srv:
        for proto, addr in (("http", srv.http), ("grpc", srv.grpc)):
            t = KServeTarget(f"kserve+{proto}://{addr}/digits")
            t.connect()
            feeds = t.feeds(seed=1)
            got, want = t.infer(feeds), local_outputs(feeds)
            for k in want:
                np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)
        proc = edge_bench("run", "--target", f"kserve+http://{srv.http}/digits", "--iterations", "50", "--json", "-",
                          "--store", str(tmp_path / "s.sqlite"), "--prom", str(tmp_path / "m.prom"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    # A server's record has no board thermal section: the Prometheus file has its latency and no temperature.
    prom = (tmp_path / "m.prom").read_text()
    assert 'edge_runtime_latency_samples{' in prom and "temperature" not in prom
    tensors = doc["backend"]["details"]["tensors"]
    assert tensors.startswith("json (the server refused binary tensors") and "422" in tensors
    assert doc["latency_us"]["count"] == 50 and doc["errors"]["failed"] == 0
    assert doc["store"] == str(tmp_path / "s.sqlite") and doc["run"] == 1  # where the one-off run is kept
    assert doc["server"]["statistics"]["available"] is False and "404" in doc["server"]["statistics"]["reason"]


def test_wrong_models_hosts_and_urls_are_one_line(triton, tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    store = ["--store", str(tmp_path / "s.sqlite")]
    cases = [
        (f"kserve+http://{triton.http}/nope", "no model 'nope' on the server"),
        (f"kserve+grpc://{triton.grpc}/nope", "no model 'nope' on the server"),
        (f"kserve+http://127.0.0.1:{dead}/digits", f"no KServe v2 server at 127.0.0.1:{dead}"),
        (f"kserve+grpc://127.0.0.1:{dead}/digits", f"no KServe v2 server at 127.0.0.1:{dead}"),
        ("kserve+http://127.0.0.1/digits", "HOST:PORT is needed"),
        ("kserve+http://127.0.0.1:8000/", "the path names the model"),
        (f"kserve+http://{triton.http}/digits?timeout=nan", "timeout"),
        (f"kserve+http://{triton.http}/digits?colour=red", "unknown option 'colour'"),
        (f"kserve+http://{triton.http}/digits?timeout=1e-9", "seconds from 0.001"),
        (f"kserve+http://{triton.http}/digits?metrics=99999", "a port from 1 to 65535"),
    ]
    for url, needle in cases:
        t0 = time.monotonic()
        proc = edge_bench("run", "--target", url, "--iterations", "10", *store, timeout=120)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and needle in lines[0], (url, proc.stderr)
        assert time.monotonic() - t0 < 60
    for flags, needle in ((["--cpus", "1"], "--cpus is a board's option"), (["--header", "nocolon"], "--header")):
        proc = edge_bench("run", "--target", f"kserve+http://{triton.http}/digits", *flags, *store)
        assert proc.returncode == 2 and needle in proc.stderr, proc.stderr
    proc = edge_bench("run", "--target", "local:", "--model", str(DIGITS), "--concurrency", "2", *store)
    assert proc.returncode == 2 and "--concurrency goes with a server target" in proc.stderr


def test_a_board_against_triton_gives_the_edge_versus_server_report(triton, tmp_path):
    """The board (its agent over a pty) and the Triton server on the same model file: side by side in every format,
    with the budget per stage and the round trip at which each side wins."""
    import os

    from agentkit import AgentProcess, Cable

    camp = tmp_path / "c.toml"
    camp.write_text(f"""
[campaign]
name = "edge-vs-server"
[[target]]
name = "board"
url = "{{board}}"
cpus = "1"
[[target]]
name = "triton"
url = "kserve+http://{triton.http}/digits?metrics={triton.metrics.split(':')[1]}"
[target.headers]
triton-access-token = "${{EDGE_TEST_TOKEN}}"
[[model]]
name = "digits"
path = "{DIGITS}"
[[scenario]]
iterations = 300
[slo]
p99_ms = 100
""")
    cable = Cable()
    outs = {k: tmp_path / f"r.{k}" for k in ("json", "md", "html", "csv")}
    try:
        with AgentProcess(cable.agent_url, tmp_path / "state"):
            camp.write_text(camp.read_text().replace("{board}", cable.host_url))
            env = {**os.environ, "EDGE_TEST_TOKEN": triton.token}
            proc = subprocess.run([sys.executable, "-m", "bench.cli", "run", str(camp), "--store",
                                   str(tmp_path / "s.sqlite"), "--json", str(outs["json"]), "--md", str(outs["md"]),
                                   "--html", str(outs["html"]), "--csv", str(outs["csv"])], capture_output=True,
                                  text=True, cwd=ROOT, env=env,
                                  timeout=600)  # fmt: skip
    finally:
        cable.close()
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(outs["json"].read_text())
    runs = {r["target"]: r["result"] for r in doc["runs"]}
    assert runs["triton"]["server"]["statistics"]["available"]  # the token from the environment reached the server
    (comp,) = doc["edge_vs_server"]
    assert comp["board"] == "board" and comp["server"] == "triton" and comp["model"] == runs["board"]["model"]["sha256"]
    rtt = runs["triton"]["server"]["network"]["rtt_ms"]
    for p in ("p50", "p99"):  # the crossover: the board's latency minus the server's without its measured network
        want = (runs["board"]["latency_us"][p] - (runs["triton"]["latency_us"][p] - rtt * 1000)) / 1000
        assert comp["crossover_rtt_ms"][p] == pytest.approx(want, abs=1e-3)
        assert ("any round trip" in comp["verdict"][p]) == (want <= 0)
    sb = comp["budget"]["server"]
    assert sb["compute_ms"] > 0 and sb["queue_ms"] is not None and sb["network_ms"] == rtt
    assert comp["budget"]["board"]["link_ms"] is not None  # the board came over the cable
    md = outs["md"].read_text()
    assert "## Edge vs server" in md and "| server | - |" in md and "Crossover round trip: p50" in md
    page = outs["html"].read_text()
    assert '<section id="edge-vs-server">' in page and 'class="budget"' in page and "Crossover round trip" in page
    assert "edge vs server" in proc.stdout and "crossover    p50 " in proc.stdout
    assert "energy       board" in proc.stdout and "totals ms    board" in proc.stdout
    # CSV: still one row per run, each with its side's budget and the crossover of its pair.
    import csv

    rows = {r["target"]: r for r in csv.DictReader(outs["csv"].open())}
    assert set(rows) == {"board", "triton"} and rows["board"]["side"] == "board" and rows["triton"]["versus"] == "board"
    assert float(rows["triton"]["network_ms"]) == pytest.approx(rtt) and float(rows["triton"]["compute_ms"]) > 0
    for r in rows.values():
        assert float(r["crossover_rtt_p50_ms"]) == pytest.approx(comp["crossover_rtt_ms"]["p50"])


def test_targets_describes_a_server_and_names_what_is_wrong(triton):
    proc = edge_bench("targets", f"kserve+grpc://{triton.grpc}/digits", f"kserve+http://{triton.http}/nope")
    assert proc.returncode == 1  # one of the two is not there
    assert "reachable  (triton" in proc.stdout and "inputs input FP32 [1, 8, 8, 1]" in proc.stdout
    assert "UNREACHABLE" in proc.stdout and "no model 'nope'" in proc.stdout
    for header, needle in (("x: a\x01b", "control characters"), ("bad name: v", "--header"),
                           ("t: ${EDGE_NOT_SET_ANYWHERE}", "EDGE_NOT_SET_ANYWHERE is not set")):  # fmt: skip
        proc = edge_bench("run", "--target", f"kserve+http://{triton.http}/digits", "--header", header,
                          "--iterations", "5")  # fmt: skip
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and needle in lines[0], (header, proc.stderr)


def test_a_local_gpu_without_one_is_one_line(tmp_path):
    from bench.metrics import nvml
    from edge_runtime.errors import UserError

    try:
        nvml.check()
    except UserError:
        pass
    else:
        pytest.skip("an NVIDIA GPU is here: tests/gpu (make gpu-check) covers it")
    proc = edge_bench("run", "--target", "local:?device=cuda", "--model", str(DIGITS), "--store",
                      str(tmp_path / "s.sqlite"))  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "no NVIDIA GPU: NVML library not found" in lines[0], proc.stderr


def test_ctrl_c_keeps_what_the_server_answered(triton, tmp_path):
    import signal

    store = tmp_path / "s.sqlite"
    cmd = [sys.executable, "-m", "bench.cli", "run", "--target", f"kserve+http://{triton.http}/digits",
           "--header", f"triton-access-token: {triton.token}", "--scenario", "server", "--rate", "50",
           "--duration", "60", "--json", "-", "--store", str(store)]  # fmt: skip
    for sig in (signal.SIGINT, signal.SIGTERM):
        with reaped(subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)) as proc:
            read_until(proc, "measuring:")  # warmed up, and a second (~50 queries) into the measured part
            proc.send_signal(sig)
            out, err = proc.communicate(timeout=90)
        assert proc.returncode == 128 + sig, err
        doc = json.loads(out)
        assert doc["aborted"]["signal"] == sig.name and doc["latency_us"]["count"] > 20
        assert doc["errors"]["failed"] == 0  # the queries not yet due are not this run's failures
    with Store(store) as st:
        assert len(st.runs()) == 2  # both partial runs kept


def test_gpu_metrics_of_several_gpus_are_combined_as_each_means():
    """Triton's /metrics on a two-GPU server (its metric names and labels): memory, power and energy add up, the
    utilisation is the mean and the temperature the hottest GPU's (summing them gave 125 C and 120 %)."""
    from bench.metrics.prometheus import parse_prometheus

    text = "\n".join(
        [
            "# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)",
            "# TYPE nv_gpu_utilization gauge",
            'nv_gpu_utilization{gpu_uuid="GPU-7a1b"} 0.5',
            'nv_gpu_utilization{gpu_uuid="GPU-9c2d"} 0.7',
            'nv_gpu_memory_used_bytes{gpu_uuid="GPU-7a1b"} 1.5e+09',
            'nv_gpu_memory_used_bytes{gpu_uuid="GPU-9c2d"} 5e+08',
            'nv_gpu_power_usage{gpu_uuid="GPU-7a1b"} 120.5',
            'nv_gpu_power_usage{gpu_uuid="GPU-9c2d"} 80',
            'nv_energy_consumption{gpu_uuid="GPU-7a1b"} 1000',
            'nv_energy_consumption{gpu_uuid="GPU-9c2d"} 500',
            'nv_gpu_temperature{gpu_uuid="GPU-7a1b"} 60',
            'nv_gpu_temperature{gpu_uuid="GPU-9c2d"} 65',
            'nv_gpu_temperature{gpu_uuid="GPU-dead"} NaN',
            'nv_inference_count{model="digits",version="1"} 10',
        ]
    )
    got = parse_prometheus(text)
    assert got == pytest.approx(
        {
            "gpu_utilization": 0.6,
            "gpu_memory_used_bytes": 2e9,
            "gpu_power_w": 200.5,
            "gpu_energy_j": 1500.0,
            "gpu_temperature_c": 65.0,
        }
    )


def test_gpu_energy_counts_the_measured_part_only():
    """NVML is sampled from before the child loads the model: 4 s of loading and warm-up at 300 W, then 5 s
    measured at 100 W (1000 inferences). The energy per inference is the measured part's, 100 W x 5 s / 1000."""
    from bench.metrics.nvml import window_summary

    samples, energy_mj = [], 0.0
    for i in range(37):  # every 0.25 s for 9 s
        t = i * 0.25
        power = 300.0 if t < 4.0 else 100.0
        samples.append({"t_s": t, "power_w": power, "energy_mj": energy_mj, "utilization_pct": 90 if t >= 4 else 5})
        energy_mj += power * 0.25 * 1000
    got = window_summary(samples, 4.0, 9.0, 1000)
    assert got["energy_j"] == pytest.approx(500.0, rel=0.06)
    assert got["energy_per_inference_uj"] == pytest.approx(500_000.0, rel=0.06)
    assert got["power_w"]["mean"] == pytest.approx(100.0, abs=10) and got["utilization_pct"]["mean"] >= 80
    whole = window_summary(samples, None, None, 1000)
    assert whole["energy_j"] > 1.5 * got["energy_j"]  # what counting the load and warm-up gave
    short = window_summary(samples, 8.9, 9.0, 10)
    assert "energy_j" not in short and "shorter than two NVML readings" in short["energy_note"]
