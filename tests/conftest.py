"""Shared fixtures: the committed reference models and their manifest, and which backends are installed here."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10 (JetPack 6): the package depends on tomli there
    import tomli as tomllib  # type: ignore[no-redef]

# The suite never lets ONNX Runtime's telemetry start (the backend sets this too, before it imports onnxruntime; the
# benchmarks import it directly).
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")


def _bytecode_outside_the_checkout() -> None:
    """The suite starts thousands of Python processes (edge-bench, agents, each bench's child). Where the environment
    says PYTHONDONTWRITEBYTECODE (a checkout kept free of __pycache__), each compiled every module of ours again:
    0.1 to 0.2 s of CPU a process, some 15% of a test file's time here. Their bytecode goes to this user's cache,
    outside the checkout, instead (PYTHONPYCACHEPREFIX; one already set is kept; where the cache cannot be written,
    nothing changes: a prefix nobody can write would recompile the standard library too)."""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or os.environ.get("PYTHONPYCACHEPREFIX"):
        return
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "edge-runtime-tests" / "pycache"
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError:
        return
    if os.access(cache, os.W_OK | os.X_OK):
        del os.environ["PYTHONDONTWRITEBYTECODE"]
        os.environ["PYTHONPYCACHEPREFIX"] = str(cache)


_bytecode_outside_the_checkout()

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
FIXTURES = ROOT.parent / "shared" / "fixtures"

# Which backends read which artifact format. OpenVINO reads ONNX and TFLite too, through its frontends.
READERS = {"onnx": ["onnxruntime", "openvino"], "openvino": ["openvino"], "tflite": ["tflite", "openvino"]}
EXTRA = {"onnxruntime": "onnxruntime", "openvino": "openvino", "tflite": "tflite"}
_MODULE = {"onnxruntime": "onnxruntime", "openvino": "openvino"}


def backend_installed(name: str) -> bool:
    if name == "tflite":
        impl = os.environ.get("EDGE_RUNTIME_TFLITE_IMPL")
        mods = {"ai-edge-litert": ["ai_edge_litert"], "tflite-runtime": ["tflite_runtime"]}.get(
            impl or "", ["ai_edge_litert", "tflite_runtime"]
        )
        return any(importlib.util.find_spec(m) for m in mods)
    return importlib.util.find_spec(_MODULE[name]) is not None


def need(backend: str) -> None:
    if not backend_installed(backend):
        pytest.skip(f"backend {backend!r} not installed: pip install 'edge-runtime[{EXTRA[backend]}]' (make test does)")


def load_manifest() -> dict:
    with open(MODELS / "manifest.toml", "rb") as f:
        return tomllib.load(f)


MANIFEST = load_manifest()
ARTIFACTS = MANIFEST["artifact"]


def artifact(model: str, file_suffix: str) -> Path:
    """The path of `model`'s artifact whose file ends with `file_suffix` (e.g. "_int8.onnx")."""
    for a in ARTIFACTS:
        if a["model"] == model and a["file"].endswith(file_suffix):
            return MODELS / a["file"]
    raise KeyError((model, file_suffix))


@pytest.fixture(scope="session")
def manifest() -> dict:
    return MANIFEST


@pytest.fixture(scope="session")
def digits() -> tuple:
    import numpy as np

    d = np.load(MODELS / "digits_cnn" / "digits_test.npz")
    return d["x"], d["y"]


def pytest_addoption(parser):
    parser.addoption(
        "--real-system",
        action="store_true",
        default=False,
        help="also run tests that change this machine's tuning (as root) and restore it",
    )
