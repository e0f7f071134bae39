"""Metric samplers: what else was measured during a run, beside the latencies a target returns. nvml.py (a local
NVIDIA GPU, through NVML), prometheus.py (a server's Prometheus endpoint, e.g. Triton's `/metrics`), kserve_stats.py
(a KServe v2 server's statistics extension). Never: import a target, the campaign or the CLI (targets import these)."""
