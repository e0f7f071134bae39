"""How the command line ends on a signal: SIGINT, SIGTERM and SIGHUP raise Interrupted (the command exits 128 + N),
except while a bench measures, when they only ask the loop to stop at its next chunk so the partial result is kept.
"""

from __future__ import annotations

import os

from edge_runtime.errors import Interrupted


class Signals:
    """SIGINT, SIGTERM and SIGHUP end a command as Ctrl-C does (co-runners stopped, scheduling restored on the way
    out) and it exits 128 + the signal. While a bench measures (`stop` set), the signal only asks the loop to end at
    the next chunk, so the partial result is kept and written, marked interrupted."""

    stop = None

    pid = os.getpid()

    def handler(self, signum, frame) -> None:
        if os.getpid() != self.pid:
            # A child forked by a library (multiprocessing): not ours to interpret; die as the signal says.
            import signal

            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if self.stop is not None and self.stop.armed:
            self.stop.request(signum)
            return
        raise Interrupted(signum)

    def install(self) -> None:
        import signal

        self.pid = os.getpid()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            try:
                signal.signal(sig, self.handler)
            except (ValueError, OSError):  # not the main thread (main() called from a library): leave them
                return


SIGNALS = Signals()
