"""onnxruntime sessions: the providers actually in use, external data, and the batch loop."""

from __future__ import annotations

import os
import time

import numpy as np
import onnx

from onnxaff import defaults
from onnxaff.errors import ConfigError, OnnxaffError, first_line
from onnxaff.foundations.dtypes import BFLOAT16
from onnxaff.graph.load import LoadedModel

DEVICES = ("auto", "cpu", "cuda")
CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"


def _log_severity() -> int:
    """Fatal only: every onnxruntime error reaches the user as our one-line message, and its own log line
    on stderr would only repeat it (errors too with ONNXAFF_DEBUG=1)."""
    return 3 if os.environ.get("ONNXAFF_DEBUG") else 4


def ort():
    try:
        import onnxruntime
    except ImportError:
        raise OnnxaffError(
            "onnxruntime is not installed: pip install 'onnxaff[cpu]' (or 'onnxaff[gpu]' on a CUDA machine)"
        ) from None
    onnxruntime.set_default_logger_severity(_log_severity())  # ORT's warnings (unused initializers, ...) are not ours
    return onnxruntime


# onnxruntime's graph optimisation levels by the names the config takes; "all" is onnxruntime's default.
GRAPH_OPTIMIZATIONS = {"all": "ORT_ENABLE_ALL", "extended": "ORT_ENABLE_EXTENDED", "basic": "ORT_ENABLE_BASIC",
                       "disable": "ORT_DISABLE_ALL"}


def _options(threads: int | None = None, graph_optimization: str = defaults.GRAPH_OPTIMIZATION):
    """Session options. Threads and optimisation level change float32 results at the rounding level only
    (reduction order, fused kernels): docs/reproducibility.md measures by how much per metric."""
    rt = ort()
    so = rt.SessionOptions()
    so.log_severity_level = _log_severity()
    if threads:
        so.intra_op_num_threads = threads
    so.graph_optimization_level = getattr(rt.GraphOptimizationLevel, GRAPH_OPTIMIZATIONS[graph_optimization])
    return so


_cuda_usable: bool | None = None


def cuda_usable() -> bool:
    """Whether a session can really run on CUDA: onnxruntime-gpu lists CUDA even where it cannot load."""
    global _cuda_usable
    if _cuda_usable is None:
        rt = ort()
        _cuda_usable = False
        if CUDA in rt.get_available_providers():
            probe = onnx.helper.make_model(onnx.helper.make_graph(
                [onnx.helper.make_node("Identity", ["x"], ["y"])], "probe",
                [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
                [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])]))
            rt.set_default_logger_severity(4)  # the failed CUDA load logs an error we expect
            try:
                sess = rt.InferenceSession(probe.SerializeToString(), _options(), providers=[CUDA, CPU])
                _cuda_usable = CUDA in sess.get_providers()
            except Exception:
                _cuda_usable = False
            finally:
                rt.set_default_logger_severity(_log_severity())
    return _cuda_usable


def providers_for(device: str) -> list[str]:
    if device not in DEVICES:
        raise OnnxaffError(f"unknown device {device!r}; choose one of {', '.join(DEVICES)}")
    if device == "cpu":
        return [CPU]
    if cuda_usable():
        return [CUDA, CPU]
    if device == "cuda":
        raise ConfigError("device", "{option} cuda: onnxruntime cannot use CUDA here (is onnxruntime-gpu installed, "
                                    "with its CUDA libraries?)")
    return [CPU]


# Loading from bytes, onnxruntime looks for external data here (the weights stay where they are).
_EXTERNAL_FOLDER_KEY = "session.model_external_initializers_file_folder_path"


class Runner:
    """A session on one (augmented) model, run batch by batch.

    On CUDA the batch loop goes through IO binding: each batch is copied to the device once and only
    the requested outputs (the sites' reduced [N, D] features) are bound to host memory, so activation
    maps never cross the bus. `io_binding=True` takes the same path on CPU (for tests).
    """

    def __init__(self, loaded: LoadedModel, model: onnx.ModelProto, device: str = defaults.DEVICE,
                 threads: int | None = None, io_binding: bool | None = None,
                 graph_optimization: str = defaults.GRAPH_OPTIMIZATION):
        providers = providers_for(device)
        rt = ort()
        options = _options(threads, graph_optimization)
        if CUDA not in providers:
            # onnxruntime's memory pattern (one block planned from the first run) nearly doubles the peak of an
            # augmented graph: ResNet-18, batch 64: 785 MiB with it, 409 without (the plain model: 442 with it),
            # at the same speed. Allocations then go through the arena, which is reused batch after batch.
            options.enable_mem_pattern = False
        if loaded.has_external_data:
            options.add_session_config_entry(_EXTERNAL_FOLDER_KEY, str(loaded.base_dir.resolve()))
        try:
            # The proto carries no weights of external-data models, so it serialises whatever their size.
            self.session = rt.InferenceSession(model.SerializeToString(), options, providers=providers)
        except Exception as exc:
            raise OnnxaffError(f"onnxruntime cannot load the model: {first_line(exc)}") from None
        self.providers = self.session.get_providers()
        if device == "cuda" and CUDA not in self.providers:
            raise ConfigError("device", "{option} cuda: the session fell back to CPU")
        self.io_binding = CUDA in self.providers if io_binding is None else io_binding
        self.seconds = 0.0  # spent in `run` so far: the runtime's share of a batch (the dry run's calibration)

    def _run_bound(self, names: list[str], feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        binding = self.session.io_binding()
        for name, value in feed.items():
            if isinstance(value, np.ndarray):
                binding.bind_cpu_input(name, value)
            else:
                binding.bind_ortvalue_input(name, value)
        for name in names:
            binding.bind_output(name, "cpu")
        self.session.run_with_iobinding(binding)
        return binding.copy_outputs_to_cpu()

    def run(self, names: list[str], feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        clock = time.perf_counter()
        try:
            fed = {k: _ort_value(v) for k, v in feed.items()}
            if self.io_binding:
                return self._run_bound(names, fed)
            return self.session.run(names, fed)
        except Exception as exc:
            shapes = ", ".join(f"{k}{list(v.shape)}:{v.dtype}" for k, v in feed.items())
            raise OnnxaffError(f"onnxruntime failed on a batch ({shapes}): {first_line(exc)}") from None
        finally:
            self.seconds += time.perf_counter() - clock


def _ort_value(value: np.ndarray):
    """onnxruntime's bindings take no ml_dtypes bfloat16 array: it goes in as its bits, typed bfloat16."""
    if BFLOAT16 is None or value.dtype != BFLOAT16:
        return value
    return ort().OrtValue.ortvalue_from_numpy_with_onnx_type(np.ascontiguousarray(value).view(np.uint16),
                                                             onnx.TensorProto.BFLOAT16)
