"""Edge against server: for one model run on a board (or `local:`) and on an inference server (KServe v2), side by
side: the latency distributions, a latency budget per stage, throughput, energy per inference where known, and the
network round trip at which each side wins, and how many boards equal one GPU (boards_per_gpu.py: throughput at
each side's batch, samples per joule above the GPU's idle).

The budget. Board: inference is the board's own latency (its inputs are bound once, so pre- and post-processing are
not in it and show as not measured); link is the round trip of the host's link to the board, which a deployment that
reports results to a host pays once per result. Server: network is the round trip measured to the server before the
run (health requests), queue and compute (input + infer + output) are the server's own statistics, client is the rest
of the client's time per request (serialisation, the client library, the kernel).

The crossover. The server's latency as a client at round trip R sees it is its server-side time + client + R; the
board's is its inference time. So the board wins when R > board - (server - measured network): the crossover round
trip, at p50 and at p99. Negative: the board wins at any round trip; the server would need a network faster than
none. The p99 crossover takes the tails as they were measured here and assumes the network adds its round trip
and no tail of its own: a real network's jitter moves it towards the board.
"""

from __future__ import annotations

import html

from bench.report.boards_per_gpu import figures
from bench.report.boards_per_gpu import line as boards_line


def side_of(res: dict) -> str:
    """ "server" for a run the host timed as a client (any server target), or one this host's own NVIDIA GPU ran
    (local:?device=cuda|tensorrt: a `gpu` section); "board" for a run a board timed itself. Read from the record, so
    a stored run says its side whatever target kinds this edge-bench knows."""
    b = res.get("backend") or {}
    gpu = str(b.get("device") or "").lower() in ("cuda", "tensorrt") or "gpu" in res
    return "server" if _client_timed(res) or gpu else "board"


def _client_timed(res: dict) -> bool:
    """The host timed it as a client: a host run's record says where (`environment.measured_on.client`); a record
    put together by hand without it (tests, tools) is known by its KServe backend."""
    measured_on = (res.get("environment") or {}).get("measured_on") or {}
    return "client" in measured_on or (res.get("backend") or {}).get("name") == "kserve"


def serving_board(res: dict) -> bool:
    """A board serving its model over KServe (`edge-runtime serve`): timed as a client like a server, yet a board. It
    may stand on either side: the server against a board's own run, the board against a GPU server."""
    b = res.get("backend") or {}
    return _client_timed(res) and (b.get("details") or {}).get("server") == "edge-runtime"


def _key(res: dict) -> str | None:
    return (res.get("model") or {}).get("sha256")


def pairs(items: list[tuple[str, dict]]) -> list[dict]:
    """Each (board run, server run) of the same model file (sha256) and scenario kind: the comparison. `items` are
    (label, result); the first run of each target label is used when repetitions repeat it."""
    return [c for _, _, c in indexed_pairs(items)]


def indexed_pairs(items: list[tuple[str, dict]]) -> list[tuple[int, int, dict]]:
    """pairs(), with the index in `items` of the board run and of the server run each comparison was made from."""
    boards = [
        (i, lbl, r) for i, (lbl, r) in enumerate(items) if r and _key(r) and (side_of(r) == "board" or serving_board(r))
    ]
    servers = [(i, lbl, r) for i, (lbl, r) in enumerate(items) if r and side_of(r) == "server" and _key(r)]
    out, seen = [], set()
    for ib, bl, b in boards:
        for is_, sl, s in servers:
            if ib == is_ or (serving_board(b) and serving_board(s)):  # a board against itself, or two boards
                continue
            kind = (
                (b.get("scenario") or {}).get("kind") or "single-stream",
                (s.get("scenario") or {}).get("kind") or "single-stream",
            )
            key = (bl, sl, _key(b), kind[0])
            if _key(b) != _key(s) or kind[0] != kind[1] or key in seen:
                continue
            seen.add(key)
            out.append((ib, is_, compare(bl, b, sl, s)))
    return out


# CSV: one row per run still; a run in an edge-vs-server comparison gets its side's budget and the crossover.
CSV_COLUMNS = ["side", "versus", "compute_ms", "queue_ms", "network_ms", "client_ms", "energy_uj_per_inference",
               "crossover_rtt_p50_ms", "crossover_rtt_p99_ms"]  # fmt: skip


