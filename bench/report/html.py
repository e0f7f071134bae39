"""The HTML report: one self-contained file (styles and plots inlined, matplotlib SVG) that opens offline on a laptop.

It holds the runs' table, the SLO verdicts, three plots with stable ids (`<figure id="cdf">`: latency percentiles per
run, HdrHistogram style; `id="timeline"`: latency windows over the run with temperature and CPU frequency on a second
axis; `id="percentiles"`: p50 to max side by side) and each distinct environment once. It must never reach the network
(no script, no external style, font or image; a Content-Security-Policy says so to the browser), never import
matplotlib before `render` or `require` is called, and escape every string that came from a user or a board.
"""

from __future__ import annotations

import html
import json
import time

from bench import __version__
from bench.report import COLUMNS, _cell, _notes, verdict_line
from bench.report.plots import plots
from edge_runtime.errors import UserError

NO_SLO_STORED = "none of these runs was checked against an SLO when it ran"
CSP = "default-src 'none'; style-src 'unsafe-inline'"  # inline styles only: nothing is fetched
STYLE = """body{font:14px/1.4 system-ui,sans-serif;margin:2em auto;max-width:1400px;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}
.runs{overflow-x:auto}.runs table{font-size:12.5px;margin-bottom:.5em}
td.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#f3f3f3}.fail{color:#b00;font-weight:bold}
figure{margin:1.5em 0}figure svg{max-width:100%;height:auto}figcaption{color:#555;font-size:13px}
code{font-size:12px;word-break:break-all}.note{color:#555}td.w{white-space:nowrap}.fail a{color:inherit}
.legend{font-size:12px}"""


