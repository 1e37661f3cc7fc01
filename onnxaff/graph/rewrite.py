"""The augmented model: per site, nodes that reduce X and Y to [rows, D] inside the graph.

Only the reduced features leave the runtime, never the activation maps, so the analysis costs about
one extra read of each activation. A raw mode exposes the full tensors for debugging and for the
naive baseline of the benchmarks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxaff.graph.conv_means import conv_channel_means
from onnxaff.graph.load import default_opset
from onnxaff.graph.masks import graph_features
from onnxaff.graph.names import Namer, graph_names
from onnxaff.graph.sites import Site, sanitize
from onnxaff.graph.view import GraphView
from onnxaff.metrics.rank import FLOAT32_EPS

REDUCTIONS = ("mean", "reference", "positions", "flatten")
_FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.DOUBLE}


@dataclass(frozen=True)
class SiteOutputs:
    """Names of the augmented model's outputs that carry one site's features."""

    x: str
    y: str
    dim: int | None  # D when shapes are static, else None
    jvp: object = None  # JvpOutputs when NLC statistics were requested and can be built
    rounding: float | None = None  # the features' relative rounding (feature_rounding); None: P is symbolic
    shapes: tuple[str, str] | None = None  # graph mode with a symbolic P: outputs giving X's and Y's shapes per batch
    doubles: tuple[bool, bool] = (False, False)  # X, Y are float64 tensors (reduced in float64)
    reduced: bool = False  # reduced in the graph whatever reduce_in says (a subgraph's tensors cannot leave raw)
    mask: object = None  # the site's SiteMask (graph.masks): what is masked, for a reduction on the host too
    missing: tuple[str, ...] = ()  # float64 [rows] outputs, 1 for a row left out by a mask (one per masked side)

    @property
    def names(self) -> list[str]:
        """Every output this site fetches, in the order a batch's arrays come back (x, y, jvp…, shapes…, missing…)."""
        jvp = list(self.jvp.names.values()) if self.jvp is not None else []
        return [self.x, self.y, *jvp, *(self.shapes or ()), *self.missing]

    def unpack(self, arrays: list) -> tuple:
        """One batch's arrays of `names` as (x, y, jvp arrays, shape arrays, missing arrays)."""
        j = 2 + (len(self.jvp.names) if self.jvp is not None else 0)
        s = j + len(self.shapes or ())
        return arrays[0], arrays[1], arrays[2:j], arrays[j:s], arrays[s:]


