"""bfloat16 as numpy knows it: ml_dtypes' type (what onnx ≥ 1.18 maps BFLOAT16 to), None where ml_dtypes is
missing. Read from ml_dtypes itself, not from onnx's mapping: older onnx releases map BFLOAT16 to float32, and
code keyed on that would take every float32 array for bfloat16."""

from __future__ import annotations

import numpy as np

try:
    import ml_dtypes

    BFLOAT16: np.dtype | None = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - onnx ≥ 1.18 requires it
    BFLOAT16 = None
