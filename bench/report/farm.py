"""The reports' section for a board farm (issue 28): boards of one kind compared, and the one that is slower than its
siblings on the same work flagged, with its environment beside theirs. Pure: (label, scenario, result) in, a JSON
document, text, Markdown and HTML out.

Decided here:
- Siblings: runs whose record has a `place` section with the same `group` (the kind: every place a campaign fanned
  one target out to has the campaign target's name; a one-off run's group is its place's name), the same model (its
  sha256, else its file name), the same scenario (the stored scenario label and the record's config: threads, CPUs,
  iterations, duration, batch), the same backend and device, on a different `place.name`. A group of one place is
  not compared (one line says which, at most).
- A place's figure is the median over its runs of p50 (`latency_us.p50`) and of throughput (`throughput_ips`); a
  missing or non-finite value is left out of it, and a place with neither is skipped with a word.
- The rule: a place is an outlier when it is at least 20% slower than the median of its siblings (the other places
  of its group, itself excluded): p50 >= 1.2 x their median p50, or throughput <= their median / 1.2. Each measure
  that trips is said with its ratio and both figures. The median of the others, so that the outlier cannot pull its
  own yardstick; 20% because runs of one board on one work agree within a few percent on an idle, tuned board, so
  20% is far past noise and worth a look (it is a finding to look at, not a significance test). With two siblings
  their median is their mean: one fast sibling can make a normal board look slow; the places table shows all.
- With one run a place the finding is provisional (one run each, as compare says): run the campaign with
  repetitions to settle it.
- Beside each flagged place, its environment and each sibling's: governor (the distinct values), kernel,
  temperature (thermal max, else start), firmware, board, hostname. A cell is marked where the outlier differs from
  every sibling (for temperature: hotter or cooler than all of them by more than TEMP_MARGIN_C): the likely cause.
  The hostname is shown, never marked: every board has its own, so it differs by nature.
- Groups of one place are said in one line; a report with no place section says nothing.

Never: flag a place faster than its siblings, compare places across groups, models, scenarios or backends, or let a
name from a coordinator become markup (HTML escaped, Markdown through cells.md_text).
"""

from __future__ import annotations

import html
import math
import os
import statistics

from bench.report.cells import md_text
from bench.report.units import duration, rate

SLOWER = 1.2  # 20% slower than the siblings' median: a finding
TEMP_MARGIN_C = 5.0  # a temperature differs from the siblings' when outside all of theirs by more than this
FIELDS = ("governor", "kernel", "temperature", "firmware", "board", "hostname")
MARKED = FIELDS[:-1]  # not the hostname: one a board
CONFIG_KEYS = ("threads", "cpus", "iterations", "duration_s", "batch")
RULE = (f"a place is an outlier when it is >= {round((SLOWER - 1) * 100)}% slower than the median of its siblings "
        f"(same group, model, scenario, backend and device; itself excluded): p50 >= {SLOWER}x, or throughput <= "
        f"1/{SLOWER} of theirs")  # fmt: skip
TITLE = "Boards of one kind (farm)"


def _finite(v) -> float | None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
    return float(v) if ok else None


def _key(scenario: str, res: dict) -> tuple:
    """What makes two runs the same work on boards of one kind."""
    model, be, cfg = res.get("model") or {}, res.get("backend") or {}, res.get("config") or {}
    model_key = model.get("sha256") or os.path.basename(str(model.get("path") or "")) or model.get("server_name")
    config = tuple(str(cfg.get(k)) for k in CONFIG_KEYS)
    board = (res.get("environment") or {}).get("board")  # boards of one kind: a pi4 in a rack of rock-5b is not one
    return (str(res["place"].get("group")), str(model_key), str(scenario), str(be.get("name")), str(be.get("device")),
            config, str(board))  # fmt: skip


