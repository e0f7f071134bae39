"""TOML files users write (board profiles, campaigns): read as any input the user names (inputs.open_input), and the
validators both readers use. Every message is one line that starts with the file as its reader names it (`Where`),
then the table or key, then what is wrong or wanted. A key close to a known one (a typo) is an error, or a warning
where the reader says so; a key like nothing known is a warning (a newer file read by older code), said one by one up
to MAX_UNKNOWN_SHOWN and then counted.

Never: know what a profile or a campaign holds (the readers do), or let a decode error out as a traceback.
"""

from __future__ import annotations

import difflib
import math
import os
import warnings
from collections.abc import Collection, Mapping

from edge_runtime.errors import UserError
from edge_runtime.files.inputs import open_input

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

MAX_UNKNOWN_SHOWN = 10  # unknown keys warned one by one; the rest in one line (700,000 keys were 700,000 lines)


class Where(str):
    """A file as its messages name it ("campaign 'c.toml'", "board profile x.toml"), the classes its mistakes are
    raised and warned as, and the count of unknown keys met while it is read."""

    error: type[UserError]
    warning: type[Warning]
    unknown: int

    def __new__(cls, name: str, *, error: type[UserError] = UserError, warning: type[Warning] = UserWarning) -> Where:
        self = super().__new__(cls, name)
        self.error, self.warning, self.unknown = error, warning, 0
        return self

    def warn_the_rest(self) -> None:
        """Once the file is read: the unknown keys past the first MAX_UNKNOWN_SHOWN, counted in one line."""
        if self.unknown > MAX_UNKNOWN_SHOWN:
            warnings.warn(f"{self}: ... and {self.unknown - MAX_UNKNOWN_SHOWN:,} more unknown keys ignored "
                          f"({self.unknown:,} in all)", self.warning, stacklevel=3)  # fmt: skip


def read_toml(path: str | os.PathLike[str], where: Where, what: str, *, max_bytes: int) -> dict:
    """`path` as a table: a regular file (a fifo or a link to /dev/zero named *.toml would hang or never end) of at
    most `max_bytes` (its open errors name it as `what`), in UTF-8 as TOML requires, parsed."""
    with open_input(path, what, error=where.error, max_bytes=max_bytes) as f:
        raw = f.read()
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise where.error(f"{where}: not TOML (not UTF-8 text: {err.reason} at byte {err.start})") from None
    except tomllib.TOMLDecodeError as err:
        raise where.error(f"{where}: not TOML ({' '.join(str(err).split())[:160]})") from None


def check_keys(where: Where, table: str, d: Mapping, known: Collection[str], *, typos: str = "error") -> None:
    """Every key of `d` not in `known`: a typo (close to a known key) is an error naming what may be, or with
    typos="warn" a warning saying what was meant; any other is a warning, counted in `where`."""
    choices = sorted(known)
    for key in d:
        if key in known:
            continue
        close = difflib.get_close_matches(key, choices, n=1, cutoff=0.75)
        if close and typos == "error":
            raise where.error(f"{where}: {table}: unknown key {key!r} (did you mean {close[0]!r}? known: "
                              f"{', '.join(choices)})")  # fmt: skip
        where.unknown += 1
        if where.unknown <= MAX_UNKNOWN_SHOWN:
            meant = f" (did you mean {close[0]!r}?)" if close else ""
            warnings.warn(f"{where}: {table}: unknown key {key!r} ignored{meant}", where.warning, stacklevel=3)


def table(where: Where, doc: Mapping, name: str, known: Collection[str], *, typos: str = "error") -> dict:
    """`[name]` of `doc` (empty when absent), its keys checked against `known`."""
    t = doc.get(name, {})
    if not isinstance(t, dict):
        raise where.error(f"{where}: [{name}] must be a table")
    check_keys(where, f"[{name}]", t, known, typos=typos)
    return t


def array(where: Where, doc: Mapping, name: str, *, needed_by: str | None = None) -> list[dict]:
    """`[[name]]` of `doc`: a list of tables, at least one when `needed_by` (what needs it, "a campaign") is said."""
    items = doc.get(name, [])
    if not isinstance(items, list) or not all(isinstance(x, dict) for x in items):
        raise where.error(f"{where}: [[{name}]] must be an array of tables")
    if needed_by and not items:
        raise where.error(f"{where}: no [[{name}]]: {needed_by} needs at least one")
    return items


def text(where: Where, key: str, v) -> str:
    """A non-empty string."""
    if not isinstance(v, str) or not v.strip():
        raise where.error(f"{where}: {key} {v!r}: a non-empty string is needed")
    return v


def whole(where: Where, key: str, v, low: int, high: int) -> int:
    """An integer from `low` to `high` (a TOML boolean is not one)."""
    if not isinstance(v, int) or isinstance(v, bool) or not low <= v <= high:
        raise where.error(f"{where}: {key} {v!r}: a whole number from {low} to {high:,}")
    return v


def number(where: Where, key: str, v, low: float, high: float) -> float:
    """A finite number above `low` and at most `high`, as a float."""
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or not low < v <= high:
        raise where.error(f"{where}: {key} {v!r}: a number above {low:g} and at most {high:g}")
    return float(v)
