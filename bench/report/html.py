"""The HTML report: one self-contained file (styles and plots inlined, matplotlib SVG) that opens offline on a laptop.

In this order: the answer (per model and scenario, the targets ranked), the runs' table with its legend, notes and
quality warnings, the edge-versus-server comparison (when a board and a server ran one model), the SLO verdicts,
three plots with stable ids (`<figure id="cdf">`: latency percentiles per run, HdrHistogram style; `id="timeline"`:
latency windows over the run with temperature and CPU frequency on a second axis; `id="percentiles"`: p50 to max side
by side), per run with a per-op profile its op chart (bench.report.ops: `<figure id="ops-N">`) and each distinct
environment once. It must never reach the network
(no script, no external style, font or image; a Content-Security-Policy says so to the browser), never import
matplotlib before `render` or `require` is called, and escape every string that came from a user or a board.
"""

from __future__ import annotations

import html
import json
import time

from bench import __version__
from bench.report import _cell, _notes, verdict_line
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
.legend{font-size:12px}tr.fallback td{color:#d62728;font-weight:bold}"""


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
           slo_note: str = "", no_ops: list[tuple[str, str]] | None = None) -> str:  # fmt: skip
    """The report of `rows` (the terminal table's rows) and their result records (None for a run that failed), with
    `slos` (bench.report.slo_cases rows; None when no SLO was given, `slo_note` saying why); `no_ops`: the targets
    asked for a per-op profile that cannot give one, and why (Campaign.no_ops)."""
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
        _answer(rows, results),
        "<h2>Runs</h2>",
        _table(rows),
    ]
    # The comparison a reader came for goes right under the table it is drawn from, before the plots (issue 25).
    from bench.report.edge_vs_server import html_section, pairs

    out.append(html_section(pairs([(str(row.get("target")), res) for row, res in runs])))
    from bench.report import firmware

    out.append(firmware.html_section([(label, res) for label, (_, res) in zip(labels, runs, strict=True)]))
    from bench.report import farm  # boards of one kind, the slow one beside its siblings (issue 28)

    placed = [(lab, str(row.get("scenario")), res) for lab, (row, res) in zip(labels, runs, strict=True)]
    out.append(farm.html_section(placed))
    out += ["<h2>SLOs</h2>", _slos(slos, slo_note, named, rows), "<h2>Latency</h2>"]
    if named:
        out += plots(named, [str(row.get("target")) for row, _ in runs])
    else:
        out.append('<p class="note">no run finished: nothing to plot</p>')
    from bench.report import ops  # per run with a per-op profile (issue 29): its chart, or its placement table

    out.append(ops.html_section(named, no_ops))
    out += ["<h2>Environment</h2>", _environments(named), "</body></html>"]
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------------------------------- text parts
def _answer(rows: list[dict], results: list[dict | None]) -> str:
    """The answer first, as the terminal and Markdown give it (bench.report.answer): per model and scenario, the
    targets ranked by p50, the winner, by how much and whether the lead is significant."""
    from bench.report.answer import answer_line, ranked

    answers = ranked([{**row, "result": res} for row, res in zip(rows, results, strict=True)])
    if not answers:
        return ""
    items = "".join(f"<li>{html.escape(answer_line(a))}</li>" for a in answers)
    return f'<section id="answer"><h2>Answer (p50, best first)</h2><ul>{items}</ul></section>'


def _labels(rows: list[dict]) -> list[str]:
    """Target, and model, scenario and repetition where the runs differ in them; the run id when still ambiguous."""
    keys = [k for k in ("model", "scenario", "repetition") if len({r.get(k) for r in rows}) > 1]
    labels = [" ".join([str(r.get("target"))] + [f"rep {r[k]}" if k == "repetition" else str(r.get(k))
                                                  for k in keys]) for r in rows]  # fmt: skip
    if len(set(labels)) < len(labels):
        labels = [f"run {r.get('run') or '?'} {lab}" for r, lab in zip(rows, labels, strict=True)]
    return labels


