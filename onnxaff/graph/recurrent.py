"""The gates of ONNX's recurrent nodes (LSTM, GRU, RNN): which activation each applies, and its site's name.

One table read by the expansion that unrolls the node (`graph/expand/recurrent.py`) and by discovery, which
lists a node left whole as skipped sites under the same ids, so a recurrent node is never silently absent.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx

RECURRENT_OPS = ("LSTM", "GRU", "RNN")
# Per op: (gate, index into the direction's activations) in the order the sites are listed. The
# sigmoid-like gates are one site each: they share a function but not a distribution (a forget gate
# saturates where an input gate does not), and D = H keeps the rows a score needs per dimension low.
GATES = {
    "LSTM": (("i", 0), ("f", 0), ("g", 1), ("o", 0), ("h", 2)),
    "GRU": (("z", 0), ("r", 0), ("g", 1)),
    "RNN": (("h", 0),),
}
DEFAULT_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"), "RNN": ("Tanh",)}
# The recurrent activation names ONNX defines that are standard single ops: name -> (op, parameters read
# from activation_alpha / activation_beta in order, with their defaults).
ACTIVATION_OPS = {
    "relu": ("Relu", ()), "tanh": ("Tanh", ()), "sigmoid": ("Sigmoid", ()), "softsign": ("Softsign", ()),
    "softplus": ("Softplus", ()), "leakyrelu": ("LeakyRelu", (("alpha", 0.01),)),
    "thresholdedrelu": ("ThresholdedRelu", (("alpha", 1.0),)), "elu": ("Elu", (("alpha", 1.0),)),
    "hardsigmoid": ("HardSigmoid", (("alpha", 0.2), ("beta", 0.5))),
}
_TAKES = {"affine": 2, "scaledtanh": 2, "leakyrelu": 1, "thresholdedrelu": 1, "elu": 1, "hardsigmoid": 2}


@dataclass(frozen=True)
class Gate:
    """One gate of one direction: its site id, and the single op (with attributes) it applies."""

    id: str
    direction: str
    gate: str
    activation: str  # the name the node's attribute gives
    op: str | None  # None: no standard single op computes it (Affine, ScaledTanh)
    attrs: dict = field(default_factory=dict)


def attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            value = onnx.helper.get_attribute_value(a)
            return [v.decode() if isinstance(v, bytes) else v for v in value] if isinstance(value, list) else value
    return default


def directions(node: onnx.NodeProto) -> list[str]:
    d = attr(node, "direction", b"forward")
    d = d.decode() if isinstance(d, bytes) else d
    return ["forward", "reverse"] if d == "bidirectional" else [d]


def node_label(node: onnx.NodeProto) -> str:
    """The node's name, else its op and first output: the prefix of its sites' ids."""
    return node.name or f"{node.op_type}:{next((o for o in node.output if o), '')}"


def gates(node: onnx.NodeProto) -> list[Gate]:
    """Every gate's site of a recurrent node, per direction, activations as its attributes set them."""
    dirs = directions(node)
    per_dir = len(DEFAULT_ACTIVATIONS[node.op_type])
    names = attr(node, "activations") or list(DEFAULT_ACTIVATIONS[node.op_type]) * len(dirs)
    alphas, betas = list(attr(node, "activation_alpha") or []), list(attr(node, "activation_beta") or [])
    resolved = []
    for name in names:  # activation_alpha/beta are consumed in order by the functions that take them
        op, params = ACTIVATION_OPS.get(name.lower(), (None, ()))
        values = {}
        for pname, default in params:
            source = alphas if pname == "alpha" else betas
            values[pname] = float(source.pop(0)) if source else default
        if op is None:
            for _ in range(_TAKES.get(name.lower(), 0)):
                (alphas.pop(0) if alphas else None, betas.pop(0) if betas else None)
        resolved.append((name, op, values))
    label = node_label(node)
    out = []
    for k, direction in enumerate(dirs):
        for gate, j in GATES[node.op_type]:
            if node.op_type == "LSTM" and gate == "f" and attr(node, "input_forget", 0):
                continue  # coupled: f = 1 − i has no activation of its own
            name, op, values = resolved[k * per_dir + j]
            out.append(Gate(f"{label}/{direction}/{gate}", direction, gate, name, op, values))
    return out
