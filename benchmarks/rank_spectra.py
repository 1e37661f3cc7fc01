"""Where r2's rank cutoff falls: the spectra of each shipped model's X under both reductions.

For every site whose standardised X spans more than three decades, per 512-row chunk: the singular values
relative to the largest, in units of the site's rounding (eps32·sqrt(P), onnxaff.graph.rewrite), through
onnxruntime's reduction (graph) and a host mean of the full tensors (numpy); and ‖Z_graph − Z_numpy‖₂/s₀,
the most any singular value can move between the two (Weyl). docs/statistics.md ("Rank cutoff") has the
numbers and the cutoff (16) and band (8) they justify. Run: python benchmarks/rank_spectra.py [model ...]
"""

from __future__ import annotations

import sys

import numpy as np

from onnxaff.analysis.config import AnalysisConfig
from onnxaff.analysis.plan import Plan
from onnxaff.graph.reduction import numpy_features
from onnxaff.metrics.rank import CUTOFF, FLOAT32_EPS, NOISE
from onnxaff.runtime.sessions import Runner
from onnxaff_models import shipped_models

CHUNK = 512


def features(model, reduce_in: str) -> tuple[dict, dict]:
    """{site id: X rows} through one reduction path, and {site id: rounding}, as a run feeds the metrics."""
    plan = Plan.build(model.path, str(model.data), AnalysisConfig(metrics=["r2"], reduce_in=reduce_in, progress=False))
    runner = Runner(plan.loaded, plan.augmented, device="cpu")
    rows: dict[str, list] = {s.id: [] for s in plan.ok_sites}
    for batch in plan.source.batches(plan.batch_size):
        arrays = runner.run(list(plan.names), batch)
        for site, part in zip(plan.ok_sites, plan.slices, strict=True):
            x = arrays[part][0]
            rows[site.id].append(numpy_features(x, site, plan.config.reduce) if plan.host_reduce else x)
    return ({k: np.concatenate(v).astype(np.float64) for k, v in rows.items()},
            {s.id: plan.outputs[s.index].rounding for s in plan.ok_sites})


def standardised(x: np.ndarray) -> np.ndarray:
    xc = x - x.mean(axis=0)
    sd = np.sqrt((xc * xc).mean(axis=0))
    return xc[:, sd > 0] / sd[sd > 0]


def main(names: list[str]) -> None:
    print(f"cutoff {CUTOFF:g}, ambiguous band [{CUTOFF - NOISE:g}, {CUTOFF + NOISE:g}] (units: rounding·s0)")
    gap = {"noise": 0.0, "signal": np.inf, "moved": 0.0}  # over every chunk of every site, P > 1
    for model in shipped_models():
        if names and model.name not in names:
            continue
        graph, rounding = features(model, "graph")
        host, _ = features(model, "numpy")
        for sid, xg in graph.items():
            for c in range(xg.shape[0] // CHUNK):
                rows = slice(c * CHUNK, (c + 1) * CHUNK)
                zg, zn = standardised(xg[rows]), standardised(host[sid][rows])
                sg, sn = (np.linalg.svd(z, compute_uv=False) for z in (zg, zn))
                unit = rounding[sid] * sg[0]
                moved = np.linalg.norm(zg - zn, 2) / unit
                both = np.concatenate([sg, sn]) / unit
                if rounding[sid] > FLOAT32_EPS:
                    gap["moved"] = max(gap["moved"], moved)
                    gap["noise"] = max(gap["noise"], both[both < CUTOFF].max(initial=0.0))
                    gap["signal"] = min(gap["signal"], both[both >= CUTOFF].min())
                if sg[-1] / sg[0] > 1e-3:
                    continue  # no direction anywhere near a cutoff
                small = sg / unit < 1e3
                print(f"{model.name} {sid} chunk {c}: rounding {rounding[sid]:.2e}, ‖ΔZ‖/s0 = {moved:.2f}; "
                      f"the {small.sum()} smallest of {sg.size} singular values")
                print("   graph:", " ".join(f"{v:.3g}" for v in sg[small] / unit))
                print("   numpy:", " ".join(f"{v:.3g}" for v in sn[small] / unit))
    print(f"sites with P > 1: largest ‖ΔZ‖/s0 {gap['moved']:.2f}, largest direction under the cutoff "
          f"{gap['noise']:.3g}, smallest above it {gap['signal']:.3g}")


if __name__ == "__main__":
    main(sys.argv[1:])
