"""Every report kind opened in headless Chromium: no broken image, no script error, a tooltip per signature point;
then a comparison page explored as a reader would (Python playwright driving the system's Chromium: a legend entry
clicked, a point hovered and clicked, the plot zoomed and panned) and scatter labels measured as drawn. Skipped
where Chromium or playwright is missing, unless ONNXAFF_REQUIRE_BROWSER=1 (.ci/run sets it): then they fail.
The SVG's tooltips and styles are also checked without a browser."""

import html
import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

import onnxaff
from onnxaff.reports import svg
from onnxaff.reports.html import comparison_page, correlation_page, demo_page, fmt_preprocessing, fmt_shape, single_page
from onnxaff.results.comparison import compare, correlate
from onnxaff_models import shipped_models

BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
REQUIRED = os.environ.get("ONNXAFF_REQUIRE_BROWSER") == "1"
# Headless, nothing fetched by the browser itself (no update checks, no sync, no QUIC probes).
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def missing(why: str):
    if REQUIRED:
        pytest.fail(f"{why}; ONNXAFF_REQUIRE_BROWSER=1 asks for the browser tests")
    pytest.skip(why)


@pytest.fixture(scope="module")
def chromium() -> str:
    if BROWSER is None:
        missing("no headless Chromium installed (apt-get install chromium)")
    return BROWSER


@pytest.fixture(scope="module")
def browser(chromium):
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("playwright is not installed (pip install -e '.[browser]')")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=ARGS)
        yield b
        b.close()

# Put first in <head>: records script errors and failed loads; on load, writes what it found into the page.
PROBE_HEAD = ("<script>window.__errors=[];window.addEventListener('error',function(e){__errors.push(e.message||"
              "('failed to load '+((e.target&&(e.target.src||e.target.href))||'?').slice(0,60)))},true);</script>")
PROBE_END = ("<script>window.addEventListener('load',function(){var bad=[].filter.call(document.images,function(i)"
             "{return !(i.complete&&i.naturalWidth>0)}).length;var p=document.createElement('pre');p.id='probe';"
             "p.textContent=JSON.stringify({errors:__errors,broken:bad,images:document.images.length,"
             "tips:document.querySelectorAll('svg.sig g.pt[data-tip]').length,svgs:document.querySelectorAll('svg')"
             ".length});document.body.appendChild(p)})</script>")


def open_in_browser(page: str, tmp_path, name: str) -> dict:
    """The page in Chromium's own headless mode (no driver): what the probe found once it loaded."""
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


def test_the_probe_sees_broken_images_and_script_errors(chromium, tmp_path):
    page = ("<!DOCTYPE html><html><head></head><body><img src='data:image/png;base64,AAAA'>"
            "<script>notDefined()</script></body></html>")
    found = open_in_browser(page, tmp_path, "bad")
    assert found["broken"] == 1 and any("notDefined" in e for e in found["errors"])


def test_every_report_kind_renders_cleanly(chromium, shipped_sigs, tmp_path):
    sites = sum(len(svg.site_points(s, "affinity")) for s in shipped_sigs.values())
    for kind, page in report_pages(shipped_sigs).items():
        found = open_in_browser(page, tmp_path, kind)
        assert found["errors"] == [] and found["broken"] == 0, (kind, found)
        assert found["images"] + found["svgs"] >= 1, kind
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
    # nothing fetched; the titles work without the page's one script (its data block is the other <script>)
    assert "http" not in page and page.count("<script") == 2


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
    from onnxaff.format.signature import Signature

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


class Opened:
    """A page in a fresh Chromium tab, with the script errors and every request it made recorded."""

    def __init__(self, browser, tmp_path, page_text: str, name: str):
        path = tmp_path / f"{name}.html"
        path.write_text(page_text, encoding="utf-8")
        self.url = path.as_uri()
        self.errors, self.requests = [], []
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.goto(self.url)

    def clean(self) -> bool:
        """No script error, nothing asked of a network: the one request is the file itself."""
        return self.errors == [] and self.requests == [self.url]

    def texts(self, selector: str) -> list[str]:
        return self.page.locator(selector).evaluate_all("els => els.map(e => e.textContent)")


