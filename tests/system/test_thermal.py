"""Thermal and power: parsing on fake trees built from real captures (several boards), then a real bench while a
helper heats a fake tree: the timeline follows, cool-down waits, the limit aborts with a kept partial result, and
the sampler never runs on a measured CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import ROOT, artifact, need
from helpers import (
    assert_one_line_error,
    bench,
    cli,
    end,
    fixture,
    read_until,
    reaped,
    request,
    run_cli,
    strict_json,
    thermal_tree,
    tree_with,
    write_tree,
)

from edge_runtime import results
from edge_runtime.system.firmware import decode_throttled, parse_tegrastats, parse_throttled
from edge_runtime.system.root import SystemRoot
from edge_runtime.system.thermal import (
    millidegrees,
    pick_rail,
    read_snapshot,
    thermal_limit,
    throttle_reasons,
)


def zones_from_dts(tmp: Path, board: str) -> Path:
    """A /sys/class/thermal tree whose trip points are the board's kernel-DTS values (shared/fixtures)."""
    rows = (fixture(board) / "kernel-dts/thermal-zones.tsv").read_text().splitlines()[1:]
    root = tmp / board
    zones: dict[str, list[list[str]]] = {}
    for row in rows:
        f = row.split("\t")
        zones.setdefault(f[0], []).append(f)
    for i, (zone, trips) in enumerate(zones.items()):
        d = root / f"sys/class/thermal/thermal_zone{i}"
        d.mkdir(parents=True)
        (d / "type").write_text(zone + "\n")
        (d / "temp").write_text("45000\n")
        (d / "policy").write_text("step_wise\n")
        for k, f in enumerate(t for t in trips if t[4] != "-"):
            (d / f"trip_point_{k}_temp").write_text(f[4] + "\n")
            (d / f"trip_point_{k}_type").write_text(f[6] + "\n")
            (d / f"trip_point_{k}_hyst").write_text(f[5] + "\n")
    return root


def test_zones_and_trip_points_from_the_rk3588_dts(tmp_path):
    root = zones_from_dts(tmp_path, "rock5b")
    snap = read_snapshot(SystemRoot(root))
    by_type = {z.type: z for z in snap.zones}
    big = by_type["bigcore0-thermal"]
    assert [(t.type, t.temp_c, t.hysteresis_c) for t in big.trips] == [("passive", 85.0, 2.0), ("critical", 115.0, 0.0)]
    assert big.temp_c == 45.0 and big.policy == "step_wise"
    limit, source = thermal_limit(None, None, snap)
    assert (limit, source) == (85.0, "lowest passive/critical trip point")  # the fan trips (active) do not count
    assert thermal_limit(70.0, None, snap) == (70.0, "--thermal-limit")


def test_hwmon_temperatures_from_the_x86_capture():
    snap = read_snapshot(SystemRoot(fixture("x86-node-exporter")))
    core0 = [h for h in snap.hwmon if h.chip == "coretemp" and h.label == "Core 0"]
    assert core0 and core0[0].temp_c == 54.0 and core0[0].crit_c == 100.0 and core0[0].max_c == 84.0
    assert snap.temperatures()["cpu-thermal"] == 12.376


def test_negative_and_garbled_and_missing_readings(tmp_path):
    assert millidegrees("-44000") == -44.0 and millidegrees("abc") is None and millidegrees(None) is None
    d = tmp_path / "sys/class/thermal"
    for i, temp in enumerate(["51000\n", "garbage\n", None]):
        (d / f"thermal_zone{i}").mkdir(parents=True)
        (d / f"thermal_zone{i}/type").write_text(f"zone{i}\n")
        if temp is not None:
            (d / f"thermal_zone{i}/temp").write_text(temp)
    snap = read_snapshot(SystemRoot(tmp_path))
    assert [z.temp_c for z in snap.zones] == [51.0, None, None]
    assert snap.skipped == 2 and snap.max_c() == 51.0


