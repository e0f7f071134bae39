"""Issue 24, part A: a KServe v2 server's answers are checked, not trusted. Against tests/servers/liar_server.py (a
real HTTP and gRPC server on 127.0.0.1 that lies one way per model name), `edge-bench run` as a user runs it: every
wrong answer is a failed query of kind "wrong answer" with its first words kept, a run in which nothing succeeded
exits 1, a first request that fails says both causes (binary and JSON) in their own words, a server whose model is
not the --model file is refused (exit 2), and every malformed URL is one line and exit 2, never echoing a password.
The checks themselves are pure functions, tested here on tables of answers."""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import MODELS, ROOT

from bench.slo import nothing_succeeded
from bench.store import Store
from bench.targets.kserve_answers import WRONG, Expected, check_answer, expected_outputs, unreadable
from bench.targets.kserve_model import difference, file_io
from bench.targets.kserve_protocol import parse_url
from edge_runtime.errors import UserError

DIGITS = MODELS / "digits_cnn" / "digits_cnn_int8.onnx"
LIAR = ROOT / "tests" / "servers" / "liar_server.py"
READY_S = 30.0
LOGITS = (Expected("logits", "FP32", (1, 10)),)


def out(**kw) -> dict:
    return {"name": "logits", "datatype": "FP32", "shape": [1, 10], **kw}


BIN = {"parameters": {"binary_data_size": 40}}


@pytest.mark.parametrize(
    ("header", "body_len", "needle"),
    [
        ({"outputs": [out(**BIN)]}, 40, None),
        ({"outputs": [out(data=list(range(10)))]}, 0, None),
        ({"outputs": [out(data=[list(range(10))])]}, 0, None),  # nested row-major data
        ({"outputs": [out(data=list(range(10)))]}, None, None),  # body length unknown: not checked
        ({"outputs": [out(shape=[1, 11], data=list(range(11)))]}, 0, "shape [1,11], the model says [1,10]"),
        ({"outputs": [out(shape=[10], data=list(range(10)))]}, 0, "shape [10], the model says [1,10]"),
        ({"outputs": [out(datatype="FP64", parameters={"binary_data_size": 80})]}, 80, "datatype FP64, the model"),
        ({"outputs": [{**out(**BIN), "name": "scores"}]}, 40, "no output 'logits' in the answer (it has: 'scores')"),
        ({"outputs": [out(**BIN), {**out(**BIN), "name": "extra"}]}, 80, "output 'extra' is not one of the model's"),
        ({"outputs": [out(**BIN)]}, 20, "declare 40 bytes of binary data, the body holds 20"),
        ({"outputs": [out(**BIN)]}, 60, "the body holds 60"),
        ({"outputs": [out(parameters={"binary_data_size": 2**62})]}, 40, "binary_data_size 4,611,686,018,427,387,904"),
        ({"outputs": [out(shape=[1, 2**62], data=[0.0] * 10)]}, 0, "shape [1,4611686018427387904]"),
        ({"outputs": [out(parameters={"binary_data_size": -4})]}, 0, "is not a size"),
        ({"outputs": [out(parameters={"binary_data_size": "40"})]}, 40, "is not a size"),
        ({"outputs": [out(data=list(range(5)))]}, 0, "5 values in data, its shape [1,10] holds 10"),
        ({"outputs": [out(data={"a": 1})]}, 0, "data is not a list of values"),
        ({"outputs": [out(data=[[1, 2], 3])]}, 0, "data is not a list of values"),
        ({"outputs": [out()]}, 0, "neither data nor binary_data_size"),
        ({"outputs": [out(shape=[1, -10], **BIN)]}, 40, "is not a list of sizes"),
        ({"outputs": [out(shape="1,10", **BIN)]}, 40, "is not a list of sizes"),
        ({"outputs": [out(shape=[1] * 65, **BIN)]}, 40, "is not a list of sizes"),
        ({"outputs": {"logits": 1}}, 0, "no list of outputs"),
        ({}, 0, "no list of outputs"),
        ([1, 2, 3], 0, "not a JSON object (a list)"),
        ("text", 0, "not a JSON object (a str)"),
        (None, 0, "not a JSON object (a NoneType)"),
    ],
)
def test_an_answer_is_checked_against_the_model(header, body_len, needle):
    why = check_answer(LOGITS, header, body_len)
    assert (why is None) if needle is None else (needle in why and "\n" not in why), why


