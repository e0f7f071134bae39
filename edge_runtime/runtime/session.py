"""`Session`: one loaded model, inputs bound once (`load()`, in load.py, makes one).

The Session does the checks (names, shapes, dtypes) when an input is bound, not on every call: a repeated `infer`
with the same arrays only runs the model and copies the outputs out, so a measured call measures inference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from edge_runtime.errors import EdgeRuntimeError, FeedError, InferenceError, SessionClosedError
from edge_runtime.runtime.backends.base import Backend, LoadOptions, TensorInfo
from edge_runtime.runtime.model import ModelFile


@dataclass(frozen=True)
class BackendInfo:
    """What actually runs: the result's `backend` section (DESIGN.md)."""

    name: str
    version: str
    device: str
    delegate: str | None
    fallback: bool
    fallback_reason: str | None = None
    requested_device: str | None = None
    requested_delegate: str | None = None
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


class Session:
    """A loaded model. `infer(feeds)` runs it; `bind(feeds)` + `run()` is the allocation-free pair for timing loops."""

    def __init__(self, model: ModelFile, impl: Backend, backend: BackendInfo, options: LoadOptions):
        self.model = model
        self.backend = backend
        self.options = options
        self._impl = impl
        # The pip distributions behind this backend, whose versions go into a result's environment.
        self.distributions: tuple[str, ...] = type(impl).distributions
        self.inputs: list[TensorInfo] = list(impl.inputs)
        self.outputs: list[TensorInfo] = list(impl.outputs)
        self._in_names = [t.name for t in self.inputs]
        self._out_names = [t.name for t in self.outputs]
        self._in_enum = list(enumerate(self._in_names))
        self._out_enum = list(enumerate(self._out_names))
        # The caller's array last bound per input; None when a converted copy was bound (rebind every call then,
        # since the caller may change the original in place).
        self._bound_src: list[object] = [None] * len(self.inputs)
        # What the backend was given per input (the caller's array or its converted copy); None until bound.
        self._bound_arr: list[np.ndarray | None] = [None] * len(self.inputs)
        # The caller's objects behind converted copies, re-converted by run() so in-place changes are seen.
        self._converted: dict[int, object] = {}
        self._rebind_each = impl.rebind_each_run
        self._out_copy = not impl.output_is_copy
        self._closed = False
        self._ran = False  # results() before any run would hand out uninitialised memory
        handles = impl.fast_handles() if len(self.inputs) == 1 else None
        self._handles = handles
        if handles is not None:
            self.infer = self._make_fast_infer(handles)  # type: ignore[method-assign]

    def _make_fast_infer(self, h):
        """`infer` for the common one-input model: when the caller passes the array already bound, go straight to the
        backend's calls (one Python frame more than the raw library call); anything else takes the general path."""
        general = self._infer_general
        bound = self._bound_src
        name = self._in_names[0]
        set_input, run, outputs = h.set_input, h.run, h.outputs
        single = outputs[0] if len(outputs) == 1 else None  # the usual case: skip the comprehension's frame

        def infer(feeds):
            if type(feeds) is dict and len(feeds) == 1:
                x = feeds.get(name)
                if x is bound[0] and x is not None:
                    try:
                        if set_input is not None:
                            set_input(x)
                        run()
                    except Exception as err:
                        raise self._inference_error(err) from err
                    if single is not None:
                        return {single[0]: single[1]()}
                    return {n: get() for n, get in outputs}
            return general(feeds)

        infer.__doc__ = self._infer_general.__doc__
        return infer

    # -- inputs ------------------------------------------------------------------------------------------------
    def _as_mapping(self, feeds) -> Mapping[str, object]:
        if isinstance(feeds, Mapping):
            unknown = [k for k in feeds if k not in self._in_names]
            missing = [k for k in self._in_names if k not in feeds]
            if unknown or missing:
                parts = []
                if missing:
                    parts.append(f"missing input(s) {', '.join(map(repr, missing))}")
                if unknown:
                    parts.append(f"unknown input(s) {', '.join(map(repr, unknown))}")
                raise FeedError(
                    f"model {self.model.path.name!r}: {'; '.join(parts)}",
                    hint=f"its inputs are: {', '.join(self._in_names)}",
                )
            return feeds
        if isinstance(feeds, np.ndarray):
            feeds = [feeds]
        if isinstance(feeds, Sequence) and not isinstance(feeds, (str, bytes)):
            if len(feeds) != len(self.inputs):
                raise FeedError(
                    f"model {self.model.path.name!r} takes {len(self.inputs)} input(s), got {len(feeds)}",
                    hint=f"its inputs are: {', '.join(self._in_names)}",
                )
            return dict(zip(self._in_names, feeds, strict=True))
        raise FeedError(f"feeds must be a dict of arrays, a list of arrays or one array, got {type(feeds).__name__}")

    def _bind_one(self, index: int, value: object) -> None:
        info = self.inputs[index]
        arr = value if isinstance(value, np.ndarray) else np.asarray(value)
        converted = arr is not value
        if arr.dtype != info.dtype:
            same_kind = arr.dtype.kind == info.dtype.kind == "f"
            bool_mix = (arr.dtype.kind == "b") != (info.dtype.kind == "b")  # numpy calls bool->float "safe"; it is not
            if bool_mix or not (same_kind or np.can_cast(arr.dtype, info.dtype, "safe")):
                hint = (
                    "a full-integer model takes quantized values: x / scale + zero_point of this input "
                    "(session.inputs[i].quantize(x) in Python)"
                    if info.quantization
                    else None
                )
                raise FeedError(
                    f"input {info.name!r} of {self.model.path.name!r} expects {info.dtype}, got {arr.dtype}",
                    hint=hint,
                )
            arr = arr.astype(info.dtype)
            converted = True
        if len(arr.shape) != len(info.shape) or any(
            want is not None and want != got for want, got in zip(info.shape, arr.shape, strict=True)
        ):
            want = "(" + ", ".join("?" if d is None else str(d) for d in info.shape) + ")"
            raise FeedError(
                f"input {info.name!r} of {self.model.path.name!r} expects shape {want} {info.dtype}, "
                f"got {tuple(arr.shape)} {arr.dtype}"
            )
        if not arr.flags.c_contiguous or not arr.flags.aligned or not arr.flags.writeable:
            # Read-only memory (np.frombuffer, memory maps) cannot back a shared backend tensor either.
            arr = np.array(arr, order="C", copy=True)
            converted = True
        self._impl.bind_input(index, arr)
        self._bound_src[index] = None if converted else value
        self._bound_arr[index] = arr
        if converted:
            self._converted[index] = value
        else:
            self._converted.pop(index, None)

    def bind(self, feeds) -> None:
        """Check `feeds` against the inputs and bind them; `run()` then uses them (in-place changes included)."""
        self._check_open()
        feeds_map = self._as_mapping(feeds)
        for index, name in self._in_enum:
            self._bind_one(index, feeds_map[name])

    # -- running -----------------------------------------------------------------------------------------------
    def run(self) -> None:
        """One inference on the bound inputs; outputs stay in the backend (read them with `results()`)."""
        self._check_open()
        if any(a is None for a in self._bound_arr):
            raise FeedError("run() needs inputs bound first with bind(feeds)")
        for index, value in self._converted.items():  # the caller's array may have changed in place since bind()
            np.copyto(self._bound_arr[index], np.asarray(value), casting="unsafe")  # type: ignore[arg-type]
        if self._rebind_each:  # the backend copies inputs in: copy again so in-place changes are seen
            for index, arr in enumerate(self._bound_arr):
                self._impl.bind_input(index, arr)  # type: ignore[arg-type]
        self._run()

    def _run(self) -> None:
        self._ran = True
        try:
            self._impl.run()
        except EdgeRuntimeError:
            raise
        except Exception as err:
            raise self._inference_error(err) from err

    def _inference_error(self, err: Exception) -> InferenceError:
        shapes = ", ".join(
            f"{t.name} {tuple(a.shape) if a is not None else '?'}"
            for t, a in zip(self.inputs, self._bound_arr, strict=True)
        )
        msg = " ".join(str(err).split())[:300] or type(err).__name__
        return InferenceError(
            f"model {self.model.path.name!r}: {self.backend.name} failed to run on inputs {shapes}: {msg}"
        )

    def runner(self):
        """The leanest zero-argument callable that runs the model once on the inputs as bound now, for timing loops.

        It does not re-check, re-convert or re-copy inputs (a backend that copies inputs in, like TFLite, keeps what
        `bind()` gave it): bind the data first, then time the runner. Outputs stay in the backend (`results()`). It
        carries no check of its own, to cost nothing in the loop: it is valid until `close()`, not after.
        """
        self._check_open()
        if any(a is None for a in self._bound_arr):
            raise FeedError("runner() needs inputs bound first with bind(feeds)")
        self._ran = True  # the caller runs it next; results() then reads what it wrote
        return self._handles.run if self._handles is not None else self._impl.run

    def results(self) -> dict[str, np.ndarray]:
        """The last run's outputs, as arrays the caller owns."""
        self._check_open()
        if not self._ran:
            raise FeedError("results() before any run: bind(feeds) and run() first (or use infer)")
        impl = self._impl
        if self._out_copy:
            return {name: impl.output(i).copy() for i, name in self._out_enum}
        return {name: impl.output(i) for i, name in self._out_enum}

    def infer(self, feeds) -> dict[str, np.ndarray]:
        """Run once on `feeds` (dict name -> array, list in input order, or one array) and return the outputs."""
        return self._infer_general(feeds)

    def _infer_general(self, feeds) -> dict[str, np.ndarray]:
        """Run once on `feeds` (dict name -> array, list in input order, or one array) and return the outputs.

        Arrays already bound are not checked or copied again; arrays the caller owns come back.
        """
        self._check_open()
        if type(feeds) is dict and len(feeds) == len(self._in_names):
            src = self._bound_src
            impl = self._impl
            for index, name in self._in_enum:
                value = feeds.get(name)
                if value is None or value is not src[index]:
                    self._bind_one(index, self._as_mapping(feeds)[name])
                elif self._rebind_each:
                    impl.bind_input(index, value)
        else:
            feeds_map = self._as_mapping(feeds)
            for index, name in self._in_enum:
                value = feeds_map[name]
                if value is self._bound_src[index] and value is not None:
                    if self._rebind_each:
                        self._impl.bind_input(index, value)  # type: ignore[arg-type]
                else:
                    self._bind_one(index, value)
        self._run()
        return self.results()

    # -- lifetime ----------------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError(f"session for {self.model.path.name!r} is closed", hint="load the model again")

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.infer = self._infer_general  # type: ignore[method-assign]  # drop the fast path's references
            self._handles = None
            self._impl.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        b = self.backend
        return (
            f"<Session {self.model.path.name} on {b.name} {b.version} {b.device}{' (fallback)' if b.fallback else ''}>"
        )
