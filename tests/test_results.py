"""Result records (edge_runtime.results) and bench requests (edge_runtime.measure.request): the JSON shape both sides
of the wire share, read back through one piece of code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT, artifact, need
from helpers import run_cli

from edge_runtime import results
from edge_runtime.cli.main import build_parser
from edge_runtime.errors import UserError
from edge_runtime.measure.bench import run_bench
from edge_runtime.measure.request import BenchRequest
from edge_runtime.program.bench_flags import request_from_args
from edge_runtime.system import SystemRoot

DATA = ROOT / "tests" / "data"
BEFORE = sorted(DATA.glob("bench-v1-*.json"))  # written by edge-runtime bench before the restructure (issue 10)
HOST = DATA / "host-kserve-v1.json"  # a KServe server's run as the host's harness wrote it before issue 23
MODEL = artifact("digits_cnn", "_int8.onnx")


def shape_differences(a, b, where: str = "") -> list[str]:
    """Where two JSON values differ in shape: the same keys in the same order, lists whose items have the same shape
    (when both have items), scalars of the same kind (null stands for an unknown value of any kind)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            return [f"{where}: keys {list(a)} != {list(b)}"]
        return [d for k in a for d in shape_differences(a[k], b[k], f"{where}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        return shape_differences(a[0], b[0], f"{where}[0]") if a and b else []
    if a is None or b is None:
        return []
    kind = lambda v: "number" if isinstance(v, (int, float)) and not isinstance(v, bool) else type(v).__name__  # noqa: E731
    return [] if kind(a) == kind(b) else [f"{where}: {kind(a)} != {kind(b)}"]


@pytest.mark.parametrize("path", BEFORE, ids=[p.name for p in BEFORE])
def test_results_from_before_the_restructure_read_back_exactly(path):
    raw = json.loads(path.read_text())
    r = results.load(path)
    assert isinstance(r, results.BenchResult) and r.schema == "edge-runtime/bench/1"
    assert r.latency_us.count == raw["latency_us"]["count"] and r.latency_us.p99 == raw["latency_us"]["p99"]
    assert isinstance(r.thermal.timeline, tuple) and all(
        isinstance(p, results.ThermalPoint) for p in r.thermal.timeline
    )
    back = r.to_dict()
    assert back == raw and list(back) == list(raw)  # key for key, in order
    assert results.load(back) == r


def test_a_host_record_reads_back_exactly_with_its_client_sections_typed():
    """A server's record has errors and server sections, and no pinning, interference or thermal: it reads, and writes
    back what it was, no section made up."""
    raw = json.loads(HOST.read_text())
    r = results.load(HOST)
    assert isinstance(r.errors, results.Errors) and isinstance(r.server, results.ServerSection)
    assert r.errors.failed == r.failed_queries == raw["errors"]["failed"] == 1 and r.errors.kinds == {"http 500": 1}
    assert r.server.statistics == raw["server"]["statistics"] and r.scenario["kind"] == "server"
    assert r.model.server_name == "digits" and r.model.server_versions == ("1",) and not r.model.extra
    back = r.to_dict()
    assert back == raw and list(back) == list(raw)  # key for key, in order
    assert results.load(back) == r
    raw["errors"]["failed"] = "1"
    with pytest.raises(UserError) as err:
        results.load(raw, where="run 3 in s.sqlite")
    assert str(err.value) == "run 3 in s.sqlite: errors.failed: expected a whole number, got '1'"


def test_a_record_as_read_writes_back_what_it_read_and_one_built_writes_the_whole_schema():
    import dataclasses

    doc = {"schema": "edge-runtime/bench/1", "latency_us": {"count": 3, "p50": 1.5},
           "aborted": {"kind": "interrupted", "signal": None}, "npu_w": 2.5}  # fmt: skip
    r = results.load(doc)
    assert r.to_dict() == doc and list(r.to_dict()) == list(doc)  # `signal: null` too, though None is left out
    assert r.pinning == results.Pinning() and r.latency_us.p99 is None  # what it lacks reads as the defaults
    built = dataclasses.replace(r, wall_s=2.0).to_dict()
    assert set(built) == set(results.BenchResult().to_dict()) | {"aborted", "npu_w"} and built["wall_s"] == 2.0
    assert built["thermal"]["available"] is False and built["latency_us"] == doc["latency_us"]


def test_a_result_given_as_a_dict_is_named_by_where():
    with pytest.raises(UserError) as err:
        results.load({"schema": "foo/1"}, where="run 3 in s.sqlite")
    said = "run 3 in s.sqlite: schema 'foo/1' is not one this version reads (it reads edge-runtime/bench/1)"
    assert str(err.value) == said


def test_a_bench_today_has_the_shape_of_one_from_before():
    need("onnxruntime")
    before = json.loads((DATA / "bench-v1-before-restructure.json").read_text())
    proc = run_cli("bench", str(MODEL), "--cpus", "1", "--iterations", "300", "--stress", "cpu:0", "--json")
    assert proc.returncode == 0, proc.stderr
    now = json.loads(proc.stdout)
    before["platform_latency"] = None  # that file was made with --platform-latency: this run has none
    # Keys added since, within major version 1 (a reader of 1 keeps a key it does not know): nothing else changed.
    added = ["timeline_us"]
    assert all(k in now for k in added)
    assert "firmware" in now["environment"]  # added since (issue 28: a farm report compares it), null where unknown
    now["environment"] = {k: v for k, v in now["environment"].items() if k != "firmware"}
    assert shape_differences({k: v for k, v in now.items() if k not in added}, before) == []
    assert results.load(now).to_dict() == now


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ({"schema": "edge-runtime/bench/2", "latency_us": {}}, "written by a newer edge-runtime"),
        ({"schema": "edge-runtime/train/1"}, "is not one this version reads (it reads edge-runtime/bench/1)"),
        ({"schema": "edge-runtime/bench/one"}, "has no version number"),
        ({"schema": 7}, "is not one edge-runtime writes"),
        ({"latency_us": {}}, "no 'schema' key"),
        ([1, 2], "not a result (a JSON list"),
        ({"schema": "edge-runtime/bench/1", "latency_us": [1]}, "latency_us: expected an object"),
    ],
)
def test_what_is_not_a_result_this_version_reads_is_refused(tmp_path, doc, needle):
    f = tmp_path / "r.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(UserError) as err:
        results.load(f)
    assert needle in str(err.value) and "\n" not in str(err.value) and str(f) in str(err.value)