def test_a_minus_one_matches_anything_and_a_batching_server_must_answer_the_batch_asked():
    dynamic = expected_outputs([{"name": "y", "datatype": "INT8", "shape": [-1, 4]}])
    for n in (1, 7):
        got = {
            "outputs": [{"name": "y", "datatype": "INT8", "shape": [n, 4], "parameters": {"binary_data_size": 4 * n}}]
        }
        assert check_answer(dynamic, got, 4 * n) is None
    # Triton with max_batch_size > 0 says -1 for the batch: the answer must have the batch the request had.
    batched = expected_outputs([{"name": "y", "datatype": "INT8", "shape": [-1, 4]}], {"max_batch_size": 8}, 1)
    assert batched == (Expected("y", "INT8", (1, 4)),)
    got = {"outputs": [{"name": "y", "datatype": "INT8", "shape": [2, 4], "data": [0] * 8}]}
    assert "shape [2,4], the model says [1,4]" in check_answer(batched, got, 0)
    text = expected_outputs([{"name": "s", "datatype": "BYTES", "shape": [1]}])  # BYTES: sizes vary, not checked
    got = {"outputs": [{"name": "s", "datatype": "BYTES", "shape": [1], "data": ["ab"]}]}
    assert check_answer(text, got, 0) is None


def test_what_tritonclient_could_not_read_is_a_wrong_answer_and_the_rest_keep_their_kind():
    from tritonclient.utils import InferenceServerException

    assert "could not be read (TypeError: list indices" in unreadable(TypeError("list indices must be integers"))
    assert unreadable(InferenceServerException("bad", status="400")) is None
    assert unreadable(ConnectionResetError("reset by peer")) is None and unreadable(TimeoutError()) is None


def test_the_grpc_answer_is_checked_as_the_http_one():
    from tritonclient.grpc import service_pb2 as pb

    from bench.targets.kserve_answers import grpc_answer

    tensor = pb.ModelInferResponse.InferOutputTensor
    right = pb.ModelInferResponse(outputs=[tensor(name="logits", datatype="FP32", shape=[1, 10])],
                                  raw_output_contents=[b"\0" * 40])  # fmt: skip
    assert check_answer(LOGITS, *grpc_answer(right)) is None
    short = pb.ModelInferResponse(outputs=[tensor(name="logits", datatype="FP32", shape=[1, 10])],
                                  raw_output_contents=[b"\0" * 20])  # fmt: skip
    assert "binary_data_size 20, its shape [1,10] of FP32 is 40 bytes" in check_answer(LOGITS, *grpc_answer(short))
    nine = pb.InferTensorContents(fp32_contents=[0.0] * 9)
    typed = pb.ModelInferResponse(outputs=[tensor(name="logits", datatype="FP32", shape=[1, 10], contents=nine)])
    assert "9 values in data" in check_answer(LOGITS, *grpc_answer(typed))


def test_the_model_file_and_the_server_must_have_the_same_inputs_and_outputs():
    io = file_io(DIGITS)
    assert io == ([("input", "FP32", [1, 8, 8, 1])], [("logits", "FP32", [1, 10])])
    meta = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 8, 8, 1]}],
            "outputs": [{"name": "logits", "datatype": "FP32", "shape": [-1, 10]}]}  # fmt: skip
    assert difference(meta, io, "d.onnx") is None  # -1 (a batching server's) matches the file's 1
    cases = [
        ({"inputs": [{"name": "input", "datatype": "INT8", "shape": [1, 8, 8, 1]}]},
         "input 'input': the server says INT8 [1,8,8,1], d.onnx says FP32 [1,8,8,1]"),
        ({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64]}]},
         "input 'input': the server says FP32 [1,64], d.onnx says FP32 [1,8,8,1]"),
        ({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 8, 8, 1]}]},
         "input 'input': d.onnx has it, the server does not (it has: 'x')"),
        ({"outputs": [{"name": "logits", "datatype": "FP32", "shape": [1, 10]},
                      {"name": "probs", "datatype": "FP32", "shape": [1, 10]}]},
         "output 'probs': the server has it, d.onnx does not (it has: 'logits')"),
    ]  # fmt: skip
    for change, want in cases:
        assert difference({**meta, **change}, io, "d.onnx") == want
    assert file_io(MODELS / "digits_cnn" / "digits_cnn_int8.tflite") is None  # not read here: the caller says so


