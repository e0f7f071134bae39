"""`edge-bench`: the host-side command line. One module per command (`HELP`, `add_arguments`, `run`); `main` is the
one place that turns errors into one line and an exit code (0 ok, 1 failed check or unreachable target, 2 user error,
3 internal error), as `edge-runtime` does."""

from __future__ import annotations

import sys

from bench import __version__
from bench.cli import baseline, compare, report, run, targets
from edge_runtime.cli.common import Parser
from edge_runtime.errors import EdgeRuntimeError

PROG = "edge-bench"
COMMANDS = {"run": run, "targets": targets, "compare": compare, "report": report, "baseline": baseline}


class _Parser(Parser):
    """edge-runtime's parser (one line, exit 2), naming the subcommand of edge-bench."""

    program = PROG


def build_parser() -> Parser:
    ap = _Parser(
        prog=PROG,
        description="Host harness: drive boards (the agent over serial or TCP) and this machine (local:) through "
        "campaigns, keep every run in a store, check SLOs, compare runs and baselines, and report.",
    )
    ap.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    ap.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, module in COMMANDS.items():
        module.add_arguments(sub.add_parser(name, help=module.HELP, description=module.HELP))
    return ap


def main(argv: list[str] | None = None) -> int:
    from edge_runtime.cli.signals import SIGNALS

    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    if not debug:  # a warning is one line naming the program, not a source path and a line of code
        import warnings

        def one_line(message, category, filename, lineno, file=None, line=None):
            if sys.stderr is not None:
                print(f"{PROG}: warning: {' '.join(str(message).split())}", file=sys.stderr)

        warnings.showwarning = one_line
    SIGNALS.install()
    try:
        if argv[:1] == ["run"] and not {"-h", "--help"} & set(argv):
            from bench.cli import run as run_cmd

            args, rest = run_cmd.parse(argv[1:])
            args.command, args.rest = "run", rest
        else:
            args = build_parser().parse_args(argv)
        if not args.command:
            build_parser().print_help()
            return 0 if not argv else 2
        return COMMANDS[args.command].run(args)
    except EdgeRuntimeError as err:
        if debug:
            raise
        print(f"{PROG}: error: {err.one_line()}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt as err:
        signum = getattr(err, "signum", None) or 2
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 128 + signum
    except BrokenPipeError:
        return 0
    except Exception as err:
        if debug:
            raise
        print(
            f"{PROG}: internal error: {type(err).__name__}: {' '.join(str(err).split())[:500]} "
            "(run with --debug for the traceback, and please report it)",
            file=sys.stderr,
        )
        return 3


if __name__ == "__main__":
    sys.exit(main())
