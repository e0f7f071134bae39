"""What the board's commands share beyond the program's toolkit (edge_runtime/program/): the --sysroot tree and the
--input files a model is fed. No command logic here.
"""

from __future__ import annotations

import os

from edge_runtime.errors import FeedError, UsageError
from edge_runtime.files.inputs import check_input


def sysroot(path: str):
    """The --sysroot tree, checked to be a directory."""
    from edge_runtime.system.root import SystemRoot

    check_input(path, "--sysroot", error=UsageError, directory=True)
    return SystemRoot(path)


def load_inputs(specs: list[str] | None, session, seed: int) -> tuple[dict, dict[str, str]]:
    import numpy as np

    from edge_runtime.files.inputs import load_npy
    from edge_runtime.runtime.feeds import random_feeds

    given: dict[str, np.ndarray] = {}
    names = [t.name for t in session.inputs]
    for spec in specs or []:
        # NAME=FILE when NAME is one of the model's inputs; otherwise the whole value is a path (paths may hold '=').
        name, sep, file = spec.partition("=")
        if not sep or name not in names:
            if sep and len(names) > 1:
                raise FeedError(
                    f"--input {spec!r}: the model has no input {name!r}", hint=f"its inputs are: {', '.join(names)}"
                )
            if len(names) != 1:
                raise FeedError(
                    f"--input {spec!r}: the model has {len(names)} inputs; write NAME=FILE.npy",
                    hint=f"its inputs are: {', '.join(names)}",
                )
            name, file = names[0], spec
        if name in given:
            raise FeedError(f"--input {spec!r}: input {name!r} is given twice")
        if not os.path.lexists(file):
            if file == spec and sep and os.path.lexists(spec.partition("=")[2]):
                # NAME=FILE where FILE exists but NAME is no input of the model: say that, not "no such file".
                raise FeedError(
                    f"--input {spec!r}: the model has no input {spec.partition('=')[0]!r}",
                    hint=f"its input is {names[0]!r}: write {names[0]}={spec.partition('=')[2]} or the file alone",
                )
            raise FeedError(f"--input {spec!r}: no such file {file!r}")
        arr = load_npy(file, "--input", error=FeedError)
        want = next(t.dtype for t in session.inputs if t.name == name)
        if arr.dtype.kind in "fc" or want.kind == "f":
            with np.errstate(over="ignore", invalid="ignore"):
                as_input = arr.astype(want) if arr.dtype.kind in "fiub" and want.kind in "fiu" else arr
            if as_input.dtype.kind in "fc" and not np.isfinite(as_input).all():
                bad = int(np.count_nonzero(~np.isfinite(as_input)))
                raise FeedError(
                    f"--input {spec!r}: {bad} value(s) are NaN or infinite as {want} (a model's answer to them "
                    "means nothing)"
                )
        given[name] = arr
    return random_feeds(session.inputs, seed, given)


