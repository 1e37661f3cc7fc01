"""What machine and libraries produced a set of numbers: written beside the frozen numbers and the tolerance
study, printed beside a failure, so a difference can be told from a difference of machines."""

from __future__ import annotations

import os
import platform
from pathlib import Path

# The CPU features that choose onnxruntime's and OpenBLAS's float32 kernels (and so their rounding).
KERNEL_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                "avx512_bf16", "avx_vnni", "amx_tile", "amx_bf16", "asimd", "sve")


def _cpu() -> dict:
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "Model", "cpu model") and model in ("", platform.machine(), platform.processor()):
                model = value.strip()
            elif key in ("flags", "Features") and not flags:
                flags = set(value.split())
    except OSError:
        pass
    return {"model": model, "kernel_flags": [f for f in KERNEL_FLAGS if f in flags]}


def environment() -> dict:
    """Library versions, CPU model and kernel-relevant flags, cores (and the OpenBLAS overrides, if any)."""
    import numpy
    import onnx
    import onnxruntime
    import scipy

    return {
        "onnxruntime": onnxruntime.__version__, "onnx": onnx.__version__, "numpy": numpy.__version__,
        "scipy": scipy.__version__, "python": platform.python_version(), "machine": platform.machine(),
        "cpu": _cpu(), "cores": os.cpu_count(),
        "openblas": {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if k in os.environ},
    }


def describe(env: dict) -> str:
    """One line of an environment record."""
    cpu = env.get("cpu", {})
    return (f"onnxruntime {env.get('onnxruntime')}, numpy {env.get('numpy')}, scipy {env.get('scipy')}, "
            f"{cpu.get('model')} [{' '.join(cpu.get('kernel_flags', []))}], {env.get('cores')} cores")
