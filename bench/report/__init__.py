"""Reports of runs, for people and for tools: a terminal table, Markdown, CSV (one row per run), JSON (the rows and the
result records), JUnit XML (one test case per SLO and run, so a CI shows which target missed what) and, in
bench.report.html, one self-contained HTML file with plots (that module alone imports matplotlib)."""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass

COLUMNS = ["run", "target", "model", "scenario", "repetition", "count", "p50_us", "p99_us", "p999_us", "max_us",
           "throughput_ips", "slo", "valid", "partial", "saturated", "error"]  # fmt: skip
# The CSV's own: the rates behind `saturated` (the table and Markdown say them in a note under the runs).
CSV_ONLY = ["scheduled_qps", "achieved_qps", "not_sent"]
RUN_COMPLETES = "run completes"  # the check a run that failed outright misses (not an SLO of the runs that ran)


def state_cells(result: dict | None) -> dict:
    """How whole a run is and whether its target kept to its schedule, as row cells: `partial` (yes: cut short, its
    numbers are from part of the run), `saturated` (yes/no; None where no schedule was kept: a closed loop, an older
    record), the rates behind it, and a note for each that is yes (said under the table)."""
    from edge_runtime.measure.scenario import saturation_text

    if not result:
        return {"partial": None, "saturated": None, "notes": []}
    sc, ab = result.get("scenario") or {}, result.get("aborted")
    notes = []
    if ab:
        at = f" at {ab['at_s']:g} s" if isinstance(ab.get("at_s"), (int, float)) else ""
        notes.append(f"partial: {ab.get('reason') or ab.get('kind') or 'cut short'}{at}")
    notes += [saturation_text(sc)] if sc.get("saturated") else []
    kept = sc.get("saturated")
    rates = {k: sc.get(k) for k in CSV_ONLY} if kept is not None else {}
    return {"partial": "yes" if ab else "no", "saturated": None if kept is None else ("yes" if kept else "no"),
            **rates, "notes": notes}  # fmt: skip


def verdict_line(rows: list[dict], cases: list[dict]) -> str:
    """The runs' verdict in one line: the runs that failed, by what failed (a target that is down is not an SLO
    missed), the partial and saturated ones, then the SLO checks of the runs that ran."""
    parts = []
    failed = [r for r in rows if r.get("error")]
    if failed:
        seen = Counter(f"target {str(r.get('target'))!r}: {r['error']}" for r in failed)
        said = "; ".join(what + (f" (x{k})" if k > 1 else "") for what, k in list(seen.items())[:3])
        more = f"; and {len(seen) - 3} other failures" if len(seen) > 3 else ""
        parts.append(f"{len(failed)} of {len(rows)} runs failed: {said}{more}")
    for key, word in (("partial", "partial (cut short)"), ("saturated", "saturated")):
        k = sum(r.get(key) == "yes" for r in rows)
        if k:
            parts.append(f"{k} of {len(rows)} runs {word}")
    checks = [c for c in cases if c["slo"] != RUN_COMPLETES]
    missed = sum(not c["pass"] for c in checks)
    if missed:
        parts.append(f"SLO missed: {missed} of {len(checks)} checks")
    else:
        parts.append(f"all {len(checks)} SLO checks pass" if checks else "no SLOs given")
    return "; ".join(parts)


def _notes(rows: list[dict]) -> list[tuple[dict, str]]:
    return [(r, n) for r in rows for n in r.get("notes") or []]


def _cell(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.1f}"
    return str(v)


