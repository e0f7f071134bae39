"""What the commands share: the parser that fails with one line, argument types that bound every number and path,
the options declared once (`--sysroot`, `--json`, `--debug`, the model options of run/bench), output planning, CPU
lists and --input files. No command logic here.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from typing import TYPE_CHECKING

from edge_runtime.errors import FeedError, UsageError
from edge_runtime.files.inputs import check_input
from edge_runtime.limits import MAX_DURATION_S, MAX_SEED, MAX_THREADS, MAX_WARMUP, MAX_WARMUP_S

if TYPE_CHECKING:  # imported where an output is planned: a command that writes no file never loads it (issue 22)
    from edge_runtime.files.outputs import Output

PROG = "edge-runtime"

__all__ = ["MAX_DURATION_S", "MAX_THREADS", "MAX_WARMUP", "MAX_WARMUP_S", "PROG"]


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
    the command whose name already starts the line (edge-bench sets its own)."""

    program = PROG

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # type: ignore[override]
        # "argument --threads: 0: must be at least 1" -> "--threads 0: must be at least 1": flag, value, what is wrong
        m = re.match(r"argument ([^:]+?)(?:/[^:]*)?: (.*)$", message)
        if m and not m.group(2).startswith(("invalid", "expected", "not allowed", "one of")):
            message = f"{m.group(1)} {m.group(2)}"
        # The subcommand names itself ("bench: ..."); the program name is already the line's prefix.
        where = self.prog.removeprefix(self.program).strip()
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


def sysroot(path: str):
    """The --sysroot tree, checked to be a directory."""
    from edge_runtime.system.root import SystemRoot

    check_input(path, "--sysroot", error=UsageError, directory=True)
    return SystemRoot(path)


def add_model_options(p: argparse.ArgumentParser) -> None:
    """What `run` and `bench` share: the model, where it runs, its inputs."""
    p.add_argument("model", metavar="MODEL", type=path_arg, help=".onnx, .xml (OpenVINO IR) or .tflite file")
    p.add_argument("--backend", type=word, help="onnxruntime, openvino or tflite (default: from the file type)")
    p.add_argument(
        "--device", type=word, help="onnxruntime: cpu|cuda|tensorrt|qnn|openvino|...; openvino: CPU|GPU|NPU|AUTO"
    )
    p.add_argument(
        "--delegate", metavar="PATH", type=path_arg, help="TFLite external delegate library (e.g. libvx_delegate.so)"
    )
    p.add_argument("--delegate-option", action="append", metavar="K=V", help="option for the delegate (repeatable)")
    p.add_argument(
        "--option",
        action="append",
        metavar="K=V",
        help="backend option: onnxruntime provider option or session.* entry, OpenVINO property, "
        "tflite xnnpack=0 (repeatable)",
    )
    p.add_argument(
        "--allow-fallback",
        action="store_true",
        help="run on CPU when the device or delegate cannot be used (always reported)",
    )
    p.add_argument(
        "--threads",
        type=integer(1, MAX_THREADS),
        metavar="N",
        help="inference threads (default: backend's, or len(--cpus))",
    )
    p.add_argument(
        "--cpus",
        metavar="LIST",
        help="pin the process and all its threads to these CPUs (e.g. 2-3; 'board': the board profile's)",
    )
    p.add_argument(
        "--input", action="append", type=path_arg, metavar="NAME=FILE.npy", help="input from a .npy file (repeatable)"
    )
    p.add_argument("--seed", type=integer(0, MAX_SEED), default=0, help="seed of the random inputs (default 0)")
    p.add_argument(
        "--no-sandbox",
        "--no-isolate",  # the old name: it never meant CPU isolation
        dest="no_sandbox",
        action="store_true",
        help="skip the crash check in a child process (faster; a crashing model then crashes this process)",
    )


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


def input_paths(args, session=None) -> list[tuple[str, object]]:
    """The files `run`/`bench` read: the model's files, --input files, a delegate given by path."""
    from edge_runtime.runtime.model import model_files

    found: list[tuple[str, object]] = list(model_files(args.model))
    for spec in args.input or []:
        for p in {spec, spec.partition("=")[2] or spec}:
            found.append(("an --input file", p))
    if getattr(args, "delegate", None) and os.sep in args.delegate:
        found.append(("the --delegate library", args.delegate))
    if getattr(args, "arrivals", None):
        found.append(("the --arrivals file", args.arrivals))
    return found


def key_values(pairs: list[str] | None, flag: str) -> dict[str, str]:
    """KEY=VALUE flags as a dict; a key given twice (in any case) is refused, not silently the last one."""
    out: dict[str, str] = {}
    seen: dict[str, str] = {}
    for item in pairs or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} {item!r}: expected KEY=VALUE")
        if key.lower() in seen:
            raise UsageError(f"{flag} {item!r}: {seen[key.lower()]!r} is already given; one value per key")
        seen[key.lower()] = item
        out[key] = value
    return out


