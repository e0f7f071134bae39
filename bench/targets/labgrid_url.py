"""A labgrid:// target's URL (labgrid.py says what each option does): the place or the tags, and the options, each
checked, in one UserError line each."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field

from edge_runtime.errors import UserError

OPTIONS = {"coordinator", "wait", "boot", "power_off", "connect", "places", "group"}
MAX_PLACES = 1000
SUMMARY = (
    "labgrid://PLACE or labgrid://?TAG=VALUE (coordinator=HOST:PORT, wait=S, boot=S; places=all in a campaign): "
    "a board in a labgrid farm"
)


@dataclass(frozen=True)
class LabgridUrl:
    place: str | None
    tags: dict[str, str] = field(default_factory=dict)
    coordinator: str | None = None
    wait_s: float = 0.0
    boot_s: float = 60.0
    power_off_s: float = 1.0
    connect_s: float = 10.0  # how long the agent has to answer hello before it counts as not answering
    places: int | None = 1  # a campaign fans the tag form out over this many matching places (None: all of them)
    fan: bool = False  # places= given (places=1 too): a campaign's target that stands for its places
    group: str | None = None  # the kind a fan-out's places are compared as (the campaign target's name)


def parse_url(url: str) -> LabgridUrl:
    """The URL's place or tags and options; one UserError line for one that names nothing."""
    u = urllib.parse.urlsplit(url)
    if u.scheme.lower() != "labgrid" or u.path not in ("", "/"):
        raise UserError(f"target {url!r}: expected {SUMMARY}")
    query = dict(urllib.parse.parse_qsl(u.query, keep_blank_values=True))
    numbers = {}
    for key, default in (("wait", 0.0), ("boot", 60.0), ("power_off", 1.0), ("connect", 10.0)):
        try:
            numbers[key] = float(query.get(key, default))
        except ValueError:
            numbers[key] = -1.0
        if not 0 <= numbers[key] <= 86400 or (key in ("boot", "connect") and numbers[key] == 0):
            raise UserError(f"target {url!r}: {key}={query[key]!r} is not a number of seconds (0 to 86400)")
    coordinator = query.get("coordinator") or None
    port = (coordinator or "").rpartition(":")[2]
    if coordinator is not None and not (port.isascii() and port.isdigit()):
        raise UserError(f"target {url!r}: coordinator={coordinator!r}: expected HOST:PORT (127.0.0.1:20408)")
    tags = {k: v for k, v in query.items() if k not in OPTIONS}
    if u.netloc and tags:
        raise UserError(f"target {url!r}: a place or tags, not both (unknown options: {', '.join(sorted(tags))})",
                        hint=f"options: {', '.join(sorted(OPTIONS))}")  # fmt: skip
    if any(not v for v in tags.values()):
        raise UserError(f"target {url!r}: a tag is NAME=VALUE ({', '.join(k for k, v in tags.items() if not v)})")
    places = _places(url, query.get("places", "1"))
    if "places" in query and u.netloc:
        raise UserError(f"target {url!r}: places= goes with tags (labgrid://?TAG=VALUE&places=all); a place is one")
    group = query.get("group")
    if group is not None and not (group.strip() and group.isprintable() and len(group) <= 200):
        raise UserError(f"target {url!r}: group={group!r}: a name (printable, at most 200 characters)")
    place = urllib.parse.unquote(u.netloc) or None
    return LabgridUrl(place, tags, coordinator, numbers["wait"], numbers["boot"], numbers["power_off"],
                      numbers["connect"], places, "places" in query, group)  # fmt: skip


def _places(url: str, text: str) -> int | None:
    """`places=all` (None) or a number of places from 1 to MAX_PLACES."""
    if text == "all":
        return None
    if not (text.isascii() and text.isdigit() and 1 <= int(text) <= MAX_PLACES):
        raise UserError(f"target {url!r}: places={text!r}: 'all' or a number of places (1 to {MAX_PLACES})")
    return int(text)


def tags_text(tags: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(tags.items())) or "none"