class GraphBuilder:
    """Appends reduction subgraphs to a model, sharing work between sites that read one tensor."""

    def __init__(self, model: onnx.ModelProto, view: GraphView | None = None):
        self.model = model
        self.opset = default_opset(model)
        # The original model's index serves the copy: nodes are only appended to it.
        self.view = view if view is not None else GraphView(model.graph)
        self.namer = Namer(graph_names(model.graph))
        self.cache: dict[tuple, str] = {}
        self.new_nodes: list[onnx.NodeProto] = []
        self.new_outputs: list[onnx.ValueInfoProto] = []

    def node(self, op: str, inputs: list[str], prefix: str, **attrs) -> str:
        out = self.namer.fresh(f"{prefix}.{op.lower()}")
        self.new_nodes.append(helper.make_node(op, inputs, [out], name=self.namer.fresh(f"{prefix}/{op}"), **attrs))
        return out

    def ints(self, values: list[int], prefix: str) -> str:
        """An int64 initializer (axes, starts, ends)."""
        name = self.namer.fresh(f"{prefix}.axes")
        self.model.graph.initializer.append(numpy_helper.from_array(np.array(values, dtype=np.int64), name))
        return name

    def scalar(self, value: float, elem_type: int, prefix: str) -> str:
        name = self.namer.fresh(f"{prefix}.const")
        dtype = helper.tensor_dtype_to_np_dtype(elem_type)
        self.model.graph.initializer.append(numpy_helper.from_array(np.array(value, dtype=dtype), name))
        return name

    def reduce(self, op: str, x: str, axes: list[int], prefix: str, keepdims: int = 0) -> str:
        """Reduce* with axes as an attribute or, from the opset that moved it, as an input."""
        moved = 13 if op == "ReduceSum" else 18
        if self.opset >= moved:
            return self.node(op, [x, self.ints(axes, prefix)], prefix, keepdims=keepdims)
        return self.node(op, [x], prefix, axes=axes, keepdims=keepdims)

    def _reduce_mean(self, x: str, axes: list[int], prefix: str) -> str:
        return self.reduce("ReduceMean", x, axes, prefix)

    def _unsqueeze_last(self, x: str, prefix: str) -> str:
        if self.opset >= 13:
            return self.node("Unsqueeze", [x, self.ints([1], prefix)], prefix)
        return self.node("Unsqueeze", [x], prefix, axes=[1])

    def features(self, tensor: str, site: Site, mode: str, prefix: str) -> str:
        key = (tensor, mode, site.rank, site.feature_axis)
        if key in self.cache:
            return self.cache[key]
        x = tensor
        if self.view.elem_type(tensor) not in _FLOAT_TYPES | {TensorProto.UNDEFINED}:
            x = self.node("Cast", [x], prefix, to=TensorProto.FLOAT)  # fp16/bf16: reduce in fp32
        rank, axis = site.rank, site.feature_axis
        if rank == 1:
            out = self._unsqueeze_last(x, prefix)
        elif rank == 2:
            out = self.node("Identity", [x], prefix)
        elif mode == "mean" and axis == 1:
            # A convolution's output from its input where that keeps the activation fused (graph.conv_means);
            # else GlobalAveragePool rather than ReduceMean: onnxruntime's NCHWc kernels take it as is, where a
            # ReduceMean first needs the whole activation map copied back to NCHW (ReorderOutput).
            out = conv_channel_means(self, tensor, prefix) if x == tensor else None
            out = out or self.node("Flatten", [self.node("GlobalAveragePool", [x], prefix)], prefix, axis=1)
        elif mode == "mean":
            out = self._reduce_mean(x, averaged_axes(rank, axis, mode), prefix)
        elif mode == "reference":
            out = self._reduce_mean(x, averaged_axes(rank, axis, mode), prefix)
        elif mode == "positions":
            if axis != rank - 1:
                perm = [a for a in range(rank) if a != axis] + [axis]
                x = self.node("Transpose", [x], prefix, perm=perm)
            out = self.node("Flatten", [x], prefix, axis=rank - 1)
        elif mode == "flatten":
            out = self.node("Flatten", [x], prefix, axis=1)
        else:
            raise ValueError(f"unknown reduction {mode!r}; choose one of {', '.join(REDUCTIONS)}")
        self.cache[key] = out
        return out

    def raw(self, tensor: str, prefix: str) -> str:
        if tensor in self.cache:
            return self.cache[tensor]
        self.cache[tensor] = out = self.node("Identity", [tensor], prefix)
        return out


def averaged_axes(rank: int, axis: int | None, mode: str) -> list[int]:
    """The axes a `mean` or `reference` feature averages: every axis but the batch and the feature axis (mean);
    the reference code's convention, every axis after the second (rank 4: the last two; rank 3: the last)."""
    if mode == "reference":
        return list(range(2, rank))
    return [a for a in range(1, rank) if a != axis]


def numpy_features(a: np.ndarray, site: Site, mode: str) -> np.ndarray:
    """What `GraphBuilder.features` computes in the graph, done in numpy on the full tensor.

    The naive design the in-graph reduction replaces (the benchmarks' baseline): every activation
    map crosses to the host first.
    """
    if a.dtype not in (np.float32, np.float64):
        a = a.astype(np.float32)
    rank, axis = a.ndim, site.feature_axis
    if rank == 1:
        return a[:, None]
    if rank == 2:
        return a
    if mode in ("mean", "reference"):
        with np.errstate(all="ignore"):  # +Inf and −Inf give NaN: the site is flagged, no NumPy warning
            return a.mean(axis=tuple(averaged_axes(rank, axis, mode)), dtype=a.dtype)
    if mode == "positions":
        return np.moveaxis(a, axis, -1).reshape(-1, a.shape[axis])
    if mode == "flatten":
        return a.reshape(a.shape[0], -1)
    raise ValueError(f"unknown reduction {mode!r}; choose one of {', '.join(REDUCTIONS)}")


def feature_dim(site: Site, mode: str) -> int | None:
    """D of a site's features from its static shape, or None if a needed dim is symbolic."""
    shape, rank, axis = site.input_shape, site.rank, site.feature_axis
    if shape is None or rank is None or rank == 0:  # a scalar has no batch axis (the site is skipped)
        return None

    def prod(dims):
        if not all(isinstance(d, int) for d in dims):
            return None
        return int(np.prod(dims)) if dims else 1

    if rank == 1:
        return 1
    if rank == 2:
        return prod([shape[1]])
    if mode in ("mean", "positions"):
        return prod([shape[axis]]) if axis is not None else None
    if mode == "reference":
        return prod([shape[1]])
    return prod(shape[1:])


