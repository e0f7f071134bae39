"""The labgrid target: a board in a labgrid farm, named by its place (`labgrid://PLACE`) or by tags
(`labgrid://?board=rock-5b`: the first free place whose tags match). It acquires the place (waiting up to `wait`
seconds while another user holds it, then one line naming the owner), reads the place's NetworkSerialPort (the host
and port of the exporter's ser2net), and reaches the board's agent over `rfc2217://HOST:PORT?ign_set_control=1`
through the agent target (agent.py), which does the rest: upload by hash, the bench, results kept until acknowledged.
When the agent does not answer and the place has a power port, the board is power-cycled once and the agent waited
for (`boot` seconds); then one line. The place is released by close(): after a run, an error, Ctrl-C or SIGTERM
(the command line's signal handler raises and `with target:` closes; the release itself holds signals back until
labgrid-client has answered).

labgrid is driven through its `labgrid-client` command, from an environment of its own (labgrid_client.py says why:
its pyserial fork would replace the harness's). `ign_set_control`: ser2net on a pseudo-terminal or a UART without
modem lines never acknowledges DTR/RTS, and pyserial's rfc2217 open waits for that answer unless told not to
(labgrid's own serial driver sets the same). The option carries a value because a bare `?ign_set_control` does not
survive edge_runtime.wire.endpoint's query parsing (parse_qs drops blank values).

Options: `coordinator=HOST:PORT` (else LG_COORDINATOR, else labgrid's default), `wait=S` (0: refuse at once),
`boot=S` (after a power cycle), `power_off=S` (how long the board stays off), `connect=S` (how long the
agent has to answer hello before it counts as not answering; 10). Any other key of the tag form is a tag.
`places=all` (or `places=N`) with tags: in a campaign, every matching place (or N of them, free ones first) runs the
target's work, concurrently (bench/campaign/fan_out.py); each place's runs carry a `place` section naming the place
and its `group` (the campaign target's name), which the reports compare boards of one kind by. `group=NAME` is what a
fan-out gives each place's URL; a one-off run's group is its place.

Never: open a port itself (the agent target does, through the transports), send the agent's token anywhere but the
agent, or take over a place this user already holds from another session (one line, with how to release it)."""

from __future__ import annotations

import os
import shlex
import signal
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import replace

from bench.targets.agent import AgentTarget
from bench.targets.base import Progress, Target, TargetError, TargetInfo, TargetOptions, TargetResult, printable
from bench.targets.labgrid_client import LabgridClient, Place, Resource
from bench.targets.labgrid_url import SUMMARY, parse_url, tags_text
from bench.transports import bare
from bench.transports.connection import new_request_id
from edge_runtime.errors import UserError

# An agent that does not answer: no hello, or a link lost past reconnect_for. Not "timeout" (a request a busy board
# has not answered in its time): a power cycle would cut a run that is going on.
DEAD = ("unreachable",)


