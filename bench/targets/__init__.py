"""Targets by URL scheme: `local:` (this machine) and the agent (a board over serial or TCP: tcp://, serial://, a device
path, pyserial's socket:// rfc2217:// loop://) and KServe v2 servers (kserve+http://, kserve+grpc://)."""

from __future__ import annotations

from bench.targets.agent import SCHEMES as AGENT_SCHEMES
from bench.targets.agent import AgentTarget, TargetError

__all__ = ["AGENT_SCHEMES", "AgentTarget", "TargetError", "target_for"]


def target_for(url: str, **options):
    """The target a URL names: LocalTarget for local:, KServeTarget for kserve+http/grpc, AgentTarget for a board; a
    one-line error for anything else."""
    if url.startswith("local:"):
        from bench.targets.local import LocalTarget

        return LocalTarget(url, **options)
    if url.startswith("kserve+"):
        from bench.targets.kserve import KServeTarget

        return KServeTarget(url, **options)
    board_endpoint(url)  # a URL that names nothing is refused here, before any work
    return AgentTarget(url, **options)


HOST_SCHEMES = "local: (this machine), kserve+http://HOST:PORT/MODEL, kserve+grpc://HOST:PORT/MODEL"


def board_endpoint(url: str):
    """A board's endpoint (the agent's URL forms); the error names the host's own schemes too."""
    from bench.transports import parse_endpoint
    from edge_runtime.errors import UserError

    try:
        return parse_endpoint(url, "target", listen=False)
    except UserError as err:
        if "unknown scheme" not in err.message:
            raise
        raise UserError(err.message, hint=f"{HOST_SCHEMES}, or a board: {err.hint}") from None
