"""Byte streams to a board, opened by URL: pyserial's `serial_for_url` for serial ports and its URL handlers
(`serial:///dev/ttyUSB0?baud=921600`, a device path, `rfc2217://`, `socket://`, `loop://`), plain sockets for the
agent's `tcp://HOST:PORT`. A stream reads with a timeout (b"" when nothing came) and raises StreamLost when the other
end is gone (EOF, a serial port unplugged); `Connection` (connection.py) runs the wire protocol over one.

An error names the target's URL once, as its first word: each layer that adds its part uses `named`, which does not
name it again (issue 22: "tcp://...: tcp://...: tcp://...: nothing heard for 10.0 s").
"""

from __future__ import annotations

import select
import socket

from edge_runtime.errors import UserError
from edge_runtime.wire.endpoint import Endpoint, parse_endpoint

__all__ = ["Stream", "StreamLost", "bare", "named", "open_stream", "parse_endpoint"]


def bare(url: str, text: str) -> str:
    """`text` without the `url: ` it may start with."""
    prefix = f"{url}: "
    return text[len(prefix) :] if text.startswith(prefix) else text


def named(url: str, text: str) -> str:
    """`text` said of `url`, which it names once."""
    return f"{url}: {bare(url, text)}"


class StreamLost(ConnectionError):
    """The stream ended: the agent closed it, or the port went away."""


class Stream:
    def read(self, timeout: float) -> bytes:
        raise NotImplementedError

    def write(self, data: bytes) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class TcpStream(Stream):
    def __init__(self, ep: Endpoint, timeout: float, name: str):
        self.name = name
        try:
            self.sock = socket.create_connection((ep.host, ep.port), timeout=timeout)
        except OSError as err:
            raise StreamLost(f"{self.name}: {err.strerror or err}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(30.0)

    def read(self, timeout: float) -> bytes:
        r, _, _ = select.select([self.sock], [], [], timeout)
        if not r:
            return b""
        try:
            data = self.sock.recv(1 << 16)
        except OSError as err:
            raise StreamLost(f"{self.name}: {err.strerror or err}") from None
        if not data:
            raise StreamLost(f"{self.name}: the agent closed the connection")
        return data

    def write(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as err:
            raise StreamLost(f"{self.name}: {err.strerror or err}") from None

    def close(self) -> None:
        self.sock.close()


class SerialStream(Stream):
    def __init__(self, ep: Endpoint, name: str, exclusive: bool = False):
        try:
            import serial
        except ImportError:
            raise UserError("serial targets need pyserial", hint="pip install 'edge-runtime[host]'") from None
        self._errors = (serial.SerialException, OSError)
        self.name = name
        try:
            extra = {"exclusive": True} if exclusive else {}  # a lock on the port: a second user is told at once
            try:
                self.port = serial.serial_for_url(ep.url, baudrate=ep.baud, timeout=0, write_timeout=30, **extra)
            except NotImplementedError:  # pyserial's RFC 2217 client takes no write timeout (refused before it opens)
                self.port = serial.serial_for_url(ep.url, baudrate=ep.baud, timeout=0, **extra)
        except (serial.SerialException, ValueError, OSError) as err:
            words = " ".join(str(err).split())[:200]
            if "exclusively lock" in words:
                words = f"in use by another process (its lock is held: {words})"
            raise StreamLost(f"{self.name}: {words}") from None

    def read(self, timeout: float) -> bytes:
        try:
            if self.port.timeout != timeout:  # pyserial reconfigures the port on each set: over rfc2217 that is a
                self.port.timeout = timeout  # round of option messages to ser2net, ~150 ms a read (issue 28)
            data = self.port.read(max(1, self.port.in_waiting))
            more = self.port.in_waiting
            return data + self.port.read(more) if more else data
        except self._errors as err:
            raise StreamLost(f"{self.name}: {' '.join(str(err).split())[:200]}") from None

    def write(self, data: bytes) -> None:
        try:
            self.port.write(data)
        except self._errors as err:
            raise StreamLost(f"{self.name}: {' '.join(str(err).split())[:200]}") from None

    def close(self) -> None:
        try:
            self.port.close()
        except self._errors:
            pass


def open_stream(url: str, timeout: float = 5.0, exclusive: bool = False) -> Stream:
    """The stream a target URL names (`exclusive`: a serial port locked for this process alone). Raises UserError for a
    URL that names nothing, StreamLost when it cannot open."""
    ep = parse_endpoint(url, "target", listen=False)
    if ep.kind == "tcp":
        return TcpStream(ep, timeout, url)
    return SerialStream(ep, url, exclusive)
