"""Site discovery: every non-linearity of a model, once, in forward order, with what analysis needs.

The passes that find them are graph/passes/, one module each; this runs them, discovers the subgraphs they hand
back (If/Loop/Scan bodies, graph/subsites.py) as graphs of their own, and settles each site's shape.
"""

from __future__ import annotations

import re

import numpy as np
import onnx

from onnxaff import defaults
from onnxaff.graph import qdq
from onnxaff.graph.batch import FRONT, Axis, BatchFlow, Lost, Mixed, batch_symbols, propagated_shapes
from onnxaff.graph.infer import infer
from onnxaff.graph.layout import from_neighbours, sequence_layout
from onnxaff.graph.load import default_opset
from onnxaff.graph.passes import passes
from onnxaff.graph.site import NOT_ELEMENTWISE, Site
from onnxaff.graph.span import unique_ids
from onnxaff.graph.subsites import Body
from onnxaff.graph.view import GraphView

__all__ = ["NOT_ELEMENTWISE", "Site", "discover_sites", "find_sites", "format_params", "place_batch", "run_passes",
           "sanitize", "settle_shape"]

def settle_shape(view: GraphView, site: Site, layout: str = defaults.LAYOUT) -> None:
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


def discover_sites(model: onnx.ModelProto, layout: str = defaults.LAYOUT, infer_shapes: bool = True) -> list[Site]:
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
    if infer_shapes:  # as load_model infers them (a value_info the graph contradicts is not kept); never failing:
        model = infer(model, None)[0]  # sites without shapes are reported as skipped, with the reason
    return find_sites(GraphView(model.graph, opset=default_opset(model)), layout)


def find_sites(view: GraphView, layout: str = defaults.LAYOUT, batch_axes: dict | None = None,
               follow_batch: bool = True) -> list[Site]:
    """`discover_sites` over a graph already indexed (shapes as the view's graph holds them): the passes
    (graph/passes/) in their order, each on the nodes no earlier one took, the subgraphs they hand back discovered
    the same way, then every site settled, on the batch axis followed from the inputs (`batch_axes`: input name ->
    axis, 0 for the others; graph.batch) unless follow_batch is False (a subgraph, whose inputs are no examples)."""
    if layout not in ("auto", "channels_first", "channels_last"):
        raise ValueError(f"unknown layout {layout!r}")
    entries, inner = [], {}
    for position, found in run_passes(view, layout):
        if isinstance(found, Body):  # a control node's sites follow it, its bodies' in order
            inner.setdefault(position, []).extend(found.adopt(find_sites(found.view, layout, follow_batch=False)))
        else:
            entries.append((position, found))
    entries += [(position + (k + 1) / 1000.0, s) for position, found in inner.items() for k, s in enumerate(found)]
    sites = [s for _, s in sorted(entries, key=lambda e: e[0])]
    for k, site in enumerate(sites):
        site.index = k
        site.elementwise = site.kind not in NOT_ELEMENTWISE
        quantized = None if "absorbed_by" in site.params else qdq.quantization(view, site.input, site.output)
        if quantized:  # X dequantized, Y quantized next: they carry that rounding (docs/sites.md)
            site.params = {**site.params, "quantized": quantized}
        if site.status == "ok" and site.scope is None:  # a subgraph's sites were settled in their own scope
            _settle_site(view, site, layout)
    if follow_batch:
        place_batch(view, sites, layout, batch_axes)
    unique_ids(sites)
    return sites


def run_passes(view: GraphView, layout: str = defaults.LAYOUT,
               misses: list | None = None) -> list[tuple[float, Site | Body]]:
    """The registered passes (graph/passes/) in their order, each on the nodes no earlier one took: (forward
    position of the exit node, Site) each, unsettled, or (the control node's, Body) for a subgraph `find_sites`
    discovers. `misses`, when given, is handed to every pass, which adds (stage, region, Miss) for each candidate
    it refused: `find_sites` and `sites --explain` run this same loop, so the refusals are those of discovery,
    after what the earlier passes took."""
    entries: list[tuple[float, Site | Body]] = []
    taken: set[int] = set()
    for step in passes():
        found = step.find(view, taken, layout, misses)
        taken.update(i for _, site in found if isinstance(site, Site) for i in site.node_indices)
        entries += found
    return entries


def _settle_site(view: GraphView, site: Site, layout: str) -> None:
    site.input_shape, site.output_shape = view.shape(site.input), view.shape(site.output)
    # Activations keep their input's shape: one known side serves for both.
    site.input_shape = site.input_shape or site.output_shape
    site.output_shape = site.output_shape or site.input_shape
    if site.input in view.initializers:
        site.status, site.reason = "skipped", "input is a constant"
    else:
        settle_shape(view, site, layout)