def _env_cells(runs: list[dict]) -> dict:
    """A place's environment as field -> text over its runs (the distinct values), and its temperature in C."""

    def values(get) -> str:
        seen = []
        for res in runs:
            for v in get(res):
                if v not in (None, "") and str(v) not in seen:
                    seen.append(str(v))
        return ", ".join(sorted(seen)) or "n/a"

    temps = [t for r in runs if (t := _finite(_temperature(r))) is not None]
    return {
        "governor": values(lambda r: _governors((r.get("environment") or {}).get("governor"))),
        "kernel": values(lambda r: [(r.get("environment") or {}).get("kernel")]),
        "temperature": f"{max(temps):.0f} C" if temps else "n/a",
        "firmware": values(lambda r: [_plain((r.get("environment") or {}).get("firmware"))]),
        "board": values(lambda r: [(r.get("environment") or {}).get("board")]),
        "hostname": values(lambda r: [(r.get("environment") or {}).get("hostname")]),
        "temperature_c": max(temps) if temps else None,
    }


def _governors(v) -> list:
    """The record's governor section is cpu -> governor; a bare name (a record put together by hand) is one."""
    return list(v.values()) if isinstance(v, dict) else [v]


def _temperature(res: dict):
    th = res.get("thermal") or {}
    return th.get("max_c") if th.get("max_c") is not None else th.get("start_c")


def _plain(v) -> str | None:
    if isinstance(v, dict):
        return ", ".join(f"{k} {x}" for k, x in v.items()) or None
    return None if v is None else str(v)


def _place(name: str, runs: list[tuple[str, dict]]) -> dict:
    p50 = [v for _, r in runs if (v := _finite((r.get("latency_us") or {}).get("p50"))) is not None]
    ips = [v for _, r in runs if (v := _finite(r.get("throughput_ips"))) is not None]
    return {"place": name, "runs": [lab for lab, _ in runs], "p50_us": statistics.median(p50) if p50 else None,
            "throughput_ips": statistics.median(ips) if ips else None,
            "environment": _env_cells([r for _, r in runs])}  # fmt: skip


def _differs(me: dict, others: list[dict]) -> list[str]:
    """The fields where `me` differs from every one of `others` (a known value against known values)."""
    out = []
    for f in MARKED:
        mine = me[f]
        if f == "temperature":
            t, theirs = me["temperature_c"], [o["temperature_c"] for o in others]
            if t is not None and theirs and all(x is not None and abs(t - x) > TEMP_MARGIN_C for x in theirs):
                if t > max(theirs) or t < min(theirs):
                    out.append(f)
        elif mine != "n/a" and all(o[f] != "n/a" and o[f] != mine for o in others):
            out.append(f)
    return out


def _findings(places: list[dict]) -> list[dict]:
    out = []
    for p in places:
        sibs = [s for s in places if s is not p]
        for measure, key in (("p50", "p50_us"), ("throughput", "throughput_ips")):
            theirs = [s[key] for s in sibs if s[key] is not None]
            if p[key] is None or not theirs:
                continue
            med = statistics.median(theirs)
            ratio = p[key] / med
            slow = ratio >= SLOWER if measure == "p50" else ratio <= 1 / SLOWER
            if not slow:
                continue
            said = (f"p50 {ratio:.2f}x its {len(theirs)} siblings' median ({duration(p[key])} vs {duration(med)})"
                    if measure == "p50" else f"throughput {ratio:.2f}x its {len(theirs)} siblings' median "
                    f"({rate(p[key])} vs {rate(med)})")  # fmt: skip
            singles = [len(s["runs"]) == 1 for s in [p, *sibs]]
            one_run = any(singles)
            if one_run:
                said += "; from one run each: provisional" if all(singles) else "; some places ran once: provisional"
            out.append({"place": p["place"], "measure": measure, "ratio": round(ratio, 4), "value": p[key],
                        "siblings_median": med, "siblings": [s["place"] for s in sibs], "provisional": one_run,
                        "line": f"{p['place']}: {said}",
                        "differs": _differs(p["environment"], [s["environment"] for s in sibs])})  # fmt: skip
    return out


