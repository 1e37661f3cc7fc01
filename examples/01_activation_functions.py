"""Study 1: how linear is one activation function on a Gaussian input N(μ, σ²)?

The affinity score is not a property of the function alone but of the function and the distribution it
sees (Bouniot et al., CVPR 2025, Fig. 2): a ReLU fed only positive values is the identity, fed values
around 0 it folds half of them. This study maps that dependence for ReLU, LeakyReLU, Tanh, Sigmoid,
GELU and SiLU over a grid of means and standard deviations.

One `analyze` call per activation: the model's input x [N, K] holds one grid cell (μ_k, σ_k) per column;
Split cuts it into K columns [N, 1], each goes through its own activation node to its own output, so every
cell is its own 1-D site and the whole grid is scored in one pass (one call per cell would spend most of
its time in per-call setup). Sites are mapped back to cells by their output tensor name, not by order.

Run: python examples/01_activation_functions.py  (writes examples/output/01_activation_functions.*)
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper
from scipy import special

from onnxaff.analysis import analyze
from onnxaff.foundations.terminal import table as terminal_table
from onnxaff.reports.csv import records_csv
from onnxaff.reports.markdown import plain_table

OUT = Path(__file__).resolve().parent / "output"
STEM = "01_activation_functions"
OPSET = 20  # Gelu is an ONNX op from opset 20; Split's num_outputs from 18
EPS = 1e-6  # the affinity score's covariance regulariser (docs/metrics.md); not settable through the API
SEED = 0
METRICS = ("affinity", "cka", "r2")

MEANS = np.linspace(-3.0, 3.0, 13)
STDS = np.array([0.1, 0.2, 0.35, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0])
SAMPLES = 1024  # per cell: two chunks of 512 (the paper's chunk size)


def _single(op, **attrs):
    return lambda x, y: [helper.make_node(op, [x], [y], **attrs)]


def _silu(x, y):
    # x·Sigmoid(x) written out, as PyTorch exports nn.SiLU; onnxaff finds it as one "silu" site.
    return [helper.make_node("Sigmoid", [x], [y + "_sig"]), helper.make_node("Mul", [x, y + "_sig"], [y])]


# name: (ONNX nodes x -> y, the same function in numpy, the site kind onnxaff must report)
ACTIVATIONS = {
    "ReLU": (_single("Relu"), lambda v: np.maximum(v, 0.0), "relu"),
    "LeakyReLU(0.01)": (_single("LeakyRelu", alpha=0.01), lambda v: np.where(v > 0, v, 0.01 * v), "leaky_relu"),
    "LeakyReLU(0.2)": (_single("LeakyRelu", alpha=0.2), lambda v: np.where(v > 0, v, 0.2 * v), "leaky_relu"),
    "Tanh": (_single("Tanh"), np.tanh, "tanh"),
    "Sigmoid": (_single("Sigmoid"), special.expit, "sigmoid"),
    "GELU": (_single("Gelu"), lambda v: 0.5 * v * (1.0 + special.erf(v / np.sqrt(2.0))), "gelu"),
    "SiLU": (_silu, lambda v: v * special.expit(v), "silu"),
}


def build_model(nodes_for, k: int) -> onnx.ModelProto:
    """x [N, k] -> Split -> k activations -> y0 … y{k-1}, each [N, 1]."""
    nodes = [helper.make_node("Split", ["x"], [f"x{i}" for i in range(k)], axis=1, num_outputs=k)]
    for i in range(k):
        nodes += nodes_for(f"x{i}", f"y{i}")
    graph = helper.make_graph(
        nodes, "grid", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", k])],
        [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, ["N", 1]) for i in range(k)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.checker.check_model(model)
    return model


def run(quick: bool = False, activations=None, means=None, stds=None, samples: int | None = None) -> list[dict]:
    """Score every (activation, μ, σ) cell; one row per cell.

    quick: a 3×2 grid plus N(5, 0.1) for ReLU, Tanh and LeakyReLU(0.01) with 512 samples (the tests).
    Every cell and every activation sees the same standard normal draws z (x = μ + σ·z: common random
    numbers), so differences between cells are not sampling noise, and ReLU's positive homogeneity
    (its score depends on μ/σ only) holds sample by sample, up to ε.
    """
    if quick:
        activations = activations or ["ReLU", "Tanh", "LeakyReLU(0.01)"]
        means = [-1.0, 0.0, 5.0] if means is None else means
        stds = [0.1, 1.0] if stds is None else stds
        samples = samples or 512
    activations = list(activations or ACTIVATIONS)
    means = np.asarray(MEANS if means is None else means, dtype=np.float64)
    stds = np.asarray(STDS if stds is None else stds, dtype=np.float64)
    samples = samples or SAMPLES
    mu, sigma = (a.ravel() for a in np.meshgrid(means, stds, indexing="ij"))
    k = mu.size
    z = np.random.default_rng(SEED).standard_normal((samples, 1))
    x = (mu + sigma * z).astype(np.float32)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        data = str(Path(tmp) / "x.npy")
        np.save(data, x)
        for name in activations:
            nodes_for, func, kind = ACTIVATIONS[name]
            sig = analyze(build_model(nodes_for, k), data, metrics=list(METRICS), chunk_size=512,
                          batch_size=samples, progress=False)
            by_output = {s["output"]: s for s in sig.sites}
            var_y = func(x.astype(np.float64)).var(axis=0, ddof=1)
            for i in range(k):
                site = by_output[f"y{i}"]
                if site["kind"] != kind or site["status"] != "ok":
                    raise RuntimeError(f"{name}: y{i} found as {site['kind']} ({site['status']}), expected {kind}")
                m = site["metrics"]
                rows.append({
                    "activation": name, "mu": float(mu[i]), "sigma": float(sigma[i]),
                    "affinity": m["affinity"]["mean"], "affinity_std": m["affinity"]["std"],
                    "cka": m["cka"]["mean"], "r2": m["r2"]["mean"], "var_y": float(var_y[i]),
                    # ε inflates Var(Y) by ≥ 1 %: the score then measures ε more than the function.
                    "eps_dominated": bool(var_y[i] < 100 * EPS),
                })
    return rows


def lookup(rows: list[dict], name: str, mu: float, sigma: float) -> dict | None:
    """The row of one cell, None if the grid does not have it."""
    return next((r for r in rows if r["activation"] == name and np.isclose(r["mu"], mu)
                 and np.isclose(r["sigma"], sigma)), None)


SUMMARY_CELLS = [(0.0, 0.1), (0.0, 1.0), (0.0, 5.0), (1.0, 1.0), (-1.0, 1.0), (3.0, 1.0), (-3.0, 1.0)]


def summary(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Per activation: the affinity at a few telling cells (* = ε-dominated), over the whole grid (ε-dominated
    cells left out), and the baseline r² at μ = 0, σ = 1 (in 1-D linear CKA and r² are both corr²)."""
    def cell(r, key="affinity"):
        if r is None:
            return "–"
        return f"{r[key]:.3f}" + ("*" if r["eps_dominated"] else "")

    header = (["activation"] + [f"μ={m:g} σ={s:g}" for m, s in SUMMARY_CELLS]
              + ["grid mean", "grid min (μ, σ)", "r² = CKA, μ=0 σ=1"])
    table = []
    for name in dict.fromkeys(r["activation"] for r in rows):
        mine = [r for r in rows if r["activation"] == name and not r["eps_dominated"]]
        low = min(mine, key=lambda r: r["affinity"])
        table.append([name] + [cell(lookup(rows, name, m, s)) for m, s in SUMMARY_CELLS]
                     + [f"{np.mean([r['affinity'] for r in mine]):.3f}",
                        f"{low['affinity']:.3f} ({low['mu']:g}, {low['sigma']:g})",
                        cell(lookup(rows, name, 0.0, 1.0), "r2")])
    return header, table


