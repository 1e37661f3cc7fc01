"""Network-level Jacobian sums, model input → each output, by finite differences, for the metrics taking JvpStats.

NLC² = Σ_b Σ_i mean_{j≠i} ‖J(x_i)(x_j − x̄_b)‖² / Σ_b Σ_i ‖y_i − ȳ_b‖² over the batches b, every other example
of the batch as a direction, exact for an affine network. Central differences of the original model along
directions shared by the whole batch: when the flattened input has D < n − 1 dimensions, the D eigen-
directions of the batch's scatter plus each example's own x_i − x̄_b (whose term is removed):
Σ_{j≠i} ‖J_i(x_j − x̄)‖² = Σ_m λ_m ‖J_i u_m‖² − ‖J_i(x_i − x̄)‖², 2(D + 1) forward passes per batch.
Otherwise (images: D = 784 for the shipped networks) `directions` rolls x_{i−k} − x̄_b, default one, 2 passes
per batch (graph.jvp's estimator for non-elementwise sites). One direction landed 0.2–5.4 % from the exact
Jacobian value on a 6-input tanh layer (1024 examples), 16 rolls up to 0.9 %, all 63 partners (= the eigen
path) within 0.32 % (tests/test_statistics.py). All partners on the 784-input CNN cost 77.7 s instead of
5.6 s here, which is why wide inputs keep one by default; `directions="all"` (--nlc-directions all) takes
every partner (benchmarks/nlc_directions.py: 0.002 % from the exact value on sk_mlp_tanh, 784 inputs).
Only the first EXAMPLES examples are used.
"""

from __future__ import annotations

import math

import numpy as np

from onnxaff import defaults
from onnxaff.collection.scoring import evaluate
from onnxaff.errors import ConfigError
from onnxaff.graph.jvp import STEP
from onnxaff.graph.load import LoadedModel
from onnxaff.metrics import JvpStats
from onnxaff.metrics.dispatch import serving
from onnxaff.runtime.sessions import Runner

EXAMPLES = 1024
DIRECTIONS = 1  # rolls per example when the input is too wide for the eigen-directions (see the module doc)


def parse_directions(value) -> int | str:
    """A positive number of rolls per example, or "all" (every other example of the batch: exact estimator)."""
    if isinstance(value, str) and value.strip().lower() == "all":
        return "all"
    try:
        k = int(str(value).strip()) if not isinstance(value, bool) else 0
    except ValueError:
        k = 0
    if k < 1:
        raise ConfigError("nlc_directions", f"{{option}} must be a positive whole number or 'all', got {value!r}")
    return k


