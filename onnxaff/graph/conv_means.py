"""A convolution's channel means taken without reading its output, so that onnxruntime still fuses the
activation into the convolution.

A site's X is the convolution's output. Read by a GlobalAveragePool besides the activation, it has two
consumers, and onnxruntime fuses nothing: on NCHWc kernels each such site becomes ReorderOutput → activation →
ReorderInput, three extra passes over a map, which doubled MobileNetV2's inference (benchmarks/RESULTS.md,
issue 28). Two exact ways around it, both reading only the convolution's input:

- a 1×1 convolution with stride 1 and no padding is affine in each position, so the mean of its output is
  W · mean(input) + b, a [rows, C_in] × [C_in, C_out] product;
- a convolution of at most `CLONE_MACS` multiply-adds per output value (depthwise 3×3 and 5×5, a stem on three
  channels) is computed a second time, unfused, and averaged. Its weights are a copy under another name, or
  onnxruntime's common-subexpression elimination would merge the two convolutions back into one.

Either way X's features equal the mean of the convolution's output up to float32 rounding of the same order as
the mean's own (sqrt(P)·eps, `rewrite.feature_rounding`). Anything else keeps the plain mean of the output.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# What onnxruntime's CPU provider fuses into a Conv (ConvActivationFusion): only then is there a fusion to keep.
FUSED_ACTIVATIONS = frozenset({"Relu", "Clip", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "HardSwish"})
CLONE_MACS = 32  # a second convolution costs this many multiply-adds per output value at most


def _attrs(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def conv_channel_means(builder, tensor: str, prefix: str) -> str | None:
    """[rows, C_out] channel means of `tensor`, a fusable convolution's output, from its input; None otherwise."""
    view = builder.view
    i = view.producer.get(tensor)
    if i is None or view.op(i) != "Conv" or view.elem_type(tensor) not in (TensorProto.FLOAT, TensorProto.UNDEFINED):
        return None
    users = view.consumers.get(tensor, [])
    if len(users) != 1 or tensor in view.graph_outputs or view.op(users[0]) not in FUSED_ACTIVATIONS:
        return None  # onnxruntime would not fuse it anyway: the mean of the output costs no more
    node = view.nodes[i]
    weight = _Weight.of(view, node.input[1]) if len(node.input) > 1 else None
    if weight is None or len(weight.shape) < 3 or view.elem_type(node.input[0]) != TensorProto.FLOAT:
        return None
    attrs = _attrs(node)
    kernel = weight.shape[2:]
    strides = list(attrs.get("strides", [1] * len(kernel)))
    pads = list(attrs.get("pads", [0] * 2 * len(kernel)))
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
    pointwise = all(k == 1 for k in kernel) and all(s == 1 for s in strides)
    if attrs.get("group", 1) == 1 and pointwise and not any(pads) and auto_pad in ("NOTSET", "VALID"):
        if builder.opset < 7:  # Gemm's C broadcasts from opset 7
            return None
        return _pointwise_mean(builder, node.input[0], weight, bias, prefix)
    if int(np.prod(weight.shape[1:])) <= CLONE_MACS:
        return _clone_mean(builder, node, weight, prefix)
    return None


class _Weight:
    """A convolution's weight as a tensor proto: an initializer (its data inline or left on disk: a copy refers to
    the same bytes) or a constant's value."""

    def __init__(self, proto: onnx.TensorProto):
        self.proto = proto
        self.shape = tuple(int(d) for d in proto.dims)

    @classmethod
    def of(cls, view, name: str) -> _Weight | None:
        proto = view.initializers.get(name)
        if proto is None:
            value = view.constant(name)
            proto = None if value is None else numpy_helper.from_array(np.asarray(value, np.float32))
        return cls(proto) if proto is not None and proto.data_type == TensorProto.FLOAT else None

    def add_as(self, builder, prefix: str, shape: tuple[int, ...] | None = None) -> str:
        """A copy under a fresh name (and `shape`, the same values in the same order)."""
        copy = onnx.TensorProto()
        copy.CopyFrom(self.proto)
        copy.name = builder.namer.fresh(f"{prefix}.weight")
        if shape is not None:
            del copy.dims[:]
            copy.dims.extend(shape)
        return _add(builder, copy)


def _add(builder, proto: onnx.TensorProto) -> str:
    graph = builder.model.graph
    graph.initializer.append(proto)
    if builder.model.ir_version < 4:  # before IR 4 every initializer is also a graph input
        graph.input.append(helper.make_tensor_value_info(proto.name, proto.data_type, list(proto.dims)))
    return proto.name


def _channel_mean(builder, x: str, prefix: str) -> str:
    key = ("conv_means.gap", x)
    if key not in builder.cache:
        builder.cache[key] = builder.node("Flatten", [builder.node("GlobalAveragePool", [x], prefix)], prefix, axis=1)
    return builder.cache[key]


def _pointwise_mean(builder, x: str, weight: _Weight, bias: str | None, prefix: str) -> str:
    """mean_p(W x_p + b) = W mean_p(x) + b, as one Gemm with W as it is ([C_out, C_in], transB): a MatMul + Add
    would be fused into a new node with a higher index, which onnxruntime's ordering visits first
    (`rewrite._schedule`), running the whole network before any site's reduction and keeping every map alive
    (MobileNetV2: 3.9 GB instead of 1 GB). Without a bias, C is zeros: it is optional only from opset 11."""
    matrix = weight.add_as(builder, prefix, weight.shape[:2])
    if bias is None:
        zeros = np.zeros(weight.shape[0], np.float32)
        bias = _add(builder, numpy_helper.from_array(zeros, builder.namer.fresh(f"{prefix}.bias")))
    return builder.node("Gemm", [_channel_mean(builder, x, prefix), matrix, bias], prefix, transB=1)


def _clone_mean(builder, node, weight: _Weight, prefix: str) -> str:
    """The mean of a second, unfused copy of a cheap convolution, whose weights carry another name."""
    inputs = [node.input[0], weight.add_as(builder, prefix), *node.input[2:]]
    clone = builder.namer.fresh(f"{prefix}.conv")
    builder.new_nodes.append(helper.make_node("Conv", inputs, [clone], name=builder.namer.fresh(f"{prefix}/Conv"),
                                              **_attrs(node)))
    return builder.node("Flatten", [builder.node("GlobalAveragePool", [clone], prefix)], prefix, axis=1)
