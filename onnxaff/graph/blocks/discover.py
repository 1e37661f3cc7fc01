"""Block discovery: the finders of each kind over one GraphView, then ids, order and cross-references."""

from __future__ import annotations

import onnx

from onnxaff.graph.blocks.attention import attention_blocks, attention_cores
from onnxaff.graph.blocks.block import KINDS, Block, Found
from onnxaff.graph.blocks.mlp import mlp_blocks
from onnxaff.graph.blocks.residual import residual_blocks
from onnxaff.graph.blocks.stages import link
from onnxaff.graph.blocks.walk import between, extend
from onnxaff.graph.load import default_opset
from onnxaff.graph.sites import Site, find_sites
from onnxaff.graph.span import unique_ids
from onnxaff.graph.view import GraphView


def discover_blocks(
    model: onnx.ModelProto, kinds: tuple[str, ...] | list[str] = KINDS, infer_shapes: bool = True,
    sites: list[Site] | None = None,
) -> list[Block]:
    """All residual, attention and mlp blocks of a model, in forward order of their output.

    kinds: which of KINDS to report. infer_shapes=False when the model went through `load_model`
    (shapes already inferred; `find_blocks(loaded.view)` then reuses its index). sites: the model's
    `discover_sites` result, when the caller has it (mlp blocks are recognised by their activation
    site). Blocks whose input or output has no inferred rank are 'skipped', as sites are. params, per kind:
    residual: shortcut ('identity' | 'layout' | 'projection'), skip and branches (the Add's
    operands), after (id of the residual block whose output feeds this one's input, directly or
    through unweighted ops: the link `residual_stages` follows), nested_in, contains (ids of the
    blocks inside), and fused / normalized_output for onnxruntime's SkipLayerNormalization.
    attention: form ('decomposed' or the fused op), out_projection (found or not), cores (softmaxes
    merged into the block: one per head when heads are computed apart), cross_attention_memory.
    mlp: activation (site kind), activation_site (its id), gated.
    """
    _check_kinds(kinds)
    if infer_shapes:
        try:
            model = onnx.shape_inference.infer_shapes(model)
        except Exception:
            pass  # blocks without shapes are reported as skipped, with the reason
    return find_blocks(GraphView(model.graph, opset=default_opset(model)), kinds, sites)


def _check_kinds(kinds) -> None:
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"unknown block kind(s) {unknown}; known: {', '.join(KINDS)}")


def find_blocks(view: GraphView, kinds: tuple[str, ...] | list[str] = KINDS,
                sites: list[Site] | None = None) -> list[Block]:
    """`discover_blocks` over a graph already indexed (shapes as the view's graph holds them)."""
    _check_kinds(kinds)
    if sites is None:
        sites = find_sites(view)
    site_nodes = {i for s in sites for i in s.node_indices}
    cores = attention_cores(view)
    found: list[Found] = []
    if "residual" in kinds:
        found.extend(residual_blocks(view, site_nodes, {j for c in cores for j in c.score_nodes}))
    if "attention" in kinds:
        found.extend(attention_blocks(view, cores))
    if "mlp" in kinds:
        found.extend(mlp_blocks(view, sites))
    entries = [_block(view, f) for f in found]
    entries.sort(key=lambda e: e[0])
    blocks = [b for _, b in entries]
    for k, b in enumerate(blocks):
        b.index = k
    unique_ids(blocks)
    link(view, blocks)
    return blocks


def _block(view: GraphView, f: Found) -> tuple[tuple[int, int], Block]:
    """The block a finder found, its ends moved to module boundaries, with its sort key (forward order, kind)."""
    x, out = (f.input, f.output) if f.kind == "residual" else extend(view, f.input, f.output)
    order = sorted(between(view, x, out), key=view.order.__getitem__)
    blk = Block(
        index=-1, id=view.base_id(f.key, out), kind=f.kind, input=x, output=out,
        nodes=[view.node_label(i) for i in order], op_types=[view.op(i) for i in order], params=dict(f.params),
        input_shape=view.shape(x), output_shape=view.shape(out), node_indices=order,
    )
    if blk.input_shape is None or blk.output_shape is None:
        blk.skip_unknown_rank()
    return (view.tensor_order(out), KINDS.index(f.kind)), blk
