"""The site record every discovery pass makes and analysis reads: one non-linearity, X and Y."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from onnxaff.graph.span import Span

NOT_ELEMENTWISE = {"softmax", "log_softmax"}  # kinds that normalise along an axis: not a function of each value


@dataclass
class Site(Span):
    """One non-linearity: the tensor that enters it and the tensor that leaves it."""

    rank: int | None = None
    feature_axis: int | None = None
    layout: str | None = None
    elementwise: bool = True
    params: dict = field(default_factory=dict)
    node_indices: list[int] = field(default_factory=list, repr=False)
    # "activation" sites make the non-linearity signature; "pair" and "block" sites (a chosen or found
    # sub-network) are scored beside them. Those may join tensors of different ranks: Y's own shape.
    group: str = "activation"
    output_rank: int | None = None
    output_feature_axis: int | None = None
    output_layout: str | None = None
    # Inside a subgraph: (control node's index in the enclosing graph, graph attribute, op type); graph.subsites.
    scope: tuple | None = field(default=None, repr=False)

    def side(self, which: str) -> Site:
        """The site as the reduction of X ("x") or Y ("y") sees it."""
        if which == "x" or self.output_rank is None:
            return self
        return replace(self, rank=self.output_rank, feature_axis=self.output_feature_axis, layout=self.output_layout,
                       input_shape=self.output_shape)
