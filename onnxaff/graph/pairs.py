"""Sites made of any two tensors: `--pairs IN:OUT` and the blocks that discovery finds.

X is IN, Y is OUT, each reduced with its own rank and feature axis. The nodes between them (descendants
of IN that OUT depends on) are the site's own nodes, so the non-linearity coefficient can replay them
on a perturbed IN; a pair with no path from IN to OUT still gets every metric that needs no Jacobian.
"""

from __future__ import annotations

import difflib

from onnxaff import defaults
from onnxaff.errors import ConfigError, OnnxaffError
from onnxaff.graph import flow
from onnxaff.graph.sites import Site, settle_shape
from onnxaff.graph.view import GraphView


def parse_pairs(text: str | None) -> list[tuple[str, str]]:
    """IN:OUT[,IN:OUT...]; a tensor name holding ':' can be given as IN::OUT."""
    if not text:
        return []
    pairs = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        a, sep, b = item.partition("::") if "::" in item else item.rpartition(":")
        if not sep or not a or not b:
            raise ConfigError("pairs", f"{{option}} item {item!r} is not IN:OUT (two tensor names)")
        pairs.append((a, b))
    return pairs


def _known(view: GraphView) -> set[str]:
    return set(view.graph_inputs) | set(view.producer) | set(view.initializers)


def _check_tensor(view: GraphView, name: str, known: set[str]) -> None:
    if name not in known:
        close = difflib.get_close_matches(name, sorted(known), n=3)
        hint = (f"; did you mean {', '.join(close)}?" if close else
                " (`onnxaff sites MODEL`, or onnxaff.discover_sites in Python, lists sites)")
        raise OnnxaffError(f"tensor {name!r} is not in the model{hint}")


def between(view: GraphView, x: str, y: str) -> list[int]:
    """Indices of the nodes on some path from tensor x to tensor y, in forward order."""
    return sorted(flow.between(view, x, y), key=view.order.__getitem__)


def tensor_pair_site(view: GraphView, x: str, y: str, *, kind: str, site_id: str, group: str, layout: str,
                     params: dict | None = None, nodes: list[int] | None = None) -> Site:
    """A Site from X to Y with each side's shape settled on its own (index assigned by the caller)."""
    inner = between(view, x, y) if nodes is None else sorted(nodes, key=lambda i: view.order[i])
    site = Site(index=-1, id=site_id, kind=kind, input=x, output=y,
                op_types=[view.nodes[i].op_type for i in inner], nodes=[view.node_label(i) for i in inner],
                params=dict(params or {}), node_indices=inner, group=group, elementwise=False)
    if x in view.initializers:
        site.status, site.reason = "skipped", "input is a constant"
        return site
    if x == y:
        site.status, site.reason = "skipped", "input and output are the same tensor"
        return site
    sides = []
    for tensor in (x, y):
        probe = Site(index=-1, id=site_id, kind=kind, input=tensor, output=tensor, op_types=[], nodes=[],
                     input_shape=view.shape(tensor), output_shape=view.shape(tensor))
        settle_shape(view, probe, layout)
        sides.append(probe)
    sx, sy = sides
    site.input_shape, site.output_shape = sx.input_shape, sy.input_shape
    bad = next((p for p in sides if not p.ok), None)
    if bad is not None:
        site.status, site.reason = bad.status, f"{'X' if bad is sx else 'Y'}: {bad.reason}"
        return site
    site.rank, site.feature_axis, site.layout = sx.rank, sx.feature_axis, sx.layout
    site.output_rank, site.output_feature_axis, site.output_layout = sy.rank, sy.feature_axis, sy.layout
    return site


def pair_sites(view: GraphView, pairs: list[tuple[str, str]], layout: str = defaults.LAYOUT) -> list[Site]:
    """One "pair" site per IN:OUT, in the order given (the caller numbers and orders all sites)."""
    known = _known(view)
    sites = []
    for x, y in pairs:
        _check_tensor(view, x, known)
        _check_tensor(view, y, known)
        sites.append(tensor_pair_site(view, x, y, kind="pair", site_id=f"pair:{x}->{y}", group="pair",
                                      layout=layout))
    return sites


def parse_block_kinds(text: str | None) -> list[str]:
    """residual|attention|mlp|all, comma-separated."""
    from onnxaff.graph.blocks import KINDS

    if not text:
        return []
    kinds: list[str] = []
    for k in (t.strip() for t in text.split(",")):
        if k == "all":
            kinds += [x for x in KINDS if x not in kinds]
        elif k in KINDS:
            kinds += [k] if k not in kinds else []
        elif k:
            raise ConfigError("blocks", f"{{option}} {k!r} is not one of {', '.join(KINDS)}, all")
    return kinds


def block_sites(view: GraphView, blocks: list, layout: str = defaults.LAYOUT) -> list[Site]:
    """One "block" site per residual / attention / mlp block (graph.blocks.discover_blocks), in order."""
    sites = []
    for b in blocks:
        site = tensor_pair_site(view, b.input, b.output, kind=f"{b.kind}_block", site_id=b.id, group="block",
                                layout=layout, params=b.params, nodes=b.node_indices)
        if not b.ok:
            site.status, site.reason = b.status, b.reason
        sites.append(site)
    return sites


def tensor_probe(view: GraphView, tensor: str, layout: str, index: int) -> Site:
    """One tensor as a site whose X and Y are both that tensor: how a stage's tracks get reduced."""
    probe = Site(index=index, id=f"track:{tensor}", kind="track", input=tensor, output=tensor, op_types=[],
                 nodes=[], input_shape=view.shape(tensor), output_shape=view.shape(tensor), group="track",
                 elementwise=False)
    settle_shape(view, probe, layout)
    return probe
