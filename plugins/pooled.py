"""The pooled form of a chunk metric: the same estimator on the moments of all rows, one value per site."""

from __future__ import annotations

from collections.abc import Callable

from onnxaff.metrics import Metric, Moments, Needs


def pooled_variant(chunk_metric: type[Metric], name: str, description: str,
                   estimator: Callable[[Moments], float], module: str) -> type[Metric]:
    """A subclass of `chunk_metric` scored once from the site's pooled Moments.

    It keeps the chunk metric's range, direction and finite-sample declarations (the same estimator, so the
    same rows-per-dimension rule), drops the per-chunk caveat and the strict rule (studied per chunk only).
    """
    def compute(self, moments: Moments) -> float:
        return estimator(moments)

    def caveat(self, rows, dx, dy):
        return None

    attributes = {"name": name, "description": description, "needs": Needs.MOMENTS, "rows_per_dim_strict": None,
                  "default": None, "compute": compute, "caveat": caveat, "__module__": module,
                  "__doc__": f"{chunk_metric.name} from the pooled moments of all rows."}
    return type(f"{chunk_metric.__name__}Pooled", (chunk_metric,), attributes)
