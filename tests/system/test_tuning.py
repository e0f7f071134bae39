"""system_tuning/ scripts under busybox sh and dash on fake trees built from ../shared/fixtures (x86 and ARM), the
`edge-runtime tune` audit on those trees, and board profiles and detection.

Every script: values written, dry run (nothing changes), refusals, IRQs the kernel will not move (a read-only bind
mount of one entry: needs root), and a byte-identical tree after --restore.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from conftest import ROOT, artifact, need
from helpers import (
    assert_one_line_error,
    cli,
    fixture,
    four_cpu_tree,
    make_fifo,
    run_cli,
    state_key,
    strict_json,
    x86_tree,
)

from edge_runtime.system.boards import BoardProfileError, BoardProfileWarning, detect, load_all, load_profile
from edge_runtime.system.root import SystemRoot

SCRIPTS = ROOT / "system_tuning"
SHELLS = {"busybox": ["busybox", "sh"], "dash": ["dash"]}


@pytest.fixture(params=list(SHELLS))
def shell(request):
    cmd = SHELLS[request.param]
    if not shutil.which(cmd[0]):
        pytest.skip(f"{cmd[0]} not installed: apt-get install {cmd[0]} (make test does this as root)")
    return cmd


def sh(shell_cmd, script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*shell_cmd, str(SCRIPTS / script), *args], capture_output=True, text=True, timeout=120)


def arm_tree(tmp: Path) -> Path:
    """ARM: Raspberry Pi 5 identity and command line, the Amlogic A53 IRQ masks (no smp_affinity_list files)."""
    t = tmp / "arm"
    shutil.copytree(fixture("rpi5"), t)
    shutil.copytree(fixture("amlogic-a53-irqbalance-issue") / "proc/irq", t / "proc/irq")
    (t / "proc/irq/default_smp_affinity").write_text("f\n")
    (t / "sys/devices/system/cpu").mkdir(parents=True)
    (t / "sys/devices/system/cpu/online").write_text("0-3\n")
    (t / "proc/sys/kernel").mkdir(parents=True)
    (t / "proc/sys/kernel/timer_migration").write_text("1\n")
    return t


def snapshot(tree: Path) -> dict[str, bytes]:
    return {str(p.relative_to(tree)): p.read_bytes() for p in sorted(tree.rglob("*")) if p.is_file()}


def test_x86_scripts_write_what_they_say_and_restore_byte_identical(shell, tmp_path):
    t = x86_tree(tmp_path)
    before = snapshot(t)
    save = tmp_path / "x86.save"
    irqs = list((t / "proc/irq").glob("*/smp_affinity_list"))
    r = sh(shell, "isolate_cpus.sh", "--cpus", "2-3", "--root", str(t), "--save", str(save))
    assert r.returncode == 0, r.stderr
    assert f"moved {len(irqs)} IRQ(s) to CPU 0-1 (housekeeping), away from CPU 2-3" in r.stdout
    assert irqs and all(p.read_text() == "0-1\n" for p in irqs)
    assert (t / "proc/irq/default_smp_affinity").read_text() == "00000003\n"
    assert (t / "sys/devices/virtual/workqueue/cpumask").read_text() == "00000003\n"
    assert (t / "sys/devices/virtual/workqueue/writeback/cpumask").read_text() == "00000003\n"
    assert (t / "sys/class/net/eth0/queues/rx-0/rps_cpus").read_text() == "0\n"  # RPS off stays off
    assert (t / "sys/class/net/eth0/queues/rx-1/rps_cpus").read_text() == "00000003\n"  # was on CPU 2-3
    assert (t / "proc/sys/kernel/timer_migration").read_text() == "0\n"
    conf = (t / "etc/default/irqbalance").read_text()
    assert "IRQBALANCE_BANNED_CPULIST=2-3\n" in conf and "BANNED_CPULIST=1" not in conf
    r = sh(shell, "cpufreq.sh", "--cpus", "2-3", "--root", str(t), "--save", str(save))
    assert r.returncode == 0, r.stderr
    for c in (2, 3):
        d = t / f"sys/devices/system/cpu/cpu{c}/cpufreq"
        assert (d / "scaling_governor").read_text() == "performance\n"
        assert (d / "scaling_min_freq").read_text() == (d / "scaling_max_freq").read_text()
    assert (t / "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor").read_text() == "powersave\n"  # untouched
    assert (t / "sys/devices/system/cpu/intel_pstate/no_turbo").read_text() == "1\n"
    r = sh(shell, "isolate_cpus.sh", "--restore", str(save), "--root", str(t))
    assert r.returncode == 0, r.stderr
    assert snapshot(t) == before


def test_arm_masks_and_restore(shell, tmp_path):
    t = arm_tree(tmp_path)
    before = snapshot(t)
    save = tmp_path / "arm.save"
    r = sh(shell, "irq_affinity.sh", "--cpus", "3", "--root", str(t), "--save", str(save))
    assert r.returncode == 0, r.stderr
    masks = {p.parent.name: p.read_text() for p in (t / "proc/irq").glob("*/smp_affinity")}
    assert masks and set(masks.values()) == {"00000007\n"}  # CPU 0-2 as a mask: no list files on this board
    r = sh(shell, "irq_affinity.sh", "--restore", str(save), "--root", str(t))
    assert r.returncode == 0, r.stderr
    assert snapshot(t) == before


@pytest.mark.parametrize("script", ["irq_affinity.sh", "isolate_cpus.sh", "cpufreq.sh", "apply_at_boot.sh"])
def test_dry_run_changes_nothing(shell, tmp_path, script):
    t = x86_tree(tmp_path)
    (t / "etc/edge-runtime").mkdir(parents=True)
    (t / "etc/edge-runtime/tuning.conf").write_text("CPUS=2-3\nGOVERNOR=performance\n")
    before = snapshot(t)
    args = [] if script == "apply_at_boot.sh" else ["--cpus", "2-3"]
    r = sh(shell, script, *args, "--root", str(t), "--dry-run", "--save", str(tmp_path / "s"))
    assert r.returncode == 0, r.stderr
    assert "would " in r.stdout
    assert snapshot(t) == before
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    ("cpus", "needle"),
    [
        ("0-3", "refusing to leave no housekeeping CPU"),
        ("2,7", "CPU 7 does not exist (online: 0-3)"),
        ("2-x", "'2-x' is not a CPU list"),
        ("3-1", "goes down"),
    ],
)
@pytest.mark.parametrize("script", ["irq_affinity.sh", "isolate_cpus.sh", "kernel_cmdline.sh"])
def test_refusals(shell, tmp_path, script, cpus, needle):
    t = x86_tree(tmp_path)
    before = snapshot(t)
    r = sh(shell, script, "--cpus", cpus, "--root", str(t))
    assert r.returncode == 2
    assert needle in r.stderr
    assert snapshot(t) == before


def test_cpufreq_refuses_a_governor_the_cpu_lacks(shell, tmp_path):
    t = x86_tree(tmp_path)
    r = sh(shell, "cpufreq.sh", "--cpus", "2", "--governor", "ondemand", "--root", str(t))
    assert r.returncode == 2 and "offers only: performance powersave" in r.stderr


def test_irq_the_kernel_will_not_move_is_skipped_and_named(shell, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to bind-mount one IRQ entry read-only")
    t = x86_tree(tmp_path)
    stuck = t / "proc/irq/9/smp_affinity_list"
    assert stuck.exists()
    mounted = subprocess.run(["mount", "--bind", str(stuck), str(stuck)], capture_output=True).returncode == 0
    if not mounted or subprocess.run(["mount", "-o", "remount,ro,bind", str(stuck)], capture_output=True).returncode:
        if mounted:
            subprocess.run(["umount", str(stuck)])
        pytest.skip("cannot bind-mount read-only here")
    try:
        before = snapshot(t)
        save = tmp_path / "s"
        r = sh(shell, "irq_affinity.sh", "--cpus", "2-3", "--root", str(t), "--save", str(save))
        assert r.returncode == 0, r.stderr
        assert "skipped IRQ 9: the kernel refused to move them" in r.stdout
        assert stuck.read_text() == "0-3\n"
        assert (t / "proc/irq/8/smp_affinity_list").read_text() == "0-1\n"
        assert "/proc/irq/9/" not in save.read_text()  # not changed, so not to be restored
        r = sh(shell, "irq_affinity.sh", "--restore", str(save), "--root", str(t))
        assert r.returncode == 0, r.stderr
        assert snapshot(t) == before
    finally:
        subprocess.run(["umount", str(stuck)])


def test_kernel_cmdline_names_the_board_file(shell, tmp_path):
    t = arm_tree(tmp_path)
    r = sh(shell, "kernel_cmdline.sh", "--cpus", "2-3", "--root", str(t))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "isolcpus=managed_irq,domain,2-3 nohz_full=2-3 rcu_nocbs=2-3 irqaffinity=0-1"
    assert "board raspberry-pi-5" in r.stderr and "/boot/firmware/cmdline.txt" in r.stderr
    r = sh(shell, "kernel_cmdline.sh", "--cpus", "3", "--board", "rk3588", "--root", str(t))
    assert "/boot/extlinux/extlinux.conf" in r.stderr


@pytest.mark.parametrize("script", sorted(p.name for p in SCRIPTS.glob("*.sh") if p.name != "lib.sh"))
def test_help(shell, script):
    r = sh(shell, script, "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage:")
    for flag in ("--dry-run", "--root", "--save", "--restore"):
        assert flag in r.stdout
    r = sh(shell, script, "--frobnicate")
    assert r.returncode == 2 and "unknown option '--frobnicate'" in r.stderr


def test_shellcheck_clean():
    if not shutil.which("shellcheck"):
        pytest.skip("shellcheck not installed: apt-get install shellcheck (make test does this as root)")
    files = [str(p) for p in sorted(SCRIPTS.glob("*.sh"))] + [str(SCRIPTS / "edge-runtime-tuning.init")]
    r = subprocess.run(["shellcheck", "-x", "-s", "sh", *files], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


# ------------------------------------------------------------------------------------------------- tune (Python)
def _tune(*args: str) -> tuple[int, dict]:
    proc = run_cli("tune", *args, "--json")
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else {}


def test_tune_show_verdicts_before_and_after_the_scripts(tmp_path):
    t = x86_tree(tmp_path)
    code, doc = _tune("show", "--sysroot", str(t), "--cpus", "2-3")
    assert code == 1 and doc["tuned"] is False
    status = {c["knob"]: c["status"] for c in doc["checks"]}
    assert status == {
        "kernel command line": "warn",  # no /proc/cmdline in the tree: unknown, not "isolcpus lacks 2-3"
        "IRQ affinity": "fail",
        "default IRQ affinity": "fail",
        "irqbalance": "warn",  # no process list in the tree: whether it runs is unknown
        "cpufreq governor": "fail",
        "frequency range": "warn",
        "turbo/boost": "fail",
        "RT throttling": "warn",
        "workqueues": "fail",
        "timer migration": "fail",
    }
    save = tmp_path / "s"
    for script in ("isolate_cpus.sh", "cpufreq.sh"):
        assert sh(["sh"], script, "--cpus", "2-3", "--root", str(t), "--save", str(save)).returncode == 0
    (t / "proc").mkdir(exist_ok=True)
    (t / "proc/cmdline").write_text("root=/dev/sda1 isolcpus=managed_irq,domain,2-3 nohz_full=2-3 rcu_nocbs=2-3\n")
    code, doc = _tune("show", "--sysroot", str(t), "--cpus", "2-3")
    status = {c["knob"]: c["status"] for c in doc["checks"]}
    assert code == 0 and doc["tuned"] is True, status
    assert status["frequency range"] == "ok" and status["RT throttling"] == "warn"


def test_tune_show_on_a_board_capture_picks_the_board_cpus(tmp_path):
    t = arm_tree(tmp_path)
    code, doc = _tune("show", "--sysroot", str(t))
    assert doc["cpus"] == [3]  # raspberry-pi-5 profile: isolate CPU 3
    status = {c["knob"]: c["status"] for c in doc["checks"]}
    assert status["IRQ affinity"] == "fail"  # the Amlogic masks put every IRQ everywhere
    assert status["per-CPU IRQs"] == "warn"  # IRQ 17 has mask 8: CPU 3 alone
    assert status["cpufreq governor"] == "n/a"
    assert code == 1


def test_tune_apply_and_reset_through_the_scripts(tmp_path):
    t = x86_tree(tmp_path)
    before = snapshot(t)
    state = tmp_path / "state"
    proc = run_cli("tune", "apply", "--sysroot", str(t), "--cpus", "2-3", "--state-dir", str(state))
    assert proc.returncode == 0, proc.stderr
    assert "boot arguments: isolcpus=managed_irq,domain,2-3" in proc.stdout
    assert (t / "proc/sys/kernel/timer_migration").read_text() == "0\n"
    proc = run_cli("tune", "reset", "--sysroot", str(t), "--state-dir", str(state))
    assert proc.returncode == 0, proc.stderr
    assert snapshot(t) == before
    proc = run_cli("tune", "reset", "--sysroot", str(t), "--state-dir", str(state))
    assert proc.returncode == 2 and "nothing to reset" in proc.stderr


def test_real_system_apply_and_restore(request, tmp_path):
    """Opt-in (pytest --real-system, as root): apply on this machine, then check the restore put everything back."""
    if not request.config.getoption("--real-system"):
        pytest.skip("changes this machine's IRQ, workqueue and cpufreq settings: run with --real-system as root")
    if os.geteuid() != 0:
        pytest.skip("needs root")
    online = SystemRoot("/").online_cpus()
    if len(online) < 2:
        pytest.skip("needs at least 2 CPUs")
    watched = [p for p in Path("/proc/irq").glob("*/smp_affinity_list")] + [
        Path("/proc/irq/default_smp_affinity"),
        Path("/proc/sys/kernel/timer_migration"),
        Path("/sys/devices/virtual/workqueue/cpumask"),
    ]

    def read_all():
        out = {}
        for p in watched:
            try:
                out[str(p)] = p.read_text()
            except OSError:
                continue
        return out

    before = read_all()
    state = tmp_path / "state"
    cpus = str(online[-1])
    assert run_cli("tune", "apply", "--cpus", cpus, "--state-dir", str(state)).returncode == 0
    assert Path("/proc/sys/kernel/timer_migration").read_text().strip() == "0"
    assert run_cli("tune", "reset", "--state-dir", str(state)).returncode == 0
    assert read_all() == before


# --------------------------------------------------------------------------------------------------------- boards
@pytest.mark.parametrize(
    ("capture", "board"),
    [
        ("rpi4", "raspberry-pi-4"),
        ("rpi5", "raspberry-pi-5"),
        ("jetson-orin-nano", "jetson-orin-nano"),
        ("jetson-orin-nano-jp6-aaeon", "jetson-orin-nano"),
        ("imx8mp-evk", "imx8mp"),
        ("rock5b", "rk3588"),
        ("x86-node-exporter", "generic-x86"),
        ("x86-procfs", "generic-x86"),
        ("jetson-nano", None),
    ],
)
def test_board_detection_on_captures(capture, board):
    found = detect(SystemRoot(fixture(capture)))
    assert (found.name if found else None) == board


def test_every_profile_loads_cleanly_and_fits_its_board():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        profiles = {p.name: p for p in load_all()}
    assert set(profiles) == {"raspberry-pi-4", "raspberry-pi-5", "jetson-orin-nano", "imx8mp", "rk3588", "generic-x86"}
    assert profiles["imx8mp"].npu.tflite_delegate == "/usr/lib/libvx_delegate.so"
    assert profiles["rk3588"].cpus.isolate == (4, 5, 6, 7)
    assert [c.big for c in profiles["rk3588"].cpus.clusters] == [False, True, True]
    for p in profiles.values():
        assert p.cmdline.file and (p.thermal.limit_c or 0) > 0
        assert not set(p.cpus.isolate) & set(p.cpus.housekeeping)


def test_profile_errors_name_the_file_and_key(tmp_path):
    good = (ROOT / "boards/raspberry-pi-5.toml").read_text()
    p = tmp_path / "raspberry-pi-5.toml"
    p.write_text(good.replace("[thermal]", "[thermal]\nfan_curve = 3"))
    with pytest.warns(BoardProfileWarning, match=r"raspberry-pi-5.toml: \[thermal\]: unknown key 'fan_curve' ignored"):
        load_profile(p)
    p.write_text(good.replace("limit_c = 85.0", 'limit_c = "hot"'))
    with pytest.raises(BoardProfileError, match=r"raspberry-pi-5.toml: thermal.limit_c = 'hot': expected degrees C"):
        load_profile(p)
    p.write_text(good.replace('kind = "none"', 'kind = "tpu"'))
    with pytest.raises(BoardProfileError, match=r"npu.kind = 'tpu': expected one of none, npu, gpu, dsp"):
        load_profile(p)
    q = tmp_path / "other.toml"
    q.write_text(good)
    with pytest.raises(BoardProfileError, match="must match the file name"):
        load_profile(q)


def test_profiles_are_read_by_the_campaigns_toml_reader(tmp_path):
    """Issue 23, step 6: one TOML reader (edge_runtime/files/toml.py) for profiles and campaigns. A profile's typo
    warns with what was meant, many unknown keys are ten lines and a count (not one line each), a section that is not
    a table and a file that is not TOML are one line in the campaign's words; the profile still loads where it can."""
    from edge_runtime.files.toml import MAX_UNKNOWN_SHOWN

    good = (ROOT / "boards/raspberry-pi-5.toml").read_text()
    p = tmp_path / "raspberry-pi-5.toml"
    p.write_text(good.replace("[thermal]", "[thermal]\nlimit_cc = 3"))
    meant = r"\[thermal\]: unknown key 'limit_cc' ignored \(did you mean 'limit_c'\?\)"
    with pytest.warns(BoardProfileWarning, match=meant):
        assert load_profile(p).thermal.limit_c == 85.0
    n = 500
    p.write_text("".join(f"k{i:04d} = 1\n" for i in range(n)) + good)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert load_profile(p).name == "raspberry-pi-5"
    said = [str(w.message) for w in caught if issubclass(w.category, BoardProfileWarning)]
    assert len(said) == MAX_UNKNOWN_SHOWN + 1 and "the top level: unknown key 'k0000' ignored" in said[0], said[:3]
    assert said[-1] == (f"board profile raspberry-pi-5.toml: ... and {n - MAX_UNKNOWN_SHOWN} more unknown keys "
                        f"ignored ({n} in all)")
    for text, needle in [
        ("thermal = 5\n" + good.replace("[thermal]", "[was_thermal]"), "[thermal] must be a table"),
        ("this is = not [ toml", "not TOML ("),
        (good + "# caf\xe9\n", "not TOML (not UTF-8 text: invalid continuation byte at byte "),
    ]:
        p.write_bytes(text.encode("latin-1"))
        with pytest.raises(BoardProfileError) as err, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            load_profile(p)
        assert err.value.one_line().startswith(f"board profile raspberry-pi-5.toml: {needle}"), err.value.one_line()