def test_cpufreq_cap_is_throttling(tmp_path):
    for cpu, smax in ((0, "2400000"), (1, "1800000")):
        d = tmp_path / f"sys/devices/system/cpu/cpu{cpu}/cpufreq"
        d.mkdir(parents=True)
        (d / "cpuinfo_max_freq").write_text("2400000\n")
        (d / "scaling_max_freq").write_text(smax + "\n")
        (d / "scaling_cur_freq").write_text("1800000\n")
    (tmp_path / "sys/devices/system/cpu/online").write_text("0-1\n")
    snap = read_snapshot(SystemRoot(tmp_path))
    assert [f.capped for f in snap.cpufreq] == [False, True]
    assert throttle_reasons(snap) == ["CPU1 capped at 1800 of 2400 MHz"]
    assert throttle_reasons(snap, cpus=[0]) == []  # only the measured CPUs count


@pytest.mark.parametrize(
    ("text", "now", "since"),
    [
        ("throttled=0x0", [], []),
        ("throttled=0x50000", [], ["under-voltage has occurred", "throttling has occurred"]),
        (
            "throttled=0x50005",
            ["under-voltage detected", "currently throttled"],
            ["under-voltage has occurred", "throttling has occurred"],
        ),
        ("throttled=0x80000", [], ["soft temperature limit has occurred"]),
        ("throttled=0x80008", ["soft temperature limit active"], ["soft temperature limit has occurred"]),
        ("80008", ["soft temperature limit active"], ["soft temperature limit has occurred"]),  # sysfs form
    ],
)
def test_get_throttled_decoding(text, now, since):
    lines = (fixture("rpi") / "vcgencmd_get_throttled.txt").read_text().splitlines()
    lines += (fixture("rpi") / "soc_firmware_get_throttled_values.txt").read_text().splitlines()
    assert text in lines  # every case is a real capture
    d = decode_throttled(parse_throttled(text))
    assert (d["now"], d["since_boot"]) == (now, since)
    assert d["throttled_now"] == bool(set(now) - {"under-voltage detected"})


def test_get_throttled_read_from_the_firmware_sysfs_file(tmp_path):
    f = tmp_path / "sys/devices/platform/soc/soc:firmware/get_throttled"
    f.parent.mkdir(parents=True)
    f.write_text((fixture("rpi") / "soc_firmware_get_throttled_values.txt").read_text().splitlines()[1] + "\n")
    snap = read_snapshot(SystemRoot(tmp_path))
    assert snap.throttled["raw"] == "0x80008"
    assert "firmware: soft temperature limit active" in throttle_reasons(snap)


def test_tegrastats_lines_of_three_jetson_generations():
    nano = (fixture("jetson-orin-nano") / "tegrastats.txt").read_text().splitlines()
    p = parse_tegrastats(nano[0])
    assert p["temps_c"]["cpu"] == 53.968 and p["temps_c"]["tj"] == 53.968
    assert p["rails"]["VDD_IN"] == {"now_w": 12.479, "avg_w": 12.479}
    assert parse_tegrastats(nano[1])["rails"]["VDD_SOC"]["now_w"] == 1.475
    tx2 = parse_tegrastats((fixture("jetson-tx2") / "tegrastats.txt").read_text())  # old "cur/avg" without mW
    assert tx2["rails"]["VDD_IN"]["now_w"] == 5.297 and tx2["temps_c"]["Tdiode"] == 39.25
    agx = parse_tegrastats((fixture("jetson-agx-orin") / "tegrastats.txt").read_text())  # cur/avg/max
    assert agx["temps_c"]["cpu"] == 52.968 and agx["rails"]["VIN_SYS_5V0"]["now_w"] == 5.5


def ina3221(root: Path, vdd_in_mw: int = 12479) -> None:
    """An INA3221 hwmon chip whose VDD_IN channel carries the power of a real Orin Nano tegrastats capture."""
    d = root / "sys/class/hwmon/hwmon3"
    d.mkdir(parents=True, exist_ok=True)
    (d / "name").write_text("ina3221\n")
    for i, (label, mv, mw) in enumerate([("VDD_IN", 5000, vdd_in_mw), ("VDD_CPU_GPU_CV", 5000, 4667)], start=1):
        (d / f"in{i}_label").write_text(label + "\n")
        (d / f"in{i}_input").write_text(f"{mv}\n")
        (d / f"curr{i}_input").write_text(f"{round(mw * 1000 / mv)}\n")


