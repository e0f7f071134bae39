"""Model instances: the CPUs each one gets, the session factory that loads one in its worker thread, and the pinning
of that thread (issue 26: one instance per --instances, each on its own CPUs).

The measurement layer pins a whole process (`system.process.pin_all_threads`, through `load(cpus=...)`); a server
holds several instances and its own I/O threads in one process, so here each worker pins only itself, before it
loads: the threads the backend then starts inherit that mask (Linux copies the creating thread's affinity).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from edge_runtime.errors import PinningError, UserError
from edge_runtime.system.cpulist import format_cpu_list, parse_cpu_list


@dataclass(frozen=True)
class Instance:
    """One model instance as it runs: its worker thread and the threads its load started, with their CPUs."""

    index: int
    cpus: tuple[int, ...] | None
    tid: int
    threads: tuple  # ThreadAffinity records (edge_runtime.system.process) of the worker and the backend's pool


SessionFactory = Callable[[tuple[int, ...] | None], object]


def session_loader(model: str | os.PathLike[str], **load_kwargs) -> SessionFactory:
    """A session factory for `Batcher`: `edge_runtime.load(model, **load_kwargs)` in the worker, on its CPUs.

    The worker thread is pinned before the factory runs, so the backend's pool threads, which it starts, inherit its
    CPUs; `threads` defaults to their number. `cpus` is the Batcher's to give (load()'s own `cpus` pins the whole
    process, every other instance and the server's threads with it)."""
    if "cpus" in load_kwargs:
        raise UserError("cpus: give them to the Batcher (cpus=..., split among its instances), not to the loader")

    def factory(cpus: tuple[int, ...] | None):
        from edge_runtime.runtime.load import load

        kwargs = dict(load_kwargs)
        if cpus and kwargs.get("threads") is None:
            kwargs["threads"] = len(cpus)
        return load(model, **kwargs)

    return factory


def split_cpus(cpus: Iterable[int] | str | None, instances: int) -> list[tuple[int, ...] | None]:
    """`cpus` cut into `instances` equal runs in order ("0-3" for 2 instances: 0-1 and 2-3); None leaves all unpinned.

    Equal shares, or refused: instances with unequal CPUs would serve the same requests at different speeds."""
    if cpus is None:
        return [None] * instances
    try:
        wanted = sorted(set(parse_cpu_list(cpus) if isinstance(cpus, str) else (int(c) for c in cpus)))
    except (TypeError, ValueError) as err:
        raise UserError(f"cpus {cpus!r}: expected a CPU list such as '2-3' or a list of CPU numbers") from err
    allowed = os.sched_getaffinity(0)
    bad = [c for c in wanted if c not in allowed]
    if not wanted or bad:
        raise PinningError(f"cpus {format_cpu_list(wanted)!r}: CPU(s) {format_cpu_list(bad) or 'none'} not usable "
                           f"here", hint=f"this process may run on {format_cpu_list(sorted(allowed))}")  # fmt: skip
    if len(wanted) % instances:
        raise UserError(f"cpus {format_cpu_list(wanted)!r}: {len(wanted)} CPU(s) do not split evenly among "
                        f"{instances} instances", hint="give a multiple of the instance count")  # fmt: skip
    k = len(wanted) // instances
    return [tuple(wanted[i * k : (i + 1) * k]) for i in range(instances)]


def pin_this_thread(index: int, cpus: tuple[int, ...]) -> None:
    """Pin the calling thread, and the threads it starts from now on, to `cpus`."""
    try:
        os.sched_setaffinity(0, cpus)  # 0: this thread only (sched_setaffinity(2) takes a thread id)
    except OSError as err:
        raise PinningError(f"cannot pin instance {index} to CPUs {format_cpu_list(cpus)!r}: {err}") from err


def warm_up(session) -> None:
    """Run once on zeros of one row, so the first request does not pay for the backend's first-run set-up; skipped for
    a model with other dynamic dimensions (no shape to make up)."""
    feeds = {}
    for t in session.inputs:
        shape = tuple(1 if i == 0 and d is None else d for i, d in enumerate(t.shape))
        if any(d is None for d in shape):
            return
        feeds[t.name] = np.zeros(shape, dtype=t.dtype)
    session.infer(feeds)