def test_info_shows_the_detected_board():
    proc = run_cli("info", "--sysroot", str(fixture("imx8mp-evk")), "--json")
    doc = json.loads(proc.stdout)
    assert doc["board_profile"]["name"] == "imx8mp" and doc["board_profile"]["npu"] == "npu"


def test_save_file_must_be_writable_before_anything_changes(shell, tmp_path):
    t = x86_tree(tmp_path)
    before = snapshot(t)
    r = sh(shell, "irq_affinity.sh", "--cpus", "2", "--root", str(t), "--save", str(tmp_path / "no/such/dir/s"))
    assert r.returncode == 2 and "cannot write" in r.stderr and r.stdout == ""
    assert snapshot(t) == before
    empty = tmp_path / "empty.save"
    empty.write_text("")  # e.g. made by mktemp: gets its header, then restores
    assert sh(shell, "irq_affinity.sh", "--cpus", "2", "--root", str(t), "--save", str(empty)).returncode == 0
    assert sh(shell, "irq_affinity.sh", "--restore", str(empty), "--root", str(t)).returncode == 0
    assert snapshot(t) == before


def test_restore_refuses_another_root_and_carries_on_past_a_failure(shell, tmp_path):
    t = x86_tree(tmp_path)
    before = snapshot(t)
    save = tmp_path / "s"
    assert sh(shell, "irq_affinity.sh", "--cpus", "2-3", "--root", str(t), "--save", str(save)).returncode == 0
    r = sh(shell, "irq_affinity.sh", "--restore", str(save))  # no --root: this save belongs to the tree
    assert r.returncode == 2 and f"recorded for root '{t}'" in r.stderr
    blocked = t / "proc/irq/8/smp_affinity_list"
    blocked.unlink()
    blocked.mkdir()  # cannot be written back
    r = sh(shell, "irq_affinity.sh", "--restore", str(save), "--root", str(t))
    assert r.returncode == 1 and "could not restore /proc/irq/8/smp_affinity_list" in r.stdout
    blocked.rmdir()
    blocked.write_text("0-3\n")
    assert snapshot(t) == before  # everything else was put back


