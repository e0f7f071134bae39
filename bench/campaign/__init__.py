"""Campaign files (TOML) as typed records: which targets, models and scenarios, how many repetitions, which SLOs.

    [campaign]   name, repetitions, ops (true: every run of a target that can profile carries a per-op profile)
    [[target]]   name, url, and for the board: cpus, threads, backend, device, token_file, reconnect_for (seconds a
                 board's lost link is tried again before its run fails; default 60); [target.slo] overrides
    [[model]]    name, path
    [[scenario]] kind, duration_s | iterations, warmup_s | warmup, min_duration_s, min_queries, and the kind's own
                 keys (bench/scenarios: rate_qps; samples_per_query, interval_ms; burst_on_s, burst_off_s; arrivals)
    [slo]        p50_ms, p90_ms, p99_ms, p999_ms, max_ms, error_budget

A key that is close to a known one (a typo) is an error naming the file, the table, the key and what it may be; a key
that resembles nothing known is a warning (a newer file read by an older edge-bench). Paths are relative to the file.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

from bench.scenarios import ALL_KEYS, CAMPAIGN_KEY, DEFAULTS, KINDS, Scenario, keys_of
from bench.slo import SLO, SLO_KEYS
from bench.targets.base import TargetInfo
from edge_runtime.errors import UserError
from edge_runtime.files.toml import MAX_UNKNOWN_SHOWN as MAX_UNKNOWN_SHOWN  # the cap, said where campaigns are
from edge_runtime.files.toml import Where, array, check_keys, number, read_toml, table, text, whole
from edge_runtime.measure.request import SCENARIO_KEYS, SCENARIO_OPTIONAL

KEYS = {
    "campaign": {"name", "repetitions", "description", "ops"},
    "target": {"name", "url", "cpus", "threads", "backend", "device", "token_file", "slo", "headers", "reconnect_for"},
    "model": {"name", "path"},
    "scenario": {
        "kind",
        "duration_s",
        "iterations",
        "warmup_s",
        "warmup",
        "min_duration_s",
        "min_queries",
        "concurrency",
        *ALL_KEYS,
    },
    "slo": {*SLO_KEYS, "error_budget"},
}
TOP = {"campaign", "target", "model", "scenario", "slo"}
MAX_REPETITIONS = 1000
MAX_CAMPAIGN_BYTES = 16 << 20
# (above, at most) for the scenarios' numbers: the bounds BenchRequest.validate() applies
WEEK_S = 7 * 86400
BOUNDS = {"rate_qps": (0, 1e6), "interval_ms": (0, 3.6e6), "burst_on_s": (0, WEEK_S), "burst_off_s": (-1e-9, WEEK_S)}


class CampaignWarning(UserWarning):
    """A key this version does not know (a newer file?): ignored, said once."""


@dataclass(frozen=True)
class Target:
    name: str
    url: str
    cpus: str | None = None
    threads: int | None = None
    backend: str | None = None
    device: str | None = None
    token_file: str | None = None
    slo: SLO | None = None
    headers: dict | None = None  # a server target's HTTP/gRPC headers (an access token: "${VAR}" reads the environment)
    reconnect_for: float = 60.0  # a board's link lost for longer fails its run

    @property
    def info(self) -> TargetInfo:
        """What its kind declares (board or server, the options it takes), from the registry, without connecting."""
        from bench.targets.registry import target_class

        return target_class(self.url).info

    def ops_refusal(self) -> str | None:
        """Why this target's runs cannot carry a per-op profile (a server, firmware, a local GPU), or None."""
        from bench.targets.registry import target_class

        return target_class(self.url).ops_refusal(self.url, device=self.device)


@dataclass(frozen=True)
class Model:
    name: str
    path: str


