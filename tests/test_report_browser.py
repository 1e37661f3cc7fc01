"""Every report kind opened in headless Chromium (skipped where no browser is installed): no broken image,
no script error, a tooltip per signature point; and the SVG's tooltips and styles checked without one."""

import html
import json
import re
import shutil
import subprocess

import pytest

import onnxaff
from onnxaff.compare import compare, correlate
from onnxaff.report import svg
from onnxaff.report.html import comparison_page, correlation_page, demo_page, fmt_preprocessing, fmt_shape, single_page
from onnxaff_models import shipped_models

BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
needs_browser = pytest.mark.skipif(BROWSER is None, reason="no headless Chromium installed")

# Put first in <head>: records script errors and failed loads; on load, writes what it found into the page.
PROBE_HEAD = ("<script>window.__errors=[];window.addEventListener('error',function(e){__errors.push(e.message||"
              "('failed to load '+((e.target&&(e.target.src||e.target.href))||'?').slice(0,60)))},true);</script>")
PROBE_END = ("<script>window.addEventListener('load',function(){var bad=[].filter.call(document.images,function(i)"
             "{return !(i.complete&&i.naturalWidth>0)}).length;var p=document.createElement('pre');p.id='probe';"
             "p.textContent=JSON.stringify({errors:__errors,broken:bad,images:document.images.length,"
             "tips:document.querySelectorAll('svg.sig g.pt title').length});document.body.appendChild(p)})</script>")


def open_in_browser(page: str, tmp_path, name: str) -> dict:
    probed = page.replace("<head>", "<head>" + PROBE_HEAD, 1).replace("</body>", PROBE_END + "</body>", 1)
    path = tmp_path / f"{name}.html"
    path.write_text(probed)
    r = subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update", "--disable-sync",
                        f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", "--virtual-time-budget=10000",
                        path.as_uri()], capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="probe">(.*?)</pre>', r.stdout)
    assert found, f"the page did not finish loading: {r.stderr[-500:]}"
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))


@pytest.fixture(scope="module")
def shipped_sigs():
    out = {}
    for m in shipped_models():
        if m.name in ("sk_mlp_relu", "sk_mlp_tanh", "sk_mlp_logistic", "torch_vit"):
            sig = onnxaff.analyze(str(m.path), str(m.data), metrics=["affinity", "cka"], chunk_size=256, limit=512,
                                  progress=False, chunk_workers=0)
            sig.model["name"] = m.name
            sig.model["test_accuracy"] = m.accuracy
            out[m.name] = sig
    return out


def report_pages(sigs: dict) -> dict[str, str]:
    ordered = list(sigs.values())
    comps = [compare(ordered, metric=m) for m in ("affinity", "cka")]
    corr = correlate(ordered, {n: str(s.model["test_accuracy"]) for n, s in sigs.items()})
    rows = [{"model": n, "framework": "f", "architecture": "a", "sites": len(s.sites), "accuracy": 0.9,
             "mean": s.summary()["affinity"]["mean"], "min": 0.1, "share_above_0.95": 0.0} for n, s in sigs.items()]
    return {"report": single_page(ordered[0], "affinity"), "compare": comparison_page(ordered, comps, 2),
            "correlate": correlation_page(corr), "demo": demo_page(ordered, comps, corr, rows, "affinity")}


@needs_browser
def test_the_probe_sees_broken_images_and_script_errors(tmp_path):
    page = ("<!DOCTYPE html><html><head></head><body><img src='data:image/png;base64,AAAA'>"
            "<script>notDefined()</script></body></html>")
    found = open_in_browser(page, tmp_path, "bad")
    assert found["broken"] == 1 and any("notDefined" in e for e in found["errors"])


@needs_browser
def test_every_report_kind_renders_cleanly(shipped_sigs, tmp_path):
    sites = sum(len(svg.site_points(s, "affinity")) for s in shipped_sigs.values())
    for kind, page in report_pages(shipped_sigs).items():
        found = open_in_browser(page, tmp_path, kind)
        assert found["errors"] == [] and found["broken"] == 0, (kind, found)
        assert found["images"] >= 1, kind
        if kind == "report":
            first = next(iter(shipped_sigs.values()))
            # two sections (affinity, cka), a tooltip per scored site each
            assert found["tips"] == len(svg.site_points(first, "affinity")) + len(svg.site_points(first, "cka"))
        elif kind in ("compare", "demo"):
            assert found["tips"] == sites + sum(len(svg.site_points(s, "cka")) for s in shipped_sigs.values())