# GitHub Markdown that a value must not make: a cell (`|`), the end of a row (a newline), code (`), a link or an image
# ([...](...)), a backslash escape, raw HTML or an autolink (`<` before a letter, `/`, `!` or `?`; "p99 <= 10 ms"
# stays as it is) or an entity (`&lt;`).
_MD_PUNCT = re.compile(r"([\\`|\[\]])")
_MD_HTML = re.compile(r"<(?=[A-Za-z/!?])")
_MD_ENTITY = re.compile(r"&(?=#?[A-Za-z0-9]+;)")
# A spreadsheet evaluates a text cell that starts with one of these (OWASP, CSV injection): "=HYPERLINK(...)".
_CSV_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def md_text(v) -> str:
    """A value as literal text in GitHub Markdown: a table cell, a list item or a heading that cannot add a column,
    end its row, open code, make a link or an image, or become HTML."""
    text = _MD_ENTITY.sub("&amp;", _cell(v))
    text = _MD_PUNCT.sub(r"\\\1", _MD_HTML.sub("&lt;", text))
    return re.sub(r"\r\n|\r|\n", "<br>", text)


def csv_cell(v):
    """A CSV value a spreadsheet shows, not runs: a text cell that starts like a formula gets a leading ' (OWASP's
    rule); numbers, negative ones included, stay numbers."""
    return "'" + v if isinstance(v, str) and v.startswith(_CSV_FORMULA) else v


def table(rows: list[dict]) -> str:
    shown = [c for c in COLUMNS if c != "error"]
    cells = [[_cell(r.get(c)) for c in shown] for r in rows]
    widths = [max(len(c), *(len(x[i]) for x in cells)) if cells else len(c) for i, c in enumerate(shown)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(shown, widths, strict=True))]
    lines += ["  ".join(x.ljust(w) for x, w in zip(cell, widths, strict=True)) for cell in cells]
    lines += [f"  run {r.get('run') or '-'} {r['target']}: {r['error']}" for r in rows if r.get("error")]
    lines += [f"  run {r.get('run') or '-'} {r['target']}: {note}" for r, note in _notes(rows)]
    return "\n".join(lines) + "\n"