def positions(site: Site, mode: str, shape=None) -> int | None:
    """P, how many values of the tensor one feature averages: 1 where nothing is averaged (rank ≤ 2, `positions`,
    `flatten`). `shape`: a run-time shape instead of the static one; None when a needed dim is symbolic."""
    shape = site.input_shape if shape is None else [int(d) for d in shape]
    rank, axis = site.rank, site.feature_axis
    if shape is None or rank is None:
        return None
    if rank <= 2 or mode in ("positions", "flatten"):
        return 1
    dims = [shape[a] for a in averaged_axes(rank, axis, mode)]
    return int(np.prod(dims)) if all(isinstance(d, int) for d in dims) else None


def feature_rounding(site: Site, mode: str, doubles: tuple[bool, bool] = (False, False),
                     shapes: tuple = (None, None)) -> float | None:
    """The relative rounding of a site's features, the larger of X's and Y's (what Chunk.rounding carries).

    A float32 mean over P values (GlobalAveragePool, ReduceMean, a host mean) rounds about sqrt(P)·eps32 of the
    values it averages, and two correct reductions differ by that much: it depends on P, not on the path, so
    both paths decide X's rank alike (onnxaff.metrics.rank). A float64 tensor is reduced in float64; its
    features still get eps32, the level every cutoff stays above (the metrics' float64 Gram matrices need the
    margin). None when P is symbolic (`shapes`, run-time shapes of X and Y, resolve it).
    """
    worst = FLOAT32_EPS
    for side, double, shape in zip(("x", "y"), doubles, shapes, strict=True):
        p = positions(site.side(side), mode, shape)
        if p is None:
            return None
        eps = float(np.finfo(np.float64 if double else np.float32).eps)
        worst = max(worst, eps * float(np.sqrt(p)))
    return worst


def augment_model(
    model: onnx.ModelProto, sites: list[Site], reduce: str = "mean", raw: bool = False, jvp: bool = False,
    view: GraphView | None = None, masks: dict | None = None,
) -> tuple[onnx.ModelProto, dict[int, SiteOutputs]]:
    """A copy of `model` whose extra outputs are each ok site's features; original outputs kept first.

    jvp=True also adds the finite-difference statistics of the non-linearity coefficient (graph.jvp).
    view: `model`'s index when the caller has one (`LoadedModel.view`), so the copy is not indexed again.
    masks: site index -> SiteMask (graph.masks.site_masks), the sites whose features leave masked positions out.
    """
    from onnxaff.graph.jvp import add_jvp

    if reduce not in REDUCTIONS:
        raise ValueError(f"unknown reduction {reduce!r}; choose one of {', '.join(REDUCTIONS)}")
    augmented = onnx.ModelProto()
    augmented.CopyFrom(model)
    builder = GraphBuilder(augmented, view)
    outputs: dict[int, SiteOutputs] = {}
    exported: dict[str, str] = {}  # internal tensor -> graph output that exposes it
    new_outputs = builder.new_outputs
    groups: list[int] = []  # the forward position of the site each added node serves
    scoped: dict = {}  # (control node, graph attribute) -> the builder of that subgraph's reductions
    for position, site in enumerate(sites):
        if not site.ok:
            continue
        prefix = f"onnxaff/{site.index}.{sanitize(site.id)}"
        if site.scope is not None:  # inside an If, Loop or Scan: threaded out of the control node, reduced there
            outputs[site.index] = _scoped(builder, site, reduce, prefix, scoped)  # (reduce_in numpy too)
            groups += [position] * (len(builder.new_nodes) - len(groups))
            continue
        names, doubles, missing = [], [], []
        mask = (masks or {}).get(site.index)
        for side, tensor in (("x", site.input), ("y", site.output)):
            # a masked mean is taken in float64, in the graph and on the host alike
            doubles.append(builder.view.elem_type(tensor) == TensorProto.DOUBLE or (
                mask is not None and mask.applies(side) and reduce in ("mean", "reference")))
            elem = builder.view.elem_type(tensor)
            elem = elem if (raw or elem in _FLOAT_TYPES) else TensorProto.FLOAT
            if raw:
                inner = builder.raw(tensor, f"{prefix}.{side}")
            elif mask is not None and mask.applies(side):
                inner, gone = graph_features(builder, tensor, site.side(side), reduce, mask, side, site.input,
                                             f"{prefix}.{side}")
                missing.append(_exported(gone, TensorProto.DOUBLE, [None], exported, new_outputs))
                elem = TensorProto.DOUBLE if reduce in ("mean", "reference") else elem
            else:
                inner = builder.features(tensor, site.side(side), reduce, f"{prefix}.{side}")
            if inner not in exported:
                exported[inner] = inner
                shape = builder.view.shape(tensor) if raw else [None, feature_dim(site.side(side), reduce)]
                shape = [None if d == "?" else d for d in shape] if shape is not None else None
                new_outputs.append(helper.make_tensor_value_info(inner, elem or TensorProto.FLOAT, shape))
            names.append(inner)
        dim = None if raw else feature_dim(site, reduce)
        jvp_outputs = add_jvp(builder, site, prefix, masked=mask.threshold if mask else None) if jvp else None
        rounding = feature_rounding(site, reduce, tuple(doubles))
        shapes = None
        if rounding is None and not raw:  # raw arrays carry their shapes; reduced features need them told
            shapes = tuple(_shape_output(builder, t, f"{prefix}.{side}", exported, new_outputs)
                           for side, t in (("x", site.input), ("y", site.output)))
        outputs[site.index] = SiteOutputs(names[0], names[1], dim, jvp_outputs, rounding, shapes, tuple(doubles),
                                          mask=mask, missing=tuple(missing))
        groups += [position] * (len(builder.new_nodes) - len(groups))
    augmented.graph.output.extend(new_outputs)
    _schedule(augmented, builder, groups)
    return augmented, outputs


