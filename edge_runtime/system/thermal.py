"""Thermal and power readings through the one system root: thermal zones with trip points and cooling devices,
hwmon temperatures and power rails, cpufreq caps, Raspberry Pi throttle flags and Jetson tegrastats lines.

Millidegrees become degrees in exactly one function (`millidegrees`). A sensor that is missing or garbled is
skipped and counted in `Snapshot.skipped`, never fatal: boards ship half-working drivers.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field

from edge_runtime.system.cpulist import ascii_int, is_number
from edge_runtime.system.firmware import TegraStats, decode_throttled, parse_tegrastats, parse_throttled
from edge_runtime.system.root import SystemRoot

# What a silicon temperature sensor can report. CMOS on-die sensors span about -55 to +150 C (automotive parts to
# 175 C); a board in a freezer reads -40. A value outside this range is not a temperature but a garbled reading: a
# driver's error code (THERMAL_TEMP_INVALID is -274000), an unset register (2147483647 m°C), a unit mistake. Such a
# reading is skipped and counted like an unreadable one, never believed (a 10^21 C "reading" must not abort a run).
SILICON_RANGE_C = (-80.0, 200.0)
# The lowest trip point or crit believed as a limit: a board idles at 30-50 C.
MIN_LIMIT_C = 30.0
# cpufreq drivers whose scaling_cur_freq is a sampled average, not the clock set (see _cpufreq).
AVERAGING_DRIVERS = frozenset({"intel_pstate", "intel_cpufreq", "acpi-cpufreq", "amd-pstate", "amd-pstate-epp"})
# A board's power rail: tens of watts at most (a Jetson AGX Orin draws 60 W); beyond 10 kW a reading is garbled.
MAX_RAIL_W = 10_000.0


def millidegrees(text: str | None) -> float | None:
    """sysfs millidegrees Celsius ("45123") -> degrees (45.123); None when missing, not a number, or outside what
    silicon can report (SILICON_RANGE_C)."""
    if text is None:
        return None
    try:
        value = ascii_int(text) / 1000.0
    except (ValueError, OverflowError):
        return None
    lo, hi = SILICON_RANGE_C
    return value if lo <= value <= hi else None


def _int(text: str | None) -> int | None:
    try:
        return ascii_int(text) if text is not None else None
    except ValueError:
        return None


@dataclass(frozen=True)
class Trip:
    index: int
    type: str  # passive | active | hot | critical
    temp_c: float
    hysteresis_c: float | None = None


@dataclass(frozen=True)
class Cooling:
    name: str
    type: str
    cur_state: int | None
    max_state: int | None


@dataclass(frozen=True)
class Zone:
    name: str  # thermal_zoneN
    type: str  # cpu-thermal, x86_pkg_temp, ...
    temp_c: float | None
    policy: str | None
    trips: tuple[Trip, ...] = ()
    cooling: tuple[Cooling, ...] = ()


@dataclass(frozen=True)
class HwmonTemp:
    chip: str
    label: str
    temp_c: float
    crit_c: float | None = None
    max_c: float | None = None


@dataclass(frozen=True)
class CpuFreq:
    cpu: int
    cur_khz: int | None
    max_khz: int | None  # hardware maximum (cpuinfo_max_freq)
    scaling_max_khz: int | None
    scaling_min_khz: int | None = None

    @property
    def held_down(self) -> bool:
        """Running below the minimum the governor asked for: only hardware or firmware throttling does that."""
        return bool(self.cur_khz and self.scaling_min_khz and self.cur_khz < self.scaling_min_khz * 0.98)

    @property
    def capped(self) -> bool:
        """A scaling maximum below the hardware maximum: something (thermal, power, a user) holds the clock down."""
        return bool(self.max_khz and self.scaling_max_khz and self.scaling_max_khz < self.max_khz)


@dataclass(frozen=True)
class Rail:
    source: str  # "hwmon:ina3221" | "tegrastats"
    label: str
    power_w: float
    voltage_v: float | None = None
    current_a: float | None = None


@dataclass
class Snapshot:
    t_s: float
    zones: list[Zone] = field(default_factory=list)
    hwmon: list[HwmonTemp] = field(default_factory=list)
    cpufreq: list[CpuFreq] = field(default_factory=list)
    rails: list[Rail] = field(default_factory=list)
    throttled: dict | None = None  # decoded Raspberry Pi flags
    throttle_counts: dict[str, int] = field(default_factory=dict)  # x86 thermal_throttle counters, summed
    cooling: list[Cooling] = field(default_factory=list)  # every cooling device, bound to a zone or not
    skipped: int = 0

    @property
    def available(self) -> bool:
        return any(z.temp_c is not None for z in self.zones) or bool(self.hwmon)

    def temperatures(self) -> dict[str, float]:
        out = {z.type: z.temp_c for z in self.zones if z.temp_c is not None}
        for h in self.hwmon:
            out.setdefault(f"{h.chip}/{h.label}", h.temp_c)
        return out

    def max_c(self) -> float | None:
        temps = self.temperatures()
        return max(temps.values()) if temps else None

    def to_dict(self) -> dict:
        return asdict(self)


def _zones(root: SystemRoot, snap: Snapshot) -> None:
    base = root.path("/sys/class/thermal")
    try:
        names = sorted(
            (p.name for p in base.iterdir() if p.name.startswith("thermal_zone")),
            key=lambda n: int(n[12:]) if is_number(n[12:]) else 0,
        )
    except OSError:
        return
    for name in names:
        d = f"/sys/class/thermal/{name}"
        ztype = root.read(f"{d}/type", name) or name
        raw = root.read(f"{d}/temp")
        temp = millidegrees(raw)
        if raw is not None and temp is None:
            snap.skipped += 1  # garbled reading
        elif raw is None:
            snap.skipped += 1  # zone without a readable temperature (disabled or driver error)
        trips = []
        k = 0
        while True:
            t = root.read(f"{d}/trip_point_{k}_temp")
            if t is None:
                break
            tc = millidegrees(t)
            if tc is None:
                snap.skipped += 1
            else:
                trips.append(
                    Trip(
                        k,
                        root.read(f"{d}/trip_point_{k}_type", "?") or "?",
                        tc,
                        millidegrees(root.read(f"{d}/trip_point_{k}_hyst")),
                    )
                )
            k += 1
        cooling = []
        for cdev in sorted(root.path(d).glob("cdev[0-9]*")):
            if not cdev.is_dir():
                continue
            c = _cooling(root, f"{d}/{cdev.name}", snap)
            if c is not None:
                cooling.append(c)
        snap.zones.append(Zone(name, ztype, temp, root.read(f"{d}/policy"), tuple(trips), tuple(cooling)))
    # Every cooling device, bound to a zone or not: intel_powerclamp and ACPI processor throttling usually are not.
    try:
        devices = sorted(p.name for p in base.iterdir() if p.name.startswith("cooling_device"))
    except OSError:
        devices = []
    for name in devices:
        c = _cooling(root, f"/sys/class/thermal/{name}", snap)
        if c is not None:
            snap.cooling.append(c)


def _cooling(root: SystemRoot, rel: str, snap: Snapshot) -> Cooling | None:
    """One cooling device; named after the device it is (cooling_deviceN), also when reached through a zone's link.
    cur_state -1 (intel_powerclamp idle) is off; a state above the maximum is garbled: skipped and counted."""
    real = os.path.basename(os.path.realpath(root.path(rel)))
    name = real if real.startswith("cooling_device") else rel.rsplit("/", 1)[-1]
    cur, top = _int(root.read(f"{rel}/cur_state")), _int(root.read(f"{rel}/max_state"))
    if cur is not None and cur < 0:
        cur = 0
    if cur is not None and (top is None or top < 0 or cur > top):
        snap.skipped += 1
        cur = None
    return Cooling(name, root.read(f"{rel}/type", "?") or "?", cur, top)


def _hwmon(root: SystemRoot, snap: Snapshot) -> None:
    base = root.path("/sys/class/hwmon")
    try:
        chips = sorted(p.name for p in base.iterdir() if p.name.startswith("hwmon"))
    except OSError:
        return
    for chip in chips:
        d = f"/sys/class/hwmon/{chip}"
        name = root.read(f"{d}/name", chip) or chip
        files = {p.name for p in root.path(d).iterdir()} if root.path(d).is_dir() else set()
        for f in sorted(files):
            m = re.fullmatch(r"temp(\d+)_input", f)
            if m:
                i = m.group(1)
                t = millidegrees(root.read(f"{d}/{f}"))
                if t is None:
                    snap.skipped += 1
                    continue
                snap.hwmon.append(
                    HwmonTemp(
                        name,
                        root.read(f"{d}/temp{i}_label", f"temp{i}") or f"temp{i}",
                        t,
                        millidegrees(root.read(f"{d}/temp{i}_crit")),
                        millidegrees(root.read(f"{d}/temp{i}_max")),
                    )
                )
        # Power: power*_input in microwatts; else a voltage (mV) and current (mA) with the same index (INA3221).
        for f in sorted(files):
            m = re.fullmatch(r"power(\d+)_input", f)
            if m:
                uw = _int(root.read(f"{d}/{f}"))
                if uw is None or not 0 <= uw / 1e6 <= MAX_RAIL_W:
                    snap.skipped += 1  # missing, or a power no board rail draws: garbled
                    continue
                label = root.read(f"{d}/power{m.group(1)}_label", f"power{m.group(1)}") or f"power{m.group(1)}"
                snap.rails.append(Rail(f"hwmon:{name}", label, uw / 1e6))
        for f in sorted(files):
            m = re.fullmatch(r"curr(\d+)_input", f)
            if not m or f"power{m.group(1)}_input" in files:
                continue
            i = m.group(1)
            ma, mv = _int(root.read(f"{d}/{f}")), _int(root.read(f"{d}/in{i}_input"))
            if ma is None or mv is None or mv < 0 or not 0 <= mv * ma / 1e6 <= MAX_RAIL_W:
                snap.skipped += 1
                continue
            label = root.read(f"{d}/in{i}_label") or root.read(f"{d}/curr{i}_label") or f"rail{i}"
            snap.rails.append(Rail(f"hwmon:{name}", label, mv * ma / 1e6, mv / 1000.0, ma / 1000.0))


# A CPU clock: above 0 and below 20 GHz; anything else is garbled (a driver's -1, an unset 2^64-1).
MAX_KHZ = 20_000_000


def _khz(root: SystemRoot, rel: str, snap: Snapshot) -> int | None:
    value = _int(root.read(rel))
    if value is not None and not 0 < value <= MAX_KHZ:
        snap.skipped += 1
        return None
    return value


def _cpufreq(root: SystemRoot, snap: Snapshot, cpus: list[int] | None) -> None:
    for cpu in cpus if cpus is not None else root.online_cpus():
        d = f"/sys/devices/system/cpu/cpu{cpu}/cpufreq"
        cur = _khz(root, f"{d}/scaling_cur_freq", snap) or _khz(root, f"{d}/cpuinfo_cur_freq", snap)
        hw_max = _khz(root, f"{d}/cpuinfo_max_freq", snap)
        smax = _khz(root, f"{d}/scaling_max_freq", snap)
        if cur is None and hw_max is None and smax is None:
            continue
        # x86 drivers report an average of the last tick (APERF/MPERF), which reads below the minimum on an idle CPU:
        # their minimum says nothing about throttling. Elsewhere the reading is the clock the hardware runs at.
        driver = root.read(f"{d}/scaling_driver") or ""
        smin = None if driver in AVERAGING_DRIVERS else _khz(root, f"{d}/scaling_min_freq", snap)
        snap.cpufreq.append(CpuFreq(cpu, cur, hw_max, smax, smin))
        for kind in ("core", "package"):
            n = _int(root.read(f"/sys/devices/system/cpu/cpu{cpu}/thermal_throttle/{kind}_throttle_count"))
            if n is not None:
                snap.throttle_counts[kind] = snap.throttle_counts.get(kind, 0) + n


def _rpi_throttled(root: SystemRoot, snap: Snapshot) -> None:
    raw = root.read("/sys/devices/platform/soc/soc:firmware/get_throttled")
    value = parse_throttled(raw) if raw is not None else None
    if value is None and root.is_live and shutil.which("vcgencmd"):
        try:
            out = subprocess.run(["vcgencmd", "get_throttled"], capture_output=True, text=True, timeout=2).stdout
            value = parse_throttled(out)
        except (OSError, subprocess.TimeoutExpired):
            value = None
    if value is not None:
        snap.throttled = decode_throttled(value)


def read_snapshot(root: SystemRoot, cpus: list[int] | None = None, tegra: TegraStats | None = None) -> Snapshot:
    snap = Snapshot(time.monotonic())
    _zones(root, snap)
    _hwmon(root, snap)
    _cpufreq(root, snap, cpus)
    _rpi_throttled(root, snap)
    if tegra is not None and tegra.last:
        parsed = parse_tegrastats(tegra.last)
        for name, c in parsed["temps_c"].items():
            snap.hwmon.append(HwmonTemp("tegrastats", name, c))
        for name, r in parsed["rails"].items():
            snap.rails.append(Rail("tegrastats", name, r["now_w"]))
    return snap


def pick_rail(rails: list[Rail]) -> Rail | None:
    """The board's input rail when it is there (VDD_IN / VIN_*: the whole board), else the first one."""
    for pattern in ("VDD_IN", "VIN_", "IN", "TOTAL"):
        for r in rails:
            if r.label.upper().startswith(pattern) or r.label.upper() == pattern:
                return r
    return rails[0] if rails else None


