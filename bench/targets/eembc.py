"""MLPerf Tiny firmware as a target (issue 27): a microcontroller that speaks the EEMBC runner's UART protocol, reached
by pyserial URL (`eembc:///dev/ttyACM0?baud=115200`; `eembc+socket://HOST:PORT` and `eembc+rfc2217://HOST:PORT` for
a device on a remote serial server). The firmware times itself: the host sends commands and reads the device's laps.

EembcDevice is the I/O half over one stream (bench/transports): a command out, its reply in (eembc_protocol's Reply),
every wait bounded and a timeout saying the last line the device sent; inputs loaded in the runner's pieces, each
acknowledged; a reset (a new `m-init-done`) seen and the loop retried a bounded number of times.

Never: parse a device line here (eembc_protocol.py does), or time an inference with the host's clock."""

from __future__ import annotations

import math
import os
import statistics
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass

from bench.targets import eembc_protocol as proto
from bench.targets.base import Progress, Target, TargetError, TargetInfo, TargetOptions, TargetResult, printable
from bench.targets.eembc_load import RETRIES, Loading, proto_words
from bench.transports import Stream, StreamLost, open_stream, parse_endpoint
from edge_runtime.errors import UserError

DEFAULT_TIMEOUT_S = 5.0  # serial_device.py's own: a command the firmware answers at once
MAX_INFERENCES = (1 << 31) - 1  # the firmware reads N with atol/strtol into a 32-bit long


def serial_url(url: str) -> str:
    """The pyserial URL an `eembc` URL names: `eembc:///dev/X?baud=N` -> `serial:///dev/X?baud=N`,
    `eembc+socket://H:P` -> `socket://H:P`; one UserError line for anything else."""
    u = urllib.parse.urlsplit(url)
    scheme, _, inner = u.scheme.lower().partition("+")
    try:
        port = u.port
    except ValueError:
        port = None
    if scheme != "eembc" or (not inner and (u.netloc or not u.path)) or (inner and (not u.hostname or not port)):
        raise UserError(f"target {url!r}: expected eembc:///dev/DEVICE?baud=N or eembc+socket://HOST:PORT")
    return (inner or "serial") + url[len(u.scheme) :]  # the rest as written (urlunsplit drops an empty `//`)


class DeviceReset(TargetError):
    """The device booted again (a new `m-init-done`) while it answered a command: what it held is gone."""

    def __init__(self, message: str):
        super().__init__(message, "crashed")


@dataclass
class Loop:
    """One `infer N W` loop, kept: the device's figures and the resets it took to get it."""

    perf: proto.Performance
    resets: int = 0


