"""ARM cores named and grouped from real /proc/cpuinfo captures of boards and phones (tests/data/cpuinfo, each with its
public source in PROVENANCE.md): an arm64 cpuinfo has no model name, so `info` and every result said `cpu unknown`,
and nothing told a big.LITTLE board's big cores from its little ones."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from conftest import ROOT
from helpers import run_cli

from edge_runtime.system.armcpu import big_cores, clusters, core_name, cores_from_cpuinfo, summary
from edge_runtime.system.root import SystemRoot

CAPTURES = ROOT / "tests" / "data" / "cpuinfo"


@pytest.mark.parametrize(
    ("board", "named", "big"),
    [
        ("radxa-rock-5b", "4x Cortex-A55 + 4x Cortex-A76", (4, 5, 6, 7)),  # RK3588
        ("raspberry-pi-4b", "4x Cortex-A72", None),  # one kind of core: nothing to choose
        ("raspberry-pi-5", "4x Cortex-A76", None),
        ("nvidia-jetson-nano", "4x Cortex-A57", None),
        ("amlogic-s922x", "2x Cortex-A53 + 4x Cortex-A73", (2, 3, 4, 5)),
        ("rockchip-rk3399", "4x Cortex-A53 + 2x Cortex-A72", (4, 5)),
        ("qualcomm-snapdragon-855-plus", "4x Kryo 4xx Silver + 4x Kryo 4xx Gold", (4, 5, 6, 7)),
        ("google-tensor-g2", "4x Cortex-A55 + 2x Cortex-A78 + 2x Cortex-X1", (6, 7)),  # the prime pair
        ("samsung-exynos-990", "4x Cortex-A55 + 2x Cortex-A76 + 2x Exynos-M5", None),  # two big kinds: no guess
        ("nvidia-jetson-agx-orin", "12x Cortex-A78AE", None),  # has model name lines: the part still names it
        ("qualcomm-snapdragon-865", "4x Kryo 4xx Silver + 4x Cortex-A77", (4, 5, 6, 7)),  # two implementers
        ("qualcomm-snapdragon-8-gen2", "3x Cortex-A510 + 2x Cortex-A715 + 2x Cortex-A710 + 1x Cortex-X3", (7,)),
    ],
)
def test_real_captures_are_named_and_grouped(board, named, big):
    text = (CAPTURES / board / "cpuinfo").read_text()
    cores = cores_from_cpuinfo(text)
    assert sorted(cores) == list(range(len(cores))) and len(cores) == text.count("processor")
    groups = clusters(cores)
    assert summary(groups) == named
    assert big_cores(groups) == big


def test_names_come_from_the_part_numbers_and_unknown_parts_are_not_guessed():
    assert core_name(0x41, 0xD0B) == "Cortex-A76" and core_name(0x41, 0xD05) == "Cortex-A55"
    assert core_name(0x41, 0xFFF) == "ARM part 0xfff"  # a newer part than this table: its numbers, not a guess
    assert core_name(0x99, 0x001) == "implementer 0x99 part 0x001"
    assert core_name(None, 0xD0B) is None
    assert cores_from_cpuinfo("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\n") == {}


def test_kernel_capacities_order_and_split_clusters():
    """The kernel's cpu_capacity (or max frequency) decides what is big, and splits one design rated two ways (a
    Snapdragon's prime core is a Gold core clocked higher)."""
    cores = {i: "Kryo 4xx Silver" for i in range(4)} | {i: "Kryo 4xx Gold" for i in range(4, 8)}
    cap = {0: 325, 1: 325, 2: 325, 3: 325, 4: 870, 5: 870, 6: 870, 7: 1024}
    groups = clusters(cores, cap)
    assert [(g.name, g.cpus) for g in groups] == [
        ("Kryo 4xx Silver", (0, 1, 2, 3)), ("Kryo 4xx Gold", (4, 5, 6)), ("Kryo 4xx Gold", (7,))
    ]  # fmt: skip
    assert big_cores(groups) == (7,)
    assert clusters(cores, {0: 325})[0].capacity is None  # capacities only when every CPU has one


def rock5b_tree(tmp_path, with_freqs: bool = True):
    """A sysroot holding the ROCK 5B capture, and (when asked) the max frequencies of its cpufreq-info output."""
    root = tmp_path / "rock5b"
    (root / "proc").mkdir(parents=True)
    shutil.copy(CAPTURES / "radxa-rock-5b" / "cpuinfo", root / "proc" / "cpuinfo")
    cpu = root / "sys/devices/system/cpu"
    cpu.mkdir(parents=True)
    (cpu / "online").write_text("0-7\n")
    if with_freqs:
        listing = (CAPTURES / "radxa-rock-5b" / "cpufreq-info.txt").read_text()
        for n, top in re.findall(r"analyzing CPU (\d+):.*?hardware limits: \S+ MHz - ([\d.]+) GHz", listing, re.S):
            (cpu / f"cpu{n}" / "cpufreq").mkdir(parents=True)
            (cpu / f"cpu{n}" / "cpufreq" / "cpuinfo_max_freq").write_text(f"{int(float(top) * 1e6)}\n")
    return root


def test_info_names_the_cores_and_clusters_of_a_big_little_board(tmp_path):
    root = rock5b_tree(tmp_path)
    r = SystemRoot(root)
    assert r.cpu_model() == "4x Cortex-A55 + 4x Cortex-A76"
    assert [(c.name, c.cpus, c.capacity) for c in r.cpu_clusters()] == [
        ("Cortex-A55", (0, 1, 2, 3), 1800000), ("Cortex-A76", (4, 5, 6, 7), 2400000)
    ]  # fmt: skip
    proc = run_cli("info", "--sysroot", str(root), "--json", "-")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["cpu_model"] == "4x Cortex-A55 + 4x Cortex-A76"
    assert [c["cpus"] for c in doc["cpu_clusters"]] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    text = run_cli("info", "--sysroot", str(root)).stdout
    assert "cpu      4x Cortex-A55 + 4x Cortex-A76" in text
    assert "clusters Cortex-A55 on CPU 0-3; Cortex-A76 on CPU 4-7 (smallest first)" in text


def test_cpus_board_without_a_profile_means_the_big_cores_and_says_so(tmp_path):
    root = rock5b_tree(tmp_path, with_freqs=False)  # no capacities: the designs decide (A55 is a little core)
    proc = run_cli("tune", "show", "--cpus", "board", "--sysroot", str(root))
    assert "using its big cores, CPU 4-7 (Cortex-A76)" in proc.stderr, proc.stderr
    assert "tuning for CPU 4-7" in proc.stdout, proc.stdout  # (exit 1: a bare capture has no knobs to read)
    (root / "proc" / "cpuinfo").write_text((CAPTURES / "raspberry-pi-4b" / "cpuinfo").read_text())
    one_kind = run_cli("tune", "show", "--cpus", "board", "--sysroot", str(root))
    assert one_kind.returncode == 2 and "no board profile matches" in one_kind.stderr