class LabgridTarget(Target):
    schemes = ("labgrid",)
    info = TargetInfo(kind="board", summary=SUMMARY, thermal=True, takes=AgentTarget.info.takes, recovers=True)

    def __init__(self, url: str, options: TargetOptions | None = None):
        super().__init__(url, options)
        self.where = parse_url(url)
        self.log = self.options.log
        self.client: LabgridClient | None = None
        self.place: str | None = None  # the place this target acquired (released by close)
        self._trying: str | None = None  # a place being acquired: an interrupt may have left it ours
        self.serial: Resource | None = None
        self.power: Resource | None = None
        self.serial_url: str | None = None
        self.agent: AgentTarget | None = None
        self._cancelled = False  # cancel() came before the board had the request
        self._unsure: str | None = None  # interrupted while acquiring a place this user held: not released, said
        self.cycled = False  # the board is power-cycled once at most
        self.timings: dict[str, float] = {}

    @classmethod
    def check_url(cls, url: str) -> None:
        parse_url(url)

    @classmethod
    def short_name(cls, url: str) -> str:
        try:
            where = parse_url(url)
        except UserError:
            return url
        if not (where.place or where.tags):
            return "labgrid"
        return f"labgrid:{where.place or tags_text(where.tags).replace(', ', ',')}"

    @classmethod
    def fan_out(cls, url: str, group: str) -> list[tuple[str, str]] | None:
        """`places=all|N` with tags: each matching place (free ones first, then by name; N of them) and its URL,
        with this URL's options and `group`; None for a URL that names one place. Asks the coordinator."""
        where = parse_url(url)
        if not where.fan:
            return None
        places = LabgridClient(where.coordinator, url).places()
        matched = sorted((p for p in places if all(p.tags.get(k) == v for k, v in where.tags.items())),
                         key=lambda p: (p.owner is not None, p.name))  # fmt: skip
        if not matched:
            raise TargetError(f"{url}: no labgrid place has tags {tags_text(where.tags)}", "user-error")
        kept = {"coordinator": where.coordinator, "wait": f"{where.wait_s:g}", "boot": f"{where.boot_s:g}",
                "power_off": f"{where.power_off_s:g}", "connect": f"{where.connect_s:g}", "group": group}  # fmt: skip
        query = urllib.parse.urlencode({k: v for k, v in kept.items() if v is not None}, safe=":")
        return [(p.name, f"labgrid://{urllib.parse.quote(p.name, safe='')}?{query}") for p in matched[: where.places]]

    @classmethod
    def shared_by(cls, url: str) -> str | None:
        """A place is held for the campaign: the campaign's targets on one place (two backends on each board of a
        farm, a fan-out and a plain target) share this object, so it is acquired once."""
        where = parse_url(url)
        return f"labgrid:{where.coordinator or ''}:{where.place}" if where.place else None

    def adopt(self, url: str) -> None:
        """Used for another target on the same place: its URL and options (its group, its waits)."""
        self.url, self.where = url, parse_url(url)

    def _client(self) -> LabgridClient:
        if self.client is None:
            self.client = LabgridClient(self.where.coordinator, self.url)
        return self.client

    # ------------------------------------------------------------------------------------------------ the place
    def _acquire(self) -> None:
        """Acquire the place named (or the first free one with the tags), waiting up to `wait` seconds. An interrupt
        inside labgrid-client's acquire leaves it unknown whether the coordinator gave the place: it is released at
        close only if it was last seen free or held by another user, never when this host and user held it (another
        session's, which a release would pull from under it); else close says how to release it."""
        client = self._client()
        deadline = time.monotonic() + self.where.wait_s
        told, seen = False, {}  # seen: place -> its owner as last seen (None: free)
        while True:
            names = [self.where.place] if self.where.place else self._tagged(client.places(), seen)
            held = {}
            for name in names:
                try:
                    owner = client.acquire(name)
                except KeyboardInterrupt:
                    ours = seen.get(name, LabgridClient.YOURS) in (LabgridClient.YOURS, client.me)
                    self._trying, self._unsure = (None, name) if ours else (name, None)
                    raise
                if owner is None:
                    self.place = name
                    return
                held[name] = seen[name] = owner
            if time.monotonic() >= deadline:
                raise self._held(held)
            if not told:
                told = True
                who = ", ".join(f"{n!r} held by {printable(o, markup=False)}" for n, o in held.items())
                self.log(f"{self.url}: {who}; waiting up to {self.where.wait_s:g} s")
            for _ in range(10):  # a second, in tenths: a cancel ends the wait at once
                self._check_cancelled()
                time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))

    def _tagged(self, places: list[Place], seen: dict) -> list[str]:
        if not self.where.tags:
            raise TargetError(f"{self.url}: names no place and no tags (labgrid://PLACE or labgrid://?TAG=VALUE; "
                              "edge-bench targets lists the places)", "user-error")  # fmt: skip
        matched = [p for p in places if all(p.tags.get(k) == v for k, v in self.where.tags.items())]
        if not matched:
            raise TargetError(f"{self.url}: no labgrid place has tags {tags_text(self.where.tags)}", "user-error")
        seen.update({p.name: p.owner for p in matched})
        return [p.name for p in sorted(matched, key=lambda p: p.owner is not None)]

    def _held(self, held: dict[str, str | None]) -> TargetError:
        mine = all(o in (LabgridClient.YOURS, self._client().me) for o in held.values())
        x = f" -x {self.where.coordinator}" if self.where.coordinator else ""
        waited = f"waited {self.where.wait_s:g} s; wait=S waits longer" if self.where.wait_s else "wait=S waits for it"
        said = []
        for name, owner in held.items():
            if owner in (LabgridClient.YOURS, self._client().me):
                said.append(f"{name!r} is already acquired by this host and user (another run, or one that did not "
                            f"release it: labgrid-client{x} -p {shlex.quote(name)} release)")  # fmt: skip
            else:
                said.append(f"{name!r} is held by {printable(owner, markup=False)}")
        what = "place " + said[0] if len(said) == 1 else "every place with those tags is held: " + "; ".join(said)
        return TargetError(f"{self.url}: {what}" + ("" if mine else f" ({waited})"), "refused")

    def _find_port(self) -> None:
        """The acquired place's NetworkSerialPort (and power port, if any) -> the agent's rfc2217 URL."""
        resources = self._client().resources(self.place)
        serial = next((r for r in resources if r.cls == "NetworkSerialPort"), None)
        self.power = next((r for r in resources if "Power" in r.cls), None)
        if serial is None:
            raise TargetError(f"{self.url}: place {self.place!r} has no NetworkSerialPort (an exporter's "
                              "RawSerialPort or USBSerialPort, added with labgrid-client add-match)",
                              "user-error")  # fmt: skip
        self.serial = serial
        self._check_exporter(resources)
        if (serial.params.get("extra") or {}).get("proxy_required"):
            raise TargetError(f"{self.url}: {serial.path} is reached through labgrid's SSH proxy, which this target "
                              "does not use", "unusable")  # fmt: skip
        host, port, speed = serial.params.get("host"), serial.params.get("port"), serial.params.get("speed")
        if not host or not port:
            raise TargetError(f"{self.url}: {serial.path} has no network port yet (the exporter's ser2net did not "
                              "start)", "unreachable")  # fmt: skip
        host = f"[{host}]" if ":" in str(host) else host
        query = urllib.parse.urlencode({"ign_set_control": 1, **({"baud": int(speed)} if speed else {})})
        self.serial_url = f"rfc2217://{host}:{int(port)}?{query}"

    def _check_exporter(self, resources: list[Resource] | None = None) -> None:
        """One line when the serial port's exporter is gone (the coordinator dropped or disabled its resource)."""
        try:
            resources = self._client().resources(self.place) if resources is None else resources
        except TargetError:
            return  # the coordinator itself is not answering: the caller's own error says more
        gone = self.serial is not None and not any(r.path == self.serial.path and r.avail for r in resources)
        if gone:
            exporter, group = self.serial.path.split("/")[:2]
            raise TargetError(f"{self.url}: place {self.place!r}: exporter {exporter!r} is gone (its {group} serial "
                              "port is no longer offered)", "unreachable")  # fmt: skip

    def _release(self) -> None:
        """Release the place; SIGINT, SIGTERM and SIGHUP wait until labgrid-client has answered (then they act)."""
        place, ours = self.place or self._trying, self.place is not None  # _trying: the coordinator may not have it
        self.place = self._trying = None
        held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
        old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
        try:
            words = self._client().release(place)
        except (TargetError, UserError) as err:
            words = str(err)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        if words and ours:
            self.log(f"{self.url}: could not release place {place!r}: {words}")

    # ------------------------------------------------------------------------------------------------ the board
    def _reach(self, step: Callable[[AgentTarget], dict], cycle: bool = True) -> dict:
        """Acquire, find the port, and `step` the agent (connect or describe), power-cycling once if it is dead (and
        `cycle`: `edge-bench targets` asks what is there and switches nothing)."""
        if self.where.fan:
            raise TargetError(f"{self.url}: places= fans a target out over many places in a campaign; a run on its "
                              "own takes one place (drop places=)", "user-error")  # fmt: skip
        t0 = time.monotonic()
        if self.place is None:
            self._acquire()
        t1 = time.monotonic()
        if self.serial_url is None:
            self._find_port()
            options = replace(self.options, connect_timeout=min(self.options.connect_timeout, self.where.connect_s))
            self.agent = AgentTarget(self.serial_url, options)
        t2 = time.monotonic()
        try:
            got = step(self.agent)
        except TargetError as err:
            if err.kind not in DEAD:
                raise self._said(err) from None
            if not cycle:
                self._check_exporter()
                how = f"a run would power-cycle it through {self.power.path}" if self.power else "no power port"
                raise TargetError(f"{self.url}: place {self.place!r}: the board's agent does not answer ({how}; "
                                  f"targets switches nothing): {err}", err.kind) from None  # fmt: skip
            got = self._after_power_cycle(step, err)
        self.timings = {"acquire_s": t1 - t0, "find_port_s": t2 - t1, "agent_s": time.monotonic() - t2}
        return got

    def _said(self, err: TargetError) -> TargetError:
        return TargetError(f"{self.url}: place {self.place!r}: {err}", err.kind, hint=err.hint)

    def _after_power_cycle(self, step: Callable[[AgentTarget], dict], err: TargetError):
        """The agent does not answer: say why in one line, or power-cycle the board (once) and wait for it."""
        self._check_exporter()
        if self.power is None or self.cycled:
            why = "no power port to cycle" if self.power is None else "it was power-cycled once already"
            raise TargetError(f"{self.url}: place {self.place!r}: the board's agent does not answer ({why}): "
                              f"{err}", err.kind) from None  # fmt: skip
        self.cycled = True
        self.agent.close()
        self.log(f"{self.url}: the board's agent does not answer ({bare(self.serial_url, str(err))}); "
                 f"power-cycling it through {self.power.path}")  # fmt: skip
        words = self._client().power_cycle(self.place, self.where.power_off_s)
        if words:
            raise TargetError(f"{self.url}: place {self.place!r}: the agent does not answer and the power cycle "
                              f"through {self.power.path} failed: {words}", "unreachable") from None  # fmt: skip
        deadline = time.monotonic() + self.where.boot_s
        while True:
            try:
                return step(self.agent)
            except TargetError as again:
                if again.kind not in DEAD or time.monotonic() >= deadline:
                    raise TargetError(f"{self.url}: place {self.place!r}: the board's agent does not answer after a "
                                      f"power cycle through {self.power.path} (waited {self.where.boot_s:g} s, "
                                      f"boot=S waits longer): {again}", again.kind) from None  # fmt: skip
                time.sleep(0.5)

    def connect(self) -> dict:
        ident = self._reach(lambda agent: agent.connect())
        self.identity = {**ident, "labgrid": self._place_row()}
        return self.identity

    def _place_section(self) -> dict:
        """The record's `place`: where the run ran in the farm, and the group its siblings share."""
        return {"name": self.place, "group": self.where.group or self.place, "tags": dict(self.where.tags),
                "board": self.serial.path.rsplit("/", 2)[0] if self.serial else None,
                "coordinator": self.where.coordinator, "power_cycled": self.cycled}  # fmt: skip

    def _place_row(self) -> dict:
        return {"place": self.place, "board": self.serial.path.rsplit("/", 2)[0] if self.serial else None,
                "tags": dict(self.where.tags), "serial_url": self.serial_url,
                "power": self.power.path if self.power else None, "coordinator": self.where.coordinator,
                "power_cycled": self.cycled, **{k: round(v, 3) for k, v in self.timings.items()}}  # fmt: skip

    def describe(self) -> dict:
        """`labgrid://` (or tags with places=): the (matching) places, whether each is free; else the board's agent,
        as the agent target describes it, with the place it was reached through."""
        if self.where.place is None and (not self.where.tags or self.where.fan):  # the places (matching)
            places = [p for p in self._client().places() if all(p.tags.get(k) == v for k, v in self.where.tags.items())]
            if self.where.tags and not places:
                raise TargetError(f"{self.url}: no labgrid place has tags {tags_text(self.where.tags)}", "user-error")
            rows = [{"name": p.name, "tags": p.tags, "boards": p.boards, "owner": p.owner} for p in places]
            return {"coordinator": self.where.coordinator, "places": rows}
        row = self._reach(lambda agent: agent.describe(), cycle=False)
        return {**row, "labgrid": self._place_row()}

    @classmethod
    def describe_text(cls, row: dict) -> list[str]:
        if "places" in row:
            where = row.get("coordinator") or os.environ.get("LG_COORDINATOR") or "labgrid's default coordinator"
            lines = [f"{row['url']}  reachable  (labgrid coordinator at {where}, {len(row['places'])} places)"]
            for p in row["places"]:  # a coordinator's words: whoever talks to it chooses them (made printable)
                state = f"held by {printable(p['owner'], markup=False)}" if p["owner"] else "free"
                boards = printable(", ".join(p["boards"]) or "-", markup=False)
                lines.append(f"  {printable(p['name'], markup=False):<16} {state:<24} boards {boards}; "
                             f"tags {printable(tags_text(p['tags']), markup=False)}")  # fmt: skip
            return lines
        lg = row["labgrid"]
        lines = AgentTarget.describe_text(row)
        took = f"acquired in {lg.get('acquire_s', 0):.1f} s, agent answered {lg.get('agent_s', 0):.1f} s later"
        cycled = ", power-cycled" if lg.get("power_cycled") else ""
        lines.insert(1, f"  place     {lg['place']} ({lg['board']}) via {lg['serial_url']}; power "
                        f"{lg['power'] or 'none'}{cycled}; {took}")  # fmt: skip
        return lines

    def bench(self, request, *, progress: Progress | None = None, rid: str | None = None,
              sink: Callable[[TargetResult], None] | None = None) -> TargetResult:  # fmt: skip
        """The agent target's bench on the place's board; a board that stops answering is power-cycled once (if the
        place has a power port) and asked again under the same request id (it never runs a request twice)."""
        rid = rid or new_request_id("bench-")
        self._cancelled = False
        if self.agent is None:
            self.connect()
        self._check_cancelled()
        placed = self._with_place(sink)
        try:
            return self.agent.bench(request, progress=progress, rid=rid, sink=placed)
        except TargetError as err:
            if err.kind not in DEAD:
                raise self._said(err) from None
            self._after_power_cycle(lambda agent: agent.connect(), err)
        try:
            return self.agent.bench(request, progress=progress, rid=rid, sink=placed)
        except TargetError as err:
            raise self._said(err) from None

    def _with_place(self, sink: Callable[[TargetResult], None] | None) -> Callable[[TargetResult], None]:
        """The sink, given each result with its `place` section first."""

        def placed(got: TargetResult) -> None:
            got.result = {**got.result, "place": self._place_section()}
            if sink is not None:
                sink(got)

        return placed

    def cancel(self, rid: str) -> bool:
        """Stop `rid` on the board; before the board has it (waiting for the place, connecting), the wait ends and
        no bench is started (a campaign's Ctrl-C, from its main thread)."""
        self._cancelled = True
        return self.agent.cancel(rid) if self.agent is not None else False

    def _check_cancelled(self) -> None:
        if self._cancelled:
            raise TargetError(f"{self.url}: cancelled before the board was asked", "cancelled")

    def recover(self, rid: str, sink: Callable[[TargetResult], None] | None = None,
                progress: Progress | None = None) -> TargetResult | None:  # fmt: skip
        return self.agent.recover(rid, self._with_place(sink), progress) if self.agent is not None else None

    def close(self) -> None:
        """Close the agent's connection and release the place (always: whatever ended the run). A later connect
        acquires it again and reads its port again (ser2net's port may differ then)."""
        try:
            if self.agent is not None:
                self.agent.close()
        finally:
            self.agent = self.serial_url = None
            if self.place is not None or self._trying is not None:
                self._release()
            if self._unsure is not None:
                x = f" -x {self.where.coordinator}" if self.where.coordinator else ""
                self.log(f"{self.url}: interrupted while acquiring {self._unsure!r}, which this host and user held: "
                         f"not released (if it is this run's: labgrid-client{x} -p {shlex.quote(self._unsure)} "
                         "release)")  # fmt: skip
                self._unsure = None