@pytest.mark.parametrize(("cpus", "needle"), [("0-100000000", "beyond any machine"), ("9999", "beyond any machine")])
def test_absurd_cpu_numbers_are_refused_at_once(shell, tmp_path, cpus, needle):
    t = x86_tree(tmp_path)
    r = sh(shell, "irq_affinity.sh", "--cpus", cpus, "--root", str(t))
    assert r.returncode == 2 and needle in r.stderr


def test_leading_zeros_are_decimal(shell, tmp_path):
    t = x86_tree(tmp_path)
    r = sh(shell, "irq_affinity.sh", "--cpus", "02-03", "--root", str(t))
    assert r.returncode == 0 and "away from CPU 2-3" in r.stdout


def test_tune_apply_twice_is_refused_and_a_failed_apply_can_be_reset(tmp_path):
    t = x86_tree(tmp_path)
    before = snapshot(t)
    state = tmp_path / "state"
    # A governor the CPUs do not offer is refused before anything changes.
    proc = run_cli(
        "tune", "apply", "--sysroot", str(t), "--cpus", "2", "--governor", "ondemand", "--state-dir", str(state)
    )
    assert proc.returncode == 2 and "CPU 2 offers only performance powersave" in proc.stderr
    assert snapshot(t) == before and not list(state.glob("latest-*"))
    # A script that fails after another has changed the tree: the apply says so, and reset puts it all back.
    scripts = tmp_path / "scripts"
    shutil.copytree(SCRIPTS, scripts)
    (scripts / "cpufreq.sh").write_text('echo "cpufreq.sh: error: simulated failure" >&2\nexit 2\n')
    proc = run_cli(
        "tune",
        "apply",
        "--sysroot",
        str(t),
        "--cpus",
        "2",
        "--state-dir",
        str(state),
        env={"EDGE_RUNTIME_SCRIPTS": str(scripts)},
    )
    assert proc.returncode == 2 and "simulated failure" in proc.stderr and "tune reset" in proc.stderr
    assert snapshot(t) != before
    proc = run_cli("tune", "apply", "--sysroot", str(t), "--cpus", "2", "--state-dir", str(state))
    assert proc.returncode == 2 and "already applied" in proc.stderr
    assert run_cli("tune", "reset", "--sysroot", str(t), "--state-dir", str(state)).returncode == 0
    assert snapshot(t) == before