URLS = [
    ("kserve+http://[::1/m", "not a URL (Invalid IPv6 URL)"),
    ("kserve+http://127.0.0.1:99999/m", "HOST:PORT is needed"),
    ("kserve+http://127.0.0.1:port/m", "HOST:PORT is needed"),
    ("kserve+http://bad host:8000/m", "HOST:PORT is needed"),
    ("kserve+http://127.0.0.1:8000/..", "model name: '..' is not a name"),
    ("kserve+http://127.0.0.1:8000/.", "model name: '.' is not a name"),
    ("kserve+http://127.0.0.1:8000/%2E%2E", "model name: '..' is not a name"),
    ("kserve+http://127.0.0.1:8000/a%2Fb", "model name: 'a/b' is not a name"),
    ("kserve+http://127.0.0.1:8000/a/b", "the path names the model"),
    ("kserve+http://127.0.0.1:8000/", "the path names the model"),
    ("kserve+http://127.0.0.1:8000/m%00", "model name: 'm\\x00' is not a name"),
    ("kserve+http://127.0.0.1:8000/" + "m" * 256, "model name: over 255 characters"),
    ("kserve+http://127.0.0.1:8000/m?version=1%0D%0AX-Evil:%201", "version '1\\r\\nX-Evil: 1'"),
    ("kserve+http://127.0.0.1:8000/m?version=../../v2", "version '../../v2'"),
    ("kserve+http://127.0.0.1:8000/m?version=..", "version '..'"),
    ("kserve+http://127.0.0.1:8000/m\r\n", "control characters in a URL"),
    ("kserve+http://127.0.0.1:8000/m#x", "no #fragment"),
    ("kserve+http://bob:s3cret@127.0.0.1:8000/m", "credentials in a URL are refused"),
    ("kserve+grpc://bob:s3c/ret@127.0.0.1:8001/m", "credentials in a URL are refused"),
    ("kserve+http://s3cret@127.0.0.1:8000/m", "credentials in a URL are refused"),
    # the load engine's options, refused when the URL is read (before any connection), like every other option
    ("kserve+http://127.0.0.1:8000/m?processes=1e12", "processes '1e12': a whole number from 1 to 256"),
    ("kserve+http://127.0.0.1:8000/m?processes=nan", "processes 'nan': a whole number from 1 to 256"),
    ("kserve+http://127.0.0.1:8000/m?processes=1000000000000", "processes '1000000000000': a whole number"),
    ("kserve+http://127.0.0.1:8000/m?engine=rocket", "engine 'rocket': one of auto, fast, tritonclient"),
]


@pytest.mark.parametrize(("url", "needle"), URLS)
def test_a_malformed_url_is_one_line_and_never_shows_a_password(url, needle):
    with pytest.raises(UserError) as err:
        parse_url(url)
    said = str(err.value)
    assert needle in said and "\n" not in said and "s3c" not in said, said


def test_good_urls_keep_their_parts():
    got = parse_url("kserve+grpc://[::1]:8001/my-model_2?version=3&timeout=2.5")
    assert (got["address"], got["model"], got["version"], got["timeout"]) == ("[::1]:8001", "my-model_2", "3", 2.5)
    assert parse_url("kserve+http://gpu.lab:8000/m%40v2?version=v1.2")["model"] == "m@v2"