@dataclass(frozen=True)
class Campaign:
    name: str
    path: str
    repetitions: int
    targets: tuple[Target, ...]
    models: tuple[Model, ...]
    scenarios: tuple[Scenario, ...]
    slo: SLO
    ops: bool = False  # [campaign] ops = true: a per-op profile (edge_runtime/ops/) in each run that can carry one

    def ops_for(self, target: Target) -> bool:
        """Whether `target`'s runs ask for a per-op profile: the campaign asks and the target can."""
        return self.ops and target.ops_refusal() is None

    def no_ops(self) -> list[tuple[str, str]]:
        """(target name, why) for each target whose runs carry no per-op profile though the campaign asks for one:
        what the reports say once, instead of a missing chart per run."""
        if not self.ops:
            return []
        return [(t.name, why) for t in self.targets if (why := t.ops_refusal()) is not None]

    def plan(self) -> list[tuple[int, Scenario, Model, Target]]:
        """Every run, in the order they run: repetitions outermost, targets innermost, so whatever drifts (heat, a
        neighbour's load) falls on every target alike."""
        return [(r, s, m, t) for r in range(self.repetitions) for s in self.scenarios for m in self.models
                for t in self.targets]  # fmt: skip


def load(path: str) -> Campaign:
    where = Where(f"campaign {path!r}", warning=CampaignWarning)
    doc = read_toml(path, where, "campaign", max_bytes=MAX_CAMPAIGN_BYTES)
    check_keys(where, "the top level", doc, TOP)
    base = os.path.dirname(os.path.abspath(path))
    camp = table(where, doc, "campaign", KEYS["campaign"])
    name = text(where, "[campaign] name", camp.get("name", os.path.splitext(os.path.basename(path))[0]))
    reps = whole(where, "[campaign] repetitions", camp.get("repetitions", 1), 1, MAX_REPETITIONS)
    ops = camp.get("ops", False)
    if not isinstance(ops, bool):  # "yes", 1: a TOML boolean only, so a quoted word is never read as true
        raise UserError(f"{where}: [campaign] ops {ops!r}: true or false")
    target_tables, model_tables = (array(where, doc, name, needed_by="a campaign") for name in ("target", "model"))
    targets = tuple(_target(where, i, t, base) for i, t in enumerate(target_tables))
    models = tuple(_model(where, i, m, base) for i, m in enumerate(model_tables))
    scenario_tables = array(where, doc, "scenario")
    scenarios = tuple(_scenario(where, i, s, base) for i, s in enumerate(scenario_tables))
    for what, items in (("target", targets), ("model", models)):
        names = [x.name for x in items]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise UserError(f"{where}: [[{what}]] name {sorted(dup)[0]!r} is given twice")
    slo = _slo(where, "[slo]", doc.get("slo", {}))
    _cross_check(where, targets, models, scenarios)
    boards = [t.name for t in targets if "concurrency" not in t.info.takes]
    if boards and any((s.concurrency or 1) > 1 for s in scenarios):
        warnings.warn(f"{where}: concurrency applies to server targets; {', '.join(map(repr, boards))} run one query "
                      "at a time", CampaignWarning, stacklevel=2)  # fmt: skip
    where.warn_the_rest()
    scenarios = scenarios or (Scenario("single-stream", iterations=1000),)
    return Campaign(name, path, reps, targets, models, scenarios, slo, ops)


def _cross_check(where: Where, targets, models, scenarios) -> None:
    """What would otherwise fail only when its run's turn came (after other runs had run, exit 1 like an SLO miss):
    a model file no backend reads, a backend or CPUs this machine does not have for a `local:` target, a backend that
    cannot read a model, a schedule longer than a run keeps."""
    from edge_runtime.errors import EdgeRuntimeError
    from edge_runtime.measure.schedule import MAX_QUERIES
    from edge_runtime.runtime.model import inspect_model

    formats = {}
    for m in models:
        try:
            formats[m.name] = inspect_model(m.path).format
        except EdgeRuntimeError as err:
            raise UserError(f"{where}: [[model]] {m.name!r}: {err.one_line()}") from None
    for t in targets:  # a board's backends and CPUs are the board's: its agent says what is wrong, in one line
        from bench.targets.registry import target_class
        from edge_runtime.system.cpulist import parse_cpu_list

        cls = target_class(t.url)
        try:
            cls.preflight(t.url, backend=t.backend, cpus=tuple(parse_cpu_list(t.cpus)) if t.cpus else None,
                          models={f"[[model]] {m.name!r}": formats[m.name] for m in models})  # fmt: skip
        except UserError as err:
            raise UserError(f"{where}: [[target]] {t.name!r} {err.one_line()}") from None
        runs = cls.info.scenarios
        for sc in scenarios:
            if runs is not None and sc.kind not in runs:
                raise UserError(f"{where}: [[target]] {t.name!r}: kind = {sc.kind!r} is not a scenario it runs "
                                f"({', '.join(sorted(runs))})")  # fmt: skip
    for i, sc in enumerate(scenarios):
        per_s = {
            "server": sc.rate_qps,
            "burst": (sc.rate_qps or 0) * (sc.burst_on_s or 0) / ((sc.burst_on_s or 0) + (sc.burst_off_s or 0) or 1),
            "multi-stream": 1e3 / sc.interval_ms if sc.interval_ms else None,
        }.get(sc.kind)
        if per_s and sc.duration_s and per_s * sc.duration_s > MAX_QUERIES:
            n = per_s * sc.duration_s
            raise UserError(f"{where}: [[scenario]] #{i + 1} ({sc.kind}): {per_s:g} queries/s for {sc.duration_s:g} "
                            f"s is {n:,.0f} queries, over the {MAX_QUERIES:,} a run keeps")  # fmt: skip


