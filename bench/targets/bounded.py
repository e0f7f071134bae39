"""Every wait of a KServe v2 client bounded by a deadline for the whole request (issue 24).

- `BoundedClient` wraps a tritonclient client. Over HTTP each call runs under a `gevent.Timeout` of the URL's
  `timeout` in the calling thread: connect, send and receive together (tritonclient's `network_timeout` bounds each
  socket read only, and a server that trickles a byte every half second never trips it). The timer is cancelled in
  `finally`, so it cannot fire during a later call. After a cut the inner client is dropped and the next call gets a
  new one (one reconnect): geventhttpclient 2.6 closes a connection whose answer was cut half-read, but a cut while
  the request is sent (a server that stops reading it) leaves its pool slot taken, and the next call would wait on
  it. A cut call raises RequestTimeout, which the target counts as kind "timeout". Over gRPC `client_timeout` is
  already a deadline for the whole call (gRPC deadlines cover the call, not a read); it is given to every call that
  has none. The statistics extension's read is held to the rule of the metrics scrapes (bench/metrics/fetch.py:
  2 s and 4 MiB, over HTTP and over gRPC, where a channel of its own says 4 MiB: tritonclient's takes 2 GiB).

The cost of a deadline: a gevent timer made, started and closed per call, about 5-9 us here (2 shared vCPUs)."""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable

STATS_DEADLINE_S = 2.0  # the statistics before/after a run: bench/metrics/fetch.py's rule


class RequestTimeout(TimeoutError):
    """A request that had no whole answer within its deadline (connect, send and receive together)."""


class BoundedClient:
    """A tritonclient client (HTTP or gRPC) whose every call ends within `timeout_s`; `make()` builds the inner one
    (again after a call cut by the deadline). Used from the one thread that made it, as tritonclient's clients are."""

    def __init__(self, make: Callable[[], object], protocol: str, address: str, timeout_s: float):
        self._make, self.protocol, self.address, self.timeout_s = make, protocol, address, timeout_s
        self._client = make()

    def infer(self, *args, **kw):  # the measured call: straight here, not through __getattr__
        return self.call("infer", *args, **kw)

    def __getattr__(self, name: str):
        if name.startswith("_"):  # the inner client's own parts are not this client's (and no recursion in __init__)
            raise AttributeError(name)
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr
        return lambda *args, **kw: self.call(name, *args, **kw)

    def call(self, name: str, *args, **kw):
        if name == "get_inference_statistics":
            return self._statistics(*args, **kw)
        if self.protocol == "grpc":
            if kw.get("client_timeout") is None and name not in ("close", "start_stream", "stop_stream"):
                kw["client_timeout"] = self.timeout_s
            return getattr(self._client, name)(*args, **kw)
        if name == "close":
            return self._client.close()
        return self._http(name, self.timeout_s, *args, **kw)

    def _http(self, name: str, deadline_s: float, *args, **kw):
        import gevent

        timer = gevent.Timeout(deadline_s)  # new per call: one reused (start/cancel) after it fired, fired again
        timer.start()
        try:
            return getattr(self._client, name)(*args, **kw)
        except gevent.Timeout as t:
            if t is not timer:
                raise
            self._renew()
            raise RequestTimeout(f"no whole answer in {deadline_s:g} s (the request's deadline: connect, send and "
                                 "receive)") from None  # fmt: skip
        finally:
            timer.close()

    def _renew(self) -> None:
        old, self._client = self._client, None
        try:
            old.close()
        except Exception:  # noqa: BLE001 - a client cut mid-request may not close cleanly: it is dropped either way
            pass
        self._client = self._make()

    def _statistics(self, model_name: str = "", model_version: str = "", headers=None, **kw):
        """The statistics extension's document within STATS_DEADLINE_S (and 4 MiB over HTTP)."""
        from bench.metrics.fetch import MAX_BYTES, FetchError, bounded_get

        deadline = min(self.timeout_s, STATS_DEADLINE_S)
        if self.protocol == "grpc":  # a channel of its own: tritonclient's takes 2 GiB messages
            import grpc
            from tritonclient.grpc import service_pb2, service_pb2_grpc

            request = service_pb2.ModelStatisticsRequest(name=model_name, version=model_version)
            metadata = [(k.lower(), v) for k, v in (headers or {}).items()]
            with grpc.insecure_channel(self.address, options=[("grpc.max_receive_message_length", MAX_BYTES)]) as ch:
                return service_pb2_grpc.GRPCInferenceServiceStub(ch).ModelStatistics(request, metadata=metadata,
                                                                                      timeout=deadline)  # fmt: skip
        import json

        path = f"/v2/models/{urllib.parse.quote(model_name)}" + (
            f"/versions/{urllib.parse.quote(model_version)}" if model_version else "") + "/stats"  # fmt: skip
        try:
            return json.loads(bounded_get(self.address, path, headers, deadline_s=deadline))
        except FetchError as err:
            if err.kind == "timeout":
                raise RequestTimeout(str(err)) from None
            raise
