"""`edge-runtime agent`: serves a host over a serial line or TCP with the wire protocol (edge_runtime.wire): models
uploaded by hash into a state directory, benches run by the same engine as `edge-runtime bench` in a child process,
answers kept in an outbox on disk until the host acknowledges them.
"""
