"""onnxaff: how non-linear is each non-linearity of an ONNX model, measured by affine optimal transport.

The Python API (``help(onnxaff.analyze)`` and the others have every parameter and an example)::

    import onnxaff
    sig = onnxaff.analyze("resnet18.onnx", "photos/", preprocess=onnxaff.ImagePreprocess.imagenet())
    onnxaff.report(sig, "resnet18.html")

- ``analyze(model, data, ...)``: a model's non-linearity signature (a ``Signature``); the model may be a
  ``torch.nn.Module``, the data an image folder, arrays or a ``DataLoader``.
- ``sites(model)``: the non-linearities ``analyze`` scores.
- ``compare(signatures)`` (a ``Comparison``), ``correlate(signatures, accuracy)`` (a ``Correlation``),
  ``report(result, path)``: DTW distances and clusters, correlation with accuracy, HTML pages.
- ``study(models, data, out)`` (a ``Study``): all of it over many models, resumable.
- ``read_signature(path)``, ``AnalysisConfig`` (every option), ``ImagePreprocess`` (how images are read).
- ``from_torch``, ``from_keras``, ``from_sklearn``: a framework's model exported to ONNX, its activations checked.

Importing onnxaff is cheap: each name is imported when first used.
"""

import importlib
import importlib.util

from onnxaff import defaults

__version__ = "0.1.0"

_HOME = {
    "analyze": "onnxaff.api", "sites": "onnxaff.api", "study": "onnxaff.api", "compare": "onnxaff.api",
    "correlate": "onnxaff.api", "report": "onnxaff.api", "Sites": "onnxaff.api",
    "Correlation": "onnxaff.results.comparison", "Comparison": "onnxaff.results.comparison",
    "AnalysisConfig": "onnxaff.analysis.config", "ImagePreprocess": "onnxaff.data.image_preprocess",
    "Signature": "onnxaff.format.signature", "read_signature": "onnxaff.format.signature",
    "Study": "onnxaff.studies.result", "OnnxaffError": "onnxaff.errors", "ConfigError": "onnxaff.errors",
    "from_torch": "onnxaff.graph.export", "from_keras": "onnxaff.graph.export", "from_sklearn": "onnxaff.graph.export",
}
__all__ = sorted(_HOME, key=lambda n: (n[0].islower(), n))  # the classes, then the functions

def __getattr__(name: str):
    if name not in _HOME:
        # a submodule is an attribute too, imported on first use as the names are (`onnxaff.graph.discover_sites`):
        # Python sets it only once something has imported it
        submodule = f"{__name__}.{name}"
        if name.isidentifier() and not name.startswith("_") and importlib.util.find_spec(submodule) is not None:
            return importlib.import_module(submodule)
        raise AttributeError(f"module 'onnxaff' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOME[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def discover_sites(model, layout: str = defaults.LAYOUT, infer_shapes: bool = True):
    """Deprecated: ``onnxaff.sites(model, layout=...)`` lists the sites ``analyze`` scores, which this now returns
    (`infer_shapes` is ignored); ``onnxaff.graph.discover_sites`` is the graph-level search."""
    import warnings

    warnings.warn("onnxaff.discover_sites is deprecated: use onnxaff.sites, the sites analyze scores",
                  DeprecationWarning, stacklevel=2)
    return __getattr__("sites")(model, layout=layout)
