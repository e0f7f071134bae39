"""The tree tells the architecture: layers import one way (cli -> measure/quantize -> runtime -> system -> errors,
results shared and light), no import circle on either side, the board side never imports the host, no backend library
at import time, no module over ~400 lines without a reason at its top; on the host side, targets are plugins (no
caller tests a URL scheme or probes a target), and scenarios and SLOs import no target or campaign."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

PACKAGE = ROOT / "edge_runtime"
HOST = ROOT / "bench"
# What each part may import (besides itself). Quantize measures latency with the engine `bench` uses.
ALLOWED = {
    "errors": set(),
    "limits": set(),  # the bounds every entry point checks: imports nothing
    "plugins": {"errors"},  # the lazy registry backends and the host's targets are
    "files": {"errors"},  # general I/O (inputs users name, the one writer, locks, formats): no system read
    "system": {"errors", "files", "limits"},
    "results": {"errors", "files", "system"},
    "runtime": {"errors", "files", "limits", "plugins", "system"},
    "measure": {"errors", "files", "limits", "system", "results", "runtime"},
    "quantize": {"errors", "files", "limits", "system", "results", "runtime", "measure"},
    # per-op placement and time (issue 29): a second, profiled session beside bench's timed one
    "ops": {"errors", "files", "limits", "system", "runtime", "measure"},
    # sans-I/O: bytes in, messages out, addresses parsed; shared with the host. No port, no socket: endpoint.py parses
    # addresses and reads the one small secret file through files.inputs
    "wire": {"errors", "files"},
    "agent": {"errors", "files", "limits", "system", "results", "runtime", "measure", "wire", "__init__"},
    # the dynamic batcher and (to come) the KServe v2 endpoint: sessions on pinned threads, no host code (issue 26)
    "serve": {"errors", "files", "limits", "system", "runtime", "wire"},
    # what every command-line program is made of (edge-runtime's and edge-bench's): main, args, signals
    "program": {"errors", "files", "limits", "system", "results", "runtime", "measure", "__init__"},
    "cli": {"errors", "files", "limits", "system", "results", "runtime", "measure", "quantize", "agent", "wire",
            "serve", "program", "ops", "__init__"},
    "__init__": {"errors", "runtime"},
}
# Modules that reach a layer their own may not, each for a stated reason. bench --ops (issue 29): ops profiles with
# measure's loop, and the bench's own run (here, or in the agent's child) profiles with ops after its timed loop:
# this one module is that bridge, importing ops lazily and only when a request asks for ops.
BRIDGES = {"edge_runtime.measure.ops_section": {"ops"}}
MAX_LINES = 400


def modules(*packages: Path) -> dict[str, Path]:
    out = {}
    for package in packages or (PACKAGE,):
        for path in sorted(package.rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            name = ".".join(rel.parts).removesuffix(".__init__")
            out[name] = path
    return out


def part(module: str) -> str:
    """The layer of `edge_runtime.x.y`: x (or the module itself at the top: errors, results, __init__)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports(path: Path, module: str, known: dict[str, Path] | None = None) -> set[str]:
    """Every module of `known` (edge_runtime's) `path` imports, at the top or inside a function (lazy imports count)."""
    found = set()
    known = known or modules()
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


def graph(*packages: Path) -> dict[str, set[str]]:
    known = modules(*packages)
    return {name: imports(path, name, known) for name, path in known.items()}


def test_layers_import_one_way():
    wrong = []
    for module, deps in graph().items():
        mine = part(module)
        for dep in deps:
            theirs = part(dep)
            allowed = ALLOWED[mine] | BRIDGES.get(module, set())
            if theirs != mine and theirs not in allowed and dep != "edge_runtime":
                wrong.append(f"{module} -> {dep}")
            if dep == "edge_runtime" and mine not in ("cli", "measure", "agent", "serve"):  # the package: __version__
                wrong.append(f"{module} -> edge_runtime (the package: import what you need from its module)")
    assert wrong == []


def test_no_import_circle():
    """Over both sides at once (the host imports the board), with lazy imports counted."""
    g = graph(PACKAGE, HOST)
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


def test_scenarios_and_slos_import_no_target_or_campaign():
    """Issue 23: what a load is and what an SLO says stand on their own; targets and campaigns use them, not the
    reverse (a new target kind never reaches into them)."""
    wrong = [f"{m} -> {d}" for m, deps in graph(PACKAGE, HOST).items()
             if m.startswith(("bench.scenarios", "bench.slo")) for d in deps
             if d.startswith(("bench.targets", "bench.campaign"))]  # fmt: skip
    assert wrong == [], "scenarios and SLOs do not import targets or campaigns: " + ", ".join(wrong)


