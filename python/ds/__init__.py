"""ds: an ahead-of-time compiler for distributed training (Python side).

`ds.export(model, inputs, path)` writes a PyTorch model's training step as
ONNX with the facts ONNX loses (trainable set, buffers, padding rows)."""

from .export import export, metadata

__all__ = ["export", "metadata"]