def test_dry_runs_answer_as_the_real_run_would_and_a_removed_state_dir_does_not_block(tmp_path):
    t = x86_tree(tmp_path)
    before = snapshot(t)
    state = tmp_path / "state"
    assert run_cli("tune", "apply", "--sysroot", str(t), "--cpus", "2", "--state-dir", str(state)).returncode == 0
    applied = snapshot(t)
    # A dry-run apply on an applied root is refused as the real one is, through any state dir.
    for st in (state, tmp_path / "other"):
        proc = run_cli("tune", "apply", "--dry-run", "--sysroot", str(t), "--cpus", "2", "--state-dir", str(st))
        assert proc.returncode == 2 and "already applied" in proc.stderr, proc.stderr
    # A dry-run reset says what it would do, in those words, and does nothing.
    proc = run_cli("tune", "reset", "--dry-run", "--sysroot", str(t), "--state-dir", str(state))
    assert proc.returncode == 0 and "would restore what tuning-" in proc.stdout and "\nrestored" not in proc.stdout
    assert snapshot(t) == applied
    # The state dir removed by hand: nothing can restore from it, and it must not block every later apply.
    shutil.rmtree(state)
    proc = run_cli("tune", "apply", "--sysroot", str(t), "--cpus", "2", "--state-dir", str(tmp_path / "new"))
    assert proc.returncode == 0, proc.stderr
    assert run_cli("tune", "reset", "--sysroot", str(t), "--state-dir", str(tmp_path / "new")).returncode == 0
    assert snapshot(t) == applied  # the second save recorded the applied values: the originals went with the state dir
    assert snapshot(t) != before


