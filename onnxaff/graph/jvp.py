"""In-graph finite-difference Jacobian-vector products of a site's own subgraph, for the NLC.

The site's nodes are cloned twice, fed x + h and x − h, so the runtime computes the derivative
where the activation lives and only per-batch reductions leave it:

- elementwise sites: σ'(x) ≈ (σ(x+h) − σ(x−h))/2h with h = δ(|x| + |σ(x)| + s), s = min(1, RMS of the
  example's x). Relative to the site's scale, so a kink near 0 is not smoothed over at small scales (a fixed
  h = δ(1+|x|) made ReLU's NLC 1.06 at std 1e-3 and 0.85 at 1e-6 instead of 1.21); and never below δ|σ(x)|,
  so float32 resolves σ(x+h) − σ(x−h) to eps32/δ (without that term a sigmoid at std 1e-6 read 7.4, not 1.0).
  Then the batch's per-element sum of σ'² plus per-element mean and centred sum of squares of X and Y
  (merged exactly on the host);
- a Q → DQ pair inside the site (a quantized model) is left out of the clones: a step below its rounding
  would read a derivative of 0, and discovery named the function the site computes without the rounding;
- other sites (Softmax): the JVP along v_i = x_{i−1} − x̄ (another example of the batch, centred on the
  batch mean), h = δ along v, and per example ‖J v‖²; plus Y's per-element batch moments. Since the
  v_i run over every centred example of the batch, Σ_i v_i v_iᵀ is the batch's scatter matrix, and the
  estimate Σ_b Σ_i ‖J(x_i) v_i‖² / Σ_b Σ_i ‖y_i − ȳ_b‖² is exact for an affine map.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx
from onnx import TensorProto, helper

from onnxaff.graph.batch import batch_axis
from onnxaff.graph.sites import Site

STEP = 1e-3  # δ: float32 rounding costs ~eps32/δ ≈ 6e-5 relative, the central-difference bias ~δ²
TINY = 1e-30  # floor of the scale s: an all-zero batch still gets a non-zero step (float32 normal)
_INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class JvpOutputs:
    form: str  # "elementwise" | "directional"
    names: dict[str, str]  # statistic -> graph output


def _clone(builder, site: Site, entry: str, prefix: str) -> str:
    """The site's nodes again, reading `entry` instead of the site input; returns the new exit."""
    rename = {site.input: entry}
    for i in site.node_indices:
        original = builder.view.nodes[i]
        if i in builder.view.qdq_pairs:  # a Q → DQ pair inside the site: differentiated as the identity
            rename[original.output[0]] = rename.get(original.input[0], original.input[0])
            continue
        node = onnx.NodeProto()
        node.CopyFrom(original)
        node.name = builder.namer.fresh(f"{prefix}/{original.op_type}")
        for k, name in enumerate(node.input):
            node.input[k] = rename.get(name, name)
        for k, name in enumerate(node.output):
            if name:
                rename[name] = node.output[k] = builder.namer.fresh(f"{prefix}.{original.op_type.lower()}")
        builder.new_nodes.append(node)
    return rename[site.output]


def _roll(builder, x: str, k: int, prefix: str) -> str:
    """x shifted by k along the batch axis (example i gets example i − k)."""
    if builder.opset >= 10:
        def sl(a, b):
            return builder.node("Slice", [x, builder.ints([a], prefix), builder.ints([b], prefix),
                                          builder.ints([0], prefix)], prefix)
    else:
        def sl(a, b):
            return builder.node("Slice", [x], prefix, starts=[a], ends=[b], axes=[0])
    return builder.node("Concat", [sl(-k, _INT64_MAX), sl(0, -k)], prefix, axis=0)


def _batch_moments(builder, t: str, prefix: str, axis: int = 0) -> tuple[str, str]:
    """Per-element mean and centred sum of squares over the batch (`axis`: where the examples lie)."""
    mean = builder.reduce("ReduceMean", t, [axis], prefix, keepdims=1)
    centred = builder.node("Sub", [t, mean], prefix)
    m2 = builder.reduce("ReduceSum", builder.node("Mul", [centred, centred], prefix), [axis], prefix)
    return builder.reduce("ReduceMean", t, [axis], prefix), m2


