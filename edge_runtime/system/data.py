"""Where the board side's data lives: the board profiles (boards/) and the tuning scripts with their unit and init
files (system_tuning/).

Both ship inside the package (edge_runtime/_data/, links to the repository's top-level folders that a wheel build
copies), so a board that installed the wheel, online or offline, has them; a checkout or an editable install reads the
repository's own folders through the same links. An environment variable still points elsewhere
(EDGE_RUNTIME_BOARDS, EDGE_RUNTIME_SCRIPTS): a board's own profiles, or scripts under review.
"""

from __future__ import annotations

import os
from pathlib import Path

from edge_runtime.errors import UserError

VARIABLES = {"boards": "EDGE_RUNTIME_BOARDS", "system_tuning": "EDGE_RUNTIME_SCRIPTS"}


def shipped(name: str) -> Path:
    """The folder the package carries (importlib.resources; imported here, not at start-up: it costs ~15 ms)."""
    from importlib.resources import files

    where = files("edge_runtime") / "_data" / name
    if not isinstance(where, Path):  # a zip import has no folder a shell script could run from
        raise UserError(f"edge_runtime is installed where its {name}/ folder is not a directory ({where})")
    return where


def data_dir(name: str) -> Path:
    """The folder to read `name` from: its environment variable when set, else the one the package carries.

    A package without it (a wheel built before the data travelled, or a broken install) is told in one line naming the
    variable that can point at a copy."""
    variable = VARIABLES[name]
    env = os.environ.get(variable)
    if env:
        from edge_runtime.files.inputs import check_input

        check_input(env, variable, directory=True)  # a mistyped variable is said, not read as "nothing there"
        return Path(env)
    if name not in _FOUND:  # the package's folder does not move: found once a process (a later drop of privileges
        where = shipped(name)  # must not turn a folder read before into an error)
        try:
            ok = where.is_dir()
        except OSError as err:
            from edge_runtime.files.inputs import reason

            raise UserError(f"this edge_runtime installation's {name}/ folder {str(where)!r}: {reason(err)}") from None
        if not ok:
            raise UserError(
                f"this edge_runtime installation has no {name}/ folder (looked in {where})",
                hint=f"reinstall the edge-runtime wheel, or set {variable} to a copy of the repository's {name}/",
            )
        _FOUND[name] = where
    return _FOUND[name]


_FOUND: dict[str, Path] = {}
