"""A campaign target that stands for many boards: `labgrid://?board=rock-5b&places=all` in a farm. When the campaign
starts, each such target is asked which boards it stands for (Target.fan_out: the coordinator's matching places);
each becomes a member named `TARGET@PLACE` (the stored run's target), whose URL carries the target's name as its
`group` (what the reports compare boards of one kind by).

A step of the plan on such a target runs on every member at once, one worker thread a member, at most `parallel` at
a time (`edge-bench run CAMPAIGN --parallel N`); the next step starts when every member has finished this one, so the
campaign's interleaving (repetitions outermost) holds across boards as it does across targets. Each member's result
goes into the one store as it arrives (the store writes one run at a time). A member that fails (held by someone
else, its exporter gone, its agent silent after a power cycle) is one line in its own row, is released, and sits
out the rest of the campaign ("not run: ..."); the other members go on and their results are kept.

Ctrl-C (or SIGTERM) while members run: the main thread, which only waits, asks each running board to stop, keeps
nothing that arrives after (a campaign keeps no partial board run; the board keeps it until acknowledged), waits a
bounded time for the workers, and the interrupt goes on (the runner releases every place)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from edge_runtime.errors import UserError

DEFAULT_PARALLEL = 4
MAX_PARALLEL = 256
STOP_WAIT_S = 15.0  # after Ctrl-C: how long the workers are given to hear their boards stop
GONE_KINDS = ("unreachable", "refused")  # a member that failed so sits out the rest (a held place, a dead board)


@dataclass(frozen=True)
class Member:
    name: str  # TARGET@PLACE: the stored run's target
    url: str
    target: str  # the campaign target it is one of
    place: str  # the board's name (a labgrid place)


class Stopped(Exception):
    """A result that arrived after Ctrl-C: not kept (its worker's run ends unfinished, like the run under way)."""


def expand(campaign) -> dict[str, list[Member]]:
    """The campaign's targets that stand for many boards, each with its members; one UserError line when a target
    cannot say (its coordinator does not answer, no place matches)."""
    from bench.targets import TargetError
    from bench.targets.registry import target_class

    out: dict[str, list[Member]] = {}
    for t in campaign.targets:
        try:
            many = target_class(t.url).fan_out(t.url, t.name)
        except TargetError as err:
            raise UserError(f"campaign {campaign.path!r}: [[target]] {t.name!r}: {err}") from None
        if many is not None:
            out[t.name] = [Member(f"{t.name}@{name}", url, t.name, name) for name, url in many]
    return out


def parallel_arg(text: str) -> int:
    """--parallel N: 1 to MAX_PARALLEL."""
    if not (text.isascii() and text.isdigit() and 1 <= int(text) <= MAX_PARALLEL):
        raise UserError(f"--parallel {text!r}: a number of boards at once, 1 to {MAX_PARALLEL}")
    return int(text)


class Running:
    """What each worker is running now (member name -> (target, request id)): what Ctrl-C asks to stop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._now: dict[str, tuple[object, str]] = {}
        self.stopping = threading.Event()

    def check(self) -> None:
        """Before a member's result is kept: refused (Stopped) after Ctrl-C."""
        if self.stopping.is_set():
            raise Stopped()

    def begin(self, name: str, target, rid: str) -> None:
        with self._lock:
            self._now[name] = (target, rid)

    def end(self, name: str) -> None:
        with self._lock:
            self._now.pop(name, None)

    def cancel_all(self) -> None:
        """Ask every board running a request to stop it (each bounded by its link's own timeouts)."""
        self.stopping.set()
        with self._lock:
            now = list(self._now.values())
        for target, rid in now:
            try:
                target.cancel(rid)
            except Exception:  # noqa: BLE001 - a board that cannot be told: its place is released anyway
                pass


def run_many(items: list, work: Callable[[object], None], parallel: int, running: Running) -> None:
    """`work(item)` for every item, at most `parallel` at once, each in a worker thread; returns when all are done.
    The calling (main) thread only waits, so Ctrl-C and SIGTERM reach it: then each running board is asked to stop,
    the workers get STOP_WAIT_S to finish, and the interrupt goes on."""
    queue = list(items)
    lock = threading.Lock()

    def worker() -> None:
        while not running.stopping.is_set():
            with lock:
                if not queue:
                    return
                item = queue.pop(0)
            work(item)

    threads = [threading.Thread(target=worker, name=f"campaign worker {i + 1}", daemon=True)
               for i in range(min(parallel, len(items)))]  # fmt: skip
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.2)
    except KeyboardInterrupt:
        running.cancel_all()
        deadline = time.monotonic() + STOP_WAIT_S
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        raise
