"""What the explorable report is built from, checked without a browser: each site's neighbourhood in the graph
(recorded in the signature), the page's data block that no name can close, and scatter labels that do not
overlap. tests/test_report_browser.py clicks and hovers the pages themselves."""

import json
import re

import numpy as np
import pytest

import onnxaff
from onnxaff.analysis.sitelist import list_sites
from onnxaff.errors import OnnxaffError
from onnxaff.format.schema import validate
from onnxaff.graph.load import from_proto
from onnxaff.graph.neighbourhood import site_neighbourhood
from onnxaff.reports import explore
from onnxaff.reports.html import single_page
from onnxaff.reports.scatter import RADIUS, Box, place_labels, scatter_svg
from tests.builders import HEADER, mlp
from tests.conftest import parse

# Tanh is the site looked at: a constant and a Shape reader beside the data flow, seven readers of its output.
FAN = HEADER + """ g (float[N, 4] x) => (float[N, 4] y) {
    k = Constant <value = float {2.0}> ()
    a = Neg(x)
    m = Mul(a, k)
    b = Relu(m)
    s = Shape(b)
    c = Tanh(b)
    """ + "\n".join(f"d{i} = Abs(c)" for i in range(7)) + """
    e = Sum(""" + ", ".join(f"d{i}" for i in range(7)) + """)
    f = Exp(e)
    y = Reshape(f, s)
}"""


def test_a_neighbourhood_is_two_levels_of_data_flow_each_way_capped():
    loaded = from_proto(parse(FAN))
    tanh = next(s for s in list_sites(loaded).sites if s.kind == "tanh")
    nb = site_neighbourhood(loaded.view, tanh)
    ops = [(n["op"], n["at"]) for n in nb["nodes"]]
    # Neg is three levels up; the Constant and Shape are not data flow; 5 of the 7 Abs readers, Sum after them
    assert ops == [("Mul", -2), ("Relu", -1), ("Tanh", 0), *[("Abs", 1)] * 5, ("Sum", 2)]
    assert nb["omitted"] == 2
    assert nb["edges"] == [[0, 1], [1, 2], *[[2, k] for k in range(3, 8)], *[[k, 8] for k in range(3, 8)]]


def test_the_signature_records_each_sites_neighbourhood_and_checks_it_on_reading(rng, tmp_path):
    sig = onnxaff.analyze(mlp(rng), "synthetic:gaussian", limit=64, chunk_size=32, progress=False)
    relu, tanh = sig.sites
    assert [n["op"] for n in relu["neighbourhood"]["nodes"]] == ["MatMul", "Add", "Relu", "MatMul", "Tanh"]
    assert [n["name"] for n in tanh["neighbourhood"]["nodes"] if n["at"] == 0] == tanh["nodes"]
    d = json.loads(json.dumps(sig.to_dict()))
    validate(d, "sig.json")
    d["sites"][1]["neighbourhood"]["edges"].append([0, 9])
    with pytest.raises(OnnxaffError, match=r"^sig.json: sites\[1\].neighbourhood.edges\[2\]: expected two node"):
        validate(d, "sig.json")
    del d["sites"][1]["neighbourhood"]  # written before it was recorded: still a signature
    validate(d, "sig.json")


HOSTILE = "</script><script>window.pwned=1</script><!--\u2028\x1b"


def test_the_data_block_cannot_be_closed_by_a_name():
    block = explore.embed({"models": [{"name": HOSTILE, "sites": {"0": {"id": HOSTILE, "mean": float("nan")}}}]})
    inner = re.fullmatch(r'<script type="application/json" id="onnxaff-data">(.*)</script>', block, re.S).group(1)
    assert not re.search(r"[<>&\u2028]", inner)
    back = json.loads(inner)["models"][0]
    assert back["name"] == back["sites"]["0"]["id"] == "</script><script>window.pwned=1</script><!--\\u2028\\x1b"
    assert back["sites"]["0"]["mean"] is None  # NaN is not JSON a browser parses


def test_every_page_carries_its_script_and_a_site_without_neighbourhood_says_so(rng):
    sig = onnxaff.analyze(mlp(rng), "synthetic:gaussian", limit=64, chunk_size=32, progress=False)
    sig.sites[0] = sig.sites[0].without("neighbourhood")
    page = single_page(sig)
    data = json.loads(re.search(r'id="onnxaff-data">(.*?)</script>', page).group(1))
    assert data["models"][0]["sites"]["0"]["neighbourhood"] == "absent"  # the page says "not recorded"
    assert data["models"][0]["sites"]["1"]["neighbourhood"]["nodes"]
    assert page.count("<script") == 2 and 'id="onnxaff-explore">' + explore.script() in page
    assert not re.search(r"(src|href)=[\"'](?!data:|#)", page) and "http" not in page  # nothing fetched


def label_boxes(svg_text: str) -> list[Box]:
    return [Box(*map(float, b.split())) for b in re.findall(r'data-box="([^"]+)"', svg_text)]


@pytest.mark.parametrize("spread", [0.0, 0.003, 0.05])
def test_scatter_labels_do_not_overlap_each_other_or_the_points(spread):
    """Eleven models, as the demo has, with long names; at one point (spread 0), nearly, and spread out."""
    rng = np.random.default_rng(1)
    x = list(0.6 + spread * rng.standard_normal(11))
    y = list(0.95 + spread * rng.standard_normal(11))
    names = [f"torch_cnn_variant_{k}_relu" for k in range(11)]
    page = scatter_svg(x, y, names, "affinity mean", {"slope": 0.1, "intercept": 0.9, "r2": 0.5}, [k % 3 == 0
                                                                                                  for k in range(11)])
    boxes = label_boxes(page)
    assert len(boxes) == 11
    area = Box(52, 26, 440 - 64, 320 - 72)
    assert all(b.inside(area) for b in boxes)
    assert all(a.overlap(b) == 0 for i, a in enumerate(boxes) for b in boxes[i + 1:])
    points = [tuple(map(float, p)) for p in re.findall(r'<circle cx="([\d.]+)" cy="([\d.]+)" r="4"', page)]
    marks = [Box(px - RADIUS, py - RADIUS, 2 * RADIUS, 2 * RADIUS) for px, py in points]
    assert all(b.overlap(m) == 0 for b in boxes for m in marks)


def test_labels_that_cannot_all_fit_overlap_least():
    """More labels than the space around a point holds: each still gets a box, no error."""
    boxes = place_labels([(100.0, 100.0)] * 60, ["a long model name"] * 60, Box(0, 0, 200, 200))
    assert len(boxes) == 60 and all(b.inside(Box(0, 0, 200, 200)) for b in boxes[:20])