# The table's own column, in the HTML only: the rates behind `saturated`, in the row where the reader looks.
LOAD = "achieved of scheduled (queries/s)"
LOAD_LEGEND = (f"{LOAD}: the rate the target kept against the rate the scenario scheduled (an open loop only), in "
               "red when it fell behind (saturated); - a closed loop (no schedule)")  # fmt: skip


def _load(row: dict) -> str:
    """The load cell: "X of Y" queries/s achieved of scheduled, the whole sentence ("achieved X of Y queries/s:
    saturated") as its tooltip; "-" where no schedule was kept. Short: a wrapped cell made every row of the table
    three lines tall, and the `saturated` cell beside it and the note under the table say the rest."""
    from bench.report.cells import qps_text

    if row.get("saturated") not in ("yes", "no"):
        return "<td>-</td>"
    got, asked = qps_text(row.get("achieved_qps")), qps_text(row.get("scheduled_qps"))
    saturated = row["saturated"] == "yes"
    said = f"achieved {got} of {asked} queries/s" + (": saturated" if saturated else ": kept up")
    return f'<td class="w{" fail" * saturated}" title="{said}">{got} of {asked}</td>'


def _table(rows: list[dict]) -> str:
    """The runs as the terminal and Markdown show them (one unit per column, people's names: bench.report.tables),
    plus the load column, then what the table cannot hold: errors, partial and saturated runs, quality warnings, and
    a legend of what its words and dashes mean."""
    from bench.report.tables import LATENCY, SHOWN, legend, people_columns, quality_notes

    e = html.escape
    heads, cells = people_columns(rows)
    numeric = {*LATENCY, "count", "throughput_ips", "run", "repetition"}
    out = ['<div class="runs"><table><tr>' + "".join(f"<th>{e(h)}</th>" for h in [*heads, LOAD]) + "</tr>"]
    for r, values in zip(rows, cells, strict=True):
        tds = []
        for c, v in zip(SHOWN, values, strict=True):
            raw = r.get(c)
            bad = raw in ("FAIL", "NO") or (c in ("partial", "saturated") and raw == "yes") or \
                (c == "quality" and str(raw).startswith("UNSTABLE"))  # fmt: skip
            cls = "fail" if bad else ("n" if c in numeric else "")
            tds.append(f'<td class="{cls}">{e(v)}</td>' if cls else f"<td>{e(v)}</td>")
        out.append("<tr>" + "".join(tds) + _load(r) + "</tr>")
    out.append("</table></div>")
    items = [*legend(rows), LOAD_LEGEND]
    out.append('<ul class="note legend">' + "".join("<li><strong>{}</strong>: {}</li>".format(
        *map(e, x.split(": ", 1))) if ": " in x else f"<li>{e(x)}</li>" for x in items) + "</ul>")  # fmt: skip
    errors = [r for r in rows if r.get("error")]
    if errors:
        out.append("<ul>" + "".join(f'<li class="fail">run {e(_cell(r.get("run")))} {e(str(r.get("target")))} / '
                                    f"{e(str(r.get('model')))}: {e(str(r['error']))}</li>"
                                    for r in errors) + "</ul>")  # fmt: skip
    if _notes(rows):
        out.append("<ul>" + "".join(f'<li class="fail">run {e(_cell(r.get("run")))} {e(str(r.get("target")))}: '
                                    f"{e(note)}</li>" for r, note in _notes(rows)) + "</ul>")  # fmt: skip
    quality = quality_notes(rows)
    if quality:  # what `bench` printed of a run's quality: a campaign's table used to drop it
        out.append('<section id="warnings"><h3>Quality warnings</h3><ul>'
                   + "".join(f"<li>{e(who)}: {e(text)}</li>" for who, text in quality) + "</ul></section>")  # fmt: skip
    return "\n".join(out)


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