def _scoped(builder: GraphBuilder, site: Site, reduce: str, prefix: str, scoped: dict) -> SiteOutputs:
    """A subgraph site's outputs (graph.subrewrite); its shapes are static (graph.subsites), so is its rounding."""
    from onnxaff.graph.subrewrite import observe

    dim = feature_dim(site, reduce)
    x, y, doubles = observe(builder, site, reduce, prefix, dim, scoped)
    for name, double in zip((x, y), doubles, strict=True):
        elem = TensorProto.DOUBLE if double else TensorProto.FLOAT
        builder.new_outputs.append(helper.make_tensor_value_info(name, elem, [None, dim]))
    return SiteOutputs(x, y, dim, None, feature_rounding(site, reduce, doubles), None, doubles, reduced=True)


def _exported(name: str, elem: int, shape: list, exported: dict, new_outputs: list) -> str:
    """`name` as an output of the augmented model, once however many sites read it."""
    if name not in exported:
        exported[name] = name
        new_outputs.append(helper.make_tensor_value_info(name, elem, shape))
    return name


def _shape_output(builder: GraphBuilder, tensor: str, prefix: str, exported: dict, new_outputs: list) -> str:
    """An int64 output with `tensor`'s shape (a Shape node: no data is read), shared between sites."""
    key = ("shape", tensor)
    if key not in builder.cache:
        builder.cache[key] = builder.node("Shape", [tensor], prefix)
    out = builder.cache[key]
    if out not in exported:
        exported[out] = out
        new_outputs.append(helper.make_tensor_value_info(out, TensorProto.INT64, [None]))
    return out


SINK = "onnxaff/sink/"


def _schedule(model: onnx.ModelProto, builder: GraphBuilder, groups: list[int]) -> None:
    """Append the added nodes so that onnxruntime runs each site's reduction as soon as it can.

    onnxruntime orders nodes by a reverse depth-first search from the graph's leaves, the leaf with
    the highest node index first. Appended in forward order, the last site's reduction would come
    first: the whole network would run before the earlier reductions and every activation map would
    stay alive until the end (ResNet-18, batch 64: 2.8 GB instead of 1.1 GB). So the sites' nodes go
    in reverse forward order, after an Identity on each original output (optimisers give fused output
    nodes new, higher indices; the Identity keeps them from being searched first).
    """
    graph = model.graph
    sinks = []
    for out in list(graph.output)[: len(graph.output) - len(builder.new_outputs)]:
        sink = builder.namer.fresh(SINK + out.name)
        sinks.append(helper.make_node("Identity", [out.name], [sink], name=sink))
        exposed = graph.output.add()
        exposed.name = sink
        exposed.type.CopyFrom(out.type)
    per_site: dict[int, list[onnx.NodeProto]] = {}
    for node, group in zip(builder.new_nodes, groups, strict=True):
        per_site.setdefault(group, []).append(node)
    graph.node.extend(sinks)
    for group in sorted(per_site, reverse=True):
        graph.node.extend(per_site[group])
