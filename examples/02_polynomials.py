"""Study 2: the affinity score of the monomials x^k, k = 1 … 6.

Why: polynomials are the simplest functions whose non-linearity grows with a single knob, the degree, and
they separate what the affinity score measures from what correlation baselines measure. On x ~ U[−1, 1]
the even powers are not monotone: x² is uncorrelated with x (r² = CKA = 0), yet its affinity is well
above 0, because the score compares the distributions of X and Y (their Gaussian fits and the optimal
transport between them), not the pairing of rows. On x ~ U[0, 1] every power is monotone, and odd and
even powers behave alike.

Pow is not an activation, so onnxaff does not find these sites on its own: each (x, y_k) tensor pair is
scored through `analyze(..., pairs=[("x", "y1"), …])` (the CLI's `--pairs x:y1,…`).

Run: python examples/02_polynomials.py  (writes examples/output/02_polynomials.*)
"""

from __future__ import annotations

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
STEM = "02_polynomials"
OPSET = 17
DEGREES = tuple(range(1, 7))
DOMAINS = {"U[-1, 1]": (-1.0, 1.0), "U[0, 1]": (0.0, 1.0)}
SAMPLES = 4096  # eight chunks of 512
SEED = 0
METRICS = ("affinity", "cka", "r2")


def build_model(degrees) -> onnx.ModelProto:
    """x [N, 1] -> Pow(x, k) -> y{k} [N, 1] for every degree k (integer exponents, exact for negative x)."""
    nodes, inits = [], []
    for k in degrees:
        inits.append(numpy_helper.from_array(np.array(k, dtype=np.int64), f"k{k}"))
        nodes.append(helper.make_node("Pow", ["x", f"k{k}"], [f"y{k}"]))
    graph = helper.make_graph(
        nodes, "monomials", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1])],
        [helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, ["N", 1]) for k in degrees], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.checker.check_model(model)
    return model


def run(quick: bool = False, degrees=None, samples: int | None = None) -> list[dict]:
    """One row per (domain, degree).

    quick: degrees 1, 2, 3 on 1024 samples (the tests).
    """
    degrees = list(degrees or ((1, 2, 3) if quick else DEGREES))
    samples = samples or (1024 if quick else SAMPLES)
    model = build_model(degrees)
    rows = []
    for domain, (low, high) in DOMAINS.items():
        data = f"synthetic:uniform:n={samples},seed={SEED},low={low:g},high={high:g}"
        sig = analyze(model, data, metrics=list(METRICS), chunk_size=512, batch_size=samples, progress=False,
                      pairs=[("x", f"y{k}") for k in degrees])
        by_pair = {(s["input"], s["output"]): s for s in sig.sites}
        for k in degrees:
            site = by_pair[("x", f"y{k}")]
            if site["kind"] != "pair" or site["status"] != "ok":
                raise RuntimeError(f"x -> y{k}: {site['kind']} ({site['status']}: {site.get('reason')})")
            m = site["metrics"]
            rows.append({"domain": domain, "degree": k, "parity": "odd" if k % 2 else "even", "samples": samples,
                         "affinity": m["affinity"]["mean"], "affinity_std": m["affinity"]["std"],
                         "cka": m["cka"]["mean"], "r2": m["r2"]["mean"]})
    return rows


def table(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    header = ["degree k"] + [f"{m} on {d}" for d in DOMAINS for m in ("affinity", "r²")]
    body = []
    for k in dict.fromkeys(r["degree"] for r in rows):
        cells = [str(k)]
        for d in DOMAINS:
            r = next(r for r in rows if r["domain"] == d and r["degree"] == k)
            cells += [f"{r['affinity']:.3f} ± {r['affinity_std']:.3f}", f"{r['r2']:.3f}"]
        body.append(cells)
    return header, body


def plot(rows: list[dict], path: Path) -> None:
    """Affinity and r² against the degree, one line per domain; odd and even degrees marked apart."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    for ax, metric, label in ((axes[0], "affinity", "affinity score"), (axes[1], "r2", "r² = CKA (1-D)")):
        for domain, colour in zip(DOMAINS, ("tab:blue", "tab:orange"), strict=True):
            mine = [r for r in rows if r["domain"] == domain]
            ax.plot([r["degree"] for r in mine], [r[metric] for r in mine], color=colour, alpha=0.5)
            for parity, marker in (("odd", "o"), ("even", "s")):
                sub = [r for r in mine if r["parity"] == parity]
                ax.scatter([r["degree"] for r in sub], [r[metric] for r in sub], color=colour, marker=marker,
                           label=f"x ~ {domain}, {parity} k")
        ax.set_xlabel("degree k of y = x^k")
        ax.set_ylabel(label)
        ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Monomials as tensor-pair sites ({rows[0]['samples']} samples, chunks of 512)")
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write_outputs(rows: list[dict], out: Path = OUT) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    csv_path, md_path, png_path = (out / f"{STEM}.{ext}" for ext in ("csv", "md", "png"))
    csv_path.write_text(records_csv(rows), newline="")
    header, body = table(rows)
    md_path.write_text(plain_table(header, body))
    plot(rows, png_path)
    return [csv_path, md_path, png_path]


def main() -> None:
    start = time.perf_counter()
    rows = run()
    header, body = table(rows)
    print(terminal_table(body, header))
    for path in write_outputs(rows):
        print("wrote", path)
    print(f"{len(rows)} sites in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
