"""`edge-runtime run`: load a model and run one inference (random inputs unless given)."""

from __future__ import annotations

import sys
import time
import warnings

from edge_runtime.cli.common import load_inputs
from edge_runtime.program.args import PROG, add_debug, add_json, emit_json, integer, plan_outputs
from edge_runtime.program.bench_flags import add_model_options, input_paths, load_kwargs


def add_arguments(p) -> None:
    add_model_options(p)
    p.add_argument(
        "--top",
        type=integer(0, 10**6),
        default=5,
        metavar="K",
        help="how many top values per output to show (default 5)",
    )
    add_json(p)
    add_debug(p)


def _top(info, arr, k: int) -> tuple[list[list[float]], int]:
    """The k largest finite values as [index, value], and how many values were NaN or infinite (never ranked: a
    top-5 of NaNs would look like an answer)."""
    import numpy as np

    real = info.dequantize(arr) if info.quantization is not None else arr
    flat = np.asarray(real).reshape(-1)
    if flat.dtype.kind not in "fiub" or flat.size == 0:
        return [], 0
    with np.errstate(over="ignore", invalid="ignore"):
        f64 = flat.astype(np.float64)
    finite = np.isfinite(f64)
    order = np.argsort(-np.where(finite, f64, -np.inf), kind="stable")
    idx = order[finite[order]][:k]
    return [[int(i), float(f64[i])] for i in idx], int(flat.size - np.count_nonzero(finite))


def run(args) -> int:
    """With the crash check (the default) the whole run happens in a child forked before numpy or a backend is
    imported: the check is the run, so nothing is loaded twice (it was: a check child, then again here). Without
    it, or where this process already has threads, it runs here (after a check child, unless --no-sandbox)."""
    from edge_runtime.runtime import sandbox

    outs = plan_outputs([("--json", args.json)], input_paths(args))
    kwargs = load_kwargs(args)
    if kwargs["sandbox"] and sandbox.can_fork():
        doc, notes = _isolated(args, {**kwargs, "sandbox": False})
        args.forked = True  # the command line may end this process without a teardown (program.main._end_now)
    else:
        doc, notes = _measure(args, kwargs)
    for note in notes:
        print(f"{PROG}: warning: {note}", file=sys.stderr)
    if emit_json(doc, outs):
        return 0
    print(render(doc), end="")
    return 0


def _measure(args, kwargs: dict, say=None) -> tuple[dict, list[str]]:
    """Load, feed, run once: the record, and the warnings to show (as text). `say` (in the forked child) is told the
    backend before its library is imported, then that the import passed, so a crash is blamed on the right part; the
    model's sha256 is then left to the parent (None here), which hashes it while the child works."""
    import numpy as np

    from edge_runtime.runtime import backends
    from edge_runtime.runtime.load import load
    from edge_runtime.runtime.model import DEFAULT_BACKEND, inspect_model

    if say is not None:
        name = kwargs["backend"] or DEFAULT_BACKEND[inspect_model(args.model).format]
        say({"backend": name})
        say({"imported": backends.get(name).library_version()})
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = load(args.model, **kwargs)
    notes = [str(w.message) for w in caught]
    load_ms = (time.perf_counter() - t0) * 1e3
    with session:
        feeds, sources = load_inputs(args.input, session, args.seed)
        t1 = time.perf_counter()
        outputs = session.infer(feeds)
        infer_ms = (time.perf_counter() - t1) * 1e3
        doc = {
            "schema": "edge-runtime/run/1",
            "model": {
                "path": str(session.model.path),
                "sha256": session.model.sha256 if say is None else None,
                "format": session.model.format,
            },
            "backend": session.backend.to_dict(),
            "inputs": [{**t.to_dict(), "source": sources[t.name]} for t in session.inputs],
            "outputs": [],
            "timing_ms": {"load": round(load_ms, 3), "first_inference": round(infer_ms, 3)},
        }
        for t in session.outputs:
            top, bad = _top(t, outputs[t.name], args.top)
            doc["outputs"].append({**t.to_dict(), "top": top, "non_finite": bad})
            if bad:
                size = int(np.asarray(outputs[t.name]).size)
                notes.append(
                    f"output {t.name!r}: {bad} of {size} values are NaN or infinite "
                    "(an input out of the model's range, or a broken model)"
                )
    return doc, notes