def _scale(builder, x: str, site: Site, prefix: str) -> str:
    """min(1, RMS of each example's x), floored at TINY, shaped to broadcast over the example: the size of the
    step where |x| is small. Per example, not per batch, so the NLC does not depend on how examples are batched
    (batch size, shards, a resumed run)."""
    elem = builder.view.elem_type(x)
    square = builder.node("Mul", [x, x], prefix)
    rank, batch = site.side("x").rank, batch_axis(site)
    ms = (builder.reduce("ReduceMean", square, [a for a in range(rank) if a != batch], prefix, keepdims=1)
          if rank > 1 else square)
    rms = builder.node("Max", [builder.node("Sqrt", [ms], prefix), builder.scalar(TINY, elem, prefix)], prefix)
    return builder.node("Min", [rms, builder.scalar(1.0, elem, prefix)], prefix)


def add_jvp(builder, site: Site, prefix: str, step: float = STEP, masked: float | None = None) -> JvpOutputs | None:
    """Append the NLC statistics of one site; None where they cannot be built (non-float tensors). `masked`: the
    threshold of a site's value mask (graph.masks.SiteMask), positions at or below it are not perturbed."""
    elem = builder.view.elem_type(site.input)
    if elem not in (TensorProto.FLOAT, TensorProto.DOUBLE) or not site.node_indices or site.rank is None:
        return None
    batch = batch_axis(site)  # the examples' axis (graph.batch): the batch sums run over it
    if batch and not site.elementwise:
        return None  # the directional form rolls examples along axis 0 (such a site is skipped anyway)
    produced = {o for i in site.node_indices for o in builder.view.nodes[i].output}
    if site.output not in produced or not any(site.input in builder.view.nodes[i].input for i in site.node_indices):
        return None  # X and Y are not the site's own nodes' (a recurrent gate's steps stacked by Concats)
    x, p = site.input, f"{prefix}.jvp"
    names: dict[str, str] = {}
    if site.elementwise:
        size = builder.node("Add", [builder.node("Abs", [x], p), builder.node("Abs", [site.output], p)], p)
        h = builder.node("Mul", [builder.node("Add", [size, _scale(builder, x, site, p)], p),
                                 builder.scalar(step, elem, p)], p)
        plus = _clone(builder, site, builder.node("Add", [x, h], p), f"{p}.plus")
        minus = _clone(builder, site, builder.node("Sub", [x, h], p), f"{p}.minus")
        d = builder.node("Div", [builder.node("Sub", [plus, minus], p), builder.node("Add", [h, h], p)], p)
        names["d2sum"] = builder.reduce("ReduceSum", builder.node("Mul", [d, d], p), [batch], p)
        names["xmean"], names["xm2"] = _batch_moments(builder, x, p, batch)
        form = "elementwise"
    else:
        safe = x
        if masked is not None:  # masked positions (graph.masks) read as 0 for the direction, and are not moved
            from onnxaff.graph.masks import at_or_below

            low, zero = at_or_below(builder, x, masked, elem, p), builder.scalar(0.0, elem, p)
            safe = builder.node("Where", [low, zero, x], p)
        v = builder.node("Sub", [_roll(builder, safe, 1, p), builder.reduce("ReduceMean", safe, [0], p, keepdims=1)],
                         p)
        if masked is not None:
            v = builder.node("Where", [low, zero, v], p)
        hv = builder.node("Mul", [v, builder.scalar(step, elem, p)], p)
        plus = _clone(builder, site, builder.node("Add", [x, hv], p), f"{p}.plus")
        minus = _clone(builder, site, builder.node("Sub", [x, hv], p), f"{p}.minus")
        jv = builder.node("Div", [builder.node("Sub", [plus, minus], p), builder.scalar(2 * step, elem, p)], p)
        names["jv2"] = builder.reduce("ReduceSumSquare", jv, list(range(1, site.side("y").rank)), p)
        form = "directional"
    names["ymean"], names["ym2"] = _batch_moments(builder, site.output, p, batch)
    for key, name in names.items():
        rank = 1 if key == "jv2" else site.side("y" if key.startswith("y") else "x").rank - 1  # per example or element
        builder.new_outputs.append(helper.make_tensor_value_info(name, elem, [None] * rank))
    return JvpOutputs(form, names)