def test_tooltips_name_the_site_and_its_spread(shipped_sigs):
    sig = shipped_sigs["torch_vit"]
    page = single_page(sig, "affinity")
    for p in svg.site_points(sig, "affinity"):
        tip = svg.point_title("torch_vit", p, "affinity")
        assert f"#{p['index']} {p['site']} ({p['kind']}; {p['ops']})" in tip and f"D = {p['dim']}" in tip
        assert f"affinity = {p['y']:.4f} ± {p['std']:.4f} over {p['chunks']} chunks" in tip
        assert f"<title>{html.escape(tip)}</title>" in page
    assert "http" not in page and "<script" not in page  # nothing fetched, nothing run: tooltips are SVG titles


def test_every_metric_has_a_section_and_text_is_readable(shipped_sigs):
    sig = shipped_sigs["sk_mlp_relu"]
    page = single_page(sig, "cka")
    assert page.index("id='m-cka'") < page.index("id='m-affinity'")  # the chosen metric first, the others too
    assert "href=\"#m-affinity\"" in page
    assert fmt_shape(["N", 16, 112, 112]) == fmt_shape(["unk__3", 16, 112, 112]) == "N×16×112×112"
    assert "[&#x27;" not in page  # no Python list reprs
    line = fmt_preprocessing({"preset": "torchvision", "resize_shorter_side": 256, "center_crop": [224, 224],
                              "scale": 1 / 255, "offset": 0.0, "mean": (0.485, 0.456, 0.406),
                              "std": (0.229, 0.224, 0.225), "channel_order": "RGB", "interpolation": "bilinear",
                              "layout": "NCHW", "dtype": "float32"})
    assert line == ("preset torchvision; resize shorter side to 256; centre crop 224×224; bilinear interpolation; "
                    "× 0.00392157; − mean (0.485, 0.456, 0.406); ÷ std (0.229, 0.224, 0.225); RGB, NCHW, float32")
    assert re.search(r"<td class=\"l\">Relu</td><td class=\"l\">relu</td>", page)  # text columns left-aligned


def test_partial_chunks_are_marked(tmp_path):
    from tests.test_compare import mlp

    sig = onnxaff.analyze(mlp(3, False, 0), "synthetic:gaussian", limit=40, chunk_size=64, progress=False)
    page = single_page(sig)
    assert "* scored on one partial chunk" in page and re.search(r"\d\*</td>", page)
    assert "partial chunk" in svg.point_title("m", svg.site_points(sig, "affinity")[0], "affinity")


def test_eleven_models_get_distinct_colour_and_marker():
    styles = [svg.style(k) for k in range(70)]
    assert len(set(styles)) == 70 and len({c for c, _ in styles[:10]}) == 10
    assert styles[10][0] == styles[0][0] and styles[10][1] != styles[0][1]  # colour repeats, marker does not


def test_statistics_tables_show_near_linear_only_where_the_metric_defines_it():
    from onnxaff.signature import Signature

    def sig(name, metric, info, values):
        sites = [{"index": i, "id": f"s{i}", "kind": "relu", "status": "ok", "metrics": {metric: {"mean": v}}}
                 for i, v in enumerate(values)]
        return Signature(model={"name": name}, data={}, options={}, runtime={}, metrics={metric: info}, sites=sites)

    aff = {"direction": "higher = more linear", "range": [0.0, 1.0]}
    nlc = {"direction": "lower = more linear", "range": [0.0, None]}
    pair = [sig("a", "affinity", aff, [0.5, 0.97, 0.99]), sig("b", "affinity", aff, [0.2, 0.3])]
    page = comparison_page(pair, [compare(pair)])
    assert "<th class=\"\">near-linear</th>" in page and "67% (&gt; 0.95)" in page and "0% (&gt; 0.95)" in page
    pair = [sig("a", "nlc", nlc, [1.2, 1.5]), sig("b", "nlc", nlc, [1.1, 3.0])]
    page = comparison_page(pair, [compare(pair, metric="nlc")])
    assert "near-linear" not in page and "share_above" not in page
