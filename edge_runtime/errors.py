"""The error hierarchy of edge_runtime: one module, so the CLI can turn each into one line and an exit code.

Every message names the thing (file, value, option) and what is wrong with it; `hint` says what to do about it.
Exit codes follow DESIGN.md: 1 failed check, 2 user error, 3 internal error; and 4 for an agent whose state
directory was deleted under it (StateLostError).
"""

from __future__ import annotations


class EdgeRuntimeError(Exception):
    """Base class. `exit_code` is what the CLI exits with; `hint` an optional next step for the user."""

    exit_code = 3

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.one_line()

    def one_line(self) -> str:
        text = " ".join(self.message.split())
        if self.hint:
            text += f" ({' '.join(self.hint.split())})"
        return text


class UserError(EdgeRuntimeError):
    """Something the user can fix: a bad file, flag, value or missing install. Exit code 2."""

    exit_code = 2


class UsageError(UserError):
    """A bad flag or value (exit 2)."""


class ModelError(UserError):
    """The model file is missing, of an unknown type, empty, corrupted, or crashes the backend."""


class UnknownBackendError(UserError):
    """No backend of that name is registered."""


class BackendNotInstalledError(UserError):
    """The backend's library is not installed (the hint names the extra to install)."""


class DeviceError(UserError):
    """A device, execution provider or delegate that cannot be used, and fallback was not allowed."""


class FeedError(UserError):
    """Inputs that do not match the model: missing or unknown names, wrong shape or dtype, unreadable files."""


class InferenceError(UserError):
    """The backend refused to run on the bound inputs (e.g. dynamic dimensions that do not agree)."""


class PinningError(UserError):
    """A CPU list that cannot be applied (CPUs that do not exist or are not allowed to this process)."""


class SchedulingError(UserError):
    """SCHED_FIFO refused: no privilege (CAP_SYS_NICE, RLIMIT_RTPRIO) or a priority the kernel will not take."""


class MemoryLockError(UserError):
    """mlockall refused: no privilege (CAP_IPC_LOCK) or RLIMIT_MEMLOCK too small."""


class SessionClosedError(UserError):
    """A Session used after close(): a mistake in the calling program, not in its inputs."""


class StateLostError(EdgeRuntimeError):
    """The agent's state directory was deleted, moved or replaced while it ran: it stops rather than go on in (or beside
    another agent on) a directory that is not the one it locked. Exit code 4, so a service manager or a script can
    tell it from a bad flag (2) or a crash (3); restarted, the agent makes a new directory (issue 22)."""

    exit_code = 4


class RequestError(UserError):
    """A request the agent refuses (bad name, bad hash, too large): answered with an error, the agent goes on."""

    def __init__(self, message: str, kind: str = "bad-request"):
        super().__init__(message)
        self.kind = kind


class CheckFailedError(EdgeRuntimeError):
    """A check that ran and failed (SLO missed, system not tuned). Exit code 1."""

    exit_code = 1


class Interrupted(KeyboardInterrupt):
    """A signal (SIGINT, SIGTERM, SIGHUP) ended the work; the command exits 128 + `signum`."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
