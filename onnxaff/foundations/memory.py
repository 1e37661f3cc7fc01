"""How much memory a run may take, and the one line that refuses a run that would take more.

A run that cannot fit is refused before it allocates: an allocation past physical memory is not an error
but the kernel's OOM killer, minutes later, or swapping. The figure is what the system says is available
(MemAvailable), bounded by the process's address-space limit (`ulimit -v`) less what it already maps.
"""

from __future__ import annotations

import os
import resource

from onnxaff.errors import OnnxaffError


def _proc_field(path: str, key: str) -> int | None:
    """A `Key:  N kB` line of a /proc file in bytes, None where the file does not say."""
    try:
        with open(path, encoding="ascii") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _meminfo(key: str) -> int | None:
    return _proc_field("/proc/meminfo", key)


def status_bytes(key: str) -> int:
    """A field of /proc/self/status in bytes (VmSize: the address space this process maps; VmRSS, RssFile), 0
    where /proc does not say."""
    return _proc_field("/proc/self/status", key) or 0


def available_bytes() -> int | None:
    """Memory a run may still allocate, or None where the system does not say."""
    free = _meminfo("MemAvailable")
    if free is None:
        try:
            free = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            free = None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        room = max(0, soft - status_bytes("VmSize"))
        free = room if free is None else min(free, room)
    return free


def size(n: float) -> str:
    """Bytes as a person reads them: 25.6 GB, 380 MB (decimal units, as `free -h` and vendors count)."""
    for unit, scale in (("EB", 1e18), ("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} bytes"


def check_fits(parts: list[tuple[int, str, str]]) -> None:
    """Refuse, in one line, a run whose parts (bytes, what takes them, what to lower) add up to more than is
    available; the line names the largest part and its remedy."""
    need = sum(b for b, _, _ in parts)
    free = available_bytes()
    if free is None or need <= free:
        return
    largest, what, lower = max(parts)
    raise OnnxaffError(f"this run would take about {size(need)} of memory and {size(free)} is available: {what} "
                       f"takes {size(largest)}; {lower}")
