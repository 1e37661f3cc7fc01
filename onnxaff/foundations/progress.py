"""A dependency-free progress bar on stderr: count, rate and ETA; quiet when asked.

A resumed run starts the bar at what its checkpoint held (`resumed`): the rate counts only the examples this
process fed, so the ETA (what remains at that rate) is neither inflated nor shortened by the earlier run's work."""

from __future__ import annotations

import sys
import time


def _clock(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class Progress:
    def __init__(self, total: int | None, label: str = "analyze", unit: str = "samples",
                 enabled: bool = True, stream=None, resumed: int = 0):
        self.total, self.label, self.unit = total, label, unit
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.done = self.resumed = resumed  # done before this process: shown in the count, not in the rate
        self.start = time.perf_counter()
        self._last = 0.0
        self.closed = False

    def line(self) -> str:
        elapsed = time.perf_counter() - self.start
        rate = (self.done - self.resumed) / elapsed if elapsed > 0 else 0.0
        if self.total:
            frac = min(self.done / self.total, 1.0)
            bar = "#" * int(24 * frac) + "-" * (24 - int(24 * frac))
            left = self.total - self.done
            eta = _clock(left / rate) if rate > 0 or left <= 0 else "--:--"  # nothing fed yet: no estimate
            return (f"{self.label} [{bar}] {self.done}/{self.total} {self.unit} {100 * frac:5.1f}% "
                    f"{rate:8.1f} {self.unit}/s  elapsed {_clock(elapsed)}  ETA {eta}")
        return f"{self.label} {self.done} {self.unit} {rate:8.1f} {self.unit}/s elapsed {_clock(elapsed)}"

    def update(self, n: int) -> None:
        self.done += n
        if not self.enabled:
            return
        now = time.perf_counter()
        if self.tty and now - self._last >= 0.1:
            self.stream.write("\r" + self.line())
            self.stream.flush()
            self._last = now
        elif not self.tty and now - self._last >= 10.0:  # logs: a line every 10 s
            self.stream.write(self.line() + "\n")
            self._last = now

    def close(self) -> None:
        """The final line (once: closing again writes nothing)."""
        if self.closed:
            return
        self.closed = True
        if self.enabled:
            self.stream.write(("\r" if self.tty else "") + self.line() + "\n")
            self.stream.flush()
