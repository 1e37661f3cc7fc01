"""How residual blocks chain and nest: the links `residual_stages` follows, and the stages themselves."""

from __future__ import annotations

from onnxaff.graph.blocks.block import Block
from onnxaff.graph.blocks.walk import MIXING, between, dims_compatible
from onnxaff.graph.flow import common_source
from onnxaff.graph.view import GraphView

_MAX_CONNECTOR = 24  # nodes allowed between two chained residual blocks (norms, activations)


def link(view: GraphView, blocks: list[Block]) -> None:
    """Fill the cross-references of residual blocks: after, nested_in, contains."""
    res = [b for b in blocks if b.kind == "residual"]
    sets = {b.index: set(b.node_indices) for b in blocks}
    adds = {b.node_indices[-1] for b in res if b.node_indices}
    for b in res:
        inner = [o for o in blocks if o is not b and sets[o.index] and sets[o.index] <= sets[b.index]]
        b.params["contains"] = [o.id for o in inner]
        outer = [o for o in res if o is not b and sets[b.index] < sets[o.index]]
        b.params["nested_in"] = min(outer, key=lambda o: len(sets[o.index])).id if outer else None
    top = {b.output: b for b in res if b.params["nested_in"] is None}
    for b in res:
        src = _stream_source(view, b.input, set(top), adds - {b.node_indices[-1]})
        b.params["after"] = top[src].id if src is not None and top[src] is not b else None


def _stream_source(view: GraphView, tensor: str, outputs: set[str], adds: set[int]) -> str | None:
    """The residual output that `tensor` is computed from through unweighted ops (ReLU, LayerNorm), if any."""
    t, used = tensor, 0
    while t not in outputs:
        p = view.producer.get(t)
        if p is None:
            return None
        data = view.parents(t)
        if t in view.fused_sum_of or len(data) == 1:  # one parent (or LayerNorm(sum) inside a fused node)
            src, region = data[0], {p}
        else:  # a decomposed norm: Sub(x, mean(x)), Div(·, sqrt(var)) ...
            src = common_source(view, data, steps=4 * _MAX_CONNECTOR) if data else None
            region = between(view, src, t) if src is not None else set()
        if src is None or not region or region & adds or any(view.nodes[j].op_type in MIXING for j in region):
            return None
        used += len(region)
        if used > _MAX_CONNECTOR:
            return None
        t = src
    return t


def residual_stages(blocks: list[Block], min_blocks: int = 1) -> list[list[Block]]:
    """Maximal runs of chained residual blocks of one shape: the h⁰ … h^L tracks of docs/metrics.md.

    Rule, over the ok residual blocks that are not nested in another one, in forward order: block B
    extends the run ending in block P when B's `after` is P (B's input is P's output, or is computed
    from it through unweighted ops only: the ReLU of a post-activation ResNet, the LayerNorm of a
    post-norm transformer, at most 24 nodes) and B's output shape equals P's. Otherwise B starts a
    new run if its input and output shapes are equal and its shortcut is not 'layout' (a
    downsampling block, or one whose input is the stream before a transpose, starts none: h⁰ and
    h^L must be comparable). Shapes are equal when the ranks are and every pair of
    integer dims is (symbolic dims match anything). Runs shorter than `min_blocks` are dropped;
    with one block, the line-shape score is 1 by construction. Tracks: `stage_tracks`.
    """
    runs: list[list[Block]] = []
    by_id: dict[str, list[Block]] = {}  # id of a run's last block -> the run
    for b in sorted(blocks, key=lambda b: b.index):
        if b.kind != "residual" or not b.ok or b.params.get("nested_in") or b.params.get("normalized_output"):
            continue  # a fused SkipLayerNorm without its sum output gives LayerNorm(h), not h
        run = by_id.pop(b.params.get("after") or "", None)
        if run is not None and dims_compatible(b.output_shape, run[-1].output_shape):
            run.append(b)
        elif b.params.get("shortcut") != "layout" and dims_compatible(b.input_shape, b.output_shape):
            run = [b]
            runs.append(run)
        else:
            continue
        by_id[b.id] = run
    return [r for r in runs if len(r) >= min_blocks]


def stage_tracks(stage: list[Block]) -> list[str]:
    """Tensor names h⁰ … h^L of a stage: the first block's input, then every block's output."""
    return [stage[0].input] + [b.output for b in stage] if stage else []
