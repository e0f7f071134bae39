"""INT8 against FP32 on resnet8 for ONNX Runtime and OpenVINO, interleaved in one run, with the measurement engine.

Goal on an AVX2 CPU without VNNI: INT8 at least 1.5x faster on ONNX Runtime and 1.8x on OpenVINO (medians). The CPU
flags that decide it (avx2, avx512*, vnni, amx) are printed with the result.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import artifact, need

import edge_runtime
from edge_runtime.measure.loop import measure
from edge_runtime.quantize import cpu_flags

from .conftest import report_ratio

CASES = {"onnxruntime": ("_fp32.onnx", "_int8.onnx", 1.5), "openvino": ("_fp32.onnx", "_int8.xml", 1.8)}


def _median_us(path, backend, x) -> float:
    with edge_runtime.load(path, backend=backend, threads=1, sandbox=False) as s:
        s.bind({s.inputs[0].name: x})
        m = measure(s.runner(), iterations=2000, warmup=100)
    return float(np.median(m.samples_ns)) / 1e3


@pytest.mark.parametrize("backend", list(CASES))
def test_resnet8_int8_vs_fp32(benchmark, backend):
    need(backend)
    fp32_s, int8_s, goal = CASES[backend]
    fp32, int8 = artifact("resnet8", fp32_s), artifact("resnet8", int8_s)
    x = np.random.default_rng(0).random((1, 32, 32, 3), dtype=np.float32)
    a, b = [], []

    def one_round():
        if len(a) % 2 == 0:
            a.append(_median_us(fp32, backend, x))
            b.append(_median_us(int8, backend, x))
        else:
            b.append(_median_us(int8, backend, x))
            a.append(_median_us(fp32, backend, x))

    benchmark.pedantic(one_round, rounds=4, iterations=1)
    flags = sorted(f for f in cpu_flags() if f in ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8"))
    report_ratio(
        benchmark,
        f"resnet8 {backend} FP32/INT8 speed-up [{' '.join(flags)}]",
        a,
        b,
        goal=100.0,
        goal_low=goal,
        inverse=True,
    )
    assert len(a) == len(b) == 4
