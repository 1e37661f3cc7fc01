"""How a site's tensors become [rows, D] features: the reduction nodes appended to the graph (`GraphBuilder`) and
the same reduction in numpy, with the feature count, positions and rounding each mode gives.

Below the augmented model (`rewrite.py`), masks (`masks.py`), Jacobian sums (`jvp.py`) and subgraph
observation (`subrewrite.py`), which all append their nodes through one builder.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxaff.graph.batch import batch_axis
from onnxaff.graph.conv_means import conv_channel_means
from onnxaff.graph.load import default_opset
from onnxaff.graph.names import Namer, graph_names
from onnxaff.graph.sites import Site
from onnxaff.graph.view import GraphView
from onnxaff.metrics.rank import FLOAT32_EPS

REDUCTIONS = ("mean", "reference", "positions", "flatten")
SAMPLE = "sample:"  # reduce="sample:K": K positions per example, drawn from the `positions` rows (sample_rows)
FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.DOUBLE}


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
        moved = batch_axis(site)
        key = (tensor, mode, site.rank, site.feature_axis, moved)
        if key in self.cache:
            return self.cache[key]
        x = tensor
        if self.view.elem_type(tensor) not in FLOAT_TYPES | {TensorProto.UNDEFINED}:
            x = self.node("Cast", [x], prefix, to=TensorProto.FLOAT)  # fp16/bf16: reduce in fp32
        if moved:  # the examples on another axis (graph.batch): moved to the front, the site's shapes read so
            x = self.node("Transpose", [x], prefix, perm=batch_first(site.rank, moved))
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

    def sampled_features(self, tensor: str, layout: tuple[int, int, int], index: str, prefix: str) -> str:
        """[n·K, D] rows of `tensor` at the positions `index` names ([n, K] int64, sample_index), gathered from the
        flattened tensor: the rows sample_rows takes from the `positions` features, without the whole map leaving
        the runtime (nor being transposed)."""
        key = ("sample", tensor, index)
        if key in self.cache:
            return self.cache[key]
        d, _, post = layout
        # [n, K, D]: each drawn position's D features (made per tensor, not shared between sites: a node another
        # site's reductions read would have to come before them in the graph)
        if self.opset >= 13:
            rows = self.node("Unsqueeze", [index, self.ints([2], prefix)], prefix)
        else:
            rows = self.node("Unsqueeze", [index], prefix, axes=[2])
        where = self.node("Add", [rows, self.ints(list(range(0, d * post, post)), prefix)], prefix)
        flat = self.node("Reshape", [tensor, self.ints([-1], prefix)], prefix)
        x = self.node("Gather", [flat, where], prefix, axis=0)
        if self.view.elem_type(tensor) not in FLOAT_TYPES | {TensorProto.UNDEFINED}:
            x = self.node("Cast", [x], prefix, to=TensorProto.FLOAT)  # fp16/bf16: as `features` (exact either way)
        self.cache[key] = out = self.node("Reshape", [x, self.ints([-1, d], prefix)], prefix)
        return out

    def raw(self, tensor: str, prefix: str) -> str:
        if tensor in self.cache:
            return self.cache[tensor]
        self.cache[tensor] = out = self.node("Identity", [tensor], prefix)
        return out


def batch_first(rank: int, axis: int) -> list[int]:
    """The permutation that moves `axis` to the front, the others in order."""
    return [axis, *[a for a in range(rank) if a != axis]]


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
    if batch_axis(site):
        a = np.moveaxis(a, batch_axis(site), 0)
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


def host_batch_first(x: np.ndarray, y: np.ndarray, site: Site) -> tuple[np.ndarray, np.ndarray, Site]:
    """A site's raw X and Y with the examples moved to axis 0 (graph.batch), and the site read batch first: what
    a masked host reduction takes (as rewrite's `_front` does in the graph)."""
    axis = batch_axis(site)
    if not axis:
        return x, y, site
    params = {k: v for k, v in site.params.items() if k != "batch_axis"}
    return np.moveaxis(x, axis, 0), np.moveaxis(y, axis, 0), replace(site, params=params)


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
    given = shape is not None
    shape = site.input_shape if shape is None else [int(d) for d in shape]
    if given and batch_axis(site):  # a run-time shape is the tensor's own: read batch first as the site's
        shape = [shape[a] for a in batch_first(len(shape), batch_axis(site))]
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


def sampled(reduce: str) -> int | None:
    """K of reduce="sample:K" (K positions per example), None for the other reductions."""
    if isinstance(reduce, str) and reduce.startswith(SAMPLE) and reduce[len(SAMPLE):].isdigit():
        return int(reduce[len(SAMPLE):])
    return None


def graph_mode(reduce: str) -> str:
    """The reduction the graph (or numpy) computes: "sample:K" reads the `positions` rows, then picks from them on
    the host (sample_rows), so the graph and the numpy path give the very same rows."""
    return "positions" if sampled(reduce) is not None else reduce


_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))


