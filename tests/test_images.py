"""Image folders: presets against a step-by-step PIL + numpy reference, layouts, bad files, sampling."""

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from PIL import Image

import onnxaff
from onnxaff.data import model_inputs, open_source
from onnxaff.data.images import list_images, select
from onnxaff.errors import OnnxaffError
from tests.builders import chain
from tests.conftest import SHARED_MODELS

SAMPLED = 16  # rows a photo gives a site under the default reduce sample:16 (a map of 16 positions or more)


def sample_photos() -> list[Path]:
    photos = []
    mpl = pytest.importorskip("matplotlib.cbook")
    photos.append(Path(mpl.get_sample_data("grace_hopper.jpg", asfileobj=False)))
    sk = pytest.importorskip("sklearn.datasets")
    photos += sorted((Path(sk.__file__).parent / "images").glob("*.jpg"))  # china.jpg, flower.jpg
    return photos


@pytest.fixture(params=["flat", "classes"])
def photo_folder(request, tmp_path):
    root = tmp_path / "photos"
    for k, src in enumerate(sample_photos()):
        folder = root / (f"class{k % 2}" if request.param == "classes" else "")
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, folder / src.name.upper().replace(".JPG", ".JPG" if k % 2 else ".jpeg"))
    # a PNG copy too: every extension, any case
    Image.open(sample_photos()[0]).save(root / "copy.PNG")
    return root


def image_model(shape, opset=17):
    return chain("Relu", dims=", ".join(str(d) for d in shape), opset=opset)


def reference(path, preset, crop=224, layout="NCHW", gray=False):
    """The preprocessing written out by hand from the preset table."""
    img = Image.open(path).convert("L" if gray else "RGB")
    resize = {"torchvision": 256, "caffe": 256, "inception": int(round(crop / 0.875)), "raw": crop}[preset]
    w, h = img.size
    new = (resize, int(resize * h / w)) if w <= h else (int(resize * w / h), resize)
    img = img.resize(new, Image.Resampling.BILINEAR)
    left, top = int(round((new[0] - crop) / 2)), int(round((new[1] - crop) / 2))
    a = np.asarray(img.crop((left, top, left + crop, top + crop)), dtype=np.float64)
    if gray:
        a = a[:, :, None]
    if preset == "torchvision":
        a = (a / 255 - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225]
    elif preset == "inception":
        a = a / 127.5 - 1
    elif preset == "caffe":
        a = a[:, :, ::-1] - [103.939, 116.779, 123.68]
    else:
        a = a / 255
    return a.transpose(2, 0, 1) if layout == "NCHW" else a


def first_batch(model, root, **images):
    source = open_source(str(root), model_inputs(model), images=images)
    batch = next(source.batches(64))["x"]
    return source, batch


@pytest.mark.parametrize("preset,crop", [("torchvision", 224), ("inception", 299), ("caffe", 224), ("raw", 224)])
def test_presets_match_step_by_step_reference(photo_folder, preset, crop):
    model = image_model(["N", 3, crop, crop])
    source, batch = first_batch(model, photo_folder, preprocess=preset)
    files = list_images(photo_folder)
    assert batch.shape == (len(files), 3, crop, crop) and batch.dtype == np.float32
    for got, path in zip(batch, files, strict=True):
        assert np.abs(got - reference(path, preset, crop)).max() <= 1 / 255


def test_nhwc_model_gets_nhwc(photo_folder):
    model = image_model(["N", 299, 299, 3])
    source, batch = first_batch(model, photo_folder, preprocess="inception")
    assert batch.shape[1:] == (299, 299, 3)
    path = list_images(photo_folder)[0]
    assert np.abs(batch[0] - reference(path, "inception", 299, layout="NHWC")).max() <= 1 / 255
    assert source.describe()["preprocessing"]["layout"] == "NHWC"


