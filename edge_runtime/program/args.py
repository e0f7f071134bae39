"""What every command-line program of the house is made of (edge-runtime and edge-bench): the parser that fails
with one line, argument types that bound every number and path, the options declared once (`--sysroot`, `--json`,
`--debug`), and the check of a command's outputs before it runs. No command logic here.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from typing import TYPE_CHECKING

from edge_runtime.errors import UsageError

if TYPE_CHECKING:  # imported where an output is planned: a command that writes no file never loads it (issue 22)
    from edge_runtime.files.outputs import Output

PROG = "edge-runtime"  # the board's program; edge-bench names itself to run_program


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, given the terminal's width as shutil would find it (COLUMNS, else the terminal of
    standard output, else 80) without importing shutil: argparse does for every parser it builds, help asked or not,
    and shutil brings bz2, lzma and zlib (~3 ms of a one-shot `run`, issue 22)."""

    def __init__(self, prog: str, *args, **kwargs) -> None:
        if len(args) < 3 and kwargs.get("width") is None:
            kwargs["width"] = _terminal_columns() - 2  # what argparse takes off shutil's answer
        super().__init__(prog, *args, **kwargs)


def _terminal_columns() -> int:
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns > 0:
        return columns
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80
    except (AttributeError, ValueError, OSError):
        return 80


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so bad flags get the same one-line error and exit code 2. `program`:
    the program whose name already starts the line (by default the first word of prog)."""

    program: str | None = None  # None: the first word of prog (edge-runtime, edge-bench)

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # type: ignore[override]
        # "argument --threads: 0: must be at least 1" -> "--threads 0: must be at least 1": flag, value, what is wrong
        m = re.match(r"argument ([^:]+?)(?:/[^:]*)?: (.*)$", message)
        if m and not m.group(2).startswith(("invalid", "expected", "not allowed", "one of")):
            message = f"{m.group(1)} {m.group(2)}"
        # The subcommand names itself ("bench: ..."); the program name is already the line's prefix.
        where = self.prog.removeprefix(self.program or self.prog.split(" ", 1)[0]).strip()
        raise UsageError(f"{where}: {message}" if where else message, hint=f"see '{self.prog} --help'")


# ---------------------------------------------------------------------------------------- numbers from the user
# Every count, duration and temperature is bounded by what it can mean here: NaN, infinities, negative counts and
# values no machine can hold are refused when the flags are parsed, before anything runs.
def integer(low: int, high, what: str = ""):
    """argparse type: an integer in [low, high()] (high may be a callable: a bound known only on this machine)."""

    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        top, why = high() if callable(high) else (high, "")
        if value < low:
            raise argparse.ArgumentTypeError(f"{text}: must be at least {low}{what}")
        if top is not None and value > top:
            raise argparse.ArgumentTypeError(f"{text}: at most {top:,}{why or what}")
        return value

    return parse


def real(low: float, high: float, unit: str, *, low_open: bool = False, why: str = ""):
    """argparse type: a finite number in [low, high] (or (low, high] with low_open)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text}: must be a finite number of {unit}")
        if value < low or (low_open and value == low):
            raise argparse.ArgumentTypeError(f"{text}: must be {'>' if low_open else '>='} {low:g} {unit}")
        if value > high:
            raise argparse.ArgumentTypeError(f"{text}: at most {high:g} {unit}{why}")
        return value

    return parse


def celsius(text: str) -> float:
    """A temperature a sensor could report (thermal.SILICON_RANGE_C); anything else is a typo."""
    from edge_runtime.system.thermal import SILICON_RANGE_C

    lo, hi = SILICON_RANGE_C
    return real(lo, hi, "C", why=" (beyond what silicon temperature sensors report)")(text)


def samples_bound() -> tuple[int, str]:
    from edge_runtime.measure.loop import max_samples

    n = max_samples()
    return n, " samples fit in this machine's memory (8 bytes each, kept and sorted)"


def word(text: str) -> str:
    """argparse type for a name (--backend, --device): not empty, one word."""
    if not text.strip() or text != text.strip() or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError(f"{text!r}: not a name")
    return text


def path_arg(text: str) -> str:
    """argparse type for a path: not empty, no NUL byte (an empty --json used to be ignored silently)."""
    if text == "":
        raise argparse.ArgumentTypeError("'': empty path")
    if "\x00" in text:
        raise argparse.ArgumentTypeError(f"{text!r}: not a valid path (NUL byte)")
    return text


# --------------------------------------------------------------------------------------------- options, once
def add_sysroot(p: argparse.ArgumentParser, what: str = "read /proc and /sys below DIR (default /)") -> None:
    p.add_argument("--sysroot", default="/", type=path_arg, metavar="DIR", help=what)


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--json",
        nargs="?",
        const="-",
        type=path_arg,
        metavar="FILE",
        help="machine-readable output: to stdout, or to FILE (text still printed)",
    )


def add_debug(p: argparse.ArgumentParser) -> None:
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")


# ---------------------------------------------------------------------------------------------------------- outputs
def plan_outputs(
    pairs: list[tuple[str, str | None]],
    inputs: list[tuple[str, object]] = (),
    regular_only: tuple[str, ...] = (),
    root=None,
) -> dict[str, Output]:
    """Check every output of a command before it runs: each writable, none the same as another or as an input, and
    none inside the --sysroot tree the command reads (`root`, when it is a captured tree) or inside the board profiles
    directory (every *.toml there is read as a profile by the next command)."""
    if all(dest is None for _, dest in pairs):  # nothing written: nothing to check (and the profiles need not be found)
        return {}
    from edge_runtime.files.outputs import check_distinct, check_outside, plan_output
    from edge_runtime.system.boards import boards_dir

    outs = {
        flag: plan_output(flag, dest, regular_only=flag in regular_only) for flag, dest in pairs if dest is not None
    }
    check_distinct(outs.values(), inputs)
    trees = [(boards_dir(), "the board profiles directory")]
    if root is not None and not root.is_live:
        trees.append((root.root, "the --sysroot tree"))
    check_outside(outs.values(), trees)
    return outs


def emit_json(doc: dict, outs: dict[str, Output]) -> bool:
    """Write `doc` where --json said. True when it went to standard output: the text report is then left out, so
    stdout stays one JSON document."""
    if "--json" not in outs:
        return False
    from edge_runtime.files.outputs import write_json

    write_json(doc, outs["--json"])
    return outs["--json"].is_stdout
