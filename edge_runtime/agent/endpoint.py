"""Where the agent listens: a serial port (any pyserial URL; `serial:///dev/ttyS0?baud=921600` names a device) or
TCP (`tcp://127.0.0.1:7000`). The loops here only move bytes between the stream and the `Agent`; the address itself
is parsed by edge_runtime/wire/endpoint.py (`parse_endpoint`), which the host shares.

- TCP: one host in session at a time. A second connection while the first is alive is sent a REFUSE frame naming
  the reason, and closed. A session whose host fell silent (`Link.dead_after`) no longer blocks a new one.
- Serial: the port is opened again if it goes away (a USB gadget unplugged), every second until it is back.
"""

from __future__ import annotations

import contextlib
import select
import socket
import time

from edge_runtime.errors import UserError
from edge_runtime.wire.endpoint import Endpoint
from edge_runtime.wire.link import refuse_bytes

TICK_S = 0.02


def open_serial(ep: Endpoint, timeout: float = TICK_S):
    try:
        import serial
    except ImportError:
        raise UserError(
            "a serial endpoint needs pyserial", hint="pip install 'edge-runtime[agent]' (or use tcp://)"
        ) from None
    try:
        try:
            return serial.serial_for_url(ep.url, baudrate=ep.baud, timeout=timeout, write_timeout=10)
        except NotImplementedError:  # pyserial's RFC 2217 client takes no write timeout (refused before it opens)
            return serial.serial_for_url(ep.url, baudrate=ep.baud, timeout=timeout)
    except (serial.SerialException, ValueError, OSError) as err:
        raise UserError(f"serial port {ep.url!r}: {' '.join(str(err).split())[:200]}") from None


def serve_serial(agent, ep: Endpoint, stop, log) -> None:
    import serial

    port = open_serial(ep)
    log(f"listening on {ep.url} at {ep.baud} baud")
    try:
        while not stop():
            try:
                data = port.read(max(1, port.in_waiting or 1))
                if data:
                    more = port.in_waiting
                    if more:
                        data += port.read(more)
                now = time.monotonic()
                if data:
                    agent.feed(data, now, port.write)
                agent.poll(now)
                out = agent.outgoing()
                if out:
                    port.write(out)
            except (serial.SerialException, OSError) as err:
                log(f"serial port {ep.url}: {' '.join(str(err).split())[:200]}; opening it again")
                agent.drop_session("serial port lost")
                port.close()
                port = _reopen(ep, stop)
                if port is None:
                    return
    finally:
        if port is not None:
            port.close()


def _reopen(ep: Endpoint, stop):
    while not stop():
        time.sleep(1.0)
        try:
            return open_serial(ep)
        except UserError:
            continue
    return None


def listen_tcp(ep: Endpoint) -> socket.socket:
    family = socket.AF_INET6 if ":" in ep.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((ep.host, ep.port))
    except OSError as err:
        sock.close()
        raise UserError(f"tcp://{ep.host}:{ep.port}: cannot listen ({err.strerror})") from None
    sock.listen(4)
    return sock


def serve_tcp(agent, ep: Endpoint, stop, log, sock: socket.socket | None = None) -> None:
    sock = sock or listen_tcp(ep)
    host = f"[{ep.host}]" if ":" in ep.host else ep.host
    log(f"listening on tcp://{host}:{sock.getsockname()[1]}")
    conn: socket.socket | None = None
    peer = ""
    try:
        while not stop():
            watched = [sock] + ([conn] if conn is not None else [])
            readable, _, _ = select.select(watched, [], [], TICK_S)
            now = time.monotonic()
            if sock in readable:
                new, addr = sock.accept()
                if conn is not None:  # has the host in session closed in the same instant the new one came?
                    data, eof = _drain(conn)
                    if data:
                        agent.feed(data, now)
                    if eof:
                        agent.drop_session(f"{peer} closed the connection")
                        conn.close()
                        conn = None
                if conn is not None and agent.session_alive():
                    log(f"refused {addr[0]}:{addr[1]}: {peer} is in session")
                    _refuse(new, f"busy: another host ({peer}) is in session with this agent")
                else:
                    if conn is not None:
                        conn.close()
                    conn, peer = new, f"{addr[0]}:{addr[1]}"
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    conn.settimeout(10.0)
            if conn is not None and conn in readable:
                try:
                    data = conn.recv(1 << 16)
                except OSError:
                    data = b""
                if data:
                    try:
                        agent.feed(data, now, conn.sendall)
                    except OSError:
                        data = b""  # the host is gone mid-write: as an end of stream
                if not data:
                    agent.drop_session(f"{peer} closed the connection")
                    conn.close()
                    conn = None
            agent.poll(now)
            out = agent.outgoing()
            if out and conn is not None:
                try:
                    conn.sendall(out)
                except OSError as err:
                    agent.drop_session(f"{peer}: {err.strerror or err}")
                    conn.close()
                    conn = None
    finally:
        if conn is not None:
            conn.close()
        sock.close()


def _drain(conn: socket.socket) -> tuple[bytes, bool]:
    """What the connection holds now, without waiting, and whether its end (EOF or an error) follows."""
    got = bytearray()
    try:
        conn.setblocking(False)
        while len(got) < (1 << 20):
            data = conn.recv(1 << 16)
            if not data:
                return bytes(got), True
            got += data
        return bytes(got), False
    except BlockingIOError:
        return bytes(got), False
    except OSError:
        return bytes(got), True
    finally:
        with contextlib.suppress(OSError):
            conn.settimeout(10.0)


def _refuse(conn: socket.socket, reason: str) -> None:
    try:
        conn.settimeout(1.0)
        conn.sendall(refuse_bytes(reason))
        conn.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    finally:
        conn.close()
