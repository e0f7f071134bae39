"""`edge-runtime tune show`: how well CPUs are set apart, read through the system root. Each knob is a small function
returning `Check`s (what was seen, ok / fail / warn / n/a, and what to run), in a table with its order explained,
in the spirit of pyperf's `system show`. Nothing here writes: the system_tuning scripts do (see tuning.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from edge_runtime.system.cpulist import format_cpu_list, is_number, parse_cpu_list, parse_cpu_mask
from edge_runtime.system.root import SystemRoot


@dataclass(frozen=True)
class Check:
    knob: str
    status: str  # "ok" | "fail" (not tuned: exit 1) | "warn" (worth knowing) | "n/a" (knob not on this system)
    seen: str
    advice: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def _cpus_of_mask(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return parse_cpu_mask(text)
    except ValueError:
        return None


def _mask_check(knob: str, mask_text: str | None, want: set[int], seen: str, fix: str) -> Check:
    """A knob that is a CPU mask: fails when it reaches any CPU of `want`."""
    mask = _cpus_of_mask(mask_text)
    if mask is None:
        return Check(knob, "n/a", f"no {knob} knob here")
    hit = set(mask) & want
    return Check(knob, "fail" if hit else "ok", f"{seen} {format_cpu_list(mask)}", fix if hit else "")


def _kernel_cmdline(root: SystemRoot, cpus: list[int]) -> list[Check]:
    """Boot arguments: isolcpus, nohz_full and rcu_nocbs (kernel-parameters.txt) cover the CPUs."""
    L = format_cpu_list(cpus)
    want = set(cpus)
    checks: list[Check] = []
    iso = root.isolation()
    missing = {k: sorted(want - set(iso.get(k, []))) for k in ("isolcpus", "nohz_full", "rcu_nocbs")}
    if root.read("/proc/cmdline") is None:
        checks.append(Check("kernel command line", "warn", "unknown: no /proc/cmdline to read"))
    elif iso.get("garbled"):
        bad = "; ".join(f"{k}={v!r} is not a CPU list" for k, v in iso["garbled"].items())
        checks.append(
            Check(
                "kernel command line",
                "fail",
                bad,
                f"fix the boot arguments; `kernel_cmdline.sh --cpus {L}` prints them",
            )
        )
    elif not any(missing.values()):
        checks.append(Check("kernel command line", "ok", f"isolcpus, nohz_full and rcu_nocbs cover CPU {L}"))
    else:
        gaps = "; ".join(f"{k} lacks {format_cpu_list(v)}" for k, v in missing.items() if v)
        checks.append(
            Check(
                "kernel command line",
                "fail",
                gaps,
                f"boot with the arguments `system_tuning/kernel_cmdline.sh --cpus {L}` prints",
            )
        )

    return checks


def _irq_affinity(root: SystemRoot, cpus: list[int]) -> list[Check]:
    """Movable IRQs kept off the CPUs; per-CPU (managed) ones named, since nothing moves them."""
    L = format_cpu_list(cpus)
    want = set(cpus)
    checks: list[Check] = []
    affinities = root.irq_affinities()
    if not affinities:
        checks.append(Check("IRQ affinity", "n/a", "no /proc/irq here"))
    else:
        movable = sorted((irq for irq, aff in affinities.items() if set(aff) & want and not set(aff) <= want), key=int)
        bound = sorted((irq for irq, aff in affinities.items() if aff and set(aff) <= want), key=int)
        if movable:
            shown = ", ".join(movable[:10]) + (" ..." if len(movable) > 10 else "")
            checks.append(
                Check(
                    "IRQ affinity",
                    "fail",
                    f"{len(movable)} IRQ(s) may land on CPU {L} ({shown})",
                    f"system_tuning/irq_affinity.sh --cpus {L}",
                )
            )
        else:
            checks.append(Check("IRQ affinity", "ok", f"no movable IRQ may land on CPU {L}"))
        if bound:
            checks.append(
                Check(
                    "per-CPU IRQs",
                    "warn",
                    f"IRQ {', '.join(bound)} bound to CPU {L} only",
                    "per-CPU or managed interrupts cannot be moved; isolcpus=managed_irq keeps new managed ones off",
                )
            )
    return checks


def _default_irq_affinity(root: SystemRoot, cpus: list[int]) -> list[Check]:
    """Where the kernel puts IRQs that are registered later (/proc/irq/default_smp_affinity)."""
    L = format_cpu_list(cpus)
    want = set(cpus)
    checks: list[Check] = []
    default = _mask_check(
        "default IRQ affinity",
        root.read("/proc/irq/default_smp_affinity"),
        want,
        "new IRQs may go to CPU",
        f"system_tuning/irq_affinity.sh --cpus {L}",
    )
    if default.status != "n/a":
        checks.append(default)

    return checks


def _irqbalance(root: SystemRoot, cpus: list[int]) -> list[Check]:
    """irqbalance would move IRQs back unless it is banned from the CPUs."""
    L = format_cpu_list(cpus)
    want = set(cpus)
    checks: list[Check] = []
    running = False
    try:
        procs = any(True for _ in root.path("/proc").glob("[0-9]*"))
    except OSError:
        procs = False
    try:
        for comm in root.path("/proc").glob("[0-9]*/comm"):
            if (root.read(str(comm.relative_to(root.root))) or "") == "irqbalance":
                running = True
                break
    except OSError:
        pass
    banned = None
    for conf in ("/etc/default/irqbalance", "/etc/sysconfig/irqbalance"):
        for line in (root.read(conf, "") or "").splitlines():
            if line.startswith("IRQBALANCE_BANNED_CPULIST="):
                try:
                    banned = parse_cpu_list(line.split("=", 1)[1].strip().strip('"'))
                except ValueError:
                    banned = []
    if not running and not procs:
        checks.append(Check("irqbalance", "warn", "unknown: no process list to look in (a captured tree)"))
    elif not running:
        checks.append(Check("irqbalance", "ok", "not running"))
    elif banned is not None and want <= set(banned):
        checks.append(Check("irqbalance", "ok", f"running, banned from CPU {format_cpu_list(banned)}"))
    else:
        checks.append(
            Check(
                "irqbalance",
                "fail",
                "running and free to move IRQs onto CPU " + L,
                f"system_tuning/irq_affinity.sh --cpus {L} sets IRQBALANCE_BANNED_CPULIST; then restart irqbalance",
            )
        )

    return checks


def _cpufreq(root: SystemRoot, cpus: list[int]) -> list[Check]:
    """The governor, and whether the clock can still move between its minimum and maximum."""
    L = format_cpu_list(cpus)
    checks: list[Check] = []
    govs = {c: root.read(f"/sys/devices/system/cpu/cpu{c}/cpufreq/scaling_governor") for c in cpus}
    govs = {c: g for c, g in govs.items() if g}
    if not govs:
        checks.append(Check("cpufreq governor", "n/a", "no cpufreq for these CPUs"))
    else:
        slow = {c: g for c, g in govs.items() if g != "performance"}
        seen = ", ".join(f"CPU{c} {g}" for c, g in govs.items())
        checks.append(
            Check(
                "cpufreq governor",
                "fail" if slow else "ok",
                seen,
                f"system_tuning/cpufreq.sh --cpus {L} --governor performance" if slow else "",
            )
        )
        low, unknown = [], []
        for c, gov in govs.items():
            d = f"/sys/devices/system/cpu/cpu{c}/cpufreq"
            top = root.read(f"{d}/scaling_max_freq") or root.read(f"{d}/cpuinfo_max_freq")
            # Without scaling_min_freq the floor is the hardware minimum: the clock moves unless the governor pins it.
            floor = root.read(f"{d}/scaling_min_freq") or (
                root.read(f"{d}/cpuinfo_min_freq") if gov not in ("performance", "powersave") else None
            )
            if not (top and is_number(top)) or not (floor and is_number(floor)):
                if gov not in ("performance", "powersave"):
                    unknown.append(f"CPU{c} {gov}")
                continue
            if int(floor) < int(top):
                low.append(f"CPU{c} {gov} {int(floor) // 1000}-{int(top) // 1000} MHz")
        if low:
            checks.append(
                Check(
                    "frequency range",
                    "warn",
                    ", ".join(low),
                    f"system_tuning/cpufreq.sh --cpus {L} raises the minimum",
                )
            )
        elif unknown:
            checks.append(
                Check(
                    "frequency range",
                    "warn",
                    f"{', '.join(unknown)}: no minimum or maximum frequency readable, so the range is unknown",
                    f"system_tuning/cpufreq.sh --cpus {L} --governor performance",
                )
            )
        else:
            checks.append(Check("frequency range", "ok", "minimum = maximum: the clock cannot move"))

    return checks


def _turbo_boost(root: SystemRoot, cpus: list[int]) -> list[Check]:
    """Turbo/boost makes the clock depend on temperature and on the other cores' load."""
    L = format_cpu_list(cpus)
    checks: list[Check] = []
    no_turbo = root.read("/sys/devices/system/cpu/intel_pstate/no_turbo")
    boost = root.read("/sys/devices/system/cpu/cpufreq/boost")
    if no_turbo is None and boost is None:
        checks.append(Check("turbo/boost", "n/a", "no turbo or boost knob"))
    else:
        on = no_turbo == "0" or boost == "1"
        seen = f"intel_pstate/no_turbo={no_turbo}" if no_turbo is not None else f"cpufreq/boost={boost}"
        checks.append(
            Check(
                "turbo/boost",
                "fail" if on else "ok",
                seen,
                f"system_tuning/cpufreq.sh --cpus {L} turns it off" if on else "",
            )
        )

    return checks