def _target(where: Where, i: int, t: dict, base: str) -> Target:
    table = f"[[target]] #{i + 1}"
    check_keys(where, table, t, KEYS["target"])
    name = text(where, f"{table} name", t.get("name", f"target{i + 1}"))
    url = text(where, f"[[target]] {name!r} url", t.get("url"))
    from bench.targets.registry import check

    try:
        cls = check(url)  # a scheme that names nothing is refused now, not when its turn comes
        url = cls.with_base(url, base)  # files its URL names, relative to the campaign as the models are
        info = cls.info
    except UserError as err:
        raise UserError(f"{where}: [[target]] {name!r}: {err.one_line()}") from None
    threads = t.get("threads")
    if threads is not None:
        threads = whole(where, f"[[target]] {name!r} threads", threads, 1, 1024)
    token = t.get("token_file")
    if token is not None:
        token = os.path.join(base, text(where, f"[[target]] {name!r} token_file", token))
    cpus = t.get("cpus")
    if cpus is not None:
        cpus = str(cpus)
        from edge_runtime.system.cpulist import parse_cpu_list

        try:
            parse_cpu_list(cpus)
        except ValueError as err:
            raise UserError(f"{where}: [[target]] {name!r} cpus {cpus!r}: {err}") from None
    slo = _slo(where, f"[target.slo] of {name!r}", t["slo"]) if "slo" in t else None
    again = number(where, f"[[target]] {name!r} reconnect_for", t.get("reconnect_for", 60.0), 0, 86400)
    headers = t.get("headers")
    if headers is not None:
        if "headers" not in info.takes:
            from bench.targets.registry import summaries

            raise UserError(f"{where}: [[target]] {name!r}: headers go with server targets that take them "
                            f"({', '.join(summaries(takes='headers'))})")  # fmt: skip
        if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
            raise UserError(f'{where}: [target.headers] of {name!r}: a table of NAME = "value" strings')
        from bench.targets.base import expand_headers

        # Checked now, ${VAR}s included, not when the target's turn comes after the others have run.
        expand_headers(headers, f"{where}: [target.headers] of {name!r}")
    for key in ("cpus", "threads", "backend", "device", "token_file", "reconnect_for"):
        if info.kind == "server" and t.get(key) is not None:
            also = " and [target.headers]" if "headers" in info.takes else ""
            raise UserError(f"{where}: [[target]] {name!r}: {key} is a board's option; a server target takes the "
                            f"options of its URL{also} ({info.summary})")  # fmt: skip
    return Target(name, url, cpus, threads, t.get("backend"), t.get("device"), token, slo, headers, again)


def _model(where: Where, i: int, m: dict, base: str) -> Model:
    table = f"[[model]] #{i + 1}"
    check_keys(where, table, m, KEYS["model"])
    path = text(where, f"{table} path", m.get("path"))
    full = path if os.path.isabs(path) else os.path.join(base, path)
    if not os.path.exists(full) and os.path.exists(path):
        full = path  # relative to where edge-bench runs (a campaign at the top of a checkout)
    from edge_runtime.files.inputs import check_input

    check_input(full, f"{where}: {table} path")
    name = text(where, f"{table} name", m.get("name", os.path.splitext(os.path.basename(path))[0]))
    return Model(name, full)


