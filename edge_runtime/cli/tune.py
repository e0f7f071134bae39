"""`edge-runtime tune`: audit CPU isolation (show), or apply/reset it with the system_tuning scripts."""

from __future__ import annotations

from edge_runtime.cli.common import sysroot
from edge_runtime.errors import UsageError
from edge_runtime.files.outputs import check_outside
from edge_runtime.program.args import add_debug, add_json, add_sysroot, emit_json, path_arg, plan_outputs
from edge_runtime.program.bench_flags import cpus_arg
from edge_runtime.system.audit import audit


def add_arguments(p) -> None:
    p.add_argument(
        "action",
        choices=["show", "apply", "reset", "files"],
        help="show: audit (exit 1 when not tuned); files: print the folder of the scripts, unit and init files",
    )
    p.add_argument("--cpus", metavar="LIST", help="CPUs to set apart (default: the board profile's, or isolated ones)")
    p.add_argument("--governor", help="apply: cpufreq governor (default performance)")
    p.add_argument("--dry-run", action="store_true", help="apply/reset: print what would change, change nothing")
    p.add_argument(
        "--state-dir",
        type=path_arg,
        metavar="DIR",
        help="where apply keeps its save file (default /var/lib/edge-runtime)",
    )
    add_sysroot(p, "operate on a tree below DIR (default /)")
    add_json(p)
    add_debug(p)


def _tune_cpus(args, root) -> list[int]:
    """--cpus, else the detected board's suggestion, else the CPUs the kernel already isolates."""
    if args.cpus:
        cpus = cpus_arg(args.cpus, root)
        online = root.online_cpus()
        bad = sorted(set(cpus) - set(online)) if online else []
        if bad:
            from edge_runtime.system.cpulist import format_cpu_list

            raise UsageError(
                f"--cpus {args.cpus!r}: CPU {format_cpu_list(bad)} does not exist on {root.root} "
                f"(online: {format_cpu_list(online)})"
            )
        return cpus
    from edge_runtime.system.boards import detect

    board = detect(root)
    if board is not None:
        chosen = board.suggested_isolated(root.online_cpus())
        if chosen:
            return chosen
    isolated = root.cpus("isolated") or []
    if isolated:
        return isolated
    raise UsageError("tune: which CPUs? give --cpus LIST (no board profile or isolated CPUs to start from)")


def run(args) -> int:
    from edge_runtime.system import tuning
    from edge_runtime.system.cpulist import format_cpu_list

    root = sysroot(args.sysroot)
    given = {
        "--governor": args.governor is not None,
        "--dry-run": args.dry_run,
        "--state-dir": bool(args.state_dir),
        "--cpus": args.cpus is not None,
    }
    allowed = {"show": {"--cpus"}, "apply": set(given), "reset": {"--dry-run", "--state-dir"}, "files": set()}
    allowed = allowed[args.action]
    stray = [flag for flag, on in given.items() if on and flag not in allowed]
    if stray:
        raise UsageError(f"tune {args.action}: {', '.join(stray)} does not apply here (ignored flags hide mistakes)")
    state = tuning.state_dir(args.state_dir)
    outs = plan_outputs([("--json", args.json)])
    # The tree this command reads and the state it keeps are inputs: no output may land inside them.
    check_outside(outs.values(), [(root.root, "the --sysroot tree")] if not root.is_live else [])
    check_outside(outs.values(), [(state, "the tune state dir")])
    if args.action == "files":
        return _files(outs)
    if args.action == "show":
        cpus = _tune_cpus(args, root)
        checks = audit(root, cpus)
        failed = [c for c in checks if c.status == "fail"]
        # Nothing readable (an empty tree): not tuned as far as anyone can tell, and a CI gate must not pass on it.
        known = any(c.status in ("ok", "fail") for c in checks)
        tuned = (not failed) if known else None
        doc = {
            "schema": "edge-runtime/tune/1",
            "cpus": cpus,
            "tuned": tuned,
            "checks": [c.to_dict() for c in checks],
        }
        code = 0 if tuned else 1
        if emit_json(doc, outs):
            return code
        print(f"tuning for CPU {format_cpu_list(cpus)} (sysroot {args.sysroot})")
        for c in checks:
            print(f"  {c.status.upper():<5} {c.knob:<22} {c.seen}")
            if c.advice and c.status in ("fail", "warn"):
                print(f"        {'':<22} -> {c.advice}")
        if tuned is None:
            print(f"unknown: none of the knobs could be read below {root.root}")
        else:
            print("not tuned: " + ", ".join(c.knob for c in failed) if failed else "tuned")
        return code
    save = None
    if args.action == "apply":
        cpus = _tune_cpus(args, root)
        lines, save = tuning.apply(cpus, args.governor or "performance", args.sysroot, args.dry_run, state)
        if save is not None:
            lines.append(f"saved what was there before in {save} (edge-runtime tune reset puts it back)")
    else:
        lines = tuning.reset(args.sysroot, args.dry_run, state)
    doc = {
        "schema": "edge-runtime/tune/1",
        "action": args.action,
        "dry_run": args.dry_run,
        "messages": lines,
        "save_file": str(save) if save else None,
    }
    if emit_json(doc, outs):
        return 0
    print("\n".join(lines))
    return 0


def _files(outs) -> int:
    """Where the installed package keeps the tuning scripts with their systemd units and init scripts, and the board
    profiles: one line for `cp -r "$(edge-runtime tune files)" /usr/local/lib/edge-runtime/system_tuning`."""
    from edge_runtime.system.boards import boards_dir
    from edge_runtime.system.tuning import scripts_dir

    scripts = scripts_dir().resolve()
    doc = {"schema": "edge-runtime/tune/1", "action": "files", "system_tuning": str(scripts)}
    doc["boards"] = str(boards_dir().resolve())
    if emit_json(doc, outs):
        return 0
    print(scripts)
    return 0
