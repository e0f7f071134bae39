"""`load()`: pick the backend for a model file, check what the caller asked for, run the crash check, pin the
threads, and return a ready Session, with the truth about what runs (`BackendInfo`: a fallback is never silent).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import replace

from edge_runtime.errors import ModelError, UserError
from edge_runtime.limits import MAX_THREADS
from edge_runtime.runtime import backends
from edge_runtime.runtime.backends.base import LoadOptions
from edge_runtime.runtime.model import DEFAULT_BACKEND, inspect_model
from edge_runtime.runtime.sandbox import TIMEOUT_S
from edge_runtime.runtime.session import BackendInfo, Session


class FallbackWarning(UserWarning):
    """A device or delegate could not be used and the run fell back to CPU, as the caller allowed."""


class OversubscriptionWarning(UserWarning):
    """More inference threads than the CPUs they are pinned to."""


def load(
    model: str | os.PathLike[str],
    backend: str | None = None,
    device: str | None = None,
    delegate: str | None = None,
    threads: int | None = None,
    cpus: Iterable[int] | None = None,
    *,
    delegate_options: Mapping[str, str] | None = None,
    options: Mapping[str, str] | None = None,
    fallback: bool = False,
    sandbox: bool = True,
    sandbox_timeout_s: float = TIMEOUT_S,
    isolate: bool | None = None,
    probe_timeout_s: float | None = None,
) -> Session:
    """Load `model` on `backend` (chosen from the file type when None) and return a ready Session.

    `device` picks an ONNX Runtime execution provider (`cpu`, `cuda`, `tensorrt`, `qnn`, `openvino`, ...) or an
    OpenVINO device (`CPU`, `GPU`, `NPU`, `AUTO`); `delegate` is a TFLite external delegate library with
    `delegate_options`. When these cannot be used, loading fails, unless `fallback=True`: then the model runs on CPU,
    a FallbackWarning is issued and `session.backend.fallback` is True.
    `cpus` pins this process and every thread it has to those CPUs before the backend starts its pools; `threads`
    defaults to their number. With `sandbox` (the default) the model is first loaded and run once in a child process,
    so a file that crashes a native library is refused with an error instead of taking this process down; the check
    runs once per file, backend and options in this process, within `sandbox_timeout_s`. (`isolate=` and
    `probe_timeout_s=` are the old names of `sandbox=` and `sandbox_timeout_s=`: they still work, and warn.)
    """
    from edge_runtime.runtime import sandbox as crash_check

    if isolate is not None:
        if isolate != sandbox and sandbox is not True:
            raise UserError(f"isolate={isolate!r} and sandbox={sandbox!r}: give one (isolate is the old name)")
        warnings.warn("load(isolate=...) is now load(sandbox=...)", DeprecationWarning, stacklevel=2)
        sandbox = isolate
    if probe_timeout_s is not None:
        warnings.warn("load(probe_timeout_s=...) is now load(sandbox_timeout_s=...)", DeprecationWarning, stacklevel=2)
        sandbox_timeout_s = probe_timeout_s
    if cpus is not None and not isinstance(cpus, (str, bytes)):
        cpus = tuple(cpus)  # an iterator is read once: here, not by the check and then again by the pinning
    if not isinstance(fallback, bool) or not isinstance(sandbox, bool):
        raise UserError(f"fallback {fallback!r}, sandbox {sandbox!r}: expected True or False")
    _check_arguments(model, backend, device, delegate, threads, cpus, delegate_options, options, sandbox_timeout_s)
    mf = inspect_model(model)
    name = backend or DEFAULT_BACKEND[mf.format]
    cls = backends.get(name)
    if mf.format not in cls.formats:
        readable = ", ".join(sorted(f for f in cls.formats))
        raise ModelError(
            f"model {str(model)!r}: backend {name!r} cannot load {mf.format} files", hint=f"it reads: {readable}"
        )
    cpu_list = tuple(sorted(set(cpus))) if cpus is not None else None
    if threads is not None and threads < 1:
        raise UserError(f"threads {threads!r}: must be at least 1")
    if threads is not None and cpu_list and threads > len(cpu_list):
        warnings.warn(
            f"{threads} threads on {len(cpu_list)} CPU(s) ({', '.join(map(str, cpu_list))}): oversubscribed, the "
            "threads take turns on the same cores (latency goes up, not down)",
            OversubscriptionWarning,
            stacklevel=2,
        )
    opts = LoadOptions(
        device=device,
        delegate=delegate,
        delegate_options=dict(delegate_options or {}),
        options=dict(options or {}),
        threads=threads if threads is not None else (len(cpu_list) if cpu_list else None),
        cpus=cpu_list,
        fallback=fallback,
    )
    crashed = None
    if sandbox:
        crashed = crash_check.check(mf, name, opts, timeout_s=sandbox_timeout_s)
        if crashed:  # the delegate crashed the child and fallback is allowed: load on CPU, and say so
            opts = replace(opts, delegate=None, delegate_options={}, device=None)
    # The library is imported here, after the crash check: one that crashes when imported ends the child, not us.
    version = cls.library_version()
    if cpu_list:
        from edge_runtime.system.process import pin_all_threads

        pin_all_threads(list(cpu_list))  # before the backend starts its pools, which inherit the mask
    impl = cls(mf, opts)
    if crashed:
        impl.fallback_reason = crashed
    info = BackendInfo(
        name=name,
        version=version,
        device=impl.device,
        delegate=impl.delegate,
        fallback=impl.fallback_reason is not None,
        fallback_reason=impl.fallback_reason,
        requested_device=device,
        requested_delegate=delegate,
        details=dict(getattr(impl, "details", {}) or {}),
    )
    if info.fallback:
        warnings.warn(f"{name}: falling back to CPU: {impl.fallback_reason}", FallbackWarning, stacklevel=2)
    return Session(mf, impl, info, opts)




def _check_arguments(model, backend, device, delegate, threads, cpus, delegate_options, options, timeout_s):
    """What a Python caller passes is checked like a flag: one clear error naming the argument, never a TypeError
    from deep inside a backend."""
    import math

    if not isinstance(model, (str, os.PathLike)) or str(model) == "":
        raise UserError(f"model {model!r}: expected a path to a model file")
    for name, value in (("backend", backend), ("device", device), ("delegate", delegate)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise UserError(f"{name} {value!r}: expected a non-empty string")
    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads > MAX_THREADS):
        raise UserError(f"threads {threads!r}: expected a whole number from 1 to {MAX_THREADS}")
    if cpus is not None:
        if isinstance(cpus, (str, bytes)) or not all(isinstance(c, int) and not isinstance(c, bool) for c in cpus):
            raise UserError(f"cpus {cpus!r}: expected CPU numbers (a list of ints)")
        if not cpus:
            raise UserError("cpus (): an empty CPU list pins nowhere", hint="give None to leave the threads unpinned")
    for name, value in (("delegate_options", delegate_options), ("options", options)):
        if value is not None and (
            not isinstance(value, Mapping)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
        ):
            raise UserError(f"{name} {value!r}: expected a mapping of strings to strings")
    if delegate_options and not delegate:
        raise UserError("delegate_options without a delegate: they would be ignored", hint="give --delegate PATH")
    if not isinstance(timeout_s, (int, float)) or not math.isfinite(timeout_s) or not 0 < timeout_s <= 86400:
        raise UserError(f"sandbox_timeout_s {timeout_s!r}: expected a number of seconds from 0 to 86400")
