"""Masked positions: the mask values in a softmax's input, and the padded tokens a mask input names.

A transformer masks an attention score by adding a large negative constant c there (or writing it with a `Where`)
before the softmax: −inf, −3.4e38 (`transformers`), −1e9, −10000 (BERT, onnxruntime's `mask_filter_value`). Which
one does not matter to the network: what masks is the effect, exp(s + c − m) = 0 in the softmax's precision (m the
row's largest score). Rounding to nearest, exp(t) is 0 below ln of half the smallest subnormal: t < −103.97 in
float32, −92.9 in bfloat16, −17.33 in float16, −745.1 in float64. With scores |s| < 4,600 (attention scores are
O(10)), s + c − m ≤ 9,200 + c, so every c ≤ −1e4 (`MASK_CONSTANT`) is 0 after exp in each of them: a mask by
effect. Its positions then lie at or below −1e4 + 4,600 = −5,400 and the genuine scores above −4,600, so one
threshold for every float type, `THRESHOLD` = −5,000, tells them apart (a float32 mean of a few −3.4e38 overflows
to −inf, and a mean over −1e9 or −10000 is no data either). A softmax site whose input can hold one
(`can_hold_masks`) takes each feature as a float64 mean over its unmasked positions only, so its score is the same
whichever of those constants an exporter wrote; a row with a feature that has none (a padded key that every query
masks) is missing: the runtime says which rows (one more output per side, 1 for a missing row), and the collector
drops and counts them (docs/metrics.md, "Masked positions"). A mask input [B, T] (1: token, 0: padding) leaves the
padded tokens out of a tokens-layout tensor's token axis [B, T, C] and an attention map's query axis [B, H, Tq,
Tk] the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from onnxaff.errors import ConfigError
from onnxaff.graph.load import external_problem
from onnxaff.graph.sites import NOT_ELEMENTWISE, Site
from onnxaff.graph.view import GraphView

MASK_CONSTANT = -1e4  # a constant at or below it (−inf included) feeding a softmax input can be a mask value
THRESHOLD = MASK_CONSTANT / 2  # a value mask's positions: at or below it (−inf included, NaN not)
_SMALL = 4096  # constants upstream larger than this are weights, never read for it
_FOLDED = 1 << 24  # a constant added into the softmax input is read whole up to this many values, beyond in parts
_ADDING = frozenset({"Add", "Sub", "Sum"})
_CARRYING = frozenset({"Reshape", "Cast", "CastLike", "Expand", "Squeeze", "Unsqueeze", "Identity", "Transpose",
                       "Slice", "Flatten", "QuantizeLinear", "DequantizeLinear"})
_QUANTIZING = frozenset({"QuantizeLinear", "DynamicQuantizeLinear", "QLinearAdd", "QLinearMul", "QLinearConcat",
                         "QLinearSoftmax", "QLinearWhere"})
_NOT_NUMERIC = frozenset({TensorProto.UNDEFINED, TensorProto.STRING, TensorProto.BOOL, TensorProto.COMPLEX64,
                          TensorProto.COMPLEX128})
_DOUBLE = TensorProto.DOUBLE
_RAW = {TensorProto.FLOAT: np.dtype("<f4"), TensorProto.FLOAT16: np.dtype("<f2"), TensorProto.DOUBLE: np.dtype("<f8")}
_FLOATS = {TensorProto.UNDEFINED, TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16}


@dataclass(frozen=True)
class SiteMask:
    """What is masked at one site. `threshold`: positions of X at or below it are masked, on both sides (None: no
    value mask); `pad`: X's and Y's token axis the padding input indexes (None: that side has none); `input`: the
    padding input [B, T]."""

    threshold: float | None = None
    pad: tuple[int | None, int | None] = (None, None)
    input: str | None = None

    def side(self, which: str) -> int:
        return 0 if which == "x" else 1

    def applies(self, which: str) -> bool:
        """Whether anything of the side is masked (its mean is then taken in float64)."""
        return self.threshold is not None or self.pad[self.side(which)] is not None


def mask_input(asked: str, view: GraphView) -> str | None:
    """The padding input `asked` names: "auto" an input called attention_mask (any case) if there is one, "none"
    none; another name must be a [batch, tokens] input of the model."""
    if asked.lower() == "none":
        return None
    if asked == "auto":
        found = [n for n in view.graph_inputs if n.lower() == "attention_mask"]
        return found[0] if found and _tokens_dim(view, found[0]) is not None else None
    if asked not in view.graph_inputs:
        raise ConfigError("mask", f"{{option}} {asked!r} is no input of the model (inputs: "
                          f"{', '.join(view.graph_inputs)}; none turns masking off)")
    if _tokens_dim(view, asked) is None:
        raise ConfigError("mask", f"{{option}} {asked!r} is not a [batch, tokens] input (shape {view.shape(asked)})")
    return asked


def _tokens_dim(view: GraphView, name: str) -> int | str | None:
    shape = view.shape(name)
    return shape[1] if shape is not None and len(shape) == 2 and shape[1] != "?" else None


def site_masks(view: GraphView, sites: list[Site], padding: str | None,
               base_dir: Path | None = None) -> dict[int, SiteMask]:
    """Site index -> its SiteMask, for the top-level sites that have something masked. `base_dir`: the model's
    folder, where a mask folded into external data is read (None: such a mask is not seen)."""
    token = _tokens_dim(view, padding) if padding is not None else None
    evidence, read = None, {}
    out = {}
    for s in sites:
        if not s.ok or s.scope is not None:
            continue
        limit = None
        if s.kind in NOT_ELEMENTWISE and s.layout == "softmax_axis" and (s.rank or 0) >= 3 and s.output_rank is None:
            evidence = evidence if evidence is not None else _evidence(view)
            if can_hold_masks(evidence, s.input) or added_mask(view, s.input, base_dir, read):
                limit = THRESHOLD
        pad = (None, None) if token is None else (_token_axis(s.side("x"), token), _token_axis(s.side("y"), token))
        if limit is not None or pad != (None, None):
            out[s.index] = SiteMask(limit, pad, padding if pad != (None, None) else None)
    return out


def _token_axis(site: Site, token: int | str) -> int | None:
    """The axis of a [B, T, C] tokens tensor or a [B, H, Tq, Tk] attention map that the padding input's T indexes."""
    shape = site.input_shape
    if shape is None or site.rank is None:
        return None
    if site.rank == 3 and site.layout == "tokens":
        axis = 1
    elif site.rank == 4 and site.layout == "softmax_axis" and site.feature_axis == 3:
        axis = 2
    else:
        return None
    return axis if shape[axis] == token and shape[0] != token else None


