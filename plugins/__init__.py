"""Built-in metrics, registered through the onnxaff.metrics entry points like any third-party plugin."""
