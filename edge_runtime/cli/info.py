"""`edge-runtime info`: backends, devices and delegates installed; CPUs and isolation; the board."""

from __future__ import annotations

import platform

import numpy as np

from edge_runtime import __version__
from edge_runtime.cli.common import sysroot
from edge_runtime.program.args import add_debug, add_json, add_sysroot, emit_json, plan_outputs


def add_arguments(p) -> None:
    add_sysroot(p)
    add_json(p)
    add_debug(p)


def run(args) -> int:
    from edge_runtime.runtime import backends
    from edge_runtime.system.boards import detect

    root = sysroot(args.sysroot)
    outs = plan_outputs([("--json", args.json)], root=root)
    from edge_runtime.runtime.sandbox import statuses

    found = statuses(backends.names())  # each library imported in its own child: one that crashes is reported
    iso = root.isolation()
    profile = detect(root)
    doc = {
        "schema": "edge-runtime/info/1",
        "edge_runtime": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "sysroot": str(root.root),
        "board": root.board_model() or None,
        "board_profile": None
        if profile is None
        else {
            "name": profile.name,
            "description": profile.description,
            "suggested_isolated_cpus": profile.suggested_isolated(root.online_cpus()),
            "npu": profile.npu.kind,
            "cmdline_file": profile.cmdline.file,
        },
        "cpu_model": root.cpu_model() or None,
        "cpu_clusters": [c.to_dict() for c in root.cpu_clusters()],
        "kernel": root.kernel() or None,
        "cpus": {"online": root.online_cpus(), "isolated": iso.get("sysfs_isolated", [])},
        "isolation": {k: v for k, v in iso.items() if k != "sysfs_isolated"},
        "backends": found,
    }
    if emit_json(doc, outs):
        return 0
    print(render(doc), end="")
    return 0


def render(doc: dict) -> str:
    from edge_runtime.system.cpulist import format_cpu_list

    lines = [f"edge-runtime {doc['edge_runtime']}  (python {doc['python']}, numpy {doc['numpy']})"]
    lines.append(f"  board    {doc['board'] or 'unknown (no device-tree model or DMI product here)'}")
    bp = doc["board_profile"]
    if bp:
        iso_hint = format_cpu_list(bp["suggested_isolated_cpus"]) or "-"
        lines.append(f"  profile  {bp['name']}: {bp['description']}; isolate CPU {iso_hint} (--cpus board)")
    lines.append(f"  cpu      {doc['cpu_model'] or 'unknown'}")
    if len(doc.get("cpu_clusters") or []) > 1:
        parts = [f"{c['name']} on CPU {format_cpu_list(c['cpus'])}" for c in doc["cpu_clusters"]]
        lines.append(f"  clusters {'; '.join(parts)} (smallest first)")
    lines.append(f"  kernel   {doc['kernel'] or 'unknown'}")
    online, isolated = doc["cpus"]["online"], doc["cpus"]["isolated"]
    lines.append(f"  cpus     online {format_cpu_list(online) or '?'}, isolated {format_cpu_list(isolated) or 'none'}")
    parts = []
    for k, v in doc["isolation"].items():
        if k == "garbled":
            parts += [f"{g}={raw!r} (garbled)" for g, raw in v.items()]
        else:
            parts.append(f"{k}={format_cpu_list(v)}")
    lines.append(f"  isolation {'  '.join(parts) or 'none on the kernel command line'}")
    lines.append("backends")
    for name, b in doc["backends"].items():
        if b.get("unusable"):
            lines.append(f"  {name:<12} unusable        {b['error']}")
        elif not b["installed"]:
            lines.append(f"  {name:<12} not installed   ({b.get('install') or b.get('error', '')})")
        else:
            lines.append(f"  {name:<12} {b['version']:<10} devices: {', '.join(b['devices'])}   {b['summary']}")
    return "\n".join(lines) + "\n"