def _evidence(view: GraphView) -> dict[str, tuple[bool, frozenset]]:
    """Tensor -> (a Where node or a mask-like constant lies upstream, the graph inputs it is computed from)."""
    info: dict[str, tuple[bool, frozenset]] = {n: (False, frozenset([n])) for n in view.graph_inputs}
    for i in sorted(range(len(view.nodes)), key=view.order.__getitem__):
        node = view.nodes[i]
        # only values flow: a Where that picks integers (a Reshape's shape, as torch exports it) is no mask
        found = (node.op_type == "Where" and _valued(view, node.output[0])) or _mask_node(node)
        inputs = frozenset()
        for name in node.input:
            if name in info:
                found, inputs = found or (info[name][0] and _valued(view, name)), inputs | info[name][1]
            elif name in view.initializers:
                found = found or _mask_tensor(view.initializers[name])
        for name in node.output:
            info[name] = (found, inputs)
    return info


def _valued(view: GraphView, name: str) -> bool:
    """A float tensor (or one of unknown type), or a quantized one (a QuantizeLinear's or a QLinear op's output):
    what can carry a mask value."""
    if view.elem_type(name) in _FLOATS:
        return True
    i = view.producer.get(name)
    return i is not None and view.nodes[i].op_type in _QUANTIZING


def can_hold_masks(evidence: dict, tensor: str) -> bool:
    """The static rule: a Where node, a constant ≤ MASK_CONSTANT or a second graph input lies upstream."""
    found, inputs = evidence.get(tensor, (False, frozenset()))
    return found or len(inputs) >= 2


