"""Board addresses and the agent's secret, parsed: sans-I/O like the rest of wire/ (no port, no socket in here), and
shared by the agent (which listens on an `Endpoint`) and the host (which connects to one).

- `parse_endpoint`: `tcp://HOST:PORT`, `serial:///dev/ttyS0?baud=921600`, a device path, or a pyserial URL;
  `SCHEMES` is every scheme it takes ("" is a device path), the list the host registers its board target under.
- `line_rate`: what a serial line carries per second (None where a baud rate means nothing).
- `read_token`: the shared secret, from a file only its owner can read (the one file read here).
"""

from __future__ import annotations

import ipaddress
import os
import urllib.parse
from dataclasses import dataclass

from edge_runtime.errors import UserError

DEFAULT_BAUD = 115200
# pyserial's URL handlers that name a line (its own options ride in the URL; ours is `baud`)
PYSERIAL_SCHEMES = ("socket", "rfc2217", "loop", "spy", "alt", "hwgrep", "cp2110")
SCHEMES = ("tcp", "serial", *PYSERIAL_SCHEMES, "")  # what `parse_endpoint` accepts; "" is a device path


@dataclass(frozen=True)
class Endpoint:
    kind: str  # "tcp" | "serial"
    host: str = ""
    port: int = 0
    url: str = ""  # for pyserial
    baud: int = DEFAULT_BAUD

    @property
    def loopback(self) -> bool:
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return self.host == "localhost"


def parse_endpoint(text: str, what: str = "ENDPOINT", listen: bool = True) -> Endpoint:
    """`tcp://HOST:PORT`, `serial:///dev/ttyX?baud=N`, a device path, or any other pyserial URL (socket://, loop://,
    rfc2217://, spy://...). To listen, port 0 means any free port (the agent logs which)."""
    u = urllib.parse.urlsplit(text)
    query = urllib.parse.parse_qs(u.query, keep_blank_values=True)  # pyserial's flags are bare: ?ign_set_control
    baud = DEFAULT_BAUD
    if "baud" in query:
        try:
            baud = int(query["baud"][-1])
        except ValueError:
            baud = -1
        if not 50 <= baud <= 20_000_000:
            raise UserError(f"{what} {text!r}: baud {query['baud'][-1]!r} is not a baud rate (50 to 20000000)")
    if u.scheme == "tcp":
        try:
            port = u.port
        except ValueError:
            port = None
        if not u.hostname or port is None or not (0 if listen else 1) <= port < 65536:
            raise UserError(f"{what} {text!r}: expected tcp://HOST:PORT (e.g. tcp://127.0.0.1:7000)")
        return Endpoint("tcp", host=u.hostname, port=port)
    if u.scheme == "serial":
        if not u.path or u.netloc:
            raise UserError(f"{what} {text!r}: expected serial:///dev/DEVICE?baud=N (three slashes)")
        return Endpoint("serial", url=u.path, baud=baud)
    if u.scheme == "" and text.startswith("/"):
        return Endpoint("serial", url=text, baud=baud)
    if u.scheme in PYSERIAL_SCHEMES:
        # pyserial reads its own options from the URL; a `baud` of ours is taken out and given as the baud rate
        rest = urllib.parse.urlencode([(k, v) for k, vs in query.items() if k != "baud" for v in vs])
        return Endpoint("serial", url=urllib.parse.urlunsplit(u._replace(query=rest)), baud=baud)
    raise UserError(
        f"{what} {text!r}: unknown scheme {u.scheme + '://' if u.scheme else '(none)'}",
        hint="tcp://HOST:PORT, serial:///dev/ttyS0?baud=921600, or a pyserial URL (socket://, rfc2217://, loop://)",
    )


def line_rate(ep: Endpoint) -> float | None:
    """Bytes per second a serial endpoint carries (baud / 10: start, 8 data, stop bits), or None where the baud rate
    means nothing: TCP, pyserial's network and loop URLs, and pseudo-terminals (Unix98 pty slaves, major 136-143),
    which move bytes at memory speed whatever baud they are told."""
    if ep.kind != "serial" or "://" in ep.url:
        return None
    try:
        if 136 <= os.major(os.stat(ep.url).st_rdev) <= 143:
            return None
    except OSError:
        pass
    return ep.baud / 10


def read_token(path: str) -> bytes:
    """The shared secret: a file only its owner can read, at least 16 characters."""
    from edge_runtime.files.inputs import open_input

    with open_input(path, "--token-file", max_bytes=4096) as f:
        st = os.fstat(f.fileno())
        token = f.read().strip()
    if st.st_mode & 0o077:
        raise UserError(
            f"--token-file {path!r}: readable by others (mode {st.st_mode & 0o777:o})", hint=f"chmod 600 {path}"
        )
    if len(token) < 16:
        raise UserError(f"--token-file {path!r}: {len(token)} characters: too short to be a secret (16 at least)")
    return token