def test_the_wire_opens_no_port_or_socket():
    """Issue 23, step 7: wire/ is shared by the board and the host, so it holds what both parse (frames, messages, the
    endpoint's address and the token file's rules) and none of the I/O either does: no socket, select or serial
    import, and from system/ only the checked open of an input file. The agent's loops and the host's transports
    import the parsing from here (the host no longer reaches into edge_runtime.agent for it)."""
    io = ("socket", "select", "selectors", "serial", "subprocess", "asyncio")
    wrong = []
    for name, path in modules().items():
        if part(name) != "wire":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            wrong += [f"{name} imports {n}" for n in names if n.split(".")[0] in io]
        wrong += [f"{name} -> {d}" for d in graph()[name]
                  if part(d) in ("system", "files") and d != "edge_runtime.files.inputs"]  # fmt: skip
    assert wrong == []
    endpoint = {m for m, deps in graph(PACKAGE, HOST).items() for d in deps if d == "edge_runtime.agent.endpoint"}
    assert endpoint <= {"edge_runtime.cli.agent"}, f"the address is parsed in wire/endpoint.py: {sorted(endpoint)}"


def test_the_host_takes_only_the_boards_public_parts():
    """Issue 23: the host imports what the board offers for sharing (wire.endpoint for addresses and the token,
    measure.child to run a request in a child, results, runtime...), never the agent's insides or a CLI's: no module
    of bench/ imports edge_runtime.agent or edge_runtime.cli (or any edge_runtime.*.cli): the command-line toolkit both
    programs share is edge_runtime.program (issue 23, steps 20-21)."""
    wrong = [f"{m} -> {d}" for m, deps in graph(PACKAGE, HOST).items() if m.split(".")[0] == "bench" for d in deps
             if d.split(".")[0] == "edge_runtime"
             and ("cli" in d.split(".") or d.split(".")[1:2] == ["agent"])]  # fmt: skip
    assert wrong == [], "take it from edge_runtime.wire.endpoint or edge_runtime.measure.child: " + ", ".join(wrong)


def test_usage_error_lives_in_errors_and_slos_import_no_cli():
    """Issue 23, step 1: a bad flag or value is an error of the house, not of the board's CLI: `UsageError` is
    defined in edge_runtime/errors.py alone, and nobody (the host's domain module bench/slo.py included) takes it
    from a CLI module."""
    defined, taken = [], []
    for path in [*sorted(PACKAGE.rglob("*.py")), *sorted(HOST.rglob("*.py")), *sorted((ROOT / "tests").rglob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.ClassDef) and node.name == "UsageError":
                defined.append(where)
            elif isinstance(node, ast.ImportFrom) and any(a.name == "UsageError" for a in node.names):
                if node.module != "edge_runtime.errors":
                    taken.append(f"{where} from {node.module}")
    assert [d.split(":")[0] for d in defined] == ["edge_runtime/errors.py"], defined
    assert taken == []
    assert not {d for d in graph(PACKAGE, HOST)["bench.slo"] if d.startswith("edge_runtime.cli")}


def test_one_package_version_lookup():
    """Issue 23, step 3: importlib.metadata's `version` is asked in one place, system/environment.py's
    `installed_version` (the results' `packages`, the backends' "unknown" and the quantizer's "not installed" are
    built on it), and it stays lazy there: importing the module pays nothing for it."""
    from edge_runtime.runtime.backends.base import distribution_version
    from edge_runtime.system.environment import installed_version, packages

    askers = [str(path.relative_to(ROOT)) for path in [*sorted(PACKAGE.rglob("*.py")), *sorted(HOST.rglob("*.py"))]
              for node in ast.walk(ast.parse(path.read_text()))
              if isinstance(node, ast.ImportFrom) and node.module == "importlib.metadata"
              and any(a.name == "version" for a in node.names)]  # fmt: skip
    assert askers == ["edge_runtime/system/environment.py"]
    missing = "no-such-distribution-i23"
    assert installed_version("numpy") == np_version() and installed_version(missing) is None
    assert packages(["numpy", missing]) == {"numpy": np_version()} and distribution_version(missing) == "unknown"
    code = "import sys, edge_runtime.system.environment\nprint('importlib.metadata' in sys.modules)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def np_version() -> str:
    import numpy as np

    return np.__version__


def test_the_target_plumbing_imports_no_target_kind():
    """base.py is what every target imports, the registry names built-ins as strings (imported on first use), and
    metric samplers are handed what they read: none of them imports a target kind (kserve <-> kserve_stats was a
    circle). A metrics module may use another (the scrape child: the bounded fetch and the Prometheus parser)."""
    g = graph(PACKAGE, HOST)
    for module in ("bench.targets.base", "bench.targets.registry", *[m for m in g if m.startswith("bench.metrics")]):
        kinds = {d for d in g[module] if d.startswith("bench.") and d not in ("bench.targets.base",)
                 and not (module.startswith("bench.metrics") and d.startswith("bench.metrics"))}  # fmt: skip
        assert kinds == set(), f"{module} imports {sorted(kinds)}"


def _target_attributes() -> set[str]:
    """Every method and `self.` attribute of the built-in target classes: what a probe with hasattr/getattr asks."""
    names = set()
    for path in (HOST / "targets").glob("*.py"):
        for cls in [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef)]:
            for node in ast.walk(cls):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(node.name)
                elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                    names.add(node.attr)
    return names - {"__init__", "__enter__", "__exit__"}


