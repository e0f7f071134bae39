"""The environment section (edge_runtime/system/environment.py): what a tree says, what is observed and what is
live."""

from __future__ import annotations

import json
import platform
import shutil

from conftest import FIXTURES, artifact, need
from helpers import cli, run_cli, strict_json, write_tree

MODEL = artifact("digits_cnn", "_int8.onnx")


def test_the_environment_of_a_tree_says_what_is_observed_and_what_is_live(tmp_path):
    need("onnxruntime")
    import platform

    root = tmp_path / "root"
    shutil.copytree(FIXTURES / "rpi5", root)
    r = strict_json(cli("bench", MODEL, "--sysroot", root, "--iterations", "100", "--json").stdout)
    env = r["environment"]
    assert env["sysroot"] == str(root) and env["board"].startswith("Raspberry Pi 5")
    assert env["cmdline"] == (root / "proc/cmdline").read_text().strip()
    # The tree has no osrelease: unknown, not this machine's kernel passed off as the board's.
    assert not (root / "proc/sys/kernel/osrelease").exists() and env["kernel"] is None
    assert env["measured_on"]["kernel"] == platform.release()
    live = strict_json(cli("bench", MODEL, "--iterations", "100", "--json").stdout)["environment"]
    assert "measured_on" not in live and live["kernel"] == platform.release()


def test_a_tree_that_does_not_say_is_unknown_and_its_hostname_is_the_boards(tmp_path):
    need("onnxruntime")
    root = write_tree(tmp_path / "root", {"sys/devices/system/cpu/online": "0-3\n"})
    proc = run_cli("bench", str(MODEL), "--iterations", "50", "--sysroot", str(root), "--json")
    assert proc.returncode == 0, proc.stderr
    env = json.loads(proc.stdout)["environment"]
    # No /proc/cmdline, no isolated list, no hostname in the tree: unknown, not "" / [] / this machine's name.
    assert env["cmdline"] is None and env["isolated_cpus"] is None and env["hostname"] is None
    assert env["online_cpus"] == [0, 1, 2, 3] and env["measured_on"]["hostname"] == platform.node()
    write_tree(root, {"proc/sys/kernel/hostname": "rock5b-bench-7\n", "proc/cmdline": "console=ttyS2\n"})
    write_tree(root, {"sys/devices/system/cpu/isolated": "\n"})
    assert not any("thermal and power read from" in w for w in json.loads(proc.stdout)["quality"]["warnings"])
    write_tree(
        root, {"sys/class/thermal/thermal_zone0/type": "soc-thermal\n", "sys/class/thermal/thermal_zone0/temp": "41000"}
    )
    doc = json.loads(run_cli("bench", str(MODEL), "--iterations", "50", "--sysroot", str(root), "--json").stdout)
    env = doc["environment"]
    assert env["hostname"] == "rock5b-bench-7" and env["cmdline"] == "console=ttyS2" and env["isolated_cpus"] == []
    # Temperatures from a tree beside latencies from this machine: the result says where each came from.
    assert doc["thermal"]["start_c"] == 41.0
    assert f"thermal and power read from the --sysroot tree {root}, not from the machine" in " ".join(
        doc["quality"]["warnings"]
    )


def test_the_firmware_is_dmis_bios_or_the_boot_loader_the_device_tree_names(tmp_path):
    """A farm report sets it beside its siblings' (issue 28): x86's DMI BIOS from a real capture; U-Boot's version in
    the device tree's `chosen` node; nothing when a tree says neither (the Raspberry Pi 5 capture)."""
    from edge_runtime.system.root import SystemRoot

    dmi = FIXTURES / "x86-procfs" / "sys" / "class" / "dmi" / "id"
    version, date = ((dmi / f"bios_{k}").read_text().strip() for k in ("version", "date"))
    said = SystemRoot(str(FIXTURES / "x86-procfs")).firmware()
    assert version in said and f"({date})" in said
    assert SystemRoot(str(FIXTURES / "rpi5")).firmware() == ""
    root = tmp_path / "root"
    shutil.copytree(FIXTURES / "rpi5", root)
    write_tree(root, {"proc/device-tree/chosen/u-boot,version": "U-Boot 2024.01-rc5\x00"})
    assert SystemRoot(str(root)).firmware() == "U-Boot 2024.01-rc5"