def test_power_rails_from_hwmon(tmp_path):
    ina3221(tmp_path)
    snap = read_snapshot(SystemRoot(tmp_path))
    rail = pick_rail(snap.rails)
    assert rail.label == "VDD_IN" and rail.source == "hwmon:ina3221"
    assert rail.power_w == pytest.approx(12.48, abs=0.01) and rail.voltage_v == 5.0


# -------------------------------------------------------------------------------------------- heating a fake board
def board_tree(tmp: Path, start_c: float) -> tuple[Path, Path]:
    root = zones_from_dts(tmp, "imx8mp-evk")  # passive trips at 85 C
    (root / "sys/devices/system/cpu").mkdir(parents=True)
    (root / "sys/devices/system/cpu/online").write_text("0-1\n")
    temp = root / "sys/class/thermal/thermal_zone0/temp"
    for t in root.glob("sys/class/thermal/thermal_zone*/temp"):
        t.write_text(f"{int(start_c * 1000)}\n")
    return root, temp


def heater(temp: Path, schedule: list[tuple[float, float]]) -> threading.Thread:
    """Rewrite `temp` at the given (seconds from now, degrees) points."""

    def run():
        t0 = time.monotonic()
        for at, c in schedule:
            time.sleep(max(0.0, at - (time.monotonic() - t0)))
            tmp = temp.with_suffix(".new")
            tmp.write_text(f"{int(c * 1000)}\n")
            os.replace(tmp, temp)

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th


class AtFirst:
    """A bench's progress callback that calls `then(msg)` once, at the first message starting with `prefix` (the
    first "measuring" message: the measured part has been running for a second), and keeps every message."""

    def __init__(self, prefix: str, then):
        self.prefix, self.then = prefix, then
        self.said: list[str] = []
        self.got = None

    def __call__(self, msg: str) -> None:
        self.said.append(msg)
        if self.got is None and msg.startswith(self.prefix):
            self.got = self.then(msg)

    def result(self):
        assert self.got is not None, f"the bench never said {self.prefix!r}: {self.said}"
        return self.got


def elapsed_in(msg: str) -> float:
    """The measured part's elapsed seconds in a progress message ("measuring: 1.0/3 s, ..."), rounded down from the
    0.1 s it was printed to."""
    return float(msg.split("measuring:")[1].split("/")[0]) - 0.05


def test_timeline_follows_a_heating_board_and_the_sampler_stays_off_the_measured_cpu(tmp_path):
    need("onnxruntime")
    root, temp = board_tree(tmp_path, 40.0)
    ina3221(root)
    # The heater starts at the first "measuring" message (1 s or more into the measured part) and is done 0.75 s
    # later, well before the 4 s run ends, however long start-up took.
    at = AtFirst("measuring", lambda _: heater(temp, [(0.15 * i, 41.0 + 4 * i) for i in range(6)]))  # 41 .. 61 C
    cfg = request(
        model=str(artifact("digits_cnn", "_int8.onnx")), cpus=[1], duration_s=4.0, sample_interval_s=0.1, sandbox=False
    )
    r = bench(cfg, SystemRoot(root), at)
    at.result().join(30)
    t = r["thermal"]
    line = [p["max_c"] for p in t["timeline"] if p["t_s"] >= 0]
    assert len(line) >= 15
    assert line == sorted(line) and line[0] <= 45.0 and line[-1] == 61.0  # it follows the heater, in order
    idx = [p["sample_index"] for p in t["timeline"] if p["sample_index"] is not None]
    assert idx == sorted(idx) and idx[-1] > 0  # aligned with the latency samples
    assert (t["start_c"], t["max_c"], t["end_c"]) == (40.0, 61.0, 61.0)
    assert t["limit_c"] == 85.0 and t["headroom_c"] == 24.0
    assert t["sampler"]["cpus"] == [0] and t["sampler"]["on_measured_cpu"] is False
    assert all(p["sampler_cpus"] == [0] for p in t["timeline"])
    p = r["power"]
    assert p["available"] and p["rail"] == "VDD_IN (hwmon:ina3221)"
    assert p["energy_per_inference_uj"] == pytest.approx(
        p["avg_w"] * r["wall_s"] / r["latency_us"]["count"] * 1e6, rel=1e-3
    )


