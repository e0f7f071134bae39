"""One HTTP GET bounded as a whole: a deadline for the whole request (connect, send, every byte of the answer) and a
cap on the body's size, for what a run reads beside its measure (a Prometheus `/metrics`, the statistics extension's
`/v2/models/M/stats`). A socket timeout bounds each read only: a server that trickles a byte every half second
never trips it (issue 24). The deadline is a `gevent.Timeout` around geventhttpclient (tritonclient's own HTTP
stack, so nothing more to install) in the calling thread: it fires whatever the request is waiting for, and it is
cancelled when the call returns, so it can never fire later. Each fetch has its own connection, closed after it: a
request cut in the middle leaves nothing half-read for the next one.

The rule (DEADLINE_S, MAX_BYTES): 2 s is far beyond what a healthy endpoint takes on a LAN (Triton's /metrics: a few
ms) and short beside a run; 4 MiB is a hundred times Triton's /metrics on an 8-GPU host, and what gRPC refuses by
default. A body over it is refused unread (its Content-Length), or read no further than the cap: never parsed.

Never: retry (the caller decides), or raise anything but FetchError for a failed fetch."""

from __future__ import annotations

from collections.abc import Mapping

DEADLINE_S = 2.0
MAX_BYTES = 4 << 20


class FetchError(Exception):
    """A fetch that gave no usable body; `kind`: "timeout", "too large", "status" or "unreachable"."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


def bounded_get(address: str, path: str, headers: Mapping[str, str] | None = None, *,
                deadline_s: float = DEADLINE_S, max_bytes: int = MAX_BYTES) -> bytes:  # fmt: skip
    """GET http://ADDRESS/PATH (ADDRESS: HOST:PORT, [v6]:PORT): the body of a 200 answer, whole, within `deadline_s`
    and at most `max_bytes`; otherwise FetchError saying which in one line."""
    import gevent
    from geventhttpclient import HTTPClient

    url = f"http://{address}{path}"
    timer = gevent.Timeout(deadline_s)
    client = None
    timer.start()
    try:
        client = HTTPClient.from_url(f"http://{address}/", connection_timeout=deadline_s, network_timeout=deadline_s)
        response = client.get(path, headers=dict(headers or {}))
        length = response.content_length
        if length is not None and length > max_bytes:
            raise FetchError(f"{url}: {length:,} bytes, over the {max_bytes:,}-byte cap: not read", "too large")
        body = response.read(max_bytes + 1)
        if len(body) > max_bytes:
            raise FetchError(f"{url}: over the {max_bytes:,}-byte cap: not read further", "too large")
        if response.status_code != 200:
            words = " ".join(body[:200].decode("utf-8", "replace").split())
            raise FetchError(f"{url}: HTTP {response.status_code}" + (f": {words}" if words else ""), "status")
        return bytes(body)
    except gevent.Timeout as t:
        if t is not timer:
            raise
        raise FetchError(f"{url}: no whole answer in {deadline_s:g} s", "timeout") from None
    except FetchError:
        raise
    except Exception as err:  # noqa: BLE001 - refused, reset, a bad status line: one line, never a traceback
        raise FetchError(f"{url}: {type(err).__name__}: {' '.join(str(err).split())[:160]}", "unreachable") from None
    finally:
        timer.close()
        if client is not None:
            client.close()