def csv_text(rows: list[dict], items: list[tuple[str, dict]]) -> str:
    """The runs' CSV (rows and items aligned, one per run), with the comparison columns when a pair exists."""
    from bench.report import csv_text as plain

    cols = csv_columns(items)
    if not cols:
        return plain(rows)
    return plain([{**row, **cols.get(i, {})} for i, row in enumerate(rows)], CSV_COLUMNS)


def csv_columns(items: list[tuple[str, dict]]) -> dict[int, dict]:
    """Index in `items` -> the comparison columns of that run (empty when no run is in a comparison)."""
    out: dict[int, dict] = {}
    for ib, is_, c in indexed_pairs(items):
        cross = {f"crossover_rtt_{p}_ms": c["crossover_rtt_ms"][p] for p in ("p50", "p99")}
        bb, sb = c["budget"]["board"], c["budget"]["server"]
        e = c["energy_per_inference_uj"]
        out.setdefault(ib, {"side": "board", "versus": c["server"], "compute_ms": bb["inference_ms"],
                            "queue_ms": None, "network_ms": bb["link_ms"], "client_ms": None,
                            "energy_uj_per_inference": e["board"], **cross})  # fmt: skip
        out.setdefault(is_, {"side": "server", "versus": c["board"], "compute_ms": sb["compute_ms"],
                             "queue_ms": sb["queue_ms"], "network_ms": sb["network_ms"], "client_ms": sb["client_ms"],
                             "energy_uj_per_inference": e["server"], **cross})  # fmt: skip
    return out


def _ms(us) -> float | None:
    return None if us is None else round(us / 1000, 4)


def compare(board_label: str, board: dict, server_label: str, server: dict) -> dict:
    bl, sl = board.get("latency_us") or {}, server.get("latency_us") or {}
    split = ((server.get("server") or {}).get("statistics")) or {}
    rtt_ms = ((server.get("server") or {}).get("network") or {}).get("rtt_ms")
    link_ms = (board.get("link") or {}).get("rtt_ms")
    stages = split.get("stages_us") or {}
    if not _client_timed(server):  # a local GPU: no network, no queue
        mean = _ms(sl.get("mean"))
        server_budget = {"network_ms": 0.0, "queue_ms": None, "compute_ms": mean, "client_ms": None, "total_ms": mean,
                         "note": "this host's GPU: no network, no server queue"}  # fmt: skip
    elif split.get("available"):
        compute_us = sum(stages.get(k) or 0 for k in ("compute_input", "compute_infer", "compute_output"))
        client_us = (split.get("network_client_us") or 0) - (rtt_ms or 0) * 1000
        server_budget = {
            "network_ms": rtt_ms,
            "queue_ms": _ms(stages.get("queue")),
            "compute_ms": _ms(compute_us),
            "client_ms": _ms(max(0.0, client_us)),
            "total_ms": _ms(split.get("client_us")),
        }
    else:
        server_budget = {
            "network_ms": rtt_ms,
            "queue_ms": None,
            "compute_ms": None,
            "client_ms": None,
            "total_ms": _ms(sl.get("mean")),
            "note": split.get("reason", "no server statistics"),
        }
    board_budget = {
        "preprocess_ms": None,
        "inference_ms": _ms(bl.get("mean")),
        "postprocess_ms": None,
        "link_ms": link_ms,
        "total_ms": _ms(bl.get("mean")),
        "note": "inputs bound once: pre- and post-processing are not in the measured call",
    }
    # A serving board was timed as a client over the network: on the board itself its callers skip that round trip.
    board_rtt_us = 0.0
    if _client_timed(board):
        board_rtt_us = (((board.get("server") or {}).get("network") or {}).get("rtt_ms") or 0) * 1000
        mean = bl.get("mean")
        board_budget.update(
            link_ms=_ms(board_rtt_us),
            inference_ms=None if mean is None else _ms(mean - board_rtt_us),
            note="served over KServe (edge-runtime serve): timed as a client, less its measured round trip",
        )
    crossover = {}
    for p in ("p50", "p99"):
        b, s = bl.get(p), sl.get(p)
        b = None if b is None else b - board_rtt_us
        if b is None or s is None:
            crossover[p] = None
            continue
        # a query of N samples (multi-stream) pays N round trips to the server, and N inferences on the board
        spq = max(1, int((server.get("scenario") or {}).get("samples_per_query") or 1))
        crossover[p] = round((b - (s - spq * (rtt_ms or 0) * 1000)) / spq / 1000, 4)
    energy_b = (board.get("power") or {}).get("energy_per_inference_uj")
    metrics = ((server.get("server") or {}).get("metrics")) or {}
    energy_s = None
    if (server.get("gpu") or {}).get("energy_per_inference_uj") is not None:  # per sample at a batch (issue 24)
        energy_s = server["gpu"].get("energy_per_sample_uj") or server["gpu"]["energy_per_inference_uj"]
    elif metrics.get("gpu_energy_j") is not None and (server.get("latency_us") or {}).get("count"):
        n = (server.get("throughput_ips") or 0) * (server.get("wall_s") or 0)
        energy_s = round(metrics["gpu_energy_j"] * 1e6 / n, 2) if n else None
    return {
        "model": (board.get("model") or {}).get("sha256"),
        "scenario": (board.get("scenario") or {}).get("kind") or "single-stream",
        "board": board_label,
        "server": server_label,
        "latency_ms": {
            side: {p: _ms(lat.get(p)) for p in ("p50", "p90", "p99", "p999", "max")}
            for side, lat in (("board", bl), ("server", sl))
        },
        "throughput_ips": {"board": board.get("throughput_ips"), "server": server.get("throughput_ips")},
        "budget": {"board": board_budget, "server": server_budget},
        "energy_per_inference_uj": {"board": energy_b, "server": energy_s},
        "crossover_rtt_ms": crossover,
        "verdict": {p: _verdict(c) for p, c in crossover.items()},
        "boards_per_gpu": figures(board, server, energy_s),
    }


