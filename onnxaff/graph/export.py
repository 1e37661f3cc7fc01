"""From a framework model to an ONNX file onnxaff can analyse, with a check that no activation was lost.

Each helper exports with the settings the shipped reference networks were built with (models/build.py),
then compares the site kinds onnxaff finds in the file with the activations the framework itself
declares (forward hooks on activation modules, the estimator's activation, the Keras layers'
activations): an exporter that fuses or drops an activation would otherwise go unnoticed and the
signature would silently miss a site. The frameworks are optional: a missing one is a one-line error.

    from onnxaff.graph.export import from_torch, from_sklearn, from_keras
    from_torch(module, torch.randn(1, 3, 224, 224), "net.onnx")
    from_sklearn(mlp_classifier, 784, "mlp.onnx")
    from_keras(keras_model, "cnn.onnx")
"""

from __future__ import annotations

import numbers
import os
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from onnxaff.errors import OnnxaffError, first_line

OPSET = 17  # the shipped networks' opset: every onnxruntime since 1.14 runs it

# One activation, named as a framework would say it and as onnxaff's discovery does: kinds in one group
# are the same function written two ways (GELU's tanh form, Clip(0, 6) for ReLU6, SiLU = Swish-1).
_SAME = [{"gelu", "gelu_tanh"}, {"relu6", "clip"}, {"silu", "swish"}, {"hard_sigmoid", "hardsigmoid"}]


def _canonical(kind: str) -> str:
    return next((min(group) for group in _SAME if kind in group), kind)


@dataclass
class Export:
    """The written file, what the framework declared, what onnxaff found, and what went missing."""

    path: Path
    declared: list[str]
    found: list[str]
    missing: list[str] = field(default_factory=list)  # declared but not in the file (a lost activation)
    extra: list[str] = field(default_factory=list)  # in the file but not declared (functional calls, ...)

    @property
    def ok(self) -> bool:
        return not self.missing

    def __repr__(self) -> str:
        """Kinds counted (`relu6 ×35`), not a list of 35 equal strings in a notebook."""
        def counted(kinds: list[str]) -> str:
            return ", ".join(f"{k} ×{n}" if n > 1 else k for k, n in Counter(kinds).items()) or "none"

        return (f"Export({str(self.path)!r}: found {len(self.found)} sites ({counted(self.found)}); declared "
                f"{len(self.declared)}; missing {counted(self.missing)}; extra {counted(self.extra)})")


def check_sites(path: str | os.PathLike, declared: list[str], strict: bool = True) -> Export:
    """Compare the declared activation kinds with the sites onnxaff discovers in the file (as multisets:
    a framework's call order and the graph's topological order may differ where branches join)."""
    from onnxaff.graph import discover_sites, load_model

    found = [s.kind for s in discover_sites(load_model(path).model)]
    want, got = Counter(map(_canonical, declared)), Counter(map(_canonical, found))
    result = Export(Path(path), list(declared), found, sorted((want - got).elements()),
                    sorted((got - want).elements()))
    if strict and result.missing:
        raise OnnxaffError(f"the export {path} lost activations the framework declares: {', '.join(result.missing)} "
                           f"(declared {len(declared)}, found {len(found)} sites)")
    return result


