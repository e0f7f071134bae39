"""A campaign, run: every (repetition, scenario, model, target) in the campaign's interleaved order, each result kept
in the store as it arrives and checked against its SLOs. Ctrl-C (or SIGTERM) stops after asking the target in use to
stop; what finished is kept and reported. Each run goes through execute.py, as `edge-bench run --target` does."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.campaign import Campaign, Target
from bench.campaign.execute import Executed, RunKey, execute
from bench.report import state_cells
from bench.transports.connection import new_request_id
from edge_runtime.errors import Interrupted


@dataclass
class RunOutcome:
    repetition: int
    scenario: str
    model: str
    target: str
    url: str
    store_id: int | None = None
    result: dict | None = None
    error: str | None = None
    slo: dict | None = None
    rules: dict | None = None  # run rules: {"valid", "why"}

    def row(self) -> dict:
        lat = (self.result or {}).get("latency_us") or {}
        return {
            "run": self.store_id,
            "target": self.target,
            "model": self.model,
            "scenario": self.scenario,
            "repetition": self.repetition,
            "count": lat.get("count"),
            "p50_us": lat.get("p50"),
            "p99_us": lat.get("p99"),
            "p999_us": lat.get("p999"),
            "max_us": lat.get("max"),
            "throughput_ips": (self.result or {}).get("throughput_ips"),
            "slo": None if self.slo is None else ("pass" if self.slo["pass"] else "FAIL"),
            "valid": None if self.rules is None else ("yes" if self.rules["valid"] else "NO"),
            "error": self.error,
            **state_cells(self.result),  # partial, saturated: said whatever the SLOs and run rules
        }


@dataclass
class CampaignRun:
    campaign: Campaign
    outcomes: list[RunOutcome] = field(default_factory=list)
    stopped_by: int | None = None
    seconds: float = 0.0

    @property
    def slo_failed(self) -> bool:
        missed = any(o.slo is not None and not o.slo["pass"] for o in self.outcomes)
        invalid = any(o.rules is not None and not o.rules["valid"] for o in self.outcomes)
        return missed or invalid or any(o.error for o in self.outcomes)


def request_for(campaign: Campaign, scenario, model, target: Target):
    from edge_runtime.measure.request import BenchRequest
    from edge_runtime.system.cpulist import parse_cpu_list

    kw = {}
    if scenario.warmup is not None:
        kw["warmup"] = scenario.warmup
    return BenchRequest(
        model=model.path,
        backend=target.backend,
        device=target.device,
        threads=target.threads,
        cpus=tuple(parse_cpu_list(target.cpus)) if target.cpus else None,
        iterations=scenario.iterations,
        duration_s=scenario.duration_s,
        warmup_s=scenario.warmup_s,
        **scenario.request_fields(server="concurrency" in target.info.takes),
        **kw,
    ).validate()


class Progress:
    """What the runner says as it goes: `start` a run (its number and label), `say` a line about it (the board's own
    progress, a reconnect), `end` it. The default prints one line per event; the CLI draws bars on a terminal."""

    def __init__(self, say: Callable[[str], None]):
        self._say = say
        self.t0 = time.monotonic()

    def start(self, k: int, total: int, label: str) -> None:
        eta = (time.monotonic() - self.t0) / (k - 1) * (total - k + 1) if k > 1 else None
        self._say(f"[{k}/{total}] {label}" + (f" (ETA {eta:.0f} s)" if eta is not None else ""))

    def say(self, msg: str) -> None:
        self._say(msg)

    def end(self) -> None:
        pass


def repetition_text(rep: int, repetitions: int) -> str:
    """A repetition as the tables number it, from 0 (the stored `repetition`), with the range it is one of: progress
    said "rep 1/2" where the table said 0 (issue 25, item 9)."""
    return f"repetition {rep}" + (f" of 0-{repetitions - 1}" if repetitions > 1 else "")


def _outcome(o: RunOutcome, kept: Executed) -> None:
    """The run's row, filled as the store keeps it (a Ctrl-C after this keeps the row)."""
    o.result, o.slo, o.rules, o.store_id = kept.doc, kept.slo, kept.rules, kept.store_id


def run(campaign: Campaign, store, progress: Progress | Callable[[str], None]) -> CampaignRun:
    from bench.targets import TargetError, TargetOptions, target_for

    if not isinstance(progress, Progress):
        progress = Progress(progress)
    say = progress.say
    out = CampaignRun(campaign)
    plan = campaign.plan()
    targets: dict[str, object] = {}
    t0 = time.monotonic()
    try:
        for k, (rep, scenario, model, target) in enumerate(plan, 1):
            head = f"{target.name} {model.name} {scenario.label} {repetition_text(rep, campaign.repetitions)}"
            progress.start(k, len(plan), head)
            o = RunOutcome(rep, scenario.label, model.name, target.name, target.url)
            out.outcomes.append(o)
            try:
                t = targets.get(target.name)
                if t is None:
                    token = None
                    if target.token_file:
                        from edge_runtime.wire.endpoint import read_token

                        token = read_token(target.token_file)
                    options = TargetOptions(token=token, reconnect_for=60.0, headers=target.headers, log=say)
                    t = targets[target.name] = target_for(target.url, options)
                req = request_for(campaign, scenario, model, target)
                key = RunKey(target.name, target.url, scenario.label, campaign.name, model.name, rep)
                got = execute(t, req, store, key, slo=campaign.slo.merged(target.slo), scenario=scenario,
                              progress=lambda m, head=head: say(f"{head}: {m}"), rid=new_request_id("camp-"),
                              also_keep=lambda kept, o=o: _outcome(o, kept)).got  # fmt: skip
                if got.stopped_by is not None:  # the local run kept what it measured: stored, then the campaign stops
                    raise Interrupted(got.stopped_by)
            except TargetError as err:
                o.error = str(err)
                say(f"{head}: {err}")
            progress.end()
    except KeyboardInterrupt as err:
        out.stopped_by = getattr(err, "signum", None) or (err.args[0] if err.args and isinstance(err.args[0], int)
                                                           else 2)  # fmt: skip
        if out.outcomes and out.outcomes[-1].result is None and out.outcomes[-1].error is None:
            out.outcomes.pop()  # the run under way: not finished, not reported
    finally:
        for t in targets.values():
            try:
                t.close()
            except Exception:  # noqa: BLE001 - closing a broken link: nothing left to do
                pass
        out.seconds = time.monotonic() - t0
    return out
