"""Network-level non-linearity coefficient: model input → each output, by finite differences.

Runs the original model on x ± h·v with v_i = x_{i−1} − x̄_b (another example of the batch, centred),
and estimates NLC² = Σ_b Σ_i ‖J(x_i) v_i‖² / Σ_b Σ_i ‖y_i − ȳ_b‖², exact for an affine network (graph.jvp
uses the same estimator for non-elementwise sites). Two extra forward passes per batch, so only the
first EXAMPLES examples are used.
"""

from __future__ import annotations

import math

import numpy as np

from onnxaff.graph.jvp import STEP
from onnxaff.graph.load import LoadedModel
from onnxaff.runtime import Runner

EXAMPLES = 1024


class NetworkNLC:
    def __init__(self, loaded: LoadedModel, inputs, device: str, examples: int = EXAMPLES, step: float = STEP,
                 threads: int | None = None):
        self.inputs, self.step, self.limit = inputs, step, examples
        self.reason = None
        if not all(np.issubdtype(i.dtype, np.floating) for i in inputs):
            self.reason = "the model has non-float inputs: no direction to differentiate along"
        graph = loaded.model.graph
        self.output_names = [o.name for o in graph.output if o.type.tensor_type.elem_type in (1, 11)]
        if not self.output_names:
            self.reason = self.reason or "the model has no float outputs"
        self.runner = Runner(loaded, loaded.model, device=device, threads=threads) if self.reason is None else None
        if self.runner is None:
            self.output_names = []  # nothing to fetch from the analysed model either
        self.jv2 = dict.fromkeys(self.output_names, 0.0)
        self.scatter = dict.fromkeys(self.output_names, 0.0)
        self.examples = 0
        self.short_batches = 0

    def add(self, batch: dict[str, np.ndarray], outputs: list[np.ndarray]) -> None:
        if self.runner is None or self.examples >= self.limit:
            return
        n = next(iter(batch.values())).shape[0]
        if n < 2:
            self.short_batches += 1
            return
        with np.errstate(all="ignore"):  # NaN/Inf outputs: the result says so (nlc_result), no NumPy warnings
            self._add(n, batch, outputs)

    def _add(self, n: int, batch: dict[str, np.ndarray], outputs: list[np.ndarray]) -> None:
        plus, minus = {}, {}
        for spec in self.inputs:
            x = batch[spec.name].astype(np.float64)
            hv = self.step * (np.roll(x, 1, axis=0) - x.mean(axis=0))
            plus[spec.name], minus[spec.name] = (x + hv).astype(spec.dtype), (x - hv).astype(spec.dtype)
        y_plus = self.runner.run(self.output_names, plus)
        y_minus = self.runner.run(self.output_names, minus)
        for name, y, yp, ym in zip(self.output_names, outputs, y_plus, y_minus, strict=True):
            jv = (yp.astype(np.float64) - ym.astype(np.float64)) / (2 * self.step)
            y = y.astype(np.float64)
            self.jv2[name] += float(np.sum(jv * jv))
            self.scatter[name] += float(np.sum((y - y.mean(axis=0)) ** 2))
        self.examples += n

    def to_state(self) -> dict:
        return {"reason": self.reason, "outputs": list(self.output_names), "step": self.step, "limit": self.limit,
                "jv2": self.jv2, "scatter": self.scatter, "examples": self.examples,
                "short_batches": self.short_batches}

    def restore(self, d: dict) -> None:
        self.jv2, self.scatter = dict(d["jv2"]), dict(d["scatter"])
        self.examples, self.short_batches = d["examples"], d["short_batches"]

    def result(self) -> dict:
        return nlc_result(self.to_state())


def merge_nlc_states(states: list[dict]) -> dict:
    """Consecutive parts' sums, taken in order until `limit` examples, as one run would have stopped."""
    total = dict(states[0], jv2=dict(states[0]["jv2"]), scatter=dict(states[0]["scatter"]))
    for d in states[1:]:
        total["short_batches"] += d["short_batches"]
        if total["examples"] >= total["limit"] or not d["examples"]:
            continue
        for name in total["jv2"]:
            total["jv2"][name] += d["jv2"][name]
            total["scatter"][name] += d["scatter"][name]
        total["examples"] += d["examples"]
    return total


def nlc_result(d: dict) -> dict:
    if d["reason"] is not None:
        return {"status": "not_applicable", "reason": d["reason"]}
    if d["examples"] < 2:
        return {"status": "no_data", "reason": "needs batches of at least 2 examples"}
    values, nonfinite = {}, []
    for name in d["outputs"]:
        num, den = d["jv2"][name], d["scatter"][name]
        finite = math.isfinite(num) and math.isfinite(den)  # an infinite scatter would make the NLC a false 0
        values[name] = math.sqrt(num / den) if den > 0 and finite else None
        if not finite:
            nonfinite.append(name)
    out = {"status": "ok", "values": values, "examples": d["examples"], "step": d["step"], "form": "directional"}
    if nonfinite:
        out["reason"] = f"NaN/Inf in output(s) {', '.join(nonfinite)} or their finite differences: no value"
    return out
