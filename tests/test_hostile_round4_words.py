"""Issue 50, "unclear or wrong words": what onnxaff says must be what it did. A model reached through a link, the
README's `onnxaff.from_torch`, the report's tooltip and site panel, a file that is no ONNX, a misspelt metric,
images far smaller than the model's input, a data source giving other rows than it declares, the shared models'
folder, and the README's test command."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import onnxaff
from onnxaff.format.signature import read_signature
from tests.builders import chain, save
from tests.conftest import need, run_cli
from tests.test_hostile_round4_faults import one_line

ROOT = Path(__file__).resolve().parents[1]


# --- a model reached through a symbolic link: the path recorded is the one whose weights were used ---

def _external_model(folder: Path, scale: float) -> Path:
    """x @ (scale·W) → Relu → Tanh, its weights in `w.bin` beside it."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((scale * rng.standard_normal((8, 8))).astype(np.float32), "W")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Tanh", ["r"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 8])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 8])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    onnx.save(model, path, save_as_external_data=True, location="w.bin", size_threshold=0)
    return path


def test_a_linked_model_records_the_link_whose_weights_it_used(tmp_path):
    """onnx and onnxruntime read external data from beside the path they are given (the link's folder): the
    signature said the target's path (whose w.bin holds other weights) while scoring the link's."""
    target = _external_model(tmp_path / "a", 1.0)
    twin = _external_model(tmp_path / "b", 3.0)  # the weights beside the link: a real file of its own
    link = tmp_path / "b" / "link.onnx"
    link.symlink_to(target)
    x = np.random.default_rng(1).standard_normal((256, 8)).astype(np.float32)
    options = dict(metrics=["affinity"], chunk_size=128, progress=False)
    linked = onnxaff.analyze(str(link), x, **options)
    assert linked.model["path"] == str(link.parent.resolve() / link.name)  # was the target's path, a/model.onnx
    assert [w["sha256"] for w in linked.model["external_data"]] == [
        w["sha256"] for w in onnxaff.analyze(str(twin), x, **options).model["external_data"]]
    beside = onnxaff.analyze(str(twin), x, **options)  # the same weights as a plain file: the same run
    other = onnxaff.analyze(str(target), x, **options)
    for a, b, c in zip(linked.sites, beside.sites, other.sites, strict=True):
        assert a["metrics"]["affinity"]["values"] == b["metrics"]["affinity"]["values"]
        assert a["metrics"]["affinity"]["values"] != c["metrics"]["affinity"]["values"]  # the test can fail


def test_a_worker_is_given_the_link_not_its_target(tmp_path):
    """A Ray worker gets the model's absolute path: resolved, it named the target and so read its weights."""
    from onnxaff.results.executors import _absolute

    target = _external_model(tmp_path / "a", 1.0)
    link = tmp_path / "b" / "link.onnx"
    link.parent.mkdir()
    link.symlink_to(target)
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert _absolute("b/link.onnx") == str(link.parent.resolve() / link.name)
    finally:
        os.chdir(here)


# --- the README's onnxaff.from_torch ---

