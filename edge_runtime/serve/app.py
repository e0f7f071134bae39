"""The server assembled (issue 26): model files loaded into batchers, each under a name a client can ask for, and the
`Core` both faces (REST in rest.py, gRPC in grpc_server.py) answer from.

A model's name is its file's name without the extension (`resnet8_int8_dynamic.onnx` -> `resnet8_int8_dynamic`), or
the NAME given as `NAME=PATH`. Every model loads before the server listens: one that fails is refused in one line and
nothing is served (the CLI exits 2).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from edge_runtime.errors import UserError
from edge_runtime.serve.batcher import Batcher
from edge_runtime.serve.instances import session_loader
from edge_runtime.serve.kserve import _MODEL_NAME, Core, ServedModel

_NAMED = re.compile(r"([A-Za-z0-9_][A-Za-z0-9_.-]*)=(.+)")


@dataclass(frozen=True)
class Settings:
    """The serving knobs, as `edge-runtime serve` takes them."""

    max_batch: int = 8
    max_delay_us: float = 0.0
    queue: int = 64
    instances: int = 1
    cpus: str | None = None
    start_timeout_s: float = 300.0


def model_specs(specs: list[str]) -> list[tuple[str, str]]:
    """`PATH` or `NAME=PATH` each, as (name, path); names must differ and be names a URL can carry."""
    out: list[tuple[str, str]] = []
    for spec in specs:
        m = _NAMED.fullmatch(spec)
        if m and not os.path.exists(spec):
            name, path = m.group(1), m.group(2)
        else:
            path = spec
            name = os.path.splitext(os.path.basename(spec.rstrip("/")))[0]
        if not _MODEL_NAME.fullmatch(name) or ".." in name:
            raise UserError(
                f"model {spec!r}: {name!r} is not a model name (letters, digits, _ . -)", hint="name it: NAME=PATH"
            )
        if any(name == n for n, _ in out):
            raise UserError(f"model {spec!r}: the name {name!r} is taken by another model", hint="name it: NAME=PATH")
        out.append((name, path))
    if not out:
        raise UserError("serve: no model given")
    return out


def build_core(specs: list[str], settings: Settings, load_kwargs: dict | None = None, gate=None) -> Core:
    """Every model loaded into its batcher (instances on their CPUs), then the Core. A failure closes what loaded."""
    models: list[ServedModel] = []
    try:
        for name, path in model_specs(specs):
            batcher = Batcher(
                session_loader(path, **(load_kwargs or {})),
                max_batch=settings.max_batch,
                max_delay_us=settings.max_delay_us,
                queue=settings.queue,
                instances=settings.instances,
                cpus=settings.cpus,
                start_timeout_s=settings.start_timeout_s,
            )
            models.append(ServedModel(name, path, batcher, settings.max_delay_us, settings.queue))
    except BaseException:
        for m in models:
            m.batcher.close(drain=False, timeout_s=1)
        raise
    return Core(models, gate)