def test_a_run_with_no_query_answered_is_said_to_have_failed():
    doc = {"latency_us": {"count": 0}, "errors": {"failed": 385, "kinds": {"status 400": 385},
                                                  "examples": {"status 400": "400: bad"}}}  # fmt: skip
    assert nothing_succeeded(doc) == "no query succeeded: 385 failed (status 400 x385); first: 400: bad"
    assert nothing_succeeded({**doc, "latency_us": {"count": 1}}) is None
    assert nothing_succeeded({**doc, "aborted": {"reason": "interrupted"}}) is None  # the signal's exit code says it
    assert nothing_succeeded({"latency_us": {"count": 0}, "errors": {"failed": 0}}) is None


# ------------------------------------------------------------------------------------------------------- the liar
@pytest.fixture(scope="module")
def liar():
    """tests/servers/liar_server.py on free ports (HTTP and gRPC): {"http": "127.0.0.1:P", "grpc": ...}."""
    pytest.importorskip("tritonclient.grpc")
    proc = subprocess.Popen([sys.executable, str(LIAR), "--port", "0", "--grpc-port", "0"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        ready, _, _ = select.select([proc.stdout], [], [], READY_S)
        line = proc.stdout.readline() if ready else ""
        if not line.startswith("ready "):
            proc.kill()
            pytest.fail(f"liar_server not ready in {READY_S:.0f} s: {line!r} {proc.stderr.read()[-2000:]}")
        yield dict(part.split("=", 1) for part in line.split()[1:])
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def edge_bench(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout)  # fmt: skip


def run_all(cases: list[list[str]], where) -> list[subprocess.CompletedProcess]:
    """`edge-bench` once per argument list, four at a time (the liar answers them all at once), each with a store of
    its own in `where` (two processes that create one new store at once race: "table runs already exists")."""
    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(lambda ia: edge_bench(*ia[1], "--store", str(where / f"s{ia[0]}.sqlite")),
                             enumerate(cases)))  # fmt: skip


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.startswith("edge-bench: error")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


LIES = {  # model -> (words of the first wrong answer, over HTTP)
    "wrong-shape": "output 'logits': shape [1,11], the model says [1,10]",
    "wrong-dtype": "output 'logits': datatype FP64, the model says FP32",
    "renamed": "no output 'logits' in the answer (it has: 'scores')",
    "short": "",  # binary and JSON say it differently: checked below
    "huge": "shape [1,4611686018427387904], the model says [1,10]",  # binary: its size, below
    "not-object": "",
}


def test_every_wrong_answer_is_a_failed_query_of_its_own_kind(liar, tmp_path):
    """Binary and JSON over HTTP, and gRPC: each lie is a wrong answer, every query fails, the run exits 1 and says
    nothing succeeded; the record keeps the first one's words."""
    store = ["--duration", "1", "--json", "-"]
    cases = []
    for model in LIES:
        cases.append((model, "binary", [f"kserve+http://{liar['http']}/{model}"]))
        cases.append((model, "json", [f"kserve+http://{liar['http']}/{model}?tensors=json"]))
        if model != "not-object":  # a protobuf is always a message
            cases.append((model, "grpc", [f"kserve+grpc://{liar['grpc']}/{model}"]))
    t0 = time.monotonic()
    procs = run_all([["run", "--target", url, *store] for _, _, (url,) in cases], tmp_path)
    assert time.monotonic() - t0 < 120
    for (model, mode, _), proc in zip(cases, procs, strict=True):
        assert proc.returncode == 1, (model, mode, proc.stderr)
        doc = json.loads(proc.stdout)
        e = doc["errors"]
        assert set(e["kinds"]) == {WRONG} and e["failed"] > 10 and doc["latency_us"]["count"] == 0, (model, mode, e)
        assert doc["failed_queries"] == e["failed"]  # what the error budget charges
        words = e["examples"][WRONG]
        want = {("short", "binary"): "declare 40 bytes of binary data, the body holds 20",
                ("short", "json"): "5 values in data, its shape [1,10] holds 10",
                ("short", "grpc"): "binary_data_size 20, its shape [1,10] of FP32 is 40 bytes",
                ("huge", "binary"): "binary_data_size 4,611,686,018,427,387,904, its shape [1,10] of FP32 is 40 bytes",
                ("not-object", "binary"): "not a JSON object (a list)",
                ("not-object", "json"): "not a JSON object (a list)"}.get((model, mode), LIES[model])  # fmt: skip
        assert want in words, (model, mode, words)
        assert f"no query succeeded: {e['failed']:,} failed (wrong answer x{e['failed']:,}); first: " in proc.stderr


def test_wrong_answers_spend_the_error_budget_as_failed_queries_do(liar, tmp_path):
    """A server that answers wrong every other time: half the queries are wrong answers, the rest are timed; without an
    SLO the run passes (some succeeded), with an error budget of 10% it fails (exit 1)."""
    url = f"kserve+http://{liar['http']}/sometimes"
    plain, budget = run_all([["run", "--target", url, "--duration", "1", "--json", "-"],
                             ["run", "--target", url, "--duration", "1", "--json", "-", "--slo", "p99=10s",
                              "--slo", "error_budget=0.1"]], tmp_path)  # fmt: skip
    assert plain.returncode == 0 and budget.returncode == 1, (plain.stderr, budget.stderr)
    for proc in (plain, budget):
        doc = json.loads(proc.stdout)
        e, answered = doc["errors"], doc["latency_us"]["count"]
        assert set(e["kinds"]) == {WRONG} and "shape [1,11]" in e["examples"][WRONG]
        assert e["share"] == pytest.approx(0.5, abs=0.02) and abs(e["failed"] - answered) <= 2, (e, answered)
    with Store(tmp_path / "s1.sqlite") as st:
        (run,) = st.runs()
    spent = run.verdict["slo"]["error_budget"]
    assert spent["share"] == pytest.approx(0.5, abs=0.02) and spent["pass"] is False


def test_an_honest_server_passes_with_no_wrong_answer(liar, tmp_path):
    store = ["--duration", "1", "--json", "-"]
    urls = [f"kserve+http://{liar['http']}/honest", f"kserve+http://{liar['http']}/honest?tensors=json",
            f"kserve+grpc://{liar['grpc']}/honest", f"kserve+http://{liar['http']}/refuses-binary"]  # fmt: skip
    procs = run_all([["run", "--target", u, "--model", str(DIGITS), *store] for u in urls], tmp_path)
    for url, proc in zip(urls, procs, strict=True):
        assert proc.returncode == 0, (url, proc.stderr)
        doc = json.loads(proc.stdout)
        assert doc["errors"]["failed"] == 0 and doc["latency_us"]["count"] > 20, (url, doc["errors"])
        assert doc["model"]["sha256"]  # tied to the file: the server's inputs and outputs are the file's
    tensors = [json.loads(p.stdout)["backend"]["details"]["tensors"] for p in procs]
    assert tensors[0].startswith("binary") and tensors[1].startswith("json (asked for")
    # A server that refuses binary tensors but honours Inference-Header-Content-Length, as Triton does: the JSON
    # fallback carries no stale header (tritonclient writes it into the dict it is given), so it is answered.
    refused = "400 Bad Request: binary tensor data is not supported by this server"
    assert tensors[3] == f"json (the server refused binary tensors: {refused})"


def test_the_headers_given_to_tritonclient_are_never_the_targets_own(liar):
    from bench.targets import TargetOptions
    from bench.targets.kserve import KServeTarget

    t = KServeTarget(f"kserve+http://{liar['http']}/honest", TargetOptions(headers={"x-token": "t"}))
    t.connect()
    feeds = t.feeds()
    t._infer(t.client(), feeds, True)  # tritonclient writes Inference-Header-Content-Length into what it is given
    assert t.headers == {"x-token": "t"}
    assert set(t.infer(feeds)) == {"logits"}
    t = KServeTarget(f"kserve+http://{liar['http']}/refuses-binary", TargetOptions(headers={"x-token": "t"}))
    t.connect()
    binary, why = t.choose_tensors(t.client(), feeds)
    assert not binary and "400 Bad Request: binary tensor data is not supported" in why
    assert set(t.infer(feeds)) == {"logits"} and t.headers == {"x-token": "t"}  # the JSON fallback was answered


FIRST = {  # model (?timeout=1) -> the words of its cause, said for binary and for JSON
    "busy": "503 Service Unavailable (Retry-After: 7 s): the server is busy",
    "no-batch-1": "400 Bad Request: batch size 1 is not supported",
    "closes": "the connection closed mid-body (11 of 1,000 bytes came)",
    "slow": "timeout: no whole answer within 1 s",
}


def test_a_first_request_that_fails_says_both_causes(liar, tmp_path):
    procs = run_all([["run", "--target", f"kserve+http://{liar['http']}/{m}?timeout=1", "--duration", "1"]
                     for m in FIRST], tmp_path)  # fmt: skip
    for (model, words), proc in zip(FIRST.items(), procs, strict=True):
        line = one_line_error(proc)
        assert proc.returncode == 1, (model, proc.stderr)
        assert f"with binary tensors ({words}) and with JSON tensors ({words})" in line, (model, line)
        assert "JSON parse error" not in line
    # JSON asked for: no first request to choose; every query fails with its status, and nothing succeeded: exit 1.
    proc = edge_bench("run", "--target", f"kserve+http://{liar['http']}/busy?tensors=json", "--duration", "1",
                      "--store", str(tmp_path / "s.sqlite"), "--json", "-")  # fmt: skip
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1 and set(doc["errors"]["kinds"]) == {"status 503"} and doc["errors"]["failed"] > 10
    assert "no query succeeded" in proc.stderr and "stored as run" in proc.stderr  # kept, but a failure
    proc = edge_bench("run", "--target", f"kserve+http://{liar['http']}/closes?tensors=json", "--duration", "1",
                      "--store", str(tmp_path / "s.sqlite"), "--json", "-")  # fmt: skip
    doc = json.loads(proc.stdout)  # tritonclient's "Incomplete response." is a connection lost, not a parse error
    assert proc.returncode == 1 and set(doc["errors"]["kinds"]) == {"connection lost"}, doc["errors"]


def test_a_server_whose_model_is_not_the_file_is_refused_before_the_run(liar, tmp_path):
    store = tmp_path / "s.sqlite"
    proc = edge_bench("run", "--target", f"kserve+http://{liar['http']}/wrong-input", "--model", str(DIGITS),
                      "--duration", "1", "--store", str(store))  # fmt: skip
    line = one_line_error(proc)
    assert proc.returncode == 2
    assert line.endswith("input 'input': the server says INT8 [1,8,8,1], digits_cnn_int8.onnx says FP32 [1,8,8,1]")
    with Store(store) as st:
        assert st.runs() == []  # refused before the run: nothing stored


def test_urls_are_refused_alike_by_run_targets_and_campaigns(liar, tmp_path):
    secret = f"kserve+http://bob:s3cret@{liar['http']}/honest"
    bad = [secret, "kserve+http://[::1/m", f"kserve+http://{liar['http']}/..",
           f"kserve+http://{liar['http']}/honest?version=1%0D%0A", "kserve+grpc://127.0.0.1:70000/m"]  # fmt: skip
    cases = [["run", "--target", u, "--duration", "1"] for u in bad] + [["targets", u] for u in bad]
    for i, u in enumerate(bad):
        camp = tmp_path / f"c{i}.toml"
        camp.write_text(f'[campaign]\nname = "c"\n[[target]]\nname = "t"\nurl = "{u}"\n[[model]]\nname = "d"\n'
                        f'path = "{DIGITS}"\n[[scenario]]\niterations = 5\n')  # fmt: skip
        cases.append(["run", str(camp)])
    for args, proc in zip(cases, run_all(cases, tmp_path), strict=True):
        line = one_line_error(proc)
        assert proc.returncode == 2 and "internal error" not in line, (args, proc.stderr)
        assert "s3cret" not in proc.stderr + proc.stdout, (args, proc.stderr)
    assert not any(b"s3cret" in p.read_bytes() for p in tmp_path.glob("s*.sqlite"))