def markdown(title: str, rows: list[dict], slos: list[dict]) -> str:
    shown = [c for c in COLUMNS if c != "error"]
    out = [f"# {md_text(title)}", "", "| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
    out += ["| " + " | ".join(md_text(r.get(c)) for c in shown) + " |" for r in rows]
    errors = [r for r in rows if r.get("error")]
    if errors:
        out += ["", "## Errors", ""]
        out += [f"- {md_text(r['target'])} / {md_text(r['model'])}: {md_text(r['error'])}" for r in errors]
    if _notes(rows):
        out += ["", "## Partial or saturated runs", ""]
        out += [f"- {md_text(r['target'])} / {md_text(r['model'])} / {md_text(r['scenario'])} rep {r['repetition']}: "
                f"{md_text(note)}" for r, note in _notes(rows)]  # fmt: skip
    if slos:
        out += [
            "",
            "## SLOs",
            "",
            md_text(verdict_line(rows, slos)),  # a run that failed is said as what failed, not as an SLO missed
            "",
            "| target | model | scenario | rep | SLO | measured | verdict |",
            "|---|---|---|---|---|---|---|",
        ]
        for s in slos:
            cells = [md_text(s[k]) for k in ("target", "model", "scenario", "repetition", "slo", "measured")]
            out.append("| " + " | ".join([*cells, "pass" if s["pass"] else "**FAIL**"]) + " |")
    return "\n".join(out) + "\n"


def stored_row(run) -> dict:
    """The table row of a run kept in the store (a bench.store.Run), with the verdict it was given when it ran (runs
    stored before verdicts were kept, or run without SLOs, show none)."""
    lat = run.result.get("latency_us") or {}
    verdict = run.verdict or {}
    slo, rules = verdict.get("slo"), verdict.get("rules")
    row = {"run": run.id, "target": run.target, "model": run.model_name, "scenario": run.scenario,
           "repetition": run.repetition}  # fmt: skip
    row.update({f"{k}_us": lat.get(k) for k in ("p50", "p99", "p999", "max")})
    row.update(count=lat.get("count"), throughput_ips=run.result.get("throughput_ips"), error=None,
               slo=None if slo is None else ("pass" if slo["pass"] else "FAIL"),
               valid=None if rules is None else ("yes" if rules["valid"] else "NO"))  # fmt: skip
    row.update(state_cells(run.result))
    return row


@dataclass
class StoredOutcome:
    """A stored run as `slo_cases` reads an outcome."""

    target: str
    model: str | None
    scenario: str
    repetition: int
    slo: dict | None
    rules: dict | None
    error: str | None = None


def stored_cases(runs) -> list[dict]:
    """The SLO cases of stored runs, from the verdicts kept with them."""
    outcomes = []
    for r in runs:
        v = r.verdict or {}
        outcomes.append(StoredOutcome(r.target, r.model_name, r.scenario, r.repetition, v.get("slo"), v.get("rules")))
    return slo_cases(outcomes)


def csv_text(rows: list[dict], extra: list[str] | None = None) -> str:
    """One row per run; `extra` columns (the edge-vs-server ones) after the usual ones, when given."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS + CSV_ONLY + (extra or []), extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: csv_cell(v) for k, v in r.items()})
    return buf.getvalue()


def slo_cases(outcomes) -> list[dict]:
    """One entry per SLO check of every run: what JUnit and the Markdown SLO table show."""
    cases = []
    for o in outcomes:
        base = {"target": o.target, "model": o.model, "scenario": o.scenario, "repetition": o.repetition}
        if o.error:
            cases.append({**base, "slo": RUN_COMPLETES, "measured": o.error, "pass": False})
            continue
        if o.rules is not None:
            cases.append({**base, "slo": "run rules (minimum duration and queries, not cut short)",
                          "measured": "; ".join(o.rules["why"]) or "met", "pass": o.rules["valid"]})  # fmt: skip
        if o.slo is None:
            continue
        for c in o.slo["checks"]:
            cases.append({**base, "slo": c["slo"], "measured": f"{c['measured_ms']} ms", "pass": c["pass"]})
        b = o.slo.get("error_budget")
        if b:
            spent = f"{b['share']:.4%} ({b['spent_pct']}% of the budget)" if b["spent_pct"] is not None else "all"
            cases.append({**base, "slo": b["slo"], "measured": spent, "pass": b["pass"]})
        if o.slo.get("cut_short"):
            cases.append({**base, "slo": "run not cut short", "measured": o.slo["cut_short"], "pass": False})
    return cases


def junit(name: str, cases: list[dict], seconds: float) -> bytes:
    suite = ET.Element("testsuite", name=name, tests=str(len(cases)),
                       failures=str(sum(not c["pass"] for c in cases)), time=f"{seconds:.1f}")  # fmt: skip
    for c in cases:
        case = ET.SubElement(suite, "testcase", classname=f"{name}.{c['target']}",
                             name=f"{c['model']} {c['scenario']} rep {c['repetition']}: {c['slo']}")  # fmt: skip
        if not c["pass"]:
            ET.SubElement(case, "failure", message=f"{c['slo']}: measured {c['measured']}")
    return ET.tostring(ET.ElementTree(suite).getroot(), encoding="utf-8", xml_declaration=True)


def _since(sc: dict) -> str:
    since = str(sc.get("latency_from", "?")).split(" (")[0]
    return "the " + since if since.startswith("intended") else since


def gpu_text(g: dict) -> str:
    """A local GPU's run (NVML, over the measured part) in one or two lines."""
    if not g.get("available"):
        return f"gpu          {g.get('reason', 'not sampled')}\n"
    parts = [f"{k.replace('_pct', ' %').replace('_w', ' W').replace('_c', ' C')} {g[k]['mean']:g} (max {g[k]['max']:g})"
             for k in ("utilization_pct", "power_w", "temperature_c") if isinstance(g.get(k), dict)]  # fmt: skip
    if g.get("energy_per_inference_uj") is not None:
        energy = f"{g['energy_per_inference_uj']:,.1f} uJ per inference ({g['energy_j']:g} J)"
    else:
        energy = g.get("energy_note", "no energy figure")
    where = f"{g.get('name')} (NVML, the measured {g.get('window_s') or '?'} s)"
    lines = [f"gpu          {where}: " + "; ".join(x for x in (", ".join(parts), energy) if x)]
    from bench.metrics.nvml import energy_text  # idle and above idle (issue 24)

    lines += [f"             {t}" for t in [energy_text(g)] if t]
    if g.get("throttle_reasons"):
        lines.append(f"             clocks held down: {', '.join(g['throttle_reasons'])}")
    return "\n".join(lines) + "\n"


def server_text(r: dict) -> str:
    """A server target's run for people: where it ran, how it was sent, what the client saw, what failed, and the
    server's own split of the time."""
    b, lat, sc = r.get("backend") or {}, r.get("latency_us") or {}, r.get("scenario") or {}
    d = b.get("details") or {}
    model = r.get("model") or {}
    lines = [
        f"server       {d.get('server') or '?'} {b.get('version') or ''} at {d.get('address')} over "
        f"{str(d.get('protocol', '?')).upper()}; model {model.get('server_name')}; tensors {d.get('tensors')}",
    ]
    if lat.get("count"):
        shown = "  ".join(f"{k} {lat[k]:,.1f}" for k in ("min", "p50", "p90", "p99", "p999", "max"))
        lines.append(f"latency us   {shown}   mean {lat['mean']:,.1f}   (as the client sees it, network included)")
    tp = r.get("throughput_ips")
    lines.append(f"throughput   {tp or 0:,.1f} inferences/s; {sc.get('queries', 0):,} queries of "
                 f"{sc.get('kind')} at concurrency {sc.get('concurrency')} in {r.get('wall_s') or 0:.2f} s, latency "
                 f"from {_since(sc)}")  # fmt: skip
    if sc.get("send_error_us"):
        from edge_runtime.measure.scenario import load_text

        err = sc["send_error_us"]
        asked = f" of {sc['rate_qps']:g}/s" if sc.get("rate_qps") and not sc.get("scheduled_qps") else ""
        over = f" over {err['queries']:,} queries" if "queries" in err else ""
        lines.append(f"schedule     {load_text(sc)}{asked}; send error p50 {err['p50']} p99 {err['p99']} us{over}")
    e = r.get("errors") or {}
    if e.get("failed"):
        kinds = ", ".join(f"{k} x{v}" for k, v in (e.get("kinds") or {}).items())
        lines.append(f"errors       {e['failed']:,} failed ({e['share']:.2%}): {kinds}")
        for k, msg in (e.get("examples") or {}).items():
            lines.append(f"             {k}: {msg}")
    else:
        lines.append("errors       none")
    st = ((r.get("server") or {}).get("statistics")) or {}
    if st.get("available"):
        stages = st["stages_us"]
        lines.append(f"split us     queue {stages['queue']}, compute input {stages['compute_input']}, infer "
                     f"{stages['compute_infer']}, output {stages['compute_output']}: server {st['server_us']} of "
                     f"client {st['client_us']} per request; network + client {st['network_client_us']}")  # fmt: skip
    else:
        lines.append(f"split        {st.get('reason', 'no server statistics')}")
    cl = ((r.get("server") or {}).get("client")) or {}
    if cl:  # the client's own cost (bench/scenarios/client.py)
        busiest = cl.get("busiest_process_share")
        lines.append(f"client       {cl.get('processes')} process(es), {cl.get('workers')} connections, engine "
                     f"{cl.get('engine')}: {cl.get('cpu_us_per_query')} us CPU per query, busiest process "
                     f"{'?' if busiest is None else f'{busiest:.0%}'} of a core"
                     + ("; CLIENT-BOUND (the client was the limit)" if cl.get("client_bound") else ""))  # fmt: skip
    mt = ((r.get("server") or {}).get("metrics")) or {}
    if mt.get("available"):
        shown = [f"{k} {v['mean']:g} (max {v['max']:g})" for k, v in mt.items() if isinstance(v, dict) and "mean" in v]
        lines.append("metrics      " + ("; ".join(shown) or "none") + (f"  ({mt['note']})" if mt.get("note") else ""))
    elif mt:
        lines.append(f"metrics      {mt.get('reason')}")
    for w in (r.get("quality") or {}).get("warnings") or []:
        lines.append(f"warning      {w}")
    return "\n".join(lines) + "\n"
