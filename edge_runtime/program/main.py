"""`run_program`: what a command-line program of the house does around its command, once for edge-runtime and
edge-bench. A program is a table of commands (name -> module path, help line); only the command asked for is imported
(a one-shot `run` pays for no other command's imports before its work starts). Errors become one line and an exit
code (0 ok, 1 failed check, 2 user error, 3 internal error, 4 the agent's state directory deleted under it, 128+N
after signal N); a full disk or a dead descriptor under standard output is one line, exit 2; the signal handlers are
installed and the standard streams guarded (a descriptor 0-2 closed at start is opened on /dev/null).

A command module has `add_arguments(parser)` and `run(args) -> int`; it may have `parse(argv) -> args` when it
parses its own words (edge-bench run: its target options, then the bench's)."""

from __future__ import annotations

import errno
import os
import sys
import warnings
from collections.abc import Mapping

from edge_runtime.errors import EdgeRuntimeError, UsageError
from edge_runtime.program.args import Parser
from edge_runtime.program.signals import SIGNALS

Commands = Mapping[str, tuple[str, str]]  # name -> (module path, help line), in the order --help lists them


def command_module(commands: Commands, name: str):
    import importlib

    return importlib.import_module(commands[name][0])


def build_parser(prog: str, commands: Commands, command: str | None = None, *, version: str = "",
                 description: str = "") -> Parser:  # fmt: skip
    """Every command is listed, with all its flags (None); or every command listed and none declared (""); or only
    `command`, the one the command line names, with its flags: only its module is imported, and no parser is built
    for the others (argparse gives each its help action and translations: ~2 ms of a one-shot `run`, issue 22)."""
    ap = Parser(prog=prog, description=description)
    ap.add_argument("--version", action="version", version=version)
    ap.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name, (_, text) in commands.items():
        if command and name != command:
            continue
        p = sub.add_parser(name, help=text, description=text)
        if command is None or name == command:
            command_module(commands, name).add_arguments(p)
    return ap


def chosen(commands: Commands, argv: list[str]) -> str | None:
    """The command in argv: the first word that names one (the global flags before it take no value). None when the
    program's own help or version comes first: that lists every command."""
    for word in argv:
        if word in commands:
            return word
        if not word.startswith("-") or word in ("-h", "--help", "--version"):
            return None
    return None


def reopen_closed_std_fds() -> set[int]:
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


def _start(prog: str, debug: bool) -> set[int]:
    """Warnings as one line naming the program, the standard descriptors guarded, the signal handlers installed."""
    if not debug:

        def one_line_warning(message, category, filename, lineno, file=None, line=None):
            if sys.stderr is not None:
                print(f"{prog}: warning: {' '.join(str(message).split())}", file=sys.stderr)

        warnings.showwarning = one_line_warning
    closed = reopen_closed_std_fds()
    if closed:  # (a command that writes no output file never imports outputs: issue 22)
        from edge_runtime.files import outputs

        outputs.CLOSED_STD_FDS.update(closed)
    SIGNALS.install()
    return closed


def _parse(prog: str, commands: Commands, argv: list[str], **texts):
    """The command line's namespace (`command` None when no command is named). A command module's own `parse` takes
    the words after its name, unless help is asked."""
    name = chosen(commands, argv)
    if name is not None and not {"-h", "--help"} & set(argv):
        module = command_module(commands, name)
        if hasattr(module, "parse"):
            args = module.parse(argv[argv.index(name) + 1 :])
            args.command = name
            return args
    return build_parser(prog, commands, name or "", **texts).parse_args(argv)


def run_program(prog: str, commands: Commands, argv: list[str] | None = None, *, version: str, description: str,
                bare_ok: bool = False) -> int:  # fmt: skip
    """Run the command argv names and return the program's exit code. bare_ok: the program alone (no word at all)
    shows its help and exits 0 (edge-bench); otherwise no command is a usage error (exit 2) after the help."""
    as_program = argv is None  # the process is this command (a caller passing argv keeps its interpreter)
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    closed = _start(prog, debug)

    def err_line(text: str) -> None:
        if sys.stderr is not None and 2 not in closed:
            print(f"{prog}: {text}", file=sys.stderr)

    texts = {"version": version, "description": description}
    try:
        args = _parse(prog, commands, argv, **texts)
        if not args.command:
            build_parser(prog, commands, "", **texts).print_help()
            return 0 if bare_ok and not argv else 2
        if 1 in closed or sys.stdout is None:
            # Nothing would see the result: refuse before the work, unless it goes to a file.
            if getattr(args, "json", None) in (None, "-"):
                raise UsageError(
                    "standard output is closed: the result would be lost", hint="give --json FILE, or open stdout"
                )
            sys.stdout = open(os.devnull, "w")
        code = command_module(commands, args.command).run(args)
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