def test_the_export_helpers_are_an_attribute_of_the_package():
    code = ("import sys, onnxaff; f = onnxaff.from_torch; print(f.__module__, callable(f), "
            "'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.split() == ["onnxaff.graph.export", "True", "False"]  # still cheap: torch is imported by the call only
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        onnxaff.nope  # noqa: B018
    with pytest.raises(AttributeError):
        getattr(onnxaff, "export.from_torch")


def test_the_readme_export_line_runs(tmp_path):
    torch = need("torch")
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    exported = onnxaff.from_torch(net, torch.randn(1, 4), tmp_path / "net.onnx")
    assert Path(exported.path).is_file() and not exported.missing


# --- the shared models' folder: one place reads it, ONNXAFF_SHARED_MODELS where set ---

def test_the_shared_models_folder_follows_the_environment(tmp_path):
    code = "from tests.conftest import SHARED_MODELS; print(SHARED_MODELS)"
    env = dict(os.environ, ONNXAFF_SHARED_MODELS=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env,
                         check=True).stdout
    assert out.strip() == str(tmp_path)


def test_no_test_file_builds_the_shared_models_path_itself():
    """test_image_shapes searched the folders above for shared/models and test_sites_frozen read the variable
    alone: every file now takes conftest.SHARED_MODELS."""
    built = re.compile(r"""["']shared["']\s*/\s*["']models["']|ONNXAFF_SHARED_MODELS""")
    offenders = [p.name for p in sorted((ROOT / "tests").glob("*.py"))
                 if p.name not in ("conftest.py", Path(__file__).name) and built.search(p.read_text())]
    assert offenders == []


# --- a file that is no ONNX: what it is and what to do, in one line ---

@pytest.fixture(scope="module")
def relu(tmp_path_factory):
    return save(chain("Relu", width=8), tmp_path_factory.mktemp("m") / "relu.onnx")


def test_a_pytorch_checkpoint_is_named_not_a_bare_decode_error(tmp_path, capfd):
    """`onnxaff sites model.pth` said `not a readable ONNX model: model.pth (DecodeError)`."""
    torch = need("torch")
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    torch.save(net.state_dict(), tmp_path / "net.pth")  # a zip archive since torch 1.6
    torch.save(net.state_dict(), tmp_path / "old.pth", _use_new_zipfile_serialization=False)  # a pickle
    for name, what in (("net.pth", "is a zip archive"), ("old.pth", "is a Python pickle")):
        for command in (["sites"], ["analyze", "--data", "synthetic:gaussian:64"]):
            line = one_line(*run_cli(capfd, command[0], tmp_path / name, *command[1:]))
            assert f"not an ONNX model: {tmp_path / name} {what}" in line, line
            assert "onnxaff.from_torch" in line and "DecodeError" not in line, line


@pytest.mark.parametrize("name, head, what", [
    ("model.h5", b"\x89HDF\r\n\x1a\n" + bytes(64), "an HDF5 file (Keras .h5)"),
    ("model.keras", b"PK\x03\x04" + bytes(64), "a Keras model"),
    ("model.tflite", b"\x1c\x00\x00\x00TFL3" + bytes(64), "a TensorFlow Lite model"),
    ("model.safetensors", (12).to_bytes(8, "little") + b'{"a": 1}    ' + bytes(8), "a safetensors file"),
    ("weights.bin", bytes(range(7, 71)), "no ONNX file by its suffix .bin"),
])
def test_other_frameworks_files_are_named(tmp_path, capfd, name, head, what):
    (tmp_path / name).write_bytes(head)
    line = one_line(*run_cli(capfd, "sites", tmp_path / name))
    assert f"not an ONNX model: {tmp_path / name} is {what}" in line, line


def test_a_damaged_onnx_file_keeps_its_words(tmp_path, capfd, relu):
    """A truncated .onnx is no other framework's file: the message stays as it was."""
    data = Path(relu).read_bytes()
    (tmp_path / "cut.onnx").write_bytes(data[:len(data) // 2])
    line = one_line(*run_cli(capfd, "sites", tmp_path / "cut.onnx"))
    assert "not a readable ONNX model" in line and "export" not in line, line


# --- a misspelt metric: did you mean ---

@pytest.mark.parametrize("given, meant", [("afinity", "affinity"), ("Affinity", "affinity"), ("cca", "cka"),
                                          ("affinity_lww", "affinity_lw"), ("affinity:epz=1e-6", "eps")])
def test_a_misspelt_metric_gets_a_suggestion(relu, tmp_path, capfd, given, meant):
    line = one_line(*run_cli(capfd, "analyze", relu, "--data", "synthetic:gaussian:64", "--metrics", given,
                             "--out", tmp_path / "s.json"))
    assert line.endswith(f"; did you mean {meant!r}?"), line


def test_a_name_far_from_every_metric_gets_no_suggestion(relu, tmp_path, capfd):
    line = one_line(*run_cli(capfd, "analyze", relu, "--data", "synthetic:gaussian:64", "--metrics", "zzz",
                             "--out", tmp_path / "s.json"))
    assert "unknown metric 'zzz'" in line and "did you mean" not in line, line


def test_report_and_compare_suggest_the_metric_too(relu, tmp_path, capfd):
    x = np.random.default_rng(0).standard_normal((64, 8)).astype(np.float32)
    onnxaff.analyze(relu, x, metrics=["affinity", "cka"], chunk_size=32, progress=False).write(tmp_path / "s.json")
    line = one_line(*run_cli(capfd, "report", tmp_path / "s.json", "--metric", "afinity", "--out", tmp_path / "r.html"))
    assert line.endswith("did you mean 'affinity'?"), line
    line = one_line(*run_cli(capfd, "compare", tmp_path / "s.json", tmp_path / "s.json", "--metric", "CKA", "--out",
                             tmp_path / "c.html"))
    assert line.endswith("did you mean 'cka'?"), line


# --- the report: the tooltip says what its interval is, the site panel the rows scored ---

@pytest.fixture(scope="module")
def six_hundred(tmp_path_factory):
    """600 rows at chunk size 512: one chunk of 512 scored (the interval from its half-chunks), 88 rows left."""
    from onnxaff_models import shipped_models

    model = next(m for m in shipped_models() if m.name == "sk_mlp_relu")
    x = np.random.default_rng(0).standard_normal((600, 784)).astype(np.float32)
    return onnxaff.analyze(str(model.path), x, metrics=["affinity", "cka"], chunk_size=512, reduce="mean",
                           progress=False)


def test_a_one_chunk_tooltip_says_its_interval_is_from_half_chunks(six_hundred):
    """It said `affinity = 0.6290 ± 0.0000 over 1 chunks` above `95 % interval [0.6232, 0.6347]`."""
    from onnxaff.reports import svg

    points = svg.site_points(six_hundred, "affinity")
    assert points and all(p["chunks"] == 1 and p["ci95"][1] > p["ci95"][0] for p in points)
    for p in points:
        tip = svg.point_title("m", p, "affinity")
        assert "± 0.0000" not in tip and "1 chunks" not in tip, tip
        assert f"affinity = {p['y']:.4f} (1 chunk)\n" in tip, tip
        assert (f"95 % interval [{p['ci95'][0]:.4f}, {p['ci95'][1]:.4f}] (from 4 half-chunks of the one chunk)"
                in tip), tip


@pytest.mark.parametrize("intervals, source", [("auto", "Student t over the 4 chunks"),
                                               ("half", "from the first chunk's half-chunks, over 4 chunks")])
def test_a_tooltip_over_chunks_names_the_std_and_the_interval(relu, intervals, source):
    from onnxaff.reports import svg

    x = np.random.default_rng(0).standard_normal((256, 8)).astype(np.float32)
    sig = onnxaff.analyze(relu, x, metrics=["affinity"], chunk_size=64, intervals=intervals, progress=False)
    (p,) = svg.site_points(sig, "affinity")
    tip = svg.point_title("m", p, "affinity")
    assert f"± {p['std']:.4f} over 4 chunks (std)\n95 % interval" in tip and tip.endswith(f"({source})"), tip


def test_the_site_panel_data_give_the_rows_scored_beside_those_collected(six_hundred, relu):
    from onnxaff.reports import explore

    sites = explore.page_data([("m", six_hundred)])["models"][0]["sites"]
    assert {(s["rows"], s["scored_rows"], s["chunks"]) for s in sites.values()} == {(600, 512, 1)}
    x = np.random.default_rng(0).standard_normal((40, 8)).astype(np.float32)  # one partial chunk: all 40 scored
    partial = onnxaff.analyze(relu, x, metrics=["affinity"], chunk_size=64, progress=False)
    (site,) = explore.page_data([("m", partial)])["models"][0]["sites"].values()
    assert (site["rows"], site["scored_rows"]) == (40, 40)


def test_the_site_panel_gives_the_rows_scored_under_the_default_width_chunks():
    """Under the default chunk size 4d a site's chunks hold max(64, 4·D) rows: the panel said `rows: 600` with no
    word of the rows scored (scored_rows was None for any chunk size but a fixed number)."""
    from onnxaff.reports import explore
    from onnxaff_models import shipped_models

    model = next(m for m in shipped_models() if m.name == "sk_mlp_relu")  # three ReLUs of 64, a softmax of 10
    x = np.random.default_rng(0).standard_normal((600, 784)).astype(np.float32)
    sig = onnxaff.analyze(str(model.path), x, metrics=["affinity"], progress=False)
    sites = explore.page_data([("m", sig)])["models"][0]["sites"].values()
    # D = 64: 256-row chunks, 2 of them in 600 rows; D = 10: the 64-row floor, 9 of them
    assert sorted((s["dim"], s["rows"], s["scored_rows"], s["chunks"]) for s in sites) == [
        (10, 600, 576, 9), (64, 600, 512, 2), (64, 600, 512, 2), (64, 600, 512, 2)]


def test_the_site_panel_and_tooltip_as_the_browser_shows_them(six_hundred, tmp_path):
    """Clicked in Chromium: the panel says `rows: 512 scored in 1 chunk (600 collected)` (it said `rows: 600`), and
    the hovered tooltip is the text above."""
    from onnxaff.reports import svg
    from onnxaff.reports.html import single_page
    from tests.test_report_browser import ARGS, Opened, missing

    browser_path = next((p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if Path(p).exists()), None)
    if browser_path is None:
        missing("no headless Chromium installed (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("playwright is not installed (pip install -e '.[browser]')")
    point = svg.site_points(six_hundred, "affinity")[0]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=browser_path, args=ARGS)
        try:
            opened = Opened(browser, tmp_path, single_page(six_hundred, "affinity"), "rows")
            marker = opened.page.locator(f'svg.sig >> nth=0 >> g.pt[data-s="{point["index"]}"]')
            marker.hover()
            assert opened.page.locator("#onnxaff-tip").text_content() == svg.point_title(
                six_hundred.model["name"], point, "affinity")
            marker.click()
            facts = opened.page.locator(".detail p.facts").text_content()
            assert "rows: 512 scored in 1 chunk (600 collected)" in facts, facts
            assert opened.clean(), (opened.errors, opened.requests)
        finally:
            browser.close()


# --- images far smaller than the model's input: said once ---

def _images(folder: Path, sizes) -> Path:
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for k, (w, h) in enumerate(sizes):
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(folder / f"{k:03d}.bmp")
    return folder


def test_tiny_images_enlarged_to_the_input_are_said_once(tmp_path, capfd):
    """8×8 BMPs fed to a 224×224 model were resized to 256 and cropped without a word."""
    model = save(chain("Relu", dims="N, 3, 224, 224"), tmp_path / "m.onnx")
    folder = _images(tmp_path / "tiny", [(8, 8)] * 5 + [(300, 260)] * 3)
    code, out, err = run_cli(capfd, "analyze", model, "--data", folder, "--out", tmp_path / "s.json",
                             "--chunk-size", 4, "--metrics", "affinity")
    assert code == 0, err
    said = [w for w in read_signature(tmp_path / "s.json").warnings if "enlarged" in w]
    assert said == ["image folder: 5 of the 8 examined images are enlarged more than 4× to reach the model's "
                    "224x224 input (the smallest 8x8): their pixels are mostly interpolated"], said
    assert (out + err).count("enlarged more than 4×") == 1  # said once, not per batch


def test_images_near_the_input_size_are_not_warned_about(tmp_path):
    from onnxaff.data.images import small_images_message
    from onnxaff.data.preprocess import build_preprocess
    from onnxaff.data.source import InputSpec

    spec = InputSpec("x", np.dtype(np.float32), ("N", 3, 224, 224))
    p = build_preprocess("torchvision", spec)
    files = sorted(_images(tmp_path / "ok", [(64, 64), (120, 90), (500, 375)]).iterdir())
    assert small_images_message(files, p) is None  # 64 → 256 is exactly 4×: enlarged, not far smaller
    many = sorted(_images(tmp_path / "many", [(8, 8)] * 300).iterdir())
    line = small_images_message(many, p)
    assert line.startswith("image folder: 256 of the 256 examined (of 300) images"), line


# --- the README's test command: the tests it skips for want of an optional part are said ---

def test_skips_for_want_of_the_browser_or_a_module_are_said_after_the_run(tmp_path):
    """`python -m pytest -q` skipped the browser and torch tests among 20 other skips, unsaid; CI runs them."""
    (tmp_path / "test_optional.py").write_text(textwrap.dedent('''
        import pytest
        from tests.conftest import need

        def test_browser():
            pytest.skip("no headless Chromium installed (apt-get install chromium)")

        @pytest.mark.parametrize("k", range(3))
        def test_module(k):
            need("onnxaff_no_such_module")

        def test_other():
            pytest.skip("slow: set ONNXAFF_SLOW=1")
    '''))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                          "--rootdir", str(tmp_path), str(tmp_path / "test_optional.py")],
                         capture_output=True, text=True, cwd=ROOT,
                         env={k: v for k, v in os.environ.items() if not k.startswith("ONNXAFF_REQUIRE")})
    assert "5 skipped" in run.stdout, run.stdout + run.stderr
    lines = [ln for ln in run.stdout.splitlines() if "skipped:" in ln or "skipped without" in ln]
    assert lines == ["1 browser tests skipped: no headless Chromium or playwright (apt-get install chromium, pip "
                     "install -e '.[browser]'; ONNXAFF_REQUIRE_BROWSER=1 fails them instead, as CI does)",
                     "3 tests skipped without onnxaff_no_such_module (pip install onnxaff_no_such_module; "
                     "ONNXAFF_REQUIRE=onnxaff_no_such_module fails them instead, as CI does)"], run.stdout


def test_the_readme_says_what_its_test_command_skips():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("Run the tests:"):readme.index("## The demo")]
    for words in ("ONNXAFF_REQUIRE_BROWSER=1", "ONNXAFF_REQUIRE=torch", ".[browser]", "torch==2.13.0",
                  "ONNXAFF_SHARED_MODELS"):
        assert words in section, words


