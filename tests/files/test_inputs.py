"""Inputs (edge_runtime/files/inputs.py): what users name as model inputs, calibration data and labels, when it is
a fifo, a header that lies, or numbers that are not finite."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from conftest import artifact, need
from helpers import assert_one_line_error, cli, make_fifo

MODEL = artifact("digits_cnn", "_int8.onnx")
FP32 = artifact("digits_cnn", "_fp32.onnx")


def _first(path: Path) -> Path:
    one = path.with_name("one.npy")
    np.save(one, np.load(path)[:1])
    return one


def test_fifo_inputs_calibration_and_labels(tmp_path, digits):
    need("onnxruntime")
    fifo = make_fifo(tmp_path, "x.npy")
    assert_one_line_error(cli("run", MODEL, "--input", fifo, timeout=60), "--input", "is a fifo")
    out = tmp_path / "q.onnx"
    assert_one_line_error(
        cli("quantize", FP32, "--calibration", fifo, "--out", out, timeout=60), "calibration data", "is a fifo"
    )
    folder = tmp_path / "calib"
    folder.mkdir()
    np.save(folder / "a.npy", digits[0][:10])
    os.mkfifo(folder / "b.npy")
    assert_one_line_error(
        cli("quantize", FP32, "--calibration", folder, "--out", out, timeout=60), "b.npy", "is a fifo"
    )
    good = tmp_path / "good.npy"
    np.save(good, digits[0][:20])
    proc = cli(
        "quantize", FP32, "--calibration", good, "--validation", good, "--labels", fifo, "--out", out, timeout=120
    )
    assert_one_line_error(proc, "--labels", "is a fifo")
    assert not out.exists()


def test_an_npy_whose_header_claims_a_trillion_elements(tmp_path):
    need("onnxruntime")
    x = tmp_path / "huge.npy"
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000), }"
    header += " " * (63 - (len(header) + 10) % 64) + "\n"
    x.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + b"\0" * 64)
    proc = cli("run", MODEL, "--input", x)
    assert_one_line_error(proc, str(x), "shape (1000000, 1000000)", "holds only 64 bytes")


def test_nan_and_overflowing_inputs_are_refused(tmp_path, digits):
    need("onnxruntime")
    x = tmp_path / "nan.npy"
    np.save(x, np.full((1, 8, 8, 1), np.nan, np.float32))
    assert_one_line_error(cli("run", FP32, "--input", x), "--input", "NaN or infinite as float32")
    assert_one_line_error(cli("bench", MODEL, "--input", x, "--iterations", "5"), "NaN or infinite")
    big = tmp_path / "big.npy"
    np.save(big, np.full((30, 8, 8, 1), 1e300, np.float64))  # finite in float64, infinite as the model's float32
    assert_one_line_error(cli("run", FP32, "--input", _first(big)), "NaN or infinite as float32")
    proc = cli("quantize", FP32, "--calibration", big, "--out", tmp_path / "q.onnx")
    assert_one_line_error(proc, "NaN or infinite as float32")
