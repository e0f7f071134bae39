"""The client side of a server target's run: where its load is generated (this process, or several client processes:
procs.py) and what the client itself cost, so a record can say when the client, not the server, was the limit.

`run_load` runs a request on `workers` connections: in this process when `processes` is 1 (the engine's
run_request, unchanged), else over child processes. Either way it measures the client's CPU over the timed part
(os.times of each client process, from its start instant to its end; the parent's own share added when there are
children) and the machine's (psutil's system-wide CPU times), and `client_section` turns that into the record's
`server.client` section:

    processes, workers, engine (and why), cpu_s, cpu_us_per_query, busiest_process_share (of one core),
    cores (usable here), cores_share (the client's CPU over the cores it could use), machine_busy_share,
    client_bound, rule, clock

The rule: the client was the bottleneck when one of its processes was busy at least 80% of the run's wall time
(PROCESS_BOUND_SHARE: a Python client process cannot do much more than one core of work, the interpreter lock; on a
machine it shares with the server or others a saturated one gets less than a core: 78-88% measured here for one
tritonclient process held at ~5,000 queries/s by its own CPU; and at 80% busy its own queueing already costs about
four times its work per query, M/M/1's rho/(1-rho)), or when all of them together used at least 90% of the cores
they could use (CLIENT_BOUND_SHARE). A per-thread run-queue figure (schedstat) was tried and dropped: summed over a
Python process's threads it counts every thread that wakes to ask for the interpreter lock (6-12x the wall time).
Then `client_bound` is true and the run carries the warning "client-bound: ...": its throughput is the client's and
its latency includes the client's own queueing, so neither is the server's. A machine at least 90% busy while the
client was not bound is said too (a server on the same host then competes with the client for the CPUs), without
the flag.
"""

from __future__ import annotations

from bench.scenarios import procs

PROCESS_BOUND_SHARE = 0.8  # one client process, of one core
CLIENT_BOUND_SHARE = 0.9  # all of them, of the cores they could use
RULE = (
    f"client-bound when one client process was busy >= {PROCESS_BOUND_SHARE:.0%} of the run (the interpreter lock: "
    f"about one core each) or all of them used >= {CLIENT_BOUND_SHARE:.0%} of the cores they could use"
)
CLOCK = "CLOCK_MONOTONIC (perf_counter_ns): one clock for every client process on this machine"


def _machine_busy() -> tuple[float, float] | None:
    try:
        import psutil
    except ImportError:
        return None
    t = psutil.cpu_times()
    return t.idle + getattr(t, "iowait", 0.0), sum(t)


def run_load(request, spec, *, workers: int, processes: int, should_stop=None, say=None, on_start=None):
    """(the run, a HostRun; what client_section reads: processes, CPU seconds per process, the machine's busy share)."""
    from bench.scenarios.engine import run_request

    machine: dict = {}
    marks: dict = {}

    def started() -> None:
        if on_start is not None:
            on_start()
        machine["before"] = _machine_busy()
        marks["cpu"] = procs._cpu_s()

    if processes <= 1:
        make_sender, examples = spec.factory()
        run = run_request(request, make_sender, workers=workers, should_stop=should_stop, say=say, on_start=started)
        for k, v in examples.items():
            run.examples.setdefault(k, v)
        cpu = [procs._cpu_s() - marks["cpu"]] if "cpu" in marks else []
        kept_processes = 1
    else:
        kind = request.scenario or "single-stream"
        closed = kind in ("single-stream", "offline")
        plan = None
        if not closed:
            from edge_runtime.measure.schedule import plan_for

            plan = plan_for(request, *request.length)
        jobs = procs.split_jobs(request, workers, processes, closed, plan)
        run, cpu = procs.run_processes(request, spec, jobs, should_stop=should_stop, say=say, on_start=started)
        kept_processes = len(jobs)
    after = _machine_busy()
    busy = None
    if machine.get("before") and after:
        idle = after[0] - machine["before"][0]
        total = after[1] - machine["before"][1]
        busy = round(1 - idle / total, 3) if total > 0 else None
    return run, {"processes": kept_processes, "cpu_per_process_s": cpu, "machine_busy_share": busy}


def client_section(run, info: dict, engine: str, why: str = "") -> tuple[dict, list[str]]:
    """The record's `server.client` section from run_load's `info`, and the warnings it implies (`warnings_of`)."""
    cpu = [c for c in info.get("cpu_per_process_s") or [] if c is not None]
    processes = info.get("processes", 1)
    wall = run.wall_s or 0.0
    queries = len(run.errors) - run.kinds.get("not sent", 0)
    cores = min(max(1, processes), procs.usable_cpus())
    children = cpu[:processes] if processes > 1 else cpu
    total = sum(cpu)
    busiest = max(children) / wall if children and wall > 0 else None
    share = total / (wall * cores) if wall > 0 and cpu else None
    bound = bool((busiest or 0) >= PROCESS_BOUND_SHARE or (share or 0) >= CLIENT_BOUND_SHARE)
    section = {
        "processes": processes,
        "workers": run.concurrency,
        "engine": engine,
        "engine_why": why,
        "cpu_s": round(total, 4) if cpu else None,
        "cpu_us_per_query": round(total / queries * 1e6, 2) if cpu and queries else None,
        "busiest_process_share": round(busiest, 3) if busiest is not None else None,
        "cores": cores,
        "cores_share": round(share, 3) if share is not None else None,
        "machine_busy_share": info.get("machine_busy_share"),
        "client_bound": bound,
        "rule": RULE,
        "clock": CLOCK,
    }
    return section, warnings_of(section)


def warnings_of(section: dict) -> list[str]:
    """What a client section says as warnings: client-bound, or a machine the server and client shared to the full."""
    warnings = []
    busiest, processes = section.get("busiest_process_share"), section.get("processes")
    if section.get("client_bound"):
        warnings.append(f"client-bound: the client, not the server, was the limit (busiest client process "
                        f"{(busiest or 0):.0%} of a core, {processes} process(es), {section['cpu_us_per_query']} us "
                        "of client CPU per query): throughput is the client's and latency includes its own queueing; "
                        "more client processes (?processes=N) or a faster engine (?engine=fast) may help")  # fmt: skip
    elif (section.get("machine_busy_share") or 0) >= CLIENT_BOUND_SHARE:
        busy = section["machine_busy_share"]
        warnings.append(f"this machine's CPUs were {busy:.0%} busy during the run: a server on the same host "
                        "competes with the client for them")  # fmt: skip
    return warnings
