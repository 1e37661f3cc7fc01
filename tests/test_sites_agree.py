"""`onnxaff sites` lists exactly the sites `analyze` scores, with the same status, shapes and dims."""

import json

import onnx
import pytest

from onnxaff.analysis import open_run
from onnxaff.graph.reduction import feature_dim
from onnxaff_models import shipped_models
from tests.conftest import FIXTURES, run_cli
from tests.test_image_shapes import rec_model

MODELS = [pytest.param(p, id=p.stem) for p in sorted(FIXTURES.glob("*.onnx"))]
MODELS += [pytest.param(m.path, id=m.name) for m in shipped_models()]


def listed(capfd, path, *options):
    code, out, err = run_cli(capfd, "sites", path, "--format", "json", *options)
    assert code == 0, err
    return json.loads(out)


def analysed(path, **options):
    run = open_run(str(path), "synthetic:gaussian:n=4", metrics=["affinity"], chunk_size=2, batch_size=2,
                   progress=False, chunk_workers=0, **options)
    return json.loads(json.dumps([s.to_dict() | {"dim": feature_dim(s, "mean")} for s in run.plan.sites]))


@pytest.mark.parametrize("path", MODELS)
def test_sites_agree_with_analyze(capfd, path):
    assert listed(capfd, path) == analysed(path)


def test_blocks_and_pairs_agree(capfd):
    path = FIXTURES / "res_cnn_op17.onnx"
    first = listed(capfd, path)[0]
    pair = f"{first['input']}:{first['output']}"
    got = listed(capfd, path, "--blocks", "all", "--pairs", pair)
    assert got == analysed(path, blocks=["residual", "attention", "mlp"], pairs=[(first["input"], first["output"])])
    groups = [s["group"] for s in got]
    assert groups.count("pair") == 1 and groups.count("block") >= 1


def test_unknown_rank_resolved_by_a_probe_run(capfd, tmp_path):
    """A dynamic Reshape: static inference misses the rank; `sites` used to say 'skipped' where analyze scored."""
    path = tmp_path / "rec.onnx"
    onnx.save(rec_model(), path)
    got = listed(capfd, path, "--input-shape", "x=3x48x320")
    assert [s["status"] for s in got] == ["ok"] * 3 and got[2]["input_shape"] == ["N", 4, 24, 160]
    assert got == analysed(path, input_shapes={"x": (3, 48, 320)})
    # without a size the probe cannot run: the site stays skipped and the note says what to give
    code, out, _ = run_cli(capfd, "sites", path)
    assert code == 0 and "skipped" in out and "--input-shape x=3xDxD" in out
    code, _, err = run_cli(capfd, "sites", path, "--input-shape", "x=3x48x300")  # asked for: its failure is an error
    assert code == 2 and len(err.strip().splitlines()) == 1 and "onnxruntime failed" in err
