"""Serve one ONNX model from a real MLServer (KServe v2, HTTP and gRPC) through a small ONNX Runtime runtime, for tests.

Run with .venv-mlserver's Python (`make test` builds it):

    .venv-mlserver/bin/python tests/servers/mlserver_server.py --model M.onnx --name NAME --http-port P --grpc-port P

It writes settings.json and NAME/model-settings.json into a temporary directory and runs MLServer in this process:
127.0.0.1 only, metrics server off, no parallel workers (so one PID is the whole server and SIGTERM stops it all;
MLServer handles SIGTERM itself). When the model answers ready over HTTP and the gRPC port accepts connections, one line
`ready http=H:P grpc=H:P` goes to stdout; logs go to stderr. Exits 0 when stopped by a signal after it was ready, 1 when
the model failed to load or the server was not ready in time.

This is test scaffolding: it never binds a non-loopback address and never runs outside the tests' own venv.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HOST = "127.0.0.1"
READY_TIMEOUT_S = 120.0
HERE = Path(__file__).resolve().parent  # holds the mlserver_onnx runtime package


async def _http_status(port: int, path: str) -> int:
    """One GET over a raw connection (no client library in the loop); 0 when nothing answers."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, port), 1.0)
    except (OSError, asyncio.TimeoutError):
        return 0
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), 2.0)
        parts = status_line.split()
        return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    except (OSError, asyncio.TimeoutError):
        return 0
    finally:
        writer.close()


async def _listening(port: int) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(HOST, port), 1.0)
    except (OSError, asyncio.TimeoutError):
        return False
    writer.close()
    return True


async def _wait_ready(args: argparse.Namespace) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    path = f"/v2/models/{args.name}/ready"
    while time.monotonic() < deadline:
        if await _http_status(args.http_port, path) == 200 and await _listening(args.grpc_port):
            return
        await asyncio.sleep(0.2)
    raise TimeoutError(f"model {args.name!r} not ready after {READY_TIMEOUT_S:.0f} s")


def write_settings(folder: Path, args: argparse.Namespace) -> None:
    """settings.json (the server) and NAME/model-settings.json (the model), as `mlserver start FOLDER` reads them."""
    settings = {
        "host": HOST,
        "http_port": args.http_port,
        "grpc_port": args.grpc_port,
        "metrics_endpoint": None,  # no metrics server (it would listen on its own port)
        "parallel_workers": 0,  # inference in this process: one PID to stop
        "debug": False,
        "load_models_at_startup": True,
    }
    model_settings = {
        "name": args.name,
        "implementation": "mlserver_onnx.runtime.OnnxRuntimeModel",
        "parameters": {"uri": str(args.model.resolve())},
    }
    (folder / "settings.json").write_text(json.dumps(settings, indent=2))
    (folder / args.name).mkdir()
    (folder / args.name / "model-settings.json").write_text(json.dumps(model_settings, indent=2))


async def serve(folder: Path, args: argparse.Namespace, ready_out: object) -> int:
    from mlserver import MLServer
    from mlserver.cli.serve import load_settings

    settings, models_settings = await load_settings(str(folder))
    server = MLServer(settings)  # installs its SIGINT/SIGTERM/SIGQUIT handlers on this loop
    server_task = asyncio.ensure_future(server.start(models_settings))
    ready_task = asyncio.ensure_future(_wait_ready(args))
    done, _ = await asyncio.wait({server_task, ready_task}, return_when=asyncio.FIRST_COMPLETED)
    if ready_task not in done:  # the server stopped first: a model failed to load, or a signal came early
        ready_task.cancel()
        print(f"mlserver_server: stopped before model {args.name!r} was ready", file=sys.stderr)
        return 1
    if ready_task.exception() is not None:
        print(f"mlserver_server: {ready_task.exception()}", file=sys.stderr)
        await server.stop()
        await server_task
        return 1
    print(f"ready http={HOST}:{args.http_port} grpc={HOST}:{args.grpc_port}", file=ready_out, flush=True)
    await server_task
    return 0


def main(argv: list[str] | None = None) -> int:
    from onnx_model import launcher_parser

    parser = launcher_parser(__doc__)
    args = parser.parse_args(argv)
    if not args.model.is_file():
        parser.error(f"no such model file: {str(args.model)!r}")

    # stdout carries the ready line only: everything else written to fd 1 (uvicorn, MLServer) goes to stderr.
    ready_out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.path.insert(0, str(HERE))
    with tempfile.TemporaryDirectory(prefix="mlserver-test-") as tmp:
        folder = Path(tmp)
        write_settings(folder, args)
        return asyncio.run(serve(folder, args, ready_out))


if __name__ == "__main__":
    sys.exit(main())