def _isolated(args, kwargs: dict) -> tuple[dict, list[str]]:
    """_measure in the forked child; its crash, hang or error becomes what the crash check says of it."""
    from types import SimpleNamespace

    from edge_runtime.errors import EdgeRuntimeError, ModelError
    from edge_runtime.runtime import sandbox

    def work(say) -> None:
        try:
            doc, notes = _measure(args, kwargs, say)
            say({"ok": True, "doc": doc, "notes": notes})
        except EdgeRuntimeError as err:
            say({"ok": False, "error": type(err).__name__, "message": err.message, "hint": err.hint})
        except Exception as err:  # noqa: BLE001 - told to the parent, which says it in one line
            say({"ok": False, "error": "ModelError", "message": f"model {args.model!r}: {type(err).__name__}: {err}"})

    hashed: list[str] = []

    def meanwhile() -> None:  # the parent would only wait while the child imports and loads: it hashes the model
        from edge_runtime.runtime.model import inspect_model

        try:
            hashed.append(inspect_model(args.model).sha256)
        except EdgeRuntimeError:
            pass  # the child says what is wrong with the file

    timeout = sandbox.TIMEOUT_S
    try:
        code, lines, err = sandbox.forked(work, timeout, meanwhile)
    except TimeoutError:
        raise ModelError(
            f"model {args.model!r}: it did not load and run within {timeout:g} s (checked in a child process)"
        ) from None
    backend = next((d["backend"] for d in lines if d and "backend" in d), kwargs["backend"] or "the")
    asked = SimpleNamespace(delegate=kwargs["delegate"], device=kwargs["device"], fallback=kwargs["fallback"])
    cpu = {**kwargs, "delegate": None, "delegate_options": {}, "device": None}
    answer = sandbox.verdict(code, lines, err, str(args.model), backend, asked, lambda: _isolated(args, cpu))
    if isinstance(answer, sandbox.Fallback):  # the accelerator crashed the child: the CPU run, said as a fallback
        doc, notes = answer.answer
        doc["backend"].update(fallback=True, fallback_reason=answer.why)
        return doc, [f"{backend}: falling back to CPU: {answer.why}", *notes]
    doc = answer["doc"]
    if not hashed:  # read here, the file's error is said (a file changed under the run)
        from edge_runtime.runtime.model import inspect_model

        hashed.append(inspect_model(args.model).sha256)
    doc["model"]["sha256"] = hashed[0]
    return doc, answer.get("notes") or []


def render(doc: dict) -> str:
    model, b = doc["model"], doc["backend"]
    where = b["device"] + (f", delegate {b['delegate']}" if b["delegate"] else "")
    fb = f"  FALLBACK to CPU: {b['fallback_reason']}" if b["fallback"] else ""
    lines = [
        f"model    {model['path']}  ({model['format']}, sha256 {model['sha256'][:12]})",
        f"backend  {b['name']} {b['version']} on {where}{fb}",
    ]
    lines += [f"input    {t['name']}  {tuple(t['shape'])} {t['dtype']}  <- {t['source']}" for t in doc["inputs"]]
    for t in doc["outputs"]:
        top = "  ".join(f"[{i}]={v:.4g}" for i, v in t["top"]) or "none"
        if t.get("non_finite"):
            top += f" ({t['non_finite']} values NaN or infinite)"
        lines.append(f"output   {t['name']}  {tuple(t['shape'])} {t['dtype']}  top: {top}")
    timing = doc["timing_ms"]
    lines.append(f"time     load {timing['load']:.1f} ms, first inference {timing['first_inference']:.3f} ms")
    return "\n".join(lines) + "\n"
