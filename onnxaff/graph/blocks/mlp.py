"""Feed-forward (mlp) blocks: projection → activation (optionally gated) → projection, ending linearly."""

from __future__ import annotations

from onnxaff.graph.blocks.block import Found
from onnxaff.graph.blocks.walk import is_projection, projection_source, single_user, through_bias
from onnxaff.graph.sites import Site
from onnxaff.graph.view import GraphView

# onnxruntime's fusions of bias + activation.
_FUSED_ACTIVATIONS = {"BiasGelu": "gelu", "FastGelu": "gelu_tanh", "Gelu": "gelu", "QuickGelu": "quick_gelu"}


def mlp_blocks(view: GraphView, sites: list[Site]) -> list[Found]:
    acts = {s.input: s for s in sites if s.elementwise}
    site_inputs = {s.input for s in sites}
    found: dict[tuple[str, str], Found] = {}
    for i in sorted(range(len(view.nodes)), key=view.order.__getitem__):
        if not is_projection(view, i):
            continue
        x = view.data_inputs(i)[0]
        h, _ = through_bias(view, view.nodes[i].output[0], i)
        act = _activation(view, h, acts)
        if act is None:
            continue
        t, kind, act_id = act
        t, gated = _gate(view, t, x)
        if t is None:
            continue
        c = single_user(view, t)
        if c is None or not is_projection(view, c) or view.data_inputs(c) != [t]:
            continue
        out, key = through_bias(view, view.nodes[c].output[0], c)
        if out in site_inputs:
            continue  # dense → act → dense → act: layers of an MLP classifier, not a feed-forward block
        if (x, out) not in found:
            found[(x, out)] = Found("mlp", x, out, key, {"activation": kind, "activation_site": act_id, "gated": gated})
    return list(found.values())


def _activation(view: GraphView, h: str, acts: dict[str, Site]) -> tuple[str, str, str] | None:
    """(output, kind, id) of the elementwise activation site, or fused bias + GELU node, applied to h."""
    site, fused = acts.get(h), single_user(view, h)
    if site is not None:
        return site.output, site.kind, site.id
    if fused is not None and view.nodes[fused].domain == "com.microsoft" and view.data_inputs(fused) == [h]:
        kind = _FUSED_ACTIVATIONS.get(view.nodes[fused].op_type)
        if kind is not None:
            return view.nodes[fused].output[0], kind, view.node_label(fused)
    return None


def _gate(view: GraphView, t: str, x: str) -> tuple[str | None, bool]:
    """Past dropout/casts and an optional gate act(x·W1)·(x·W3): (tensor, gated), or (None, _) for a foreign gate."""
    c = single_user(view, t)
    while c is not None and view.op(c) in ("Dropout", "Identity", "Cast"):
        t = view.nodes[c].output[0]
        c = single_user(view, t)
    if c is not None and view.op(c) == "Mul" and len(view.data_inputs(c)) == 2:
        other = next(u for u in view.data_inputs(c) if u != t)
        if projection_source(view, other) != x:
            return None, False
        return view.nodes[c].output[0], True
    return t, False