def plot(rows: list[dict], path: Path) -> None:
    """A heatmap of the affinity over (μ, σ) per activation (× marks ε-dominated cells), and the σ = 1 profiles."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["activation"] for r in rows))
    means = sorted({r["mu"] for r in rows})
    stds = sorted({r["sigma"] for r in rows})
    fig, axes = plt.subplots(2, 4, figsize=(17, 7.5), constrained_layout=True)
    image = None
    for ax, name in zip(axes.flat, names, strict=False):
        grid = np.array([[lookup(rows, name, m, s)["affinity"] for m in means] for s in stds])
        image = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis", vmin=0, vmax=1)
        flagged = [(i, j) for j, s in enumerate(stds) for i, m in enumerate(means)
                   if lookup(rows, name, m, s)["eps_dominated"]]
        if flagged:
            ax.scatter(*zip(*flagged, strict=True), marker="x", color="white", s=14, linewidths=0.8)
        ax.set_title(name)
        ax.set_xticks(range(len(means))[::2], [f"{m:g}" for m in means[::2]])
        ax.set_yticks(range(len(stds)), [f"{s:g}" for s in stds])
        ax.set_xlabel("input mean μ")
        ax.set_ylabel("input std σ")
    profile = axes.flat[len(names)] if len(names) < axes.size else None
    if profile is not None:
        sigma = 1.0 if 1.0 in stds else stds[len(stds) // 2]
        for name in names:
            cells = [lookup(rows, name, m, sigma) for m in means]
            profile.plot(means, [np.nan if r["eps_dominated"] else r["affinity"] for r in cells], marker=".",
                         label=name)
        profile.set_title(f"affinity along μ at σ = {sigma:g} (ε-dominated cells left out)")
        profile.set_xlabel("input mean μ")
        profile.set_ylim(0, 1.02)
        profile.grid(alpha=0.3)
        profile.legend(fontsize=7)
    for ax in axes.flat[len(names) + 1:]:
        ax.axis("off")
    fig.colorbar(image, ax=axes, shrink=0.6, label="affinity score")
    fig.suptitle("Affinity score of single activations on N(μ, σ²) inputs (1024 samples, chunks of 512; "
                 "× : Var(Y) < 100·ε)")
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write_outputs(rows: list[dict], out: Path = OUT) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    csv_path, md_path, png_path = (out / f"{STEM}.{ext}" for ext in ("csv", "md", "png"))
    csv_path.write_text(records_csv(rows), newline="")
    md_path.write_text(plain_table(*summary(rows)))
    plot(rows, png_path)
    return [csv_path, md_path, png_path]


def main() -> None:
    start = time.perf_counter()
    rows = run()
    header, body = summary(rows)
    print(terminal_table(body, header))
    for path in write_outputs(rows):
        print("wrote", path)
    print(f"{len(rows)} cells in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