def compare_places(items: list[tuple[str, str, dict | None]]) -> dict:
    """The farm document (the JSON reports' `farm`) of (label, scenario label, result) items: the groups of two or
    more places with their places and findings, the groups of one place (not compared), and the places skipped."""
    by_key: dict[tuple, dict[str, list]] = {}
    for label, scenario, res in items:
        place = (res or {}).get("place")
        if not isinstance(place, dict) or not place.get("name"):
            continue
        place = {**place, "group": place.get("group") or place["name"]}  # a one-off run: its place is its group
        res = {**res, "place": place}
        where = (str(place.get("coordinator") or ""), str(place["name"]))  # one name on two farms: two places
        by_key.setdefault(_key(scenario, res), {}).setdefault(where, []).append((label, res))
    groups, single = [], []
    for key, by_where in by_key.items():
        group, _, scenario, backend, device, _, _board = key
        names = [n for _c, n in by_where]
        places = {(n if names.count(n) == 1 else f"{n} ({c or 'default coordinator'})"): runs
                  for (c, n), runs in by_where.items()}  # fmt: skip
        if len(places) < 2:
            single.append(f"{group} ({next(iter(places))})")
            continue
        made = [_place(name, runs) for name, runs in sorted(places.items())]
        kept = [p for p in made if p["p50_us"] is not None or p["throughput_ips"] is not None]
        skipped = [f"{p['place']}: no p50 or throughput in its runs (a failed or empty run): skipped"
                   for p in made if p not in kept]  # fmt: skip
        first = next(iter(places.values()))[0][1]
        model = first.get("model") or {}
        groups.append({"group": group, "model": os.path.basename(str(model.get("path") or "")) or "?",
                       "model_sha256": model.get("sha256") or None, "scenario": scenario, "backend": backend,
                       "device": device, "places": kept, "skipped": skipped,
                       "findings": _findings(kept) if len(kept) >= 2 else []})  # fmt: skip
    return {"rule": RULE, "groups": groups, "not_compared": sorted(set(single))}


def _single(doc: dict) -> str:
    names = doc["not_compared"]
    more = f" and {len(names) - 6} more" if len(names) > 6 else ""
    return f"one place only, not compared: {', '.join(names[:6])}{more}"


def _title(g: dict) -> str:
    return f"group {g['group']}: {g['model']}, {g['scenario']}, {g['backend']} {g['device']}"


def _figures(g: dict) -> str:
    p50 = [p["p50_us"] for p in g["places"] if p["p50_us"] is not None]
    span = f"p50 {duration(min(p50))} to {duration(max(p50))}" if p50 else "no p50"
    return f"{len(g['places'])} places, {span}"


def text(items: list[tuple[str, str, dict | None]]) -> str:
    """The terminal's section: per group, its findings with the environments side by side, or that none is slower."""
    doc = compare_places(items)
    if not doc["groups"]:
        return f"\n{TITLE}: {_single(doc)}\n" if doc["not_compared"] else ""
    lines = ["", f"{TITLE}: {RULE}"]
    for g in doc["groups"]:
        lines.append(f"  {_title(g)}: {_figures(g)}")
        lines += [f"    {s}" for s in g["skipped"]]
        if not g["findings"]:
            lines.append(f"    none is {round((SLOWER - 1) * 100)}% slower than its siblings")
        for f in _first_per_place(g["findings"]):
            lines += [f"    {x['line']}" for x in g["findings"] if x["place"] == f["place"]]
            for row in _env_rows(g, f):
                mark = " (differs from every sibling)" if row["differs"] else ""
                theirs = ", ".join(f"{n} {v}" for n, v in row["siblings"])
                lines.append(f"      {row['field']:<12} {row['value']}{mark}; siblings: {theirs}")
    if doc["not_compared"]:
        lines.append(f"  {_single(doc)}")
    return "\n".join(lines) + "\n"


