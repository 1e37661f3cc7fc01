"""Plugin prints go to stderr: the main thread's own output (JSON on stdout) must stay parseable."""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager

_local = threading.local()
_router_lock = threading.Lock()
_router_users = 0


class _StdoutRouter:
    """sys.stdout while plugin code runs: a thread marked as running plugin code writes to stderr.

    A plain redirect_stdout is process-wide and is restored out of order by concurrent threads; this
    routes per thread, so the main thread's own output (JSON on stdout) is untouched.
    """

    def __init__(self, real):
        self._real = real

    def _target(self):
        return sys.stderr if getattr(_local, "plugin", 0) else self._real

    def write(self, text):
        return self._target().write(text)

    def __getattr__(self, name):
        return getattr(self._target(), name)


@contextmanager
def plugin_output():
    """Run plugin code (import, construction, compute) with its prints sent to stderr."""
    global _router_users
    with _router_lock:
        if _router_users == 0 and not isinstance(sys.stdout, _StdoutRouter):
            sys.stdout = _StdoutRouter(sys.stdout)
        _router_users += 1
    _local.plugin = getattr(_local, "plugin", 0) + 1
    try:
        yield
    finally:
        _local.plugin -= 1
        with _router_lock:
            _router_users -= 1
            if _router_users == 0 and isinstance(sys.stdout, _StdoutRouter):
                sys.stdout = sys.stdout._real
