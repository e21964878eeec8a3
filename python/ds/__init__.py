"""ds: an ahead-of-time compiler for distributed training (Python side).

`ds.export(model, inputs, path)` writes a PyTorch model's training step as
ONNX with the facts ONNX loses (trainable set, buffers, padding rows).
`ds.initialize(model=..., config=...)` is DeepSpeed's entry point: it
exports, compiles in-process and returns an engine that runs the compiled
step (`import ds as deepspeed`; docs/python.md). `ds.estimate(model,
example_inputs, config, cluster)` returns the planner's ranked layouts."""

from .engine import DeepSpeedEngine, add_config_arguments, initialize
from .estimate import Candidate, Estimate, estimate
from .export import export, metadata

__all__ = ["Candidate", "DeepSpeedEngine", "Estimate", "add_config_arguments",
           "estimate", "export", "initialize", "metadata"]
