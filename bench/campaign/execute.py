"""One request on one target, into the store: the bench, then in its sink the SLO verdict and the run rules, the
store's transaction and the caller's own outputs, all before the target may forget the result (a board keeps it
until told). What `edge-bench run --target` and each run of a campaign do; the Ctrl-C handling of both is here.
Never prints (the caller's callbacks do)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bench.slo import SLO, evaluate, run_rules
from bench.targets.base import Target, TargetError, TargetResult
from bench.transports.connection import new_request_id


@dataclass(frozen=True)
class RunKey:
    """What the store names a run by."""

    target: str  # the target's name (a one-off's: its URL)
    target_url: str
    scenario: str  # Scenario.label
    campaign: str | None = None
    model_name: str | None = None
    repetition: int = 0


@dataclass
class Executed:
    """A result kept: what the target answered, the stored record, its verdicts and where the store keeps it."""

    got: TargetResult | None = None
    doc: dict | None = None
    slo: dict | None = None
    rules: dict | None = None
    store_id: int | None = None
    stopped_by: int | None = None  # the signal of a Ctrl-C after which the target gave what it measured


class NotStarted(KeyboardInterrupt):
    """Ctrl-C, and the target has nothing to keep (the run had not started, or it was cancelled before it measured):
    `text` says which; the one-off says it and exits 128 + signum."""

    def __init__(self, signum: int, text: str) -> None:
        super().__init__(signum)
        self.signum, self.text = signum, text


def execute(target: Target, request, store, key: RunKey, *, slo: SLO, scenario=None,
            progress: Callable[[str], None] | None = None, rid: str | None = None, keep_partial: bool = False,
            also_keep: Callable[[Executed], None] | None = None, stopping: Callable[[], None] = lambda: None,
            recovering: Callable[[str], None] | None = None,
            before_keep: Callable[[], None] = lambda: None) -> Executed:  # fmt: skip
    """Bench `request` on `target` under `rid`; the sink checks the result (slo; the run rules of `scenario`), stores it
    (the request id makes a second delivery a no-op) and calls `also_keep` (the one-off's --json and --prom, the
    campaign's outcome row) before the target is told it may forget it.
    Ctrl-C: with keep_partial (the one-off), `stopping()` is called and a target that recovers is asked for what it
    measured (`recovering` hears its progress), which is kept like any result; NotStarted when there is nothing; a
    target that does not recover kept what it could itself, and the interrupt goes on. Without keep_partial (a
    campaign keeps no partial board run) the target is asked to cancel and the interrupt goes on."""
    rid = rid or new_request_id("bench-")
    kept = Executed()

    def sink(got: TargetResult) -> None:
        before_keep()  # may refuse it (a campaign's board whose result arrives after Ctrl-C): nothing is kept
        doc = got.record()
        kept.got, kept.doc = got, doc
        kept.slo = evaluate(doc, slo)
        kept.rules = run_rules(doc, scenario) if scenario is not None else None
        got.store_id = kept.store_id = store.add_run(
            doc, target=key.target, target_url=key.target_url, campaign=key.campaign, scenario=key.scenario,
            model_name=key.model_name, repetition=key.repetition, request_id=got.request_id,
            verdict={"slo": kept.slo, "rules": kept.rules},
        )  # fmt: skip
        if also_keep is not None:
            also_keep(kept)

    try:
        got = target.bench(request, progress=progress, rid=rid, sink=sink)
    except KeyboardInterrupt as err:  # Ctrl-C or SIGTERM
        signum = getattr(err, "signum", None) or 2
        if not keep_partial:
            try:  # where it runs on: stop it too (a partial answer is not kept); no-op if it stopped itself
                target.cancel(rid)
            except TargetError:
                pass
            raise
        stopping()
        if not target.info.recovers:  # the target kept what it measured, or there is nothing to keep
            raise
        try:  # a board stops and sends what it measured
            got = target.recover(rid, sink=sink, progress=recovering)
        except TargetError as cancelled:
            if cancelled.kind != "cancelled":
                raise
            raise NotStarted(signum, str(cancelled)) from cancelled
        if got is None:
            raise NotStarted(signum, "interrupted before the run started on the board") from None
        kept.stopped_by = signum
    kept.got = got
    return kept
