"""The child process that scrapes a Prometheus `/metrics` during a run (bench/metrics/prometheus.py starts it): the
scrape, its wait and its parsing happen here, never in the process whose threads time the queries (a 10 MB body
parsed there once inflated the client's p99 tenfold, issue 24). It runs at a lower priority (nice 10) than them.

    python -m bench.metrics.scrape_child      # stdin: one JSON line of settings, then "go", then "stop"

Settings: {"address": "HOST:PORT", "headers": {...}, "every_s": 1.0, "deadline_s": 2.0, "max_bytes": 4194304,
"max_scrapes": 7200} (the headers come on stdin, never on the command line, where any user could read a token). It
imports what it needs and says {"ready": true}; after "go" it scrapes at once and then every `every_s`; after "stop"
it scrapes once more (the end of the run: energy is a difference) and exits; an end of stdin (the parent gone) ends
it at once. Each scrape is bounded as a whole (bench/metrics/fetch.py) and writes one JSON line to stdout:
{"t": MONOTONIC_S, "values": {name: value}} or {"t": ..., "kind": KIND, "error": "one line"}. SIGINT is ignored (a
Ctrl-C in the terminal reaches the whole process group: the parent decides when the child ends)."""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time


def _emit(doc: dict) -> None:
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()


def scrape(settings: dict) -> None:
    from bench.metrics.fetch import FetchError, bounded_get
    from bench.metrics.prometheus import parse_prometheus

    try:
        body = bounded_get(settings["address"], "/metrics", settings.get("headers") or {},
                           deadline_s=settings["deadline_s"], max_bytes=settings["max_bytes"])  # fmt: skip
    except FetchError as err:
        _emit({"t": time.monotonic(), "kind": err.kind, "error": str(err)})
        return
    _emit({"t": time.monotonic(), "values": parse_prometheus(body.decode("utf-8", "replace"))})


class _Commands:
    """Lines from stdin without blocking past a deadline (select on the descriptor, then os.read)."""

    def __init__(self, fd: int):
        self.fd, self.buf, self.eof = fd, b"", False

    def next(self, timeout_s: float) -> str | None:
        """The next command within `timeout_s`, "" at the end of stdin, None when none came."""
        end = time.monotonic() + max(0.0, timeout_s)
        while b"\n" not in self.buf and not self.eof:
            left = end - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                return None
            chunk = os.read(self.fd, 65536)
            self.buf += chunk
            self.eof = not chunk
        if b"\n" not in self.buf:
            return ""
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode().strip()


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        os.nice(10)
    except OSError:  # not allowed here: the scrape still runs apart from the measuring process
        pass
    commands = _Commands(sys.stdin.fileno())
    line = commands.next(60.0)
    if not line:
        return 0
    settings = json.loads(line)
    import gevent  # noqa: F401 - what a scrape needs, imported now (while the parent warms up), not during the run
    import geventhttpclient  # noqa: F401

    import bench.metrics.fetch
    import bench.metrics.prometheus  # noqa: F401

    _emit({"ready": True})
    if commands.next(3600.0) != "go":
        return 0
    done = 0
    while True:
        if done < settings["max_scrapes"]:
            scrape(settings)
            done += 1
        got = commands.next(settings["every_s"])
        if got == "stop":
            scrape(settings)
            return 0
        if got == "":
            return 0


if __name__ == "__main__":
    sys.exit(main())
