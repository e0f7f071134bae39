"""What the board's commands share beyond the program's toolkit (edge_runtime/program/args.py): the --sysroot tree,
the model options of run/bench, CPU lists and --input files. No command logic here.
"""

from __future__ import annotations

import argparse
import os
import sys

from edge_runtime.errors import FeedError, UsageError
from edge_runtime.files.inputs import check_input
from edge_runtime.limits import MAX_SEED, MAX_THREADS
from edge_runtime.program.args import PROG, integer, path_arg, word


# --------------------------------------------------------------------------------------------- options, once
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