def _splitmix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, on uint64 arrays (wrapping): a key per (seed, example, position) that no batch sees."""
    with np.errstate(over="ignore"):
        z = z + _MIX[0]
        z = (z ^ (z >> np.uint64(30))) * _MIX[1]
        z = (z ^ (z >> np.uint64(27))) * _MIX[2]
        return z ^ (z >> np.uint64(31))


def sample_positions(seed: int, examples: np.ndarray, per: int, k: int,
                     gone: np.ndarray | None = None) -> np.ndarray:
    """[len(examples), min(k, per)] positions, ascending per example: the k smallest keys of (seed, example index
    in the data, position), so an example gets the same positions whatever batch it lands in. `gone` [n, per]:
    masked positions, taken last (only where fewer than k are left, and then dropped as masked rows are)."""
    ex = np.asarray(examples, np.int64).astype(np.uint64)[:, None]
    base = _splitmix(_splitmix(np.full_like(ex, np.uint64(seed & (2**64 - 1)))) ^ ex)
    keys = _splitmix(base ^ np.arange(per, dtype=np.uint64)[None, :])
    if gone is not None:
        keys = np.where(np.asarray(gone, bool).reshape(keys.shape), np.iinfo(np.uint64).max, keys)
    if k >= per:
        return np.broadcast_to(np.arange(per), keys.shape).copy()
    # the k smallest keys (distinct but for masked ties, which are dropped whichever are taken); O(P), not a sort
    return np.sort(np.argpartition(keys, k - 1, axis=1)[:, :k], axis=1)


def sample_rows(seed: int, first: int, n: int, rows: int, k: int, gone: np.ndarray | None = None) -> np.ndarray:
    """Indices into one batch's `positions` rows ([n · P, D], example-major): K positions of each example, its X
    and Y rows alike. `first`: the index in the data of the batch's first example."""
    per = rows // n if n else 0
    if per == 0:
        return np.zeros(0, np.int64)
    chosen = sample_positions(seed, np.arange(first, first + n), per, k,
                              None if gone is None else np.asarray(gone).reshape(n, per))
    return (np.arange(n)[:, None] * per + chosen).ravel()


# --- sample:K inside the graph: the drawn positions gathered from the map, never the whole map exported ---

def sample_layout(site: Site, shape: Sequence | None = None) -> tuple[int, int, int] | None:
    """(D, P, post) of one side of a site whose `positions` rows a graph Gather can draw from: examples on axis 0,
    rank ≥ 3, every dim after the batch static. D: the feature axis's size; P: the positions an example has (the
    other axes after the batch); post: the product of the axes after the feature axis. None for anything else
    (those sites keep the host's draw from the whole map: sample_rows). `shape`: a tensor's shape seen on a batch,
    read instead of the static one (its dims after axis 0)."""
    shape = site.input_shape if shape is None else ["N", *(int(d) for d in shape[1:])]
    rank, axis = site.rank, site.feature_axis
    if shape is None or rank is None or rank < 3 or axis is None or not 0 < axis < rank or batch_axis(site):
        return None
    dims = list(shape[1:])
    if len(dims) != rank - 1 or not all(isinstance(d, int) and d > 0 for d in dims):
        return None
    d = dims[axis - 1]
    per = int(np.prod(dims)) // d
    post = int(np.prod(dims[axis:]))
    return d, per, post


def sample_index(seed: int, first: int, n: int, k: int, layout: tuple[int, int, int]) -> np.ndarray:
    """[n, min(k, P)] int64: for each example of a batch (the first at index `first` of the data) and each of its
    drawn positions (sample_positions, the host's draw), the flat index of the position's feature 0 in the
    batch's tensor; feature j lies `post`·j further. Gathered in that order, the rows are sample_rows' rows of the
    `positions` features, value for value."""
    d, per, post = layout
    chosen = sample_positions(seed, np.arange(first, first + n), per, k)
    return (np.arange(n, dtype=np.int64)[:, None] * (d * per) + (chosen // post) * (d * post)
            + chosen % post).astype(np.int64)
