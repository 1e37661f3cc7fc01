"""onnxaff.graph.export: each framework's model round-trips to the same predictions, and no activation goes missing.

The framework tests run where the `models` extra is installed (torch, scikit-learn + skl2onnx,
tensorflow-cpu + tf2onnx) and are skipped elsewhere; the checks that need no framework always run.
"""

from __future__ import annotations

import re
import sys

import numpy as np
import onnx
import pytest

from onnxaff.errors import OnnxaffError
from onnxaff.graph.export import check_sites
from tests.builders import chain
from tests.conftest import need, run

TOL = dict(rtol=1e-5, atol=1e-5)  # float32 tolerance: the runtime's kernels sum in another order


def test_a_declared_activation_missing_from_the_file_is_an_error(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(chain("Relu", "Softmax"), path)
    ok = check_sites(path, ["relu", "softmax"])
    assert ok.ok and ok.found == ["relu", "softmax"] and ok.extra == []
    with pytest.raises(OnnxaffError, match=r"lost activations the framework declares: tanh \(declared 3, found 2"):
        check_sites(path, ["relu", "tanh", "softmax"])
    lenient = check_sites(path, ["relu", "tanh", "softmax"], strict=False)
    assert lenient.missing == ["tanh"] and not lenient.ok
    assert check_sites(path, ["relu"]).extra == ["softmax"]  # a functional call the framework does not declare


def test_an_export_reads_as_counts(tmp_path):
    """A notebook showed `found` as a list of 35 equal strings (issue 30): the repr counts the kinds."""
    path = tmp_path / "m.onnx"
    onnx.save(chain(*["Relu"] * 5, "Softmax"), path)
    text = repr(check_sites(path, ["relu"] * 5 + ["softmax", "tanh"], strict=False))
    assert "found 6 sites (relu ×5, softmax)" in text and "missing tanh" in text and "extra none" in text
    assert text.count("relu") == 1


@pytest.mark.parametrize(("helper", "module"), [("from_torch", "torch"), ("from_sklearn", "skl2onnx"),
                                                ("from_keras", "tensorflow")])
def test_a_missing_framework_is_one_line(monkeypatch, tmp_path, helper, module):
    import onnxaff.graph.export as export

    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    args = {"from_torch": (object(), None, tmp_path / "m.onnx"), "from_sklearn": (object(), 4, tmp_path / "m.onnx"),
            "from_keras": (object(), tmp_path / "m.onnx")}[helper]
    with pytest.raises(OnnxaffError, match=f"this export needs {module}: pip install ") as err:
        getattr(export, helper)(*args)
    assert "\n" not in str(err.value)


# --- PyTorch -----------------------------------------------------------------------------------------

def _torch_net():
    torch = need("torch")
    from torch import nn

    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                      nn.Conv2d(8, 8, 3, padding=1), nn.GELU(), nn.Dropout(0.5))
            self.head = nn.Sequential(nn.Linear(8, 16), nn.SiLU(), nn.Linear(16, 5), nn.Softmax(dim=1))

        def forward(self, x):
            return self.head(self.conv(x).mean((2, 3)))

    net = Net()
    net.conv[1].running_mean.uniform_(-0.5, 0.5)  # non-trivial statistics: eval mode must use them
    net.conv[1].running_var.uniform_(0.5, 2.0)
    return torch, net.train()  # left in training mode: the helper must switch it


def test_from_torch_round_trips_with_a_dynamic_batch_in_eval_mode(tmp_path):
    torch, net = _torch_net()
    from onnxaff.graph.export import from_torch

    result = from_torch(net, torch.randn(1, 3, 12, 12), tmp_path / "net.onnx")
    assert result.ok and result.declared == ["relu", "gelu", "silu", "softmax"]
    assert result.found == result.declared and result.extra == []
    x = np.random.default_rng(0).standard_normal((7, 3, 12, 12)).astype(np.float32)  # batch 7, exported at 1
    assert net.training  # given back as it was given: a notebook trains it on
    with torch.no_grad():
        want = net.eval()(torch.from_numpy(x)).numpy()  # the exported network is the eval-mode one
    got = run(onnx.load(tmp_path / "net.onnx"), {"input": x})["output"]
    np.testing.assert_allclose(got, want, **TOL)


