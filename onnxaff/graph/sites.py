"""Site discovery: every non-linearity of a model, once, in forward order, with what analysis needs."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import numpy as np
import onnx

from onnxaff.graph import absorbed, patterns, qdq
from onnxaff.graph.elementwise import clip_bounds
from onnxaff.graph.expand import attention
from onnxaff.graph.layout import from_neighbours, sequence_layout
from onnxaff.graph.load import default_opset
from onnxaff.graph.recurrent import RECURRENT_OPS, gates
from onnxaff.graph.span import Span, unique_ids
from onnxaff.graph.stacked import Stack, find_stacks
from onnxaff.graph.subsites import SUBGRAPH_OPS, subgraph_sites
from onnxaff.graph.view import GraphView

# Single-node activations: op type -> kind. Min, Max and Clip are classified by their constants.
SINGLE_NODE_KINDS = {
    "Relu": "relu", "LeakyRelu": "leaky_relu", "PRelu": "prelu", "Elu": "elu", "Selu": "selu",
    "Celu": "celu", "Sigmoid": "sigmoid", "HardSigmoid": "hard_sigmoid", "HardSwish": "hardswish",
    "Tanh": "tanh", "Softplus": "softplus", "Softsign": "softsign", "Gelu": "gelu", "Mish": "mish",
    "ThresholdedRelu": "thresholded_relu", "Softmax": "softmax", "LogSoftmax": "log_softmax",
    "Swish": "swish", "Clip": "clip", "Min": "clamp_max", "Max": "clamp_min",
}
# onnxruntime's contrib fusions, found in models saved after ORT optimisation.
CONTRIB_KINDS = {"Gelu": "gelu", "FastGelu": "gelu_tanh", "QuickGelu": "quick_gelu"}
NOT_ELEMENTWISE = {"softmax", "log_softmax"}


@dataclass
class Site(Span):
    """One non-linearity: the tensor that enters it and the tensor that leaves it."""

    rank: int | None = None
    feature_axis: int | None = None
    layout: str | None = None
    elementwise: bool = True
    params: dict = field(default_factory=dict)
    node_indices: list[int] = field(default_factory=list, repr=False)
    # "activation" sites make the non-linearity signature; "pair" and "block" sites (a chosen or found
    # sub-network) are scored beside them. Those may join tensors of different ranks: Y's own shape.
    group: str = "activation"
    output_rank: int | None = None
    output_feature_axis: int | None = None
    output_layout: str | None = None
    # Inside a subgraph: (control node's index in the enclosing graph, graph attribute, op type); graph.subsites.
    scope: tuple | None = field(default=None, repr=False)

    def side(self, which: str) -> Site:
        """The site as the reduction of X ("x") or Y ("y") sees it."""
        if which == "x" or self.output_rank is None:
            return self
        return replace(self, rank=self.output_rank, feature_axis=self.output_feature_axis, layout=self.output_layout,
                       input_shape=self.output_shape)


# Attributes whose schema default is part of the function: a site states them whether written or not.
_DEFAULTED = {"LeakyRelu", "Elu", "Selu", "Celu", "HardSigmoid", "ThresholdedRelu", "Softmax", "LogSoftmax"}


def _schema_defaults(op: str, opset: int | None) -> dict:
    try:
        schema = onnx.defs.get_schema(op, opset or onnx.defs.onnx_opset_version(), "")
    except onnx.defs.SchemaError:
        return {}
    out = {}
    for name, a in schema.attributes.items():
        if a.default_value.type in (onnx.AttributeProto.FLOAT, onnx.AttributeProto.INT):
            out[name] = onnx.helper.get_attribute_value(a.default_value)
    return out


def _single_kind(view: GraphView, i: int) -> tuple[str, dict] | None:
    node = view.nodes[i]
    if node.domain == "com.microsoft":
        kind = CONTRIB_KINDS.get(node.op_type)
        if kind is None or len([n for n in node.input if n]) != 1:
            return None  # a bias input is split off first (graph/expand/fused.py)
        if node.op_type == "QuickGelu":  # x·σ(αx), α = 1.702 unless set: named as a Swish node is
            return _swish_kind(next((a.f for a in node.attribute if a.name == "alpha"), 1.702))
        return kind, {}
    if node.domain not in ("", "ai.onnx") or node.op_type not in SINGLE_NODE_KINDS:
        return None
    op = node.op_type
    params: dict = _schema_defaults(op, view.opset) if op in _DEFAULTED else {}
    for a in node.attribute:
        if a.type in (onnx.AttributeProto.FLOAT, onnx.AttributeProto.INT, onnx.AttributeProto.STRING):
            value = onnx.helper.get_attribute_value(a)
            params[a.name] = value.decode() if isinstance(value, bytes) else value
    if op == "Gelu":
        return ("gelu_tanh" if params.get("approximate") == "tanh" else "gelu"), {}
    if op == "Swish":  # x·σ(αx): named as the decomposed forms are
        return _swish_kind(params.get("alpha", 1.0))
    if op == "PRelu":
        slope = view.constant(node.input[1]) if len(node.input) > 1 else None
        if slope is None or slope.size > 4096:
            return "prelu", {}
        return "prelu", {"slope": np.float32(slope).astype(np.float64).tolist()}
    if op == "Clip":
        try:
            lo, hi = clip_bounds(view, node)
        except ValueError:
            return "clip", {}
        if (lo is None and hi is None) or (lo is not None and hi is not None and lo >= hi):
            return None  # the identity, or a constant: no non-linearity
        if lo == 0.0 and hi == 6.0:
            return "relu6", {"min": 0.0, "max": 6.0}
        if lo == 0.0 and hi is None:
            return "relu", {}
        return "clip", {"min": lo, "max": hi}
    if op in ("Min", "Max"):
        # A clamp against a scalar; Min/Max of two activations (maxout) is not a site.
        tensors = [n for n in node.input if n and view.scalar(n) is None]
        consts = [view.scalar(n) for n in node.input if n and view.scalar(n) is not None]
        if len(tensors) != 1 or len(consts) != 1:
            return None
        if op == "Max" and consts[0] == 0.0:
            return "relu", {}
        return SINGLE_NODE_KINDS[op], {"bound": consts[0]}
    return SINGLE_NODE_KINDS[op], params


def _swish_kind(alpha: float) -> tuple[str, dict]:
    beta = round(float(alpha), 6)
    if abs(beta - 1.0) <= 1e-4:
        return "silu", {}
    return ("quick_gelu", {}) if abs(beta - 1.702) <= 1e-4 else ("swish", {"beta": beta})


def _source_input(view: GraphView, i: int) -> str:
    node = view.nodes[i]
    tensors = [n for n in node.input if n and view.scalar(n) is None]
    return tensors[0] if tensors else node.input[0]


def settle_shape(view: GraphView, site: Site, layout: str = "auto") -> None:
    """Rank, feature axis and layout from site.input_shape (or a skip reason when unusable)."""
    shape = site.input_shape
    if shape is None or site.output_shape is None:
        site.skip_unknown_rank()
        return
    site.rank = len(shape)
    if site.rank != len(site.output_shape):
        site.status, site.reason = "skipped", "input and output ranks differ"
        return
    if site.rank == 0:
        site.status, site.reason = "skipped", "scalar tensor: no batch axis"
        return
    if site.rank == 1:
        site.feature_axis, site.layout = None, "per_example_scalar"
    elif site.kind in NOT_ELEMENTWISE and (site.rank >= 3 or int(site.params.get("axis", 1)) % 2 == 0):
        # Averaging along the normalisation axis of a softmax gives the constant 1/T: the features are
        # the normalised axis instead (the keys of an attention map), averaged over the others.
        axis = int(site.params.get("axis", -1 if (view.opset or 13) >= 13 else 1))
        site.feature_axis, site.layout = axis % site.rank, "softmax_axis"
        if site.feature_axis == 0:
            site.status, site.reason = "skipped", "normalised along the batch axis: its features would be the examples"
    elif site.rank == 2:
        site.feature_axis, site.layout = 1, "vector"
    elif site.rank == 3:  # [N, T, C], or [N, C, T] around a 1-D Conv (graph/layout.py)
        chosen = layout
        if chosen == "auto":
            chosen = sequence_layout(view, site.input) or sequence_layout(view, site.output) or "tokens"
        site.layout = "channels_first" if chosen == "channels_first" else "tokens"
        site.feature_axis = 1 if chosen == "channels_first" else 2
    else:
        chosen = layout
        if chosen == "auto":
            chosen = from_neighbours(view, site.input) or from_neighbours(view, site.output) or "channels_first"
        site.layout = chosen
        site.feature_axis = site.rank - 1 if chosen == "channels_last" else 1


def discover_sites(model: onnx.ModelProto, layout: str = "auto", infer_shapes: bool = True) -> list[Site]:
    """All sites of a model, in forward order.

    layout: 'auto' (read it off Conv/Transpose neighbours), 'channels_first' or 'channels_last';
    it only matters for rank-3+ tensors (rank 3 channels-last is `tokens`). infer_shapes=False when the model
    already went through `load_model`, which infers shapes by path (and then `find_sites(loaded.view)` reuses
    its index).
    """
    from onnxaff.graph.expand import expand
    from onnxaff.graph.toposort import sort_graph

    model = onnx.ModelProto.FromString(model.SerializeToString())  # the caller's proto is never rewritten
    sort_graph(model.graph)
    expand(model)  # deployed forms as `analyze` reads them (graph/expand)
    if infer_shapes:
        try:
            model = onnx.shape_inference.infer_shapes(model)
        except Exception:
            pass  # sites without shapes are reported as skipped, with the reason
    return find_sites(GraphView(model.graph, opset=default_opset(model)), layout)


def find_sites(view: GraphView, layout: str = "auto") -> list[Site]:
    """`discover_sites` over a graph already indexed (shapes as the view's graph holds them)."""
    if layout not in ("auto", "channels_first", "channels_last"):
        raise ValueError(f"unknown layout {layout!r}")
    entries: list[tuple[float, Site]] = []  # (forward position of the exit node, site)
    stacks = find_stacks(view, _single_kind)
    claimed: set[int] = {j for s in stacks for j in s.steps}
    entries += [(view.order[s.y_concat], _stack_site(view, s)) for s in stacks]
    for a in absorbed.find(view, claimed):  # before the islands, which would read a clamping pair as the identity
        claimed.update(a["nodes"])
        entries.append((view.order[a["exit"]], _absorbed_site(view, a)))
    for m in patterns.match(view, taken=set(claimed)):
        exit_node = m.candidate.nodes[-1]
        claimed.update(m.candidate.nodes)
        site = Site(
            index=-1, id=view.base_id(exit_node, m.candidate.exit), kind=m.kind,
            input=m.candidate.entry, output=m.candidate.exit,
            op_types=[view.nodes[i].op_type for i in m.candidate.nodes],
            nodes=[view.node_label(i) for i in m.candidate.nodes], params=m.params,
            node_indices=list(m.candidate.nodes),
        )
        entries.append((view.order[exit_node], site))
    entries += _node_sites(view, claimed, layout)
    entries.sort(key=lambda e: e[0])
    sites = [s for _, s in entries]
    for k, site in enumerate(sites):
        site.index = k
        site.elementwise = site.kind not in NOT_ELEMENTWISE
        quantized = None if "absorbed_by" in site.params else qdq.quantization(view, site.input, site.output)
        if quantized:  # X dequantized, Y quantized next: they carry that rounding (docs/sites.md)
            site.params = {**site.params, "quantized": quantized}
        if site.status == "ok" and site.scope is None:  # a subgraph's sites were settled in their own scope
            _settle_site(view, site, layout)
    unique_ids(sites)
    return sites


def _stack_site(view: GraphView, s: Stack) -> Site:
    """One activation's steps as one site (an unrolled recurrent gate): X and Y the stacked tensors."""
    x, y = view.nodes[s.x_concat].output[0], view.nodes[s.y_concat].output[0]
    return Site(index=-1, id=view.base_id(s.y_concat, y), kind=s.kind, input=x, output=y,
                op_types=[view.nodes[j].op_type for j in s.steps], nodes=[view.node_label(j) for j in s.steps],
                params=s.params, node_indices=list(s.steps))


def _absorbed_site(view: GraphView, a: dict) -> Site:
    """A ReLU the quantizer folded into a QuantizeLinear (or a QOperator node): X the float tensor it clamps."""
    params = {"absorbed_by": view.nodes[a["nodes"][0]].op_type, "max": a["max"]}
    if a["skipped"] is None:
        params["quantized"] = {"y": qdq.params_of(view, view.nodes[a["nodes"][0]])}
    return Site(index=-1, id=view.base_id(a["exit"], a["y"]), kind="relu", input=a["x"], output=a["y"],
                op_types=[view.nodes[j].op_type for j in a["nodes"]], nodes=[view.node_label(j) for j in a["nodes"]],
                params=params, node_indices=list(a["nodes"]), status="skipped" if a["skipped"] else "ok",
                reason=a["skipped"] or "")


def _recurrent_sites(view: GraphView, i: int) -> list[Site]:
    """The gates of a recurrent node left whole: skipped, under the ids they have when unrolled."""
    node = view.nodes[i]
    return [Site(index=-1, id=g.id, kind=SINGLE_NODE_KINDS.get(g.op, g.activation.lower()), input=node.input[0],
                 output=node.output[0] if node.output else "", op_types=[node.op_type], nodes=[view.node_label(i)],
                 node_indices=[i], status="skipped",
                 reason=f"a gate inside a {node.op_type} node that could not be unrolled (the warnings say why)")
            for g in gates(node)]


def _node_sites(view: GraphView, claimed: set[int], layout: str) -> list[tuple[float, Site]]:
    """Single-node activations outside the matched patterns, and the sites of If/Loop/Scan subgraphs."""
    entries: list[tuple[float, Site]] = []
    for i, node in enumerate(view.nodes):
        if i in claimed:
            continue
        if node.op_type in SUBGRAPH_OPS and node.domain in ("", "ai.onnx"):
            inner = subgraph_sites(view, i, layout, find_sites)
            entries += [(view.order[i] + (k + 1) / 1000.0, site) for k, site in enumerate(inner)]
            continue
        if node.op_type in RECURRENT_OPS and node.domain in ("", "ai.onnx"):
            entries += [(view.order[i] + k / 1000.0, site) for k, site in enumerate(_recurrent_sites(view, i))]
            continue
        if attention.is_fused(node):
            entries.append((view.order[i], _fused_attention_site(view, i)))
            continue
        hit = _single_kind(view, i)
        if hit is None or not node.output or not node.output[0]:
            continue
        kind, params = hit
        site = Site(
            index=-1, id=view.base_id(i, node.output[0]), kind=kind, input=_source_input(view, i),
            output=node.output[0], op_types=[node.op_type], nodes=[view.node_label(i)], params=params,
            node_indices=[i],
        )
        entries.append((view.order[i], site))
    return entries


def _fused_attention_site(view: GraphView, i: int) -> Site:
    """A fused attention node the expansion left fused: its softmax, listed as skipped with the reason."""
    node = view.nodes[i]
    why = attention.refusal(node, attention.Types(view.graph), view.opset or 1)
    return Site(
        index=-1, id=f"{attention.label(node)}/softmax", kind="softmax", input=node.input[0], output=node.output[0],
        op_types=[node.op_type], nodes=[view.node_label(i)], status="skipped",
        reason=f"inside a fused {node.op_type}: {why or 'the model was not expanded (load it with load_model)'}",
        node_indices=[i],
    )


def _settle_site(view: GraphView, site: Site, layout: str) -> None:
    site.input_shape, site.output_shape = view.shape(site.input), view.shape(site.output)
    # Activations keep their input's shape: one known side serves for both.
    site.input_shape = site.input_shape or site.output_shape
    site.output_shape = site.output_shape or site.input_shape
    if site.input in view.initializers:
        site.status, site.reason = "skipped", "input is a constant"
    else:
        settle_shape(view, site, layout)


def format_params(params: dict) -> str:
    """A site's parameters on one line: alpha=0.1, slope=[64 values]; a block's tensor and id lists
    (branches, contains) by name when short: branches=[h1], contains=[5 names]."""
    parts = []
    for k, v in params.items():
        if isinstance(v, list) and v and not any(isinstance(x, str) for x in v):
            parts.append(f"{k}=[{np.asarray(v, dtype=float).size} values]")
        elif isinstance(v, list):
            parts.append(f"{k}=[{', '.join(map(str, v))}]" if len(v) <= 3 else f"{k}=[{len(v)} names]")
        elif isinstance(v, dict):  # quantized: the sides that are (x, y)
            parts.append(f"{k}=[{', '.join(map(str, v))}]")
        elif isinstance(v, float):
            parts.append(f"{k}={v:.6g}")
        else:
            parts.append(f"{k}={v}")
    return ", ".join(parts)


def sanitize(name: str) -> str:
    """A tensor-name-safe form of a site id."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "site"
