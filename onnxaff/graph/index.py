"""What the lowest graph modules read of a graph's index: GraphView is one, defined above them.

The data-flow walks (`flow.py`) and the constant folder (`constants.py`) are used by GraphView itself, so they
name the few fields they read here instead of importing the view: no module below the view imports it.
"""

from __future__ import annotations

from typing import Protocol

import onnx


class GraphIndex(Protocol):
    nodes: list[onnx.NodeProto]
    producer: dict[str, int]  # tensor -> index of the node that makes it
    consumers: dict[str, list[int]]  # tensor -> indices of the nodes that read it
    initializers: dict[str, onnx.TensorProto]

    @property
    def order(self) -> dict[int, int]: ...  # node index -> position in the forward pass

    def parents(self, name: str) -> list[str]: ...

    def tensor_order(self, name: str) -> int: ...
