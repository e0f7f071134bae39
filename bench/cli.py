"""`edge-bench`: the host-side command line. Only its help exists so far; the subcommands come with their issues."""

from __future__ import annotations

import argparse
import sys

from bench import __version__


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="edge-bench",
        description="Host harness: drive boards, local runtimes and GPU inference servers through load scenarios, "
        "check SLOs, keep and compare results. Not implemented yet beyond this help; see `python -m bench.demo` "
        "for a local comparison of the backends.",
    )
    ap.add_argument("--version", action="version", version=f"edge-bench {__version__}")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = sys.argv[1:] if argv is None else argv
    if not args:
        ap.print_help()
        return 0
    try:
        ap.parse_args(args)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
