"""What both test servers share about the ONNX model they serve: ONNX Runtime's type strings as numpy dtypes (the ones
a KServe v2 tensor can carry), and the launchers' common flags. Imported from tests/servers (the launchers' folder),
in each server's own venv."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

ORT_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int8)": np.int8,
    "tensor(int16)": np.int16,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
    "tensor(uint8)": np.uint8,
    "tensor(uint16)": np.uint16,
    "tensor(uint32)": np.uint32,
    "tensor(uint64)": np.uint64,
    "tensor(bool)": np.bool_,
}


def launcher_parser(doc: str) -> argparse.ArgumentParser:
    """--model, --name, --http-port, --grpc-port: what every launcher takes."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="the .onnx file")
    parser.add_argument("--name", required=True, help="the model's name on the server")
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    return parser