def _rt_throttling(root: SystemRoot, cpus: list[int]) -> list[Check]:
    """The RT bandwidth limit SCHED_FIFO runs under (sched_rt_runtime_us)."""
    checks: list[Check] = []
    rt = root.read("/proc/sys/kernel/sched_rt_runtime_us")
    period = root.read("/proc/sys/kernel/sched_rt_period_us") or "1000000"
    if rt is None:
        checks.append(Check("RT throttling", "n/a", "no sched_rt_runtime_us"))
    elif rt.strip() == "-1":
        checks.append(Check("RT throttling", "ok", "off (sched_rt_runtime_us=-1)"))
    elif not is_number(rt.strip().lstrip("-")) or not is_number(period.strip()) or int(period) <= 0:
        checks.append(Check("RT throttling", "n/a", f"unreadable: sched_rt_runtime_us={rt!r}, period={period!r}"))
    else:
        share = int(rt) / int(period)
        checks.append(
            Check(
                "RT throttling",
                "warn",
                f"SCHED_FIFO tasks get at most {share:.0%} of each period",
                "fine for most runs; sysctl kernel.sched_rt_runtime_us=-1 lifts it on a dedicated core",
            )
        )

    return checks


def _workqueues(root: SystemRoot, cpus: list[int]) -> list[Check]:
    """Unbound kernel workqueues kept off the CPUs."""
    L = format_cpu_list(cpus)
    want = set(cpus)
    checks: list[Check] = []
    checks.append(
        _mask_check(
            "workqueues",
            root.read("/sys/devices/virtual/workqueue/cpumask"),
            want,
            "unbound workqueues on CPU",
            f"system_tuning/isolate_cpus.sh --cpus {L}",
        )
    )

    return checks


