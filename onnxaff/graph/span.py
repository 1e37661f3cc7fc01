"""What a site and a block share: a sub-network between one input tensor and one output tensor."""

from __future__ import annotations

from dataclasses import asdict, dataclass

# The one reason a probe run can lift (a note on a failed probe may follow it): shape inference missed the rank.
UNKNOWN_RANK = "unknown rank (shape inference could not type this tensor)"


@dataclass
class Span:
    """The fields every site and block reports; `status` 'skipped' comes with a `reason`."""

    index: int
    id: str
    kind: str
    input: str
    output: str
    op_types: list[str]
    nodes: list[str]
    status: str = "ok"
    reason: str = ""
    input_shape: list | None = None
    output_shape: list | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("node_indices", None)  # positions in one loaded graph: meaningless outside it
        d.pop("scope", None)  # likewise (a subgraph site's control node); its id says where it lives
        return d

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def skip_unknown_rank(self) -> None:
        """Skipped until a probe run gives the tensor a shape (sitelist.resolve_unknown_ranks)."""
        self.status, self.reason = "skipped", UNKNOWN_RANK

    @property
    def unknown_rank(self) -> bool:
        """Skipped only because static shape inference missed the rank: a probe run may still settle it."""
        return self.status == "skipped" and self.reason.startswith(UNKNOWN_RANK)


def unique_ids(spans: list[Span]) -> None:
    """Number repeated ids in order (x, x~2, x~3), then make ids that still collide unique with '~'."""
    counts: dict[str, int] = {}
    for s in spans:
        n = counts.get(s.id, 0)
        counts[s.id] = n + 1
        if n:
            s.id = f"{s.id}~{n + 1}"
    # A renamed id could collide with a real node name that looks the same: resolve once more.
    seen: set[str] = set()
    for s in spans:
        while s.id in seen:
            s.id += "~"
        seen.add(s.id)
