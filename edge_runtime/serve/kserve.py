"""The KServe v2 server's core, shared by its REST and gRPC faces (issue 26): the models it serves, their metadata and
Triton-format config, health, statistics, and inference through each model's batcher, with every refusal a
`ServeError` that carries its HTTP status and gRPC code.

No bytes and no sockets here: `rest.py` and `grpc_server.py` turn requests into calls on `Core` and its answers or
errors into responses. What both faces must agree on lives here once: datatype names, shapes as the protocol writes
them (-1 for a dynamic dimension), the model names a client may ask for, the reasons a request is refused.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from edge_runtime.errors import EdgeRuntimeError, FeedError
from edge_runtime.serve.batcher import Batcher
from edge_runtime.serve.requests import BatcherClosed, QueueFull

SERVER_NAME = "edge-runtime"
VERSION = "1"  # every served model has one version, "1" (Triton's default layout)
EXTENSIONS = ["binary_tensor_data", "statistics", "model_configuration", "thermal"]

# KServe v2 datatype names <-> numpy (BYTES, strings, is not served: the runtime's models take numbers)
DATATYPES = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
}
_NAMES = {dt: name for name, dt in DATATYPES.items()}
_MODEL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


class ServeError(EdgeRuntimeError):
    """A request the server refuses: one line for the client and the log, with its HTTP status and gRPC code."""

    status = 400
    grpc_code = "INVALID_ARGUMENT"

    def __init__(self, message: str, *, retry_after_s: int | None = None):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class BadRequest(ServeError):
    pass


class NotFound(ServeError):
    status = 404
    grpc_code = "NOT_FOUND"


class TooLarge(ServeError):
    status = 413
    grpc_code = "RESOURCE_EXHAUSTED"


class Unavailable(ServeError):
    """Not now: the queue is full, the board is too hot, the server is stopping. Retry-After says when to retry."""

    status = 503
    grpc_code = "UNAVAILABLE"


class QueueFullError(Unavailable):
    grpc_code = "RESOURCE_EXHAUSTED"  # the rule, and what Triton answers for a full queue


class Expired(ServeError):
    """The request's deadline passed before it ran: dropped, never run."""

    status = 504
    grpc_code = "DEADLINE_EXCEEDED"


class Cancelled(ServeError):
    """The client gave up (a gRPC call cancelled, or past its deadline in gRPC's own reckoning) before it ran."""

    status = 499  # nginx's "client closed request": nobody reads it, the log line does
    grpc_code = "CANCELLED"


class Failed(ServeError):
    """The inference itself failed (the backend's own words)."""

    status = 500
    grpc_code = "INTERNAL"


def datatype_of(dtype: np.dtype) -> str:
    try:
        return _NAMES[np.dtype(dtype)]
    except KeyError:
        raise BadRequest(f"datatype {np.dtype(dtype)}: not one KServe v2 serves") from None


def dtype_of(datatype: object, what: str) -> np.dtype:
    if not isinstance(datatype, str) or datatype not in DATATYPES:
        raise BadRequest(f"{what}: datatype {str(datatype)[:40]!r} is not one of {', '.join(DATATYPES)}")
    return DATATYPES[datatype]


def protocol_shape(shape) -> list[int]:
    return [-1 if d is None else int(d) for d in shape]


@dataclass
class ServedModel:
    """One model behind the server: its name, file and batcher."""

    name: str
    path: str
    batcher: Batcher
    max_delay_us: float
    queue: int
    max_batch: int = field(init=False)

    def __post_init__(self) -> None:
        self.max_batch = self.batcher.max_batch

    @property
    def batching(self) -> bool:
        return not self.batcher.unbatched_reason

    def tensors(self, which: str) -> list:
        return self.batcher.inputs if which == "inputs" else self.batcher.outputs

    def metadata(self) -> dict:
        def one(t) -> dict:
            return {"name": t.name, "datatype": datatype_of(t.dtype), "shape": protocol_shape(t.shape)}

        return {
            "name": self.name,
            "versions": [VERSION],
            "platform": f"edge_runtime_{self.batcher.backend.name}",
            "inputs": [one(t) for t in self.batcher.inputs],
            "outputs": [one(t) for t in self.batcher.outputs],
        }

    def config(self) -> dict:
        """Triton's model configuration (its JSON form), enough for perf_analyzer: with batching, max_batch_size > 0
        and dims without the batch dimension; without, max_batch_size 0 and the whole shape."""
        skip = 1 if self.batching else 0

        def one(t) -> dict:
            return {"name": t.name, "data_type": "TYPE_" + datatype_of(t.dtype), "dims": protocol_shape(t.shape)[skip:]}

        b = self.batcher.backend
        cfg = {
            "name": self.name,
            "platform": f"edge_runtime_{b.name}",
            "backend": "edge_runtime",
            "max_batch_size": self.max_batch if self.batching else 0,
            "input": [one(t) for t in self.batcher.inputs],
            "output": [one(t) for t in self.batcher.outputs],
            "instance_group": [{"count": len(self.batcher.instances), "kind": "KIND_CPU"}],
            "parameters": {"device": {"string_value": str(b.device)}, "model_file": {"string_value": self.path}},
        }
        if self.batching:
            cfg["dynamic_batching"] = {
                "max_queue_delay_microseconds": int(self.max_delay_us),
                "default_queue_policy": {"max_queue_size": self.queue},
            }
        return cfg


