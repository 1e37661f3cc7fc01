"""Where a site tensor keeps its channels, read off the graph around it.

Rank 4 and above: channels first (NCHW) or last (NHWC), from the nearest Conv-like op or layout Transpose up or
down the graph. Rank 3: `[N, T, C]` (tokens) unless a 1-D Conv, pooling or normalisation over channels produces
or reads the tensor as `[N, C, T]` (channels first), through ops that keep both its rank and its layout; a
Transpose [0, 2, 1] on the way flips what was found. The path is strict (every tensor on it of rank 3), so a
transformer's tokens never pick up its patch embedding's Conv2d through a Flatten or Reshape.
"""

from __future__ import annotations

from collections import deque

from onnxaff.graph import patterns
from onnxaff.graph.view import GraphView

CHANNELS_FIRST_OPS = {
    "Conv", "ConvTranspose", "BatchNormalization", "MaxPool", "AveragePool", "GlobalAveragePool",
    "GlobalMaxPool", "InstanceNormalization", "LRN", "LpPool", "DepthToSpace", "SpaceToDepth",
    "ConvInteger", "QLinearConv",
}
LAYOUT_TRANSPARENT = patterns.region.EVALUABLE | {
    "Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "HardSwish", "Softsign", "Gelu", "Mish",
    "ThresholdedRelu", "Dropout", "Concat", "Sum", "QuantizeLinear", "DequantizeLinear",
}
# A sequence keeps its layout through these too (causal padding, cropping, a GLU's halves); the rank-3 walk
# checks every tensor's rank, so they cannot lead it to another rank's op.
SEQUENCE_TRANSPARENT = LAYOUT_TRANSPARENT | {"Pad", "Slice", "Split"}
_STEPS = 24


def _perm(node) -> list[int] | None:
    return next((list(a.ints) for a in node.attribute if a.name == "perm"), None)


def from_neighbours(view: GraphView, tensor: str) -> str | None:
    """channels_first / channels_last of a rank-4+ tensor, read off the nearest layout-defining op up or down."""
    for direction in ("up", "down"):
        frontier, seen = [tensor], set()
        for _ in range(_STEPS):
            if not frontier:
                break
            t = frontier.pop(0)
            if t in seen:
                continue
            seen.add(t)
            nodes = [view.producer[t]] if direction == "up" and t in view.producer else []
            if direction == "down":
                nodes = view.consumers.get(t, [])
            for j in nodes:
                n = view.nodes[j]
                if n.op_type in CHANNELS_FIRST_OPS:
                    return "channels_first"
                if n.op_type == "Transpose":
                    perm = _perm(n)
                    if direction == "up" and perm == [0, 2, 3, 1]:
                        return "channels_last"
                    if direction == "down" and perm == [0, 3, 1, 2]:
                        return "channels_last"
                    if direction == "up" and perm == [0, 3, 1, 2]:
                        return "channels_first"
                    continue
                if n.op_type in LAYOUT_TRANSPARENT:
                    nxt = n.input if direction == "up" else n.output
                    frontier.extend(x for x in nxt if x and view.scalar(x) is None)
    return None


def _rank3(view: GraphView, name: str) -> bool:
    shape = view.shape(name)
    return shape is not None and len(shape) == 3


def sequence_layout(view: GraphView, tensor: str) -> str | None:
    """channels_first when the nearest 1-D channel op (up or down, through rank-3 tensors only) sees `tensor` as
    [N, C, T], tokens when it does so across a Transpose [0, 2, 1]; None when the walk meets none."""
    for direction in ("up", "down"):
        frontier, seen, steps = deque([(tensor, False)]), set(), 0
        while frontier and steps < _STEPS:
            t, flipped = frontier.popleft()
            if (t, flipped) in seen or (t != tensor and not _rank3(view, t)):
                continue
            seen.add((t, flipped))
            steps += 1
            if direction == "up":
                nodes = [view.producer[t]] if t in view.producer else []
            else:  # read as the data input (a Conv's weights or a BatchNormalization's scale say nothing)
                nodes = [j for j in view.consumers.get(t, []) if view.nodes[j].input[0] == t
                         or view.nodes[j].op_type not in CHANNELS_FIRST_OPS]
            for j in nodes:
                n = view.nodes[j]
                if n.domain not in ("", "ai.onnx", "com.microsoft"):
                    continue
                if n.op_type in CHANNELS_FIRST_OPS:
                    return "tokens" if flipped else "channels_first"
                if n.op_type == "Transpose":
                    if _perm(n) == [0, 2, 1]:
                        frontier.extend((x, not flipped) for x in (n.input if direction == "up" else n.output) if x)
                    continue
                if n.op_type in SEQUENCE_TRANSPARENT:
                    nxt = n.input if direction == "up" else n.output
                    frontier.extend((x, flipped) for x in nxt if x and view.scalar(x) is None)
    return None
