"""Reports of runs, for people and for tools: a terminal table, Markdown, CSV (one row per run), JSON (the rows and the
result records), JUnit XML (one test case per SLO and run, so a CI shows which target missed what) and, in
bench.report.html, one self-contained HTML file with plots (that module alone imports matplotlib)."""

from __future__ import annotations

import csv
import io
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from bench.report.cells import (
    COLUMNS,
    CSV_ONLY,
    RUN_COMPLETES,
    cell,
    csv_cell,
    md_text,
    notes_of,
    quality_cells,
    state_cells,
    verdict_line,
)
from bench.report.tables import legend, markdown, quality_notes, table
from bench.report.units import in_unit, latency_unit, people_name, shown_for

_cell, _notes = cell, notes_of  # the names html.py and plots.py import

__all__ = ["COLUMNS", "CSV_ONLY", "RUN_COMPLETES", "csv_cell", "legend", "markdown", "md_text", "quality_cells",
           "quality_notes", "state_cells", "table", "verdict_line"]  # fmt: skip


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
    result: dict | None = None


def stored_cases(runs) -> list[dict]:
    """The SLO cases of stored runs, from the verdicts kept with them."""
    outcomes = []
    for r in runs:
        v = r.verdict or {}
        outcomes.append(StoredOutcome(r.target, r.model_name, r.scenario, r.repetition, v.get("slo"), v.get("rules"),
                                      result=r.result))  # fmt: skip
    return slo_cases(outcomes)


def csv_text(rows: list[dict], extra: list[str] | None = None) -> str:
    """One row per run; `extra` columns (the edge-vs-server ones) after the usual ones, when given."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS + CSV_ONLY + (extra or []), extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:  # a list (the quality warnings) is one cell, its items joined
        w.writerow({k: csv_cell("; ".join(map(str, v)) if isinstance(v, list) else v) for k, v in r.items()})
    return buf.getvalue()


def slo_cases(outcomes) -> list[dict]:
    """One entry per SLO check of every run: what JUnit and the Markdown SLO table show. Each carries its run's
    `notes` (partial, saturated) and `quality`, so a CI's failure says when the run behind it fell short."""
    cases = []
    for o in outcomes:
        state = state_cells(o.result)
        base = {"target": o.target, "model": o.model, "scenario": o.scenario, "repetition": o.repetition,
                "notes": state["notes"], "quality": state.get("quality")}  # fmt: skip
        if o.error:
            cases.append({**base, "slo": RUN_COMPLETES, "measured": o.error, "pass": False})
            continue
        if o.rules is not None:
            cases.append({**base, "slo": "run rules (minimum duration and queries, not cut short)",
                          "measured": "; ".join(o.rules["why"]) or "met", "pass": o.rules["valid"]})  # fmt: skip
        if o.slo is None:
            continue
        for c in o.slo["checks"]:
            measured = c.get("why") or f"{c['measured_ms']} ms"  # a firmware run's percentile: none to measure
            cases.append({**base, "slo": c["slo"], "measured": measured, "pass": c["pass"]})
        b = o.slo.get("error_budget")
        if b:
            spent = f"{b['share']:.4%} ({b['spent_pct']}% of the budget)" if b["spent_pct"] is not None else "all"
            cases.append({**base, "slo": b["slo"], "measured": b.get("why") or spent, "pass": b["pass"]})
        if o.slo.get("cut_short"):
            cases.append({**base, "slo": "run not cut short", "measured": o.slo["cut_short"], "pass": False})
    return cases


def _property(parent: ET.Element, name: str, value: str) -> None:
    props = parent.find("properties")
    if props is None:
        props = ET.Element("properties")
        parent.insert(0, props)  # JUnit's schema: properties before the test cases and their results
    ET.SubElement(props, "property", name=name, value=value)


def junit(name: str, cases: list[dict], seconds: float, rows: list[dict] | None = None) -> bytes:
    """One test case per SLO check. A run that was saturated or cut short says so in its cases' properties and
    failure messages; with `rows`, the suite's properties also name every run with a note or quality warnings, the
    runs without an SLO included (they have no test case)."""
    suite = ET.Element("testsuite", name=name, tests=str(len(cases)),
                       failures=str(sum(not c["pass"] for c in cases)), time=f"{seconds:.1f}")  # fmt: skip
    for r in rows or []:
        who = f"run {cell(r.get('run'))} {r.get('target')} {r.get('model')} {r.get('scenario')} repetition " \
            f"{r.get('repetition')}"  # fmt: skip
        for note in r.get("notes") or []:
            _property(suite, f"{who}: {note.split(':')[0]}", note)
        if r.get("quality_warnings"):
            _property(suite, f"{who}: quality", f"{r.get('quality')}: " + "; ".join(r["quality_warnings"]))
    for c in cases:
        case = ET.SubElement(suite, "testcase", classname=f"{name}.{c['target']}",
                             name=f"{c['model']} {c['scenario']} repetition {c['repetition']}: {c['slo']}")  # fmt: skip
        notes = c.get("notes") or []
        for note in notes:
            _property(case, note.split(":")[0], note)  # "saturated" / "partial": the whole note
        if c.get("quality"):
            _property(case, "quality", c["quality"])
        if not c["pass"]:
            why = "".join(f" (the run was {n})" for n in notes)
            ET.SubElement(case, "failure", message=f"{c['slo']}: measured {c['measured']}{why}")
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
    if lat.get("count"):  # a percentile the run holds too few samples for is its max: not shown
        keys = [k for k in ("min", "p50", "p90", "p99", "p999", "max") if shown_for(k, lat["count"])]
        unit = latency_unit(lat.get(k) for k in keys)
        shown = "  ".join(f"{people_name(k)} {in_unit(lat[k], unit)}" for k in keys)
        lines.append(f"latency {unit}   {shown}   mean {in_unit(lat['mean'], unit)}   (as the client sees it, network "
                     "included)")  # fmt: skip
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