class EembcDevice(Loading):
    """One EEMBC device on one stream. `clock` is the host's monotonic clock, for deadlines only."""

    def __init__(self, stream: Stream, name: str, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                 clock: Callable[[], float] = time.monotonic):  # fmt: skip
        self.stream, self.name, self.timeout_s, self.clock = stream, name, timeout_s, clock
        self.splitter = proto.LineSplitter()
        self.after: list[str] = []  # lines read after a reply's m-ready: stale for the next command
        self.last_line = ""  # the last line the device sent, in any reply: what a timeout names
        self.resets_between = 0  # boots seen between commands (a banner that came while nobody asked)
        self.pieces_resent = 0
        self.refused = ""  # the device's words when it last refused a piece
        self.loaded: bytes | None = None  # what the device holds now (lost with a reset)
        self.char_s = 10 / 115200  # one character's time on the line (set from the URL's baud by open())

    def line_s(self, chars: int) -> float:
        """How long `chars` characters take on the line: waits for a reply or for quiet grow with it at a slow baud."""
        return chars * self.char_s

    @classmethod
    def open(cls, url: str, **kw) -> EembcDevice:
        inner = serial_url(url)
        try:
            dev = cls(open_stream(inner, exclusive=True), url, **kw)
        except StreamLost as err:
            raise TargetError(f"{url}: {proto_words(err)}") from None
        dev.char_s = 10 / parse_endpoint(inner, "target", listen=False).baud
        return dev

    def close(self) -> None:
        self.stream.close()

    # ------------------------------------------------------------------ one command, one reply
    def _drain(self, quiet_s: float = 0.0) -> None:
        """What came before a command (a banner, garbage, the end of a reply cut short by a reset) is not its reply:
        read until the device has been quiet `quiet_s`, and judged here."""
        stale, lines, self.after = proto.Reply("(between commands)"), self.after, []
        quiet_until = self.clock() + quiet_s
        give_up = self.clock() + quiet_s + self.timeout_s  # a device that never goes quiet (a boot loop, a log)
        while True:
            for line in lines:
                stale.feed(line)
            if stale.last_line:
                self.last_line = stale.last_line
            data = self._read(max(0.0, min(quiet_until - self.clock(), 0.5)))
            if data:
                quiet_until = self.clock() + quiet_s
                if quiet_s and self.clock() >= give_up:
                    raise TargetError(f"{self.name}: the device never went quiet for {quiet_s:g} s in "
                                      f"{quiet_s + self.timeout_s:g} s (rebooting, or logging?); last line "
                                      f"{self.last_line!r}", "timeout")  # fmt: skip
            elif self.clock() >= quiet_until:
                break
            lines = self.splitter.feed(data)
        if stale.reset:
            self.resets_between += 1
        if stale.last_line:
            self.last_line = stale.last_line

    def _read(self, timeout_s: float) -> bytes:
        try:
            return self.stream.read(timeout_s)
        except StreamLost as err:
            raise TargetError(f"{self.name}: {proto_words(err)} (last line {self.last_line!r})") from None

    def ask(self, cmd: bytes, timeout_s: float | None = None) -> proto.Reply:
        """Send one command and collect its reply up to `m-ready`; TargetError (kind timeout) naming the command and
        the last line the device sent when it does not come in time."""
        self._drain()
        text = cmd.decode("ascii").rstrip("%")
        shown = text if len(text) <= 24 else text[:21] + "..."
        reply = proto.Reply(shown)
        try:
            self.stream.write(cmd)
        except StreamLost as err:
            raise TargetError(f"{self.name}: {proto_words(err)}") from None
        limit = self.timeout_s if timeout_s is None else timeout_s
        deadline = self.clock() + limit
        while not reply.done:
            left = deadline - self.clock()
            if left <= 0:
                raise TargetError(f"{self.name}: {shown}: no m-ready in {limit:.3g} s; last line {self.last_line!r}",
                                  "timeout")  # fmt: skip
            lines = self.splitter.feed(self._read(min(left, 0.5)))
            for i, line in enumerate(lines):
                if reply.feed(line):
                    self.after = lines[i + 1 :]
                    break
            if reply.last_line:
                self.last_line = reply.last_line
        return reply

    def check(self, reply: proto.Reply) -> proto.Reply:
        """The reply, or a one-line error: DeviceReset for a reset, TargetError with the device's own words."""
        if reply.reset:
            raise DeviceReset(f"{self.name}: {reply.command}: the device reset (m-init-done)")
        if reply.errors:
            raise TargetError(f"{self.name}: {reply.command}: {reply.said()}", "refused")
        return reply

    # ------------------------------------------------------------------ what the runner does
    def sync(self, quiet_s: float | None = None) -> tuple[str, str]:
        """Be sure the next line read answers the next command: wait for the device to be quiet (a boot banner on its
        way; 0.2 s, longer at a slow baud), then `name` until one is answered without a reset; its (role, vendor's
        name). A reply that is not one (the end of an `infer` a Ctrl-C left running, `Unknown command: xname` for a
        stray byte left in the firmware's buffer) is a reason to ask again, not an answer."""
        quiet = max(0.2, self.line_s(150)) if quiet_s is None else quiet_s
        said = ""
        for _ in range(RETRIES):
            self._drain(quiet)
            reply = self.ask(proto.cmd_name())
            if not reply.reset and not reply.errors and reply.first("name") is not None:
                self._drain(quiet)  # a reply cut short by a banner may still end after it
                return reply.value("name")
            said = reply.said()
        raise TargetError(f"{self.name}: name: no m-name in {RETRIES} tries ({said})", "refused")

    def identify(self) -> dict:
        """Sync and say who it is: `name` and `profile`, as the runner asks."""
        role, vendor = self.sync()
        prof = self.check(self.ask(proto.cmd_profile()))
        model, profile = self.value(prof, "model"), self.value(prof, "profile")
        return {"board": f"{printable(vendor)} ({printable(role)})", "profile": printable(profile),
                "model": printable(model)}  # fmt: skip

    def value(self, reply: proto.Reply, kind: str):
        """A reply's `kind` value, or a TargetError line naming what the device said instead."""
        try:
            return reply.value(kind)
        except proto.ProtocolError as err:
            raise TargetError(f"{self.name}: {err}", "refused") from None

    def infer(self, n: int, warmups: int, timeout_s: float) -> proto.Performance:
        """`infer N W`, its laps checked against the host's clock: a device whose timer did not advance, or says a
        loop took longer than the host waited for it (a lap that went backwards reads as a 32-bit wrap), is refused:
        its figures would be stored as a result (the host's clock bounds the device's, never measures it)."""
        if n > MAX_INFERENCES:
            raise TargetError(f"{self.name}: infer {n}: more than the firmware's {MAX_INFERENCES:,} (its timer or its "
                              "probe is wrong)", "refused")  # fmt: skip
        t0 = self.clock()
        reply = self.check(self.ask(proto.cmd_infer(n, warmups), timeout_s + self.line_s(200)))  # + its reply
        waited_s = self.clock() - t0
        try:
            perf = proto.performance(reply)
        except proto.ProtocolError as err:
            raise TargetError(f"{self.name}: {err}", "refused") from None
        if perf.elapsed_us <= 0 or perf.elapsed_us / 1e6 > waited_s * 1.05 + 0.005:
            raise TargetError(f"{self.name}: infer {n}: the device's laps say {perf.elapsed_us:,} us where the host "
                              f"waited {waited_s * 1e6:,.0f} us: its timer is wrong (laps {perf.t0_us}, {perf.t1_us})",
                              "refused")  # fmt: skip
        return perf

    def loop(self, data: bytes, n: int, warmups: int, timeout_s: float) -> Loop:
        """Run one loop on `data` (loaded unless the device holds it already); a reset on the way costs a sync, a
        reload and a retry, at most RETRIES times."""
        resets = 0
        while True:
            try:
                if self.loaded != data:
                    self.loaded = None
                    self.load(data)
                    self.loaded = data
                return Loop(self.infer(n, warmups, timeout_s), resets)
            except DeviceReset as err:
                self.loaded = None  # its RAM is gone with it
                resets += 1
                if resets >= RETRIES:
                    raise TargetError(f"{err} ({resets} times; no whole loop)", "crashed") from None
                self.sync()

    def performance(self, data: bytes, *, loops: int = 5, min_loop_s: float = 10.0, warmups: int = 10,
                    probe: int = 10, on_loop: Callable[[Loop], None] | None = None) -> list[Loop]:  # fmt: skip
        """MLPerf Tiny's performance mode: a short probe (`probe` inferences) sizes N so that one loop lasts at least
        `min_loop_s` by the device's timer, then `loops` loops; a loop found short (the device sped up) is run again
        with N scaled, once. Each loop kept is given to `on_loop` as it ends. The median is the caller's to take
        (`median_ips`)."""
        first = self.loop(data, probe, warmups, self.timeout_s + 60.0)
        per_inference_s = max(first.perf.latency_us, 1.0) / 1e6
        n = max(1, math.ceil(min_loop_s / per_inference_s * 1.05))  # 5%: the probe's own error
        kept = []
        for _ in range(loops):
            budget = (n + warmups) * per_inference_s * 2 + self.timeout_s
            got = self.loop(data, n, warmups, budget)
            if got.perf.elapsed_us < min_loop_s * 1e6:
                n = math.ceil(n * min_loop_s * 1e6 / max(got.perf.elapsed_us, 1) * 1.05)
                got = self.loop(data, n, warmups, budget * 2)
            kept.append(got)
            if on_loop is not None:
                on_loop(got)
        return kept


