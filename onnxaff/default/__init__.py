"""The embedded default analysed by `onnxaff demo` (built by models/build_default.py)."""

from pathlib import Path

HERE = Path(__file__).parent
DEFAULT_MODEL = HERE / "rescnn.onnx"
DEFAULT_DATA = HERE / "rescnn_data.npz"