def test_cooldown_waits_until_the_board_is_cool(tmp_path):
    need("onnxruntime")
    root, temp = board_tree(tmp_path, 40.0)
    temp.write_text("70000\n")
    # Cooled 1.1 s after the first "cooling down" message (the wait's first reading, at 0 s): at least 1 s waited
    at = AtFirst("cooling down", lambda _: heater(temp, [(1.1, 45.0)]))
    cfg = request(
        model=str(artifact("digits_cnn", "_int8.onnx")),
        cpus=[1],
        iterations=200,
        cooldown_to_c=50.0,
        sample_interval_s=0.1,
        sandbox=False,
    )
    r = bench(cfg, SystemRoot(root), at)
    at.result().join(30)
    cd = r["thermal"]["cooldown"]
    assert cd["start_c"] == 70.0 and cd["reached_c"] <= 50.0 and cd["waited_s"] >= 1.0
    assert any(m.startswith("cooling down: 70.0 C > 50 C") for m in at.said)


def spawn_bench(root, *args: str) -> subprocess.Popen:
    """`edge-runtime bench` of digits INT8 on CPU 1 against the tree `root`, limit 60 C, sampled every 0.1 s."""
    cmd = [sys.executable, "-m", "edge_runtime.cli", "bench", str(artifact("digits_cnn", "_int8.onnx")), "--cpus", "1",
           "--thermal-limit", "60", "--sample-interval", "0.1", "--sysroot", str(root), *args]  # fmt: skip
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_the_limit_aborts_the_run_and_keeps_a_partial_result(tmp_path):
    need("onnxruntime")
    root, temp = board_tree(tmp_path, 50.0)
    out = tmp_path / "result.json"
    with reaped(spawn_bench(root, "--duration", "20", "--json", str(out))) as proc:
        said = read_until(proc, "measuring:")  # the measured part is running: heat the board now
        heated_at = elapsed_in(said[-1])
        heater(temp, [(0.0, 66.0)]).join(10)
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1, stderr
    r = json.loads(out.read_text())
    assert r["aborted"]["partial"] is True and "thermal limit 60 C exceeded (66.0 C)" in r["aborted"]["reason"]
    # after the heat, and long before its 20 s (the sampler reads every 0.1 s, the loop checks between chunks)
    assert heated_at < r["aborted"]["at_s"] < heated_at + 5 and r["wall_s"] < heated_at + 10, (heated_at, r["aborted"])
    assert r["latency_us"]["count"] > 0 and r["thermal"]["max_c"] == 66.0 and r["thermal"]["headroom_c"] == -6.0
    assert "ABORTED      thermal limit 60 C exceeded" in stdout


def test_a_limit_crossed_in_warm_up_names_the_phase_and_never_a_negative_time(tmp_path):
    """On a slow board the heat can come before the measured part (an arm64 run gave at_s = -0.035): the stop names
    the phase it happened in and never gives a negative time."""
    from edge_runtime.system.sampler import thermal_phase

    assert thermal_phase(None, 5.0, 10.0) == ("measure", 0.0)
    assert thermal_phase(5.0, 5.0, 10.0) == ("load", 0.0)  # over at the first reading: loading heated it
    assert thermal_phase(9.965, 5.0, 10.0) == ("warm-up", 0.0)  # crossed 35 ms before the measured part
    assert thermal_phase(12.5, 5.0, 10.0) == ("measure", 2.5)
    need("onnxruntime")
    root, temp = board_tree(tmp_path, 50.0)
    out = tmp_path / "result.json"
    with reaped(spawn_bench(root, "--duration", "5", "--warmup-time", "20", "--json", str(out))) as proc:
        read_until(proc, "warming up: 20 s")  # the warm-up is running: heat the board now
        heater(temp, [(0.0, 66.0)]).join(10)
        _, stderr = proc.communicate(timeout=60)  # long before the 20 s warm-up would have ended
    assert proc.returncode == 1, stderr
    assert "thermal limit 60 C exceeded during warm-up (66.0 C): nothing measured" in stderr
    # Nothing measured, and still a record of why (issue 22): the phase, the heat, no latency, the model that ran.
    r = results.load(out).to_dict()
    assert r["aborted"]["kind"] == "thermal" and r["aborted"]["phase"] == "warm-up" and r["aborted"]["partial"] is False
    assert r["aborted"]["at_s"] == 0.0 and "exceeded during warm-up (66.0 C)" in r["aborted"]["reason"]
    assert r["latency_us"]["count"] == 0 and r["latency_us"]["p99"] is None and r["throughput_ips"] is None
    assert r["thermal"]["max_c"] == 66.0 and r["thermal"]["headroom_c"] == -6.0 and r["config"]["warmup"] > 0
    assert r["backend"]["name"] == "onnxruntime" and r["backend"]["version"] and len(r["model"]["sha256"]) == 64
    assert all(p["t_s"] <= 0 and p["sample_index"] is None for p in r["thermal"]["timeline"])  # all before measuring