def cpus_arg(text: str | None, root=None) -> list[int] | None:
    """A CPU list, or `board`: the detected board profile's CPUs to isolate."""
    if text is None:
        return None
    from edge_runtime.system.cpulist import parse_cpu_list

    if text == "board":
        from edge_runtime.system.boards import detect
        from edge_runtime.system.root import SystemRoot

        root = root or SystemRoot("/")
        board = detect(root)
        where = "this machine" if root.is_live else f"the tree {root.root}"
        if board is None:
            from edge_runtime.system.armcpu import big_cores

            groups = root.cpu_clusters()
            big = big_cores(groups)
            online = set(root.online_cpus())
            chosen = [c for c in (big or ()) if c in online]
            if chosen:  # big.LITTLE without a profile: measure on the big cores, the little ones keep the housekeeping
                from edge_runtime.system.cpulist import format_cpu_list

                print(
                    f"{PROG}: --cpus board: no board profile matches {where}; using its big cores, CPU "
                    f"{format_cpu_list(chosen)} ({next(c.name for c in groups if c.cpus == big)}); the others keep "
                    "the housekeeping",
                    file=sys.stderr,
                )
                return chosen
            raise UsageError(f"--cpus board: no board profile matches {where}", hint="give --cpus LIST")
        chosen = board.suggested_isolated(root.online_cpus())
        if not chosen:
            raise UsageError(
                f"--cpus board: board profile {board.name} isolates CPU {list(board.cpus.isolate)}, none of them "
                f"online on {where}",
                hint="give --cpus LIST",
            )
        return chosen

    try:
        cpus = parse_cpu_list(text)
    except ValueError as err:
        raise UsageError(f"--cpus {text!r}: not a CPU list ({err})", hint="e.g. 2-3 or 1,3") from err
    if not cpus:
        raise UsageError(f"--cpus {text!r}: empty CPU list")
    return cpus


def load_kwargs(args) -> dict:
    """The `load()` arguments that `add_model_options` flags describe."""
    if args.delegate_option and not args.delegate:
        raise UsageError("--delegate-option without --delegate: it would be ignored")
    return {
        "backend": args.backend,
        "device": args.device,
        "delegate": args.delegate,
        "delegate_options": key_values(args.delegate_option, "--delegate-option"),
        "options": key_values(args.option, "--option"),
        "threads": args.threads,
        "cpus": cpus_arg(args.cpus),
        "fallback": args.allow_fallback,
        "sandbox": not args.no_sandbox,
    }


def load_inputs(specs: list[str] | None, session, seed: int) -> tuple[dict, dict[str, str]]:
    import numpy as np

    from edge_runtime.files.inputs import load_npy
    from edge_runtime.runtime.feeds import random_feeds

    given: dict[str, np.ndarray] = {}
    names = [t.name for t in session.inputs]
    for spec in specs or []:
        # NAME=FILE when NAME is one of the model's inputs; otherwise the whole value is a path (paths may hold '=').
        name, sep, file = spec.partition("=")
        if not sep or name not in names:
            if sep and len(names) > 1:
                raise FeedError(
                    f"--input {spec!r}: the model has no input {name!r}", hint=f"its inputs are: {', '.join(names)}"
                )
            if len(names) != 1:
                raise FeedError(
                    f"--input {spec!r}: the model has {len(names)} inputs; write NAME=FILE.npy",
                    hint=f"its inputs are: {', '.join(names)}",
                )
            name, file = names[0], spec
        if name in given:
            raise FeedError(f"--input {spec!r}: input {name!r} is given twice")
        if not os.path.lexists(file):
            if file == spec and sep and os.path.lexists(spec.partition("=")[2]):
                # NAME=FILE where FILE exists but NAME is no input of the model: say that, not "no such file".
                raise FeedError(
                    f"--input {spec!r}: the model has no input {spec.partition('=')[0]!r}",
                    hint=f"its input is {names[0]!r}: write {names[0]}={spec.partition('=')[2]} or the file alone",
                )
            raise FeedError(f"--input {spec!r}: no such file {file!r}")
        arr = load_npy(file, "--input", error=FeedError)
        want = next(t.dtype for t in session.inputs if t.name == name)
        if arr.dtype.kind in "fc" or want.kind == "f":
            with np.errstate(over="ignore", invalid="ignore"):
                as_input = arr.astype(want) if arr.dtype.kind in "fiub" and want.kind in "fiu" else arr
            if as_input.dtype.kind in "fc" and not np.isfinite(as_input).all():
                bad = int(np.count_nonzero(~np.isfinite(as_input)))
                raise FeedError(
                    f"--input {spec!r}: {bad} value(s) are NaN or infinite as {want} (a model's answer to them "
                    "means nothing)"
                )
        given[name] = arr
    return random_feeds(session.inputs, seed, given)


def emit_json(doc: dict, outs: dict[str, Output]) -> bool:
    """Write `doc` where --json said. True when it went to standard output: the text report is then left out, so
    stdout stays one JSON document."""
    if "--json" not in outs:
        return False
    from edge_runtime.files.outputs import write_json

    write_json(doc, outs["--json"])
    return outs["--json"].is_stdout
