"""What boards' own firmware and tools say about heat and power: the Raspberry Pi's throttle flags (vcgencmd
get_throttled, or sysfs soc:firmware/get_throttled) and Jetson's tegrastats lines. Pure parsers, tested alone on the
captures in ../shared/fixtures, and the tegrastats reader that runs beside a bench.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading

from edge_runtime.system.process import dies_with_parent

# Raspberry Pi firmware throttle bits (raspberrypi/documentation, "vcgencmd get_throttled").
THROTTLE_BITS = {
    0: "under-voltage detected",
    1: "arm frequency capped",
    2: "currently throttled",
    3: "soft temperature limit active",
    16: "under-voltage has occurred",
    17: "arm frequency capping has occurred",
    18: "throttling has occurred",
    19: "soft temperature limit has occurred",
}


def decode_throttled(value: int) -> dict:
    """All eight documented bits of get_throttled, split into what holds now and what happened since boot."""
    now = [THROTTLE_BITS[b] for b in (0, 1, 2, 3) if value >> b & 1]
    since = [THROTTLE_BITS[b] for b in (16, 17, 18, 19) if value >> b & 1]
    return {"raw": f"0x{value:x}", "now": now, "since_boot": since, "throttled_now": bool(value & 0b1110)}


def parse_throttled(text: str) -> int | None:
    """`throttled=0x50005` (vcgencmd) or `50005` (sysfs soc:firmware/get_throttled, hex without 0x)."""
    text = text.strip()
    if text.startswith("throttled="):
        text = text.split("=", 1)[1]
    text = text.removeprefix("0x").removeprefix("0X")
    if not re.fullmatch(r"[0-9a-fA-F]{1,16}", text):
        return None
    return int(text, 16)


_TEGRA_TEMP = re.compile(r"(\w+)@(-?[\d.]+)C(?:/[-\d.]+C)?")
_TEGRA_RAIL = re.compile(r"\b((?:VDD|VIN)_\w+) (\d+)(?:mW)?/(\d+)(?:mW)?(?:/(\d+)(?:mW)?)?")


def parse_tegrastats(line: str) -> dict:
    """Temperatures (C) and power rails (W, current and average) of one tegrastats line, any JetPack layout."""
    temps = {name: float(v) for name, v in _TEGRA_TEMP.findall(line)}
    rails = {m[0]: {"now_w": int(m[1]) / 1000.0, "avg_w": int(m[2]) / 1000.0} for m in _TEGRA_RAIL.findall(line)}
    return {"temps_c": temps, "rails": rails}


class TegraStats:
    """`tegrastats --interval MS` in the background on a Jetson; `last` is its latest line."""

    def __init__(self, interval_ms: int = 250):
        self.last: str | None = None
        self.proc = None
        if shutil.which("tegrastats"):
            self.proc = subprocess.Popen(
                dies_with_parent(["tegrastats", "--interval", str(interval_ms)]),
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.last = line.strip()

    def close(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                self.proc.kill()
