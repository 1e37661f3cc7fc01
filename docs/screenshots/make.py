"""Rebuild the report screenshots shown in the README and docs/reports.md (needs Chromium, and playwright for
the explored page: pip install -e '.[browser]'): python docs/screenshots/make.py.

Six shipped networks analysed on 512 of their digits under the default protocol; each report kind rendered headless at
1280 px wide; then the comparison explored: one model hidden, a site clicked (explore.png).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import onnxaff
from onnxaff.reports.html import comparison_page, correlation_page, demo_page, single_page
from onnxaff.results.comparison import compare, correlate
from onnxaff_models import shipped_models

HERE = Path(__file__).resolve().parent
MODELS = ("torch_cnn_relu", "torch_rescnn_relu", "torch_cnn_gelu_op17", "torch_vit", "sk_mlp_relu", "keras_cnn_relu")


def main() -> None:
    browser = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
    if browser is None:
        sys.exit("no Chromium found")
    sigs = {}
    zoo = {m.name: m for m in shipped_models()}
    for name in MODELS:
        m = zoo[name]
        # the default protocol (the report names it), with CKA beside the affinity for the comparison's second view
        sig = onnxaff.analyze(str(m.path), str(m.data), metrics=["affinity", "cka"], limit=512, progress=False)
        sig.model["name"], sig.model["test_accuracy"] = name, m.accuracy
        sigs[name] = sig
    ordered = list(sigs.values())
    comps = [compare(ordered, metric=m) for m in ("affinity", "cka")]
    corr = correlate(ordered, {n: str(s.model["test_accuracy"]) for n, s in sigs.items()})
    rows = [{"model": n, "framework": zoo[n].framework, "architecture": zoo[n].entry["architecture"],
             "sites": len(s.sites), "accuracy": zoo[n].accuracy, **{k: s.summary()["affinity"].get(k) for k in
                                                                    ("mean", "min", "share_above_0.95")},
             "flags": {m: s.flag_summary(m) for m in s.metrics}, "mostly_flagged": s.mostly_flagged("affinity")}
            for n, s in sigs.items()]
    pages = {"report": single_page(sigs["torch_vit"]), "compare": comparison_page(ordered, comps, 3),
             "correlate": correlation_page(corr), "demo": demo_page(ordered, comps, corr, rows, "affinity")}
    with tempfile.TemporaryDirectory() as tmp:
        for kind, page in pages.items():
            path = Path(tmp) / f"{kind}.html"
            path.write_text(page)
            shot = HERE / f"{kind}.png"
            subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                            "--hide-scrollbars", f"--user-data-dir={Path(tmp) / 'profile'}",
                            "--window-size=1280,1500", f"--screenshot={shot}", path.as_uri()],
                           capture_output=True, timeout=120, check=True)
            print(f"{shot} ({shot.stat().st_size // 1024} kB)")
        explored(browser, Path(tmp) / "compare.html", HERE / "explore.png")


def explored(browser: str, page_path: Path, shot: Path) -> None:
    """The comparison with one model hidden from the legend and a site of the residual CNN clicked."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=shutil.which(browser), args=["--headless", "--no-sandbox",
                                                                           "--disable-gpu", "--no-first-run"])
        page = b.new_page(viewport={"width": 1280, "height": 1100})
        page.goto(page_path.as_uri())
        page.locator(f'svg.sig >> nth=0 >> g.legend[data-m="{MODELS.index("sk_mlp_relu")}"]').click()
        page.locator(f'svg.sig >> nth=0 >> g.series[data-m="{MODELS.index("torch_rescnn_relu")}"] g.pt').nth(4).click()
        page.locator("svg.sig").first.scroll_into_view_if_needed()
        page.evaluate("window.scrollBy(0, -40)")
        page.screenshot(path=str(shot))
        b.close()
    print(f"{shot} ({shot.stat().st_size // 1024} kB)")


if __name__ == "__main__":
    main()