def _verdict(c: float | None) -> str:
    if c is None:
        return "unknown"
    if c <= 0:
        return "the board wins at any round trip"
    return f"the server wins below {c:g} ms round trip, the board above"


def _v(x, unit: str = "") -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.1f}{unit}" if abs(x) >= 100 else f"{x:,.3f}{unit}"
    return f"{x}{unit}"


def text(comps: list[dict]) -> str:
    if not comps:
        return ""
    lines = ["", "edge vs server (same model file, same scenario):"]
    for c in comps:
        lb, ls = c["latency_ms"]["board"], c["latency_ms"]["server"]
        bb, sb = c["budget"]["board"], c["budget"]["server"]
        lines += [
            f"  {c['board']} vs {c['server']} ({c['scenario']}):",
            f"    latency ms   board p50 {_v(lb['p50'])} p99 {_v(lb['p99'])}   server p50 {_v(ls['p50'])} p99 "
            f"{_v(ls['p99'])}",
            f"    board ms     inference {_v(bb['inference_ms'])}, pre/post not measured, link rtt {_v(bb['link_ms'])}",
            f"    server ms    network {_v(sb['network_ms'])}, queue {_v(sb['queue_ms'])}, compute "
            f"{_v(sb['compute_ms'])}, client {_v(sb['client_ms'])}",
            f"    totals ms    board {_v(bb['total_ms'])}, server {_v(sb['total_ms'])} (means per request)",
            f"    throughput   board {_v(c['throughput_ips']['board'])}/s, "
            f"server {_v(c['throughput_ips']['server'])}/s",
            f"    energy       board {_v(c['energy_per_inference_uj']['board'], ' uJ')}, server "
            f"{_v(c['energy_per_inference_uj']['server'], ' uJ')} per inference ('-': not known)",
            f"    crossover    p50 {_v(c['crossover_rtt_ms']['p50'], ' ms')}: {c['verdict']['p50']}; "
            f"p99 {_v(c['crossover_rtt_ms']['p99'], ' ms')}: {c['verdict']['p99']}",
            f"    boards/GPU   {boards_line(c)}",
        ]
    return "\n".join(lines) + "\n"


