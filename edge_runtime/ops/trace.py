"""The ops of a report as a Chrome trace (JSON) that Perfetto (ui.perfetto.dev) and chrome://tracing open.

One mean inference, laid out op after op in the order the engine ran them, each a complete ("X") event as long as
its mean time, on one track per place (device, provider or delegate), the overhead row last on its own track, and
the whole inference above them. The format: the Trace Event Format's object form, {"traceEvents": [...],
"displayTimeUnit": "ns"}, ts and dur in microseconds (research 29, section 4). Built from the rows only: it shows
means, not one real run.
"""

from __future__ import annotations

from edge_runtime.ops.record import OVERHEAD, OpsReport

PID = 1


def chrome_trace(report: OpsReport) -> dict:
    """The trace of `report`'s rows (rows without a time are left out: fused ops, in-place ops)."""
    engine = report.engine
    events: list[dict] = [
        _meta("process_name", {"name": f"{engine.get('name')} {report.device}: {_model_name(report)}"}),
        _meta("thread_name", {"name": f"inference (mean of {report.runs} profiled runs)"}, tid=0),
    ]
    tracks: dict[str, int] = {}
    ts = 0.0
    for row in report.ops:
        if row.mean_us is None or row.mean_us <= 0:
            continue
        track = "overhead" if row.status == OVERHEAD else row.where
        if track not in tracks:
            tracks[track] = len(tracks) + 1
            events.append(_meta("thread_name", {"name": track}, tid=tracks[track]))
        args = {
            "type": row.type,
            "where": row.where,
            "kernel": row.kernel,
            "precision": row.precision,
            "mean_us": round(row.mean_us, 3),
            "p99_us": row.p99_us,
            "share": None if row.share is None else round(row.share, 4),
            "status": row.status,
        }
        events.append(
            {
                "name": row.name,
                "cat": row.type,
                "ph": "X",
                "ts": round(ts, 3),
                "dur": round(row.mean_us, 3),
                "pid": PID,
                "tid": tracks[track],
                "args": {k: v for k, v in args.items() if v is not None},
            }
        )
        ts += row.mean_us
    if ts > 0:
        events.append(
            {
                "name": "inference",
                "cat": "run",
                "ph": "X",
                "ts": 0.0,
                "dur": round(ts, 3),
                "pid": PID,
                "tid": 0,
                "args": {"verdict": report.verdict, "time_source": report.time_source},
            }
        )
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def _meta(name: str, args: dict, tid: int | None = None) -> dict:
    event = {"ph": "M", "name": name, "pid": PID, "args": args}
    if tid is not None:
        event["tid"] = tid
    return event


def _model_name(report: OpsReport) -> str:
    return str(report.model.get("path", "")).rsplit("/", 1)[-1]
