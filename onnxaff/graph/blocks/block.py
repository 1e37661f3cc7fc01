"""The Block record and what each finder hands to discovery."""

from __future__ import annotations

from dataclasses import dataclass, field

from onnxaff.graph.span import Span

KINDS = ("residual", "attention", "mlp")


@dataclass
class Block(Span):
    """A sub-network between one input tensor and one output tensor: residual, attention or mlp."""

    params: dict = field(default_factory=dict)
    node_indices: list[int] = field(default_factory=list, repr=False)


@dataclass
class Found:
    """A block as a finder sees it, before its ends are moved, its nodes listed and its id made unique."""

    kind: str
    input: str
    output: str
    key: int  # the node that names the block: the residual Add, the output projection (or its bias Add)
    params: dict