def test_boot_configuration_with_comments_and_quotes(shell, tmp_path):
    t = x86_tree(tmp_path)
    (t / "etc/edge-runtime").mkdir(parents=True)
    (t / "etc/edge-runtime/tuning.conf").write_text("CPUS='2-3'   # the inference cores\nGOVERNOR=\"performance\"\n")
    r = sh(shell, "apply_at_boot.sh", "--root", str(t))
    assert r.returncode == 0, r.stderr
    assert (t / "proc/sys/kernel/timer_migration").read_text() == "0\n"


# ------------------------------------------------------------------------------------ hostile cases (issue 9's reviews)
MODEL = artifact("digits_cnn", "_int8.onnx")


def tune_apply_command(tree: Path, state: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "edge_runtime.cli",
        "tune",
        "apply",
        "--cpus",
        "1",
        "--sysroot",
        str(tree),
        "--state-dir",
        str(state),
    ]


def test_two_tune_applies_at_once_leave_an_exact_restore(tmp_path):
    t = x86_tree(tmp_path)
    before = snapshot(t)
    state = tmp_path / "state"
    cmd = tune_apply_command(t, state)
    procs = [subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in "ab"]
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    ok = [r for r in results if r[0] == 0]
    refused = [r for r in results if r[0] != 0]
    assert len(ok) == 1 and len(refused) == 1, results
    code, err = refused[0]
    assert code == 2 and ("another `edge-runtime tune`" in err or "already applied" in err), err
    proc = cli("tune", "reset", "--sysroot", t, "--state-dir", state)
    assert proc.returncode == 0, proc.stderr
    assert snapshot(t) == before
    leftovers = [p.name for p in state.iterdir() if not p.name.endswith(".restored") and ".restored" not in p.name]
    assert leftovers == [], leftovers  # no orphaned save file, no pointer left