def js_number(v: float) -> str:
    """A score as the detail panel writes it (JavaScript's String(+v.toFixed(4)))."""
    return repr(float(f"{v:.4f}"))


def test_a_comparison_page_explored_by_clicks_hovers_and_the_wheel(browser, shipped_sigs, tmp_path):
    """The acceptance of issue 30: a legend entry hides its model in every plot and shows it again; a point's
    tooltip names its site; a click opens the site's chunk scores, op types and neighbourhood; the wheel zooms,
    a drag pans, reset goes back."""
    names, sigs = list(shipped_sigs), list(shipped_sigs.values())
    opened = Opened(browser, tmp_path, comparison_page(sigs, [compare(sigs, metric=m) for m in ("affinity", "cka")]),
                    "explore")
    page = opened.page
    assert page.locator("svg.sig").count() == 2
    page.locator('svg.sig >> nth=0 >> g.legend[data-m="1"]').click()
    for plot in range(2):
        assert not page.locator(f'svg.sig >> nth={plot} >> g.series[data-m="1"]').is_visible()
        assert page.locator(f'svg.sig >> nth={plot} >> g.series[data-m="0"]').is_visible()
        assert "off" in page.locator(f'svg.sig >> nth={plot} >> g.legend[data-m="1"]').get_attribute("class")
    page.locator('svg.sig >> nth=1 >> g.legend[data-m="1"]').click()  # either plot's legend shows it again
    assert page.locator('svg.sig >> nth=0 >> g.series[data-m="1"]').is_visible()

    k = names.index("torch_vit")
    sig, point = sigs[k], svg.site_points(sigs[k], "affinity")[2]
    site = sig.sites[point["index"]]
    marker = page.locator(f'svg.sig >> nth=0 >> g.series[data-m="{k}"] g.pt[data-s="{point["index"]}"]')
    marker.hover()
    assert page.locator("#onnxaff-tip").is_visible()
    assert page.locator("#onnxaff-tip").text_content() == svg.point_title("torch_vit", point, "affinity")
    marker.click()
    detail = page.locator(".detail")
    text = detail.text_content()
    assert f"torch_vit — site #{site['index']} {site['id']} ({site['kind']})" in text
    assert "op types: " + " + ".join(site["op_types"]) in text
    affinity = detail.locator('tr[data-metric="affinity"]').text_content()
    assert ", ".join(js_number(v) for v in site["metrics"]["affinity"]["values"]) in affinity
    nb = site["neighbourhood"]
    assert opened.texts(".detail svg.nb g.node title") == [f"{n['name']} ({n['op']})" for n in nb["nodes"]]
    assert opened.texts(".detail svg.nb g.node.own text.op") == site["op_types"]
    assert detail.locator("svg.nb path.edge").count() == len(nb["edges"]) > 0

    ticks = opened.texts("svg.sig >> nth=0 >> g.yaxis text")
    box = page.locator("svg.sig >> nth=0 >> rect.frame").bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.wheel(0, -300)
    zoomed = opened.texts("svg.sig >> nth=0 >> g.yaxis text")
    span = [float(t) for t in ticks]
    assert zoomed != ticks and np.ptp([float(t) for t in zoomed]) < np.ptp(span)
    assert marker.get_attribute("transform") not in (None, "translate(0.00,0.00)")
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] / 2 + 120, box["y"] + box["height"] / 2 + 60, steps=4)
    page.mouse.up()
    assert opened.texts("svg.sig >> nth=0 >> g.yaxis text") != zoomed  # panned
    assert detail.text_content() == text  # the click ending a drag opens nothing
    page.locator("button", has_text="reset zoom").first.click()
    assert opened.texts("svg.sig >> nth=0 >> g.yaxis text") == ticks
    assert opened.clean(), (opened.errors, opened.requests)
    page.close()


