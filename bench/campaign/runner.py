"""A campaign, run: every (repetition, scenario, model, target) in the campaign's interleaved order, each result kept
in the store as it arrives and checked against its SLOs. Ctrl-C (or SIGTERM) stops after asking the target in use to
stop; what finished is kept and reported. Each run goes through execute.py, as `edge-bench run --target` does."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.campaign import Campaign, Target
from bench.campaign.execute import Executed, RunKey, execute
from bench.report import state_cells
from bench.transports.connection import new_request_id
from edge_runtime.errors import EdgeRuntimeError, Interrupted


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
        ops=True if campaign.ops_for(target) else None,  # None: left out of the request (an older agent reads it)
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


@dataclass
class _Context:
    """What every run of a campaign shares: its targets (opened once each, closed at the end), the store, the
    members that sit out the rest (name -> why), what each worker runs now."""

    campaign: Campaign
    store: object
    say: Callable[[str], None]
    targets: dict = field(default_factory=dict)
    gone: dict = field(default_factory=dict)
    running: Any = None  # fan_out.Running
    fatal: Exception | None = None  # what ends the campaign from a board's worker (the store failed)


def _one(ctx: _Context, o: RunOutcome, target: Target, scenario, model, head: str, member: bool = False) -> None:
    """One run of `target` (or of one board a fanned-out target stands for: o.target, o.url) into `o`."""
    from bench.campaign.fan_out import GONE_KINDS, Stopped
    from bench.targets import TargetError, TargetOptions, target_for

    say, name = ctx.say, o.target
    if member and ctx.running.stopping.is_set():
        return  # Ctrl-C (or the store failed) before this board began: nothing started, no row
    if name in ctx.gone:
        o.error = f"not run: {ctx.gone[name]}"
        return
    rid, slot = new_request_id("camp-"), name
    try:
        from bench.targets.registry import target_class

        slot = target_class(o.url).shared_by(o.url) or name  # two targets on one labgrid place share its lease
        t = ctx.targets.get(slot)
        if t is not None:
            t.adopt(o.url)
        else:
            token = None
            if target.token_file:
                from edge_runtime.wire.endpoint import read_token

                token = read_token(target.token_file)
            options = TargetOptions(token=token, reconnect_for=target.reconnect_for, headers=target.headers, log=say)
            t = ctx.targets[slot] = target_for(o.url, options)
        req = request_for(ctx.campaign, scenario, model, target)
        key = RunKey(name, o.url, scenario.label, ctx.campaign.name, model.name, o.repetition)
        if member:
            ctx.running.begin(name, t, rid)
        got = execute(t, req, ctx.store, key, before_keep=ctx.running.check if member else lambda: None,
                      slo=ctx.campaign.slo.merged(target.slo), scenario=scenario,
                      progress=lambda m: say(f"{head}: {m}"), rid=rid,
                      also_keep=lambda kept: _outcome(o, kept)).got  # fmt: skip
        if got.stopped_by is not None:  # the local run kept what it measured: stored, then the campaign stops
            raise Interrupted(got.stopped_by)
    except TargetError as err:
        if member and ctx.running.stopping.is_set():
            return  # cancelled by Ctrl-C: not a failure of the board, and no row (as the run under way)
        o.error = str(err)
        say(f"{head}: {err}")
        if member and err.kind in GONE_KINDS:  # a held place, a dead board: released, and it sits out the rest
            ctx.gone[name] = o.error
            _close(ctx.targets.pop(slot, None))
    except Stopped:
        pass  # after Ctrl-C: not kept, the row goes with the run under way
    except Exception as err:  # one board's worker: its row says it, the other boards go on
        if not member:
            raise
        if isinstance(err, EdgeRuntimeError):  # the store cannot keep runs (a full disk): every board stops, and
            ctx.fatal = ctx.fatal or err  # the campaign ends in that one line, as without a fan-out
            ctx.running.cancel_all()
            return
        o.error = f"{type(err).__name__}: {err}"
        say(f"{head}: {o.error}")
    finally:
        if member:
            ctx.running.end(name)


def _close(t) -> None:
    if t is None:
        return
    try:
        t.close()
    except Exception:  # noqa: BLE001 - closing a broken link: nothing left to do
        pass


def _close_all(targets: list) -> None:
    """Close every target, at once (a farm's places are released in parallel: each release is a labgrid-client call
    of a second or so); Ctrl-C and SIGTERM wait until all are closed, then act."""
    if len(targets) <= 1:
        for t in targets:
            _close(t)
        return
    held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)  # the closing threads are born with it blocked too
    try:
        threads = [threading.Thread(target=_close, args=(t,), daemon=True) for t in targets]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)  # each close is bounded by its own timeouts (labgrid-client: 30 s)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def run(campaign: Campaign, store, progress: Progress | Callable[[str], None], *, parallel: int = 4,
        fanned: dict | None = None) -> CampaignRun:  # fmt: skip
    """The campaign's plan, in order; a target that stands for many boards (`fanned`: fan_out.expand's) runs each
    step on all of them at once, at most `parallel` at a time."""
    from bench.campaign.fan_out import Running, expand, run_many

    if not isinstance(progress, Progress):
        progress = Progress(progress)
    fanned = expand(campaign) if fanned is None else fanned
    out = CampaignRun(campaign)
    plan = campaign.plan()
    total = sum(len(fanned.get(t.name, [None])) for _r, _s, _m, t in plan)
    ctx = _Context(campaign, store, progress.say, running=Running())
    t0, k = time.monotonic(), 0
    try:
        for rep, scenario, model, target in plan:
            head = f"{model.name} {scenario.label} {repetition_text(rep, campaign.repetitions)}"
            members = fanned.get(target.name)
            if members is None:
                k += 1
                progress.start(k, total, f"{target.name} {head}")
                o = RunOutcome(rep, scenario.label, model.name, target.name, target.url)
                out.outcomes.append(o)
                _one(ctx, o, target, scenario, model, f"{target.name} {head}")
                progress.end()
                continue
            progress.start(k + 1, total, f"{target.name} on {len(members)} boards: {head}")
            rows = [RunOutcome(rep, scenario.label, model.name, m.name, m.url) for m in members]
            out.outcomes.extend(rows)

            def work(o: RunOutcome, scenario=scenario, model=model, target=target, head=head) -> None:
                _one(ctx, o, target, scenario, model, f"{o.target} {head}", member=True)
                progress.end()

            run_many(rows, work, parallel, ctx.running)
            if ctx.fatal is not None:
                raise ctx.fatal
            k += len(members)
    except KeyboardInterrupt as err:
        out.stopped_by = getattr(err, "signum", None) or (err.args[0] if err.args and isinstance(err.args[0], int)
                                                           else 2)  # fmt: skip
        # the runs under way: not finished, not reported
        out.outcomes = [o for o in out.outcomes if o.result is not None or o.error is not None]
    finally:
        _close_all(list(ctx.targets.values()))
        out.seconds = time.monotonic() - t0
    return out
