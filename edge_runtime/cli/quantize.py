"""`edge-runtime quantize`: FP32 ONNX -> INT8 with calibration data, checked against FP32, mixed precision."""

from __future__ import annotations

import sys

from edge_runtime.errors import UsageError
from edge_runtime.program.args import PROG, add_debug, add_json, emit_json, path_arg, real


def add_arguments(p) -> None:
    p.add_argument("model", metavar="MODEL", type=path_arg, help="FP32 .onnx model")
    p.add_argument(
        "--calibration", required=True, type=path_arg, metavar="PATH", help=".npy/.npz file or folder of them"
    )
    p.add_argument(
        "--out",
        required=True,
        type=path_arg,
        metavar="OUT",
        help="quantized model: .onnx (onnxruntime) or .xml (openvino)",
    )
    p.add_argument("--backend", default="onnxruntime", choices=["onnxruntime", "openvino"])
    p.add_argument("--method", default="minmax", choices=["minmax", "entropy", "percentile"], help="calibration")
    gran = p.add_mutually_exclusive_group()
    gran.add_argument("--per-channel", action="store_true", default=True, help="per-channel weights (default)")
    gran.add_argument("--per-tensor", action="store_true", help="one scale per weight tensor")
    p.add_argument(
        "--activations",
        default="auto",
        choices=["auto", "u8", "s8"],
        help="onnxruntime activation type (default auto: both quantized and measured, the faster kept; on the "
        "openvino path auto measures NNCF's performance and mixed presets the same way)",
    )
    p.add_argument(
        "--validation", type=path_arg, metavar="PATH", help="validation inputs (.npz may carry labels as 'y')"
    )
    p.add_argument("--labels", type=path_arg, metavar="PATH", help="validation labels (.npy), for top-1")
    p.add_argument(
        "--max-accuracy-drop",
        type=real(0.0, 100.0, "points"),
        metavar="POINTS",
        help="keep the most sensitive layers in FP32 until the top-1 drop is at most this many points",
    )
    add_json(p)
    add_debug(p)


def run(args) -> int:
    from edge_runtime import quantize as q

    cfg = q.QuantizeConfig(
        model=args.model,
        calibration=args.calibration,
        out=args.out,
        backend=args.backend,
        method=args.method,
        per_channel=not args.per_tensor,
        activations=args.activations,
        validation=args.validation,
        labels=args.labels,
        max_accuracy_drop=args.max_accuracy_drop,
    )
    if args.labels and not args.validation:
        raise UsageError("--labels goes with --validation")
    outs = q.plan_outputs(cfg, args.json)
    res = q.run(cfg, lambda m: print(m, file=sys.stderr, flush=True), outputs=outs)
    for w in res.warnings:
        print(f"{PROG}: warning: {w}", file=sys.stderr)
    doc = res.doc
    doc["warnings"] = res.warnings
    code = 1 if doc.get("meets_budget") is False else 0
    if emit_json(doc, outs):
        return code
    print(render(doc, args.max_accuracy_drop), end="")
    return code


def render(doc: dict, budget: float | None) -> str:
    out: list[str] = []
    out.append(
        f"quantized  {doc['out']['path']}  ({doc['precision']}, {doc['backend']}, {doc['method']}, "
        f"{'per-channel' if doc['per_channel'] else 'per-tensor'}, {doc['calibration_samples']} calibration samples)"
    )
    act = doc["activations"]
    out.append(f"types      activations {act['type']}, weights {act['weights']}: {act['why']}")
    m = act.get("measured")
    if m:
        def drop(f: str) -> str:
            return f", drop {m[f + '_drop_points']:.2f} pts" if m.get(f + "_drop_points") is not None else ""

        names = {"u8": "U8S8", "s8": "S8S8"} if "u8_speedup" in m else {"performance": "Performance", "mixed": "Mixed"}
        both = ", ".join(f"{n} {m[f + '_speedup']:.2f}x{drop(f)}" for f, n in names.items())
        neither = "" if act["faster_than_fp32"] else "  (NEITHER beats FP32)"
        out.append(f"flavours   {both} against FP32 p50 {m['fp32_p50_us']:.1f} us{neither}")
    rows = [("INT8", doc["accuracy_int8"])] + ([("mixed", doc["accuracy_mixed"])] if "accuracy_mixed" in doc else [])
    out.append(
        f"{'accuracy':<10} {'top-1 FP32':>10} {'top-1 q':>8} {'agree':>7} {'drop pts':>9} {'SQNR dB':>8} {'max err':>8}"
    )
    for name, a in rows:

        def pct(k, a=a):
            return f"{a[k]:.2%}" if k in a else "-"

        drop = f"{a['drop_points']:.2f}" if "drop_points" in a else "-"
        exact = a["max_abs_error"] == 0
        sqnr = f"{a['sqnr_db']:.1f}" if a["sqnr_db"] is not None else ("exact" if exact else "-")
        err = f"{a['max_abs_error']:.3g}" if a["max_abs_error"] is not None else "-"
        out.append(
            f"{name:<10} {pct('fp32_top1'):>10} {pct('int8_top1'):>8} {pct('top1_agreement'):>7} {drop:>9} "
            f"{sqnr:>8} {err:>8}"
        )
    if doc["kept_fp32"]:
        out.append(f"kept FP32  {', '.join(doc['kept_fp32'])}")
    if doc.get("meets_budget") is not None:
        verdict = "meets" if doc["meets_budget"] else "MISSES"
        out.append(f"budget     {verdict} --max-accuracy-drop {budget:g} points")
    lat, size = doc["latency_us"], doc["size_bytes"]
    mixed = f", mixed {lat['mixed_p50']:.1f} us" if "mixed_p50" in lat else ""
    out.append(
        f"latency    FP32 {lat['fp32_p50']:.1f} us, INT8 {lat['int8_p50']:.1f} us{mixed}: {lat['speedup']:.2f}x "
        "for the written model (medians of 3 interleaved runs, 1 thread)"
    )
    out.append(
        f"size       {size['what']}: {size['fp32']:,} -> {size['quantized']:,} bytes ({size['ratio']:.0%})"
        + (
            f"; with the .xml {size['fp32_total']:,} -> {size['quantized_total']:,}"
            if size["what"] != "model file"
            else ""
        )
    )
    out.append(f"manifest   {doc['manifest_file']}")

    return "\n".join(out) + "\n"