def _need(module: str, extra: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise OnnxaffError(f"this export needs {module}: pip install {extra}") from None


# --- PyTorch -----------------------------------------------------------------------------------------

def torch_activation_kinds() -> dict:
    """PyTorch's activation modules and their onnxaff kinds."""
    from torch import nn

    kinds = {nn.ReLU: "relu", nn.ReLU6: "relu6", nn.LeakyReLU: "leaky_relu", nn.PReLU: "prelu", nn.ELU: "elu",
             nn.SELU: "selu", nn.CELU: "celu", nn.GELU: "gelu", nn.SiLU: "silu", nn.Mish: "mish",
             nn.Sigmoid: "sigmoid", nn.Hardsigmoid: "hard_sigmoid", nn.Hardswish: "hardswish", nn.Tanh: "tanh",
             nn.Softplus: "softplus", nn.Softsign: "softsign", nn.Softmax: "softmax", nn.LogSoftmax: "log_softmax"}
    return kinds


def torch_site_kinds(module, example_inputs: tuple, kinds: dict | None = None) -> list[str]:
    """The activation kinds a module calls, in call order (forward hooks on its activation modules)."""
    import torch

    kinds = kinds or torch_activation_kinds()
    seen, hooks = [], []
    for m in module.modules():
        if type(m) in kinds:
            hooks.append(m.register_forward_hook(lambda mod, i, o: seen.append(kinds[type(mod)])))
    try:
        with torch.no_grad():
            module(*example_inputs)
    finally:
        for h in hooks:
            h.remove()
    return seen


def from_torch(module, example_input, path: str | os.PathLike, *, opset: int = OPSET, dynamic_batch: bool = True,
               input_names=("input",), output_names=("output",), dynamo: bool = False, strict: bool = True) -> Export:
    """Export a torch.nn.Module in eval mode, batch axis dynamic, then check its activations.

    `dynamo=False` (default) uses the TorchScript exporter, as the shipped networks do: it needs nothing
    beyond torch and writes GELU as Div/Erf/Add/Mul/Mul below opset 20, which onnxaff recognises.
    `dynamo=True` uses torch.export (needs onnxscript). `example_input` is a tensor or a tuple of them (a numpy
    array is read as its tensor); one the module cannot run on is a ConfigError naming it. The module (and each
    of its submodules) is left in the training mode it was given in.
    """
    torch = _need("torch", "torch")
    inputs = _torch_inputs(torch, example_input)
    modes = [(m, m.training) for m in module.modules()]
    module.eval()  # dropout off, batch-norm statistics frozen: the network a user evaluates
    try:
        declared = _declared(module, inputs)
        _export_torch(torch, module, inputs, path, opset, dynamic_batch, input_names, output_names, dynamo)
    finally:  # the caller's module as it was given (a notebook trains it on)
        module.train(modes[0][1])
        for m, training in modes:  # and each submodule's own mode: a frozen batch norm stays frozen
            m.training = training
    return check_sites(path, declared, strict)


def _torch_inputs(torch, example_input) -> tuple:
    """`example_input` as the tuple of arguments the module is called with (a numpy array as its tensor)."""
    inputs = example_input if isinstance(example_input, tuple) else (example_input,)
    import numpy as np

    return tuple(torch.from_numpy(x) if isinstance(x, np.ndarray) else x for x in inputs)


def _declared(module, inputs: tuple) -> list[str]:
    """The module's activation kinds, from one run on the example input; an input it cannot take in one line."""
    from onnxaff.errors import ConfigError

    try:
        return torch_site_kinds(module, inputs)
    except Exception as exc:  # a wrong shape or type: torch's message, without its traceback
        shapes = ", ".join(_described(x) for x in inputs)
        raise ConfigError("example_input", f"the module does not run on {{option}} ({shapes}): "
                                           f"{type(exc).__name__}: {first_line(exc)}") from None


def _described(value) -> str:
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is None or dtype is None:
        return f"a {type(value).__name__}"
    return f"{type(value).__name__} of shape {list(shape)}, {str(dtype).removeprefix('torch.')}"


def _export_torch(torch, module, inputs: tuple, path, opset: int, dynamic_batch: bool, input_names, output_names,
                  dynamo: bool) -> None:
    """torch.onnx.export with the helper's settings; its failure in one line."""
    names_in, names_out = list(input_names), list(output_names)
    if len(names_in) != len(inputs):
        names_in = [f"input{k}" for k in range(len(inputs))]
    axes = {n: {0: "batch"} for n in [*names_in, *names_out]} if dynamic_batch else None
    try:
        with warnings.catch_warnings():  # the TorchScript exporter is chosen knowingly (see from_torch)
            warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.onnx")
            warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*TorchScript-based ONNX export")
            torch.onnx.export(module, inputs, str(path), opset_version=opset, dynamo=dynamo, input_names=names_in,
                              output_names=names_out, dynamic_axes=axes)
    except Exception as exc:  # the exporter's messages are pages long: the first line says what it could not do
        raise OnnxaffError(f"torch.onnx.export failed: {type(exc).__name__}: {first_line(exc)}") from None


# --- scikit-learn ------------------------------------------------------------------------------------

_SK_KINDS = {"relu": "relu", "tanh": "tanh", "logistic": "sigmoid", "identity": None}


def sklearn_site_kinds(model) -> list[str]:
    """What an MLP declares: its hidden activation per layer, then its output activation."""
    act = getattr(model, "activation", None)
    if act is None or not hasattr(model, "hidden_layer_sizes"):
        return []  # no declared activations (a linear model, a tree): nothing to check
    hidden = model.hidden_layer_sizes
    layers = len(hidden) if hasattr(hidden, "__len__") else 1
    kinds = [_SK_KINDS[act]] * layers if _SK_KINDS.get(act) else []
    out = {"softmax": "softmax", "logistic": "sigmoid"}.get(getattr(model, "out_activation_", ""))
    return kinds + ([out] if out else [])


def _check_n_features(model, n_features) -> None:
    """A feature count skl2onnx would build a model on: positive, an int64 ONNX dim onnxruntime can allocate,
    and the fitted estimator's own (a wrong one exports a model that fails on every batch)."""
    if isinstance(n_features, bool) or not isinstance(n_features, numbers.Integral) or \
            not 1 <= n_features <= 2**31 - 1:
        raise OnnxaffError(f"from_sklearn: n_features must be a whole number from 1 to {2**31 - 1}, "
                           f"got {n_features!r}")
    fitted = getattr(model, "n_features_in_", None)
    if isinstance(fitted, numbers.Integral) and fitted != n_features:
        raise OnnxaffError(f"from_sklearn: n_features is {n_features} but the estimator was fitted on {fitted} "
                           "features (n_features_in_)")


def from_sklearn(model, n_features: int, path: str | os.PathLike, *, opset: int = OPSET, input_name: str = "input",
                 strict: bool = True) -> Export:
    """Convert a fitted estimator with skl2onnx (float32 input [batch, n_features], probabilities as a plain
    tensor rather than a ZipMap of dicts), then check its activations."""
    _check_n_features(model, n_features)
    skl2onnx = _need("skl2onnx", "skl2onnx")
    from skl2onnx.common.data_types import FloatTensorType

    declared = sklearn_site_kinds(model)
    options = {id(model): {"zipmap": False}} if hasattr(model, "predict_proba") else None
    try:
        proto = skl2onnx.convert_sklearn(model, initial_types=[(input_name, FloatTensorType([None, n_features]))],
                                         options=options, target_opset=opset)
    except Exception as exc:
        raise OnnxaffError(f"skl2onnx could not convert {type(model).__name__}: {first_line(exc)}") from None
    from onnxaff.foundations.files import write_bytes_atomic

    write_bytes_atomic(path, proto.SerializeToString())
    return check_sites(path, declared, strict)


# --- Keras -------------------------------------------------------------------------------------------

_KERAS_KINDS = {"relu": "relu", "relu6": "relu6", "gelu": "gelu", "silu": "silu", "swish": "silu", "sigmoid": "sigmoid",
                "hard_sigmoid": "hard_sigmoid", "hard_silu": "hardswish", "hard_swish": "hardswish", "tanh": "tanh",
                "softmax": "softmax", "log_softmax": "log_softmax", "softplus": "softplus", "softsign": "softsign",
                "elu": "elu", "selu": "selu", "leaky_relu": "leaky_relu", "mish": "mish"}


def keras_site_kinds(model) -> list[str]:
    """The activations a Keras model's layers declare (their `activation`, and Activation/ReLU/Softmax layers)."""
    kinds = []
    for layer in model.layers:
        name = None
        act = getattr(layer, "activation", None)
        if act is not None:
            name = getattr(act, "__name__", None)
        else:
            name = {"ReLU": "relu", "Softmax": "softmax", "LeakyReLU": "leaky_relu", "ELU": "elu",
                    "PReLU": "prelu"}.get(type(layer).__name__)
        if name and name != "linear":
            kinds.append(_KERAS_KINDS.get(name, name))
    return kinds


def from_keras(model, path: str | os.PathLike, *, opset: int = OPSET, input_name: str = "input",
               strict: bool = True) -> Export:
    """Convert a Keras model with tf2onnx, traced as a tf.function in inference mode (Keras 3's own path in
    tf2onnx.from_keras fails), batch axis dynamic, then check its activations."""
    tf = _need("tensorflow", "tensorflow-cpu")
    tf2onnx = _need("tf2onnx", "tf2onnx")
    shape = tuple(model.inputs[0].shape)
    dtype = model.inputs[0].dtype
    spec = (tf.TensorSpec((None, *shape[1:]), dtype, name=input_name),)
    try:
        proto, _ = tf2onnx.convert.from_function(tf.function(lambda x: model(x, training=False)),
                                                 input_signature=spec, opset=opset)
    except Exception as exc:
        raise OnnxaffError(f"tf2onnx could not convert the model: {type(exc).__name__}: {first_line(exc)}") from None
    from onnxaff.foundations.files import write_bytes_atomic

    write_bytes_atomic(path, proto.SerializeToString())
    return check_sites(path, keras_site_kinds(model), strict)