def scheme_tests_and_probes(path: Path, schemes, attributes: set[str]) -> list[str]:
    """`x.startswith("kserve...")` / `("local:")`..., and `hasattr(x, "answer_of")` / `getattr(x, "_asked", ...)`:
    the ways a caller once told one target kind from another."""
    prefixes = tuple({f"{s}:" for s in schemes if s} | {s.split("+")[0] for s in schemes if "+" in s})
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        f, args = node.func, node.args
        consts = [a.value for a in ast.walk(args[0]) if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if isinstance(f, ast.Attribute) and f.attr == "startswith" and any(c.startswith(prefixes) for c in consts):
            found.append(f"{where}:{node.lineno}: a scheme tested by string")
        probe = len(args) > 1 and isinstance(args[1], ast.Constant) and args[1].value in attributes
        if isinstance(f, ast.Name) and f.id in ("hasattr", "getattr") and probe:
            found.append(f"{where}:{node.lineno}: {f.id}(..., {args[1].value!r}) probes a target")
    return found


def test_no_caller_tests_a_scheme_or_probes_a_target():
    """Outside bench/targets/, a target is known by what its class declares (`info`), never by its URL's scheme or by
    asking it what it has: adding a target kind is one new file plus its registration."""
    from bench.targets import registry

    schemes, attributes = registry.schemes(), _target_attributes()
    assert {"answer_of", "_asked", "recover"} <= attributes  # the probes this rule was written against
    found = []
    for path in sorted(HOST.rglob("*.py")):
        if path.parent != HOST / "targets":
            found += scheme_tests_and_probes(path, schemes, attributes)
    assert found == []


def test_the_probes_of_old_are_found(tmp_path):
    """The rule above, shown to catch what main had (bench/cli/run.py, bench/campaign/runner.py before issue 23)."""
    old = tmp_path / "old.py"
    old.write_text('server = url.startswith("kserve+")\nlocal = url.startswith("local:")\n'
                   'if hasattr(t, "answer_of"):\n    pass\nasked = getattr(target, "_asked", {})\n')  # fmt: skip
    found = scheme_tests_and_probes(old, ["local", "kserve+http", "tcp"], _target_attributes())
    assert [f.split(": ", 1)[0].rsplit(":", 1)[1] for f in found] == ["1", "2", "3", "5"], found


def test_the_target_registry_alone_reads_its_entry_points():
    """One place turns an entry-point group into plugins (with the duplicate-name rule): edge_runtime/plugins.py's
    LazyRegistry, which the target registry and the backends' are; pyproject.toml declares the group."""
    from bench.targets import registry
    from edge_runtime.plugins import LazyRegistry
    from edge_runtime.runtime import backends

    g = graph(PACKAGE, HOST)
    readers = sorted(str(p.relative_to(ROOT)) for m, p in modules(PACKAGE, HOST).items() if any(
        isinstance(n, ast.ImportFrom) and n.module == "importlib.metadata" and any(a.name == "entry_points"
                                                                                   for a in n.names)
        for n in ast.walk(ast.parse(p.read_text()))))  # fmt: skip
    assert readers == ["edge_runtime/plugins.py"]
    assert isinstance(registry._TARGETS, LazyRegistry) and isinstance(backends._BACKENDS, LazyRegistry)
    assert g["bench.targets.registry"] == {"bench.targets.base", "edge_runtime.errors", "edge_runtime.plugins",
                                           "edge_runtime.wire.endpoint"}  # fmt: skip
    assert '[project.entry-points."edge_bench.targets"]' in (ROOT / "pyproject.toml").read_text()


def test_a_built_in_scheme_imports_its_target_only():
    """Registered as strings: a URL imports its own kind's module when first used, and no entry-point scan
    (importlib.metadata) and no other kind (tritonclient, numpy) comes with it."""
    code = (
        "import sys\n"
        "from bench.targets import registry\n"
        "watch = ('bench.targets.local', 'bench.targets.agent', 'bench.targets.kserve', 'importlib.metadata', "
        "'tritonclient', 'numpy')\n"
        "first = [m for m in watch if m in sys.modules]\n"
        "registry.check('local:?cpus=0')\n"
        "then = [m for m in watch if m in sys.modules]\n"
        "print(','.join(first) + '|' + ','.join(then))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "|bench.targets.local"


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


@pytest.mark.parametrize("name", sorted(modules(PACKAGE, HOST)))
def test_no_module_is_long_without_a_reason(name):
    path = modules(PACKAGE, HOST)[name]
    lines = path.read_text().count("\n")
    if lines > MAX_LINES:
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        assert "Long because" in doc, f"{path.relative_to(ROOT)}: {lines} lines and no reason at its top"


MAX_FUNCTION_LINES = 100


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """Functions (and methods) of `path` over `limit` lines, decorators included: "name (N lines)"."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            if node.end_lineno - first + 1 > limit:
                found.append(f"{node.name} ({node.end_lineno - first + 1} lines)")
    return found


def test_no_function_is_over_100_lines(tmp_path):
    """Issue 23: a function over 100 lines mixes jobs (record.py's host_result, cli/run.py's run, quantize's run were
    120-164 lines). Split it by job."""
    wrong = [f"{p.relative_to(ROOT)}: {f}" for p in modules(PACKAGE, HOST).values() for f in long_functions(p)]
    assert wrong == []
    body = "\n".join(f"    x = {i}" for i in range(100))  # the rule itself: 101 lines are found, 100 are not
    (tmp_path / "m.py").write_text(f"def long():\n{body}\n\n\ndef short():\n    pass\n")
    assert long_functions(tmp_path / "m.py") == ["long (101 lines)"]
    assert long_functions(tmp_path / "m.py", limit=101) == []


def test_every_module_says_what_it_is_for():
    missing = [
        n
        for n, p in modules(PACKAGE, HOST).items()
        if p.name != "__main__.py" and not ast.get_docstring(ast.parse(p.read_text()))
    ]
    assert missing == []


def test_subpackages_show_the_layers():
    parts = {p.name for p in PACKAGE.iterdir() if p.is_dir() and not p.name.startswith("__")}
    assert parts == {"runtime", "measure", "system", "files", "quantize", "cli", "wire", "agent", "program", "serve",
                     "ops", "_data"}
    # _data holds data, not code: links to the top-level boards/ and system_tuning/ that a wheel build copies.
    assert {p.name: os.readlink(p) for p in (PACKAGE / "_data").iterdir()} == {
        "boards": "../../boards",
        "system_tuning": "../../system_tuning",
    }
    assert (PACKAGE / "runtime" / "backends" / "base.py").exists()
    top = {"__init__.py", "errors.py", "limits.py", "plugins.py", "results.py"}
    assert {p.name for p in PACKAGE.glob("*.py")} == top


def duplicate_test_basenames(tests: Path) -> dict[str, list[str]]:
    """test_*.py files under `tests` that share a basename, by that name (their paths relative to `tests`)."""
    found: dict[str, list[str]] = {}
    for p in sorted(tests.rglob("test_*.py")):
        found.setdefault(p.name, []).append(str(p.relative_to(tests)))
    return {name: paths for name, paths in found.items() if len(paths) > 1}


def test_test_files_have_unique_basenames(tmp_path):
    """pytest's prepend import mode imports a test file of a folder without __init__.py by its basename (the folder
    goes on sys.path): a second tests/<area>/test_x.py would be the first one's module, and fail to collect."""
    assert duplicate_test_basenames(ROOT / "tests") == {}
    for area in ("system", "measure"):  # the rule itself: two areas with one basename are found
        (tmp_path / area).mkdir()
        (tmp_path / area / "test_x.py").write_text("")
    (tmp_path / "test_y.py").write_text("")
    assert duplicate_test_basenames(tmp_path) == {"test_x.py": ["measure/test_x.py", "system/test_x.py"]}