def added_mask(view: GraphView, tensor: str, base_dir: Path | None, read: dict | None = None) -> bool:
    """Whether a constant holding a mask value is added into `tensor` (through sums, casts, reshapes and
    quantization). `read`: what `_stored_mask` found, shared by the softmaxes of one model (every layer adds the
    same folded mask, read once).

    The dynamo exporter folds a causal mask computed from static shapes into one float initializer [B, 1, T, T]
    (−3.4e38 above the diagonal) that it writes with the weights, to external data; a quantizer then stores it as
    integers and a scale. Only what is summed into the softmax input is read, so weights behind a MatMul or a Mul
    never are."""
    read = {} if read is None else read
    seen, todo = set(), [tensor]
    while todo:
        name = todo.pop()
        if not name or name in seen:
            continue
        seen.add(name)
        i = view.producer.get(name)
        node = view.nodes[i] if i is not None else None
        held = _stored_mask(view, name, node, base_dir, read)
        if held:
            return True
        if held is not None or node is None:
            continue
        if node.op_type in _ADDING:
            todo.extend(node.input)
        elif node.op_type in _CARRYING and node.input:  # a DequantizeLinear of computed data included
            todo.append(node.input[0])
        elif node.op_type == "Constant" and _mask_node(node, _FOLDED):
            return True
    return False


def _stored_mask(view: GraphView, name: str, node: onnx.NodeProto | None, base_dir: Path | None,
                 read: dict) -> bool | None:
    """Whether tensor `name` is a stored constant holding a mask value (an initializer, or a DequantizeLinear of
    stored integers): True or False, each read once into `read`; None where it is no stored constant."""
    if name not in read:
        if name in view.initializers:
            read[name] = _scanned(view.initializers[name], base_dir)
        elif node is not None and node.op_type == "DequantizeLinear":
            stored = _dequantized(view, node, base_dir)
            read[name] = None if stored is None else _holds_mask(stored)
        else:
            read[name] = None
    return read[name]


def _dequantized(view: GraphView, node: onnx.NodeProto, base_dir: Path | None) -> np.ndarray | None:
    """A DequantizeLinear's output on a constant integer tensor: (q − zero point) · scale, per tensor, per axis or
    per block (opset 21's block_size); None where the input is no constant or the parameters do not fit it."""
    def value(name: str) -> np.ndarray | None:
        t = view.initializers.get(name)
        return _read(t, _FOLDED, base_dir) if t is not None else view.constant(name)

    q = value(node.input[0])
    scale = value(node.input[1]) if q is not None and len(node.input) > 1 else None
    if scale is None:
        return None
    zero = value(node.input[2]) if len(node.input) > 2 and node.input[2] else np.zeros_like(scale)
    if zero is None or zero.size != scale.size or (scale.size > 1 and q.ndim == 0):
        return None
    scale, zero = scale.astype(np.float64), zero.astype(np.float64).reshape(scale.shape)
    attrs = {a.name: a.i for a in node.attribute}
    axis, block = (attrs.get("axis", 1) % q.ndim if q.ndim else 0), attrs.get("block_size", 0)
    if block > 0:  # scale has q's rank, each entry covering `block` values along the axis
        if not q.ndim or scale.ndim != q.ndim or scale.shape[axis] * block < q.shape[axis]:
            return None
        scale, zero = (np.repeat(a, block, axis=axis).take(range(q.shape[axis]), axis=axis) for a in (scale, zero))
    elif scale.size > 1:  # one scale per index of the axis
        if scale.ndim != 1 or scale.size != q.shape[axis]:
            return None
        shape = [1] * q.ndim
        shape[axis] = -1
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    try:
        return (q.astype(np.float64) - zero) * scale
    except ValueError:  # parameters that do not broadcast against the input: the session will refuse them
        return None


def _mask_node(node: onnx.NodeProto, limit: int = _SMALL) -> bool:
    """A Constant (value, value_float, value_floats) or ConstantOfShape holding a mask value."""
    if node.op_type not in ("Constant", "ConstantOfShape"):
        return False
    for a in node.attribute:
        if a.type == onnx.AttributeProto.TENSOR and _holds_mask(_read(a.t, limit, None, floats_only=True)):
            return True
        if a.type == onnx.AttributeProto.FLOAT and a.f <= MASK_CONSTANT:
            return True
        if a.type == onnx.AttributeProto.FLOATS and len(a.floats) <= limit and min(a.floats, default=0.0) <= \
                MASK_CONSTANT:
            return True
    return False