def test_from_torch_functional_activations_are_extra_not_missing(tmp_path):
    torch = need("torch")
    from torch import nn

    from onnxaff.graph.export import from_torch

    class Functional(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.act = nn.Linear(4, 6), nn.Linear(6, 3), nn.Tanh()

        def forward(self, x):
            return self.b(self.act(torch.relu(self.a(x))))

    result = from_torch(Functional(), torch.randn(2, 4), tmp_path / "f.onnx")
    assert result.declared == ["tanh"] and result.found == ["relu", "tanh"] and result.extra == ["relu"]


def test_from_torch_exporter_failure_is_one_line(tmp_path):
    torch = need("torch")
    from torch import nn

    from onnxaff.graph.export import from_torch

    class Unexportable(nn.Module):
        def forward(self, x):
            return torch.linalg.eig(x)[0].real  # no ONNX operator for an eigendecomposition

    with pytest.raises(OnnxaffError, match="torch.onnx.export failed: .*aten::linalg_eig") as err:
        from_torch(Unexportable(), torch.randn(3, 3), tmp_path / "u.onnx")
    assert "\n" not in str(err.value)


# --- scikit-learn ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("activation", "classes", "kinds"), [
    ("relu", 4, ["relu", "relu", "softmax"]), ("tanh", 2, ["tanh", "tanh", "sigmoid"]),
    ("logistic", 3, ["sigmoid", "sigmoid", "softmax"])])
def test_from_sklearn_mlp_round_trips(tmp_path, activation, classes, kinds):
    pytest.importorskip("skl2onnx")
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    from onnxaff.graph.export import from_sklearn

    rng = np.random.default_rng(0)
    x = rng.standard_normal((200, 10)).astype(np.float32)
    y = (x[:, 0] * 2 + x[:, 1] > 0).astype(int) + (classes > 2) * (x[:, 2] > 0.5) + (classes > 3) * (x[:, 3] > 1)
    clf = MLPClassifier((12, 8), activation=activation, max_iter=60, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(x, y)
    result = from_sklearn(clf, 10, tmp_path / "mlp.onnx")
    assert result.declared == kinds and result.ok and not result.extra
    outputs = run(onnx.load(tmp_path / "mlp.onnx"), {"input": x})
    np.testing.assert_array_equal(outputs["label"], clf.predict(x))
    np.testing.assert_allclose(outputs["probabilities"], clf.predict_proba(x), **TOL)


def test_from_sklearn_conversion_failure_is_one_line(tmp_path):
    pytest.importorskip("skl2onnx")
    from onnxaff.graph.export import from_sklearn

    class NotAnEstimator:
        pass

    with pytest.raises(OnnxaffError, match="skl2onnx could not convert NotAnEstimator") as err:
        from_sklearn(NotAnEstimator(), 3, tmp_path / "x.onnx")
    assert "\n" not in str(err.value)


# --- Keras -------------------------------------------------------------------------------------------

def test_from_keras_round_trips(tmp_path):
    tf = pytest.importorskip("tensorflow")
    pytest.importorskip("tf2onnx")
    from onnxaff.graph.export import from_keras

    tf.keras.utils.set_random_seed(0)
    layers = tf.keras.layers
    model = tf.keras.Sequential([
        tf.keras.Input((10, 10, 2)), layers.Conv2D(4, 3, padding="same", activation="relu"),
        layers.Dropout(0.5), layers.GlobalAveragePooling2D(), layers.Dense(8, activation="tanh"),
        layers.Dense(3, activation="softmax")])
    result = from_keras(model, tmp_path / "k.onnx")
    assert result.declared == ["relu", "tanh", "softmax"] and result.ok
    x = np.random.default_rng(0).standard_normal((5, 10, 10, 2)).astype(np.float32)
    proto = onnx.load(tmp_path / "k.onnx")
    got = next(iter(run(proto, {proto.graph.input[0].name: x}).values()))
    np.testing.assert_allclose(got, model(x, training=False).numpy(), **TOL)


@pytest.mark.parametrize(("n_features", "fragment"), [
    (-3, "n_features must be a whole number from 1 to 2147483647, got -3"),
    (0, "n_features must be a whole number from 1 to 2147483647, got 0"),
    (10**12, "got 1000000000000"), (True, "got True"), (2.5, "got 2.5"),
    (7, "n_features is 7 but the estimator was fitted on 10 features (n_features_in_)")])
def test_from_sklearn_checks_n_features(tmp_path, n_features, fragment):
    """Negative, zero and huge feature counts, and one the fitted estimator contradicts, went to skl2onnx."""
    from onnxaff.graph.export import from_sklearn

    class Fitted:
        n_features_in_ = 10

    with pytest.raises(OnnxaffError, match=re.escape(fragment)):
        from_sklearn(Fitted(), n_features, tmp_path / "m.onnx")
    assert not (tmp_path / "m.onnx").exists()
