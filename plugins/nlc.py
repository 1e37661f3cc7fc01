"""The non-linearity coefficient (Philipp & Carbonell 2018) of a site.

NLC = sqrt(E_x[Tr(J(x) Σ_X J(x)ᵀ)] / Tr(Σ_Y)); 1 for an affine map, larger for more non-linear ones.
The core accumulates both traces in the graph (see onnxaff.graph.jvp); this plugin combines them.
"""

from __future__ import annotations

import math

from onnxaff.metrics import JvpStats, Metric, Needs


class NLC(Metric):
    name = "nlc"
    description = "non-linearity coefficient sqrt(E Tr(J Σ_X Jᵀ)/Tr Σ_Y) on the full tensors (Philipp & Carbonell)"
    higher_is_more_linear = False
    range = (0.0, float("inf"))
    needs = Needs.JVP

    def compute(self, stats: JvpStats) -> float:
        if stats.denominator <= 0:
            raise ValueError("NLC is undefined for a constant output (Tr Σ_Y = 0)")
        return math.sqrt(stats.numerator / stats.denominator)
