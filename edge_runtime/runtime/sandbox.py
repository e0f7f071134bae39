"""The crash check, parent side: load a model and run it once in a child process (`sandbox_child`), so a file that
crashes a native library cannot take the caller down.

`check()` is called by `load()` before the model is loaded in-process. The child reports a clean error as JSON; a
child killed by a signal (a segfault in a parser) or past its deadline becomes a ModelError here. Results are cached
per file hash, backend and options for the life of the process. This module never imports the session: the child
does, in its own process, so there is no import circle.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import edge_runtime.errors as errors
from edge_runtime.errors import BackendNotInstalledError, DeviceError, ModelError

if TYPE_CHECKING:  # not imported at run time: numpy comes with them, and the forked run imports this before numpy
    from edge_runtime.runtime.backends.base import LoadOptions
    from edge_runtime.runtime.model import ModelFile

_PASSED: set[tuple] = set()
TIMEOUT_S = 120.0  # a check child that has not loaded and run its model by then is refused as a hang


def _key(model: ModelFile, backend: str, opts: LoadOptions) -> tuple:
    return (
        model.sha256,
        str(model.path.resolve()),
        backend,
        opts.device,
        opts.delegate,
        tuple(sorted(opts.delegate_options.items())),
        tuple(sorted(opts.options.items())),
        opts.fallback,
    )


def _json(line: str) -> dict | None:
    import json

    try:
        doc = json.loads(line)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _import_crash(backend: str, sig: str) -> tuple[str, str]:
    """(message, hint) for a backend library that kills the process importing it."""
    return (
        f"backend {backend!r} cannot be used here: importing its library crashes the process ({sig}) (checked in a "
        "child process)",
        "a broken install, or a build for another CPU: reinstall it, or choose another backend with --backend",
    )


def _child_env() -> tuple[dict, str]:
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    return env, package_root


def statuses(names: list[str], timeout_s: float = TIMEOUT_S) -> dict[str, dict]:
    """Each backend's `status()` (`edge-runtime info`), each taken in its own child process, all at once: a library
    that crashes or hangs when imported is reported as unusable, with the reason, instead of ending the caller."""
    import json
    import subprocess
    import time

    from edge_runtime.system.process import dies_with_parent, signal_name

    env, package_root = _child_env()
    procs = {}
    for name in names:
        procs[name] = subprocess.Popen(
            dies_with_parent([sys.executable, "-m", "edge_runtime.runtime.sandbox_child"]),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=package_root,
        )
    deadline = time.monotonic() + timeout_s
    out = {}
    for name, proc in procs.items():
        try:
            stdout, _ = proc.communicate(json.dumps({"status": name}), timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            why = f"importing its library did not finish within {timeout_s:g} s (checked in a child process)"
            out[name] = {"installed": False, "unusable": True, "error": why}
            continue
        docs = [_json(line) for line in stdout.splitlines() if line.startswith("{")]
        doc = next((d for d in reversed(docs) if d and "installed" in d), None)
        if proc.returncode < 0:
            sig = signal_name(-proc.returncode)
            why = f"importing its library crashes the process ({sig}) (checked in a child process)"
            out[name] = {"installed": False, "unusable": True, "error": why}
        elif doc is None:
            why = f"its check process failed (exit {proc.returncode})"
            out[name] = {"installed": False, "unusable": True, "error": why}
        else:
            out[name] = doc
    return out


def require_usable(name: str) -> None:
    """Raise BackendNotInstalledError when importing backend `name`'s library crashes or fails (checked in a child):
    for the commands that import a library outside `load()` (quantize's NNCF path)."""
    st = statuses([name])[name]
    if st.get("unusable"):
        raise BackendNotInstalledError(
            f"backend {name!r} cannot be used here: {st['error']}",
            hint="a broken install, or a build for another CPU: reinstall it, or choose another backend with --backend",
        )


class Fallback(NamedTuple):
    """The delegate or device crashed the child and the caller allows a fallback: `answer` is the CPU run's."""

    why: str
    answer: dict | None = None


def verdict(returncode: int, lines: list, stderr: str, shown: str, backend: str, opts: LoadOptions, retry):
    """What a crash-check child's end means: its answer (ok), the error it reported raised here, a crash turned into
    the error that names its cause (the library's import, the device or delegate, or the model), or a Fallback when
    an accelerator crashed and the caller allows CPU (`retry()` gives the answer of the same work on CPU). `opts`: any
    object with `delegate`, `device` and `fallback`."""
    if returncode < 0:
        from edge_runtime.system.process import signal_name

        sig = signal_name(-returncode)
        if not any(d and "imported" in d for d in lines):
            message, hint = _import_crash(backend, sig)
            raise BackendNotInstalledError(message, hint=hint)
        accelerator = opts.delegate or (opts.device if (opts.device or "cpu").lower() != "cpu" else None)
        if accelerator:
            # A vendor delegate or device plugin that crashes: the device's fault, and CPU may still work.
            what = f"delegate {opts.delegate!r}" if opts.delegate else f"device {opts.device!r}"
            why = f"{what} crashes the {backend} backend ({sig}) (checked in a child process)"
            if opts.fallback:
                return Fallback(why, retry())
            raise DeviceError(f"model {shown!r}: {why}", hint="pass --allow-fallback to run on CPU instead")
        raise ModelError(
            f"model {shown!r}: crashes the {backend} backend ({sig}) when loaded or run; refused "
            "(checked in a child process)"
        )
    answer = next((d for d in reversed(lines) if d and "ok" in d), None)
    if answer is None:
        last = (stderr.strip().splitlines() or ["no output"])[-1]
        raise ModelError(f"model {shown!r}: the {backend} check process failed (exit {returncode}): {last[:300]}")
    if not answer.get("ok"):
        cls = getattr(errors, answer.get("error", ""), None)
        if not (isinstance(cls, type) and issubclass(cls, errors.EdgeRuntimeError)):
            cls = ModelError
        raise cls(answer.get("message", "unknown error"), hint=answer.get("hint"))
    return answer


def check(model: ModelFile, backend: str, opts: LoadOptions, timeout_s: float = TIMEOUT_S) -> str | None:
    """Raise the error loading `model` would raise, or ModelError if it crashes or hangs the backend.

    A delegate that crashes the backend is a DeviceError; when fallback is allowed the model is checked again without
    it and the reason is returned, for the caller to load on CPU and report the fallback.
    """
    key = _key(model, backend, opts)
    if key in _PASSED:
        return None
    request = {
        "model": str(model.path.resolve()),
        "backend": backend,
        "device": opts.device,
        # A bare soname ("libedgetpu.so.1") is for dlopen to find; a path is made absolute for the child's cwd.
        "delegate": os.path.abspath(opts.delegate) if opts.delegate and os.sep in opts.delegate else opts.delegate,
        "delegate_options": dict(opts.delegate_options),
        "options": dict(opts.options),
        "threads": 1,
        "fallback": opts.fallback,
    }
    import json
    import subprocess  # here: the forked run (the command line's) never needs it
    from dataclasses import replace

    from edge_runtime.system.process import dies_with_parent

    env, package_root = _child_env()
    shown = str(model.path)
    try:
        proc = subprocess.run(
            # Dies with this process from its first instruction (PR_SET_PDEATHSIG before exec), not only once it has
            # imported numpy and the backends: a killed caller leaves no child loading a model for nobody.
            dies_with_parent([sys.executable, "-m", "edge_runtime.runtime.sandbox_child"]),
            input=json.dumps(request),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
            cwd=package_root,  # `-m` puts the cwd first on sys.path: make it this package's root, not the caller's
        )
    except subprocess.TimeoutExpired as err:
        raise ModelError(
            f"model {shown!r}: {backend} did not load and run it within {timeout_s:g} s (checked in a child process)"
        ) from err
    lines = [_json(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    cpu = replace(opts, delegate=None, delegate_options={}, device=None)
    retry = lambda: check(model, backend, cpu, timeout_s)  # noqa: E731
    answer = verdict(proc.returncode, lines, proc.stderr, shown, backend, opts, retry)
    if isinstance(answer, Fallback):
        return answer.why
    _PASSED.add(key)
    return None


# ------------------------------------------------------------------------------------ the forked one-shot run
def can_fork() -> bool:
    """True when this process has one thread: only then is a fork safe (a copy of a process whose other threads held
    locks can deadlock, and Python 3.12+ warns). The command line asks before it imports numpy or a backend."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


def forked(work, timeout_s: float, meanwhile=None) -> tuple[int, list, str]:
    """`work(say)` in a child forked from this single-threaded process, which has parsed the flags and imported
    nothing heavy: the child imports numpy and the backend, loads and runs, and says JSON lines; a crash ends only it.
    Nothing is imported twice and no interpreter is started again, so the check costs about a fork. `meanwhile()`,
    if given, is this process's own work while it would only wait (it raises nothing). Returns (exit status,
    negative for a signal; the JSON lines; the child's stderr and stdout, for an error message). The child dies with
    this process; one still running at the deadline is killed and the run refused like a hang."""
    import gc
    import json
    import select  # not selectors: its import (~0.5 ms) was a part of every one-shot run worth saving (issue 22)
    import signal
    import time

    if not can_fork():
        raise RuntimeError("forked(): this process has threads")  # the caller asks can_fork() first
    sys.stdout.flush()
    sys.stderr.flush()
    r_ans, w_ans = os.pipe()
    r_err, w_err = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 70
        # No garbage collection in the child: it lives for one load and one inference and ends with os._exit, and a
        # collection would walk (writing to each) the objects of its imports and those it shares with this process,
        # every page written a copy (~5 ms of a one-shot run: issue 22).
        gc.disable()
        try:
            os.close(r_ans)
            os.close(r_err)
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
                signal.signal(sig, signal.SIG_DFL)
            import ctypes

            ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: a killed parent leaves no child
            if os.getppid() != parent:
                os._exit(1)
            os.dup2(w_err, 1)  # whatever a library prints goes with stderr: the answer pipe carries JSON only
            os.dup2(w_err, 2)
            out = os.fdopen(w_ans, "w")

            def say(doc: dict) -> None:
                out.write(json.dumps(doc) + "\n")
                out.flush()

            work(say)
            code = 0
        except BaseException:  # noqa: BLE001 - the parent reads the end from the exit status and the lines
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(w_ans)
    os.close(w_err)
    if meanwhile is not None:
        meanwhile()
    chunks: dict[int, list[bytes]] = {r_ans: [], r_err: []}
    poll = select.poll()
    for fd in chunks:
        poll.register(fd, select.POLLIN)
    open_fds = set(chunks)
    deadline = time.monotonic() + timeout_s
    try:
        while open_fds:
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise TimeoutError
            for fd, _ in poll.poll(min(left, 1.0) * 1000):
                data = os.read(fd, 65536)  # POLLHUP with nothing left reads b"": the child closed its end
                if data:
                    chunks[fd].append(data)
                else:
                    poll.unregister(fd)
                    open_fds.discard(fd)
        _, status = os.waitpid(pid, 0)
    except BaseException:  # Ctrl-C, SIGTERM, the deadline: the child goes too, and is reaped
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        raise
    finally:
        os.close(r_ans)
        os.close(r_err)
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    text = b"".join(chunks[r_ans]).decode("utf-8", "replace")
    lines = [_json(line) for line in text.splitlines() if line.startswith("{")]
    return code, lines, b"".join(chunks[r_err]).decode("utf-8", "replace")
