"""onnxaff: how non-linear is each non-linearity of an ONNX model, measured by affine optimal transport."""

__version__ = "0.1.0"


def analyze(*args, **kwargs):
    """Analyse a model on data and return its Signature: `config=AnalysisConfig(...)` and/or its fields as
    keywords (see onnxaff.analysis.analyze). `data` may be a list of str with `tokenizer=` (text models)."""
    from onnxaff.analysis import analyze as _analyze

    return _analyze(*args, **kwargs)


def discover_sites(*args, **kwargs):
    """The sites of a model proto, in forward order (see onnxaff.graph.sites.discover_sites)."""
    from onnxaff.graph.sites import discover_sites as _discover

    return _discover(*args, **kwargs)


def read_signature(path):
    from onnxaff.signature import read_signature as _read

    return _read(path)
