"""The local target on this host's NVIDIA GPU (`local:?device=cuda&gpu=N`): which GPU the run uses and the NVML
sampler that watches it, idle power first. Kept apart from local.py, which stays the target's plumbing.

GPU N is the CUDA provider's (and TensorRT's) `device_id` provider option and NVML's device N. CUDA numbers devices
fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, NVML by PCI bus id: the run sets PCI_BUS_ID for the child that
loads the model, unless the user chose an order, so both mean the same board (a user's own order is kept and then
the two may differ: said in the record's `gpu.cuda_device_order`)."""

from __future__ import annotations

import os
from dataclasses import replace

from bench.targets.base import TargetError
from edge_runtime.errors import UserError


def on_gpu(request, index: int | None, url: str):
    """The request with GPU `index` as the provider's device_id (None: the provider's default, GPU 0)."""
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # inherited by the child that runs the model
    if index is None:
        return request
    given = (request.options or {}).get("device_id")
    if given is not None and given != str(index):
        raise TargetError(f"{url}: gpu={index} and the option device_id={given} name different GPUs", "user-error")
    return replace(request, options={**dict(request.options or {}), "device_id": str(index)}).validate()


def start_sampler(index: int, url: str, progress=None):
    """NVML on GPU `index`: its idle power sampled (bounded), then sampling on its thread. One line without it."""
    from bench.metrics.nvml import IDLE_WINDOW_S, GpuSampler

    try:
        gpu = GpuSampler(index)
    except UserError as err:
        raise TargetError(f"{url}: {err.one_line()}", "unusable") from None
    if progress is not None:
        progress(f"GPU {index}: idle power over {IDLE_WINDOW_S:g} s before the model loads")
    gpu.measure_idle()
    gpu.start()
    return gpu


def gpu_section(gpu, result: dict) -> dict:
    """The record's `gpu` section: NVML over the measured part, per inference (one batch) and per sample."""
    batch = (result.get("config") or {}).get("batch") or 1
    wall_s, ips = result.get("wall_s"), result.get("throughput_ips")
    samples = round(ips * wall_s) if ips and wall_s else None  # throughput counts samples (inferences x batch)
    inferences = samples // batch if samples else (result.get("latency_us") or {}).get("count")
    out = gpu.summary(inferences, wall_s, samples=samples)
    return {**out, "batch": batch, "cuda_device_order": os.environ.get("CUDA_DEVICE_ORDER")}