def _env_rows(g: dict, f: dict) -> list[dict]:
    """A finding's environment, field by field: the outlier's value, each sibling's, whether it differs."""
    by = {p["place"]: p["environment"] for p in g["places"]}
    me = by[f["place"]]
    return [{"field": k, "value": me[k], "differs": k in f["differs"],
             "siblings": [(s, by[s][k]) for s in f["siblings"]]} for k in FIELDS]  # fmt: skip


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def markdown(items: list[tuple[str, str, dict | None]]) -> str:
    doc = compare_places(items)
    if not doc["groups"]:
        return f"\n{md_text(TITLE + ': ' + _single(doc))}\n" if doc["not_compared"] else ""
    out = ["", f"## {TITLE}", "", md_text(RULE)]
    for g in doc["groups"]:
        out += ["", f"### {md_text(_title(g))}", "", _md_row(["place", "runs", "p50", "throughput", "finding"]),
                "|---|---|---|---|---|"]  # fmt: skip
        said = {f["place"]: "; ".join(x["line"].split(": ", 1)[1] for x in g["findings"] if x["place"] == f["place"])
                for f in g["findings"]}  # fmt: skip
        out += [_md_row([md_text(p["place"]), str(len(p["runs"])), duration(p["p50_us"]), rate(p["throughput_ips"]),
                         md_text(said.get(p["place"], "-"))]) for p in g["places"]]  # fmt: skip
        out += [f"- {md_text(s)}" for s in g["skipped"]]
        for f in _first_per_place(g["findings"]):
            sibs = f["siblings"]
            head = _md_row(["", md_text(f["place"]), *map(md_text, sibs)])
            out += ["", f"Environment of {md_text(f['place'])} beside its siblings':", "", head,
                    "|---" * (len(sibs) + 2) + "|"]  # fmt: skip
            for row in _env_rows(g, f):
                mine = md_text(row["value"]) + (" **(differs)**" if row["differs"] else "")
                out.append(_md_row([row["field"], mine, *(md_text(v) for _, v in row["siblings"])]))
    if doc["not_compared"]:
        out += ["", md_text(_single(doc))]
    return "\n".join(out) + "\n"


def _first_per_place(findings: list[dict]) -> list[dict]:
    """One environment table a flagged place, however many of its measures tripped."""
    seen: dict[str, dict] = {}
    for f in findings:
        seen.setdefault(f["place"], f)
    return list(seen.values())


def html_section(items: list[tuple[str, str, dict | None]]) -> str:
    doc = compare_places(items)
    e = html.escape
    if not doc["groups"]:
        return f'<p class="note" id="farm">{e(TITLE + ": " + _single(doc))}</p>' if doc["not_compared"] else ""
    out = [f'<section id="farm"><h2>{e(TITLE)}</h2><p class="note">{e(RULE)}</p>']
    for g in doc["groups"]:
        flagged = {f["place"] for f in g["findings"]}
        out.append(f"<h3>{e(_title(g))}</h3><table><tr><th>place</th><th>runs</th><th>p50</th><th>throughput</th>"
                   "<th>finding</th></tr>")  # fmt: skip
        for p in g["places"]:
            said = "; ".join(f["line"].split(": ", 1)[1] for f in g["findings"] if f["place"] == p["place"]) or "-"
            cls = ' class="fail"' if p["place"] in flagged else ""
            out.append(f"<tr><td{cls}>{e(p['place'])}</td><td>{len(p['runs'])}</td><td>{e(duration(p['p50_us']))}"
                       f"</td><td>{e(rate(p['throughput_ips']))}</td><td>{e(said)}</td></tr>")  # fmt: skip
        out.append("</table>" + "".join(f'<p class="note">{e(s)}</p>' for s in g["skipped"]))
        for f in _first_per_place(g["findings"]):
            head = "".join(f"<th>{e(s)}</th>" for s in [f["place"], *f["siblings"]])
            out.append(f"<p>Environment of {e(f['place'])} beside its siblings':</p><table><tr><th></th>{head}</tr>")
            for row in _env_rows(g, f):
                mine = (f'<td class="fail" title="differs from every sibling">{e(row["value"])} (differs)</td>'
                        if row["differs"] else f"<td>{e(row['value'])}</td>")  # fmt: skip
                theirs = "".join(f"<td>{e(v)}</td>" for _, v in row["siblings"])
                out.append(f"<tr><th>{e(row['field'])}</th>{mine}{theirs}</tr>")
            out.append("</table>")
    if doc["not_compared"]:
        out.append(f'<p class="note">{e(_single(doc))}</p>')
    return "\n".join([*out, "</section>"])
