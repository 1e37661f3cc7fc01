"""Data sources are registered kinds (onnxaff.data.registry): each DataSource class parses its spec, identifies its
data for a study and opens it. A third-party kind, `npy:FOLDER` declared by a distribution outside the package
(an `onnxaff.sources` entry point), works in `analyze` and `study`, and a study sees when its folder changed."""

import json
import sys

import numpy as np
import pytest

from onnxaff.analysis.reads import data_path
from onnxaff.data import registry
from onnxaff.data.arrays import ArraySource
from onnxaff.data.audio import AudioFolderSource
from onnxaff.data.images import ImageFolderSource
from onnxaff.data.synthetic import SyntheticSource
from onnxaff.data.text import TextSource
from onnxaff.errors import OnnxaffError
from onnxaff.studies.identity import data_identity
from tests.builders import chain, save
from tests.conftest import run_cli

SOURCE = '''
from pathlib import Path

import numpy as np

from onnxaff.data.source import DataSource


class NpyFolder(DataSource):
    """npy:FOLDER: one example a .npy file, in name order."""

    spec_form = "npy:FOLDER"
    fed_as_they_are = "a folder of .npy examples"
    reads_folder = True

    @classmethod
    def parse(cls, spec):
        return spec[len("npy:"):] if spec.startswith("npy:") else None

    @classmethod
    def from_spec(cls, spec, path, inputs, **options):
        return cls(Path(path), inputs, options.get("limit"))

    def __init__(self, root, inputs, limit=None):
        self.root, self.input = root, inputs[0]
        self.files = sorted(root.glob("*.npy"))[:limit]

    def __len__(self):
        return len(self.files)

    def batches(self, batch_size, start=0, stop=None, should_stop=None):
        files = self.files[start:stop]
        for k in range(0, len(files), batch_size):
            yield {self.input.name: np.stack([np.load(f) for f in files[k:k + batch_size]]).astype(np.float32)}

    def describe(self):
        return {"source": f"npy:{self.root}", "kind": "npy folder", "samples": len(self.files)}
'''


@pytest.fixture
def npy_kind(tmp_path, monkeypatch):
    """A distribution on sys.path declaring the kind, as an installed wheel lays it out."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "npy_folder_source.py").write_text(SOURCE)
    info = site / "npy_folder_source-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: npy-folder-source\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[onnxaff.sources]\nnpy = npy_folder_source:NpyFolder\n")
    monkeypatch.syspath_prepend(str(site))
    registry.installed.cache_clear()
    yield
    registry.installed.cache_clear()
    sys.modules.pop("npy_folder_source", None)


def _folder(path, n: int, seed: int):
    path.mkdir(exist_ok=True)
    rng = np.random.default_rng(seed)
    for k in range(n):
        np.save(path / f"{k:04d}.npy", rng.standard_normal(4).astype(np.float32))
    return path


@pytest.mark.parametrize("spec, kind, path", [
    ("synthetic:gaussian:n=8", SyntheticSource, ""),
    ("audio:clips", AudioFolderSource, "clips"),
    ("text:notes.txt", TextSource, "notes.txt"),
    ("text:rows.jsonl:body", TextSource, "rows.jsonl"),
    ("x.npz", ArraySource, "x.npz"),
])
def test_each_built_in_kind_parses_its_spec(spec, kind, path):
    assert registry.find_kind(spec) == (kind, path)
    assert kind.relocate(spec, path, "/base/" + path) == spec.replace(path, "/base/" + path) if path else True


def test_a_folder_is_images_and_an_unknown_spec_is_refused_in_one_line(tmp_path):
    assert registry.find_kind(str(tmp_path)) == (ImageFolderSource, str(tmp_path))
    with pytest.raises(OnnxaffError, match=r"^data not found: nowhere$"):
        registry.kind_of("nowhere")
    odd = tmp_path / "x.csv"
    odd.write_text("1,2")
    with pytest.raises(OnnxaffError, match=r"^unrecognised data .*: give synthetic:gaussian\|uniform\|grid"):
        registry.kind_of(str(odd))


def test_a_third_party_kind_works_in_analyze(npy_kind, tmp_path, capfd):
    model = save(chain("Tanh"), tmp_path / "tanh.onnx")
    data = _folder(tmp_path / "examples", 96, seed=1)
    out = tmp_path / "sig.json"
    code, _, err = run_cli(capfd, "analyze", model, "--data", f"npy:{data}", "--chunk-size", "32", "--quiet",
                           "--metrics", "affinity", "--out", out)
    assert code == 0, err
    written = json.loads(out.read_text())
    assert written["sites"][0]["rows"] == 96 and written["data"]["kind"] == "npy folder"
    assert data_path(f"npy:{data}") == str(data)  # what the study keeps its outputs off


def test_a_third_party_kind_works_in_study_and_a_changed_folder_is_stale(npy_kind, tmp_path, capfd):
    model = save(chain("Tanh"), tmp_path / "tanh.onnx")
    data = _folder(tmp_path / "examples", 96, seed=1)
    spec = f"npy:{data}"
    args = ("study", model, "--data", spec, "--chunk-size", "32", "--metrics", "affinity",
            "--out", tmp_path / "study")

    def score() -> float:
        return json.loads((tmp_path / "study" / "signatures" / "tanh.json").read_text())["sites"][0]["metrics"][
            "affinity"]["mean"]

    code, _, err = run_cli(capfd, *args)
    assert code == 0, err
    first, key = score(), data_identity(spec)
    code, out, err = run_cli(capfd, *args)
    assert code == 0 and "1 up to date" in out + err, err
    (data / "0000.npy").unlink()  # the folder changes: fewer examples, other numbers
    _folder(data, 0, seed=2)
    np.save(data / "0001.npy", np.full(4, 5.0, np.float32))
    assert data_identity(spec) != key
    code, out, err = run_cli(capfd, *args)
    assert code == 0 and "0 up to date" in out + err, err
    fresh = score()
    assert fresh != first
    # What a fresh analysis of the changed folder gives, not the stale number.
    alone = tmp_path / "alone.json"
    code, _, err = run_cli(capfd, "analyze", model, "--data", spec, "--chunk-size", "32", "--quiet",
                           "--metrics", "affinity", "--out", alone)
    assert code == 0, err
    assert json.loads(alone.read_text())["sites"][0]["metrics"]["affinity"]["mean"] == fresh


def test_a_broken_entry_point_is_one_line(tmp_path, monkeypatch):
    site = tmp_path / "site"
    info = site / "broken_source-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-source\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[onnxaff.sources]\nbroken = json:dumps\n")
    monkeypatch.syspath_prepend(str(site))
    registry.installed.cache_clear()
    try:
        with pytest.raises(OnnxaffError, match=r"^data source entry point broken \(json:dumps\) is no DataSource"):
            registry.find_kind("synthetic:gaussian")
    finally:
        registry.installed.cache_clear()
