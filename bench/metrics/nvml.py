"""A local NVIDIA GPU's own figures during a run, through NVML (`nvidia-ml-py`, the `[gpu]` extra): utilisation, memory,
power, temperature, clocks and the reasons the clocks are held down, sampled on a thread every SAMPLE_EVERY_S. Used by
the `local:?device=cuda` (or `tensorrt`) target; without a GPU, `check()` refuses in one line before anything runs.

Energy (issue 24). A GPU draws a lot doing nothing (an H200 about 120 W), so the whole draw divided by the
inferences says more about the idle floor than the model. Before the model loads, `measure_idle` samples the GPU for
IDLE_WINDOW_S (bounded: the loop ends at its time whatever NVML does); `window_summary` then reports the energy of
the measured part both as total (`energy_j`) and above idle (`energy_above_idle_j` = energy - idle power x window),
each per inference and per sample (a batch of N is N samples), and the throughput per second and per joule (total
and above idle). The idle power comes from the energy counter's rise over the window (what the run's energy uses,
so the two subtract cleanly), else the mean of the power readings. An above-idle energy at or under zero (a run too
light to show over the idle noise) gets no per-joule figure and says why. Energy without the counter (GPUs before
Volta) is the mean power over the window times its length, and says so in `energy_source`."""

from __future__ import annotations

import threading
import time

from edge_runtime.errors import UserError

SAMPLE_EVERY_S = 0.25
IDLE_WINDOW_S = 1.0  # idle power sampled this long before the model loads
IDLE_EVERY_S = 0.1
MAX_SAMPLES = 28_800  # two hours at 4 per second
GPU_DEVICES = ("cuda", "tensorrt")
# nvmlClocksEventReasons / nvmlClocksThrottleReasons bits (nvml.h) -> words
THROTTLE = {
    0x1: "gpu idle",
    0x2: "application clocks setting",
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake slowdown",
    0x100: "display clock setting",
}


def _nvml():
    try:
        import pynvml
    except ImportError:
        raise UserError("no NVIDIA GPU metrics: nvidia-ml-py is not installed",
                        hint="pip install 'edge-runtime[gpu]'") from None  # fmt: skip
    return pynvml


def check(index: int = 0):
    """NVML initialised and GPU `index` there; (pynvml, handle). One line otherwise: what is missing."""
    nv = _nvml()
    try:
        nv.nvmlInit()
    except nv.NVMLError as err:
        text = str(err)
        if "LibraryNotFound" in type(err).__name__ or "not found" in text.lower():
            raise UserError("no NVIDIA GPU: NVML library not found (libnvidia-ml.so: no NVIDIA driver here)") from None
        if "DriverNotLoaded" in type(err).__name__ or "driver" in text.lower():
            raise UserError(f"no NVIDIA GPU: the NVIDIA driver is not loaded ({text})") from None
        raise UserError(f"no NVIDIA GPU: NVML did not start ({text})") from None
    count = nv.nvmlDeviceGetCount()
    if count == 0:
        raise UserError("no NVIDIA GPU: NVML found no device")
    if not 0 <= index < count:
        raise UserError(f"GPU {index}: there are {count} (0 to {count - 1})")
    return nv, nv.nvmlDeviceGetHandleByIndex(index)


def _reasons(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE.items() if mask & bit and bit != 0x1]


