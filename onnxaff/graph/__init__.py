"""Graph layer: loading, site discovery and rewriting. Pure onnx, no runtime."""

from onnxaff.graph.load import LoadedModel, load_model
from onnxaff.graph.rewrite import REDUCTIONS, augment_model
from onnxaff.graph.sites import Site, discover_sites

__all__ = ["LoadedModel", "load_model", "Site", "discover_sites", "augment_model", "REDUCTIONS"]