def test_not_json_nan_and_non_files_are_refused(tmp_path):
    f = tmp_path / "r.json"
    f.write_text('{"schema": "edge-runtime/bench/1", "wall_s": NaN}')
    with pytest.raises(UserError, match="NaN is not JSON"):
        results.load(f)
    f.write_bytes(b"\xff\xfe garbage")
    with pytest.raises(UserError, match="not a JSON result"):
        results.load(f)
    with pytest.raises(UserError, match="is a directory"):
        results.load(tmp_path)


@pytest.mark.parametrize(
    ("section", "key", "value", "needle"),
    [
        ("latency_us", "p50", "12", "latency_us.p50: expected a finite number, got '12'"),
        ("latency_us", "count", True, "latency_us.count: expected a whole number, got True"),
        ("latency_us", "count", 1.5, "latency_us.count: expected a whole number, got 1.5"),
        ("config", "cpus", "0-3", "config.cpus: expected a list, got str"),
        ("environment", "packages", {"numpy": float("nan")}, "environment.packages.numpy: nan is not a finite"),
    ],
)
def test_a_result_with_a_value_of_the_wrong_kind_is_refused_naming_it(section, key, value, needle):
    doc = json.loads((DATA / "bench-v1-before-restructure.json").read_text())
    doc[section][key] = value
    with pytest.raises(UserError) as err:
        results.load(doc)
    assert needle in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("histogram", "needle"),
    [
        ([[1, 2], [3, True]], "histogram_us[1][1]: expected a whole number, got True"),
        ([[1, 2], [3]], "histogram_us[1]: expected 2 items, got 1"),
        ([[1, 2], [3.5, 4]], "histogram_us[1][0]: expected a whole number, got 3.5"),
        ([[1, 2], "3,4"], "histogram_us[1]: expected a list, got str"),
    ],
)
def test_a_long_list_reads_in_one_pass_and_its_first_wrong_item_is_named(histogram, needle):
    doc = {"schema": "edge-runtime/bench/1", "histogram_us": [[us, 1] for us in range(1, 20_001)]}
    assert results.load(doc).histogram_us[:2] == ((1, 1), (2, 1))
    with pytest.raises(UserError) as err:
        results.load({**doc, "histogram_us": histogram})
    assert str(err.value) == f"result: {needle}"


def test_a_number_too_large_for_a_float_and_deep_nesting_are_refused(tmp_path):
    f = tmp_path / "r.json"
    text = (DATA / "bench-v1-before-restructure.json").read_text()
    f.write_text(text.replace('"p50": ', '"p50": 1e999, "was": ', 1))  # json reads 1e999 as inf
    with pytest.raises(UserError, match=r"latency_us\.p50: expected a finite number, got inf"):
        results.load(f)
    f.write_text("[" * 100_000)
    with pytest.raises(UserError, match="nested too deeply"):
        results.load(f)


def test_an_older_file_reads_with_unknown_keys_as_none_and_a_newer_minor_keeps_its_extras():
    old = {"schema": "edge-runtime/bench/1", "latency_us": {"count": 3, "p50": 1.5}, "interference": {"interrupts": 4}}
    r = results.load(old)
    assert r.latency_us.p99 is None and r.interference.runqueue_wait_share is None and r.interference.interrupts == 4
    newer = {"schema": "edge-runtime/bench/1.3", "latency_us": {"count": 3, "p50": 1.5, "p42": 1.2}, "npu_w": {"w": 3}}
    r = results.load(newer)
    assert r.latency_us.extra == {"p42": 1.2} and r.extra == {"npu_w": {"w": 3}}
    assert r.to_dict()["latency_us"]["p42"] == 1.2 and r.to_dict()["npu_w"] == {"w": 3}


