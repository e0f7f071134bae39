"""The tree tells the architecture: layers import one way (cli -> measure/quantize -> runtime -> system -> errors,
results shared and light), no import circle, the board side never imports the host, no backend library at import
time, and no module over ~400 lines without a reason at its top."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

PACKAGE = ROOT / "edge_runtime"
# What each part may import (besides itself). Quantize measures latency with the engine `bench` uses.
ALLOWED = {
    "errors": set(),
    "system": {"errors"},
    "results": {"errors", "system"},
    "runtime": {"errors", "system"},
    "measure": {"errors", "system", "results", "runtime"},
    "quantize": {"errors", "system", "results", "runtime", "measure"},
    "wire": set(),  # sans-I/O: bytes in, messages out; shared with the host, so it depends on nothing
    "agent": {"errors", "system", "results", "runtime", "measure", "wire", "__init__"},
    "cli": {"errors", "system", "results", "runtime", "measure", "quantize", "agent", "wire", "__init__"},
    "__init__": {"errors", "runtime"},
}
MAX_LINES = 400


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        name = ".".join(rel.parts).removesuffix(".__init__")
        out[name] = path
    return out


def part(module: str) -> str:
    """The layer of `edge_runtime.x.y`: x (or the module itself at the top: errors, results, __init__)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports(path: Path, module: str) -> set[str]:
    """Every edge_runtime module `path` imports, at the top or inside a function (lazy imports count)."""
    found = set()
    known = modules()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert not node.level, f"{module}: a relative import (the layers are read from absolute ones)"
            mod = node.module or ""
            submodules = {f"{mod}.{a.name}" for a in node.names} & set(known)
            # `from edge_runtime.system import files` imports the module files; its package only as Python must.
            found |= submodules if len(submodules) == len(node.names) else {mod}
    return {m for m in found if m in known and m != module}


def graph() -> dict[str, set[str]]:
    return {name: imports(path, name) for name, path in modules().items()}


def test_layers_import_one_way():
    wrong = []
    for module, deps in graph().items():
        mine = part(module)
        for dep in deps:
            theirs = part(dep)
            if theirs != mine and theirs not in ALLOWED[mine] and dep != "edge_runtime":
                wrong.append(f"{module} -> {dep}")
            if dep == "edge_runtime" and mine not in ("cli", "measure", "agent"):  # the package: __version__
                wrong.append(f"{module} -> edge_runtime (the package: import what you need from its module)")
    assert wrong == []


def test_no_import_circle():
    g = graph()
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(node: str, path: list[str]) -> bool:
        state[node] = 1
        for nxt in sorted(g[node]):
            if nxt not in g:
                continue
            if state.get(nxt) == 1:
                cycle.extend([*path[path.index(nxt) :], nxt] if nxt in path else [node, nxt])
                return True
            if state.get(nxt) is None and visit(nxt, [*path, nxt]):
                return True
        state[node] = 2
        return False

    for node in sorted(g):
        if state.get(node) is None and visit(node, [node]):
            break
    assert cycle == [], " -> ".join(cycle)


def test_the_board_side_never_imports_the_host():
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                assert not any(a.name.split(".")[0] == "bench" for a in node.names), name
            elif isinstance(node, ast.ImportFrom):
                assert (node.module or "").split(".")[0] != "bench", name


def test_import_edge_runtime_imports_no_backend_and_no_host():
    code = (
        "import sys, edge_runtime, edge_runtime.cli\n"
        "heavy = [m for m in ('onnxruntime', 'openvino', 'ai_edge_litert', 'tflite_runtime', 'nncf', 'onnx', 'bench')"
        " if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_import_edge_runtime_pays_only_for_what_it_uses():
    """`import edge_runtime` resolves the runtime on first use; loading a built-in backend never scans entry points
    (importlib.metadata pulls in email, zipfile, csv and ast); the API still answers by its names."""
    code = (
        "import sys, edge_runtime\n"
        "first = [m for m in ('numpy', 'edge_runtime.runtime', 'importlib.metadata') if m in sys.modules]\n"
        "from edge_runtime import load, Session, TensorInfo\n"
        "from edge_runtime.runtime import backends\n"
        "backends.get('onnxruntime')\n"
        "then = [m for m in ('numpy', 'edge_runtime.runtime', 'importlib.metadata') if m in sys.modules]\n"
        "print(','.join(first) + '|' + ','.join(then) + '|' + load.__module__ + '|' + str(sorted(dir(edge_runtime)) =="
        " sorted(edge_runtime.__all__)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "|numpy,edge_runtime.runtime|edge_runtime.runtime.load|True"


@pytest.mark.parametrize("name", sorted(modules()))
def test_no_module_is_long_without_a_reason(name):
    path = modules()[name]
    lines = path.read_text().count("\n")
    if lines > MAX_LINES:
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        assert "Long because" in doc, f"{path.relative_to(ROOT)}: {lines} lines and no reason at its top"


def test_every_module_says_what_it_is_for():
    missing = [
        n for n, p in modules().items() if p.name != "__main__.py" and not ast.get_docstring(ast.parse(p.read_text()))
    ]
    assert missing == []


def test_subpackages_show_the_layers():
    parts = {p.name for p in PACKAGE.iterdir() if p.is_dir() and not p.name.startswith("__")}
    assert parts == {"runtime", "measure", "system", "quantize", "cli", "wire", "agent", "_data"}
    # _data holds data, not code: links to the top-level boards/ and system_tuning/ that a wheel build copies.
    assert {p.name: os.readlink(p) for p in (PACKAGE / "_data").iterdir()} == {
        "boards": "../../boards",
        "system_tuning": "../../system_tuning",
    }
    assert (PACKAGE / "runtime" / "backends" / "base.py").exists()
    assert {p.name for p in PACKAGE.glob("*.py")} == {"__init__.py", "errors.py", "results.py"}
