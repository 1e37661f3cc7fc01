"""A run's stop request: set by SIGINT/SIGTERM or by a plugin's KeyboardInterrupt, read at every safe point.

One object shared by the batch loop, the scoring threads and a data source that waits (image decoders), so
"should I stop" has one answer everywhere. The handlers only set it: the state is saved at a batch boundary,
never mid-batch.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time

# A second signal within this many seconds of the first is the same request again (the state is still saved).
REPEAT_SECONDS = 1.0
_last_signal_at: list[float] = []  # when a run last took a signal as its stop request (any StopFlag)


def signalled_within(seconds: float = REPEAT_SECONDS) -> bool:
    """A run took a stop signal less than `seconds` ago: a copy of it arriving after the run restored the
    handlers (`timeout` and schedulers send SIGTERM twice at once) is that request again, not a new one."""
    return bool(_last_signal_at) and time.monotonic() - _last_signal_at[-1] < seconds


class StopFlag:
    """`signum` is the first signal that asked the run to stop (None while none has)."""

    def __init__(self):
        self.signum: int | None = None
        self._signalled_at: float | None = None  # the first real signal (a plugin's interrupt is not one)

    def set(self, signum: int) -> None:
        if self.signum is None:
            self.signum = signum

    def __bool__(self) -> bool:
        return self.signum is not None

    def __call__(self) -> bool:  # what a data source's `should_stop` takes
        return self.signum is not None

    @contextlib.contextmanager
    def catching(self):
        """SIGINT/SIGTERM set the flag while inside (on the main thread; elsewhere signals cannot be caught).

        `timeout`, schedulers and process groups send a signal twice at once, and SIGTERM never means "hurry"
        (SIGKILL follows if anything): only a later Ctrl-C stops at once, without saving.
        """
        if threading.current_thread() is not threading.main_thread():
            yield self
            return

        def handler(signum, frame):
            if self._signalled_at is None:
                self._signalled_at = time.monotonic()
                _last_signal_at[:] = [self._signalled_at]
                self.set(signum)
            elif signum == signal.SIGINT and time.monotonic() - self._signalled_at > REPEAT_SECONDS:
                raise KeyboardInterrupt

        before = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for sig, old in before.items():
                signal.signal(sig, signal.SIG_DFL if old is None else old)  # None: a handler set from C
