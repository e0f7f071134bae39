"""`edge-runtime agent`: serve a host over a serial port or TCP: models uploaded by hash, benches on this board's
pinned CPUs, every result kept until the host has it. Runs until SIGTERM or Ctrl-C."""

from __future__ import annotations

import os
import sys
import time

from edge_runtime.errors import StateLostError, UsageError
from edge_runtime.program.args import PROG, add_debug, integer, path_arg


def add_arguments(p) -> None:
    p.add_argument(
        "endpoint",
        metavar="ENDPOINT",
        help="serial:///dev/ttyS0?baud=921600 (or any pyserial URL) | tcp://127.0.0.1:7000",
    )
    p.add_argument(
        "--token-file",
        type=path_arg,
        metavar="FILE",
        help="shared secret (mode 600, 16+ characters) the host must prove it has; required off loopback",
    )
    p.add_argument(
        "--state-dir",
        type=path_arg,
        metavar="DIR",
        help="models and unacknowledged results (default /var/lib/edge-runtime/agent as root, else "
        "~/.local/state/edge-runtime/agent)",
    )
    p.add_argument(
        "--max-store",
        type=integer(1, 1 << 20),
        default=2048,
        metavar="MB",
        help="models kept at most (oldest used evicted; default 2048)",
    )
    p.add_argument(
        "--max-frame",
        type=integer(256, 1 << 20),
        default=64 * 1024,
        metavar="BYTES",
        help="largest frame payload offered to the host (default 65536; the host may ask for less)",
    )
    p.add_argument("--quiet", action="store_true", help="log nothing but errors")
    add_debug(p)


def run(args) -> int:
    from edge_runtime.agent.state import StateDir
    from edge_runtime.system.tuning import state_dir
    from edge_runtime.wire.endpoint import parse_endpoint, read_token

    ep = parse_endpoint(args.endpoint)
    token = read_token(args.token_file) if args.token_file else None
    if ep.kind == "tcp" and not ep.loopback and token is None:
        raise UsageError(
            f"{args.endpoint}: listening beyond loopback needs --token-file (anyone who reaches the port could run "
            "and upload models)"
        )

    def log(text: str) -> None:
        if not args.quiet and sys.stderr is not None:
            print(f"{PROG} agent: {text}", file=sys.stderr, flush=True)

    state = StateDir(args.state_dir or str(state_dir(None) / "agent"), max_store=args.max_store << 20, log=log)
    state.acquire()
    try:
        return _serve(args, ep, token, state, log)
    finally:
        state.release()


def _serve(args, ep, token, state, log) -> int:
    from edge_runtime.agent.endpoint import listen_tcp, open_serial, serve_serial, serve_tcp
    from edge_runtime.agent.server import Agent
    from edge_runtime.wire.endpoint import line_rate

    # Open the endpoint before the identity is learned, so a bad port is one line at once.
    sock = listen_tcp(ep) if ep.kind == "tcp" else None
    if ep.kind == "serial":
        open_serial(ep).close()
    # A serial line's rate sizes the link's window and timers.
    agent = Agent(state, token=token, max_payload=args.max_frame, log=log, line_rate=line_rate(ep))
    agent.learn_identity()
    log(
        f"board {agent.identity.get('board') or 'unknown'}, state {state.root}, "
        f"{'token required' if token else 'no token'}; pid {os.getpid()}"
    )
    started = time.monotonic()
    try:
        if ep.kind == "tcp":
            serve_tcp(agent, ep, agent.should_stop, log, sock=sock)
        else:
            serve_serial(agent, ep, agent.should_stop, log)
    finally:
        agent.close(grace_s=0.0 if agent.lost else 10.0)
        log(f"stopped after {time.monotonic() - started:.0f} s")
    if agent.lost:
        # The state directory was deleted (or its lock file replaced) under the running agent. Decision (issue 22):
        # stop, with exit 4, rather than make the directory again and go on. Its outbox is gone, so the promise
        # "every result kept until the host has it" is already broken and must be seen, not papered over; a
        # directory made again could race whoever is deleting it; and the lock this agent holds is on a file no
        # longer there, so only stopping keeps two agents from ever running on one directory (the lock in /run/lock
        # refuses a second one until then). A service manager restarts it (Restart=always): a new, empty directory.
        raise StateLostError(agent.lost, hint="start the agent again: it makes a new state directory")
    return 0
