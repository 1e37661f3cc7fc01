"""Study 3: how non-linear are randomly initialised MLPs, layer by layer?

Before any training, the weight scale alone decides how far each activation is driven from its linear
regime (Bouniot et al., CVPR 2025, random-network experiment): small weights keep pre-activations in a
narrow range around the bias, large weights spread them over the kinks (ReLU) or into saturation (Tanh).
This study measures that with the affinity score on 2-D coordinate inputs, where the whole input
distribution is one 32×32 grid over [−1, 1]² (`synthetic:grid`).

Networks: 2 → 40 → 40 → 40 → 1, activation after each hidden layer (the three sites), a linear readout
(only for the pictures of the output function). Weights: Glorot-uniform draws u ~ U(−1, 1) times the
Glorot limit a = sqrt(6 / (fan_in + fan_out)), then W = scale · a · (u + shift): scale 1 or 6; shift 0
(centred) or 1 (every weight in [0, 2·scale·a]: all-positive weights, a mean shift of scale·a).
Biases b ~ U(−1, 1), not scaled. The same draws u and b per seed serve every configuration, so
configurations differ only by scale, shift and activation.

All seeds of one configuration are parallel branches of one ONNX model (30 sites), scored in one
`analyze` call with chunk_size = the number of grid points: one chunk is the whole grid. (Chunks of 512
would split the grid into its left and right halves, since `synthetic:grid` enumerates it row by row.)

Run: python examples/03_random_mlps.py  (writes examples/output/03_random_mlps.*)
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxaff.analysis import analyze
from onnxaff.foundations.terminal import table as terminal_table
from onnxaff.reports.csv import records_csv
from onnxaff.reports.markdown import plain_table

OUT = Path(__file__).resolve().parent / "output"
STEM = "03_random_mlps"
OPSET = 17
WIDTH, DEPTH = 40, 3
SEEDS = 10
POINTS = 1024  # 32 × 32
# name: (ONNX op, site kind onnxaff must report, numpy function, its slope as a function of the pre-activation)
ACTIVATIONS = {
    "ReLU": ("Relu", "relu", lambda v: np.maximum(v, 0.0), lambda v: (v > 0).astype(np.float64)),
    "Tanh": ("Tanh", "tanh", np.tanh, lambda v: 1.0 - np.tanh(v) ** 2),
}
FLAT = 0.02  # a unit is "flat" at a point where the activation's slope is below this (ReLU off, Tanh saturated)
SCALES = (1.0, 6.0)
SHIFTS = (0.0, 1.0)
METRICS = ("affinity", "cka")


def config_name(act: str, scale: float, shift: float) -> str:
    return f"{act} ×{scale:g}" + (" shifted" if shift else "")


def draw(seed: int) -> list[tuple[np.ndarray, np.ndarray, float]]:
    """Per layer (u, b, Glorot limit a): the seed's raw draws, shared by every configuration."""
    rng = np.random.default_rng(seed)
    sizes = [2] + [WIDTH] * DEPTH + [1]
    layers = []
    for fan_in, fan_out in itertools.pairwise(sizes):
        u = rng.uniform(-1.0, 1.0, size=(fan_in, fan_out))
        b = rng.uniform(-1.0, 1.0, size=fan_out)
        layers.append((u, b, float(np.sqrt(6.0 / (fan_in + fan_out)))))
    return layers


def weights(seed: int, scale: float, shift: float) -> list[tuple[np.ndarray, np.ndarray]]:
    return [((scale * a * (u + shift)).astype(np.float32), b.astype(np.float32)) for u, b, a in draw(seed)]


def build_model(op: str, nets: dict[int, list]) -> onnx.ModelProto:
    """One input x [N, 2]; per seed s a branch x -> s{s}_h1 … s{s}_h3 (activation outputs) -> s{s}_out."""
    nodes, inits, outputs = [], [], []
    for s, layers in nets.items():
        h = "x"
        for li, (w, b) in enumerate(layers, start=1):
            p = f"s{s}_l{li}"
            inits += [numpy_helper.from_array(w, p + "_W"), numpy_helper.from_array(b, p + "_b")]
            nodes += [helper.make_node("MatMul", [h, p + "_W"], [p + "_mm"]),
                      helper.make_node("Add", [p + "_mm", p + "_b"], [p + "_pre"])]
            if li <= DEPTH:
                h = f"s{s}_h{li}"
                nodes.append(helper.make_node(op, [p + "_pre"], [h]))
            else:
                nodes.append(helper.make_node("Identity", [p + "_pre"], [f"s{s}_out"]))
        outputs.append(helper.make_tensor_value_info(f"s{s}_out", TensorProto.FLOAT, ["N", 1]))
    graph = helper.make_graph(nodes, "random_mlps", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2])],
                              outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.checker.check_model(model)
    return model