def test_values_with_newlines_and_tabs_survive_the_save_file(tmp_path):
    t = x86_tree(tmp_path)
    odd = {
        "proc/irq/8/smp_affinity_list": b"0-3\n\n",  # two trailing newlines
        "proc/irq/9/smp_affinity_list": b"0-1\n2-3\n",  # a newline inside
        "proc/irq/1/smp_affinity_list": b"0-3\tx",  # a tab, no newline
        "sys/devices/virtual/workqueue/cpumask": b"f",  # no newline at all
    }
    for rel, raw in odd.items():
        (t / rel).write_bytes(raw)
    before = snapshot(t)
    state = tmp_path / "state"
    assert cli("tune", "apply", "--cpus", "2-3", "--sysroot", t, "--state-dir", state).returncode == 0
    assert (t / "proc/irq/8/smp_affinity_list").read_bytes() == b"0-1\n"
    assert cli("tune", "reset", "--sysroot", t, "--state-dir", state).returncode == 0
    assert snapshot(t) == before


def test_a_save_line_that_cannot_be_restored_fails_the_reset_and_names_it(tmp_path):
    t = x86_tree(tmp_path)
    state = tmp_path / "state"
    assert cli("tune", "apply", "--cpus", "2-3", "--sysroot", t, "--state-dir", state).returncode == 0
    save = next(state.glob("tuning-*.save"))
    lines = save.read_text().splitlines()
    lines.insert(3, "frobnicate\t/proc/irq/8/smp_affinity_list\t1\t0-3")
    lines.insert(5, "value\t/proc/irq/9/smp_affinity_list\tyes\t0-3")
    save.write_text("\n".join(lines) + "\n")
    proc = cli("tune", "reset", "--sysroot", t, "--state-dir", state)
    assert_one_line_error(proc, "could not restore save line(s) 6 4", "unknown kind 'frobnicate'", code=1)
    assert save.exists()  # kept for another reset once fixed
    script = subprocess.run(
        ["sh", str(ROOT / "system_tuning/irq_affinity.sh"), "--restore", str(save), "--root", str(t)],
        capture_output=True,
        text=True,
    )
    assert script.returncode == 1 and "save line 4: unknown kind 'frobnicate'" in script.stdout


