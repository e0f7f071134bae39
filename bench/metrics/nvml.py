"""A local NVIDIA GPU's own figures during a run, through NVML (`nvidia-ml-py`, the `[gpu]` extra): utilisation, memory,
power, temperature, clocks and the reasons the clocks are held down, sampled on a thread every SAMPLE_EVERY_S. Used by
the `local:?device=cuda` (or `tensorrt`) target; without a GPU, `check()` refuses in one line before anything runs."""

from __future__ import annotations

import threading
import time

from edge_runtime.errors import UserError

SAMPLE_EVERY_S = 0.25
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

    def summary(self, inferences: int | None = None, measured_s: float | None = None) -> dict:
        out: dict = {"available": True, "source": "NVML", **self.identity()}
        start = None if self.end_s is None or not measured_s else max(0.0, self.end_s - measured_s)
        return {**out, **window_summary(self.samples, start, self.end_s, inferences)}


def window_summary(samples: list[dict], start_s: float | None, end_s: float | None, inferences: int | None) -> dict:
    """Means, maxima and energy over the measured part only: the sampler also ran while the child loaded the model,
    initialised CUDA and warmed up, and counting that energy against the measured inferences overstated it. The
    energy is the counter's rise across the window, from the samples inside it, scaled to the window's length."""
    inside = samples if start_s is None else [s for s in samples if start_s <= s["t_s"] <= (end_s or s["t_s"])]
    out: dict = {"samples": len(inside), "window_s": None if start_s is None else round((end_s or 0) - start_s, 3)}
    for key in ("utilization_pct", "memory_utilization_pct", "memory_used_bytes", "power_w", "temperature_c",
                "sm_clock_mhz", "memory_clock_mhz"):  # fmt: skip
        vals = [s[key] for s in inside if key in s]
        if vals:
            out[key] = {"mean": round(sum(vals) / len(vals), 3), "max": max(vals)}
    energy = [(s["t_s"], s["energy_mj"]) for s in inside if "energy_mj" in s]
    if len(energy) >= 2 and energy[-1][0] > energy[0][0]:
        (t0, e0), (t1, e1) = energy[0], energy[-1]
        span = ((end_s or t1) - start_s) if start_s is not None else t1 - t0
        out["energy_j"] = round((e1 - e0) / 1000.0 * span / (t1 - t0), 3)
        if inferences:
            out["energy_per_inference_uj"] = round(out["energy_j"] * 1e6 / inferences, 2)
    else:
        out["energy_note"] = "the measured part was shorter than two NVML readings: no energy figure"
    out["throttle_reasons"] = sorted({r for s in inside for r in s.get("throttle", [])})
    out["timeline"] = samples[:: max(1, len(samples) // 200)]
    return out


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