@pytest.mark.parametrize("why", ["above the limit", "never cooled down"])
@pytest.mark.parametrize("to", ["file", "stdout"])
def test_a_run_refused_before_load_still_writes_its_record(tmp_path, why, to):
    """A board already at 61.5 C with a 50 C limit (or one that never cools to 40 C) is refused before the model
    loads: exit 1 with one line, as before, and the --json asked for is written (it was not: issue 22): the refused
    run, `aborted.phase` "before load", with the temperatures that decided it."""
    need("onnxruntime")
    root, _ = board_tree(tmp_path, 61.5)
    out = tmp_path / "refused.json"
    cool = ["--cooldown-to", "40", "--cooldown-timeout", "0.3", "--sample-interval", "0.1"] if "cool" in why else []
    model = str(artifact("digits_cnn", "_int8.onnx"))
    proc = run_cli("bench", model, "--thermal-limit", "50", "--sysroot", str(root), "--cpus", "1", *cool,
                   "--json", str(out) if to == "file" else "-")  # fmt: skip
    said = "--cooldown-to 40: still 61.5 C after 0.3 s" if cool else "thermal limit before measuring: 61.5 C > 50 C"
    if cool:  # "cooling down" progress lines come first; the error is the last line, and the only one
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        errors = [ln for ln in proc.stderr.splitlines() if not ln.startswith("cooling down: ")]
        assert len(errors) == 1 and errors[0].startswith("edge-runtime: error: ") and said in errors[0], proc.stderr
    else:
        assert_one_line_error(proc, said, code=1)
    r = results.load(out if to == "file" else json.loads(proc.stdout)).to_dict()  # a result any reader takes
    assert r["aborted"] == {"kind": "thermal", "reason": r["aborted"]["reason"], "at_s": None, "partial": False,
                            "phase": "before load"}  # fmt: skip
    assert said in r["aborted"]["reason"]
    t = r["thermal"]
    assert t["available"] and t["start_c"] == t["max_c"] == t["end_c"] == 61.5
    assert (t["limit_c"], t["limit_source"], t["headroom_c"]) == (50.0, "--thermal-limit", -11.5)
    assert t["zones"] and all(z["start_c"] == 61.5 and z["trips"] for z in t["zones"])
    if cool:
        assert t["cooldown"]["to_c"] == 40.0 and t["cooldown"]["reached_c"] is None and t["cooldown"]["timed_out"]
        assert t["cooldown"]["waited_s"] >= 0.3
    assert r["model"]["path"] == model and r["model"]["format"] == "onnx" and len(r["model"]["sha256"]) == 64
    assert r["latency_us"]["count"] == 0 and r["config"]["cpus"] == [1] and r["config"]["warmup"] == 0
    assert r["backend"]["name"] == "onnxruntime" and r["backend"]["version"] == ""  # never loaded
    assert r["environment"]["sysroot"] == str(root)


def test_prometheus_textfile(tmp_path):
    need("onnxruntime")
    parser = pytest.importorskip("prometheus_client.parser", reason="pip install 'edge-runtime[prom]'")
    root, _ = board_tree(tmp_path, 47.5)
    prom = tmp_path / "textfile" / "edge.prom"
    prom.parent.mkdir()
    proc = run_cli(
        "bench",
        str(artifact("digits_cnn", "_int8.onnx")),
        "--iterations",
        "300",
        "--sysroot",
        str(root),
        "--prom",
        str(prom),
        "--json",
    )
    r = json.loads(proc.stdout)
    families = {f.name: f for f in parser.text_string_to_metric_families(prom.read_text())}
    q = {s.labels["quantile"]: s.value for s in families["edge_runtime_latency_seconds"].samples}
    assert q["0.99"] == pytest.approx(r["latency_us"]["p99"] / 1e6)
    assert families["edge_runtime_thermal_headroom_celsius"].samples[0].value == pytest.approx(85.0 - 47.5)
    assert [p.name for p in prom.parent.iterdir()] == ["edge.prom"]  # written atomically, nothing left behind