def test_tune_show_refuses_cpus_the_tree_lacks(tmp_path):
    root = four_cpu_tree(tmp_path)
    proc = cli("tune", "show", "--sysroot", root, "--cpus", "99")
    assert_one_line_error(proc, "CPU 99 does not exist", "online: 0-3")


def test_tune_show_without_scaling_min_freq_is_not_ok(tmp_path):
    root = four_cpu_tree(tmp_path)
    for c in range(4):
        d = root / f"sys/devices/system/cpu/cpu{c}/cpufreq"
        d.mkdir(parents=True)
        (d / "scaling_governor").write_text("ondemand\n")
        (d / "cpuinfo_min_freq").write_text("600000\n")
        (d / "cpuinfo_max_freq").write_text("1800000\n")
        (d / "scaling_max_freq").write_text("1800000\n")
    doc = strict_json(cli("tune", "show", "--sysroot", root, "--cpus", "3", "--json").stdout)
    rng = next(c for c in doc["checks"] if c["knob"] == "frequency range")
    assert rng["status"] == "warn" and rng["seen"] == "CPU3 ondemand 600-1800 MHz"


@pytest.mark.parametrize("pointer", ["fifo", "zero", "dir", "latin1", "nul", "two-lines"])
def test_a_garbled_state_pointer_is_one_line(tmp_path, pointer):
    t = x86_tree(tmp_path)
    state = tmp_path / "state"
    state.mkdir()
    latest = state / f"latest-{state_key(t)}"
    if pointer == "fifo":
        os.mkfifo(latest)
    elif pointer == "zero":
        latest.symlink_to("/dev/zero")
    elif pointer == "dir":
        latest.mkdir()
    else:
        latest.write_bytes(
            {"latin1": b"/tmp/\xe9t\xe9.save\n", "nul": b"/tmp/a\0b\n", "two-lines": b"/a\n/b\n"}[pointer]
        )
    for action in ("apply", "reset"):
        args = ["tune", action, "--sysroot", t, "--state-dir", state] + (["--cpus", "1"] if action == "apply" else [])
        proc = cli(*args, timeout=30)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "Traceback" not in proc.stderr


def test_save_lines_that_leave_the_root_or_make_no_sense_are_named(tmp_path):
    t = x86_tree(tmp_path)
    outside = tmp_path / "evil_outside"
    state = tmp_path / "state"
    assert cli("tune", "apply", "--cpus", "2-3", "--sysroot", t, "--state-dir", state).returncode == 0
    save = next(state.glob("tuning-*.save"))
    lines = save.read_text().splitlines()
    rel = os.path.relpath(outside, t)
    lines[1:1] = [
        f"value\t/{rel}\t1\tpwned",
        "affinity\tnotapid\tgarbage",
        "absent\t",
        "value\t/proc/irq/8/../../../x\t1\ty",
    ]
    save.write_text("\n".join(lines) + "\n")
    proc = cli("tune", "reset", "--sysroot", t, "--state-dir", state)
    assert proc.returncode == 1, proc.stderr
    assert "could not restore save line(s) 5 4 3 2" in proc.stderr
    assert not outside.exists()


def test_a_second_apply_through_another_state_dir_is_refused(tmp_path):
    t = x86_tree(tmp_path)
    before = snapshot(t)
    assert cli("tune", "apply", "--cpus", "1", "--sysroot", t, "--state-dir", tmp_path / "st0").returncode == 0
    proc = cli("tune", "apply", "--cpus", "2", "--sysroot", t, "--state-dir", tmp_path / "st2")
    assert_one_line_error(proc, "already applied", str(tmp_path / "st0"))
    proc = cli("tune", "reset", "--sysroot", t, "--state-dir", tmp_path / "st2")
    assert_one_line_error(proc, f"--state-dir {tmp_path / 'st0'}")
    link = tmp_path / "alias"
    link.symlink_to(t)
    proc = cli("tune", "reset", "--sysroot", f"{link}/.", "--state-dir", tmp_path / "st0")  # another spelling
    assert proc.returncode == 0, proc.stderr
    assert snapshot(t) == before


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["show", "--governor", "x"], "--governor does not apply here"),
        (["show", "--dry-run"], "--dry-run does not apply here"),
        (["reset", "--cpus", "1"], "--cpus does not apply here"),
        (["reset", "--governor", "performance"], "--governor does not apply here"),
        (["apply", "--cpus", "1", "--governor", "perf\nx"], "not a cpufreq governor name"),
    ],
)
def test_tune_flags_that_do_not_apply_are_refused(tmp_path, args, needle):
    t = x86_tree(tmp_path)
    assert_one_line_error(cli("tune", *args, "--sysroot", t), needle)


