"""onnxaff: how non-linear is each non-linearity of an ONNX model, measured by affine optimal transport."""

__version__ = "0.1.0"