def _scenario(where: Where, i: int, s: dict, base: str) -> Scenario:
    table = f"[[scenario]] #{i + 1}"
    check_keys(where, table, s, KEYS["scenario"])
    kind = s.get("kind", "single-stream")
    if kind not in KINDS:
        raise UserError(f"{where}: {table} kind {kind!r}: unknown scenario (scenarios: {', '.join(KINDS)})")
    table = f"[[scenario]] #{i + 1} ({kind})"
    if "duration_s" in s and "iterations" in s:
        raise UserError(f"{where}: {table}: give duration_s or iterations, not both")
    duration = number(where, f"{table} duration_s", s["duration_s"], 0, 7 * 86400) if "duration_s" in s else None
    iters = whole(where, f"{table} iterations", s["iterations"], 1, 50_000_000) if "iterations" in s else None
    warm_s = number(where, f"{table} warmup_s", s["warmup_s"], -1e-9, 3600) if "warmup_s" in s else None
    warm = whole(where, f"{table} warmup", s["warmup"], 0, 50_000_000) if "warmup" in s else None
    if duration is None and iters is None and kind != "replay":  # a replay runs its file once
        iters = 1000
    own: dict = {}
    for field_name in SCENARIO_KEYS[kind]:
        key = CAMPAIGN_KEY.get(field_name, field_name)
        if key not in s:
            own[field_name] = DEFAULTS.get((kind, field_name))
            if own[field_name] is None and (kind, field_name) not in SCENARIO_OPTIONAL:
                raise UserError(f'{where}: {table}: kind = "{kind}" needs {key}')
            continue
        v = s[key]
        if key == "arrivals":
            from edge_runtime.measure.schedule import read_arrivals

            path = text(where, f"{table} arrivals", v)
            full = path if os.path.isabs(path) else os.path.join(base, path)
            if not os.path.exists(full) and os.path.exists(path):
                full = path
            own["arrivals"], own["arrivals_ms"] = full, read_arrivals(full, f"{where}: {table} arrivals")
        elif key == "samples_per_query":
            own[key] = whole(where, f"{table} {key}", v, 1, 4096)
        else:
            own[key] = number(where, f"{table} {key}", v, *BOUNDS[key])
    for key in ALL_KEYS - set(keys_of(kind)):
        if key in s:
            goes = [k for k in KINDS if key in keys_of(k)]
            raise UserError(f"{where}: {table}: {key} goes with kind = {' or '.join(map(repr, goes))}, not {kind!r}")
    min_d = (
        number(where, f"{table} min_duration_s", s["min_duration_s"], 0, 7 * 86400) if "min_duration_s" in s else None
    )
    min_q = whole(where, f"{table} min_queries", s["min_queries"], 1, 50_000_000) if "min_queries" in s else None
    conc = whole(where, f"{table} concurrency", s["concurrency"], 1, 256) if "concurrency" in s else None
    if min_d is not None and duration is not None and duration < min_d:
        raise UserError(
            f"{where}: {table}: duration_s {duration:g} is under min_duration_s {min_d:g}: no run could pass"
        )
    if min_q is not None and iters is not None and iters < min_q:
        raise UserError(f"{where}: {table}: iterations {iters} is under min_queries {min_q}: no run could pass")
    return Scenario(
        kind, duration, iters, warm_s, warm, min_duration_s=min_d, min_queries=min_q, concurrency=conc, **own
    )


def _slo(where: Where, table: str, d) -> SLO:
    if not isinstance(d, dict):
        raise UserError(f"{where}: {table} must be a table")
    check_keys(where, table, d, KEYS["slo"])
    bounds = {k: number(where, f"{table} {k}", v, 0, 3.6e6) for k, v in d.items() if k in SLO_KEYS}
    budget = d.get("error_budget")
    if budget is not None:
        if not isinstance(budget, (int, float)) or isinstance(budget, bool) or not 0 <= budget < 1:
            raise UserError(f"{where}: {table} error_budget {budget!r}: a share from 0 to below 1 (0.001 = 0.1%)")
        budget = float(budget)
    return SLO(bounds, budget)