class Core:
    """The served models, health and the refusals both faces give. `gate` (a serve.heat.HeatGate or None) refuses new
    work while the board is too hot; `close()` refuses new work while what is queued finishes."""

    def __init__(self, models: list[ServedModel], gate=None):
        self.models = {m.name: m for m in models}
        self.gate = gate
        self.closing = False
        self._lock = threading.Lock()
        self.started = time.time()

    # -- health and metadata ---------------------------------------------------------------------------------------
    def live(self) -> bool:
        return True

    def ready(self) -> bool:
        return not self.closing and not (self.gate is not None and self.gate.refusing)

    def model_ready(self, name: str, version: str | None = None) -> bool:
        self.model(name, version)
        return self.ready()

    def metadata(self) -> dict:
        from edge_runtime import __version__

        return {"name": SERVER_NAME, "version": __version__, "extensions": list(EXTENSIONS)}

    def model(self, name: str, version: str | None = None) -> ServedModel:
        """The model called `name`, or NotFound in one line (a name with `/` or `..` is never looked up)."""
        if not isinstance(name, str) or not _MODEL_NAME.fullmatch(name) or ".." in name:
            raise NotFound(f"model {str(name)[:80]!r}: not a model name (letters, digits, _ . -)")
        m = self.models.get(name)
        if m is None:
            raise NotFound(f"model {name!r}: not served here (serving: {', '.join(sorted(self.models))})")
        if version not in (None, "", VERSION):
            raise NotFound(f"model {name!r} version {str(version)[:20]!r}: not served (only version {VERSION})")
        return m

    # -- inference ---------------------------------------------------------------------------------------------------
    def submit(
        self,
        name: str,
        version: str | None,
        feeds: Mapping[str, np.ndarray],
        timeout_s: float | None = None,
        inline: bool = False,
    ):
        """Queue one request; a Future of its outputs. Refusals raise ServeError at once (nothing queued). With
        `inline` a lone request may run in the caller's thread (Batcher.submit): for a face with a thread per call
        (gRPC's pool), never for an event loop (it would run a burst one by one, each alone, the queue bypassed)."""
        m = self.model(name, version)
        self.admit()
        deadline = None
        if timeout_s is not None:
            if not (
                isinstance(timeout_s, (int, float)) and not isinstance(timeout_s, bool) and math.isfinite(timeout_s)
            ):
                raise BadRequest(f"timeout {timeout_s!r}: expected a number of seconds")
            # a deadline already passed (a client's that ran out on the way) is dropped by the batcher, and counted
            deadline = time.monotonic() + min(max(timeout_s, 0.0), 3600.0)
        try:
            return m.batcher.submit(feeds, deadline, inline=inline)
        except QueueFull as err:
            raise QueueFullError(f"model {name!r}: {err}", retry_after_s=1) from None
        except BatcherClosed:
            raise Unavailable("server is shutting down: it takes no new requests", retry_after_s=5) from None
        except FeedError as err:
            raise BadRequest(str(err)) from None

    def admit(self) -> None:
        """Raise Unavailable when the server takes no new work now (stopping, or too hot)."""
        if self.closing:
            raise Unavailable("server is shutting down: it takes no new requests", retry_after_s=5)
        if self.gate is not None:
            self.gate.check()

    @staticmethod
    def outcome(future: Future) -> dict[str, np.ndarray]:
        """The outputs of a finished request, or its end as a ServeError."""
        from concurrent.futures import CancelledError

        from edge_runtime.serve.requests import DeadlineExpired

        try:
            return future.result()
        except CancelledError:
            raise Cancelled("cancelled by the client before it ran: dropped, counted as cancelled") from None
        except DeadlineExpired as err:
            raise Expired(str(err)) from None
        except BatcherClosed as err:
            raise Unavailable(str(err), retry_after_s=5) from None
        except EdgeRuntimeError as err:
            raise Failed(f"inference failed: {err}") from None
        except Exception as err:  # noqa: BLE001 - a backend's own error, answered to the client, never raised on
            raise Failed(f"inference failed: {type(err).__name__}: {str(err)[:300]}") from None

    def infer(self, name, version, feeds, timeout_s: float | None = None) -> dict[str, np.ndarray]:
        """submit() and wait (the blocking form, for a thread per request)."""
        return self.outcome(self.submit(name, version, feeds, timeout_s))

    # -- statistics --------------------------------------------------------------------------------------------------
    def statistics(self, name: str | None = None, version: str | None = None) -> dict:
        """Triton's statistics extension: {"model_stats": [...]}, each with our rejected/expired/cancelled and the
        queue's depth; "thermal" beside them when a gate runs."""
        models = [self.model(name, version)] if name else [self.models[n] for n in sorted(self.models)]
        out = {
            "model_stats": [
                {"name": m.name, "version": VERSION, **m.batcher.stats(), "queued": m.batcher.queued()} for m in models
            ]
        }
        if self.gate is not None:
            out["thermal"] = self.gate.state()
        return out

    def close(self, timeout_s: float = 30.0) -> bool:
        """Refuse new work, finish what is queued; True when every batcher drained in time."""
        self.closing = True
        end = time.monotonic() + timeout_s
        ok = True
        for m in self.models.values():
            ok = m.batcher.close(drain=True, timeout_s=max(0.0, end - time.monotonic())) and ok
        if self.gate is not None:
            self.gate.stop()
        return ok