class GpuSampler:
    def __init__(self, index: int = 0):
        self.nv, self.handle = check(index)
        self.index = index
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0: float | None = None
        self.end_s: float | None = None
        self.idle: dict | None = None

    def identity(self) -> dict:
        nv, h = self.nv, self.handle
        name = nv.nvmlDeviceGetName(h)
        return {"index": self.index, "name": name.decode() if isinstance(name, bytes) else name,
                "driver": _text(nv.nvmlSystemGetDriverVersion()),
                "memory_total_bytes": int(nv.nvmlDeviceGetMemoryInfo(h).total)}  # fmt: skip

    def sample(self, t0: float) -> dict:
        nv, h = self.nv, self.handle
        out: dict = {"t_s": round(time.monotonic() - t0, 3)}
        for key, read in (
            ("utilization_pct", lambda: nv.nvmlDeviceGetUtilizationRates(h).gpu),
            ("memory_utilization_pct", lambda: nv.nvmlDeviceGetUtilizationRates(h).memory),
            ("memory_used_bytes", lambda: int(nv.nvmlDeviceGetMemoryInfo(h).used)),
            ("power_w", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
            ("temperature_c", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
            ("sm_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
            ("memory_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
            ("energy_mj", lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h)),
            ("throttle", lambda: _reasons(nv.nvmlDeviceGetCurrentClocksThrottleReasons(h))),
        ):
            try:
                out[key] = read()
            except Exception:  # noqa: BLE001 - a reading this GPU does not offer is left out (NVML_ERROR_NOT_SUPPORTED)
                continue
        return out

    def measure_idle(self, window_s: float = IDLE_WINDOW_S) -> dict:
        """The GPU's power before the run, over `window_s` (at most that plus one reading): `self.idle`."""
        t0 = time.monotonic()
        readings = [self.sample(t0)]
        while time.monotonic() - t0 < window_s:
            time.sleep(min(IDLE_EVERY_S, max(0.0, window_s - (time.monotonic() - t0))))
            readings.append(self.sample(t0))
        self.idle = idle_power(readings)
        return self.idle

    def start(self) -> None:
        t0 = self._t0 = time.monotonic()

        def loop() -> None:
            while not self._stop.is_set() and len(self.samples) < MAX_SAMPLES:
                self.samples.append(self.sample(t0))
                self._stop.wait(SAMPLE_EVERY_S)

        self._thread = threading.Thread(target=loop, name="nvml", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)

    def mark_end(self) -> None:
        """The measured part has just ended (the run's answer came): its window is [now - wall_s, now]."""
        if self._t0 is not None:
            self.end_s = time.monotonic() - self._t0

    def summary(self, inferences: int | None = None, measured_s: float | None = None, samples: int | None = None
                ) -> dict:  # fmt: skip
        out: dict = {"available": True, "source": "NVML", **self.identity()}
        start = None if self.end_s is None or not measured_s else max(0.0, self.end_s - measured_s)
        return {**out, **window_summary(self.samples, start, self.end_s, inferences, samples, self.idle)}


def idle_power(readings: list[dict]) -> dict:
    """Idle power from readings of `sample()` taken with nothing running: the energy counter's rise over their span
    when there is one, else the mean power reading. `power_w` None when neither was readable."""
    energy = [(s["t_s"], s["energy_mj"]) for s in readings if "energy_mj" in s]
    power = [s["power_w"] for s in readings if "power_w" in s]
    span = readings[-1]["t_s"] - readings[0]["t_s"] if readings else 0.0
    out: dict = {"window_s": round(span, 3), "readings": len(readings)}
    moved = len(energy) >= 2 and energy[-1][0] > energy[0][0] and energy[-1][1] > energy[0][1]
    if moved:
        (t0, e0), (t1, e1) = energy[0], energy[-1]
        out.update(power_w=round((e1 - e0) / 1000.0 / (t1 - t0), 3), source="energy counter")
    elif power:  # no counter, or one that did not move in the window (it updates at its own pace)
        out.update(power_w=round(sum(power) / len(power), 3), source="power readings")
    else:
        out.update(power_w=None, source="none: this GPU reports neither energy nor power")
    if power:
        out["power_readings_w"] = {"min": min(power), "max": max(power)}
    return out


def energy_figures(energy_j: float, window_s: float, idle_w: float | None, inferences: int | None,
                   samples: int | None) -> dict:  # fmt: skip
    """Energy per inference and per sample, total and above idle, and samples per second and per joule."""
    out: dict = {}
    if inferences:
        out["energy_per_inference_uj"] = round(energy_j * 1e6 / inferences, 2)
    if samples:
        out["energy_per_sample_uj"] = round(energy_j * 1e6 / samples, 2)
        out["samples_per_s"] = round(samples / window_s, 2) if window_s > 0 else None
        out["samples_per_j"] = round(samples / energy_j, 3) if energy_j > 0 else None
    if idle_w is None:
        return out
    above = round(energy_j - idle_w * window_s, 3)
    out["energy_above_idle_j"] = above
    if above <= 0:
        out["energy_above_idle_note"] = (f"the run drew no more than the idle {idle_w:g} W: no per-joule figure above "
                                         "idle")  # fmt: skip
        return out
    if inferences:
        out["energy_above_idle_per_inference_uj"] = round(above * 1e6 / inferences, 2)
    if samples:
        out["energy_above_idle_per_sample_uj"] = round(above * 1e6 / samples, 2)
        out["samples_per_j_above_idle"] = round(samples / above, 3)
    return out


def window_summary(samples: list[dict], start_s: float | None, end_s: float | None, inferences: int | None,
                   n_samples: int | None = None, idle: dict | None = None) -> dict:  # fmt: skip
    """Means, maxima and energy over the measured part only: the sampler also ran while the child loaded the model,
    initialised CUDA and warmed up, and counting that energy against the measured inferences overstated it. The
    energy is the counter's rise across the window, from the samples inside it, scaled to the window's length.
    `n_samples`: the samples the inferences ran (inferences x batch; default the inferences); `idle`: `idle_power`."""
    inside = samples if start_s is None else [s for s in samples if start_s <= s["t_s"] <= (end_s or s["t_s"])]
    out: dict = {"samples": len(inside), "window_s": None if start_s is None else round((end_s or 0) - start_s, 3)}
    for key in ("utilization_pct", "memory_utilization_pct", "memory_used_bytes", "power_w", "temperature_c",
                "sm_clock_mhz", "memory_clock_mhz"):  # fmt: skip
        vals = [s[key] for s in inside if key in s]
        if vals:
            out[key] = {"mean": round(sum(vals) / len(vals), 3), "max": max(vals)}
    energy = [(s["t_s"], s["energy_mj"]) for s in inside if "energy_mj" in s]
    power = [s["power_w"] for s in inside if "power_w" in s]
    span = None
    if len(energy) >= 2 and energy[-1][0] > energy[0][0]:
        (t0, e0), (t1, e1) = energy[0], energy[-1]
        span = ((end_s or t1) - start_s) if start_s is not None else t1 - t0
        out["energy_j"], out["energy_source"] = round((e1 - e0) / 1000.0 * span / (t1 - t0), 3), "energy counter"
    elif len(power) >= 2 and not any("energy_mj" in s for s in samples) and start_s is not None and end_s:
        # no energy counter on this GPU (before Volta): the mean power over the window, from two readings or more
        span = end_s - start_s
        out["energy_j"], out["energy_source"] = round(sum(power) / len(power) * span, 3), "mean power x window"
    else:
        out["energy_note"] = "the measured part was shorter than two NVML readings: no energy figure"
    if idle is not None:
        out["idle"] = idle
    if span:
        idle_w = (idle or {}).get("power_w")
        out.update(energy_figures(out["energy_j"], span, idle_w, inferences, n_samples or inferences))
    out["throttle_reasons"] = sorted({r for s in inside for r in s.get("throttle", [])})
    out["timeline"] = samples[:: max(1, len(samples) // 200)]
    return out


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def energy_text(g: dict) -> str | None:
    """The idle and above-idle energy of a `gpu` section in one line for the terminal; None without an idle reading."""
    idle = g.get("idle") or {}
    if idle.get("power_w") is None or g.get("energy_j") is None:
        return None
    text = f"idle {idle['power_w']:g} W ({idle.get('source')}, {idle.get('window_s')} s before the model loaded)"
    if g.get("energy_above_idle_note"):
        return f"{text}; {g['energy_above_idle_note']}"
    parts = [f"{g['energy_above_idle_j']:g} J above idle of {g['energy_j']:g} J"]
    if g.get("energy_above_idle_per_sample_uj") is not None:
        parts.append(f"{g['energy_above_idle_per_sample_uj']:,.1f} uJ per sample above idle "
                     f"({g['energy_per_sample_uj']:,.1f} total) at batch {g.get('batch') or 1}")  # fmt: skip
    if g.get("samples_per_j_above_idle") is not None:
        parts.append(f"{g['samples_per_s']:,.0f} samples/s, {g['samples_per_j_above_idle']:,.1f} samples/J above "
                     f"idle ({g['samples_per_j']:,.1f} total)")  # fmt: skip
    return f"{text}; " + "; ".join(parts)
