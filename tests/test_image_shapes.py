"""Image folders feed inputs of any shape: non-square, symbolic H/W, NHWC, letterboxed; sizes as N or HxW."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

import onnxaff
from onnxaff.data import model_inputs, open_source
from onnxaff.data.images import list_images
from onnxaff.data.preprocess import parse_size
from onnxaff.errors import OnnxaffError
from tests.conftest import SHARED_MODELS, run_cli
from tests.test_images import SAMPLED, image_model, photo_folder, sample_photos  # noqa: F401 (a fixture)

PADDLE_CLS = SHARED_MODELS / "ch_ppocr_mobile_v2.0_cls_infer.onnx"


def cover_reference(path, h, w, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)):
    """torchvision-style resize + centre crop for a non-square crop, by brute force: the smallest shorter
    side (from round(min(h, w) / 0.875) up) whose truncated resize covers h/0.875 x w/0.875."""
    img = Image.open(path).convert("RGB")
    iw, ih = img.size
    need_w, need_h = round(w / 0.875), round(h / 0.875)
    s = round(min(h, w) / 0.875)
    while True:
        size = (s, int(s * ih / iw)) if iw <= ih else (int(s * iw / ih), s)
        if size[0] >= need_w and size[1] >= need_h:
            break
        s += 1
    img = img.resize(size, Image.Resampling.BILINEAR)
    left, top = round((size[0] - w) / 2), round((size[1] - h) / 2)
    a = np.asarray(img.crop((left, top, left + w, top + h)), dtype=np.float64)
    return ((a / 255 - mean) / std).transpose(2, 0, 1)


def rec_model():
    """A PP-OCR recogniser in miniature: symbolic H and W, but only 48x320 lines fit (a [1, 4, 24, 160]
    constant is added after a stride-2 conv), and a dynamic Reshape whose rank shape inference misses."""
    rng = np.random.default_rng(0)

    def init(name, a):
        return numpy_helper.from_array(np.asarray(a), name)

    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Add", ["r", "p"], ["a"]),
        helper.make_node("Sigmoid", ["a"], ["s"]),
        helper.make_node("Shape", ["s"], ["sh"]),
        helper.make_node("Size", ["sh"], ["rk"]),
        helper.make_node("Sub", ["rk", "one"], ["rk1"]),
        helper.make_node("Unsqueeze", ["rk1", "zero"], ["end"]),
        helper.make_node("Slice", ["sh", "zero", "end"], ["head"]),
        helper.make_node("Concat", ["head", "m1"], ["t"], axis=0),
        helper.make_node("Reshape", ["s", "t"], ["q"]),
        helper.make_node("Tanh", ["q"], ["u"]),
        helper.make_node("ReduceSum", ["u"], ["y"], keepdims=0),
    ]
    inits = [init("w", rng.normal(size=(4, 3, 3, 3)).astype(np.float32)), init("b", np.zeros(4, np.float32)),
             init("p", rng.normal(size=(1, 4, 24, 160)).astype(np.float32)), init("one", np.array(1, np.int64)),
             init("zero", np.array([0], np.int64)), init("m1", np.array([-1], np.int64))]
    graph = helper.make_graph(nodes, "rec", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def batch_of(model, root, shapes=None, **images):
    source = open_source(str(root), model_inputs(model), shapes=shapes, images=images)
    return source, next(source.batches(64))["x"]


def test_sizes_are_n_or_hxw():
    assert parse_size("48x320", "--crop") == (48, 320) and parse_size("48X320", "--crop") == (48, 320)
    assert parse_size("224", "--crop") == 224 and parse_size(None, "--crop") is None
    for bad in ("48x", "0x320", "48x320x3", "big", "-5"):
        with pytest.raises(OnnxaffError, match="is not a size: give N or HxW"):
            parse_size(bad, "--crop")


def test_fixed_non_square_input_takes_every_photo(photo_folder):  # noqa: F811
    model = image_model(["N", 3, 48, 320])
    source, batch = batch_of(model, photo_folder)
    files = list_images(photo_folder)
    assert batch.shape == (len(files), 3, 48, 320) and not source.skipped  # portrait photos used to be skipped
    for got, path in zip(batch, files, strict=True):
        assert np.abs(got - cover_reference(path, 48, 320)).max() <= 1 / 255 / 0.224


def test_square_crops_keep_their_numbers(photo_folder):  # noqa: F811
    """The cover rule changes nothing for square crops (the golden numbers rest on it)."""
    from tests.test_images import reference

    _, batch = batch_of(image_model(["N", 3, 224, 224]), photo_folder)
    for got, path in zip(batch, list_images(photo_folder), strict=True):
        assert np.abs(got - reference(path, "torchvision", 224)).max() <= 1 / 255


def test_nhwc_non_square_input(photo_folder):  # noqa: F811
    model = image_model(["N", 64, 96, 3])
    source, batch = batch_of(model, photo_folder, preprocess="raw")
    assert batch.shape == (len(list_images(photo_folder)), 64, 96, 3) and not source.skipped
    assert source.describe()["preprocessing"]["layout"] == "NHWC"


def test_symbolic_hw_needs_a_size(photo_folder):  # noqa: F811
    model = image_model(["N", 3, "H", "W"])
    with pytest.raises(OnnxaffError, match=r"x: float32\[N, 3, H, W\] has a symbolic image height/width: give "
                                           r"the size with input_shapes=x=3xHxW or images.crop=HxW"):
        batch_of(model, photo_folder)
    nhwc = image_model(["N", "H", "W", 3])
    with pytest.raises(OnnxaffError, match=r"input_shapes=x=HxWx3"):
        batch_of(nhwc, photo_folder)


def test_input_shape_and_crop_fix_symbolic_hw_alike(photo_folder):  # noqa: F811
    model = image_model(["N", 3, "H", "W"])
    s1, by_shape = batch_of(model, photo_folder, shapes={"x": (3, 48, 320)})
    _, by_crop = batch_of(model, photo_folder, crop=(48, 320))
    assert by_shape.shape[1:] == (3, 48, 320) and np.array_equal(by_shape, by_crop)
    assert s1.describe()["preprocessing"]["center_crop"] == [48, 320]
    with pytest.raises(OnnxaffError, match=r"input_shapes=x=3x48x320 gives examples of shape"):
        batch_of(image_model(["N", 3, 32, "W"]), photo_folder, shapes={"x": (3, 48, 320)})
    with pytest.raises(OnnxaffError, match="gives 2 dims, but an image input takes 3"):
        batch_of(model, photo_folder, shapes={"x": (48, 320)})
    with pytest.raises(OnnxaffError, match="images.crop 32x320 but model input .* takes 48xW images"):
        batch_of(image_model(["N", 3, 48, "W"]), photo_folder, crop=(32, 320))


def test_resize_hxw_is_exact(photo_folder):  # noqa: F811
    model = image_model(["N", 3, 48, 320])
    _, batch = batch_of(model, photo_folder, preprocess="raw", resize=(48, 320))
    path = list_images(photo_folder)[0]
    ref = np.asarray(Image.open(path).convert("RGB").resize((320, 48), Image.Resampling.BILINEAR), np.float64) / 255
    assert np.abs(batch[0] - ref.transpose(2, 0, 1)).max() <= 1 / 255
    with pytest.raises(OnnxaffError, match="images.resize 40x300 is smaller than the 48x320 crop"):
        batch_of(model, photo_folder, resize=(40, 300))


@pytest.mark.parametrize("fit,left", [("letterbox", 112), ("pad", 0)])
def test_letterbox_and_pad_keep_the_aspect(tmp_path, fit, left):
    root = tmp_path / "one"
    root.mkdir()
    Image.new("RGB", (100, 50), (200, 10, 30)).save(root / "red.png")  # 2:1 → 48x96 inside 48x320
    model = image_model(["N", 3, 48, 320])
    source, batch = batch_of(model, root, preprocess="raw", fit=fit, pad_value=(114,))
    px = np.rint(batch[0].transpose(1, 2, 0) * 255)
    inside = np.zeros((48, 320), bool)
    inside[:, left:left + 96] = True
    assert (px[inside] == [200, 10, 30]).all() and (px[~inside] == 114).all()
    d = source.describe()["preprocessing"]
    assert d["fit"] == fit and d["size"] == [48, 320] and d["pad_value"] == [114]
    with pytest.raises(OnnxaffError, match=f"images.fit {fit} scales each image to fit 48x320 itself: drop the resize"):
        batch_of(model, root, fit=fit, resize=64)
    with pytest.raises(OnnxaffError, match="images.pad_value 300 must be 1 or 3 pixel value"):
        batch_of(model, root, fit=fit, pad_value=(300,))


def test_rec_style_model_analyses_from_photos(photo_folder, capfd, tmp_path):  # noqa: F811
    """Acceptance: symbolic H/W fed 48x320 lines by --input-shape or by --crop, every site scored."""
    path = tmp_path / "rec.onnx"
    onnx.save(rec_model(), path)
    code, _, err = run_cli(capfd, "analyze", path, "--data", photo_folder, "--quiet", "--workers", "0",
                           "--out", tmp_path / "no.json")
    assert code != 0 and len(err.strip().splitlines()) == 1 and "--input-shape x=3xHxW" in err
    results = []
    for opts in (["--input-shape", "x=3x48x320"], ["--crop", "48x320"]):
        out = tmp_path / f"rec{len(results)}.json"
        code, _, err = run_cli(capfd, "analyze", path, "--data", photo_folder, "--chunk-size", "2", "--workers", "0",
                               "--quiet", "--out", out, *opts)
        assert code == 0, err
        sig = json.loads(out.read_text())
        assert [s["status"] for s in sig["sites"]] == ["ok"] * 3  # relu, sigmoid, and tanh after the probe run
        results.append([s["metrics"]["affinity"]["mean"] for s in sig["sites"]])
    assert results[0] == results[1]


def test_cli_crop_hxw_and_help(photo_folder, capfd, tmp_path):  # noqa: F811
    code, out, _ = run_cli(capfd, "analyze", "--help")
    assert code == 0 and "image folder" in out and "Feature axis of rank-3+" in out and "N|HxW" in out
    path = tmp_path / "rec.onnx"
    onnx.save(rec_model(), path)
    code, _, err = run_cli(capfd, "analyze", path, "--data", photo_folder, "--crop", "48y320", "--out",
                           tmp_path / "o.json")
    assert code != 0 and err.strip() == ("onnxaff: error: --crop '48y320' is not a size: give N or HxW "
                                         "(positive integers, e.g. 48x320)")


@pytest.mark.skipif(not PADDLE_CLS.exists(),
                    reason="the shared PaddleOCR models are not here")
def test_real_paddle_classifier_with_symbolic_hw(photo_folder):  # noqa: F811
    sig = onnxaff.analyze(str(PADDLE_CLS), str(photo_folder),
                          metrics=["affinity"], chunk_size=2, input_shapes={"x": (3, 48, 192)},
                          images={"workers": 0, "mean": (0.5,), "std": (0.5,)}, progress=False)
    assert sig.sites and all(s["status"] == "ok" for s in sig.sites) and len(sample_photos())


def test_top_level_help_cuts_no_description(capfd):
    from onnxaff.cli import cli

    code, out, _ = run_cli(capfd, "--help")
    commands = out.split("Commands:")[1]
    assert code == 0 and "..." not in commands
    flat = " ".join(commands.split())
    for name, cmd in cli.commands.items():
        first = cmd.help.split("\n\n")[0].split(". ")[0].rstrip(".")
        assert " ".join(first.split()) in flat, name


@pytest.mark.parametrize("shape", [["N", 3, 48, 320], ["N", 64, 96, 3]], ids=["nchw_48x320", "nhwc_64x96"])
def test_fixed_non_square_and_nhwc_models_analyse_from_a_folder_with_no_option(photo_folder, shape):  # noqa: F811
    sig = onnxaff.analyze(image_model(shape), str(photo_folder), metrics=["affinity"], chunk_size=2,
                          progress=False, chunk_workers=0)
    files = list_images(photo_folder)
    assert sig.data["samples"] == len(files) and sig.data["skipped"] == []
    assert sig.sites[0]["status"] == "ok" and sig.sites[0]["rows"] == SAMPLED * len(files)
    assert sig.data["preprocessing"]["center_crop"] == ([48, 320] if shape[1] == 3 else [64, 96])
