"""System reads through --sysroot (edge_runtime/system/): hostile trees with fifos and /dev/zero, garbled
numbers and boot arguments."""

from __future__ import annotations

import os
import shutil

from conftest import FIXTURES, artifact, need
from helpers import cli, strict_json, tree_with

MODEL = artifact("digits_cnn", "_int8.onnx")


def test_a_hostile_sysroot_with_fifos_and_dev_zero(tmp_path):
    """/proc and /sys files of a tree are read non-blocking and only when regular: info and thermal still answer."""
    root = tmp_path / "root"
    shutil.copytree(FIXTURES / "rpi5", root)
    (root / "proc/cmdline").unlink()
    os.mkfifo(root / "proc/cmdline")
    zone = root / "sys/class/thermal/thermal_zone0"
    zone.mkdir(parents=True, exist_ok=True)
    (zone / "type").write_text("cpu-thermal\n")
    if (zone / "temp").exists():
        (zone / "temp").unlink()
    (zone / "temp").symlink_to("/dev/zero")
    proc = cli("info", "--sysroot", root, "--json", timeout=60)
    assert proc.returncode == 0, proc.stderr
    doc = strict_json(proc.stdout)
    assert doc["board"].startswith("Raspberry Pi 5") and doc["isolation"] == {}
    proc = cli("thermal", "--sysroot", root, "--json", timeout=60)
    doc = strict_json(proc.stdout)
    assert doc["sensors_skipped"] >= 1 and doc["max_c"] is None


def test_unicode_digits_in_a_tree_are_garbled_not_a_crash(tmp_path):
    need("onnxruntime")
    root = tree_with(
        tmp_path,
        {
            "proc/irq/²/smp_affinity_list": "0-3\n",
            "proc/irq/5/smp_affinity_list": "0-3\n",
            "proc/interrupts": "           CPU0       CPU1\n  5:         ²          3   IO-APIC   eth0\n",
            "sys/class/thermal/thermal_zone²/type": "odd\n",
            "sys/class/thermal/thermal_zone²/temp": "45000\n",
            "sys/class/thermal/thermal_zone0/type": "cpu\n",
            "sys/class/thermal/thermal_zone0/temp": "٤٥٠٠٠\n",
            "sys/class/thermal/thermal_zone1/type": "cpu2\n",
            "sys/class/thermal/thermal_zone1/temp": "4_5000\n",
            "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor": "ondemand\n",
            "sys/devices/system/cpu/cpu1/cpufreq/scaling_max_freq": "²\n",
            "sys/devices/system/cpu/cpu1/cpufreq/scaling_min_freq": "600000\n",
            "proc/sys/kernel/sched_rt_runtime_us": "９５０\n",
        },
    )
    for args in (["tune", "show", "--cpus", "1"], ["thermal"], ["bench", MODEL, "--iterations", "50", "--cpus", "1"]):
        proc = cli(*args, "--sysroot", root, "--json")
        assert proc.returncode in (0, 1), proc.stderr
        doc = strict_json(proc.stdout)
    thermal = strict_json(cli("thermal", "--sysroot", root, "--json").stdout)
    assert thermal["max_c"] == 45.0 and thermal["sensors_skipped"] == 2  # ٤٥٠٠٠ and 4_5000 are not numbers
    assert doc["interference"]["interrupts"] is None  # a count spelled '²' parses as nothing: unknown


def test_garbled_boot_arguments_are_said_not_emptied(tmp_path):
    root = tree_with(tmp_path, {"proc/cmdline": "ro isolcpus=0-99999999999 nohz_full=garbage\n"})
    doc = strict_json(cli("info", "--sysroot", root, "--json").stdout)
    assert doc["isolation"]["garbled"] == {"isolcpus": "0-99999999999", "nohz_full": "garbage"}
    assert "isolcpus='0-99999999999' (garbled)" in cli("info", "--sysroot", root).stdout
    check = strict_json(cli("tune", "show", "--sysroot", root, "--cpus", "1", "--json").stdout)["checks"][0]
    assert check["status"] == "fail" and "is not a CPU list" in check["seen"]