def forward(func, layers, x: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """The network in numpy (float64): its output and the hidden pre-activations, for the pictures and the
    flat-unit share only (the scores come from onnxaff)."""
    h, pre = x, []
    for li, (w, b) in enumerate(layers, start=1):
        h = h @ w.astype(np.float64) + b
        if li <= DEPTH:
            pre.append(h)
            h = func(h)
    return h[:, 0], pre


def run(quick: bool = False, seeds: int | None = None, points: int | None = None,
        configs: list[tuple[str, float, float]] | None = None) -> dict:
    """Affinity (and CKA) per configuration, seed and layer; the grid outputs of seed 0 for the pictures.

    quick: 3 seeds on a 16×16 grid (the tests).
    """
    seeds = seeds or (3 if quick else SEEDS)
    points = points or (256 if quick else POINTS)
    configs = configs or [(a, sc, sh) for a in ACTIVATIONS for sh in SHIFTS for sc in SCALES]
    side = int(np.sqrt(points))
    data = f"synthetic:grid:n={side * side}"
    rows, images = [], {}
    g = np.linspace(-1.0, 1.0, side)
    grid = np.stack([a.ravel() for a in np.meshgrid(g, g, indexing="ij")], axis=1)
    for act, scale, shift in configs:
        op, kind, func, slope = ACTIVATIONS[act]
        nets = {s: weights(s, scale, shift) for s in range(seeds)}
        sig = analyze(build_model(op, nets), data, metrics=list(METRICS), chunk_size=side * side,
                      batch_size=side * side, progress=False)
        by_output = {site["output"]: site for site in sig.sites}
        for s in range(seeds):
            _, pre = forward(func, nets[s], grid)
            for layer in range(1, DEPTH + 1):
                site = by_output[f"s{s}_h{layer}"]
                if site["kind"] != kind or site["status"] != "ok" or site["dim"] != WIDTH:
                    raise RuntimeError(f"s{s}_h{layer}: found as {site['kind']} ({site['status']}, dim {site['dim']})")
                rows.append({"config": config_name(act, scale, shift), "activation": act, "scale": scale,
                             "shift": shift, "seed": s, "layer": layer,
                             **{m: site["metrics"][m]["mean"] for m in METRICS},
                             "flat_share": float(np.mean(slope(pre[layer - 1]) < FLAT))})
        images[config_name(act, scale, shift)] = forward(func, nets[0], grid)[0].reshape(side, side)
    return {"rows": rows, "images": images, "seeds": seeds, "points": side * side}


def aggregate(rows: list[dict]) -> list[dict]:
    """Mean ± std (ddof=0) over seeds, per configuration and layer."""
    out = []
    for config in dict.fromkeys(r["config"] for r in rows):
        for layer in range(1, DEPTH + 1):
            mine = [r for r in rows if r["config"] == config and r["layer"] == layer]
            entry = {"config": config, "layer": layer, "seeds": len(mine)}
            for m in (*METRICS, "flat_share"):
                v = np.array([r[m] for r in mine], dtype=np.float64)
                entry[f"{m}_mean"], entry[f"{m}_std"] = float(np.nanmean(v)), float(np.nanstd(v))
            out.append(entry)
    return out


def table(agg: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Affinity per layer (mean ± std over seeds), its mean over layers, and per layer (l1 / l2 / l3) the
    CKA baseline and the share of flat (off or saturated) unit-points."""
    header = (["configuration"] + [f"layer {k} affinity" for k in range(1, DEPTH + 1)]
              + ["mean affinity", "CKA l1 / l2 / l3", "flat share l1 / l2 / l3"])
    body = []
    for config in dict.fromkeys(a["config"] for a in agg):
        mine = [a for a in agg if a["config"] == config]
        body.append([config] + [f"{a['affinity_mean']:.3f} ± {a['affinity_std']:.3f}" for a in mine]
                    + [f"{np.mean([a['affinity_mean'] for a in mine]):.3f}",
                       " / ".join(f"{a['cka_mean']:.2f}" for a in mine),
                       " / ".join(f"{a['flat_share_mean']:.2f}" for a in mine)])
    return header, body


def plot(result: dict, agg: list[dict], path: Path, images_path: Path) -> None:
    """Affinity per layer (mean ± std over seeds) per configuration; seed 0's output function per configuration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    configs = list(dict.fromkeys(a["config"] for a in agg))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True, constrained_layout=True)
    for ax, act in zip(axes, ACTIVATIONS, strict=True):
        for config in (c for c in configs if c.startswith(act)):
            mine = [a for a in agg if a["config"] == config]
            ax.errorbar([a["layer"] for a in mine], [a["affinity_mean"] for a in mine],
                        yerr=[a["affinity_std"] for a in mine], marker="o", capsize=4, label=config)
        ax.set_title(f"{act} MLPs 2-40-40-40, {result['seeds']} seeds")
        ax.set_xlabel("hidden layer")
        ax.set_xticks(range(1, DEPTH + 1))
        ax.grid(alpha=0.3)
        ax.legend()
    axes[0].set_ylabel("affinity score (mean ± std over seeds)")
    fig.savefig(path, dpi=90)
    plt.close(fig)

    fig, axes = plt.subplots(2, 4, figsize=(13, 6.5), constrained_layout=True)
    for ax, config in zip(axes.flat, configs, strict=False):
        ax.imshow(result["images"][config].T, origin="lower", extent=(-1, 1, -1, 1), cmap="RdBu_r")
        ax.set_title(config)
        ax.set_xticks([-1, 0, 1])
        ax.set_yticks([-1, 0, 1])
    for ax in axes.flat[len(configs):]:
        ax.axis("off")
    fig.suptitle("Output function over [−1, 1]² of the seed-0 network per configuration (own colour scale each)")
    fig.savefig(images_path, dpi=80)
    plt.close(fig)


def write_outputs(result: dict, out: Path = OUT) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    agg = aggregate(result["rows"])
    csv_path, md_path = out / f"{STEM}.csv", out / f"{STEM}.md"
    png_path, images_path = out / f"{STEM}.png", out / f"{STEM}_outputs.png"
    csv_path.write_text(records_csv(agg), newline="")
    header, body = table(agg)
    md_path.write_text(plain_table(header, body))
    plot(result, agg, png_path, images_path)
    return [csv_path, md_path, png_path, images_path]


def main() -> None:
    start = time.perf_counter()
    result = run()
    header, body = table(aggregate(result["rows"]))
    print(terminal_table(body, header))
    for path in write_outputs(result):
        print("wrote", path)
    print(f"{len(result['rows'])} sites in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
