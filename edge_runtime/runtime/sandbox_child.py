"""The crash-check child: `python -m edge_runtime.runtime.sandbox_child` reads a JSON request on stdin, loads and runs
the model once (zeros in), and writes a JSON answer on stdout. If a native library crashes, only this process dies;
`sandbox.check` in the parent turns that into an error. It is started so that it dies with its parent.
"""

from __future__ import annotations

import json
import sys


def _child() -> int:
    import numpy as np

    from edge_runtime.errors import EdgeRuntimeError
    from edge_runtime.runtime.load import load

    req = json.loads(sys.stdin.read())
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
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    import warnings

    warnings.simplefilter("ignore")
    sys.exit(_child())
