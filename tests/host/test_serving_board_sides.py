"""Issue 26: a board serving over KServe (`edge-runtime serve`) in the edge-versus-server report, on either side:
the server against a board's own run, the board against a GPU server; never against itself or another serving board.
Records as the harness writes them (the fields the report reads), with latencies chosen so the crossover is known."""

from __future__ import annotations

from records import result

from bench.report.edge_vs_server import indexed_pairs, serving_board, side_of

SHA = "c" * 64


def _server(name: str, p50_us: float, rtt_ms: float) -> dict:
    rec = result([p50_us] * 200, sha=SHA)
    rec["latency_us"]["mean"] = p50_us
    rec["backend"] = {"name": "kserve", "device": f"server ({name})", "details": {"server": name}}
    rec["environment"]["measured_on"] = {"client": "host"}
    rec["server"] = {"network": {"rtt_ms": rtt_ms}}
    return rec


def test_a_serving_board_stands_on_either_side_and_never_against_itself():
    local = result([900.0] * 200, sha=SHA)
    local["latency_us"]["mean"] = 900.0
    board = _server("edge-runtime", 1500.0, 0.4)
    gpu = _server("triton", 700.0, 0.5)
    assert side_of(board) == "server" and serving_board(board) and not serving_board(gpu)
    items = [
        ("board-local", local),
        ("board-served", board),
        ("gpu", gpu),
        ("board-served-2", _server("edge-runtime", 1600.0, 0.4)),
    ]
    got = {(items[ib][0], items[is_][0]): c for ib, is_, c in indexed_pairs(items)}
    assert set(got) == {
        ("board-local", "board-served"),
        ("board-local", "gpu"),
        ("board-local", "board-served-2"),
        ("board-served", "gpu"),
        ("board-served-2", "gpu"),
    }
    # As the board: its client latency less its own round trip (1.5 ms - 0.4 ms = 1.1 ms on the board itself); the
    # GPU server's 0.7 ms as a client is 0.2 ms of work beyond its 0.5 ms round trip: the board wins above 0.9 ms.
    c = got[("board-served", "gpu")]
    assert c["budget"]["board"]["inference_ms"] == 1.1 and "served over KServe" in c["budget"]["board"]["note"]
    assert c["crossover_rtt_ms"]["p50"] == 0.9
    # As the server: a board's own 0.9 ms against the served one (1.5 ms as a client, 0.4 ms of it the network)
    assert got[("board-local", "board-served")]["crossover_rtt_ms"]["p50"] == -0.2
