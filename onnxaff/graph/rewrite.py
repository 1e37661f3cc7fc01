"""The augmented model: per site, nodes that reduce X and Y to [rows, D] inside the graph.

Only the reduced features leave the runtime, never the activation maps, so the analysis costs about
one extra read of each activation. A raw mode exposes the full tensors for debugging and for the
naive baseline of the benchmarks.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

import onnx
from onnx import TensorProto, helper

from onnxaff import defaults
from onnxaff.graph.batch import batch_axis
from onnxaff.graph.masks import graph_features
from onnxaff.graph.reduction import (
    FLOAT_TYPES,
    REDUCTIONS,
    GraphBuilder,
    batch_first,
    feature_dim,
    feature_rounding,
    graph_mode,
    sample_layout,
)
from onnxaff.graph.sites import Site, sanitize
from onnxaff.graph.view import GraphView


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
    # reduce="sample:K" drawn in the graph: (the int64 [n, K] input naming the positions, its layout (D, P, post));
    # the batch's feed gives it (graph.reduction.sample_index), and x, y are the drawn rows already
    sample: tuple[str, tuple[int, int, int]] | None = None

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


def augment_model(
    model: onnx.ModelProto, sites: list[Site], reduce: str = graph_mode(defaults.REDUCE), raw: bool = False,
    jvp: bool = False, view: GraphView | None = None, masks: dict | None = None, sample: int | None = None,
    sample_sites: Collection[int] = (), sample_shapes: Mapping[int, tuple[list, list]] | None = None,
) -> tuple[onnx.ModelProto, dict[int, SiteOutputs]]:
    """A copy of `model` whose extra outputs are each ok site's features; original outputs kept first.

    jvp=True also adds the finite-difference statistics of the non-linearity coefficient (graph.jvp).
    view: `model`'s index when the caller has one (`LoadedModel.view`), so the copy is not indexed again.
    masks: site index -> SiteMask (graph.masks.site_masks), the sites whose features leave masked positions out.
    sample: K of reduce="sample:K" (`reduce` is then "positions"): the sites of `sample_sites` that can
    (`_samples_in_graph`) gather their K positions an example in the graph, from an index input the feed gives;
    the others export every position, drawn from on the host (graph.reduction.sample_rows), to the same rows.
    sample_shapes: site index -> (X's shape, Y's shape) seen on a probe batch, for a site whose static shapes are
    symbolic: it gathers at those (its Shape outputs stay, so each batch can be checked against them).
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
        drawn = (_sample_input(builder, site, sample, (sample_shapes or {}).get(site.index)) if sample is not None
                 and not raw and mask is None and site.index in sample_sites and reduce == "positions" else None)
        for side, tensor in (("x", site.input), ("y", site.output)):
            # a masked mean is taken in float64, in the graph and on the host alike
            doubles.append(builder.view.elem_type(tensor) == TensorProto.DOUBLE or (
                mask is not None and mask.applies(side) and reduce in ("mean", "reference")))
            elem = builder.view.elem_type(tensor)
            elem = elem if (raw or elem in FLOAT_TYPES) else TensorProto.FLOAT
            if raw:
                inner = builder.raw(tensor, f"{prefix}.{side}")
            elif mask is not None and mask.applies(side):
                t, seen, source = _front(builder, tensor, site.side(side), site.input, prefix)
                inner, gone = graph_features(builder, t, seen, reduce, mask, side, source, f"{prefix}.{side}")
                missing.append(_exported(gone, TensorProto.DOUBLE, [None], exported, new_outputs))
                elem = TensorProto.DOUBLE if reduce in ("mean", "reference") else elem
            elif drawn is not None:
                inner = builder.sampled_features(tensor, drawn[1], drawn[0], f"{prefix}.{side}")
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
        # raw arrays carry their shapes; reduced features need them told (where P is symbolic, and wherever the
        # graph draws: each batch is checked against the layout drawn at, axis 0 included, which no static shape
        # promises to be the batch's n)
        if not raw and (rounding is None or drawn is not None):
            shapes = tuple(_shape_output(builder, t, f"{prefix}.{side}", exported, new_outputs)
                           for side, t in (("x", site.input), ("y", site.output)))
        outputs[site.index] = SiteOutputs(names[0], names[1], dim, jvp_outputs, rounding, shapes, tuple(doubles),
                                          mask=mask, missing=tuple(missing), sample=drawn)
        groups += [position] * (len(builder.new_nodes) - len(groups))
    augmented.graph.output.extend(new_outputs)
    _schedule(augmented, builder, groups)
    return augmented, outputs


SAMPLE_INPUT = "onnxaff/sample/"


def _sample_input(builder: GraphBuilder, site: Site, k: int,
                  shapes: tuple[list, list] | None = None) -> tuple[str, tuple[int, int, int]] | None:
    """(index input, layout) of a site whose K positions an example the graph can gather: X and Y of one static
    layout (graph.reduction.sample_layout; `shapes`: X's and Y's seen on a probe batch where the static ones are
    symbolic); None keeps the host's draw. One input serves every site of the same layout and K."""
    x_shape, y_shape = shapes if shapes is not None else (None, None)
    layout = sample_layout(site.side("x"), x_shape)
    if (layout is None or layout != sample_layout(site.side("y"), y_shape) or builder.opset < 5 or k < 1
            or site.scope is not None):
        return None
    key = ("sample_input", layout, k)
    if key not in builder.cache:
        d, per, post = layout
        name = builder.namer.fresh(f"{SAMPLE_INPUT}{d}x{per}x{post}")
        builder.model.graph.input.append(
            helper.make_tensor_value_info(name, TensorProto.INT64, [f"{name}.n", min(k, per)]))
        builder.cache[key] = name
    return builder.cache[key], layout


def shape_probe(model: onnx.ModelProto, tensors: list[str]) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of `model` with an int64 output giving each tensor's shape (its names, in order); no data is read."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    builder, exported = GraphBuilder(probe), {}
    names = [_shape_output(builder, t, "onnxaff/probe", exported, builder.new_outputs) for t in tensors]
    probe.graph.node.extend(builder.new_nodes)
    probe.graph.output.extend(builder.new_outputs)
    return probe, names


def _front(builder: GraphBuilder, tensor: str, site: Site, source: str, prefix: str) -> tuple[str, Site, str]:
    """(tensor, site, X) for a masked reduction: a site whose examples lie off axis 0 (graph.batch) gets both
    tensors moved batch first and is read as a batch-first site (the mask's axes are the batch-first ones)."""
    axis = batch_axis(site)
    if not axis:
        return tensor, site, source
    moved = []
    for t in (tensor, source):
        key = ("batch_first", t, axis)
        if key not in builder.cache:
            builder.cache[key] = builder.node("Transpose", [t], prefix, perm=batch_first(site.rank, axis))
        moved.append(builder.cache[key])
    return moved[0], replace(site, params={k: v for k, v in site.params.items() if k != "batch_axis"}), moved[1]


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