def test_thermal_command_on_this_machine_and_on_a_board(tmp_path):
    proc = run_cli("thermal")
    assert proc.returncode == 0
    if not list(Path("/sys/class/thermal").glob("thermal_zone*/temp")) and not list(
        Path("/sys/class/hwmon").glob("hwmon*/temp*_input")
    ):
        assert proc.stdout.startswith("no thermal sensors")
    root, _ = board_tree(tmp_path, 52.0)
    proc = run_cli("thermal", "--sysroot", str(root))
    assert proc.returncode == 0 and "cpu-thermal" in proc.stdout and "passive 85 (hyst 2)" in proc.stdout
    assert "headroom 33.0 C" in proc.stdout
    proc = run_cli("thermal", "--sysroot", str(root), "--watch", "0.1", "--count", "3", "--json")
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    assert len(lines) == 3 and all(x["max_c"] == 52.0 for x in lines)


def test_throttling_is_detected_with_the_time_it_started(tmp_path):
    need("onnxruntime")
    root, _ = board_tree(tmp_path, 50.0)
    d = root / "sys/devices/system/cpu/cpu1/cpufreq"
    d.mkdir(parents=True)
    (d / "cpuinfo_max_freq").write_text("1800000\n")
    (d / "scaling_max_freq").write_text("1800000\n")
    (d / "scaling_cur_freq").write_text("1800000\n")
    cap = d / "scaling_max_freq"

    def throttle(msg: str) -> float:  # the cooling device caps CPU1 at 1.2 GHz (kHz / 1000 below)
        cap.with_suffix(".new").write_text("1200000\n")
        os.replace(cap.with_suffix(".new"), cap)
        return elapsed_in(msg)

    # capped at the first "measuring" message (1 s or more into the measured part), with 2 s or more still to run
    at = AtFirst("measuring", throttle)
    cfg = request(
        model=str(artifact("digits_cnn", "_int8.onnx")), cpus=[1], duration_s=3.0, sample_interval_s=0.1, sandbox=False
    )
    r = bench(cfg, SystemRoot(root), at)
    t = r["thermal"]
    assert t["throttled"] is True, at.said
    assert 0 < at.result() <= t["throttle_started_s"] < cfg.duration_s, (at.said, t["throttle_started_s"])
    assert t["throttle_reasons"] == ["CPU1 capped at 1200 of 1800 MHz"]
    before = [p for p in t["timeline"] if 0 <= p["t_s"] < t["throttle_started_s"]]
    assert before and not any(p["throttled"] for p in before)


def test_a_sensor_that_appears_mid_run_and_a_sampler_with_no_housekeeping_cpu(tmp_path):
    need("onnxruntime")
    root, temp = board_tree(tmp_path, 50.0)
    for t in root.glob("sys/class/thermal/thermal_zone*/temp"):
        t.write_text("garbled\n")
    at = AtFirst("measuring", lambda _: heater(temp, [(0.0, 55.0)]))  # the driver comes back during the run
    cfg = request(
        model=str(artifact("digits_cnn", "_int8.onnx")),
        cpus=[0, 1],
        duration_s=2.0,
        sample_interval_s=0.1,
        sandbox=False,
    )
    r = bench(cfg, SystemRoot(root), at)
    at.result().join(30)
    t = r["thermal"]
    assert t["start_c"] is None and t["max_c"] == 55.0 and t["available"] is True
    assert any("no housekeeping CPU left for the thermal sampler" in w for w in r["quality"]["warnings"])
    from edge_runtime.program.bench_text import format_report

    assert "thermal      start ?, max 55.0 C, end 55.0 C" in format_report(r)


# ------------------------------------------------------------------------------------ hostile cases (issue 9's reviews)
MODEL = artifact("digits_cnn", "_int8.onnx")