def _mask_tensor(t: onnx.TensorProto) -> bool:
    return _holds_mask(_read(t, _SMALL, None, floats_only=True))


def _holds_mask(value: np.ndarray | None) -> bool:
    return value is not None and bool(value.size) and bool((value.astype(np.float64) <= MASK_CONSTANT).any())


def _scanned(t: onnx.TensorProto, base_dir: Path | None) -> bool:
    """Whether a stored constant holds a mask value, at any size: a folded causal mask past 4,096 tokens holds more
    than 2²⁴ values; a float one is read `_FOLDED` values at a time (mapped from its file, or from the model's
    bytes), so no copy of it is made."""
    n = int(np.prod(t.dims, dtype=np.int64))
    dtype = _RAW.get(t.data_type)
    if n <= _FOLDED or dtype is None:
        return _holds_mask(_read(t, _FOLDED, base_dir))
    entries = {e.key: e.value for e in t.external_data}
    try:
        if t.data_location != TensorProto.EXTERNAL:
            values = np.frombuffer(t.raw_data, dtype, count=n) if t.raw_data else numpy_helper.to_array(t).ravel()
        elif base_dir is not None and external_problem(t, Path(base_dir)) is None:
            values = np.memmap(Path(base_dir) / entries["location"], dtype, "r", int(entries.get("offset", 0)), (n,))
        else:
            values = None
    except (OSError, ValueError):  # bytes short of the dims: the session says so
        return False
    return values is not None and any(bool((values[i:i + _FOLDED] <= MASK_CONSTANT).any())
                                      for i in range(0, n, _FOLDED))


def _read(t: onnx.TensorProto, limit: int, base_dir: Path | None, floats_only: bool = False) -> np.ndarray | None:
    """A numeric constant of at most `limit` values (floats only where asked), or None; external data is read only
    with `base_dir` and only where onnxaff's own check of the reference passes."""
    if t.data_type in _NOT_NUMERIC or (floats_only and t.data_type not in _FLOATS):
        return None
    if int(np.prod(t.dims, dtype=np.int64)) > limit:
        return None
    external = t.data_location == TensorProto.EXTERNAL
    if external and (base_dir is None or external_problem(t, Path(base_dir)) is not None):
        return None
    try:
        return numpy_helper.to_array(t, base_dir=str(base_dir)) if external else numpy_helper.to_array(t)
    except (OSError, ValueError):  # bytes short of the dims (a file shorter than its reference): the session says so
        return None


# --- the augmented graph ---

def graph_features(b, tensor: str, site: Site, mode: str, mask: SiteMask, which: str, source: str,
                   prefix: str) -> tuple[str, str]:
    """(features, missing) of one side: `site` as this side sees it, `source` X (whose values are masked).
    `missing` is a float64 [rows] tensor, 1 for a row with a feature left without positions (mean, reference)
    or with a masked cell (positions, flatten). `b`: the GraphBuilder."""
    from onnxaff.graph.reduction import averaged_axes

    key = ("masked", tensor, source, mode, site.rank, site.feature_axis, mask, which)
    if key in b.cache:
        return b.cache[key]
    keep = _keep(b, site, mask, which, source, prefix)
    weights = b.node("Expand", [b.node("Cast", [keep], prefix, to=_DOUBLE), b.node("Shape", [tensor], prefix)],
                     prefix)
    one = b.scalar(1.0, _DOUBLE, prefix)
    rank, axis = site.rank, site.feature_axis
    if mode in ("mean", "reference"):
        axes = averaged_axes(rank, axis, mode)
        zero = b.scalar(0.0, _DOUBLE, prefix)
        x64 = b.node("Cast", [tensor], prefix, to=_DOUBLE)
        total = b.reduce("ReduceSum", b.node("Where", [keep, x64, zero], prefix), axes, prefix)
        count = b.reduce("ReduceSum", weights, axes, prefix)
        features = b.node("Div", [total, b.node("Max", [count, one], prefix)], prefix)
        empty = b.node("Cast", [b.node("Equal", [count, zero], prefix)], prefix, to=_DOUBLE)
        missing = b.reduce("ReduceMax", empty, [1], prefix)
    else:
        features = b.features(tensor, site, mode, prefix)
        if mode == "positions" and axis != rank - 1:
            weights = b.node("Transpose", [weights], prefix, perm=[a for a in range(rank) if a != axis] + [axis])
        flat = b.node("Flatten", [weights], prefix, axis=rank - 1 if mode == "positions" else 1)
        missing = b.node("Sub", [one, b.reduce("ReduceMin", flat, [1], prefix)], prefix)
    b.cache[key] = features, missing
    return features, missing