def require() -> None:
    """Fail now, with one line, when --html cannot be written: before a campaign runs, not after it."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as err:
        raise UserError(f"--html needs matplotlib ({err})", hint="pip install 'edge-runtime[host]'") from None


def render_stored(title: str, runs: list, slo_note: str = NO_SLO_STORED) -> str:
    """The report of runs kept in the store (bench.store.Run), with the verdicts they were given when they ran."""
    from bench.report import stored_cases, stored_row

    cases = stored_cases(runs)
    return render(title, [stored_row(r) for r in runs], [r.result for r in runs], cases or None, slo_note)


def render(title: str, rows: list[dict], results: list[dict | None], slos: list[dict] | None = None,
           slo_note: str = "") -> str:  # fmt: skip
    """The report of `rows` (the terminal table's rows) and their result records (None for a run that failed), with
    `slos` (bench.report.slo_cases rows; None when no SLO was given, `slo_note` saying why)."""
    require()
    runs = [(row, res) for row, res in zip(rows, results, strict=True) if res]
    labels = _labels([row for row, _ in runs])
    named = list(zip(labels, [res for _, res in runs], strict=True))
    e = html.escape
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        f"<title>{e(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{e(title)}</h1>",
        f'<p class="note">edge-bench {e(__version__)}, {time.strftime("%Y-%m-%d %H:%M:%S %z")}; '
        f"{len(rows)} run{'s' * (len(rows) != 1)}</p>",
        "<h2>Runs</h2>",
        _table(rows, results),
        _warnings(rows, results),
    ]
    # The comparison a reader came for goes right under the table it is drawn from, before the plots (issue 25).
    from bench.report.edge_vs_server import html_section, pairs

    out.append(html_section(pairs([(str(row.get("target")), res) for row, res in runs])))
    out += ["<h2>SLOs</h2>", _slos(slos, slo_note, named, rows), "<h2>Latency</h2>"]
    if named:
        out += plots(named, [str(row.get("target")) for row, _ in runs])
    else:
        out.append('<p class="note">no run finished: nothing to plot</p>')
    out += ["<h2>Environment</h2>", _environments(named), "</body></html>"]
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------------------------------- text parts
def _labels(rows: list[dict]) -> list[str]:
    """Target, and model, scenario and repetition where the runs differ in them; the run id when still ambiguous."""
    keys = [k for k in ("model", "scenario", "repetition") if len({r.get(k) for r in rows}) > 1]
    labels = [" ".join([str(r.get("target"))] + [f"rep {r[k]}" if k == "repetition" else str(r.get(k))
                                                  for k in keys]) for r in rows]  # fmt: skip
    if len(set(labels)) < len(labels):
        labels = [f"run {r.get('run') or '?'} {lab}" for r, lab in zip(rows, labels, strict=True)]
    return labels


# The table's own columns, in the HTML only: what the reader needs beside `saturated` and `valid` to trust a row.
LOAD, QUALITY = "achieved of scheduled (queries/s)", "quality"
COLUMN_LEGEND = (
    ("slo", "pass / FAIL against the SLOs the run was checked with (the SLOs section says which); - none given"),
    ("valid", "yes: the run met its scenario's run rules (min_duration_s, min_queries, not cut short); NO: it did "
              "not (the SLOs section says why); - the scenario set no run rules, so none were checked"),
    ("partial", "yes: the run was cut short and its numbers are from part of it"),
    ("saturated", "yes: the target fell behind the schedule (open loop), so its latencies are mostly queueing; - no "
                  "schedule to keep (a closed loop: single-stream, offline)"),
    (LOAD, "the rate the target kept against the rate the scenario scheduled (an open-loop scenario only)"),
    (QUALITY, "ok, or how many quality warnings the run gave (listed under the table); UNSTABLE: the run's median "
              "drifted or its spread was too wide to trust (its warnings say which)"),
)  # fmt: skip


def _qps(x) -> str:
    return "?" if not isinstance(x, (int, float)) else f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


def _load(row: dict) -> str:
    """The load cell: "X of Y" queries/s achieved of scheduled (the whole sentence, "achieved X of Y queries/s:
    saturated", as its tooltip); "-" where no schedule was kept. Short: a wrapped cell made every row of the table
    three lines tall, and the `saturated` cell beside it and the note under the table say the rest."""
    if row.get("saturated") not in ("yes", "no"):
        return "<td>-</td>"
    got, asked = _qps(row.get("achieved_qps")), _qps(row.get("scheduled_qps"))
    saturated = row["saturated"] == "yes"
    said = f"achieved {got} of {asked} queries/s" + (": saturated" if saturated else ": kept up")
    return f'<td class="w{" fail" * saturated}" title="{said}">{got} of {asked}</td>'


def _warnings_of(res: dict | None) -> list[str]:
    """A run's quality warnings, less the saturation one (the load column and the notes say it with its numbers)."""
    q = (res or {}).get("quality") or {}
    return [str(w) for w in q.get("warnings") or [] if not str(w).startswith("saturated:")]


def _quality(res: dict | None) -> str:
    """UNSTABLE (its warnings say how), else how many warnings the run gave, else ok; "-" for a run that failed."""
    if res is None:
        return "-"
    if (res.get("quality") or {}).get("unstable"):
        return "UNSTABLE"
    n = len(_warnings_of(res))
    return f"{n} warning{'s' * (n != 1)}" if n else "ok"


def _table(rows: list[dict], results: list[dict | None]) -> str:
    shown = [c for c in COLUMNS if c != "error"]
    heads = "".join(f"<th>{c}</th>" for c in shown) + f"<th>{LOAD}</th><th>{QUALITY}</th>"
    out = [f'<div class="runs"><table><tr>{heads}</tr>']
    for r, res in zip(rows, results, strict=True):
        cells = []
        for c in shown:
            v = r.get(c)
            bad = v in ("FAIL", "NO") or (c in ("partial", "saturated") and v == "yes")
            cls = "fail" if bad else ("n" if isinstance(v, (int, float)) else "")
            cells.append(f'<td class="{cls}">' if cls else "<td>")
            cells.append(f"{html.escape(_cell(v))}</td>")
        quality = _quality(res)
        cells.append(_load(r))
        bad = quality not in ("ok", "-")
        cells.append(f'<td class="w fail"><a href="#warnings">{quality}</a></td>' if bad else f"<td>{quality}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table></div>")
    legend = "; ".join(f"<strong>{c}</strong>: {html.escape(text)}" for c, text in COLUMN_LEGEND)
    out.append(f'<p class="note legend">{legend}; - means not known or not checked.</p>')
    errors = [r for r in rows if r.get("error")]
    if errors:
        out.append("<ul>" + "".join(f'<li class="fail">run {html.escape(_cell(r.get("run")))} '
                                    f"{html.escape(str(r.get('target')))} / {html.escape(str(r.get('model')))}: "
                                    f"{html.escape(str(r['error']))}</li>" for r in errors) + "</ul>")  # fmt: skip
    if _notes(rows):
        out.append("<ul>" + "".join(f'<li class="fail">run {html.escape(_cell(r.get("run")))} '
                                    f"{html.escape(str(r.get('target')))}: {html.escape(note)}</li>"
                                    for r, note in _notes(rows)) + "</ul>")  # fmt: skip
    return "\n".join(out)


def _warnings(rows: list[dict], results: list[dict | None]) -> str:
    """Every run's quality warnings under the table (a campaign's table used to drop what `bench` printed), each
    text once with the runs that gave it: nine runs on one unisolated CPU are one line, not nine."""
    e = html.escape
    said: dict[str, list[str]] = {}
    for r, res in zip(rows, results, strict=True):
        for w in _warnings_of(res):
            said.setdefault(w, []).append(f"{_cell(r.get('run'))} ({r.get('target')})")
    if not said:
        return ""
    items = [f"<li>{e(w)}: run{'s' * (len(runs) > 1)} {e(', '.join(runs))}</li>" for w, runs in said.items()]
    return f'<section id="warnings"><h3>Quality warnings</h3><ul>{"".join(items)}</ul></section>'


def _slos(slos: list[dict] | None, note: str, named: list[tuple[str, dict]], rows: list[dict]) -> str:
    e = html.escape
    cut = [f"<li class='fail'>{e(lab)}: cut short ({e(str((res.get('aborted') or {}).get('reason')))})</li>"
           for lab, res in named if res.get("aborted")]  # fmt: skip
    cut_html = f"<ul>{''.join(cut)}</ul>" if cut else ""
    if not slos:
        return f"<p>no SLO given{e(': ' + note) if note else ''}</p>{cut_html}"
    head = f"<p>{e(verdict_line(rows, slos))}</p>"  # a run that failed is said as what failed, not as an SLO missed
    out = [head, "<table><tr><th>target</th><th>model</th><th>scenario</th><th>rep</th><th>SLO</th><th>measured</th>"
           "<th>verdict</th></tr>"]  # fmt: skip
    for s in slos:
        verdict = "pass" if s["pass"] else '<span class="fail">FAIL</span>'
        out.append("<tr>" + "".join(f"<td>{e(str(s[k]))}</td>" for k in ("target", "model", "scenario", "repetition",
                   "slo", "measured")) + f"<td>{verdict}</td></tr>")  # fmt: skip
    return "\n".join([*out, "</table>"])


def _env_of(res: dict) -> dict:
    """What a run ran on and with, as label -> text (the same dict for runs on the same setup)."""
    env, be, model = res.get("environment") or {}, res.get("backend") or {}, res.get("model") or {}

    def text(v) -> str:
        if isinstance(v, dict):
            return ", ".join(f"{k} {text(x)}" for k, x in v.items()) or "-"
        if isinstance(v, list):
            from edge_runtime.system.cpulist import format_cpu_list

            return (format_cpu_list(v) if all(isinstance(x, int) for x in v) else ", ".join(map(str, v))) or "none"
        return "-" if v is None else str(v)

    keys = ["board", "kernel", "cpu_model", "governor", "isolated_cpus", "python", "packages", "hostname", "sysroot"]
    out = {k: text(env.get(k)) for k in keys if k in env}
    if isinstance(env.get("measured_on"), dict):  # a --sysroot run: what the tree did not say, from the live machine
        seen = {k: v for k, v in env["measured_on"].items() if k != "note"}
        out["measured on"] = text(seen) + (f" ({env['measured_on']['note']})" if env["measured_on"].get("note") else "")
    fallback = text(be.get("fallback")) + (f" ({be['fallback_reason']})" if be.get("fallback_reason") else "")
    out.update({"backend": f"{text(be.get('name'))} {text(be.get('version'))}", "device": text(be.get("device")),
                "delegate": text(be.get("delegate")), "fallback": fallback, "model": text(model.get("path")),
                "precision": text(model.get("precision")), "sha256": text(model.get("sha256"))})  # fmt: skip
    return out


def _environments(named: list[tuple[str, dict]]) -> str:
    groups: dict[str, tuple[dict, list[str]]] = {}
    for lab, res in named:
        env = _env_of(res)
        groups.setdefault(json.dumps(env, sort_keys=True), (env, []))[1].append(lab)
    out = []
    for env, labs in groups.values():
        out.append(f"<h3>{html.escape(', '.join(labs))}</h3><table>")
        out += [f"<tr><th>{html.escape(k)}</th><td><code>{html.escape(v)}</code></td></tr>" for k, v in env.items()]
        out.append("</table>")
    return "\n".join(out) or '<p class="note">no environment: no run finished</p>'


# ----------------------------------------------------------------------------------------------------- plots