@pytest.mark.parametrize("raw", [str(10**24), "2147483647", "-274000", "-300000", "nan", "4e9"])
def test_readings_no_silicon_can_report_are_skipped_and_counted(tmp_path, raw):
    from edge_runtime.system.root import SystemRoot
    from edge_runtime.system.thermal import read_snapshot

    root = thermal_tree(tmp_path, {"cpu-thermal": "51000", "garbled": raw})
    snap = read_snapshot(SystemRoot(root))
    assert snap.max_c() == 51.0 and snap.skipped == 1
    doc = strict_json(cli("thermal", "--sysroot", root, "--json").stdout)
    assert doc["max_c"] == 51.0 and doc["headroom_c"] == 34.0 and doc["sensors_skipped"] == 1


def test_a_garbled_reading_does_not_abort_a_bench(tmp_path):
    need("onnxruntime")
    root = thermal_tree(tmp_path, {"cpu-thermal": "2147483647"})
    proc = cli("bench", MODEL, "--sysroot", root, "--iterations", "200", "--thermal-limit", "60", "--json")
    assert proc.returncode == 0, proc.stderr
    r = strict_json(proc.stdout)
    assert "aborted" not in r and r["thermal"]["max_c"] is None and r["thermal"]["sensors_skipped"] == 1


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e21", "-300"])
@pytest.mark.parametrize("command", ["thermal", "bench"])
def test_thermal_limits_must_be_temperatures(value, command):
    args = ["thermal"] if command == "thermal" else ["bench", MODEL]
    assert_one_line_error(cli(*args, f"--thermal-limit={value}"), "--thermal-limit", value)


@pytest.mark.parametrize(
    ("ctype", "throttles"),
    [
        ("thermal-cpufreq-0", True),
        ("thermal-devfreq-1", True),
        ("thermal-idle-0", True),
        ("cpufreq-cpu0", True),
        ("Processor", True),
        ("intel_powerclamp", True),
        ("pwm-fan", False),
        ("gpio-fan", False),
        ("TFN1", False),
        ("Fan", False),
    ],
)
def test_cooling_devices_that_slow_the_chip(ctype, throttles):
    from edge_runtime.system.thermal import throttles_compute

    assert throttles_compute(ctype) is throttles


def test_a_zone_bound_to_thermal_cpufreq_is_reported_as_throttling(tmp_path):
    root = thermal_tree(tmp_path, {"cpu-thermal": "80000"}, {"thermal-cpufreq-0": (2, 3), "pwm-fan": (4, 4)})
    doc = strict_json(cli("thermal", "--sysroot", root, "--json").stdout)
    assert doc["throttled"] == ["cpu-thermal: cooling thermal-cpufreq-0 at state 2/3"]
    text = cli("thermal", "--sysroot", root).stdout
    assert "THROTTLED: cpu-thermal: cooling thermal-cpufreq-0 at state 2/3" in text


def test_cooling_devices_not_bound_to_a_zone(tmp_path):
    root = tree_with(
        tmp_path,
        {
            "sys/class/thermal/cooling_device0/type": "thermal-cpufreq-0\n",
            "sys/class/thermal/cooling_device0/cur_state": "2\n",
            "sys/class/thermal/cooling_device0/max_state": "5\n",
            "sys/class/thermal/cooling_device1/type": "Processor\n",
            "sys/class/thermal/cooling_device1/cur_state": "9\n",  # above its maximum: garbled
            "sys/class/thermal/cooling_device1/max_state": "3\n",
        },
    )
    doc = strict_json(cli("thermal", "--sysroot", root, "--json").stdout)
    assert doc["throttled"] == ["cooling device thermal-cpufreq-0 (cooling_device0) at state 2/5"]
    assert doc["sensors_skipped"] == 1


def test_a_rail_with_a_negative_voltage_is_garbled(tmp_path):
    root = tree_with(
        tmp_path,
        {
            "sys/class/hwmon/hwmon0/name": "ina3221\n",
            "sys/class/hwmon/hwmon0/in1_label": "VDD_IN\n",
            "sys/class/hwmon/hwmon0/in1_input": "-12000\n",
            "sys/class/hwmon/hwmon0/curr1_input": "400\n",
        },
    )
    doc = strict_json(cli("thermal", "--sysroot", root, "--json").stdout)
    assert doc["power"] is None and doc["sensors_skipped"] == 1


