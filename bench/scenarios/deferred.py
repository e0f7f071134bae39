"""A signal during the bounded reads after a host-side run (the last metrics scrape, the server's statistics) kept
for the exit instead of losing the run (issue 24): while a `DeferredSignals` is entered, SIGINT, SIGTERM and SIGHUP
only note themselves (edge_runtime/program/signals.py's stop hook, as a board's measured loop does) and set an event
that cuts the bounded waits short; the target then stores what it measured, and the command exits 128 + N as on any
signal during a run. Outside it, signals act as usual.

Never: wait on anything itself, or hold a signal longer than the bounded steps it guards."""

from __future__ import annotations

import threading


class DeferredSignals:
    """`with late:` a signal only notes itself (`signum`, the first) and sets `signalled`; outside, signals act as
    usual. Re-enterable: one object may guard several bounded steps after a run. Only the main thread gets signals:
    elsewhere it guards nothing and costs nothing."""

    def __init__(self) -> None:
        self.armed = False
        self.signum: int | None = None
        self.signalled = threading.Event()
        self._before = None

    def request(self, signum: int) -> None:  # edge_runtime/program/signals.py calls it from its handler
        if self.signum is None:
            self.signum = signum
        self.signalled.set()

    def __enter__(self) -> DeferredSignals:
        from edge_runtime.program.signals import SIGNALS

        self._before, SIGNALS.stop = SIGNALS.stop, self
        self.armed = True
        return self

    def __exit__(self, *exc) -> None:
        from edge_runtime.program.signals import SIGNALS

        self.armed = False
        SIGNALS.stop = self._before