class NetworkNLC:
    def __init__(self, loaded: LoadedModel, inputs, device: str, examples: int = EXAMPLES, step: float = STEP,
                 threads: int | None = None, directions: int | str = DIRECTIONS,
                 graph_optimization: str = defaults.GRAPH_OPTIMIZATION):
        # `inputs`: those that vary from example to example (constants are held as the batch gives them)
        self.inputs, self.step, self.limit = inputs, step, examples
        self.directions = parse_directions(directions)
        self.reason = None if inputs else "no model input varies from one example to the next"
        if not all(np.issubdtype(i.dtype, np.floating) for i in inputs):
            self.reason = "the model has non-float inputs: no direction to differentiate along"
        graph = loaded.model.graph
        self.output_names = [o.name for o in graph.output if o.type.tensor_type.elem_type in (1, 11)]
        if not self.output_names:
            self.reason = self.reason or "the model has no float outputs"
        self.runner = Runner(loaded, loaded.model, device=device, threads=threads,
                             graph_optimization=graph_optimization) if self.reason is None else None
        if self.runner is None:
            self.output_names = []  # nothing to fetch from the analysed model either
        self.jv2 = dict.fromkeys(self.output_names, 0.0)
        self.scatter = dict.fromkeys(self.output_names, 0.0)
        self.examples = 0
        self.short_batches = 0

    def add(self, batch: dict[str, np.ndarray], outputs: list[np.ndarray]) -> None:
        if self.runner is None or self.examples >= self.limit:
            return
        n = batch[self.inputs[0].name].shape[self.inputs[0].batch_axis]
        if n < 2:
            self.short_batches += 1
            return
        with np.errstate(all="ignore"):  # NaN/Inf outputs: the result says so (jvp_result), no NumPy warnings
            self._add(n, batch, outputs)

    def _add(self, n: int, batch: dict[str, np.ndarray], outputs: list[np.ndarray]) -> None:
        # each input batch-first here, put back on its own batch axis for the runtime
        xs = {spec.name: np.moveaxis(batch[spec.name], spec.batch_axis, 0).astype(np.float64) for spec in self.inputs}
        flat = np.concatenate([x.reshape(n, -1) for x in xs.values()], axis=1)
        if not np.isfinite(flat).all():  # no direction to differentiate along; NaN sums make the result say so
            for name in self.output_names:
                self.jv2[name] = math.nan
            self.examples += n
            return
        centred = flat - flat.mean(axis=0)
        if flat.shape[1] < n - 1:  # D eigen-directions of the scatter, scaled to their sd, and the self term
            lam, vec = np.linalg.eigh(centred.T @ centred)
            dirs = [np.broadcast_to(np.sqrt(max(w, 0.0) / (n - 1)) * v, flat.shape) for w, v in zip(lam, vec.T,
                                                                                                  strict=True)]
            weights = [1.0] * len(dirs)
            dirs.append(centred)
            weights.append(-1.0 / (n - 1))
        else:  # the next `directions` examples of the batch (every other one would cost 2(n − 1) passes)
            k_max = n - 1 if self.directions == "all" else max(1, min(self.directions, n - 1))
            dirs = (np.roll(centred, k, axis=0) for k in range(1, k_max + 1))  # one at a time: a batch each
            weights = [1.0 / k_max] * k_max
        jv2 = dict.fromkeys(self.output_names, 0.0)
        for direction, weight in zip(dirs, weights, strict=True):
            plus, minus, offset = dict(batch), dict(batch), 0
            for spec in self.inputs:
                x = xs[spec.name]
                size = x[0].size
                hv = self.step * direction[:, offset:offset + size].reshape(x.shape)
                offset += size
                plus[spec.name], minus[spec.name] = _on_axis(x + hv, spec), _on_axis(x - hv, spec)
            y_plus = self.runner.run(self.output_names, plus)
            y_minus = self.runner.run(self.output_names, minus)
            for name, yp, ym in zip(self.output_names, y_plus, y_minus, strict=True):
                jv = (yp.astype(np.float64) - ym.astype(np.float64)) / (2 * self.step)
                jv2[name] += weight * float(np.sum(jv * jv))
        for name, y in zip(self.output_names, outputs, strict=True):
            y = y.astype(np.float64)
            self.jv2[name] += jv2[name]
            self.scatter[name] += float(np.sum((y - y.mean(axis=0)) ** 2))
        self.examples += n

    def to_state(self) -> dict:
        state = {"reason": self.reason, "outputs": list(self.output_names), "step": self.step, "limit": self.limit,
                 "jv2": self.jv2, "scatter": self.scatter, "examples": self.examples,
                 "short_batches": self.short_batches}
        if self.directions != DIRECTIONS:  # default results keep their exact form
            state["directions"] = self.directions
        return state

    def restore(self, d: dict) -> None:
        self.jv2, self.scatter = dict(d["jv2"]), dict(d["scatter"])
        self.examples, self.short_batches = d["examples"], d["short_batches"]


def _on_axis(x: np.ndarray, spec) -> np.ndarray:
    """A batch-first array in the input's dtype, its examples back on the input's batch axis."""
    return np.ascontiguousarray(np.moveaxis(x.astype(spec.dtype), 0, spec.batch_axis))


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


def network_results(d: dict, metrics: list) -> dict:
    """The signature's `network`: each metric that takes JvpStats, scored on the network's sums per output."""
    return {m.spec: jvp_result(d, m) for m in metrics if serving(m).end_input == "jvp"}


def jvp_result(d: dict, metric) -> dict:
    """One metric's network entry: its value per float output (None where the sums give none)."""
    if d["reason"] is not None:
        return {"status": "not_applicable", "reason": d["reason"]}
    if d["examples"] < 2:
        return {"status": "no_data", "reason": "needs batches of at least 2 examples"}
    values, nonfinite = {}, []
    for name in d["outputs"]:
        num, den = d["jv2"][name], d["scatter"][name]
        finite = math.isfinite(num) and math.isfinite(den)  # an infinite scatter would make the value a false 0
        values[name] = evaluate(metric, JvpStats("directional", num, den, d["examples"]))[0] if finite else None
        if not finite:
            nonfinite.append(name)
    out = {"status": "ok", "values": values, "examples": d["examples"], "step": d["step"], "form": "directional"}
    if "directions" in d:  # wide inputs only; inputs with D < n − 1 take every direction whatever it says
        out["directions"] = d["directions"]
    if nonfinite:
        out["reason"] = f"NaN/Inf in the data, output(s) {', '.join(nonfinite)} or their finite differences: no value"
    return out
