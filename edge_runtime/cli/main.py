"""`edge-runtime`: the board-side command line. Each command is a module (`add_arguments`, `run`) in a table with its
help line; only the command asked for is imported (a one-shot `run` pays for no other command's imports, numpy
included, before its work starts). `main()` is the one place that turns errors into one line and an exit code (0 ok,
1 failed check, 2 user error, 3 internal error, 4 the agent's state directory deleted under it, 128+N after signal
N), installs the signal handlers and guards the standard streams.
"""

from __future__ import annotations

import errno
import os
import sys
import warnings

from edge_runtime import __version__
from edge_runtime.cli.common import PROG, Parser
from edge_runtime.cli.signals import SIGNALS
from edge_runtime.errors import EdgeRuntimeError, UsageError

# The order `--help` lists them in: module, help line.
COMMANDS = {
    "info": (
        "edge_runtime.cli.info",
        "backends, devices and delegates installed; CPUs and isolation; the board",
    ),
    "run": (
        "edge_runtime.cli.run",
        "load a model and run one inference (random inputs unless given)",
    ),
    "bench": (
        "edge_runtime.cli.bench",
        "measure latency and jitter on pinned CPUs, with the interference that caused them",
    ),
    "quantize": (
        "edge_runtime.cli.quantize",
        "FP32 ONNX -> INT8 with calibration data, checked against FP32, mixed precision",
    ),
    "thermal": (
        "edge_runtime.cli.thermal",
        "thermal zones, sensors, trip points, frequencies, power rails and headroom",
    ),
    "tune": (
        "edge_runtime.cli.tune",
        "audit CPU isolation (show), or apply/reset it with the system_tuning scripts (files: where they are)",
    ),
    "agent": (
        "edge_runtime.cli.agent",
        "serve a host over a serial port or TCP (models by hash, benches, results kept until acknowledged)",
    ),
}


def command_module(name: str):
    import importlib

    return importlib.import_module(COMMANDS[name][0])


def build_parser(command: str | None = None) -> Parser:
    """Every command is listed, with all its flags (None); or every command listed and none declared (""); or only
    `command`, the one the command line names, with its flags: only its module is imported, and no parser is built
    for the others (argparse gives each its help action and translations: ~2 ms of a one-shot `run`, issue 22)."""
    ap = Parser(prog=PROG, description="On-device inference runtime: load, run and measure INT8 models.")
    ap.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    ap.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name, (_, text) in COMMANDS.items():
        if command and name != command:
            continue
        p = sub.add_parser(name, help=text, description=text)
        if command is None or name == command:
            command_module(name).add_arguments(p)
    return ap


def _chosen(argv: list[str]) -> str | None:
    """The command in argv: the first word that names one (the global flags before it take no value). None when the
    program's own help or version comes first: that lists every command."""
    for word in argv:
        if word in COMMANDS:
            return word
        if not word.startswith("-") or word in ("-h", "--help", "--version"):
            return None
    return None


def _one_line_warning(message, category, filename, lineno, file=None, line=None):
    if sys.stderr is not None:
        print(f"{PROG}: warning: {' '.join(str(message).split())}", file=sys.stderr)


def _reopen_closed_std_fds() -> set[int]:
    """Descriptors 0-2 that were closed at start, now opened on /dev/null: otherwise the next file opened would become
    "standard output" and a child or a print could write into it."""
    closed = set()
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            closed.add(fd)
    for fd in sorted(closed):
        new = os.open(os.devnull, os.O_RDWR)
        if new != fd:
            os.dup2(new, fd)
            os.close(new)
    return closed


def main(argv: list[str] | None = None) -> int:
    as_program = argv is None  # the process is this command (a caller passing argv keeps its interpreter)
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    if not debug:
        warnings.showwarning = _one_line_warning
    closed = _reopen_closed_std_fds()
    if closed:  # (a command that writes no output file never imports outputs: issue 22)
        from edge_runtime.files import outputs

        outputs.CLOSED_STD_FDS.update(closed)

    def err_line(text: str) -> None:
        if sys.stderr is not None and 2 not in closed:
            print(f"{PROG}: {text}", file=sys.stderr)

    SIGNALS.install()
    try:
        chosen = _chosen(argv)
        args = build_parser(chosen or "").parse_args(argv)
        if not args.command:
            build_parser("").print_help()
            return 2
        if 1 in closed or sys.stdout is None:
            # Nothing would see the result: refuse before the work, unless it goes to a file.
            if getattr(args, "json", None) in (None, "-"):
                raise UsageError(
                    "standard output is closed: the result would be lost", hint="give --json FILE, or open stdout"
                )
            sys.stdout = open(os.devnull, "w")
        code = command_module(args.command).run(args)
        if sys.stdout is not None:
            sys.stdout.flush()
        if as_program and getattr(args, "forked", False):
            _end_now(code)
        return code
    except EdgeRuntimeError as err:
        if debug:
            raise
        err_line(f"error: {err.one_line()}")
        return err.exit_code
    except KeyboardInterrupt as err:
        from edge_runtime.system.process import signal_name

        signum = getattr(err, "signum", None) or 2
        err_line("interrupted" + (f" ({signal_name(signum)})" if signum != 2 else ""))
        return 128 + signum
    except BrokenPipeError:
        _quiet_stdout()
        return 0
    except OSError as err:
        if debug:
            raise
        if err.errno in (errno.ENOSPC, errno.EIO, errno.EBADF) and err.filename is None:
            _quiet_stdout()
            err_line(f"error: cannot write the output: {err.strerror}")
            return 2
        err_line(_internal(err))
        return 3
    except Exception as err:
        if debug:
            raise
        err_line(_internal(err))
        return 3


def _end_now(code: int) -> None:
    """End a process that forked its work (the one-shot run) without tearing the interpreter down. A fork leaves every
    page of this process copy-on-write, and the teardown writes to all of them: ~1,500 page faults, a third of what
    the forked run cost over the library's own script (issue 22). What an exit owes is done first: the exit handlers
    (an output's lock), then the standard streams. Returns (a normal exit follows) where the handlers cannot be run."""
    import atexit

    run_handlers = getattr(atexit, "_run_exitfuncs", None)  # what Py_Finalize calls first; CPython 3.x has it
    if run_handlers is None:
        return
    run_handlers()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass  # a stream that cannot be flushed now could not be at exit either
    os._exit(code)


def _internal(err: BaseException) -> str:
    return (
        f"internal error: {type(err).__name__}: {' '.join(str(err).split())[:500]} "
        "(run with --debug for the traceback, and please report it)"
    )


def _quiet_stdout() -> None:
    """After a failed write to stdout, point it at /dev/null so the interpreter's exit flush cannot fail again."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, 1)
        os.close(fd)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