def test_a_record_is_frozen():
    r = results.load(json.loads((DATA / "bench-v1-before-restructure.json").read_text()))
    with pytest.raises(AttributeError):
        r.wall_s = 0  # type: ignore[misc]


# ------------------------------------------------------------------------------------------------- bench requests
def test_a_bench_request_round_trips_through_json_and_runs_what_the_cli_runs(tmp_path):
    need("onnxruntime")
    flags = [
        "bench",
        str(MODEL),
        "--cpus",
        "1",
        "--iterations",
        "400",
        "--warmup",
        "20",
        "--seed",
        "7",
        "--stress",
        "cpu:0",
        "--sample-interval",
        "0.1",
        "--no-sandbox",
    ]
    req = request_from_args(build_parser().parse_args(flags))
    wire = json.dumps(req.to_dict())
    again = BenchRequest.from_json(json.loads(wire))
    assert again == req and again.stress[0].cpus == (0,)
    out = tmp_path / "cli.json"
    proc = run_cli(*flags, "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    cli = json.loads(out.read_text())
    agent = run_bench(again, SystemRoot("/")).result.to_dict()
    for section in ("model", "config", "backend"):
        assert agent[section] == cli[section], section
    assert agent["latency_us"]["count"] == cli["latency_us"]["count"] == 400
    assert agent["pinning"]["all_threads_pinned"] and cli["pinning"]["all_threads_pinned"]
    assert {k: set(v) if isinstance(v, dict) else None for k, v in agent.items()} == {
        k: set(v) if isinstance(v, dict) else None for k, v in cli.items()
    }  # the same sections with the same keys (a short run's thermal timeline may hold a point or none)


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"iterations": 0}, "iterations 0: must be 1 to"),
        ({"duration_s": float("nan")}, "duration_s: expected a finite number, got nan"),
        ({"fallback": "false"}, "fallback: expected true or false, got 'false'"),
        ({"model_sha256": 5}, "model_sha256: expected a string, got 5"),
        ({"model_sha256": "abc"}, "model_sha256 'abc': not a sha256"),
        ({"cpus": [0, 0]}, "cpus [0, 0]: a CPU given twice"),
        ({"cpus": []}, "cpus []: a list of CPU numbers"),
        ({"stress": [{"kind": "cpu", "cpus": [-1]}]}, "stress"),
        ({"thermal_limit_c": 60.0, "cooldown_to_c": 70.0}, "cooldown_to_c 70.0 is above thermal_limit_c 60.0"),
        ({"delegate_options": {"a": "b"}}, "delegate_options without a delegate"),
        ({"iterations": 5, "duration_s": 1.0}, "give iterations or duration_s, not both"),
        ({"thermal_limit_c": 1e21}, "thermal_limit_c 1e+21: must be at least -80"),
        ({"cpus": [-1]}, "cpus [-1]: a list of CPU numbers"),
        ({"threads": True}, "threads: expected a whole number, got True"),
        ({"stress": [{"kind": "gpu", "cpus": [0]}]}, "kind cpu|memory"),
        ({"warmupp": 3}, "unknown key(s) 'warmupp'"),
        ({"schema": "edge-runtime/bench-request/9"}, "is not edge-runtime/bench-request/1"),
        ({"options": {"xnnpack": 0}}, "options: string keys and values"),
    ],
)
def test_a_bench_request_from_the_wire_is_checked(change, needle):
    doc = {**BenchRequest(model=str(MODEL)).to_dict(), **change}
    with pytest.raises(UserError) as err:
        BenchRequest.from_json(doc)
    assert needle in str(err.value)


def test_a_bench_request_reads_a_newer_minor_version_and_an_upper_case_hash():
    doc = {**BenchRequest(model=str(MODEL)).to_dict(), "schema": "edge-runtime/bench-request/1.4"}
    doc["model_sha256"] = "AB" * 32
    assert BenchRequest.from_json(doc).model_sha256 == "AB" * 32


def test_a_request_names_its_model_by_hash(tmp_path):
    need("onnxruntime")
    wrong = BenchRequest(model=str(MODEL), model_sha256="0" * 64, iterations=10, sandbox=False)
    with pytest.raises(UserError, match="is not the requested 000000000000"):
        run_bench(wrong, SystemRoot("/"))
    assert Path(MODEL).exists()
    import hashlib

    upper = hashlib.sha256(Path(MODEL).read_bytes()).hexdigest().upper()  # as some tools print it
    right = BenchRequest(model=str(MODEL), model_sha256=upper, iterations=10, sandbox=False)
    assert run_bench(right, SystemRoot("/")).result.latency_us.count == 10
