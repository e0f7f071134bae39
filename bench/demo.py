"""`make demo`: load the reference INT8 models on every installed backend and print a short comparison.

For `digits_cnn` (trained): top-1 on the held-out split, agreement with the FP32 model, and latency. For `resnet8`
(MLPerf Tiny shape, random weights): INT8 against FP32 latency on each backend. Latencies are a quick look (min and
median of a few hundred runs, timed by the engine `edge-runtime bench` uses); `edge-runtime bench` is the tool for
real numbers.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import edge_runtime
from edge_runtime.measure.loop import measure
from edge_runtime.runtime import backends
from edge_runtime.runtime.accuracy import classify

MODELS = Path(__file__).resolve().parent.parent / "models"
ARTIFACTS = {  # backend -> (fp32 file, int8 file), by suffix
    "onnxruntime": ("{m}_fp32.onnx", "{m}_int8.onnx"),
    "openvino": ("{m}_fp32.onnx", "{m}_int8.xml"),
    "tflite": ("{m}_fp32.tflite", "{m}_int8.tflite"),
}


def latency_us(path: Path, backend: str, iterations: int = 300, warmup: int = 30) -> tuple[float, float]:
    """(min, median) microseconds from the measurement engine `edge-runtime bench` uses (inputs bound once)."""
    with edge_runtime.load(path, backend=backend, threads=1) as s:
        s.bind({t.name: np.zeros([d or 1 for d in t.shape], dtype=t.dtype) for t in s.inputs})
        m = measure(s.runner(), iterations=iterations, warmup=warmup)
    return float(m.samples_ns.min()) / 1e3, float(np.median(m.samples_ns)) / 1e3


def main() -> int:
    installed = backends.available()
    missing = [n for n in backends.names() if n not in installed]
    print(
        f"backends installed: {', '.join(installed) or 'none'}"
        + (f"; missing: {', '.join(missing)}" if missing else "")
    )
    data = np.load(MODELS / "digits_cnn" / "digits_test.npz")
    x, y = data["x"], data["y"]

    print(f"\ndigits_cnn (trained on scikit-learn digits), {len(x)} held-out samples, 1 thread")
    header = (
        f"{'backend':<12} {'version':<10} {'FP32 top-1':>10} {'INT8 top-1':>10} {'agree':>7} "
        f"{'INT8 min us':>12} {'INT8 p50 us':>12}"
    )
    print(header)
    print("-" * len(header))
    for name in installed:
        fp32, int8 = (MODELS / "digits_cnn" / f.format(m="digits_cnn") for f in ARTIFACTS[name])
        p32 = classify(fp32, x, backend=name)
        p8 = classify(int8, x, backend=name)
        lo, med = latency_us(int8, name)
        version = installed[name].library_version()
        print(
            f"{name:<12} {version:<10} {np.mean(p32 == y):>10.2%} {np.mean(p8 == y):>10.2%} "
            f"{np.mean(p8 == p32):>7.2%} {lo:>12.1f} {med:>12.1f}"
        )

    print("\nresnet8 (MLPerf Tiny shape, 32x32x3, random weights), 1 thread")
    header = f"{'backend':<12} {'FP32 p50 us':>12} {'INT8 p50 us':>12} {'INT8 speed-up':>14}"
    print(header)
    print("-" * len(header))
    for name in installed:
        fp32, int8 = (MODELS / "resnet8" / f.format(m="resnet8") for f in ARTIFACTS[name])
        _, m32 = latency_us(fp32, name, iterations=200)
        _, m8 = latency_us(int8, name, iterations=200)
        print(f"{name:<12} {m32:>12.1f} {m8:>12.1f} {m32 / m8:>13.2f}x")
    print(
        "\n(one quick run: identical runs on a shared machine can differ by 2x in median; use `make bench` for ratios)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
