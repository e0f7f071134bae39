"""Prometheus textfile output (node_exporter's textfile collector): the last run's latency quantiles and thermal
budget, so a board already scraped by Prometheus shows them."""

from __future__ import annotations

from edge_runtime.errors import UserError

QUANTILES = {"0.5": "p50", "0.9": "p90", "0.99": "p99", "0.999": "p999", "0.9999": "p9999"}


def textfile(result: dict) -> bytes:
    """The result as Prometheus text exposition (prometheus-client's own encoder); the caller writes it atomically
    through edge_runtime.files.outputs, as node_exporter's textfile collector needs."""
    try:
        from prometheus_client import CollectorRegistry, Gauge, generate_latest
    except ImportError as err:
        raise UserError("--prom needs the prometheus-client package", hint="pip install 'edge-runtime[prom]'") from err
    reg = CollectorRegistry()
    model = result["model"]["path"].rsplit("/", 1)[-1]
    b = result["backend"]
    labels = {"model": model, "backend": b["name"], "device": str(b["device"])}
    names = list(labels)
    lat = Gauge(
        "edge_runtime_latency_seconds",
        "Inference latency quantiles of the last run (nearest rank)",
        [*names, "quantile"],
        registry=reg,
    )
    for q, key in QUANTILES.items():
        lat.labels(**labels, quantile=q).set(result["latency_us"][key] / 1e6)
    Gauge("edge_runtime_latency_max_seconds", "Largest latency of the last run", names, registry=reg).labels(
        **labels
    ).set(result["latency_us"]["max"] / 1e6)
    if result.get("throughput_ips") is not None:  # unknown is left out, never exported as 0
        Gauge(
            "edge_runtime_throughput_inferences_per_second", "Throughput of the last run", names, registry=reg
        ).labels(**labels).set(result["throughput_ips"])
    # A partial run (stopped at the thermal limit or by a signal) must not read like a complete one on a dashboard.
    aborted = result.get("aborted") or {}
    Gauge(
        "edge_runtime_run_complete",
        "1 when the last run measured all it was asked to, 0 when it stopped early",
        names,
        registry=reg,
    ).labels(**labels).set(0 if aborted else 1)
    if aborted:
        Gauge("edge_runtime_run_aborted", "Why the last run stopped early", [*names, "kind"], registry=reg).labels(
            **labels, kind=str(aborted.get("kind", "unknown"))
        ).set(1)
    Gauge("edge_runtime_latency_samples", "Inferences timed in the last run", names, registry=reg).labels(**labels).set(
        result["latency_us"]["count"]
    )
    t = result.get("thermal") or {}  # a server's record has none: the board's sensors are not the server's
    if t.get("available"):
        temp = Gauge(
            "edge_runtime_temperature_celsius", "Hottest sensor during the last run", [*names, "stage"], registry=reg
        )
        for stage in ("start", "max", "end"):
            if t.get(f"{stage}_c") is not None:
                temp.labels(**labels, stage=stage).set(t[f"{stage}_c"])
        if t.get("headroom_c") is not None:
            Gauge(
                "edge_runtime_thermal_headroom_celsius", "Thermal limit minus the hottest reading", names, registry=reg
            ).labels(**labels).set(t["headroom_c"])
        Gauge("edge_runtime_throttled", "1 when the last run was throttled", names, registry=reg).labels(**labels).set(
            1 if t.get("throttled") else 0
        )
    if (result.get("power") or {}).get("available") and result["power"].get("energy_per_inference_uj") is not None:
        Gauge(
            "edge_runtime_energy_per_inference_joules", "From the board's own power rail", names, registry=reg
        ).labels(**labels).set(result["power"]["energy_per_inference_uj"] / 1e6)
    return generate_latest(reg)
