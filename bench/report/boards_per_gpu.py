"""How many boards equal one GPU (issue 24), for the edge-vs-server report: beside the latency crossover, the
throughput and the energy of the two sides at the batch each ran.

Throughput: the GPU's samples per second (at its batch: a GPU server exists to batch) over one board's samples per
second (at its batch, usually 1): the boards it takes to serve the same load, as a ratio and as whole boards. This
assumes boards add up (one model per board, the load split evenly), which is how a fleet of boards serves a load.

Energy: samples per joule on each side. The GPU's comes from NVML over the measured part, above its idle power when
the record has it (`gpu.samples_per_j_above_idle`: what running the model adds to a GPU that is on anyway), the
total beside it; a KServe server's from its metrics energy (total only). A board's is its samples per second over
its rail's mean power (`power.avg_w`): the whole board, idle included, since a board deployed to run the model is
on for it. Their ratio says which side does more samples per joule. A figure not in the records is None ("-"), never
guessed.
"""

from __future__ import annotations

import math


def _batch(res: dict) -> int:
    return int((res.get("gpu") or {}).get("batch") or (res.get("config") or {}).get("batch") or 1)


def figures(board: dict, server: dict, server_energy_uj: float | None = None) -> dict:
    """The boards-per-GPU figures of one comparison. `server_energy_uj`: the server's energy per sample, used when
    the record has no `gpu` section (a KServe server's metrics energy over the samples answered)."""
    b_ips, s_ips = board.get("throughput_ips"), server.get("throughput_ips")
    ratio = round(s_ips / b_ips, 3) if b_ips and s_ips else None
    avg_w = (board.get("power") or {}).get("avg_w")
    board_per_j = round(b_ips / avg_w, 3) if b_ips and avg_w else None
    g = server.get("gpu") or {}
    gpu_total = g.get("samples_per_j")
    if gpu_total is None and server_energy_uj and not g:
        gpu_total = round(1e6 / server_energy_uj, 3)
    gpu_above = g.get("samples_per_j_above_idle")
    gpu_best = gpu_above if gpu_above is not None else gpu_total
    return {
        "batch": {"board": _batch(board), "server": _batch(server)},
        "samples_per_s": {"board": b_ips, "server": s_ips},
        "boards_for_throughput": ratio,
        "whole_boards": math.ceil(ratio - 1e-9) if ratio else None,
        "samples_per_j": {"board": board_per_j, "server_total": gpu_total, "server_above_idle": gpu_above},
        "idle_w": (g.get("idle") or {}).get("power_w"),
        # > 1: a board does more samples per joule than the server (above its idle where known)
        "board_vs_server_per_j": round(board_per_j / gpu_best, 3) if board_per_j and gpu_best else None,
    }


def _n(x, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def line(c: dict) -> str:
    """The comparison's boards-per-GPU figures in one sentence (terminal, Markdown and HTML say the same)."""
    f = c.get("boards_per_gpu")
    if not f:
        return ""
    bt, e = f["batch"], f["samples_per_j"]
    if f["boards_for_throughput"] is None:
        thr = "throughput not known on both sides"
    else:
        thr = (f"{f['boards_for_throughput']:,.2f} boards ({f['whole_boards']:,} whole) match the server's "
               f"{_n(f['samples_per_s']['server'])} samples/s at batch {bt['server']} (a board: "
               f"{_n(f['samples_per_s']['board'])} samples/s at batch {bt['board']})")  # fmt: skip
    idle = f" of {f['idle_w']:g} W" if f["idle_w"] is not None else ""
    energy = (f"energy: a board {_n(e['board'])} samples/J, the server {_n(e['server_above_idle'])} samples/J above "
              f"its idle{idle} ({_n(e['server_total'])} in total)")  # fmt: skip
    if f["board_vs_server_per_j"] is not None:
        energy += f": a board does {f['board_vs_server_per_j']:,.2f}x the server's samples per joule"
    return f"{thr}; {energy} ('-': not known)"