def at_or_below(b, x: str, limit: float, elem: int, prefix: str) -> str:
    """A bool tensor, True where x ≤ limit (−inf included, NaN not)."""
    bound = b.scalar(limit, elem, prefix)
    if b.opset >= 12:
        return b.node("LessOrEqual", [x, bound], prefix)
    return b.node("Or", [b.node("Less", [x, bound], prefix), b.node("Equal", [x, bound], prefix)], prefix)


def _keep(b, site: Site, mask: SiteMask, which: str, source: str, prefix: str) -> str:
    """A bool tensor broadcasting to the side's shape: True where a position counts."""
    axis = mask.pad[mask.side(which)]
    key = ("keep", source, mask, site.rank, axis)
    if key in b.cache:
        return b.cache[key]
    parts = []
    if mask.threshold is not None:
        low = at_or_below(b, b.node("Cast", [source], prefix, to=_DOUBLE), mask.threshold, _DOUBLE, prefix)
        parts.append(b.node("Not", [low], prefix))  # NaN is kept: it still flags the site
    if axis is not None:
        tokens = b.node("Cast", [mask.input], prefix, to=TensorProto.BOOL)
        axes = [a for a in range(site.rank) if a not in (0, axis)]
        if b.opset >= 13:
            tokens = b.node("Unsqueeze", [tokens, b.ints(axes, prefix)], prefix)
        else:
            tokens = b.node("Unsqueeze", [tokens], prefix, axes=axes)
        parts.append(tokens)
    keep = parts[0] if len(parts) == 1 else b.node("And", parts, prefix)
    b.cache[key] = keep
    return keep


# --- on the host (reduce_in numpy) ---

def numpy_masked(x: np.ndarray, y: np.ndarray, site: Site, mode: str, mask: SiteMask,
                 batch: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What `graph_features` computes, in numpy on the raw tensors: X's and Y's features and the missing rows."""
    from onnxaff.graph.reduction import averaged_axes, numpy_features

    out, missing = [], None
    for which, a in (("x", x), ("y", y)):
        side = site.side(which)
        keep = np.ones(a.shape, dtype=bool)
        if mask.threshold is not None:
            keep = keep & ~(x.astype(np.float64) <= mask.threshold)
        axis = mask.pad[mask.side(which)]
        if axis is not None:
            tokens = np.asarray(batch[mask.input]) != 0
            keep = keep & np.expand_dims(tokens, tuple(d for d in range(a.ndim) if d not in (0, axis)))
        keep = np.broadcast_to(keep, a.shape)
        rank, feature_axis = a.ndim, side.feature_axis
        if mode in ("mean", "reference"):
            axes = tuple(averaged_axes(rank, feature_axis, mode))
            count = keep.sum(axis=axes, dtype=np.float64)
            features = np.where(keep, a.astype(np.float64), 0.0).sum(axis=axes) / np.maximum(count, 1.0)
            gone = (count == 0).any(axis=1)
        else:
            features = numpy_features(a, side, mode)
            kept = (np.moveaxis(keep, feature_axis, -1).reshape(-1, a.shape[feature_axis]) if mode == "positions"
                    else keep.reshape(a.shape[0], -1))
            gone = ~kept.all(axis=1)
        out.append(features)
        missing = gone if missing is None else missing | gone
    return out[0], out[1], missing
