"""The requests the agent answers itself, without a child process: hello (identity, and the token's proof), ping,
the model store's (model_status, upload_chunk, upload_end: state.py), the outbox's (results, fetch, ack) and cancel.
Each is `op_<name>(args, blob)`, returning the answer's result or raising RequestError; server.py dispatches to them
(the quick ones on the I/O loop's thread, upload_end, which hashes a file, on its command worker).

Never: wait on a job or a child (the link must keep answering), or trust a size, offset or checksum a host sends.
"""

from __future__ import annotations

import hashlib
import hmac
import zlib

from edge_runtime import __version__
from edge_runtime.agent.jobs import cancel
from edge_runtime.agent.models import check_sha
from edge_runtime.errors import RequestError
from edge_runtime.wire import messages as wm

MAX_CHUNK = 1 << 20


class Handlers:
    """The op_* methods of Agent (server.py), a mixin: Agent gives them `state`, `link`, `token`, `authed`,
    `identity`, `lock` and `active` (its queued and running jobs)."""

    def op_hello(self, args: dict, blob: bytes) -> dict:
        if self.token is not None:
            mac = args.get("mac")
            want = hmac.new(self.token, self.link.nonce.encode(), hashlib.sha256).hexdigest()
            if not isinstance(mac, str) or not hmac.compare_digest(mac.encode(), want.encode()):
                self.authed = False
                raise RequestError("wrong or missing token", "auth")
        self.authed = True
        return {
            "agent": __version__,
            "protocol": wm.PROTOCOL_VERSION,
            "max_payload": self.link.agreed_payload,
            "models_bytes": self.state.store_bytes(),
            "models_max_bytes": self.state.max_store,
            **self.identity,
        }

    def op_ping(self, args: dict, blob: bytes) -> dict:
        """The cheapest round trip (link quality, keep-alive, benchmarks)."""
        return {}

    def op_model_status(self, args: dict, blob: bytes) -> dict:
        return self.state.model_status(args.get("sha256"), args.get("files"))

    def op_upload_chunk(self, args: dict, blob: bytes) -> dict:
        offset, size, crc = args.get("offset"), args.get("size"), args.get("crc32")
        for name, v in (("offset", offset), ("size", size), ("crc32", crc)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise RequestError(f"{name} {v!r}: not a byte count")
        if len(blob) > MAX_CHUNK:
            raise RequestError(f"a chunk of {len(blob):,} bytes is over {MAX_CHUNK:,}", "too-large")
        if zlib.crc32(blob) != crc:
            raise RequestError(f"chunk at {offset:,}: its crc32 does not match: resend it", "bad-chunk")
        have = self.state.write_chunk(check_sha(args.get("sha256")), args.get("name"), offset, blob)
        return {"have": have}

    def op_upload_end(self, args: dict, blob: bytes) -> dict:
        return self.state.finish_file(check_sha(args.get("sha256")), args.get("name"), args.get("file_sha256"))

    def op_results(self, args: dict, blob: bytes) -> dict:
        with self.lock:
            running = [{"id": j.rid, "op": j.op, "running": j.proc is not None} for j in self.active.values()]
        cut = [rid for rid in self.state.interrupted() if rid not in self.active]
        return {"pending": self.state.pending(), "active": running, "cut_short": cut}

    def op_fetch(self, args: dict, blob: bytes) -> dict:
        rid = args.get("id")
        if not isinstance(rid, str) or not wm.REQUEST_ID.fullmatch(rid):
            raise RequestError(f"id {str(rid)[:80]!r}: not a request id")
        stored = self.state.answer(rid)
        if stored is None:
            state = "running" if rid in self.active else "unknown"
            return {"id": rid, "state": state}
        return {"id": rid, "state": "done", "answer": stored}

    def op_ack(self, args: dict, blob: bytes) -> dict:
        ids = args.get("ids")
        if not isinstance(ids, list) or not all(isinstance(i, str) and wm.REQUEST_ID.fullmatch(i) for i in ids):
            raise RequestError("ids: a list of request ids")
        return {"acknowledged": [i for i in ids if self.state.ack(i)]}

    def op_cancel(self, args: dict, blob: bytes) -> dict:
        rid = args.get("id")
        with self.lock:
            job = self.active.get(rid) if isinstance(rid, str) else None
            if job is None:
                return {"id": rid, "cancelled": False, "why": "not queued or running"}
            job.cancelled = True
            cancel(job)  # the bench ends at its next chunk and keeps what it measured
        return {"id": rid, "cancelled": True}