def _timer_migration(root: SystemRoot, cpus: list[int]) -> list[Check]:
    """kernel.timer_migration=0 keeps timers on the CPU that armed them."""
    L = format_cpu_list(cpus)
    checks: list[Check] = []
    tm = root.read("/proc/sys/kernel/timer_migration")
    if tm is None:
        checks.append(Check("timer migration", "n/a", "no kernel.timer_migration"))
    else:
        checks.append(
            Check(
                "timer migration",
                "fail" if tm.strip() != "0" else "ok",
                f"kernel.timer_migration={tm}",
                f"system_tuning/isolate_cpus.sh --cpus {L}" if tm.strip() != "0" else "",
            )
        )
    return checks


# The knob checks in the order a person fixes them, and the order `tune show` prints them: first what only a reboot
# changes (the boot arguments), then interrupts (the largest source of jitter on an isolated core, and irqbalance
# would undo a fix), then the clock (governor, range, turbo: latency follows frequency), then the kernel knobs a
# sysctl changes at once. Each is a small function returning its Checks (pyperf's `OPERATIONS` shape).
OPERATIONS = (
    _kernel_cmdline,
    _irq_affinity,
    _default_irq_affinity,
    _irqbalance,
    _cpufreq,
    _turbo_boost,
    _rt_throttling,
    _workqueues,
    _timer_migration,
)


def audit(root: SystemRoot, cpus: list[int]) -> list[Check]:
    """One or more Checks per knob for the CPUs meant to be quiet, in OPERATIONS order."""
    return [check for operation in OPERATIONS for check in operation(root, cpus)]