def test_a_dry_run_checks_the_state_dir_too(tmp_path):
    t = x86_tree(tmp_path)
    fifo = make_fifo(tmp_path, "state")
    proc = cli("tune", "apply", "--cpus", "1", "--dry-run", "--sysroot", t, "--state-dir", fifo)
    assert_one_line_error(proc, "--state-dir", "is a fifo")


def test_an_empty_tree_is_unknown_not_untuned(tmp_path):
    need("onnxruntime")
    root = four_cpu_tree(tmp_path)
    text = cli("bench", MODEL, "--sysroot", root, "--iterations", "100", "--cpus", "1").stdout
    assert f"isolation unknown: no /proc/cmdline in {root}" in text and "not isolated" not in text
    assert f"no thermal sensors in the tree {root}" in text
    assert (
        "thermal limit 70 C not checked"
        in cli("bench", MODEL, "--thermal-limit", "70", "--sysroot", root, "--iterations", "100").stdout
    )


def test_a_failed_or_interrupted_apply_never_leaves_the_tree_stuck(tmp_path):
    t = x86_tree(tmp_path)
    before = snapshot(t)
    state = tmp_path / "state"
    proc = cli(
        "tune",
        "apply",
        "--cpus",
        "1",
        "--sysroot",
        t,
        "--state-dir",
        state,
        env={**os.environ, "EDGE_RUNTIME_SCRIPTS": str(tmp_path / "no-scripts")},  # not /nonexistent: a HOME made it
    )
    assert_one_line_error(proc, f"EDGE_RUNTIME_SCRIPTS '{tmp_path / 'no-scripts'}': no such file")
    # A script that is slow to start, and a SIGTERM before it changed anything.
    scripts = tmp_path / "scripts"
    shutil.copytree(ROOT / "system_tuning", scripts)
    started = tmp_path / "started"
    slow_start = f'er_parse "$@"\n: > "{started}"\nsleep 30'
    body = (scripts / "isolate_cpus.sh").read_text().replace('er_parse "$@"', slow_start)
    (scripts / "isolate_cpus.sh").write_text(body)
    slow = subprocess.Popen(
        tune_apply_command(t, state),
        cwd=ROOT,
        env={**os.environ, "EDGE_RUNTIME_SCRIPTS": str(scripts)},
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not started.exists():  # the script is running, before it changed anything
        assert time.monotonic() < deadline and slow.poll() is None, "the tune script never started"
        time.sleep(0.05)
    slow.send_signal(signal.SIGTERM)
    _, err = slow.communicate(timeout=60)
    assert slow.returncode == 143, err
    assert snapshot(t) == before
    proc = cli("tune", "apply", "--cpus", "1", "--sysroot", t, "--state-dir", state)  # not "already applied"
    assert proc.returncode == 0, proc.stderr
    assert cli("tune", "reset", "--sysroot", t, "--state-dir", state).returncode == 0
    assert snapshot(t) == before


def test_one_tree_through_a_bind_mount_is_one_root(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to bind-mount")
    t = x86_tree(tmp_path)
    alias = tmp_path / "alias"
    alias.mkdir()
    if subprocess.run(["mount", "--bind", str(t), str(alias)], capture_output=True).returncode:
        pytest.skip("cannot bind-mount here")
    try:
        assert cli("tune", "apply", "--cpus", "1", "--sysroot", t, "--state-dir", tmp_path / "a").returncode == 0
        proc = cli("tune", "apply", "--cpus", "1", "--sysroot", alias, "--state-dir", tmp_path / "b")
        assert_one_line_error(proc, "already applied")
        assert cli("tune", "reset", "--sysroot", t, "--state-dir", tmp_path / "a").returncode == 0
    finally:
        subprocess.run(["umount", str(alias)])


def test_tune_show_on_a_tree_with_nothing_to_read_is_not_tuned(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = cli("tune", "show", "--sysroot", empty, "--cpus", "1", "--json")
    assert proc.returncode == 1 and strict_json(proc.stdout)["tuned"] is None
    assert "unknown: none of the knobs could be read" in cli("tune", "show", "--sysroot", empty, "--cpus", "1").stdout