def test_hostile_names_and_old_signatures_on_an_explored_page(browser, tmp_path):
    """A model or site named `</script>...` neither ends the data block nor runs; a signature written before
    neighbourhoods were recorded opens a detail that says so."""
    from tests.test_compare import mlp

    sig = onnxaff.analyze(mlp(3, False, 0), "synthetic:gaussian", limit=64, chunk_size=32, progress=False)
    hostile = "</script><script>window.pwned=1</script><!--"
    sig.model["name"] = hostile
    sig.sites[0] = sig.sites[0].updated(id=hostile).without("neighbourhood")
    opened = Opened(browser, tmp_path, single_page(sig, "affinity"), "hostile")
    page = opened.page
    assert page.evaluate("window.pwned") is None
    page.locator('svg.sig >> nth=0 >> g.pt[data-s="0"]').click()
    text = page.locator(".detail").text_content()
    assert f"{hostile} — site #0 {hostile}" in text and "not recorded (the signature was written before" in text
    assert opened.clean(), (opened.errors, opened.requests)
    page.close()


def test_scatter_labels_do_not_overlap_as_the_browser_draws_them(browser, tmp_path):
    """Eleven models in a tight cluster, long names: the labels' real boxes (the browser's font, not the
    estimate the placement used) overlap neither each other nor a point, and stay inside the plot."""
    from onnxaff.reports.scatter import scatter_svg

    rng = np.random.default_rng(1)
    plots = "".join(scatter_svg(list(0.6 + s * rng.standard_normal(11)), list(0.95 + s * rng.standard_normal(11)),
                                [f"torch_cnn_variant_{k}_relu_WWW" for k in range(11)], "affinity mean",
                                {"slope": 0.1, "intercept": 0.9, "r2": 0.5}, [k % 3 == 0 for k in range(11)])
                    for s in (0.0, 0.003, 0.05))
    opened = Opened(browser, tmp_path, f"<!DOCTYPE html><html><body>{plots}</body></html>", "scatter")
    found = opened.page.evaluate("""() => {
        const boxes = (s, sel) => [...s.querySelectorAll(sel)].map(e => e.getBBox()).map(b => [b.x, b.y, b.width,
                                                                                              b.height]);
        return [...document.querySelectorAll('svg.scatter')].map(s => ({labels: boxes(s, 'text.lab'),
            points: boxes(s, 'g.spt circle'), size: [s.viewBox.baseVal.width, s.viewBox.baseVal.height]}));
    }""")
    assert len(found) == 3
    for plot in found:
        labels, points = plot["labels"], plot["points"]
        assert len(labels) == len(points) == 11
        assert all(x >= 0 and y >= 0 and x + w <= plot["size"][0] and y + h <= plot["size"][1]
                   for x, y, w, h in labels)
        assert max(overlap(a, b) for i, a in enumerate(labels) for b in labels[i + 1:] + points) < 1.0
    opened.page.close()


def overlap(a, b) -> float:
    return max(0.0, min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0])) * \
        max(0.0, min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1]))


def test_eleven_models_fit_a_1400_px_window(browser, tmp_path):
    """The page never runs past the window: the 11×11 DTW matrix of long names scrolls inside its own box."""
    from tests.test_compare import fake_signature

    rng = np.random.default_rng(0)
    sigs = [fake_signature(f"a_rather_long_model_name_number_{k}", list(rng.uniform(0.5, 1, 8)), 1000 * (k + 1))
            for k in range(11)]
    opened = Opened(browser, tmp_path, comparison_page(sigs, [compare(sigs)], 3), "eleven")
    page = opened.page
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400
    matrix = page.locator(".scroll.matrix")
    assert matrix.evaluate("e => e.scrollWidth > e.clientWidth")  # it scrolls instead
    assert page.locator('svg.sig g.legend[data-m="10"]').is_visible()
    assert opened.clean(), (opened.errors, opened.requests)
    page.close()
