"""What the edge-bench commands share: the token file, target errors as one line, progress on stderr."""

from __future__ import annotations

import sys
import threading

from edge_runtime.errors import UsageError
from edge_runtime.program.args import path_arg


def add_target_options(p) -> None:
    p.add_argument(
        "--token-file", type=path_arg, metavar="FILE", help="the agent's shared secret (as given to its --token-file)"
    )
    p.add_argument(
        "--reconnect-for",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="keep reconnecting to a board this long after the link breaks (default 60)",
    )


def token(args) -> bytes | None:
    if not args.token_file:
        return None
    from edge_runtime.wire.endpoint import read_token

    return read_token(args.token_file)


def check_reconnect(value: float) -> float:
    import math

    if not math.isfinite(value) or not 0 <= value <= 86400:
        raise UsageError(f"--reconnect-for {value}: must be 0 to 86400 seconds")
    return value


def progress_printer():
    tty = sys.stderr is not None and sys.stderr.isatty()

    lock = threading.Lock()  # a campaign's boards run in threads of their own: one line at a time, whole

    def say(msg: str) -> None:
        if sys.stderr is None:
            return
        with lock:
            try:
                sys.stderr.write(f"\r{msg}\033[K" if tty else msg + "\n")
                sys.stderr.flush()
            except (OSError, ValueError):  # a closed pipe (`| head`): progress is lost, never a board's run
                pass

    def done() -> None:
        if tty:
            print("\r\033[K", end="", file=sys.stderr)

    return say, done


def campaign_progress(name: str, total: int):
    """The campaign's progress on stderr: on a terminal with rich installed, a bar over the whole campaign (runs done,
    elapsed, ETA) with the run under way (target, model, scenario, repetition) and the board's last word about it;
    otherwise one plain line per event, as a CI log wants. Returns (Progress, close)."""
    from bench.campaign.runner import Progress

    say, done = progress_printer()
    if sys.stderr is None or not sys.stderr.isatty():
        return Progress(say), done
    try:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
        from rich.progress import Progress as Bars
        from rich.table import Column
    except ImportError:
        return Progress(say), done
    bars = Bars(
        # markup off: a campaign's, a target's or a board's words are shown as they are ("[red]" included)
        TextColumn(name[:24], markup=False, style="bold"),
        BarColumn(bar_width=20),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        TextColumn("{task.description}", markup=False, table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis")),
        console=Console(stderr=True),
        transient=False,
        expand=True,
    )
    task = bars.add_task("", total=total)
    bars.start()

    class RichProgress(Progress):
        def start(self, k: int, total: int, label: str) -> None:
            self.label = label
            bars.update(task, description=label)

        def say(self, msg: str) -> None:
            label = getattr(self, "label", "")
            member = "@" in msg.split(" ", 1)[0]  # a board of a fan-out (TARGET@PLACE ...): its words name it, whole
            whole = not label or member or msg.startswith(label + ": ")
            bars.update(task, description=msg if whole else f"{label}: {msg}")

        def end(self) -> None:
            bars.advance(task)

    return RichProgress(say), bars.stop


def add_store(p) -> None:
    from bench.store import DEFAULT_STORE, ENV

    p.add_argument(
        "--store",
        type=path_arg,
        metavar="FILE|URL",
        default=None,
        help=f"the results store: a SQLite file, or postgresql://USER@HOST/DB for one a team shares (default ${ENV}, "
        f"else ./{DEFAULT_STORE})",
    )


def open_store(args, create: bool = False):
    """The store --store (or EDGE_BENCH_STORE, or ./edge-bench.sqlite) names: a file, or a postgresql:// URL. Only
    `run` creates one: a command that reads (report, compare, baseline) and is given a mistyped name says so, instead
    of making an empty store. `args.store` becomes the name every later message uses (a URL without its password)."""
    import os

    from bench.store import Store, default_path, names_url

    args.store = args.store or default_path()
    if not create and not names_url(args.store) and not os.path.lexists(args.store):
        raise UsageError(
            f"--store {args.store!r}: no such store",
            hint="edge-bench run writes one; --store FILE or EDGE_BENCH_STORE names another",
        )
    store = Store(args.store, create=create)
    args.store = store.path
    return store


def say_written(outs) -> None:
    """One line on stderr for each output written to a file, with its absolute path (issue 25: `--html` wrote its
    file without saying where). Standard output is not named: what went there is in front of the user."""
    import os

    for out in outs.values():
        if not out.is_stdout and sys.stderr is not None:
            print(f"edge-bench: report: {os.path.abspath(out.dest)}", file=sys.stderr)