def _input_axes(view: GraphView, batch_axes: dict | None) -> dict | None:
    """Input name -> its batch axis (None: rank 0, or a fixed dim there that is not the others' batch, as a
    mask [T, T] beside inputs [B, T, E]); None where a fixed batch of 1 leaves nothing to follow."""
    given, axes, dims = dict(batch_axes or {}), {}, {}
    for name in view.graph_inputs:
        shape = view.shape(name)
        if shape is not None and not shape:
            axes[name] = None
            continue
        axis = int(given.get(name, 0))
        axes[name] = axis % len(shape) if shape else axis
        dims[name] = shape[axes[name]] if shape else "?"
    symbolic = any(isinstance(d, str) for d in dims.values())
    fixed = [d for d in dims.values() if isinstance(d, int)]
    batch = None if symbolic or not fixed else max(set(fixed), key=fixed.count)
    if batch == 1:
        return None  # one example per batch: no axis to tell apart, and none to mix
    for name, d in dims.items():
        if isinstance(d, int) and d != batch and name not in given:
            axes[name] = None
    # A symbolic batch: the symbol most inputs of rank ≥ 2 hold there (or a --batch-axis input's). An input holding
    # another named symbol at its axis (a cache_position [T], lengths [L]) carries no batch: taken for one, its
    # reduction read as mixing the examples and skipped every site it reached.
    named = [dims[n] for n in dims if isinstance(dims[n], str) and dims[n] != "?" and (n in given or
                                                                                     len(view.shape(n) or ()) >= 2)]
    symbol = max(named, key=lambda d: (d in {dims[n] for n in given if n in dims}, named.count(d))) if named else None
    for name, d in dims.items():
        if symbol is not None and isinstance(d, str) and d not in ("?", symbol) and name not in given:
            axes[name] = None
    return axes


def place_batch(view: GraphView, sites: list[Site], layout: str, batch_axes: dict | None = None) -> None:
    """Each settled site on its batch axis (graph.batch): one the examples were mixed in before, or whose axis
    is provably not axis 0 and was lost on the way, is skipped with the reason; one whose examples lie on axis
    k > 0 gets params["batch_axis"] = k, its shapes read batch first (its reduction moves the axis to the front).
    A pair or block (X and Y of their own ranks) is read with the examples on axis 0, or skipped."""
    inputs = _input_axes(view, batch_axes)
    pending = [s for s in sites if s.ok and s.scope is None and s.rank]
    if inputs is None or not pending:
        return
    flow, cache = BatchFlow(view, inputs), {}
    symbols = batch_symbols(view, inputs)

    def state(tensor: str):
        got = flow.state(tensor)
        if isinstance(got, Lost):
            if "shapes" not in cache:  # computed once, only where needed
                cache["shapes"] = propagated_shapes(view)
            got = _by_symbol(cache["shapes"].get(tensor), symbols, got)
        return got

    for site in pending:
        x, y = state(site.input), state(site.output)
        if site.group != "activation":
            why = next((f"{side}: {r}" for side, r in (("X", _refusal(x)), ("Y", _refusal(y))) if r), None)
            off = next((f"{side} holds the examples on axis {s.axis}" for side, s in (("X", x), ("Y", y))
                        if isinstance(s, Axis) and s != FRONT), None)
            if why or off:
                site.status, site.reason = "skipped", why or f"{off}: a pair or block is read with them on axis 0"
        elif _refusal(x):
            site.status, site.reason = "skipped", _refusal(x)
        elif isinstance(y, Axis) and y != x:
            site.status, site.reason = "skipped", "its input and output hold the examples on different axes"
        elif isinstance(x, Axis) and x != FRONT:
            _move_batch(view, site, layout, x.axis)


def _refusal(state) -> str | None:
    """Why a tensor's rows cannot be its examples (graph.batch), None when they can."""
    if isinstance(state, Mixed):
        return (f"the examples of a batch are mixed upstream ({state.why}, at {state.node}): its scores would "
                "depend on the batch size")
    if isinstance(state, Lost):
        return f"the batch axis is lost upstream ({state.why}, at {state.node})"
    if isinstance(state, Axis) and state.outer != 1:
        return f"the batch is merged into axis {state.axis} after other dims: its rows would not be examples"
    return None


def _by_symbol(shape, symbols: set, lost: Lost):
    """Where the follow was lost for want of a shape: the one axis whose dim is the batch symbol (shapes with
    data propagation), axis 0 when nothing says otherwise (as before), Lost when axis 0 is a fixed size."""
    if shape is None:
        return FRONT
    hits = [k for k, d in enumerate(shape) if d in symbols]
    if len(hits) == 1:
        return Axis(hits[0])
    if symbols and isinstance(shape[0], int):
        return Lost(lost.node, f"{lost.why}; axis 0 has the fixed size {shape[0]}")
    return FRONT


def _move_batch(view: GraphView, site: Site, layout: str, axis: int) -> None:
    """A site whose examples lie on `axis`: its shapes batch first, settled again; a normalisation is skipped."""
    if site.kind in NOT_ELEMENTWISE:
        site.status, site.reason = "skipped", f"normalised with the batch on axis {axis}, not 0: not supported"
        return
    if site.rank != len(site.output_shape or ()) or axis >= site.rank:
        site.status, site.reason = "skipped", f"the batch is on axis {axis} and the output's rank differs"
        return

    def front(shape):
        return [shape[axis], *shape[:axis], *shape[axis + 1:]]

    site.params = {**site.params, "batch_axis": axis}
    site.input_shape, site.output_shape = front(site.input_shape), front(site.output_shape)
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