def median_ips(loops: list[Loop]) -> float:
    """The median of the loops' inferences per second (MLPerf Tiny reports the median of its loops)."""
    return statistics.median(loop.perf.inferences_per_s for loop in loops)


class EembcTarget(Target):
    """`eembc:` URLs: a device running MLPerf Tiny firmware. `bench` runs the URL's mode (eembc_run.py: performance
    by default, accuracy with a dataset) and returns the record every target writes."""

    schemes = ("eembc", "eembc+socket", "eembc+rfc2217")
    info = TargetInfo(kind="board", summary="eembc:///dev/ttyACM0?baud=115200 for MLPerf Tiny firmware (EEMBC runner; "
                      "mode=accuracy&data=F.npz, loops, loop_s)", scenarios=frozenset({"single-stream"}))  # fmt: skip
    no_ops_why = "MLPerf Tiny firmware times whole inferences on the device: the EEMBC protocol has no per-op profile"

    def __init__(self, url: str, options: TargetOptions | None = None):
        from bench.targets.eembc_run import split_url

        super().__init__(url, options)
        self.device_url, self.run_options = split_url(url)
        self.device: EembcDevice | None = None

    @classmethod
    def check_url(cls, url: str) -> None:
        from bench.targets.eembc_run import split_url

        inner = serial_url(split_url(url)[0])
        try:
            parse_endpoint(inner, "target", listen=False)  # the baud rate checked as a serial target's
        except UserError as err:  # said of the URL the user wrote, not of the pyserial URL made of it
            raise UserError(err.message.replace(repr(inner), repr(url)), hint=err.hint) from None

    @classmethod
    def with_base(cls, url: str, base: str) -> str:
        """`data=` relative to the campaign file, as its models are (else where edge-bench runs, if it is there)."""
        from bench.targets.eembc_run import split_url

        data = split_url(url)[1].data
        if not data or os.path.isabs(data) or (os.path.exists(data) and not os.path.exists(os.path.join(base, data))):
            return url
        u = urllib.parse.urlsplit(url)
        query = [(k, os.path.join(base, v) if k == "data" else v) for k, v in urllib.parse.parse_qsl(u.query, True)]
        return url.split("?", 1)[0] + "?" + urllib.parse.urlencode(query, safe="/:")

    @classmethod
    def preflight(cls, url: str, **_kw) -> None:
        """An accuracy dataset read and checked before any run (a campaign refuses it when read, not hours in)."""
        from bench.targets.eembc_run import read_dataset, split_url

        opts = split_url(url)[1]
        if opts.mode == "accuracy":
            read_dataset(opts.data or "", None, opts)

    def connect(self) -> dict:
        if self.device is None:
            timeout = self.run_options.timeout or self.options.connect_timeout
            self.device = EembcDevice.open(self.device_url, timeout_s=timeout)
            self.device.name = self.url
        try:
            self.identity = {**self.device.identify(), "kind": "eembc", "url": self.device_url}
        except TargetError:
            self.close()
            raise
        return self.identity

    def describe(self) -> dict:
        return {**self.connect(), "modes": ["performance", "accuracy"], "energy": ENERGY}

    @classmethod
    def describe_text(cls, row: dict) -> list[str]:
        return [
            f"{row['url']}  reachable  (MLPerf Tiny firmware: {row.get('profile') or '?'})",
            f"  board     {row.get('board') or '?'}",
            f"  model     {row.get('model') or '?'}",
            f"  modes     {', '.join(row.get('modes') or [])} (the device's own timer); energy: {ENERGY}",
        ]

    def bench(self, request, *, progress: Progress | None = None, rid: str | None = None,
              sink: Callable[[TargetResult], None] | None = None) -> TargetResult:  # fmt: skip
        """The URL's mode on the device; Ctrl-C keeps the loops (or samples) finished, as a partial result."""
        from bench.targets import eembc_run as er
        from bench.transports.connection import new_request_id
        from edge_runtime.errors import Interrupted

        opts = self.run_options
        scenario = getattr(request, "scenario", None) or "single-stream"
        if scenario != "single-stream" or (getattr(request, "concurrency", None) or 1) > 1:
            raise TargetError(f"{self.url}: scenario {scenario!r}: MLPerf Tiny firmware runs single-stream only "
                              "(one inference at a time, timed by the device)", "user-error")  # fmt: skip
        # the dataset refused in one line before the device is touched; its labels score what the device answers
        labels = er.read_dataset(opts.data or "", None, opts)[1] if opts.mode == "accuracy" else None
        identity = self.connect()
        kept: list[Loop] = []
        loop_s, stopped_by, failed = None, None, None
        started, t0 = time.time(), time.monotonic()
        try:
            if opts.mode == "accuracy":
                er.run_accuracy(self.device, opts, identity["model"], progress, kept, labels)
            else:
                loop_s = er.run_performance(self.device, request, opts, identity["model"], progress, kept)
        except KeyboardInterrupt as err:  # Ctrl-C, SIGTERM: what the device finished is kept
            stopped_by = getattr(err, "signum", None) or 2
            if not kept:
                self.close()  # the device is mid-loop: the next connect syncs again
                raise Interrupted(stopped_by) from None
        except UserError as err:  # the dataset against the device's model: this run fails, a campaign goes on
            self.close()
            raise TargetError(f"{self.url}: {err.one_line()}", "user-error") from None
        except TargetError as err:  # a cable pulled, a device gone silent: the loops it finished are kept
            if not kept:
                self.close()
                raise
            failed = err
        try:
            wall_s = time.monotonic() - t0
            doc = er.record(request, identity, opts, kept, loop_s=loop_s, started_at=started, wall_s=wall_s,
                            device=self.device, labels=labels, stopped_by=stopped_by,
                            failed=failed).to_dict()  # fmt: skip
        except UserError as err:
            raise TargetError(f"{self.url}: {err.one_line()}", "user-error") from None
        finally:
            self.close()
        self.close()  # the port is free between runs (another target of a campaign may name the same device)
        got = TargetResult(rid or new_request_id("eembc-"), doc, warnings=list(doc["quality"]["warnings"]),
                           stopped_by=stopped_by)  # fmt: skip
        if sink is not None:
            sink(got)
        return got

    def close(self) -> None:
        if self.device is not None:
            self.device.close()
            self.device = None


ENERGY = "needs a power monitor and the runner's I/O manager between host and device: not offered"