def test_grayscale_model_gets_one_channel(photo_folder):
    path = SHARED_MODELS / "mnist-8.onnx"
    model = onnx.load(path) if path.exists() else image_model([1, 1, 28, 28])
    spec = model_inputs(model)[0]
    source = open_source(str(photo_folder), [spec], images={"preprocess": "raw"})
    batch = next(source.batches(1))[spec.name]
    assert batch.shape == (1, 1, 28, 28)
    assert np.abs(batch[0] - reference(list_images(photo_folder)[0], "raw", 28, gray=True)).max() <= 1 / 255
    with pytest.raises(OnnxaffError, match="3-channel mean"):
        open_source(str(photo_folder), [spec], images={"preprocess": "torchvision"})


def test_custom_overrides(photo_folder):
    model = image_model(["N", 3, 64, 64])
    _, batch = first_batch(model, photo_folder, preprocess="raw", mean=(0.5,), std=(0.25,), resize=80,
                           interpolation="bicubic")
    img = Image.open(list_images(photo_folder)[0]).convert("RGB")
    w, h = img.size
    new = (80, int(80 * h / w)) if w <= h else (int(80 * w / h), 80)
    img = img.resize(new, Image.Resampling.BICUBIC)
    left, top = int(round((new[0] - 64) / 2)), int(round((new[1] - 64) / 2))
    ref = (np.asarray(img.crop((left, top, left + 64, top + 64)), np.float64) / 255 - 0.5) / 0.25
    assert np.abs(batch[0] - ref.transpose(2, 0, 1)).max() <= 1 / 255


def test_preset_model_mismatch_is_a_clear_error(photo_folder):
    with pytest.raises(OnnxaffError, match="images.crop 200 but model input"):
        open_source(str(photo_folder), model_inputs(image_model(["N", 3, 224, 224])), images={"crop": 200})
    with pytest.raises(OnnxaffError, match="cannot tell the channel axis"):
        open_source(str(photo_folder), model_inputs(image_model(["N", 5, 224, 224])), images={})
    with pytest.raises(OnnxaffError, match="rank-4 image input"):
        open_source(str(photo_folder), model_inputs(image_model(["N", 8])), images={})


@pytest.mark.parametrize("workers", [0, 2])
def test_bad_files_are_skipped_counted_and_named(tmp_path, workers):
    root = tmp_path / "mixed"
    root.mkdir()
    photos = sample_photos()
    for src in photos:
        shutil.copy(src, root / src.name)
    (root / "truncated.jpg").write_bytes(photos[0].read_bytes()[:4000])
    (root / "empty.jpg").write_bytes(b"")
    (root / "notes.jpg").write_text("this is text, not a JPEG\n")
    model = image_model(["N", 3, 32, 32])
    sig = onnxaff.analyze(model, str(root), metrics=["affinity"], chunk_size=2, batch_size=2,
                          images={"preprocess": "raw", "workers": workers}, progress=False)
    skipped = sorted(s["file"] for s in sig.data["skipped"])
    assert skipped == ["empty.jpg", "notes.jpg", "truncated.jpg"]
    assert sig.data["samples"] == len(photos) and sig.sites[0]["rows"] == SAMPLED * len(photos)
    assert any("3 unreadable file(s)" in w for w in sig.warnings)


def test_folder_without_images(tmp_path):
    (tmp_path / "readme.txt").write_text("no images here")
    with pytest.raises(OnnxaffError, match="no images"):
        open_source(str(tmp_path), model_inputs(image_model(["N", 3, 32, 32])), images={})


def test_seeded_shuffle_is_reproducible_and_spread_over_classes(tmp_path):
    root = tmp_path / "val"
    for c in range(5):
        (root / f"n{c:08d}").mkdir(parents=True)
        for k in range(40):
            (root / f"n{c:08d}" / f"img_{k:03d}.png").touch()
    files = list_images(root)
    a = select(files, root, 100, shuffle=True, seed=1)
    b = select(files, root, 100, shuffle=True, seed=1)
    c = select(files, root, 100, shuffle=True, seed=2)
    assert a == b and a != c and len(set(a)) == 100
    per_class = {f.parent.name for f in a}
    assert len(per_class) == 5 and all(sum(f.parent.name == k for f in a) == 20 for k in per_class)
    assert select(files, root, 100, shuffle=False, seed=1) == files[:100]  # unshuffled: the first 100