def test_a_sensor_that_vanishes_is_not_a_cool_board(tmp_path):
    need("onnxruntime")
    root = thermal_tree(tmp_path, {"cpu-thermal": "90000"})
    temp = root / "sys/class/thermal/thermal_zone0/temp"
    args = ["--sysroot", root, "--cooldown-to", "50", "--cooldown-timeout", "3", "--iterations", "10"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "edge_runtime.cli", "bench", str(MODEL), *map(str, args), "--thermal-limit", "100"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        seen = read_until(proc, "cooling down:")  # the wait has begun (with a reading): now the sensor goes
        temp.write_text("garbage\n")
        _, err = proc.communicate(timeout=60)
    finally:
        end(proc)
    stderr = "".join(seen) + err
    lines = stderr.strip().splitlines()  # progress while it waits, then the verdict
    assert proc.returncode == 1 and "cooling down: no temperature reading" in stderr, stderr
    assert lines[-1].startswith("edge-runtime: error: --cooldown-to 50: no temperature reading (the sensors went")


def test_impossible_clocks_and_a_tcc_offset(tmp_path):
    root = tree_with(
        tmp_path,
        {
            "sys/devices/system/cpu/cpu1/cpufreq/scaling_cur_freq": "-5\n",
            "sys/devices/system/cpu/cpu1/cpufreq/cpuinfo_max_freq": "1800000\n",
            "sys/devices/system/cpu/cpu1/cpufreq/scaling_max_freq": "-1\n",
            "sys/class/thermal/cooling_device0/type": "TCC Offset\n",
            "sys/class/thermal/cooling_device0/cur_state": "20\n",
            "sys/class/thermal/cooling_device0/max_state": "63\n",
        },
    )
    doc = strict_json(cli("thermal", "--sysroot", root, "--json").stdout)
    assert doc["throttled"] == ["cooling device TCC Offset (cooling_device0) at state 20/63"]
    assert doc["sensors_skipped"] == 2


def test_a_placeholder_trip_point_or_crit_is_not_a_limit(tmp_path):
    zone = "sys/class/thermal/thermal_zone0"
    root = write_tree(
        tmp_path,
        {
            f"{zone}/type": "cpu-thermal\n",
            f"{zone}/temp": "45000\n",
            f"{zone}/trip_point_0_temp": "1\n",  # 1 m°C: a placeholder some DTS carry
            f"{zone}/trip_point_0_type": "passive\n",
            "sys/class/hwmon/hwmon0/name": "odd\n",
            "sys/class/hwmon/hwmon0/temp1_input": "40000\n",
            "sys/class/hwmon/hwmon0/temp1_crit": "-40000\n",
        },
    )
    snap = read_snapshot(SystemRoot(root))
    assert thermal_limit(None, None, snap) == (None, "none known")  # a limit of 0 C or -40 C would refuse every run
    write_tree(root, {f"{zone}/trip_point_1_temp": "85000\n", f"{zone}/trip_point_1_type": "critical\n"})
    assert thermal_limit(None, None, read_snapshot(SystemRoot(root))) == (85.0, "lowest passive/critical trip point")


@pytest.mark.parametrize(("driver", "reported"), [("cpufreq-dt", True), ("intel_pstate", False), (None, True)])
def test_a_clock_below_its_minimum_is_throttling_where_the_reading_is_the_clock(tmp_path, driver, reported):
    d = "sys/devices/system/cpu/cpu0/cpufreq"
    files = {
        "sys/devices/system/cpu/online": "0\n",
        f"{d}/cpuinfo_max_freq": "1800000\n",
        f"{d}/scaling_max_freq": "1800000\n",  # not capped: the governor allows the full clock
        f"{d}/scaling_min_freq": "1500000\n",
        f"{d}/scaling_cur_freq": "600000\n",
    }
    if driver:
        files[f"{d}/scaling_driver"] = driver + "\n"
    snap = read_snapshot(SystemRoot(write_tree(tmp_path, files)))
    expected = ["CPU0 at 600 MHz, below its minimum of 1500 MHz (held down by hardware or firmware)"]
    # intel_pstate reports an average over the last tick, which an idle CPU drags below any minimum.
    assert throttle_reasons(snap) == (expected if reported else [])
