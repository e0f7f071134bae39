"""The KServe v2 target (`kserve+http://HOST:PORT/MODEL`, `kserve+grpc://HOST:PORT/MODEL`): an inference server that
speaks the Open Inference Protocol (Triton, OpenVINO Model Server, MLServer, `edge-runtime serve`), driven with
tritonclient. A server cannot run the harness's scenarios itself, so the host does (bench/scenarios/engine.py) and
times each request as a client sees it, network included, like perf_analyzer.

Before a run: the server is live and the model ready; the model's metadata (and config, where the server has one)
give each input's name, datatype and shape, filled with the same seeded random data a board uses; binary tensors
over HTTP unless the server refuses them (MLServer answers 422), then JSON, and the result says which and why.
Every answer is checked against the metadata (kserve_answers.py): a wrong one is a failed query of its own kind.
Around a run: the statistics extension (`/v2/models/MODEL/stats`), read before and after, splits each request's time
into queue, compute input, compute infer and compute output, and the rest (the client's latency minus the server's
own time) is network and client; a Prometheus endpoint (`?metrics=PORT`, Triton's `/metrics`) is scraped during the
run for GPU utilisation, memory, power and energy.

URL options: `version=V` (the model version), `metrics=PORT|HOST:PORT`, `timeout=S` (per request, default 30),
`tensors=binary|json` (default: binary when the server takes it). Headers (an access token) come from the campaign
(`[target.headers]`) or `--header 'NAME: VALUE'`; `${VAR}` in a value is read from the environment.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

from bench.targets.base import Target, TargetError, TargetInfo, TargetOptions, TargetResult, expand_headers
from bench.targets.kserve_answers import WRONG, check_answer, expected_outputs, grpc_answer, http_answer, unreadable
from bench.targets.kserve_protocol import DTYPES, SCHEMES, failure_kind, parse_url, plain, why_failed
from edge_runtime.errors import UserError

GRPC_TOKEN = "triton-grpc-protocol-triton-access-token"
OPEN_LOOP_WORKERS = 16  # the client's connections in an open loop unless a concurrency is given


class KServeTarget(Target):
    schemes = SCHEMES
    info = TargetInfo(
        kind="server",
        summary="kserve+http://HOST:PORT/MODEL or kserve+grpc://HOST:PORT/MODEL for a KServe v2 server",
        takes=frozenset({"headers", "concurrency"}),
    )

    def __init__(self, url: str, options: TargetOptions | None = None):
        super().__init__(url, options)
        self.opts = parse_url(url)
        self.headers = expand_headers(self.options.headers, f"target {url!r}")
        if self.opts["protocol"] == "grpc" and "triton-access-token" in self.headers:
            # Triton reads an access token over gRPC under its own name: the campaign need not know it
            self.headers.setdefault(GRPC_TOKEN, self.headers["triton-access-token"])
        self.log = self.options.log
        self.meta: dict | None = None
        self._stop = threading.Event()
        self._running: str | None = None

    @classmethod
    def check_url(cls, url: str) -> None:
        parse_url(url)

    @classmethod
    def named_model(cls, url: str) -> str | None:
        return parse_url(url)["model"]

    # ----------------------------------------------------------------------------------------------- clients
    @property
    def limit(self) -> dict:
        """A bound on each gRPC call (HTTP's is set on the client): a server that never answers costs `timeout`."""
        return {"client_timeout": self.opts["timeout"]} if self.opts["protocol"] == "grpc" else {}

    def client(self):
        """A new client (one per worker thread: tritonclient's are not shared), each call bounded as a whole by the
        URL's timeout (bench/targets/bounded.py)."""
        from bench.targets.bounded import BoundedClient

        protocol, address, timeout = self.opts["protocol"], self.opts["address"], self.opts["timeout"]
        try:
            if protocol == "http":
                import tritonclient.http as tc

                make = lambda: tc.InferenceServerClient(address, connection_timeout=timeout,  # noqa: E731
                                                        network_timeout=timeout)  # fmt: skip
            else:
                import tritonclient.grpc as tc

                make = lambda: tc.InferenceServerClient(address)  # noqa: E731
            return BoundedClient(make, protocol, address, timeout)
        except ImportError as err:
            raise UserError(f"target {self.url!r}: needs tritonclient ({err})",
                            hint="pip install 'edge-runtime[kserve]'") from None  # fmt: skip

    def _module(self):
        if self.opts["protocol"] == "http":
            import tritonclient.http as tc
        else:
            import tritonclient.grpc as tc
        return tc

    def _h(self) -> dict[str, str]:
        """The headers for one call: a fresh copy each time (tritonclient writes Inference-Header-Content-Length into
        the dict it is given, and a later request once went out with a stale one)."""
        return dict(self.headers)

    def _fail(self, what: str, err: Exception, kind: str = "user-error") -> TargetError:
        return TargetError(f"{self.url}: {what}: {why_failed(err)}", kind)

    # ----------------------------------------------------------------------------------------------- describe
    def connect(self) -> dict:
        """Live, ready, the model's metadata: what a run needs before it starts. Refuses in one line otherwise."""
        c = self.client()
        name, version, h = self.opts["model"], self.opts["version"], self._h
        try:
            live = c.is_server_live(headers=h(), **self.limit)
        except Exception as err:  # noqa: BLE001 - any failure to reach the server is one line
            raise self._fail(f"no KServe v2 server at {self.opts['address']}", err) from None
        if not live:
            raise TargetError(f"{self.url}: the server at {self.opts['address']} is not live", "user-error")
        try:
            server = plain(c.get_server_metadata(headers=h(), **self.limit))
        except Exception as err:  # noqa: BLE001 - live, but it will not say what it is (a restricted API?)
            raise self._fail(f"the server at {self.opts['address']} refused its metadata", err) from None
        try:
            meta = plain(c.get_model_metadata(name, version, headers=h(), **self.limit))
        except Exception as err:  # noqa: BLE001
            known = self._models(c)
            raise TargetError(f"{self.url}: no model {name!r} on the server" + (f" (it has: {known})" if known else "")
                              + f" ({why_failed(err)})", "user-error") from None  # fmt: skip
        try:
            ready = c.is_model_ready(name, version, headers=h(), **self.limit)
        except Exception:  # noqa: BLE001
            ready = False
        if not ready:
            raise TargetError(f"{self.url}: model {name!r} is not ready on the server", "user-error")
        try:
            config = plain(c.get_model_config(name, version, headers=h(), **self.limit))
            config = config.get("config", config)
        except Exception:  # noqa: BLE001 - a server without the model configuration extension (MLServer)
            config = {}
        for t in [*meta.get("inputs", []), *meta.get("outputs", [])]:  # gRPC's int64 arrive as strings
            t["shape"] = [int(d) for d in t.get("shape", [])]
        self.meta = {"server": server, "model": meta, "config": config}
        self.identity = {"board": f"{server.get('name', 'kserve')} {server.get('version', '')}".strip(),
                         "server": server, "model": meta.get("name", name)}  # fmt: skip
        return self.identity

    def _models(self, c) -> str:
        try:
            index = plain(c.get_model_repository_index(headers=self._h(), **self.limit))
        except Exception:  # noqa: BLE001 - not every server has the repository extension
            return ""
        items = index if isinstance(index, list) else index.get("models", [])
        return ", ".join(sorted({str(m.get("name")) for m in items if isinstance(m, dict)}))

    def describe(self) -> dict:
        ident = self.connect()
        model = self.meta["model"]
        return {"kind": "kserve", **ident, "inputs": model.get("inputs"), "outputs": model.get("outputs"),
                "network": self.round_trip(self.client(), 5)}  # fmt: skip

    @classmethod
    def describe_text(cls, r: dict) -> list[str]:
        srv = r.get("server") or {}
        tensors = "; ".join(f"{t.get('name')} {t.get('datatype')} {t.get('shape')}" for t in r.get("inputs") or [])
        return [
            f"{r['url']}  reachable  ({srv.get('name')} {srv.get('version')}, KServe v2)",
            f"  model     {r.get('model')}: inputs {tensors}",
            f"  server    extensions {', '.join(srv.get('extensions') or []) or 'none listed'}",
            f"  network   rtt {r['network'].get('rtt_ms')} ms (median of health requests)",
        ]

    # ----------------------------------------------------------------------------------------------- inputs
    def tensor_infos(self) -> list:
        """The model's inputs as TensorInfo (a -1 dimension, the batch one included, becomes 1)."""
        from edge_runtime.runtime.backends.base import TensorInfo

        out = []
        for t in (self.meta or {}).get("model", {}).get("inputs", []):
            dt = DTYPES.get(t.get("datatype"))
            if dt is None:
                raise TargetError(f"{self.url}: input {t.get('name')!r}: datatype {t.get('datatype')!r} is not one "
                                  "the harness can fill", "user-error")  # fmt: skip
            shape = tuple(None if int(d) < 0 else int(d) for d in t.get("shape", []))
            out.append(TensorInfo(t["name"], shape, np.dtype(dt)))
        return out

    def feeds(self, seed: int = 0) -> dict[str, np.ndarray]:
        from edge_runtime.runtime.feeds import random_feeds

        return random_feeds(self.tensor_infos(), seed)[0]

    def _inputs(self, feeds: dict[str, np.ndarray], binary: bool) -> list:
        tc = self._module()
        inputs = []
        for name, arr in feeds.items():
            dt = next(k for k, v in DTYPES.items() if v == arr.dtype.name)
            i = tc.InferInput(name, list(arr.shape), dt)
            if self.opts["protocol"] == "http":
                i.set_data_from_numpy(arr, binary_data=binary)
            else:
                i.set_data_from_numpy(arr)
            inputs.append(i)
        return inputs

    def _outputs(self, binary: bool) -> list:
        tc = self._module()
        outs = []
        for t in (self.meta or {}).get("model", {}).get("outputs", []):
            if self.opts["protocol"] == "http":
                outs.append(tc.InferRequestedOutput(t["name"], binary_data=binary))
            else:
                outs.append(tc.InferRequestedOutput(t["name"]))
        return outs

    def choose_tensors(self, c, feeds) -> tuple[bool, str]:
        """Binary tensors unless the URL says json or the server refuses them (then JSON, and why). Over HTTP the
        first request is kserve_probe's, which keeps a failure's real cause; both failures are said when both fail."""
        if self.opts["protocol"] == "grpc":
            return True, "raw (gRPC raw_input_contents)"
        if self.opts["tensors"] == "json":
            return False, "json (asked for in the URL)"
        from bench.targets.kserve_probe import ProbeFailed, choose

        o, exts = self.opts, (self.meta or {}).get("server", {}).get("extensions")
        try:
            return choose(o["address"], o["model"], o["version"], feeds, self.expected(feeds), headers=self._h(),
                          timeout_s=o["timeout"], extensions=exts)  # fmt: skip
        except ProbeFailed as err:
            raise TargetError(f"{self.url}: {err.words}", "remote") from None

    def expected(self, feeds: dict[str, np.ndarray]) -> tuple:
        """What every answer must hold (kserve_answers): the model's outputs, the batch dimension the inputs'."""
        meta = self.meta or {}
        batch = next((a.shape[0] for a in feeds.values() if a.ndim), None)
        return expected_outputs(meta.get("model", {}).get("outputs", []), meta.get("config"), batch)

    def wrong(self, res, expected) -> str | None:
        """What is wrong with tritonclient's answer `res` (None: nothing)."""
        grpc = self.opts["protocol"] == "grpc"
        return check_answer(expected, *(grpc_answer(res.get_response()) if grpc else http_answer(res)))

    def _infer(self, c, feeds, binary: bool):
        kw = {"headers": self._h()}
        if self.opts["protocol"] == "grpc":
            kw["client_timeout"] = self.opts["timeout"]
        return c.infer(self.opts["model"], self._inputs(feeds, binary), model_version=self.opts["version"],
                       outputs=self._outputs(binary), **kw)  # fmt: skip

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One inference of `feeds`: the outputs by name (to check a server against a local run), checked."""
        if self.meta is None:
            self.connect()
        c = self.client()
        binary, _ = self.choose_tensors(c, feeds)
        try:
            res = self._infer(c, feeds, binary)
        except Exception as err:  # noqa: BLE001 - one line, by its kind
            words = unreadable(err)
            raise TargetError(f"{self.url}: {WRONG if words else 'inference failed'}: {words or why_failed(err)}",
                              "remote") from None  # fmt: skip
        why = self.wrong(res, self.expected(feeds))
        if why:
            raise TargetError(f"{self.url}: {WRONG}: {why}", "remote")
        return {t["name"]: res.as_numpy(t["name"]) for t in self.meta["model"]["outputs"]}

    # ----------------------------------------------------------------------------------------------- a run
    def bench(self, request, *, progress=None, rid: str | None = None, sink=None) -> TargetResult:
        from bench.metrics.kserve_stats import StatsReader
        from bench.metrics.prometheus import MetricsSampler
        from bench.scenarios.client import client_section, run_load
        from bench.scenarios.deferred import DeferredSignals
        from bench.scenarios.record import host_result
        from bench.targets.kserve_fast import choose_engine
        from bench.transports.connection import new_request_id
        from edge_runtime.results import ServerSection

        rid = rid or new_request_id("kserve-")
        if self.meta is None:
            self.connect()
        from bench.targets.kserve_model import check_served

        unread = check_served(self.url, self.meta["model"], request.model, self.opts["model"])
        feeds = self.feeds(request.seed)
        probe = self.client()
        binary, tensors = self.choose_tensors(probe, feeds)
        kind = request.scenario or "single-stream"
        conc = request.concurrency or (OPEN_LOOP_WORKERS if kind not in ("single-stream", "offline") else 1)
        name, version = self.opts["model"], self.opts["version"]
        stats = StatsReader(lambda: plain(probe.get_inference_statistics(name, version, headers=self._h(),
                                                                           **self.limit)), why_failed)  # fmt: skip
        # The server's headers (its access token) go to its own host's metrics port only, never to another host.
        host_of = lambda address: (address or "").rsplit(":", 1)[0]  # noqa: E731
        same_host = host_of(self.opts["metrics"]) == host_of(self.opts["address"])
        metrics = MetricsSampler(self.opts["metrics"], self.headers if same_host else {})
        self._stop.clear()
        self._running = rid
        marks: dict = {}

        def on_start() -> None:  # after every worker's warm-up, just before the first timed query
            marks["network"] = self.round_trip(probe)  # after a warm-up by time, as before run_request
            marks["before"] = stats.read()
            marks["at"] = time.time()
            metrics.start()

        spec, processes, engine = choose_engine(self, feeds, binary, request.samples_per_query or 1, conc)
        late = DeferredSignals()  # a signal in the bounded reads after the run: the run stored, then the exit says it
        try:  # the load: this process, or client processes (bench/scenarios/procs.py), each with its own clients
            run, load = run_load(request, spec, workers=conc, processes=processes, should_stop=self._stop.is_set,
                                 say=progress, on_start=on_start)  # fmt: skip
        except KeyboardInterrupt:
            self._stop.set()
            raise
        finally:
            with late:
                metrics.stop(late.signalled)
            self._running = None
        with late:
            after = None if late.signum else stats.read()
        run.interrupted = run.interrupted or late.signum
        split = stats.split(marks.get("before"), after, run)
        client, _ = client_section(run, load, spec.engine, engine)
        server = ServerSection(split, metrics.summary(), marks.get("network") or self.round_trip(probe), client)
        record = host_result(request, run, self._context(request, tensors), started_at=marks.get("at"), server=server)
        doc = record.to_dict()
        said = [*record.quality.warnings, *([unread] if unread else [])]
        got = TargetResult(rid, doc, warnings=said, stopped_by=run.interrupted)
        if sink is not None:
            sink(got)
        return got

    def _sender(self, feeds, binary: bool, spq: int, examples: dict[str, str]) -> Callable[[], str | None]:
        """One worker's sender: `spq` requests a query, a failure counted by its kind (its first message kept in
        `examples`). Its client is made in the thread that first uses it, and a thread that uses it later gets its
        own: tritonclient's HTTP client runs on gevent, whose hub belongs to one thread ("Cannot switch to a
        different thread")."""
        local = threading.local()
        inputs, outputs = self._inputs(feeds, binary), self._outputs(binary)
        kw = {"model_version": self.opts["version"], "outputs": outputs}
        if self.opts["protocol"] == "grpc":
            kw["client_timeout"] = self.opts["timeout"]
        name, expected = self.opts["model"], self.expected(feeds)

        def send() -> str | None:
            c = getattr(local, "client", None)
            if c is None:
                c = local.client = self.client()
            for _ in range(spq):
                try:
                    res = c.infer(name, inputs, headers=self._h(), **kw)
                    why = self.wrong(res, expected)
                except Exception as err:  # noqa: BLE001 - counted by kind, never fatal
                    why = unreadable(err)  # a 200 answer tritonclient could not read: a wrong one
                    if why is None:
                        kind = failure_kind(err)
                        examples.setdefault(kind, why_failed(err))  # the first message of each kind, for the record
                        return kind
                if why is not None:  # answered, but not what the model can answer: a failed query of its own kind
                    examples.setdefault(WRONG, why)
                    return WRONG
            return None

        return send

    def _context(self, request, tensors: str):
        """What the record says of this server and its model (bench/scenarios/record.py: HostRunContext)."""
        from bench.scenarios.record import HostRunContext, served_model
        from edge_runtime.results import BackendSection

        server = (self.meta or {}).get("server") or {}
        model = (self.meta or {}).get("model") or {}
        details = {"server": server.get("name"), "protocol": self.opts["protocol"], "tensors": tensors,
                   "address": self.opts["address"], "extensions": server.get("extensions")}  # fmt: skip
        backend = BackendSection("kserve", server.get("version"), f"server ({server.get('name')})", None, False, None,
                                 details)  # fmt: skip
        board = f"{server.get('name') or 'kserve'} {server.get('version') or ''} at {self.opts['address']}".strip()
        served = served_model(self.url, request.model, self.opts["model"], model.get("name", self.opts["model"]),
                              model.get("versions"))  # fmt: skip
        return HostRunContext(served, backend, board, "tritonclient infer() of seeded random inputs, from the client",
                              ("tritonclient", "grpcio", "geventhttpclient"))  # fmt: skip

    def round_trip(self, c, probes: int = 20) -> dict:
        """The network's round trip to the server, as the median of health requests before the run (it includes
        the server's own handling of the request, which is small beside an inference)."""
        times = []
        for _ in range(probes):
            t = time.perf_counter_ns()
            try:
                c.is_server_live(headers=self._h(), **self.limit)
            except Exception:  # noqa: BLE001 - a probe that fails is left out
                continue
            times.append(time.perf_counter_ns() - t)
        if not times:
            return {"rtt_ms": None, "reason": "no health request answered"}
        how = "median of health requests (server live) before the run: network + request handling"
        return {"rtt_ms": round(float(np.median(times)) / 1e6, 4), "probes": len(times), "method": how}

    def cancel(self, rid: str) -> bool:
        if self._running != rid:
            return False
        self._stop.set()
        return True
