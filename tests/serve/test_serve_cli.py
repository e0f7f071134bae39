"""Issue 26, `edge-runtime serve` as a user runs it: a child process on 127.0.0.1 with free ports, real clients
(tritonclient over HTTP and gRPC), the harness's own kserve+http:// and kserve+grpc:// targets against it, SIGTERM
with requests in flight, a thermal crossing on a fake thermal tree, and the refusals at start (one line, exit 2)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from conftest import MODELS, ROOT, need
from helpers import assert_one_line_error, cli, cli_child, end, thermal_tree

DIGITS = MODELS / "digits_cnn" / "digits_cnn_int8.onnx"
RESNET_DYN = MODELS / "resnet8" / "resnet8_int8_dynamic.onnx"
RESNET_DYN_IR = MODELS / "resnet8" / "resnet8_int8_dynamic.xml"


def started(*args: str, timeout: float = 120.0) -> tuple[subprocess.Popen, dict[str, str], list[str]]:
    """`edge-runtime serve ARGS` on free ports; its addresses from the ready line, and its log (stderr) as it comes."""
    proc = cli_child("serve", *args, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0")
    log: list[str] = []
    threading.Thread(target=lambda: log.extend(proc.stderr), daemon=True).start()
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    if not got or not got[0].startswith("ready "):
        end(proc)
        raise AssertionError(f"no ready line within {timeout:g} s: {got} {''.join(log)[-2000:]}")
    where = dict(part.split("=", 1) for part in got[0].split()[1:])
    return proc, where, log


@pytest.fixture(scope="module")
def server():
    need("onnxruntime")
    proc, where, log = started(str(DIGITS), str(RESNET_DYN), "--max-batch", "4", "--max-delay-us", "3000")
    yield proc, where, log
    end(proc)


def local(path, x: np.ndarray) -> dict[str, np.ndarray]:
    from edge_runtime import load

    with load(path, threads=1) as s:
        return s.infer({s.inputs[0].name: x})


def test_tritonclient_http_and_grpc_get_what_a_local_session_gets(server):
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    _, where, _ = server
    x = np.random.default_rng(1).standard_normal((3, 32, 32, 3)).astype(np.float32)
    want = local(RESNET_DYN, x)["probabilities"]
    for mod, url in ((httpclient, where["http"]), (grpcclient, where["grpc"])):
        c = mod.InferenceServerClient(url)
        inp = mod.InferInput("input", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        got = c.infer("resnet8_int8_dynamic", [inp]).as_numpy("probabilities")
        np.testing.assert_array_equal(got, want)
        meta = c.get_model_metadata("digits_cnn_int8")
        assert (meta["name"] if isinstance(meta, dict) else meta.name) == "digits_cnn_int8"


def test_the_log_says_which_model_cannot_batch_and_why(server):
    _, _, log = server
    text = "".join(log)
    assert re.search(r"model digits_cnn_int8: .*fixed first dimension of 1: requests run one at a time", text), text
    assert re.search(r"model resnet8_int8_dynamic: .*batches up to 4, window 3000 us", text), text


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_the_harness_targets_work_against_it_unchanged(server, tmp_path, proto):
    """edge-bench's kserve+http:// and kserve+grpc:// targets, with the model file checked against the server's."""
    _, where, _ = server
    url = f"kserve+{proto}://{where[proto]}/resnet8_int8_dynamic"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.cli", "run", "--target", url, "--model", str(RESNET_DYN), "--duration", "1",
         "--json", "-", "--store", str(tmp_path / "s.sqlite")],
        capture_output=True, text=True, cwd=ROOT, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["errors"]["failed"] == 0 and doc["latency_us"]["count"] > 10, doc["errors"]
    assert doc["backend"]["details"]["server"] == "edge-runtime"


def test_sigterm_finishes_what_is_in_flight_and_exits_0():
    """Four requests held by a 2 s window (max batch 8 is never reached) when SIGTERM comes: all four are answered,
    a request after it is refused, and the server exits 0 saying so."""
    import tritonclient.http as httpclient

    need("onnxruntime")
    proc, where, log = started(str(RESNET_DYN), "--max-batch", "8", "--max-delay-us", "2000000")
    try:
        x = np.ones((1, 32, 32, 3), np.float32)

        def one(_):
            c = httpclient.InferenceServerClient(where["http"], network_timeout=60)
            inp = httpclient.InferInput("input", [1, 32, 32, 3], "FP32")
            inp.set_data_from_numpy(x)
            return c.infer("resnet8_int8_dynamic", [inp]).as_numpy("probabilities").shape

        with ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(one, i) for i in range(4)]
            deadline = time.monotonic() + 30
            while "queued" not in _stats(where["http"]) or _stats(where["http"])["queued"] < 4:
                assert time.monotonic() < deadline, "the four requests never reached the queue"
                time.sleep(0.02)
            proc.send_signal(signal.SIGTERM)
            assert [f.result(timeout=60) for f in futures] == [(1, 10)] * 4
        assert proc.wait(30) == 0
        text = "".join(log)
        assert "refusing new requests, finishing those in flight" in text and "stopped" in text, text
    finally:
        end(proc)


def _stats(http: str) -> dict:
    import urllib.request

    with urllib.request.urlopen(f"http://{http}/v2/models/resnet8_int8_dynamic/stats", timeout=10) as r:
        return json.loads(r.read())["model_stats"][0]


def test_a_thermal_crossing_refuses_and_then_resumes(tmp_path):
    import urllib.error
    import urllib.request

    need("onnxruntime")
    root = thermal_tree(tmp_path, {"cpu-thermal": "50000"})
    temp = root / "sys/class/thermal/thermal_zone0/temp"
    proc, where, log = started(
        str(DIGITS), "--sysroot", str(root), "--thermal-limit", "70", "--thermal-hysteresis", "4"
    )
    body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 8, 8, 1], "data": [0.0] * 64}]})

    def infer() -> tuple[int, dict]:
        req = urllib.request.Request(f"http://{where['http']}/v2/models/digits_cnn_int8/infer", body.encode())
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, dict(r.headers)
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers)

    def until(status: int) -> tuple[int, dict]:
        end_at = time.monotonic() + 20
        while True:
            got = infer()
            if got[0] == status or time.monotonic() > end_at:
                return got
            time.sleep(0.1)

    try:
        assert infer()[0] == 200
        temp.write_text("72000\n")
        status, headers = until(503)
        assert status == 503 and int(headers["Retry-After"]) >= 1
        temp.write_text("67500\n")  # below the limit, above limit - hysteresis: still refusing
        time.sleep(1.5)
        assert infer()[0] == 503
        temp.write_text("60000\n")
        assert until(200)[0] == 200
        with urllib.request.urlopen(f"http://{where['http']}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        assert "edge_serve_thermal_crossings_total 1.0" in metrics and "edge_serve_temperature_celsius 60.0" in metrics
    finally:
        end(proc)
    assert "thermal: refusing new work at 70 C, again below 66 C; now 50.0 C" in "".join(log)


def test_a_model_that_fails_to_load_is_refused_at_start_and_nothing_listens(tmp_path):
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(DIGITS.read_bytes()[:500])
    port = _free_port()
    proc = cli("serve", str(DIGITS), str(bad), "--http", f"127.0.0.1:{port}", "--grpc", "off")
    assert_one_line_error(proc, "broken.onnx")
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


@pytest.mark.parametrize(
    "args, words",
    [
        (["--http", "0.0.0.0:0"], "--http 0.0.0.0:0: listening beyond loopback needs --token-file"),
        (["--grpc", "10.1.2.3:8001"], "--grpc 10.1.2.3:8001: listening beyond loopback needs --token-file"),
        (["--http", "localhost"], "--http 'localhost': expected HOST:PORT"),
        (["--http", "board.local:80"], "'board.local' is not an IP address"),
        (["--http", "off", "--grpc", "off"], "nothing would listen"),
        (["--max-delay-us", "nan"], "--max-delay-us"),
        (["--max-batch", "1000000000000"], "--max-batch"),
        (["--thermal-limit", "1e12"], "--thermal-limit"),
    ],
)
def test_bad_flags_are_one_line_each(args, words):
    proc = cli("serve", str(DIGITS), *args)
    assert_one_line_error(proc, words)


def test_two_models_with_one_name_and_a_taken_port_are_refused(tmp_path):
    proc = cli("serve", str(DIGITS), f"digits_cnn_int8={RESNET_DYN}", "--grpc", "off")
    assert_one_line_error(proc, "the name 'digits_cnn_int8' is taken")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = cli("serve", str(DIGITS), "--http", f"127.0.0.1:{port}", "--grpc", "off")
    assert_one_line_error(proc, f"--http 127.0.0.1:{port}: cannot listen")


def test_a_token_is_needed_when_given(tmp_path):
    import urllib.error
    import urllib.request

    need("onnxruntime")
    token = tmp_path / "token"
    token.write_text("s3cret-s3cret-s3cret\n")
    os.chmod(token, 0o600)
    proc, where, _ = started(str(DIGITS), "--token-file", str(token))
    try:
        url = f"http://{where['http']}/v2/models/digits_cnn_int8"
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(url, timeout=10)
        assert err.value.code == 401
        req = urllib.request.Request(url, headers={"Authorization": "Bearer s3cret-s3cret-s3cret"})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert json.loads(r.read())["name"] == "digits_cnn_int8"
    finally:
        end(proc)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_openvino_ir_variant_serves_batches_too(tmp_path):
    """The dynamic-batch IR (make models) through OpenVINO behind the same protocol: three rows in one request."""
    import tritonclient.http as httpclient

    need("openvino")
    proc, where, log = started(str(RESNET_DYN_IR), "--max-batch", "4")
    try:
        x = np.random.default_rng(3).standard_normal((3, 32, 32, 3)).astype(np.float32)
        c = httpclient.InferenceServerClient(where["http"])
        inp = httpclient.InferInput("input", [3, 32, 32, 3], "FP32")
        inp.set_data_from_numpy(x)
        got = c.infer("resnet8_int8_dynamic", [inp]).as_numpy("probabilities")
        np.testing.assert_allclose(got, local(RESNET_DYN_IR, x)["probabilities"], rtol=1e-4, atol=1e-5)
        assert c.get_model_config("resnet8_int8_dynamic")["max_batch_size"] == 4
    finally:
        end(proc)
    assert re.search(r"model resnet8_int8_dynamic: .* on openvino CPU; batches up to 4", "".join(log)), "".join(log)


def test_a_campaign_puts_the_served_board_beside_a_local_run(server, tmp_path):
    """One campaign: the model run here (local:, the board side) and on the serving board (its server side): the
    report's edge-versus-server section pairs them."""
    _, where, _ = server
    campaign = tmp_path / "c.toml"
    campaign.write_text(f"""[campaign]
name = "served"
repetitions = 1

[[target]]
name = "here"
url = "local:"

[[target]]
name = "served"
url = "kserve+http://{where["http"]}/resnet8_int8_dynamic"

[[model]]
name = "resnet8"
path = "{RESNET_DYN}"

[[scenario]]
kind = "single-stream"
iterations = 300
""")
    proc = subprocess.run(
        [sys.executable, "-m", "bench.cli", "run", str(campaign), "--store", str(tmp_path / "s.sqlite"),
         "--html", str(tmp_path / "r.html")],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    section = proc.stdout.split("edge vs server", 1)
    assert len(section) == 2 and "here" in section[1] and "served" in section[1], proc.stdout[-3000:]
    assert "edge vs server" in (tmp_path / "r.html").read_text().lower()


def test_without_the_serve_extra_it_is_one_line_naming_what_to_install():
    """A board with only the runtime installed: aiohttp cannot be imported (blocked here in the child)."""
    code = (
        "import sys; sys.modules['aiohttp'] = None\n"
        "from edge_runtime.cli import main\n"
        f"sys.exit(main(['serve', {str(DIGITS)!r}, '--grpc', 'off', '--http', '127.0.0.1:0']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert_one_line_error(proc, "serve needs aiohttp, not installed here", "edge-runtime[serve]")
