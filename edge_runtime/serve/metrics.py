"""`/metrics` of `edge-runtime serve` (issue 26): Prometheus text, drawn fresh from the Core at each scrape.

The counters carry Triton's metric names (`nv_inference_request_success`, `nv_inference_queue_duration_us`...) with its
`model` and `version` labels, so a dashboard or a scraper made for a GPU server reads a board the same way; what
Triton does not have is named `edge_serve_*`: the rejections of a full queue, the requests dropped past their
deadline, the queue's depth, and the heat (temperature, limit, headroom, whether new work is refused now, the seconds
spent refusing and the crossings). Encoded by prometheus-client (the `[serve]` extra).
"""

from __future__ import annotations

from edge_runtime.errors import UserError

_TRITON = (
    # name, help, how to read it from one model's statistics
    ("nv_inference_request_success", "Number of successful inference requests", lambda s: s["success"]["count"]),
    ("nv_inference_request_failure", "Number of failed inference requests", lambda s: s["fail"]["count"]),
    ("nv_inference_count", "Number of inferences performed (rows)", None),
    ("nv_inference_exec_count", "Number of model executions (batches)", None),
    ("nv_inference_request_duration_us", "Cumulative request duration in us", lambda s: s["success"]["ns"] / 1e3),
    ("nv_inference_queue_duration_us", "Cumulative queue duration in us", lambda s: s["queue"]["ns"] / 1e3),
    (
        "nv_inference_compute_input_duration_us",
        "Cumulative compute input duration in us",
        lambda s: s["compute_input"]["ns"] / 1e3,
    ),
    (
        "nv_inference_compute_infer_duration_us",
        "Cumulative compute inference duration in us",
        lambda s: s["compute_infer"]["ns"] / 1e3,
    ),
    (
        "nv_inference_compute_output_duration_us",
        "Cumulative inference compute output duration in us",
        lambda s: s["compute_output"]["ns"] / 1e3,
    ),
)
_OURS = (
    ("edge_serve_rejected", "Requests refused at once because the queue was full", "rejected"),
    ("edge_serve_expired", "Requests dropped before running because their deadline had passed", "expired"),
    ("edge_serve_cancelled", "Requests cancelled by their caller before running", "cancelled"),
)
_HEAT = (
    ("edge_serve_temperature_celsius", "Hottest sensor now", "temperature_c"),
    ("edge_serve_thermal_limit_celsius", "Temperature at which new work is refused", "limit_c"),
    ("edge_serve_thermal_headroom_celsius", "Degrees left below the thermal limit", "headroom_c"),
    ("edge_serve_thermal_refusing", "1 while new work is refused for heat", "refusing"),
    ("edge_serve_thermal_refused_seconds_total", "Seconds spent refusing new work for heat", "refused_s"),
    ("edge_serve_thermal_crossings_total", "Times the limit was crossed upwards", "crossings"),
)


def _TritonCounter(name: str, doc: str):
    """Triton's counter under Triton's own name: prometheus-client writes a counter as `NAME_total`, which Triton's
    are not, so it goes out untyped (a scraper reads its samples the same; only the TYPE line differs)."""
    from prometheus_client.core import Metric

    fam = Metric(name, doc + " (a counter)", "unknown")

    def add_metric(label_values, value) -> None:
        fam.add_sample(name, dict(zip(("model", "version"), label_values, strict=True)), value)

    fam.add_metric = add_metric
    return fam


class _Collector:
    def __init__(self, core):
        self.core = core

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        stats = self.core.statistics()
        labels = ["model", "version"]
        fams = {name: _TritonCounter(name, doc) for name, doc, _ in _TRITON}
        ours = {name: CounterMetricFamily(name, doc, labels=labels) for name, doc, _ in _OURS}
        queued = GaugeMetricFamily("edge_serve_queue_depth", "Requests waiting for a batch now", labels=labels)
        for m in stats["model_stats"]:
            lv = [m["name"], m["version"]]
            inf = m["inference_stats"]
            for name, _, read in _TRITON:
                if read is not None:
                    fams[name].add_metric(lv, read(inf))
            fams["nv_inference_count"].add_metric(lv, m["inference_count"])
            fams["nv_inference_exec_count"].add_metric(lv, m["execution_count"])
            for name, _, key in _OURS:
                ours[name].add_metric(lv, m[key])
            queued.add_metric(lv, m["queued"])
        yield from fams.values()
        yield from ours.values()
        yield queued
        ready = GaugeMetricFamily("edge_serve_ready", "1 while the server takes new work")
        ready.add_metric([], 1 if self.core.ready() else 0)
        yield ready
        heat = stats.get("thermal")
        if heat:
            for name, doc, key in _HEAT:
                value = heat.get(key)
                if value is None:
                    continue
                fam = (CounterMetricFamily if name.endswith("_total") else GaugeMetricFamily)(name, doc)
                fam.add_metric([], float(value))
                yield fam


def exposition(core) -> tuple[bytes, str]:
    """The Core's counters as Prometheus text, and the content type to send them with."""
    try:
        from prometheus_client import CollectorRegistry, generate_latest
        from prometheus_client.exposition import CONTENT_TYPE_LATEST
    except ImportError as err:
        hint = "pip install 'edge-runtime[serve]'"
        raise UserError("/metrics needs the prometheus-client package", hint=hint) from err
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Collector(core))
    return generate_latest(reg), CONTENT_TYPE_LATEST
