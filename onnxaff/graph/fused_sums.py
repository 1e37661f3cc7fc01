"""onnxruntime's fused residual sum + LayerNorm (SkipLayerNormalization): the sum, output 3 when exported, is the
tensor the normalised outputs are computed from, so data-flow walks pass through it."""

from __future__ import annotations

import onnx

SKIP_NORMS = {"SkipLayerNormalization", "SkipSimplifiedLayerNormalization"}


def skip_sums(nodes: list[onnx.NodeProto]) -> dict[str, list[str]]:
    """Sum (output 3) of each fused SkipLayerNormalization -> its other outputs."""
    return {node.output[3]: [o for o in node.output[:3] if o] for node in nodes
            if node.domain == "com.microsoft" and node.op_type in SKIP_NORMS and len(node.output) > 3
            and node.output[3]}