def markdown(comps: list[dict]) -> str:
    if not comps:
        return ""
    from bench.report import md_text

    out = ["", "## Edge vs server", ""]
    for c in comps:
        board, server = md_text(c["board"]), md_text(c["server"])
        lb, ls = c["latency_ms"]["board"], c["latency_ms"]["server"]
        bb, sb = c["budget"]["board"], c["budget"]["server"]
        e = c["energy_per_inference_uj"]
        out += [
            f"### {board} vs {server} ({md_text(c['scenario'])})",
            "",
            "| | p50 ms | p99 ms | p99.9 ms | max ms | throughput /s | energy uJ/inference |",
            "|---|---|---|---|---|---|---|",
            f"| {board} (board) | {_v(lb['p50'])} | {_v(lb['p99'])} | {_v(lb['p999'])} | {_v(lb['max'])} | "
            f"{_v(c['throughput_ips']['board'])} | {_v(e['board'])} |",
            f"| {server} (server) | {_v(ls['p50'])} | {_v(ls['p99'])} | {_v(ls['p999'])} | {_v(ls['max'])} | "
            f"{_v(c['throughput_ips']['server'])} | {_v(e['server'])} |",
            "",
            "Latency budget per stage (ms, means per request):",
            "",
            "| side | pre-processing | inference / compute | post-processing | queue | network / link | client "
            "| total |",
            "|---|---|---|---|---|---|---|---|",
            f"| board | not measured | {_v(bb['inference_ms'])} | not measured | - | {_v(bb['link_ms'])} (link rtt) "
            f"| - | {_v(bb['total_ms'])} |",
            f"| server | - | {_v(sb['compute_ms'])} | - | {_v(sb['queue_ms'])} | {_v(sb['network_ms'])} | "
            f"{_v(sb['client_ms'])} | {_v(sb['total_ms'])} |",
            "",
            f"Crossover round trip: p50 {_v(c['crossover_rtt_ms']['p50'])} ms ({c['verdict']['p50']}); p99 "
            f"{_v(c['crossover_rtt_ms']['p99'])} ms ({c['verdict']['p99']}).",
            "",
            f"Boards per GPU: {md_text(boards_line(c))}.",
            "",
        ]
    return "\n".join(out)


def html_section(comps: list[dict]) -> str:
    """The same as `markdown`, as HTML (every label escaped)."""
    if not comps:
        return ""
    e = html.escape
    parts = ['<section id="edge-vs-server"><h2>Edge vs server</h2>']
    for c in comps:
        lb, ls = c["latency_ms"]["board"], c["latency_ms"]["server"]
        bb, sb = c["budget"]["board"], c["budget"]["server"]
        en = c["energy_per_inference_uj"]
        parts += [
            f"<h3>{e(c['board'])} vs {e(c['server'])} ({e(c['scenario'])})</h3>",
            "<table><tr><th></th><th>p50 ms</th><th>p99 ms</th><th>p99.9 ms</th><th>max ms</th><th>throughput /s</th>"
            "<th>energy uJ/inference</th></tr>",
            f"<tr><td>{e(c['board'])} (board)</td>"
            + "".join(f'<td class="n">{_v(lb[p])}</td>' for p in ("p50", "p99", "p999", "max"))
            + f'<td class="n">{_v(c["throughput_ips"]["board"])}</td><td class="n">{_v(en["board"])}</td></tr>',
            f"<tr><td>{e(c['server'])} (server)</td>"
            + "".join(f'<td class="n">{_v(ls[p])}</td>' for p in ("p50", "p99", "p999", "max"))
            + f'<td class="n">{_v(c["throughput_ips"]["server"])}</td><td class="n">{_v(en["server"])}</td></tr>',
            "</table>",
            '<table class="budget"><tr><th>side</th><th>pre-processing</th><th>inference / compute</th>'
            "<th>post-processing</th><th>queue</th><th>network / link</th><th>client</th><th>total</th></tr>",
            f'<tr><td>board</td><td>not measured</td><td class="n">{_v(bb["inference_ms"])}</td><td>not measured</td>'
            f'<td>-</td><td class="n">{_v(bb["link_ms"])} (link rtt)</td><td>-</td>'
            f'<td class="n">{_v(bb["total_ms"])}</td></tr>',
            f'<tr><td>server</td><td>-</td><td class="n">{_v(sb["compute_ms"])}</td><td>-</td>'
            f'<td class="n">{_v(sb["queue_ms"])}</td><td class="n">{_v(sb["network_ms"])}</td>'
            f'<td class="n">{_v(sb["client_ms"])}</td><td class="n">{_v(sb["total_ms"])}</td></tr></table>',
            f'<p class="crossover">Crossover round trip: p50 {_v(c["crossover_rtt_ms"]["p50"])} ms '
            f"({e(c['verdict']['p50'])}); p99 {_v(c['crossover_rtt_ms']['p99'])} ms ({e(c['verdict']['p99'])}).</p>",
            f'<p class="boards-per-gpu">Boards per GPU: {e(boards_line(c))}.</p>',
        ]
    parts.append("</section>")
    return "\n".join(parts)
