"""Where a run happened: the observed system (from the system root only) and the process that measured (this
machine's Python and packages). Read once per run and kept with the result, so runs from different boards are never
mixed up.
"""

from __future__ import annotations

import platform
from collections.abc import Iterable

from edge_runtime.system.root import SystemRoot


def installed_version(dist: str) -> str | None:
    """The installed version of a distribution (`pip show`'s), or None when it is not installed: the one lookup the
    results, the backends and the quantizer's report share. importlib.metadata is imported here, on first use (it
    pulls in email, zipfile and csv, ~10 ms a process that never asks)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def packages(distributions: Iterable[str]) -> dict[str, str]:
    """Installed versions of these distributions (the ones not installed are left out)."""
    return {dist: v for dist in distributions if (v := installed_version(dist)) is not None}


def environment(root: SystemRoot, cpus: list[int] | None, package_versions: dict[str, str]) -> dict:
    """Where the run happened. The observed system (board, firmware, kernel, command line, CPU, governors, isolation)
    comes from the system root and only from it: with --sysroot a captured tree describes a board, and nothing of this
    machine is mixed in. What belongs to the process (Python, packages, the kernel it really ran on) is this
    machine's, and `measured_on` says so whenever the two differ."""
    govs = root.governors()
    env = {
        "sysroot": str(root.root),
        "board": root.board_model() or None,
        "firmware": root.firmware() or None,
        "kernel": root.kernel() or (platform.release() if root.is_live else None),
        "cmdline": root.read("/proc/cmdline"),  # None when the tree has none: unknown, not empty
        "cpu_model": root.cpu_model() or ((platform.processor() or None) if root.is_live else None),
        "governor": {str(c): govs[c] for c in (cpus or govs) if c in govs},
        "isolated_cpus": root.cpus("isolated") if not root.is_live else (root.cpus("isolated") or []),
        "online_cpus": root.online_cpus() or None,
        "python": platform.python_version(),
        "packages": package_versions,
        "hostname": platform.node() if root.is_live else root.read("/proc/sys/kernel/hostname"),
    }
    if not root.is_live:
        live = SystemRoot("/")
        env["measured_on"] = {
            "note": "the model ran on this machine; board, firmware, kernel, cmdline, cpu_model, governor, CPU sets "
            "and hostname above were read from the --sysroot tree (null: the tree does not say)",
            "hostname": platform.node(),
            "kernel": live.kernel() or platform.release(),
            "cpu_model": live.cpu_model() or platform.processor() or None,
            "online_cpus": live.online_cpus(),
        }
    return env