def thermal_limit(explicit: float | None, board, snap: Snapshot) -> tuple[float | None, str]:
    """--thermal-limit, else the board profile's limit, else the lowest passive or critical trip point."""
    if explicit is not None:
        return explicit, "--thermal-limit"
    if board is not None and board.thermal.limit_c is not None:
        return board.thermal.limit_c, f"board profile {board.name}"
    # A trip point or crit below room temperature is a placeholder or garbled (a trip at 1 m°C, a crit of -40 C):
    # taken as the limit it would refuse every run.
    trips = [
        t.temp_c for z in snap.zones for t in z.trips if t.type in ("passive", "critical") and t.temp_c >= MIN_LIMIT_C
    ]
    if trips:
        return min(trips), "lowest passive/critical trip point"
    crits = [h.crit_c for h in snap.hwmon if h.crit_c is not None and h.crit_c >= MIN_LIMIT_C]
    if crits:
        return min(crits), "lowest hwmon crit"
    return None, "none known"


def throttle_reasons(snap: Snapshot, base: Snapshot | None = None, cpus: list[int] | None = None) -> list[str]:
    """Why this snapshot looks throttled (compared with `base` for counters)."""
    why = []
    for f in snap.cpufreq:
        if f.capped and (cpus is None or f.cpu in cpus):
            why.append(f"CPU{f.cpu} capped at {f.scaling_max_khz // 1000} of {f.max_khz // 1000} MHz")
        elif f.held_down and (cpus is None or f.cpu in cpus):
            why.append(
                f"CPU{f.cpu} at {f.cur_khz // 1000} MHz, below its minimum of {f.scaling_min_khz // 1000} MHz "
                "(held down by hardware or firmware)"
            )
    if snap.throttled and snap.throttled["throttled_now"]:
        why.append("firmware: " + ", ".join(snap.throttled["now"]))
    if base is not None:
        for kind, n in snap.throttle_counts.items():
            if n > base.throttle_counts.get(kind, n):
                why.append(f"{kind} thermal throttle count +{n - base.throttle_counts[kind]}")
    bound = set()
    for z in snap.zones:
        for c in z.cooling:
            bound.add(c.name)
            if throttles_compute(c.type) and c.cur_state and c.cur_state > 0:
                why.append(f"{z.type}: cooling {c.type} at state {c.cur_state}/{c.max_state}")
    for c in snap.cooling:
        if c.name not in bound and throttles_compute(c.type) and c.cur_state and c.cur_state > 0:
            why.append(f"cooling device {c.type} ({c.name}) at state {c.cur_state}/{c.max_state}")
    return why


# Cooling devices that slow the processor down (a fan does not): the kernel names them in drivers/thermal/
# cpufreq_cooling.c ("thermal-cpufreq-%d"), devfreq_cooling.c ("thermal-devfreq-%d": GPU/NPU clocks),
# cpuidle_cooling.c ("thermal-idle-%d"); older kernels "cpufreq-cpu%d"; ACPI processor throttling "Processor";
# intel_powerclamp (idle injection); Intel's "TCC Offset" (int340x: lowers the temperature at which the CPU
# throttles). Documentation/driver-api/thermal/sysfs-api.rst: cur_state 0 means no cooling.
_THROTTLING_COOLING = re.compile(
    r"cpufreq|devfreq|thermal-idle|cpuidle|^processor$|powerclamp|^tcc offset$", re.IGNORECASE
)


def throttles_compute(cooling_type: str) -> bool:
    """Whether a cooling device of this type acts by slowing the CPU, GPU or NPU (not a fan)."""
    return bool(_THROTTLING_COOLING.search(cooling_type.strip()))
