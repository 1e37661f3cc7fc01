"""Models as deployment tools leave them, rewritten into the standard ONNX that discovery reads.

Polygraphy's loaders that transform: onnxruntime's fused ops, recurrent nodes, model-local functions and the
like hide non-linearities inside one node (or a function) that no site rule can see into. Each expansion is
one module of this package with `NAME` and `apply(model) -> list[str]`: it rewrites the model in place into
standard ONNX computing the same outputs (each module's tests hold them equal in onnxruntime) and returns
notes for the signature's warnings (what it rewrote, what it could not). `expand` applies them in the order
of `EXPANSIONS`; the loaded model is the expanded one, the model's identity (sha256) the file's.

An expansion never reads weights into numpy: it wires the existing initializers (or external data) into the
new nodes, so external-data models stay on disk.
"""

from __future__ import annotations

import onnx

from onnxaff.graph.expand import attention, branches, functions, fused, qoperator, recurrent

# modules with NAME and apply(model) -> notes, in the order they run
EXPANSIONS: list = [functions, branches, qoperator, fused, recurrent, attention]


def expand(model: onnx.ModelProto) -> list[str]:
    """Apply every expansion to `model` in place; the notes of those that changed or refused something."""
    notes: list[str] = []
    for module in EXPANSIONS:
        notes += module.apply(model)
    return notes
