"""The process that runs one model job in a child: `python -m edge_runtime.measure.child_main` reads a job on stdin
({"op": "bench" | "load_check", "request": BenchRequest}) and writes JSON lines on stdout: {"progress": text},
{"warning": text}, then one {"result": ...} or {"error": {"kind", "message"}}.

A child per job, not a thread: the bench pins its whole process (every thread) to the measured CPUs and may take
SCHED_FIFO, which the agent's own threads must not inherit; a delegate that crashes takes the child, not the agent;
and a cancel is a signal, which ends the measured loop at its next chunk with the partial result kept, exactly as
Ctrl-C does for `edge-runtime bench`.
"""

from __future__ import annotations

import json
import signal
import sys
import warnings


def _say(doc: dict) -> None:
    from edge_runtime.files.outputs import dumps

    sys.stdout.write(dumps(doc).replace("\n", " ") + "\n")
    sys.stdout.flush()


def main() -> int:
    from edge_runtime.errors import CheckFailedError, EdgeRuntimeError, Interrupted
    from edge_runtime.measure.loop import StopRequest

    stop = StopRequest()

    def on_signal(signum, frame):
        if stop.armed:
            stop.request(signum)
        else:
            raise Interrupted(signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    try:
        job = json.loads(sys.stdin.read())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = _run(job, stop)
        for w in caught:
            _say({"warning": " ".join(str(w.message).split())})
        _say({"result": result})
        return 0
    except Interrupted as err:
        _say({"error": {"kind": "cancelled", "message": f"cancelled before anything was measured ({err})"}})
    except CheckFailedError as err:
        _say({"error": {"kind": "check-failed", "message": err.one_line()}})
    except EdgeRuntimeError as err:
        _say({"error": {"kind": "user-error" if err.exit_code == 2 else "internal", "message": err.one_line()}})
    except Exception as err:  # noqa: BLE001 - the agent reports it and goes on
        _say({"error": {"kind": "internal", "message": f"{type(err).__name__}: {' '.join(str(err).split())[:500]}"}})
    return 1


def _run(job: dict, stop) -> dict:
    from edge_runtime.measure.request import BenchRequest
    from edge_runtime.system.root import SystemRoot

    request = BenchRequest.from_json(job["request"])
    if job["op"] == "load_check":
        from edge_runtime.runtime.feeds import random_feeds
        from edge_runtime.runtime.load import load

        with load(request.model, **request.load_kwargs()) as session:
            session.infer(random_feeds(session.inputs, request.seed)[0])
            return {
                "backend": session.backend.to_dict(),
                "inputs": [_tensor(t) for t in session.inputs],
                "outputs": [_tensor(t) for t in session.outputs],
            }
    from edge_runtime.measure.bench import run_bench

    stop_result = run_bench(request, SystemRoot("/"), progress=lambda m: _say({"progress": m}), stop=stop)
    return stop_result.result.to_dict()


def _tensor(t) -> dict:
    return {"name": t.name, "shape": [d if isinstance(d, int) else str(d) for d in t.shape], "dtype": str(t.dtype)}


if __name__ == "__main__":
    sys.exit(main())
