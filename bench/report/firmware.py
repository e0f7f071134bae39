"""The reports' section for runs on MLPerf Tiny firmware (issue 27): what the device's own timer said, as MLPerf Tiny
reports it (the median of the loops' inferences per second, and the mean per inference it gives), whether the run
is one MLPerf Tiny counts, the accuracy in accuracy mode, the resets on the way; and why the table's percentiles
are "-" (the device times loops, not inferences). Pure: runs in, text, Markdown and HTML out.

Never: invent a percentile from loop means, or rank a firmware run's mean as if it were a p50 without saying so."""

from __future__ import annotations

import html

from bench.report.units import duration, rate

NOTE = ("p50/p99 are '-' for a firmware run in performance mode: the device times each loop of N inferences, "
        "not each inference (a mean per loop, no distribution); its figure is the median of the loops, as MLPerf "
        "Tiny's")  # fmt: skip


def rows(items: list[tuple[str, dict | None]]) -> list[dict]:
    """One row per firmware run among (name, result) pairs; [] when none is."""
    out = []
    for name, res in items:
        fw = (res or {}).get("firmware")
        if not fw:
            continue
        loops = fw.get("loops") or []
        acc = fw.get("accuracy") or {}
        rule = fw.get("mlperf_rule") or {}
        out.append({
            "run": name,
            "device": (fw.get("device") or {}).get("board") or "?",
            "model": (fw.get("device") or {}).get("model") or "?",
            "mode": fw.get("mode") or "?",
            "mean_us": (res.get("latency_us") or {}).get("mean"),
            "throughput_ips": res.get("throughput_ips"),
            "loops": len(loops) if fw.get("mode") == "performance" else None,
            "loop_s": [round(lp["elapsed_us"] / 1e6, 2) for lp in loops],
            "mlperf": ("yes" if rule.get("met") else f"no: {rule.get('why')}") if rule else "-",
            "accuracy": f"{acc['metric']} {acc['value']:.4g} over {acc['samples']:,}" if acc else "-",
            "resets": fw.get("resets", 0),
        })  # fmt: skip
    return out


def _cells(r: dict) -> list[str]:
    loops = f"{r['loops']} ({', '.join(f'{s:g}' for s in r['loop_s'][:8])} s)" if r["loops"] else "-"
    return [str(r["run"]), f"{r['device']}, {r['model']}", r["mode"], duration(r["mean_us"]) if r["mean_us"] else "-",
            rate(r["throughput_ips"]) if r["throughput_ips"] else "-", loops, r["accuracy"], str(r["resets"]),
            r["mlperf"]]  # fmt: skip


HEAD = ["run", "device, model", "mode", "mean/inference", "median of loops", "loops", "accuracy", "resets",
        "an MLPerf Tiny score"]  # fmt: skip


def text(items: list[tuple[str, dict | None]]) -> str:
    found = rows(items)
    if not found:
        return ""
    lines = ["", "MLPerf Tiny firmware (the device's own timer):"]
    for r in found:
        said = (f"{rate(r['throughput_ips'])} (median of {r['loops']} loop(s)), {duration(r['mean_us'])} per inference"
                if r["loops"] else r["accuracy"])  # fmt: skip
        score = "an MLPerf Tiny score" if r["mlperf"] == "yes" else f"not an MLPerf Tiny score ({r['mlperf'][4:]})"
        lines.append(f"  {r['run']}: {r['model']} on {r['device']}, {r['mode']}: {said}; resets {r['resets']}"
                     + (f"; {score}" if r["loops"] else ""))  # fmt: skip
    return "\n".join([*lines, *(["  " + NOTE] if any(r["loops"] for r in found) else [])]) + "\n"


def markdown(items: list[tuple[str, dict | None]]) -> str:
    found = rows(items)
    if not found:
        return ""
    out = ["", "## MLPerf Tiny firmware (the device's own timer)", "", "| " + " | ".join(HEAD) + " |",
           "|" + "---|" * len(HEAD)]  # fmt: skip
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in _cells(r)) + " |" for r in found]
    return "\n".join([*out, *(["", NOTE] if any(r["loops"] for r in found) else [])]) + "\n"


def html_section(items: list[tuple[str, dict | None]]) -> str:
    found = rows(items)
    if not found:
        return ""
    e = html.escape
    head = "".join(f"<th>{e(h)}</th>" for h in HEAD)
    body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in _cells(r)) + "</tr>" for r in found)
    return (f'<section id="firmware"><h2>MLPerf Tiny firmware (the device\'s own timer)</h2><table><tr>{head}</tr>'
            f"{body}</table>" + (f'<p class="note">{e(NOTE)}</p>' if any(r["loops"] for r in found) else "")
            + "</section>")  # fmt: skip


def one_run_text(doc: dict) -> str:
    """`edge-bench run`'s summary of one firmware run (its table's percentiles are absent: said why)."""
    (r,) = rows([("run", doc)])
    fw = doc["firmware"]
    lines = [f"MLPerf Tiny firmware: {r['device']}, model {r['model']}, {r['mode']} mode (the device's own timer)"]
    if r["mode"] == "performance":
        lines.append(f"  throughput   {rate(r['throughput_ips']) if r['throughput_ips'] else '-'} (median of "
                     f"{r['loops']} loops of {', '.join(f'{s:g}' for s in r['loop_s'])} s)")  # fmt: skip
        lines.append(f"  latency      {duration(r['mean_us']) if r['mean_us'] else '-'} per inference (mean); "
                     f"percentiles absent: {fw.get('why_no_percentiles')}")  # fmt: skip
        lines.append(f"  MLPerf Tiny  {'a valid run' if r['mlperf'] == 'yes' else r['mlperf']}")
    else:
        lat = doc.get("latency_us") or {}
        lines.append(f"  accuracy     {r['accuracy']}")
        if lat.get("count"):
            lines.append(f"  latency      p50 {duration(lat.get('p50'))}, p99 {duration(lat.get('p99'))}, max "
                         f"{duration(lat.get('max'))} over {lat['count']:,} inferences each timed alone")  # fmt: skip
    lines.append(f"  resets       {r['resets']}; pieces resent {fw.get('pieces_resent', 0)}; loads done again one "
                 f"piece at a time {fw.get('loads_fallen_back', 0)}")  # fmt: skip
    return "\n".join(lines) + "\n"
