"""Runtime: onnxruntime sessions and providers (`sessions`), network-level Jacobian sums (`network`)."""
