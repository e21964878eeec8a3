"""ds: an ahead-of-time compiler for distributed training (Python side).

`ds.export(model, inputs, path)` writes a PyTorch model's training step as
ONNX with the facts ONNX loses (trainable set, buffers, padding rows).
`ds.initialize(model=..., config=...)` is DeepSpeed's entry point: it
exports, compiles in-process and returns an engine that runs the compiled
step (`import ds as deepspeed`; docs/python.md)."""

from .engine import DeepSpeedEngine, add_config_arguments, initialize
from .export import export, metadata

__all__ = ["DeepSpeedEngine", "add_config_arguments", "export", "initialize",
           "metadata"]
