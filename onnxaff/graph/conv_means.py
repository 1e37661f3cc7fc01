"""A convolution's channel means taken without reading its output, so that onnxruntime still fuses the
activation into the convolution.

A site's X is the convolution's output. Read by a GlobalAveragePool besides the activation, it has two
consumers, and onnxruntime fuses nothing: on NCHWc kernels each such site becomes ReorderOutput → activation →
ReorderInput, three extra passes over a map, which doubled MobileNetV2's inference (benchmarks/RESULTS.md,
issue 28). Exact ways around it, all reading only the convolution's input, tried in this order (`auto_pad`
worked out into pads where the shapes are static):

- a 1×1 convolution with stride 1 and no padding is affine in each position, so the mean of its output is
  W · mean(input) + b, a [rows, C_in] × [C_in, C_out] product;
- a convolution of the graph's input (an image: nothing to reorder) at any stride: the sums of the input over
  the positions each kernel tap reads, by a 0/1 MatMul per spatial axis, then W (`_input_window_mean`);
- any other stride-1 convolution: the same sums by one AveragePool per spatial axis (`_window_mean`);
- a convolution of at most `CLONE_MACS` multiply-adds per output value (a strided depthwise 3×3) is computed a
  second time, unfused, and averaged. Its weights are a copy under another name, or onnxruntime's
  common-subexpression elimination would merge the two convolutions back into one;
- Conv + Add + activation (a residual block's end, which onnxruntime fuses into one convolution with a sum
  input, or a per-channel constant it folds into the bias): the convolution's mean by one of the above plus the
  other term's (`_sum_means`);
- Conv + BatchNormalization (inference) + activation, which onnxruntime folds and fuses: the same
  normalisation of the convolution's means (`_term_means`).

Every way, X's features equal the mean of the convolution's output up to float32 rounding of the same order as
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
    """[rows, C_out] channel means of `tensor`, a fusable convolution's output (or the sum of one and another
    tensor), from its input; None otherwise."""
    view = builder.view
    users = view.consumers.get(tensor, [])
    if len(users) != 1 or tensor in view.graph_outputs or view.op(users[0]) not in FUSED_ACTIVATIONS:
        return None  # onnxruntime would not fuse it anyway: the mean of the output costs no more
    i = view.producer.get(tensor)
    if i is not None and view.op(i) == "Add":
        return _sum_means(builder, i, prefix)
    return _term_means(builder, tensor, prefix)


def _term_means(builder, tensor: str, prefix: str) -> str | None:
    """A convolution's output, or an inference BatchNormalization of one (an export that did not fold it, as
    PaddlePaddle's: onnxruntime folds it into the convolution, then fuses the activation). Normalisation is affine
    per channel, so the mean of its output is the same BatchNormalization applied to the convolution's [rows, C]
    means."""
    view = builder.view
    i = view.producer.get(tensor)
    if i is None or view.op(i) != "BatchNormalization":
        return _conv_means(builder, tensor, prefix)
    node = view.nodes[i]
    attrs = _attrs(node)
    conv = node.input[0]
    if (len(node.input) != 5 or attrs.get("training_mode", 0) or any(o for o in node.output[1:])
            or len(view.consumers.get(conv, [])) != 1 or conv in view.graph_outputs
            or builder.opset < 7 or attrs.get("spatial", 1) != 1):  # spatial=0 (opsets 7, 8): per position
        return None
    means = _conv_means(builder, conv, prefix)
    if means is None:
        return None
    kept = {k: v for k, v in attrs.items() if k in ("epsilon", "momentum")}
    return builder.node("BatchNormalization", [means, *node.input[1:]], prefix, **kept)


def _sum_means(builder, i: int, prefix: str) -> str | None:
    """Conv + Add + activation: onnxruntime fuses the Add into the convolution, as its sum input (a residual
    block's end) or, for a constant per channel (a bias the exporter kept apart, as mnist-8's), into its bias. The
    mean is the convolution's, taken from its input, plus the other term's: its channel mean, or the constant."""
    view = builder.view
    node = view.nodes[i]
    shape = view.shape(node.output[0])
    if len(node.input) != 2 or shape is None or len(shape) < 3 or not all(isinstance(d, int) for d in shape[1:]):
        return None  # shapes unknown: the mean of a term may not be its channel mean
    for k, term in enumerate(node.input):
        if (view.shape(term) != shape or view.elem_type(term) != TensorProto.FLOAT
                or len(view.consumers.get(term, [])) != 1):
            continue
        other = _other_mean(builder, node.input[1 - k], shape, prefix)
        conv = None if other is None else _term_means(builder, term, prefix)
        if conv is not None:
            return builder.node("Add", [conv, other], prefix)
    return None


def _other_mean(builder, other: str, shape: list, prefix: str) -> str | None:
    """The channel means of the other term of a sum of `shape`: a tensor of that shape, or a constant that varies
    at most along the channels (as [1, C]); None for anything else broadcast."""
    view = builder.view
    if view.shape(other) == shape:
        return _channel_mean(builder, other, prefix)
    value = view.constant(other)
    if value is None or value.dtype != np.float32 or value.ndim > len(shape):
        return None
    full = (1,) * (len(shape) - value.ndim) + value.shape
    if full[0] != 1 or full[1] not in (1, shape[1]) or any(d != 1 for d in full[2:]):
        return None
    per_channel = np.broadcast_to(value.reshape(full[:2]), (1, shape[1])).astype(np.float32)
    return _add(builder, numpy_helper.from_array(per_channel, builder.namer.fresh(f"{prefix}.bias")))


def _conv_means(builder, tensor: str, prefix: str) -> str | None:
    view = builder.view
    i = view.producer.get(tensor)
    if i is None or view.op(i) != "Conv" or view.elem_type(tensor) not in (TensorProto.FLOAT, TensorProto.UNDEFINED):
        return None
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
        return _pointwise_mean(builder, node.input[0], node.input[1], weight, bias, prefix)
    out_spatial = (view.shape(tensor) or [])[2:]
    in_spatial = (view.shape(node.input[0]) or [])[2:]
    dilations = list(attrs.get("dilations", [1] * len(kernel)))
    if auto_pad != "NOTSET" and _static(in_spatial, len(kernel)) and _static(out_spatial, len(kernel)):
        pads = _explicit_pads(auto_pad, kernel, in_spatial, out_spatial, strides, dilations)
        auto_pad = "NOTSET" if pads is not None else auto_pad
    if auto_pad == "NOTSET" and _static(out_spatial, len(kernel)):
        if node.input[0] in view.graph_inputs and len(kernel) <= 2 and _static(in_spatial, len(kernel)):
            return _input_window_mean(builder, node, weight, in_spatial, out_spatial, strides, pads, dilations,
                                      prefix)
        # onnxruntime refuses an AveragePool whose pads reach its window (which is the output's size)
        if all(s == 1 for s in strides) and builder.opset >= 7 and max(pads) < min(out_spatial):
            return _window_mean(builder, node, weight, out_spatial, pads, dilations, prefix)
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


def _pointwise_mean(builder, x: str, weight_name: str, weight: _Weight, bias: str | None, prefix: str) -> str:
    """mean_p(W x_p + b) = W mean_p(x) + b, as one Gemm with W as it is ([C_out, C_in], transB): a MatMul + Add
    would be fused into a new node with a higher index, which onnxruntime's ordering visits first
    (`rewrite._schedule`), running the whole network before any site's reduction and keeping every map alive
    (MobileNetV2: 3.9 GB instead of 1 GB). Without a bias, C is zeros: it is optional only from opset 11."""
    return _gemm(builder, _channel_mean(builder, x, prefix), weight_name, weight, bias, prefix)


def _gemm(builder, rows: str, weight_name: str, weight: _Weight, bias: str | None, prefix: str) -> str:
    """rows · Wᵀ + b with W flattened to [C_out, everything else] by a Flatten that onnxruntime folds when the
    session is made: no copy of the weights in the model (ResNet-18's would add 40 MB to serialise)."""
    matrix = builder.node("Flatten", [weight_name], prefix, axis=1)
    if bias is None:
        zeros = np.zeros(weight.shape[0], np.float32)
        bias = _add(builder, numpy_helper.from_array(zeros, builder.namer.fresh(f"{prefix}.bias")))
    return builder.node("Gemm", [rows, matrix, bias], prefix, transB=1)


def _clone_mean(builder, node, weight: _Weight, prefix: str) -> str:
    """The mean of a second, unfused copy of a cheap convolution, whose weights carry another name."""
    inputs = [node.input[0], weight.add_as(builder, prefix), *node.input[2:]]
    clone = builder.namer.fresh(f"{prefix}.conv")
    builder.new_nodes.append(helper.make_node("Conv", inputs, [clone], name=builder.namer.fresh(f"{prefix}/Conv"),
                                              **_attrs(node)))
    return builder.node("Flatten", [builder.node("GlobalAveragePool", [clone], prefix)], prefix, axis=1)


def _window_mean(builder, node, weight: _Weight, out_spatial, pads, dilations, prefix: str) -> str:
    """A stride-1 convolution's mean over its P output positions is Σ_k W_k · S_k / P + b, where S_k sums the
    (zero-padded) input over the P positions tap k reads: a window as large as the output, shifted by k·δ. The
    window is a product of intervals, so one AveragePool per spatial axis (window Oₐ along axis a, 1 along the
    others; stride δₐ; the convolution's pads there) leaves every S_k / P: [rows, C_in, K…], each axis costing
    Kₐ additions per value it reads (one pool over the whole window would cost ∏Kₐ). W applied once to that
    tensor finishes the sum (`_apply_taps`)."""
    rank = len(out_spatial)
    x = node.input[0]
    for a in range(rank):
        kernel = [out_spatial[a] if b == a else 1 for b in range(rank)]
        strides = [dilations[a] if b == a else 1 for b in range(rank)]
        axis_pads = [pads[b] if b % rank == a else 0 for b in range(2 * rank)]
        x = builder.node("AveragePool", [x], prefix, kernel_shape=kernel, strides=strides, pads=axis_pads,
                         count_include_pad=1)
    return _apply_taps(builder, node, weight, x, prefix)


def _explicit_pads(auto_pad: str, kernel, in_spatial, out_spatial, strides, dilations) -> list[int] | None:
    """The pads auto_pad stands for (the ONNX Conv rule: SAME_UPPER puts an odd pad's extra at the end,
    SAME_LOWER at the start, VALID none), checked against the output size; None if they do not give it."""
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER", "VALID"):
        return None
    begin, end = [], []
    for i, o, k, s, d in zip(in_spatial, out_spatial, kernel, strides, dilations, strict=True):
        total = max(0, (o - 1) * s + (k - 1) * d + 1 - i) if auto_pad != "VALID" else 0
        first = total // 2 if auto_pad in ("SAME_UPPER", "VALID") else total - total // 2
        if (i + total - (k - 1) * d - 1) // s + 1 != o:
            return None
        begin.append(first)
        end.append(total - first)
    return begin + end


def _static(dims, rank: int) -> bool:
    return len(dims) == rank and all(isinstance(d, int) and d > 0 for d in dims)


def _input_window_mean(builder, node, weight: _Weight, in_spatial, out_spatial, strides, pads, dilations,
                       prefix: str) -> str:
    """The same sums S_k / P for a convolution of a graph input (an image: NCHW as given, nothing to reorder), at
    any stride: S_k is separable, so a MatMul per spatial axis with the 0/1 matrix of the positions each tap
    reads (divided by that axis's output size) contracts it, the last axis first: [rows, C, H, W]·[W, K_W], then
    [K_H, H]·[rows, C, H, K_W]."""
    rank, kernel = len(in_spatial), weight.shape[2:]
    x = node.input[0]
    for a in reversed(range(rank)):
        picks = np.zeros((in_spatial[a], kernel[a]), np.float32)
        for k in range(kernel[a]):
            rows = strides[a] * np.arange(out_spatial[a]) + k * dilations[a] - pads[a]
            picks[rows[(rows >= 0) & (rows < in_spatial[a])], k] = 1.0 / out_spatial[a]
        if a == rank - 1:
            matrix = _add(builder, numpy_helper.from_array(picks, builder.namer.fresh(f"{prefix}.taps")))
            x = builder.node("MatMul", [x, matrix], prefix)
        else:
            matrix = _add(builder, numpy_helper.from_array(picks.T.copy(), builder.namer.fresh(f"{prefix}.taps")))
            x = builder.node("MatMul", [matrix, x], prefix)
    return _apply_taps(builder, node, weight, x, prefix)


def _apply_taps(builder, node, weight: _Weight, sums: str, prefix: str) -> str:
    """Σ_k W_k · (S_k / P) + b from the [rows, C_in, K…] sums. Without groups, one Gemm with W as a [C_out, C_in·K]
    matrix: the convolution itself would read all of W once per row (a 3×3 convolution over 512 channels: 9 MB
    a row). With groups, the convolution (its weights are few)."""
    group = _attrs(node).get("group", 1)
    if group != 1 or builder.opset < 7:
        conv = builder.node("Conv", [sums, *node.input[1:]], prefix, **({"group": group} if group != 1 else {}))
        return builder.node("Flatten", [conv], prefix, axis=1)
    bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
    return _gemm(builder, builder.node("Flatten", [sums], prefix, axis=1), node.input[1], weight, bias, prefix)
