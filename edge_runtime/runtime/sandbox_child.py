"""The crash-check child: `python -m edge_runtime.runtime.sandbox_child` reads a JSON request on stdin, loads and runs
the model once (zeros in), and writes a JSON answer on stdout. If a native library crashes, only this process dies;
`sandbox.check` in the parent turns that into an error. It is started so that it dies with its parent.

The backend's library is imported first, and `{"imported": ...}` written before the model is touched, so the parent
can tell a library that crashes on import (a broken vendor build, a build for another CPU) from a model that crashes
it. A request `{"status": NAME}` only imports and describes the backend (`edge-runtime info`).
"""

from __future__ import annotations

import json
import sys


def _child() -> int:
    import numpy as np

    from edge_runtime.errors import EdgeRuntimeError
    from edge_runtime.runtime.load import load

    req = json.loads(sys.stdin.read())
    if "status" in req:
        return _status(req["status"])
    try:
        from edge_runtime.runtime import backends

        _say({"imported": backends.get(req["backend"]).library_version()})
    except Exception:  # noqa: BLE001 - not installed, not known: load() below says so in its own words
        pass
    try:
        with load(
            req["model"],
            backend=req["backend"],
            device=req["device"],
            delegate=req["delegate"],
            delegate_options=req["delegate_options"],
            options=req["options"],
            threads=req["threads"],
            fallback=req["fallback"],
            sandbox=False,
        ) as s:
            feeds = {t.name: np.zeros([d or 1 for d in t.shape], dtype=t.dtype) for t in s.inputs}
            s.infer(feeds)
        answer = {"ok": True}
    except EdgeRuntimeError as err:
        answer = {"ok": False, "error": type(err).__name__, "message": err.message, "hint": err.hint}
    except Exception as err:  # noqa: BLE001 - reported to the parent, which decides
        answer = {"ok": False, "error": "ModelError", "message": f"model {req['model']!r}: {type(err).__name__}: {err}"}
    _say(answer)
    return 0


def _say(doc: dict) -> None:
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()


def _status(name: str) -> int:
    from edge_runtime.runtime import backends

    try:
        cls = backends.get(name)
    except Exception as err:  # noqa: BLE001 - a plugin that cannot be imported is a status too
        _say({"installed": False, "error": f"{type(err).__name__}: {err}", "install": ""})
        return 0
    _say(cls.status())
    return 0


if __name__ == "__main__":
    import warnings

    warnings.simplefilter("ignore")
    sys.exit(_child())