# --- a source giving other examples than its length declares: a warning (a third-party one is refused for it) ---

def test_a_source_giving_other_examples_than_it_declares_is_warned_about(relu, tmp_path, monkeypatch):
    """Only a checked third-party source was held to its length (onnxaff.data.guarded, a one-line error); a source
    the run does not check gave fewer or more examples without a word."""
    from onnxaff.data import arrays

    x = np.random.default_rng(0).standard_normal((96, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    options = dict(metrics=["affinity"], chunk_size=16, batch_size=16, progress=False)
    clean = onnxaff.analyze(relu, str(tmp_path / "x.npy"), **options)
    assert not [w for w in clean.warnings if "declares" in w]
    length, batches = arrays.ArraySource.__len__, arrays.ArraySource.batches

    monkeypatch.setattr(arrays.ArraySource, "__len__", lambda self: length(self) + 32)  # declares 128, gives 96
    fewer = onnxaff.analyze(relu, str(tmp_path / "x.npy"), **options)
    assert [w for w in fewer.warnings if "declares" in w] == [
        f"the arrays source {tmp_path / 'x.npy'} gave 96 examples (used, dropped and unreadable) where its length "
        "declares 128: the scores are of the 96; a shard or a resumed run splits the data by the declared count"]

    def one_more(self, batch_size, start=0, stop=None, should_stop=None):  # a batch past the window asked for
        yield from batches(self, batch_size, start, stop, should_stop)
        yield from batches(self, batch_size, 0, batch_size, should_stop)

    monkeypatch.setattr(arrays.ArraySource, "__len__", length)
    monkeypatch.setattr(arrays.ArraySource, "batches", one_more)
    more = onnxaff.analyze(relu, str(tmp_path / "x.npy"), **options)
    assert more.data["samples"] == 112
    assert [w for w in more.warnings if "declares" in w] == [
        f"the arrays source {tmp_path / 'x.npy'} gave 112 examples (used, dropped and unreadable) where its length "
        "declares 96: the scores are of the 112; a shard or a resumed run splits the data by the declared count"]
